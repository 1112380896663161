"""The controls chapter (``notebooks/05_controls.md``): every frame, figure and glued number it shows, computed once
by :func:`build` into one :class:`ControlsChapter`. The gate's counts are the main basis's; the literal setting's
drops are each study's own basis beside it; the epoch curves' "still climbing"
(:func:`papa.analysis.controls.still_rising`) is not the gate's "still rising at the cap"."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from papa.analysis import bootstrap as S
from papa.analysis import probe_checks as AC
from papa.analysis.basis import build_basis, k0_and_all
from papa.analysis.controls import converged_flag, still_rising
from papa.analysis.figure_kit import Figure
from papa.analysis.figures import fig_convergence
from papa.book import probe_checks as PC
from papa.book.analogue_figures import placeholder_figure
from papa.book.load import BookData, gate_numbers, records_of
from papa.book.studies import faithful_comparison, size_sensitivity
from papa.core.fields import PAPER_EPOCHS, PAPER_LR
from papa.core.grid_schema import GridConfig

#: The paper's literal setting (the ``literal`` studies): lr, epochs, epoch selection.
LITERAL = (PAPER_LR, PAPER_EPOCHS, "final")


@dataclass(frozen=True)
class ControlsChapter:
    """What the controls chapter shows, each frame documented where it is built."""

    data: BookData
    per_task: pd.DataFrame  # convergence_summary: runs converged / still rising at the cap, per model and task
    rising: pd.DataFrame  # convergence_summary: one row per run still rising at its cap
    near_floor: pd.DataFrame  # analysis.probe_checks.near_floor_frame
    prediction_share: pd.DataFrame  # analysis.probe_checks.prediction_share_frame
    lr_choices: pd.DataFrame  # analysis.probe_checks.lr_choice_frame
    literal: pd.DataFrame  # literal_comparison
    curve: str  # the per-epoch curve the runs recorded: "score" (dev) or "heldout"
    climbing: pd.DataFrame  # controls.still_rising: per run, whether that curve still climbs over its last epochs
    size: pd.DataFrame  # studies.size_sensitivity
    faithful: pd.DataFrame | None  # studies.faithful_comparison (None: no faithful study in this grid)
    figure: Figure | None = None  # convergence_figure: the epoch curves at k = 0 and all heads, or why none
    glue: dict = field(default_factory=dict)  # every number and phrase of the prose, by glue key

    @property
    def climbing_runs(self) -> pd.DataFrame:
        """The runs whose epoch curve still climbs over its last epochs."""
        return self.climbing[self.climbing["rising"]] if len(self.climbing) else self.climbing


def probe_checks(data: BookData) -> tuple[AC.Checks, pd.DataFrame]:
    """The probe checks on the book's basis (the converged runs, as every score beside them): the lr choices, what
    the k = 0 probes predict, the training-size studies, and every pair near its floor with those checks."""
    runs = data.basis.runs
    prediction_share = AC.prediction_share_frame(runs, data.records)
    checks = AC.Checks(AC.lr_choice_frame(data.lr_choices), prediction_share, size_sensitivity(data))
    return checks, AC.near_floor_frame(data.floors, runs, data.records, checks)


def build(data: BookData) -> ControlsChapter:
    """The controls chapter of a grid's committed runs (:func:`papa.book.load.load_book_data`)."""
    per_task, rising = convergence_summary(data)
    checks, near_floor = probe_checks(data)
    lr_choices = checks.lr_choices
    literal = literal_comparison(data)
    curve = "score" if data.epochs["score"].notna().any() else "heldout"  # dev scores per epoch, else held-out
    climbing = still_rising(data.epochs, curve=curve)
    glue = gate_numbers(data.basis.gate) | {"n_literal_pairs": int(len(literal))}
    glue["literal_studies"] = ", ".join(literal_studies(data.config)) or "none in this grid"
    glue["curve_words"] = "dev" if curve == "score" else "held-out training"
    glue |= {"n_rising": int(climbing["rising"].sum()) if len(climbing) else 0, "n_checked": int(len(climbing))}
    glue |= PC.near_floor_numbers(near_floor) | PC.lr_choice_numbers(lr_choices)
    return ControlsChapter(
        data=data,
        per_task=per_task,
        rising=rising,
        near_floor=near_floor,
        prediction_share=checks.prediction_share,
        lr_choices=lr_choices,
        literal=literal,
        curve=curve,
        climbing=climbing,
        size=checks.size,
        faithful=faithful_comparison(data),
        figure=convergence_figure(data.epochs, curve),
        glue=glue,
    )


def convergence_figure(epochs: pd.DataFrame, curve: str) -> Figure:
    """The per-epoch ``curve`` at k = 0 and all heads (:func:`papa.analysis.figures.fig_convergence`), or why none."""
    curves = epochs.dropna(subset=[curve])
    if len(curves):
        return fig_convergence(curves, curve=curve)
    why = "No run of the main grid recorded a score after every epoch: no curve to draw."
    return placeholder_figure("fig-convergence", why)


def literal_studies(grid: GridConfig) -> list[str]:
    """The names of the studies that run the paper's literal setting (:data:`LITERAL`) in cached mode."""
    lr, epochs, selection = LITERAL
    names = []
    for study in grid.studies:
        same_lr = isinstance(study.lr, (int, float)) and round(float(study.lr), 12) == lr
        same = same_lr and study.epochs == epochs and study.selection == selection
        if same and "faithful" not in (study.modes or ["cached"]):
            names.append(study.name)
    return names


def literal_comparison(data: BookData, resamples: int = S.RESAMPLES) -> pd.DataFrame:
    """Per model and task: the main protocol's k = 0 and all-heads scores and relative drop with its interval beside
    the paper's literal setting's (:data:`LITERAL`: no held-out curve, so every literal run counts); ``lr``: the main
    protocol's chosen lr."""
    names = [name for name in literal_studies(data.config) if name in data.studies and len(data.studies[name])]
    sides = ("k0", "all", "drop", "low", "high", "real")
    columns = ["model", "task", "lr", *(f"main_{x}" for x in sides), *(f"literal_{x}" for x in sides), "literal_seeds"]
    out = []
    m = data.main
    for name in names:
        default = resamples == S.RESAMPLES
        literal = data.study_basis(name) if default else build_basis(data.studies[name], data.records, resamples)
        for model, task in sorted(set(zip(literal.runs["model"], literal.runs["task"]))):
            lit, main = k0_and_all(literal, model, task), k0_and_all(data.basis, model, task)
            if lit is None:
                continue
            lrs = m.loc[(m["model"] == model) & (m["task"] == task) & (m["k"] == 0), "lr"].dropna().unique()
            record = {"model": model, "task": task, "lr": float(lrs[0]) if len(lrs) == 1 else math.nan}
            for prefix, side in (("main", main), ("literal", lit)):
                none = {x: None if x == "real" else math.nan for x in sides}
                record |= {f"{prefix}_{x}": (side or none)[x] for x in sides}
            record["literal_seeds"] = len(lit["seeds"])
            out.append(record)
    return pd.DataFrame(out, columns=columns).sort_values(["model", "task"], ignore_index=True)


def convergence_summary(data: BookData) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(per model and task, still rising)``: how many runs converged, still rose at the cap or have no held-out
    curve, with the mean epochs trained; and one row per run that still rose."""
    table = S.convergence_table(records_of(data, set(data.main["run_id"])))
    runs = data.main.drop_duplicates("run_id")[["run_id", "model", "task", "ranking", "k", "seed", "probe_input"]]
    merged = runs.merge(table, on="run_id", how="left")
    rows = []
    for (model, task), group in merged.groupby(["model", "task"], sort=True):
        flags = [converged_flag(x) for x in group["converged"]]
        trained = pd.to_numeric(group["epochs_trained"], errors="coerce")
        counts = [sum(x is True for x in flags), sum(x is False for x in flags), sum(x is None for x in flags)]
        rows.append([model, task, len(group), *counts, float(trained.mean()) if trained.notna().any() else math.nan])
    columns = ["model", "task", "runs", "converged", "still rising", "no held-out curve", "mean epochs trained"]
    rising = merged[[converged_flag(x) is False for x in merged["converged"]]]
    rising = rising[["run_id", "model", "task", "ranking", "k", "seed", "best_epoch", "epochs_trained"]]
    return pd.DataFrame(rows, columns=columns), rising.reset_index(drop=True)
