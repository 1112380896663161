"""The book's figures: Altair charts that fit the text column, each with its caption and label.

Every ``fig_*`` function returns a :class:`Figure`: the chart, a caption written from the same
encodings, labels and data (so the text cannot say "dashed" where the legend draws a solid line), and
the label the chapters cross-reference (``{numref}`fig-score-vs-heads```). A :class:`Figure` displays
as its chart and forwards every other attribute to it, so ``glue("fig-…", fig_…(…))`` and
``fig_…(…).to_dict()`` work as they did when these functions returned bare charts.
:func:`glue_figure` glues the chart under its label and the caption under ``<label>-caption``.

Every figure is at most :data:`TEXT_WIDTH` pixels wide (facets wrap; legends sit below the plot),
so it fits the book's text column at any window width from 1,024 px up.

* :func:`fig_score_vs_dynamic_heads` — the paper's Figure 2: score vs number of input-dependent heads;
* :func:`fig_convergence` — dev score per epoch for k = 0 and k = all;
* :func:`fig_head_ranking`, :func:`fig_constants` — a ranking's heatmap and a few constant matrices (defined in
  :mod:`papa.analysis.run_figures`, which the run notebooks import directly);
* :func:`fig_paper_scores`, :func:`fig_relative_score`, :func:`fig_better_models` — the paper's analogues
  (a)–(c) with intervals, from :mod:`papa.analysis.paper` (in :mod:`papa.analysis.paper_figures`).

Shared pieces (Figure, width budget, panels, caption words, glue_figure) live in :mod:`papa.analysis.figure_kit`,
offline rendering in :mod:`papa.analysis.offline`: import them from there.
"""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from papa.analysis.figure_kit import (
    Figure,
    clean,
    facet,
    finish,
    legend,
    panels,
    seeds_words,
    words,
)
from papa.analysis.results import spread_shared
from papa.core.errors import PapaError

K0_LABEL, KALL_LABEL = "k = 0 (all heads attend)", "k = all (all heads constant)"
FLOOR_LABEL = "attention-free floor (embeddings only)"
#: The floors of :func:`fig_score_vs_dynamic_heads`: legend label, dash pattern, and the word the caption uses.
FLOOR_STYLES = {"majority": ("majority class", [8, 4], "dashed"), "attention_free": ("attention-free probe", [2, 3], "dotted")}


def _mode_rows(frame: pd.DataFrame, mode: str | None) -> pd.DataFrame:
    modes = sorted(frame["mode"].dropna().unique())
    if not modes:
        raise PapaError("There are no runs to plot", "Load some results first.")
    chosen = mode if mode is not None else ("faithful" if "faithful" in modes else modes[0])
    if chosen not in modes:
        raise PapaError(f"No runs in mode {chosen!r}", f"Modes present: {', '.join(modes)}.")
    return frame[frame["mode"] == chosen]


# --- figures -----------------------------------------------------------------------------------


def fig_score_vs_dynamic_heads(summary: pd.DataFrame, floors: pd.DataFrame, mode: str | None = None, label: str = "fig-score-vs-heads") -> Figure:
    """Figure 2 analogue: mean score (band: min–max over seeds) vs input-dependent heads, one panel per
    task (model × task with several models), colour = ranking (click the legend to highlight one);
    grey rules are the floors, each with its own dash (:data:`FLOOR_STYLES`).

    ``summary`` from :func:`papa.analysis.results.summarise`, ``floors`` from :func:`papa.analysis.results.floors_table`.
    The k = 0 baseline is drawn as the start of every ranking's line.
    """
    rows = _mode_rows(summary, mode)
    rows = rows[rows["probe_input"] == "all"]
    chosen_mode = rows["mode"].iloc[0] if len(rows) else mode
    parts = [spread_shared(group) for _, group in rows.groupby(["model", "task"], sort=True)]
    scores = pd.concat(parts) if parts else rows
    scores = scores.assign(layer="score", dynamic=scores["total_heads"] - scores["k"])
    totals = sorted(int(t) for t in scores["total_heads"].unique())
    totals_by_model = scores.groupby("model")["total_heads"].first()
    scores = scores[["layer", "model", "task", "ranking", "k", "dynamic", "metric", "mean", "std", "min", "max", "n_seeds"]]
    metric_of = scores.groupby(["model", "task"])["metric"].first()
    lines = floors[floors["mode"] == chosen_mode].melt(id_vars=["model", "task"], value_vars=list(FLOOR_STYLES), var_name="floor", value_name="value").dropna(subset=["value"])
    drawn = [name for name in FLOOR_STYLES if name in set(lines["floor"])]
    lines = lines.assign(layer="floor", floor=lines["floor"].map(lambda f: FLOOR_STYLES[f][0]), metric=[metric_of.get((m, t)) for m, t in zip(lines["model"], lines["task"])])
    data, unit, per = panels(clean(pd.concat([scores, lines], ignore_index=True)))
    of = f"of {totals[0]}" if len(totals) == 1 else "of " + words([f"{int(t)} in {m}" for m, t in totals_by_model.items()])

    pick = alt.selection_point(name="pick_ranking", fields=["ranking"], bind="legend")
    x = alt.X("dynamic:Q", title=f"input-dependent heads ({of})" if len(totals) == 1 else "input-dependent heads")
    is_score = alt.datum.layer == "score"
    color = alt.Color("ranking:N", legend=legend("ranking (click to highlight)"))
    y_title = f"score ({unit})"
    band = alt.Chart().mark_area(opacity=0.2).encode(x=x, y=alt.Y("min:Q", scale=alt.Scale(zero=False), title=y_title), y2="max:Q", color=color)
    band = band.encode(opacity=alt.condition(pick, alt.value(0.25), alt.value(0.03))).transform_filter(is_score)
    tooltip = ["panel:N", "ranking:N", "k:Q", "dynamic:Q", "metric:N"] + [alt.Tooltip(f"{s}:Q", format=".4f") for s in ("mean", "std", "min", "max")] + ["n_seeds:Q"]
    line = alt.Chart().mark_line(point=True).encode(x=x, y=alt.Y("mean:Q", scale=alt.Scale(zero=False), title=y_title), color=color, tooltip=tooltip)
    line = line.encode(opacity=alt.condition(pick, alt.value(1.0), alt.value(0.15))).add_params(pick).transform_filter(is_score)
    dash = alt.StrokeDash("floor:N", scale=alt.Scale(domain=[FLOOR_STYLES[f][0] for f in drawn], range=[FLOOR_STYLES[f][1] for f in drawn]), legend=legend("floor"))
    rule = alt.Chart().mark_rule(color="gray").encode(y="value:Q", strokeDash=dash, tooltip=["panel:N", "floor:N", alt.Tooltip("value:Q", format=".4f")])
    rule = rule.transform_filter(alt.datum.layer == "floor")
    chart = facet(alt.layer(band, line, rule, data=data), data, x_independent=len(totals) > 1)

    rankings = sorted(scores["ranking"].unique())
    floor_words = "; ".join(f"the {FLOOR_STYLES[f][0]} floor ({FLOOR_STYLES[f][2]})" for f in drawn) or "no floor ran"
    caption = (
        f"Mean {unit} of the probe over {seeds_words(scores['n_seeds'])} (band: min–max) against the number of input-dependent heads "
        f"({of}), one panel per {per}, one colour per ranking ({words(rankings)}). The rightmost point of each line is the "
        f"unpatched encoder (k = 0); the leftmost has every head constant. Grey rules: {floor_words}. "
        "Click a ranking in the legend to highlight it."
    )
    return finish(chart, caption, label)


def fig_convergence(epochs: pd.DataFrame, mode: str | None = None, label: str = "fig-convergence", curve: str = "score") -> Figure:
    """Score per epoch (mean, band min–max over seeds) for k = 0 and k = all, one panel per task: ``curve`` "score"
    draws the dev score, "heldout" the score on held-out training examples (the curve early stopping reads).

    ``epochs`` from :func:`papa.analysis.results.epoch_table`.
    """
    rows = _mode_rows(epochs, mode)
    rows = rows[(rows["probe_input"] == "all") & ((rows["k"] == 0) | (rows["k"] == rows["total_heads"]))]
    rows = rows.assign(condition=np.where(rows["k"] == 0, K0_LABEL, KALL_LABEL))
    rows = rows.dropna(subset=[curve])
    data = rows.groupby(["model", "task", "metric", "condition", "epoch"], as_index=False, dropna=False).agg(
        mean=(curve, "mean"), min=(curve, "min"), max=(curve, "max"), loss=("train_loss", "mean"), n_seeds=("seed", "nunique")
    )
    data, unit, per = panels(clean(data))
    color = alt.Color("condition:N", legend=legend(None))
    x = alt.X("epoch:Q", axis=alt.Axis(tickMinStep=1, format="d"), title="epoch")
    what = "dev score" if curve == "score" else "held-out training score"
    y_title = f"{what} ({unit})"
    band = alt.Chart().mark_area(opacity=0.2).encode(x=x, y=alt.Y("min:Q", title=y_title, axis=alt.Axis(format=".2f")), y2="max:Q", color=color)
    tooltip = ["panel:N", "condition:N", "epoch:Q"] + [alt.Tooltip(f"{s}:Q", format=".4f") for s in ("mean", "min", "max")]
    tooltip += [alt.Tooltip("loss:Q", format=".4f", title="train loss"), "n_seeds:Q"]
    line = alt.Chart().mark_line(point=True).encode(x=x, y=alt.Y("mean:Q", scale=alt.Scale(zero=False), title=y_title, axis=alt.Axis(format=".2f")), color=color, tooltip=tooltip)
    chart = facet(alt.layer(band, line, data=data), data)
    source = (
        ""
        if curve == "score"
        else " Held-out training examples are examples of the training split the probe never trained on: the curve early stopping reads"
        " (the dev split is scored once, by the reported probe)."
    )
    caption = (
        f"{what.capitalize()} ({unit}) after every epoch for the runs with no head constant ({K0_LABEL.split(' (')[0]}) and with every head "
        f"constant ({KALL_LABEL.split(' (')[0]}): mean over {seeds_words(data['n_seeds'])}, band min–max; one panel per {per}.{source}"
    )
    return finish(chart, caption, label)


__all__ = [
    "FLOOR_STYLES",
    "fig_convergence",
    "fig_score_vs_dynamic_heads",
]
