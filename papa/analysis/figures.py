"""The book's score figures (:func:`fig_score_vs_dynamic_heads`, the paper's Figure 2, and :func:`fig_convergence`):
Altair charts that fit the text column, each a :class:`~papa.analysis.figure_kit.Figure` whose caption is written
from the same encodings and data."""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from papa.analysis.figure_kit import Figure, clean, facet, finish, legend, panels, seeds_words, words
from papa.analysis.results import main_mode, spread_shared

K0_LABEL, KALL_LABEL = "k = 0 (all heads attend)", "k = all (all heads constant)"
#: The floors of the score figures: legend label, dash pattern, and the word the caption uses.
FLOOR_STYLES = {
    "majority": ("majority class", [8, 4], "dashed"),
    "attention_free": ("attention-free probe", [2, 3], "dotted"),
}


def floor_dash(drawn: list[str]) -> alt.StrokeDash:
    """The dash of each drawn floor (keys of :data:`FLOOR_STYLES`), with its legend."""
    domain, dashes = [FLOOR_STYLES[f][0] for f in drawn], [FLOOR_STYLES[f][1] for f in drawn]
    return alt.StrokeDash("floor:N", scale=alt.Scale(domain=domain, range=dashes), legend=legend("floor"))


def tooltips(columns: str, *extra) -> list:
    """``"mean std"`` → four-decimal tooltips of those columns, then ``extra``."""
    return [alt.Tooltip(f"{c}:Q", format=".4f") for c in columns.split()] + list(extra)


def fig_score_vs_dynamic_heads(summary: pd.DataFrame, floors: pd.DataFrame) -> Figure:
    """Figure 2 analogue: mean score (band: min–max over seeds) vs input-dependent heads, one panel per model × task,
    colour = ranking, grey rules = the floors (:data:`FLOOR_STYLES`); ``summary`` and ``floors`` of a basis."""
    rows = summary[summary["mode"] == main_mode(summary)]
    rows = rows[rows["probe_input"] == "all"]
    chosen_mode = rows["mode"].iloc[0] if len(rows) else None
    parts = [spread_shared(group) for _, group in rows.groupby(["model", "task"], sort=True)]
    scores = pd.concat(parts) if parts else rows
    scores = scores.assign(layer="score", dynamic=scores["total_heads"] - scores["k"])
    totals = sorted(int(t) for t in scores["total_heads"].unique())
    totals_by_model = scores.groupby("model")["total_heads"].first()
    scores = scores["layer model task ranking k dynamic metric mean std min max n_seeds".split()]
    metric_of = scores.groupby(["model", "task"])["metric"].first()
    melt = dict(id_vars=["model", "task"], value_vars=list(FLOOR_STYLES), var_name="floor", value_name="value")
    lines = floors[floors["mode"] == chosen_mode].melt(**melt).dropna(subset=["value"])
    drawn = [name for name in FLOOR_STYLES if name in set(lines["floor"])]
    metrics = [metric_of.get((m, t)) for m, t in zip(lines["model"], lines["task"])]
    lines = lines.assign(layer="floor", floor=lines["floor"].map(lambda f: FLOOR_STYLES[f][0]), metric=metrics)
    data, unit, per = panels(clean(pd.concat([scores, lines], ignore_index=True)))
    of = words([f"{int(t)} in {m}" for m, t in totals_by_model.items()])
    of = f"of {totals[0]}" if len(totals) == 1 else f"of {of}"

    pick = alt.selection_point(name="pick_ranking", fields=["ranking"], bind="legend")
    x = alt.X("dynamic:Q", title=f"input-dependent heads ({of})" if len(totals) == 1 else "input-dependent heads")
    is_score = alt.datum.layer == "score"
    color = alt.Color("ranking:N", legend=legend("ranking (click to highlight)"))
    y_title = f"score ({unit})"
    encoding = dict(x=x, color=color)
    band = alt.Chart().mark_area(opacity=0.2).encode(y=alt.Y("min:Q", scale=alt.Scale(zero=False), title=y_title))
    band = band.encode(y2="max:Q", **encoding)
    band = band.encode(opacity=alt.condition(pick, alt.value(0.25), alt.value(0.03))).transform_filter(is_score)
    tooltip = ["panel:N", "ranking:N", "k:Q", "dynamic:Q", "metric:N", *tooltips("mean std min max", "n_seeds:Q")]
    line = alt.Chart().mark_line(point=True).encode(y=alt.Y("mean:Q", scale=alt.Scale(zero=False), title=y_title))
    line = line.encode(tooltip=tooltip, **encoding)
    line = line.encode(opacity=alt.condition(pick, alt.value(1.0), alt.value(0.15)))
    line = line.add_params(pick).transform_filter(is_score)
    tooltip = ["panel:N", "floor:N", *tooltips("value")]
    rule = alt.Chart().mark_rule(color="gray").encode(y="value:Q", strokeDash=floor_dash(drawn), tooltip=tooltip)
    rule = rule.transform_filter(alt.datum.layer == "floor")
    chart = facet(alt.layer(band, line, rule, data=data), data, x_independent=len(totals) > 1)

    rankings = sorted(scores["ranking"].unique())
    floor_words = "; ".join(f"the {FLOOR_STYLES[f][0]} floor ({FLOOR_STYLES[f][2]})" for f in drawn) or "no floor ran"
    caption = (
        f"Mean {unit} of the probe over {seeds_words(scores['n_seeds'])} (band: min–max) against the number of "
        f"input-dependent heads ({of}), one panel per {per}, one colour per ranking ({words(rankings)}). The rightmost "
        "point of each line is the unpatched encoder (k = 0); the leftmost has every head constant. Grey rules: "
        f"{floor_words}. Click a ranking in the legend to highlight it."
    )
    return finish(chart, caption, "fig-score-vs-heads")


def fig_convergence(epochs: pd.DataFrame, curve: str = "score") -> Figure:
    """Score per epoch (mean, band min–max over seeds) for k = 0 and k = all, one panel per task, from ``epochs``
    (:func:`papa.analysis.results.epoch_table`): the dev ``score`` or the ``heldout`` curve early stopping reads."""
    rows = epochs[epochs["mode"] == main_mode(epochs)]
    rows = rows[(rows["probe_input"] == "all") & ((rows["k"] == 0) | (rows["k"] == rows["total_heads"]))]
    rows = rows.assign(condition=np.where(rows["k"] == 0, K0_LABEL, KALL_LABEL))
    rows = rows.dropna(subset=[curve])
    groups = rows.groupby(["model", "task", "metric", "condition", "epoch"], as_index=False, dropna=False)
    stats = dict(mean=(curve, "mean"), min=(curve, "min"), max=(curve, "max"), loss=("train_loss", "mean"))
    data, unit, per = panels(clean(groups.agg(**stats, n_seeds=("seed", "nunique"))))
    color = alt.Color("condition:N", legend=legend(None))
    x = alt.X("epoch:Q", axis=alt.Axis(tickMinStep=1, format="d"), title="epoch")
    what = "dev score" if curve == "score" else "held-out training score"
    y_title = f"{what} ({unit})"
    y = alt.Y("min:Q", title=y_title, axis=alt.Axis(format=".2f"))
    band = alt.Chart().mark_area(opacity=0.2).encode(x=x, y=y, y2="max:Q", color=color)
    tooltip = ["panel:N", "condition:N", "epoch:Q", *tooltips("mean min max")]
    tooltip += [alt.Tooltip("loss:Q", format=".4f", title="train loss"), "n_seeds:Q"]
    y = alt.Y("mean:Q", scale=alt.Scale(zero=False), title=y_title, axis=alt.Axis(format=".2f"))
    line = alt.Chart().mark_line(point=True).encode(x=x, y=y, color=color, tooltip=tooltip)
    chart = facet(alt.layer(band, line, data=data), data)
    source = (
        ""
        if curve == "score"
        else " Held-out training examples are examples of the training split the probe never trained on: the curve"
        " early stopping reads (the dev split is scored once, by the reported probe)."
    )
    caption = (
        f"{what.capitalize()} ({unit}) after every epoch for the runs with no head constant "
        f"({K0_LABEL.split(' (')[0]}) and with every head constant ({KALL_LABEL.split(' (')[0]}): mean over "
        f"{seeds_words(data['n_seeds'])}, band min–max; one panel per {per}.{source}"
    )
    return finish(chart, caption, "fig-convergence")
