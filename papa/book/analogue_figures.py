"""The paper's figures (a)–(c) redrawn from our runs (the data of :mod:`papa.analysis.analogues` as
:class:`~papa.analysis.figure_kit.Figure` objects whose captions are written from the same data), and a placeholder
that says why a figure is empty."""

from __future__ import annotations

import math
import textwrap

import altair as alt
import pandas as pd

from papa.analysis import analogues as P
from papa.analysis import figure_kit as FK
from papa.analysis.claims import PAPER_DROP_ALL
from papa.analysis.figure_kit import Figure, clean, finish, legend, panel_layout, words
from papa.analysis.figures import FLOOR_STYLES, floor_dash, tooltips
from papa.book.words import percent
from papa.core.errors import PapaError
from papa.core.tasks import metric_name, task_name


def _need(frame: pd.DataFrame, what: str) -> None:
    if frame.empty:
        raise PapaError(f"There is nothing to draw for {what}", "Run the k = 0 and constant-head probes first.")


def fig_paper_scores(points: pd.DataFrame, ranking: str = "gates") -> Figure:
    """(a) ``points`` from :func:`papa.analysis.analogues.score_vs_dynamic_heads`, drawn for one ``ranking``: one panel
    per task, x = input-dependent heads, one colour per model; vertical bars are the 95 % interval of the paired
    difference to k = 0, placed on the k = 0 score; grey rules are each model's floors (dash by floor)."""
    rows = points[points["ranking"] == ranking]
    _need(rows, f"the {ranking} ranking")
    rows = rows.assign(panel=rows["task"].map({task: task_name(task) for task in set(rows["task"])}))
    metrics = rows.groupby("panel")["metric"].first()
    several = metrics.nunique() > 1
    titles = {p: f"{p} ({metric_name(metric)})" if several else p for p, metric in metrics.items()}  # once a panel
    rows = rows.assign(panel=rows["panel"].map(titles))
    melt = dict(id_vars=["model", "panel"], value_vars=list(FLOOR_STYLES), var_name="floor", value_name="value")
    floors = rows.drop_duplicates(["model", "task"]).melt(**melt).dropna(subset=["value"])
    drawn = [f for f in FLOOR_STYLES if f in set(floors["floor"])]
    floors = floors.assign(floor=floors["floor"].map(lambda f: FLOOR_STYLES[f][0]), layer="floor")
    data = clean(pd.concat([rows.assign(layer="score"), floors], ignore_index=True))
    columns, width = panel_layout(data["panel"].nunique())
    color = alt.Color("model:N", legend=legend("model"))
    x = alt.X("dynamic_heads:Q", title="input-dependent heads (of each model's total)")
    y_title = "score (each panel's metric)" if several else f"score ({metric_name(metrics.iloc[0])})"
    tooltip = ["panel:N", "model:N", "k:Q", "dynamic_heads:Q", *tooltips("score low high"), "real:N"]
    y = alt.Y("score:Q", scale=alt.Scale(zero=False), title=y_title)
    line = alt.Chart().mark_line(point=True).encode(x=x, y=y, color=color, tooltip=tooltip)
    line = line.transform_filter(alt.datum.layer == "score")
    bars = alt.Chart().mark_rule().encode(x=x, y="low:Q", y2="high:Q", color=color)
    bars = bars.transform_filter((alt.datum.layer == "score") & alt.expr.isValid(alt.datum.low))
    tooltip = ["panel:N", "model:N", "floor:N", *tooltips("value")]
    rule = alt.Chart().mark_rule(opacity=0.6).encode(y="value:Q", color=color, strokeDash=floor_dash(drawn))
    rule = rule.encode(tooltip=tooltip).transform_filter(alt.datum.layer == "floor")
    chart = alt.layer(line, bars, rule, data=data).properties(width=width, height=FK.PANEL_HEIGHT)
    facet = alt.Facet("panel:N", title=None, header=alt.Header(labelLimit=0))
    chart = chart.facet(facet=facet, columns=columns).resolve_scale(y="independent")
    models, tasks = sorted(rows["model"].unique()), sorted(set(rows["panel"]))
    totals = rows.groupby("model")["total_heads"].first()
    floor_words = "; ".join(f"{FLOOR_STYLES[f][0]} ({FLOOR_STYLES[f][2]})" for f in drawn) or "no floor ran"
    caption = (
        "The analogue of the paper's Figure 2: the probe's mean score against the number of input-dependent heads, "
        f"one panel per task ({words(tasks)}), one colour per model "
        f"({words([f'{m}, {int(totals[m])} heads' for m in models])}), heads made constant in the {ranking} order. "
        "Vertical bars: the 95% bootstrap interval of the paired difference to k = 0, placed on the k = 0 score "
        "(a bar that does not reach the line's right end marks a real change). Rules in each model's colour: its "
        f"floors, {floor_words}."
    )
    return finish(chart, caption, "fig-paper-scores")


def fig_relative_score(frame: pd.DataFrame) -> Figure:
    """(b) ``frame`` from :func:`papa.analysis.analogues.relative_score_vs_constant_fraction`: x = fraction of heads
    constant, y = score relative to k = 0 averaged over the model's informative tasks, one line per model."""
    _need(frame, "the relative score")
    x = alt.X("fraction:Q", axis=alt.Axis(format="%"), title="heads constant (% of the model's heads)")
    y_axis = dict(scale=alt.Scale(zero=False), axis=alt.Axis(format="%"), title="score relative to k = 0 (%)")
    share = [alt.Tooltip("fraction:Q", format=".1%"), alt.Tooltip("relative_score:Q", format=".2%")]
    tooltip = ["model:N", "k:Q", *share, "n_tasks:Q", "tasks:N"]
    color = alt.Color("model:N", legend=legend("model"))
    chart = alt.Chart(clean(frame)).mark_line(point=True)
    chart = chart.encode(x=x, y=alt.Y("relative_score:Q", **y_axis), color=color, tooltip=tooltip)
    chart = chart.properties(width=FK.TEXT_WIDTH - 2 * FK.AXIS_PX, height=240)
    per_model = frame.groupby("model")["n_tasks"].max()
    caption = (
        "Per model, the score relative to its k = 0 score (100%), averaged over its informative tasks "
        f"({words([f'{m}: {int(n)}' for m, n in per_model.items()])}), against the share of heads made constant in "
        f"the {frame['ranking'].iloc[0]} order. The paper reports about {percent(1 - PAPER_DROP_ALL, 0)} on average"
        " with every head constant."
    )
    return finish(chart, caption, "fig-relative-score")


def fig_better_models(points: pd.DataFrame, verdict: dict, verdict_words: str) -> Figure:
    """(c) Claim 3's ``(points, verdict)`` (:class:`papa.analysis.claims.Evidence`'s ``points`` and ``better`` with
    the common ``tasks``): one point per model,
    x = its pooled average relative drop with all heads constant (bar: its 95 % interval), y = its average k = 0
    score; the caption gives the correlation, its n and ``verdict_words`` (the claim-3 verdict in words)."""
    _need(points, "claim 3")
    data = clean(points)
    scale = alt.Scale(zero=False, padding=30)
    x = alt.X("drop:Q", scale=scale, axis=alt.Axis(format="%"), title="average relative drop, all heads constant (%)")
    base = alt.Chart(data).encode(x=x, y=alt.Y("score:Q", scale=scale, title="average score at k = 0"))
    drops = [alt.Tooltip(f"{c}:Q", format=".2%") for c in ("drop", "low", "high")]
    tooltip = ["model:N", *drops, *tooltips("score", "n_tasks:Q")]
    color = alt.Color("model:N", legend=legend("model"))
    dots = base.mark_point(size=100, filled=True).encode(color=color, tooltip=tooltip)
    layers = [dots, base.mark_text(dy=-12).encode(text="model:N")]
    if {"low", "high"} <= set(data.columns):
        layers.insert(0, base.mark_rule().encode(x="low:Q", x2="high:Q", color=alt.Color("model:N", legend=None)))
    chart = alt.layer(*layers).properties(width=FK.TEXT_WIDTH - 2 * FK.AXIS_PX, height=240)
    n = int(verdict.get("n", len(points)))
    rho = verdict.get("spearman", math.nan)
    stat = "" if rho is None or (isinstance(rho, float) and math.isnan(rho)) else f" Spearman ρ = {rho:+.2f},"
    if stat:
        stat += f" Pearson r = {verdict['pearson']:+.2f}, one-sided exact p = {verdict['p_value']:.3f}."
    tasks = verdict.get("tasks") or []
    over = "the informative tasks every model has" + (f" ({words([task_name(t) for t in tasks])})" if tasks else "")
    caption = (
        f'The paper\'s claim 3, "better models lose more": one point per model (n = {n}), its average k = 0 score '
        "against its average relative drop with every head constant (bar: the pooled 95% bootstrap interval of that "
        f"average), both over {over}, so that no model's average moves by which tasks it has. The claim predicts "
        f"points rising to the right.{stat} {verdict_words}"
    )
    return finish(chart, caption, "fig-better-models")


def placeholder_figure(label: str, why: str) -> Figure:
    """A figure that says in words why there is nothing to draw (its caption says the same)."""
    lines = textwrap.wrap(why, 72)  # one long line would draw past the text column
    chart = (
        alt.Chart(pd.DataFrame({"text": ["\n".join(lines)]}))
        .mark_text(fontSize=13, lineBreak="\n")
        .encode(text="text:N")
        .properties(width=FK.TEXT_WIDTH - 2 * FK.AXIS_PX, height=18 * len(lines) + 10)
    )
    return finish(chart, why, label)


def analogue_figures(
    summary: pd.DataFrame,
    floors: pd.DataFrame,
    cells: pd.DataFrame,
    ranking: str,
    better: tuple[pd.DataFrame, dict, str],
) -> list[Figure]:
    """The paper's analogues (a)–(c) of a basis's seed means, floors and every cell (:func:`fig_paper_scores`,
    :func:`fig_relative_score`, :func:`fig_better_models` of claim 3's ``(points, statistics, verdict caption)``),
    each a :func:`placeholder_figure` when its data is empty."""
    points = P.score_vs_dynamic_heads(summary, floors, cells) if len(summary) else pd.DataFrame(columns=["ranking"])
    relative = P.relative_score_vs_constant_fraction(summary, floors, cells, ranking) if len(summary) else []
    points_c, statistics, caption = better
    figures = (
        ("fig-paper-scores", len(points[points["ranking"] == ranking]), lambda: fig_paper_scores(points, ranking)),
        ("fig-relative-score", len(relative), lambda: fig_relative_score(relative)),
        ("fig-better-models", len(points_c), lambda: fig_better_models(points_c, statistics, caption)),
    )
    why = {
        "fig-paper-scores": f"No run of the {ranking} ranking to draw.",
        "fig-relative-score": "No informative task: no relative score to average.",
        "fig-better-models": "No informative task with k = 0 and all-heads runs: no point to draw.",
    }
    return [draw() if ready else placeholder_figure(label, why[label]) for label, ready, draw in figures]
