"""The paper's figures, redrawn from our runs (issue 14): the data of :mod:`papa.analysis.paper` as
:class:`~papa.analysis.figure_kit.Figure` objects whose captions are written from the same data.

* :func:`fig_paper_scores` — (a) the Figure 2 analogue: per task, the score against the number of
  input-dependent heads, one line per model, with the 95 % interval of each paired difference to k = 0 and the floors;
* :func:`fig_relative_score` — (b) per model, the score relative to k = 0 averaged over the informative tasks,
  against the fraction of constant heads;
* :func:`fig_better_models` — (c) one point per model: average relative drop with all heads constant against the
  average k = 0 score, with the claim-3 verdict and its n in the caption.
"""

from __future__ import annotations

import math

import altair as alt
import pandas as pd

from papa.analysis.figure_kit import AXIS_PX, PANEL_HEIGHT, TEXT_WIDTH, Figure, clean, finish, legend, metric_name, panel_layout, task_name, words
from papa.core.errors import PapaError

FLOOR_DASH = {"majority": ("majority class", [8, 4], "dashed"), "attention_free": ("attention-free probe", [2, 3], "dotted")}


def _need(frame: pd.DataFrame, what: str) -> None:
    if frame.empty:
        raise PapaError(f"There is nothing to draw for {what}", "Run the k = 0 and constant-head probes first.")


def fig_paper_scores(points: pd.DataFrame, ranking: str = "gates", label: str = "fig-paper-scores") -> Figure:
    """(a) ``points`` from :func:`papa.analysis.paper.score_vs_dynamic_heads`, drawn for one ``ranking``: one panel
    per task, x = input-dependent heads, one colour per model; vertical bars are the 95 % interval of the paired
    difference to k = 0, placed on the k = 0 score; grey rules are each model's floors (dash by floor)."""
    rows = points[points["ranking"] == ranking]
    _need(rows, f"the {ranking} ranking")
    rows = rows.assign(panel=rows["task"].map(task_name))
    metrics = rows.groupby("panel")["metric"].first()
    rows = rows.assign(panel=[f"{p} ({metric_name(metrics[p])})" if metrics.nunique() > 1 else p for p in rows["panel"]])
    floors = rows.drop_duplicates(["model", "task"]).melt(id_vars=["model", "panel"], value_vars=list(FLOOR_DASH), var_name="floor", value_name="value").dropna(subset=["value"])
    drawn = [f for f in FLOOR_DASH if f in set(floors["floor"])]
    floors = floors.assign(floor=floors["floor"].map(lambda f: FLOOR_DASH[f][0]), layer="floor")
    data = clean(pd.concat([rows.assign(layer="score"), floors], ignore_index=True))
    columns, width = panel_layout(data["panel"].nunique())
    color = alt.Color("model:N", legend=legend("model"))
    x = alt.X("dynamic_heads:Q", title="input-dependent heads (of each model's total)")
    y_title = f"score ({metric_name(metrics.iloc[0])})" if metrics.nunique() == 1 else "score (each panel's metric)"
    tooltip = [
        "panel:N",
        "model:N",
        "k:Q",
        "dynamic_heads:Q",
        alt.Tooltip("score:Q", format=".4f"),
        alt.Tooltip("low:Q", format=".4f"),
        alt.Tooltip("high:Q", format=".4f"),
        "real:N",
    ]
    line = (
        alt.Chart()
        .mark_line(point=True)
        .encode(x=x, y=alt.Y("score:Q", scale=alt.Scale(zero=False), title=y_title), color=color, tooltip=tooltip)
        .transform_filter(alt.datum.layer == "score")
    )
    bars = alt.Chart().mark_rule().encode(x=x, y="low:Q", y2="high:Q", color=color).transform_filter((alt.datum.layer == "score") & alt.expr.isValid(alt.datum.low))
    dash = alt.StrokeDash("floor:N", scale=alt.Scale(domain=[FLOOR_DASH[f][0] for f in drawn], range=[FLOOR_DASH[f][1] for f in drawn]), legend=legend("floor"))
    rule = alt.Chart().mark_rule(opacity=0.6).encode(y="value:Q", color=color, strokeDash=dash, tooltip=["panel:N", "model:N", "floor:N", alt.Tooltip("value:Q", format=".4f")])
    rule = rule.transform_filter(alt.datum.layer == "floor")
    chart = alt.layer(line, bars, rule, data=data).properties(width=width, height=PANEL_HEIGHT)
    chart = chart.facet(facet=alt.Facet("panel:N", title=None, header=alt.Header(labelLimit=0)), columns=columns).resolve_scale(y="independent")
    models, tasks = sorted(rows["model"].unique()), sorted(set(rows["panel"]))
    totals = rows.groupby("model")["total_heads"].first()
    floor_words = "; ".join(f"{FLOOR_DASH[f][0]} ({FLOOR_DASH[f][2]})" for f in drawn) or "no floor ran"
    caption = (
        f"The analogue of the paper's Figure 2: the probe's mean score against the number of input-dependent heads, one panel per task "
        f"({words(tasks)}), one colour per model ({words([f'{m}, {int(totals[m])} heads' for m in models])}), heads made constant in the "
        f"{ranking} order. Vertical bars: the 95% bootstrap interval of the paired difference to k = 0, placed on the k = 0 score "
        f"(a bar that does not reach the line's right end marks a real change). Rules in each model's colour: its floors, {floor_words}."
    )
    return finish(chart, caption, label)


def fig_relative_score(frame: pd.DataFrame, label: str = "fig-relative-score") -> Figure:
    """(b) ``frame`` from :func:`papa.analysis.paper.relative_score_vs_constant_fraction`: x = fraction of heads
    constant, y = score relative to k = 0 averaged over the model's informative tasks, one line per model."""
    _need(frame, "the relative score")
    data = clean(frame)
    chart = (
        alt.Chart(data)
        .mark_line(point=True)
        .encode(
            x=alt.X("fraction:Q", axis=alt.Axis(format="%"), title="heads constant (% of the model's heads)"),
            y=alt.Y("relative_score:Q", scale=alt.Scale(zero=False), axis=alt.Axis(format="%"), title="score relative to k = 0 (%)"),
            color=alt.Color("model:N", legend=legend("model")),
            tooltip=["model:N", "k:Q", alt.Tooltip("fraction:Q", format=".1%"), alt.Tooltip("relative_score:Q", format=".2%"), "n_tasks:Q", "tasks:N"],
        )
        .properties(width=TEXT_WIDTH - 2 * AXIS_PX, height=240)
    )
    per_model = frame.groupby("model")["n_tasks"].max()
    caption = (
        f"Per model, the score relative to its k = 0 score (100%), averaged over its informative tasks "
        f"({words([f'{m}: {int(n)}' for m, n in per_model.items()])}), against the share of heads made constant in the "
        f"{frame['ranking'].iloc[0]} order. The paper reports about 92% on average with every head constant."
    )
    return finish(chart, caption, label)


def fig_better_models(points: pd.DataFrame, verdict: dict, label: str = "fig-better-models") -> Figure:
    """(c) ``(points, verdict)`` from :func:`papa.analysis.paper.better_models_lose_more`: one point per model,
    x = its pooled average relative drop with all heads constant (horizontal bar: the pooled 95 % interval,
    ``low``/``high``), y = its average k = 0 score, both over the informative tasks every model has
    (``verdict["tasks"]``); the caption gives the correlation, its n and the claim-3 verdict
    (:func:`papa.analysis.verdicts.claim3_verdict`)."""
    from papa.analysis.verdicts import claim3_verdict

    _need(points, "claim 3")
    data = clean(points)
    x = alt.X("drop:Q", scale=alt.Scale(zero=False, padding=30), axis=alt.Axis(format="%"), title="average relative drop, all heads constant (%)")
    base = alt.Chart(data).encode(x=x, y=alt.Y("score:Q", scale=alt.Scale(zero=False, padding=30), title="average score at k = 0"))
    tooltip = ["model:N"] + [alt.Tooltip(f"{c}:Q", format=".2%") for c in ("drop", "low", "high")] + [alt.Tooltip("score:Q", format=".4f"), "n_tasks:Q"]
    dots = base.mark_point(size=100, filled=True).encode(color=alt.Color("model:N", legend=legend("model")), tooltip=tooltip)
    layers = [dots, base.mark_text(dy=-12).encode(text="model:N")]
    if {"low", "high"} <= set(data.columns):
        layers.insert(0, base.mark_rule().encode(x="low:Q", x2="high:Q", color=alt.Color("model:N", legend=None)))
    chart = alt.layer(*layers).properties(width=TEXT_WIDTH - 2 * AXIS_PX, height=240)
    n = int(verdict.get("n", len(points)))
    rho = verdict.get("spearman", math.nan)
    stat = (
        ""
        if rho is None or (isinstance(rho, float) and math.isnan(rho))
        else f" Spearman ρ = {rho:+.2f}, Pearson r = {verdict['pearson']:+.2f}, one-sided exact p = {verdict['p_value']:.3f}."
    )
    tasks = verdict.get("tasks") or []
    over = f"the informative tasks every model has ({words([task_name(t) for t in tasks])})" if tasks else "the informative tasks every model has"
    said, reason = claim3_verdict(verdict)
    caption = (
        f'The paper\'s claim 3, "better models lose more": one point per model (n = {n}), its average k = 0 score against its average '
        f"relative drop with every head constant (bar: the pooled 95% bootstrap interval of that average), both over {over}, so that no model's "
        f"average moves by which tasks it has. The claim predicts points rising to the right.{stat} Verdict: {said}. {reason}"
    )
    return finish(chart, caption, label)


__all__ = ["fig_better_models", "fig_paper_scores", "fig_relative_score"]
