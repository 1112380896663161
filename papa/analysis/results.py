"""Result files → tidy tables and floors: :func:`load_results` (one row per run × metric of the reported epoch),
:func:`summarise` (the main metric over seeds), :func:`floors_table` (which tasks the k = 0 probe can show anything
on), and the arithmetic of drops and gains."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from papa.core.errors import PapaError
from papa.core.io import read_json_verified
from papa.core.names import name_parts

RUN_COLUMNS = (
    "run_id model task k total_heads fraction ranking seed mode replacement probe_input lr epochs train_examples"
    " selection selected_epoch converged"
).split()
#: Columns of :func:`load_results`.
TIDY_COLUMNS = RUN_COLUMNS + ["metric", "value", "is_main", "majority", "seconds"]
#: Group keys of :func:`summarise` (``total_heads`` and ``metric`` follow from model and task).
SUMMARY_KEYS = ["model", "task", "ranking", "k", "fraction", "total_heads", "mode", "probe_input", "metric"]


def relative_drop(score_k: float, score_0: float) -> float:
    """``(score_0 − score_k) / score_0``: the share of the k = 0 score lost (NaN when ``score_0`` ≤ 0: an MCC of
    −0.01 at k = 0 has no share to lose, and the ratio's sign would flip)."""
    return (score_0 - score_k) / score_0 if score_0 > 0 else math.nan


def retained_gain(score_k: float, score_0: float, floor: float) -> float:
    """``(score_k − floor) / (score_0 − floor)``: the share of the gain over the floor kept at k (NaN without one)."""
    return (score_k - floor) / (score_0 - floor) if score_0 > floor else math.nan


def beyond_seed_range(a_scores: Sequence[float], b_scores: Sequence[float]) -> bool:
    """Whether ``|mean(a) − mean(b)|`` exceeds the larger of the two seed ranges (``max − min``; 0 for one seed)."""
    a, b = np.asarray(a_scores, dtype=float), np.asarray(b_scores, dtype=float)
    if a.size == 0 or b.size == 0:
        raise PapaError("beyond_seed_range needs at least one score on each side", "Pass the per-seed scores.")
    return bool(abs(a.mean() - b.mean()) > max(np.ptp(a), np.ptp(b)))


def read_results(folder: str | Path) -> dict[str, dict]:
    """Every result JSON under ``folder`` (recursively, checksums verified; other JSON skipped) as ``{run_id: result}``:
    ``run_id`` is the file stem, or the path relative to ``folder`` without ``.json`` when stems repeat."""
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
    key = lambda p: p.stem if stems.count(p.stem) == 1 else p.relative_to(root).with_suffix("").as_posix()
    return {key(p): r for p, r in found}


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
    return name_parts(Path(ranking_file).name.removesuffix(".json"))[-1]


def ranking_family(config: Mapping) -> str:
    """A run config's :func:`ranking_method`, its seeded random orderings (``random-<n>``) pooled as ``random``."""
    name = ranking_method(config.get("ranking"), int(config["constant_heads"]), int(config["total_heads"]))
    return "random" if name.startswith("random") else name


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
        "replacement": config.get("replacement", "papa"),  # what replaced the k heads (a result before the modes: papa)
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
    """Tidy table of result records: one row per run × metric of the reported epoch (:data:`TIDY_COLUMNS`;
    ``converged`` None without a held-out curve, ``is_main`` marks the task's main metric, ``majority`` its
    majority-class floor, ``seconds`` the run's total time)."""
    rows = []
    for run_id, result in _as_results(folder).items():
        run = _run_fields(run_id, result)
        main = result.get("metric")
        majority = (result.get("floors") or {}).get("majority") or {}
        seconds = (result.get("timings") or {}).get("total", math.nan)
        for metric, value in result["metrics"].items():
            if metric == "main":
                continue
            floor = float(majority[metric]) if metric in majority else math.nan
            row = {"metric": metric, "value": float(value), "is_main": metric == main, "majority": floor}
            rows.append(run | row | {"seconds": seconds})
    return pd.DataFrame(rows, columns=TIDY_COLUMNS)


def epoch_table(folder_or_results: str | Path | Mapping[str, dict]) -> pd.DataFrame:
    """One row per run × epoch: run fields, ``epoch``, ``train_loss``, ``score`` (the main dev metric) and
    ``heldout`` (on held-out training examples); NaN where a run did not record one."""
    rows = []
    for run_id, result in _as_results(folder_or_results).items():
        run = _run_fields(run_id, result)
        for record in result.get("epochs") or []:
            curve = [
                math.nan if record.get(k) is None else float(record[k]) for k in ("train_loss", "main", "heldout_main")
            ]
            values = dict(zip(("train_loss", "score", "heldout"), curve), metric=result.get("metric"))
            rows.append(run | {"epoch": int(record["epoch"])} | values)
    return pd.DataFrame(rows, columns=RUN_COLUMNS + ["epoch", "train_loss", "score", "heldout", "metric"])


def summarise(df: pd.DataFrame) -> pd.DataFrame:
    """The main metric over seeds per :data:`SUMMARY_KEYS`: ``mean``, ``std`` (ddof=1), ``min``, ``max``,
    ``n_seeds``. A group that mixes probe settings or repeats a seed is an error."""
    main = df[df["is_main"]]
    out = []
    for keys, group in main.groupby(SUMMARY_KEYS, sort=True, dropna=False):
        label = dict(zip(SUMMARY_KEYS, keys))
        for column in ("lr", "epochs", "train_examples", "selection"):
            if group[column].nunique(dropna=False) > 1:
                found = sorted(group[column].unique().tolist())
                fix = "If some are results of runs the config no longer plans, `papa grid run CONFIG --prune` removes"
                fix += f" them; otherwise filter the table to one {column} before summarising."
                runs = ", ".join(sorted(group["run_id"]))
                raise PapaError(f"Runs of {label} differ in {column} ({found}): {runs}", fix)
        if group["seed"].duplicated().any():
            fix = "Remove the duplicate result files, or filter the table."
            raise PapaError(f"Runs of {label} repeat a seed ({group['seed'].tolist()})", fix)
        v = group["value"].astype(float)  # std (ddof=1) is NaN for one seed
        out.append({**label, "mean": v.mean(), "std": v.std(), "min": v.min(), "max": v.max(), "n_seeds": int(len(v))})
    return pd.DataFrame(out, columns=SUMMARY_KEYS + ["mean", "std", "min", "max", "n_seeds"])


def attention_free_values(df: pd.DataFrame) -> dict[tuple, list[float]]:
    """Per (model, task, mode): the main scores of ``df``'s main-grid attention-free probes at k = 0."""
    rows = df[(df["k"] == 0) & (df["probe_input"] == "embeddings") & df["is_main"]] if len(df) else df
    groups = rows.groupby(["model", "task", "mode"], sort=True)["value"] if len(rows) else {}
    return {key: [float(v) for v in values] for key, values in groups}


def floors_table(
    df: pd.DataFrame,
    intervals: Mapping[tuple, tuple[float, float]] | None = None,
    rising: Mapping[tuple, list[float]] | None = None,
) -> pd.DataFrame:
    """Per model, task and mode: the ``majority`` floor, the ``attention_free`` floor (k = 0 probes on embeddings
    only; without one, the mean of ``rising``'s still-rising scores, marked ``attention_free_rising``), the k = 0
    ``baseline`` (each with ``_std``, ``_n``), and ``informative``: the baseline beats the higher floor by more than
    ``margin = max(2 × baseline_std, 2 × attention_free_std, 0.01)`` (a missing std counts as 0), and the lower end
    of its bootstrap interval over dev examples, where ``intervals`` has one
    (:func:`papa.analysis.basis.baseline_intervals`), lies above that floor."""
    main = df[df["is_main"]]
    majority = main.groupby(["model", "task", "mode"])["majority"].mean()
    rows = []
    for (model, task, mode), group in main[main["k"] == 0].groupby(["model", "task", "mode"], sort=True):
        row = {"model": model, "task": task, "mode": mode, "metric": group["metric"].iloc[0]}
        row["majority"] = float(majority.get((model, task, mode), math.nan))
        for name, probe_input in (("attention_free", "embeddings"), ("baseline", "all")):
            values = group.loc[group["probe_input"] == probe_input, "value"].astype(float)
            if name == "attention_free":
                still = (rising or {}).get((model, task, mode), [])
                row["attention_free_rising"] = bool(still) and not len(values)
                values = pd.Series(still) if row["attention_free_rising"] else values
            row |= {name: values.mean(), f"{name}_std": values.std(), f"{name}_n": int(len(values))}  # NaN: too few
        row["margin"] = float(np.nanmax([2 * row["baseline_std"], 2 * row["attention_free_std"], 0.01]))
        row["baseline_low"], row["baseline_high"] = (intervals or {}).get((model, task, mode), (math.nan, math.nan))
        floor = np.nanmax([row["majority"], row["attention_free"], -math.inf])
        clears_margin = not math.isnan(row["baseline"]) and row["baseline"] - floor > row["margin"]
        row["informative"] = bool(clears_margin and (math.isnan(row["baseline_low"]) or row["baseline_low"] > floor))
        rows.append(row)
    columns = "model task mode metric majority attention_free attention_free_std attention_free_n attention_free_rising"
    columns += " baseline baseline_std baseline_n baseline_low baseline_high margin informative"
    return pd.DataFrame(rows, columns=columns.split())


def main_mode(frame: pd.DataFrame) -> str:
    """The execution mode a table or figure reads: ``faithful`` when present, else the first mode of ``frame``."""
    modes = sorted(frame["mode"].dropna().unique())
    if not modes:
        raise PapaError("There are no runs to read", "Load some results first.")
    return "faithful" if "faithful" in modes else modes[0]


def spread_shared(group: pd.DataFrame) -> pd.DataFrame:
    """Repeat the rows every ranking shares (k = 0, k = all) under each specific ranking of ``group``
    (one model × task), so each ranking's curve runs from no constant head to all of them."""
    shared = group[group["ranking"].isin(SHARED_RANKINGS)]
    specific = group[~group["ranking"].isin(SHARED_RANKINGS)]
    methods = list(specific["ranking"].unique()) or ["none"]
    return pd.concat([specific] + [shared.assign(ranking=m) for m in methods], ignore_index=True)
