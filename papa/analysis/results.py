"""Result files → tidy tables, floors, and the paper's three claims.

One probing run (:func:`papa.probing.experiment.run_probe`) is one JSON file. :func:`load_results` turns a
folder of them into a tidy table (one row per run × metric of the final epoch); :func:`summarise`
aggregates the main metric over seeds; :func:`floors_table` says which tasks can show anything at
all (the k = 0 probe must beat the floors); :func:`claims_table` checks the paper's claims.

The small pure functions :func:`relative_drop`, :func:`retained_gain` and
:func:`difference_is_real` hold all the arithmetic the claims use.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd

from papa.core.errors import PapaError
from papa.core.heads import count_for
from papa.core.io import read_json_verified

RUN_COLUMNS = [
    "run_id",
    "model",
    "task",
    "k",
    "total_heads",
    "fraction",
    "ranking",
    "seed",
    "mode",
    "probe_input",
    "lr",
    "epochs",
    "train_examples",
    "selection",
    "selected_epoch",
    "converged",
]
#: Columns of :func:`load_results`.
TIDY_COLUMNS = RUN_COLUMNS + ["metric", "value", "is_main", "majority", "seconds"]
#: Group keys of :func:`summarise` (``total_heads`` and ``metric`` follow from model and task).
SUMMARY_KEYS = ["model", "task", "ranking", "k", "fraction", "total_heads", "mode", "probe_input", "metric"]
VERDICTS = ("reproduced", "not reproduced", "not testable here")
#: Claim 1 is reproduced when the mean relative drop at half the heads is at most this.
HALF_MAX_DROP = 0.05
#: Claim 2 is reproduced when the mean relative drop with all heads constant lies in this range.
ALL_DROP_RANGE = (0.03, 0.20)

# --- pure arithmetic ---------------------------------------------------------------------------


def relative_drop(score_k: float, score_0: float) -> float:
    """``(score_0 − score_k) / score_0``: the share of the k = 0 score lost (NaN when ``score_0`` is 0)."""
    return (score_0 - score_k) / score_0 if score_0 != 0 else math.nan


def retained_gain(score_k: float, score_0: float, floor: float) -> float:
    """``(score_k − floor) / (score_0 − floor)``: the share of the gain over the floor kept at k.

    NaN when ``score_0 <= floor`` (there is no gain to keep).
    """
    return (score_k - floor) / (score_0 - floor) if score_0 > floor else math.nan


def difference_is_real(a_scores: Sequence[float], b_scores: Sequence[float]) -> bool:
    """A difference is real only when it exceeds the seed spread.

    True when ``|mean(a) − mean(b)|`` is larger than the larger of the two seed ranges
    (``max − min`` over seeds). With one seed on both sides the ranges are 0, so any difference counts.
    """
    a, b = np.asarray(a_scores, dtype=float), np.asarray(b_scores, dtype=float)
    if a.size == 0 or b.size == 0:
        raise PapaError("difference_is_real needs at least one score on each side", "Pass the per-seed scores.")
    return _real(a.mean(), b.mean(), np.ptp(a), np.ptp(b))


def _real(mean_a: float, mean_b: float, range_a: float, range_b: float) -> bool:
    return bool(abs(mean_a - mean_b) > max(range_a, range_b))


# --- loading -----------------------------------------------------------------------------------


def read_results(folder: str | Path) -> dict[str, dict]:
    """Every result JSON under ``folder`` (recursively, checksums verified) as ``{run_id: result}``.

    JSON files that are not results (no ``config`` and ``score``, e.g. rankings) are skipped; a
    result that fails its checksum raises :class:`papa.core.errors.CorruptFileError`. ``run_id`` is
    the file stem, or the path relative to ``folder`` (without ``.json``) when stems repeat.
    """
    root = Path(folder)
    if not root.is_dir():
        raise PapaError(f"The results folder {root} does not exist", "Run the grid first, or check the path.")
    found: list[tuple[Path, dict]] = []
    for path in sorted(root.rglob("*.json")):
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raw = {"config": None, "score": None}  # unreadable: let read_json_verified report it
        if isinstance(raw, dict) and "config" in raw and "score" in raw:
            found.append((path, read_json_verified(path, "result")))
    stems = [p.stem for p, _ in found]
    return {(p.stem if stems.count(p.stem) == 1 else p.relative_to(root).with_suffix("").as_posix()): r for p, r in found}


def _as_results(results: str | Path | Mapping[str, dict]) -> Mapping[str, dict]:
    return results if isinstance(results, Mapping) else read_results(results)


#: Head sets that every ranking shares: k = 0 (``none``) and k = all heads (``all``).
SHARED_RANKINGS = ("none", "all")


def ranking_method(ranking_file: str | None, k: int, total: int | None = None) -> str:
    """``"gates"`` from ``"minilm-l6__sst2__gates.json"``; ``"none"`` when ``k == 0``, ``"all"`` when ``k == total``."""
    if k == 0:
        return "none"
    if total is not None and k == total:
        return "all"
    if not ranking_file:
        return "unknown"
    name = Path(ranking_file).name
    name = name[:-5] if name.endswith(".json") else name
    return name.rsplit("__", 1)[-1]


def _run_fields(run_id: str, result: dict) -> dict:
    config = result["config"]
    k, total = int(config["constant_heads"]), int(config["total_heads"])
    return {
        "run_id": run_id,
        "model": config["model"],
        "task": result.get("task", config.get("task")),
        "k": k,
        "total_heads": total,
        "fraction": k / total,
        "ranking": ranking_method(config.get("ranking"), k, total),
        "seed": config.get("seed"),
        "mode": config.get("mode"),
        "probe_input": config.get("probe_input", "all"),
        "lr": config.get("lr"),
        "epochs": config.get("epochs"),
        "train_examples": (result.get("data") or {}).get("train_examples"),
        "selection": config.get("selection", "final"),
        "selected_epoch": result.get("selected_epoch", len(result.get("epochs") or []) or None),
        # True/False from the held-out curve (early stopping); None for a run without one (final-epoch runs)
        "converged": (result.get("convergence") or {}).get("converged"),
    }


def load_results(folder: str | Path | Mapping[str, dict]) -> pd.DataFrame:
    """Tidy table of a results folder: one row per run × metric of the reported epoch (the final
    one, or the one chosen on held-out training data: ``selection``, ``selected_epoch``).

    ``converged`` is the run's convergence flag (None without a held-out curve). The per-example dev
    predictions stay in the result records (:func:`read_results`), never in this table.

    Columns: :data:`TIDY_COLUMNS`. ``metric`` is the metric's own name (the duplicate ``main`` key
    is dropped); ``is_main`` marks the task's main metric; ``majority`` is that metric's value for
    the majority-class floor; ``seconds`` is the run's total time.
    """
    rows = []
    for run_id, result in _as_results(folder).items():
        run = _run_fields(run_id, result)
        main = result.get("metric")
        majority = (result.get("floors") or {}).get("majority") or {}
        for metric, value in result["metrics"].items():
            if metric == "main":
                continue
            rows.append(
                {
                    **run,
                    "metric": metric,
                    "value": float(value),
                    "is_main": metric == main,
                    "majority": float(majority[metric]) if metric in majority else math.nan,
                    "seconds": (result.get("timings") or {}).get("total", math.nan),
                }
            )
    return pd.DataFrame(rows, columns=TIDY_COLUMNS)


def epoch_table(folder_or_results: str | Path | Mapping[str, dict]) -> pd.DataFrame:
    """One row per run × epoch: run fields, ``epoch``, ``train_loss``, ``score`` (the main dev metric) and
    ``heldout`` (the main metric on held-out training examples).

    A run trained with ``dev_every_epoch=False`` has no per-epoch dev score: its ``score`` is NaN (and a run
    without held-out scoring has NaN ``heldout``); epochs without a train loss give NaN too.
    """
    rows = []
    for run_id, result in _as_results(folder_or_results).items():
        run = _run_fields(run_id, result)
        for record in result.get("epochs") or []:
            rows.append(
                {
                    **run,
                    "epoch": int(record["epoch"]),
                    "train_loss": _float(record.get("train_loss")),
                    "score": _float(record.get("main")),
                    "heldout": _float(record.get("heldout_main")),
                    "metric": result.get("metric"),
                }
            )
    return pd.DataFrame(rows, columns=RUN_COLUMNS + ["epoch", "train_loss", "score", "heldout", "metric"])


def _float(value: object) -> float:
    return math.nan if value is None else float(value)


# --- aggregation -------------------------------------------------------------------------------


def summarise(df: pd.DataFrame) -> pd.DataFrame:
    """Main metric over seeds per (model, task, ranking, k, fraction, mode, probe_input).

    Columns: :data:`SUMMARY_KEYS` + ``mean``, ``std`` (ddof=1, NaN for one seed), ``min``, ``max``,
    ``n_seeds``. Raises :class:`PapaError` when a group mixes probe settings (lr, epochs, train
    examples) or holds one seed twice: filter the table first.
    """
    main = df[df["is_main"]]
    out = []
    for keys, group in main.groupby(SUMMARY_KEYS, sort=True, dropna=False):
        label = dict(zip(SUMMARY_KEYS, keys))
        for column in ("lr", "epochs", "train_examples", "selection"):
            if group[column].nunique(dropna=False) > 1:
                raise PapaError(f"Runs of {label} differ in {column} ({sorted(group[column].unique())})", f"Filter the table to one {column} before summarising.")
        if group["seed"].duplicated().any():
            raise PapaError(f"Runs of {label} repeat a seed ({group['seed'].tolist()})", "Remove the duplicate result files, or filter the table.")
        values = group["value"].astype(float)
        out.append(
            {**label, "mean": values.mean(), "std": values.std(ddof=1) if len(values) > 1 else math.nan, "min": values.min(), "max": values.max(), "n_seeds": int(len(values))}
        )
    return pd.DataFrame(out, columns=SUMMARY_KEYS + ["mean", "std", "min", "max", "n_seeds"])


def floors_table(df: pd.DataFrame, results: str | Path | Mapping[str, dict] | None = None) -> pd.DataFrame:
    """Per model, task and mode: the floors, the k = 0 baseline, and whether the task is informative.

    * ``majority``: the main metric of always predicting the majority class (the ``majority`` column
      of ``df``, else ``floors.majority.main`` of ``results``);
    * ``attention_free`` (``_std``, ``_n``): mean main score of the k = 0 runs with
      ``probe_input == "embeddings"`` (the probe sees no attention at all);
    * ``baseline`` (``_std``, ``_n``): mean main score of the k = 0 runs with ``probe_input == "all"``.

    Rule: a task is ``informative`` when ``baseline − max(majority, attention_free)`` exceeds
    ``margin = max(2 × baseline_std, 2 × attention_free_std, 0.01)`` (a missing std, e.g. one seed,
    counts as 0; a missing attention-free floor is left out of the max). Only then can replacing
    attention lose anything measurable.
    """
    main = df[df["is_main"]]
    majority = main.groupby(["model", "task", "mode"])["majority"].mean() if "majority" in main else pd.Series(dtype=float)
    if results is not None and majority.isna().all():
        runs = _as_results(results)
        frame = pd.DataFrame([{**_run_fields(r, res), "majority": res["floors"]["majority"]["main"]} for r, res in runs.items()])
        majority = frame.groupby(["model", "task", "mode"])["majority"].mean()
    rows = []
    for (model, task, mode), group in main[main["k"] == 0].groupby(["model", "task", "mode"], sort=True):
        row = {"model": model, "task": task, "mode": mode, "metric": group["metric"].iloc[0], "majority": float(majority.get((model, task, mode), math.nan))}
        for name, probe_input in (("attention_free", "embeddings"), ("baseline", "all")):
            values = group.loc[group["probe_input"] == probe_input, "value"].astype(float)
            row[name] = values.mean() if len(values) else math.nan
            row[f"{name}_std"] = values.std(ddof=1) if len(values) > 1 else math.nan
            row[f"{name}_n"] = int(len(values))
        row["margin"] = max(2 * _zero(row["baseline_std"]), 2 * _zero(row["attention_free_std"]), 0.01)
        floor = np.nanmax([row["majority"], row["attention_free"], -math.inf])
        row["informative"] = bool(not math.isnan(row["baseline"]) and row["baseline"] - floor > row["margin"])
        rows.append(row)
    columns = [
        "model",
        "task",
        "mode",
        "metric",
        "majority",
        "attention_free",
        "attention_free_std",
        "attention_free_n",
        "baseline",
        "baseline_std",
        "baseline_n",
        "margin",
        "informative",
    ]
    return pd.DataFrame(rows, columns=columns)


def _zero(x: float) -> float:
    return 0.0 if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


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


def _spearman(x: Sequence[float], y: Sequence[float]) -> float:
    rx, ry = pd.Series(x).rank(), pd.Series(y).rank()
    if rx.nunique() < 2 or ry.nunique() < 2:
        return math.nan
    return float(np.corrcoef(rx, ry)[0, 1])


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
    3. Better models lose more. Needs ≥ 2 models on an informative task; per task, the Spearman
       correlation across models of baseline vs drop at k = all. *Reproduced* when it is positive
       on a strict majority of the tasks tested.

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

    tested = [(task, _spearman(g["baseline"], g["drop"])) for task, g in full.groupby("task") if g["model"].nunique() >= 2]
    tested = [(t, r) for t, r in tested if not math.isnan(r)]
    claim3 = "3. Better models lose more"
    paper3 = "higher-scoring models show larger relative drops (Figure 4)"
    if not tested:
        models = summary["model"].nunique()
        rows.append((claim3, paper3, "—", math.nan, "not testable here", f"Needs ≥ 2 models on an informative task; {models} model(s) here.{excluded}"))
    else:
        positive = sum(r > 0 for _, r in tested)
        mean_rho = float(np.mean([r for _, r in tested]))
        ok = positive > len(tested) / 2
        rows.append(
            (
                claim3,
                paper3,
                f"Spearman ρ(baseline, drop) mean {mean_rho:+.2f}; positive on {positive}/{len(tested)} tasks",
                mean_rho,
                VERDICTS[0] if ok else VERDICTS[1],
                "Rule: ρ > 0 on a strict majority of tasks; " + ", ".join(f"{t} {r:+.2f}" for t, r in tested) + f".{excluded}",
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
