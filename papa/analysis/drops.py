"""Relative drops read from the seed spread: the drop at a head fraction, the paper's three claims on
seed means and ranges (a reading for runs without dev predictions; the book's verdicts are
:mod:`papa.analysis.verdicts`', on pooled bootstrap intervals), the score table and the training-size table. Inputs are :func:`papa.analysis.results.summarise` frames."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd

from papa.analysis.findings import ALL_DROP_RANGE, HALF_MAX_DROP
from papa.analysis.results import (
    SHARED_RANKINGS,
    SUMMARY_KEYS,
    TIDY_COLUMNS,
    _real,
    difference_is_real,
    epoch_table,
    floors_table,
    load_results,
    ranking_method,
    read_results,
    relative_drop,
    retained_gain,
    summarise,
)
from papa.analysis.stats import claim3, model_points
from papa.core.errors import PapaError
from papa.core.heads import count_for

VERDICTS = ("reproduced", "not reproduced", "not testable here")


# --- claims ------------------------------------------------------------------------------------


def _pick_mode(summary: pd.DataFrame, mode: str | None) -> str:
    modes = sorted(summary["mode"].dropna().unique())
    if mode is not None:
        if mode not in modes:
            raise PapaError(f"No runs in mode {mode!r}", f"Modes present: {', '.join(modes) or 'none'}.")
        return mode
    if not modes:
        raise PapaError("The summary holds no runs", "Load some results first.")
    return "faithful" if "faithful" in modes else modes[0]


def drops_at(summary: pd.DataFrame, fraction: float | Fraction, ranking: str | None = None, mode: str | None = None) -> pd.DataFrame:
    """Per model and task: the k = 0 baseline and the score at ``fraction`` of the heads constant.

    ``k`` is :func:`papa.core.heads.count_for` of ``fraction``. ``ranking`` None averages the means
    of every ranking at that k (they coincide at k = all). Columns: model, task, k, baseline,
    score, drop (:func:`relative_drop`), real (:func:`difference_is_real` on the means and ranges).
    """
    mode = _pick_mode(summary, mode)
    rows = summary[(summary["mode"] == mode) & (summary["probe_input"] == "all")]
    out = []
    for (model, task), group in rows.groupby(["model", "task"], sort=True):
        base = group[group["k"] == 0]
        k = count_for(Fraction(fraction).limit_denominator(10_000), int(group["total_heads"].iloc[0]))
        at = group[(group["k"] == k) & ((group["ranking"] == ranking) if ranking else (group["k"] > 0))]
        if base.empty or at.empty or k == 0:
            continue
        b, a = base.iloc[0], at.agg({"mean": "mean", "min": "min", "max": "max"})
        out.append(
            {
                "model": model,
                "task": task,
                "k": k,
                "baseline": b["mean"],
                "score": a["mean"],
                "drop": relative_drop(a["mean"], b["mean"]),
                "real": _real(a["mean"], b["mean"], a["max"] - a["min"], b["max"] - b["min"]),
            }
        )
    return pd.DataFrame(out, columns=["model", "task", "k", "baseline", "score", "drop", "real"])


def _informative_only(drops: pd.DataFrame, floors: pd.DataFrame, mode: str) -> tuple[pd.DataFrame, list[str]]:
    flags = floors[floors["mode"] == mode].set_index(["model", "task"])["informative"]
    keep = [bool(flags.get((m, t), False)) for m, t in zip(drops["model"], drops["task"])]
    skipped = sorted(f"{m}/{t}" for (m, t), ok in flags.items() if not ok)
    return drops[keep], skipped


def _per_task(drops: pd.DataFrame) -> str:
    return ", ".join(f"{m}/{t} {d:.1%}" for m, t, d in zip(drops["model"], drops["task"], drops["drop"]))


def claims_table(summary: pd.DataFrame, floors: pd.DataFrame, ranking: str = "gates", mode: str | None = None) -> pd.DataFrame:
    """The paper's three claims checked on informative tasks only (see :func:`floors_table`).

    Rules (relative drops are :func:`relative_drop` of the seed means, averaged over informative
    model/task pairs; ``mode`` None prefers ``faithful`` when present):

    1. Half the heads constant (``ranking``) costs little — paper ≈0–2 %. *Reproduced* when the
       mean drop is ≤ :data:`HALF_MAX_DROP` (5 %) or no task's difference is real (within the seed
       spread, :func:`difference_is_real`).
    2. All heads constant costs ~8 % on average, ≤ ~20 % per task. *Reproduced* when the mean drop
       lies in :data:`ALL_DROP_RANGE` ([3 %, 20 %]); a smaller drop is "not reproduced" too (the
       note says which way).
    3. Better models lose more. One point per model (its average k = 0 score and drop at k = all over
       the informative tasks every model has); :func:`papa.analysis.stats.claim3`: fewer than 3 models is
       "not testable here", else *reproduced* only when Spearman's ρ > 0 with a one-sided p < 0.05.

    Without informative data a claim is "not testable here". Columns: claim, paper, ours, value,
    verdict, note.
    """
    mode = _pick_mode(summary, mode)
    rows = []
    half, _ = _informative_only(drops_at(summary, Fraction(1, 2), ranking, mode), floors, mode)
    full, skipped = _informative_only(drops_at(summary, 1, None, mode), floors, mode)
    excluded = f" Excluded as uninformative: {', '.join(skipped)}." if skipped else ""

    if half.empty:
        rows.append(
            (
                "1. Half the heads constant: little or no drop",
                "≈0–2% relative drop",
                "—",
                math.nan,
                "not testable here",
                f"No informative task with k=0 and k=half ({ranking}) runs.{excluded}",
            )
        )
    else:
        mean = float(half["drop"].mean())
        ok = mean <= HALF_MAX_DROP or not half["real"].any()
        rows.append(
            (
                "1. Half the heads constant: little or no drop",
                "≈0–2% relative drop",
                f"{mean:.1%} mean relative drop ({_per_task(half)})",
                mean,
                VERDICTS[0] if ok else VERDICTS[1],
                f"Rule: mean ≤ {HALF_MAX_DROP:.0%} or no difference beyond the seed spread; {int(half['real'].sum())}/{len(half)} real; ranking {ranking}, mode {mode}.{excluded}",
            )
        )

    if full.empty:
        rows.append(
            (
                "2. All heads constant: modest drop",
                "8% average relative drop (≤ ~20% per task)",
                "—",
                math.nan,
                "not testable here",
                f"No informative task with k=0 and k=all runs.{excluded}",
            )
        )
    else:
        mean = float(full["drop"].mean())
        low, high = ALL_DROP_RANGE
        ok = low <= mean <= high
        side = "" if ok else (" Smaller than the paper's: attention matters even less here." if mean < low else " Larger than the paper's: attention matters more here.")
        worst = full.loc[full["drop"] > high, "task"].tolist()
        rows.append(
            (
                "2. All heads constant: modest drop",
                "8% average relative drop (≤ ~20% per task)",
                f"{mean:.1%} mean relative drop ({_per_task(full)})",
                mean,
                VERDICTS[0] if ok else VERDICTS[1],
                f"Rule: mean in [{low:.0%}, {high:.0%}]; mode {mode}.{side}" + (f" Tasks above {high:.0%}: {', '.join(worst)}." if worst else "") + excluded,
            )
        )

    points, common = model_points(full, score="baseline")
    verdict = claim3(points)
    claim3_name = "3. Better models lose more"
    paper3 = "higher-scoring models show larger relative drops (Figure 4)"
    if verdict["n"] < 3:
        rows.append((claim3_name, paper3, "—", math.nan, "not testable here", f"Needs ≥ 3 models (two points always give ρ = ±1); {verdict['n']} here.{excluded}"))
    else:
        rows.append(
            (
                claim3_name,
                paper3,
                f"Spearman ρ(k = 0 score, drop) {verdict['spearman']:+.2f} over {verdict['n']} models, one-sided p = {verdict['p_value']:.2f}",
                verdict["spearman"],
                VERDICTS[0] if verdict["verdict"] == "reproduced" else verdict["verdict"],
                f"Rule: ρ > 0 with p < 0.05 (papa.analysis.stats.claim3), each model averaged over the tasks all share ({', '.join(common)}).{excluded}",
            )
        )
    return pd.DataFrame(rows, columns=["claim", "paper", "ours", "value", "verdict", "note"])


def spread_shared(group: pd.DataFrame) -> pd.DataFrame:
    """Repeat the rows every ranking shares (k = 0, k = all) under each specific ranking of ``group``
    (one model × task), so each ranking's curve runs from no constant head to all of them."""
    shared = group[group["ranking"].isin(SHARED_RANKINGS)]
    specific = group[~group["ranking"].isin(SHARED_RANKINGS)]
    methods = list(specific["ranking"].unique()) or ["none"]
    return pd.concat([specific] + [shared.assign(ranking=m) for m in methods], ignore_index=True)


def score_table(summary: pd.DataFrame, digits: int = 3, probe_input: str = "all") -> pd.DataFrame:
    """Wide table for the book: rows (model, task, ranking[, mode]), one "mean ± std" column per k.

    The k = 0 baseline (ranking "none") is repeated in every ranking's row; its own row is kept only
    when a task has no other ranking.
    """
    rows = summary[summary["probe_input"] == probe_input].copy()
    index = ["model", "task", "ranking"] + (["mode"] if rows["mode"].nunique() > 1 else [])
    rows["cell"] = [f"{m:.{digits}f}" + ("" if pd.isna(s) else f" ± {s:.{digits}f}") for m, s in zip(rows["mean"], rows["std"])]
    parts = [spread_shared(group) for _, group in rows.groupby(["model", "task", "mode"], sort=True)]
    table = pd.concat(parts) if parts else rows
    wide = table.pivot_table(index=index, columns="k", values="cell", aggfunc="first")
    wide.columns.name = "k"
    return wide


#: Columns of :func:`train_size_table`.
TRAIN_SIZE_COLUMNS = [
    "model",
    "task",
    "train_examples",
    "k0_mean",
    "k0_min",
    "k0_max",
    "kall_mean",
    "kall_min",
    "kall_max",
    "n_seeds",
    "drop",
    "drop_real",
    "floor_mean",
    "floor_min",
    "floor_max",
    "floor_n_seeds",
    "majority",
    "retained_gain",
    "informative",
]


def train_size_table(tidy: pd.DataFrame, lr: float | None, epochs: int, selection: str = "final", mode: str = "cached") -> pd.DataFrame:
    """The k = 0 and k = all scores against the probe's training-set size, at one probe setting.

    ``tidy`` from :func:`load_results`; only main-metric rows trained with ``lr`` (None: any lr, as with
    the lr chosen per model and task), ``epochs``,
    ``selection`` and ``mode`` are read (rows without a recorded size are left out). Each size is
    aggregated with :func:`summarise` and :func:`floors_table`, so a repeated seed raises. One row
    per (model, task, train_examples) where the full probe ran with both no and every head constant
    (columns :data:`TRAIN_SIZE_COLUMNS`): each side's mean and seed range (min, max); ``n_seeds``,
    the smaller number of seeds of the two; the relative drop ``(k0 − kall) / k0`` of the means;
    ``drop_real``, whether the two differ by more than the seed spread (:func:`difference_is_real`);
    the attention-free floor's mean, range and number of seeds where it ran at that size (else NaN
    and 0 seeds); the majority score; and,
    where the attention-free floor ran (else NaN / None), the retained gain over the higher of the two
    floors, as in the results chapter, and whether the task is informative at that size
    (:func:`floors_table`). Sorted by model, task and size.
    """
    rows = tidy[
        tidy["is_main"]
        & (tidy["mode"] == mode)
        & (True if lr is None else tidy["lr"].astype(float).round(12) == round(float(lr), 12))
        & (tidy["epochs"] == epochs)
        & (tidy["selection"] == selection)
        & tidy["ranking"].isin(SHARED_RANKINGS)
    ]
    out = []
    for size, group in rows.groupby("train_examples", sort=True):
        summary = summarise(group).set_index(["model", "task", "ranking", "probe_input"])
        for floor in floors_table(group).itertuples():
            key = (floor.model, floor.task)
            if (*key, "none", "all") not in summary.index or (*key, "all", "all") not in summary.index:
                continue
            k0, kall = summary.loc[(*key, "none", "all")], summary.loc[(*key, "all", "all")]
            free = summary.loc[(*key, "none", "embeddings")] if (*key, "none", "embeddings") in summary.index else None
            higher_floor = np.nanmax([floor.majority, floor.attention_free, -math.inf])
            out.append(
                {
                    "model": floor.model,
                    "task": floor.task,
                    "train_examples": int(size),
                    "k0_mean": k0["mean"],
                    "k0_min": k0["min"],
                    "k0_max": k0["max"],
                    "kall_mean": kall["mean"],
                    "kall_min": kall["min"],
                    "kall_max": kall["max"],
                    "n_seeds": int(min(k0["n_seeds"], kall["n_seeds"])),
                    "drop": relative_drop(kall["mean"], k0["mean"]),
                    "drop_real": _real(k0["mean"], kall["mean"], k0["max"] - k0["min"], kall["max"] - kall["min"]),
                    "floor_mean": math.nan if free is None else free["mean"],
                    "floor_min": math.nan if free is None else free["min"],
                    "floor_max": math.nan if free is None else free["max"],
                    "floor_n_seeds": 0 if free is None else int(free["n_seeds"]),
                    "majority": floor.majority,
                    "retained_gain": math.nan if free is None else retained_gain(kall["mean"], k0["mean"], higher_floor),
                    "informative": None if free is None else bool(floor.informative),
                }
            )
    table = pd.DataFrame(out, columns=TRAIN_SIZE_COLUMNS)
    return table.sort_values(["model", "task", "train_examples"], ignore_index=True)


__all__ = [
    "ALL_DROP_RANGE",
    "HALF_MAX_DROP",
    "SUMMARY_KEYS",
    "TIDY_COLUMNS",
    "claims_table",
    "difference_is_real",
    "drops_at",
    "epoch_table",
    "floors_table",
    "load_results",
    "ranking_method",
    "read_results",
    "relative_drop",
    "retained_gain",
    "score_table",
    "summarise",
    "train_size_table",
    "TRAIN_SIZE_COLUMNS",
]
