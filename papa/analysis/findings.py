"""The results chapter's answers, with intervals: the main table, the random baseline, the convergence gate over
the runs, and the paper's claims judged by explicit rules.

Inputs are the tidy frames of :mod:`papa.analysis.results` (:func:`~papa.analysis.results.summarise`,
:func:`~papa.analysis.results.floors_table`) and the paired bootstrap differences of
:func:`papa.analysis.stats.paired_differences`, computed from the result records (which keep the per-example dev
predictions; the tidy frames never copy them).

* :func:`main_table` — per model, task and k (0, ½, ⅞, 15/16, all): the seed mean and spread, the paired
  difference to k = 0 with its 95 % bootstrap interval, the relative drop with its interval, and whether the
  difference is *real* (its interval excludes 0);
* :func:`random_baseline` — at ½ and ⅞ of the heads: each ranking against the pooled seeded random orderings,
  on the same dev examples (:func:`papa.analysis.stats.paired_bootstrap` of ranking − random);
* :func:`gate_runs` — the convergence gate over runs (:func:`papa.analysis.stats.convergence_gate`);
* the claims' verdicts live in :mod:`papa.analysis.verdicts`, on the pooled drops of :mod:`papa.analysis.pooled`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fractions import Fraction

import pandas as pd

from papa.analysis.results import ranking_method
from papa.analysis.stats import convergence_gate, paired_bootstrap, run_statistics, score_interval
from papa.analysis.verdicts import HALF_MAX_DROP, MAX_DROP_ALL, VERDICTS
from papa.core.heads import count_for

#: The fractions of constant heads of the main table (the paper's).
MAIN_FRACTIONS = (Fraction(0), Fraction(1, 2), Fraction(7, 8), Fraction(15, 16), Fraction(1))
#: The fractions at which the random orderings run.
RANDOM_FRACTIONS = (Fraction(1, 2), Fraction(7, 8))
#: The seed-spread reading of :func:`papa.analysis.drops.claims_table` (not the book's verdicts, which are
#: :mod:`papa.analysis.verdicts`'): claim 2's range of the average drop, and the largest drop on a task.
ALL_DROP_RANGE = (0.03, 0.20)
ALL_MAX_DROP = MAX_DROP_ALL
CLAIM_VERDICTS = VERDICTS
MAIN_COLUMNS = [
    "model",
    "task",
    "ranking",
    "k",
    "fraction",
    "total_heads",
    "metric",
    "score",
    "std",
    "seed_min",
    "seed_max",
    "n_seeds",
    "difference",
    "low",
    "high",
    "relative_drop",
    "relative_low",
    "relative_high",
    "real",
    "n_examples",
]
_KEYS = ["model", "task", "ranking", "k"]


def _k_of(fraction: Fraction, total: int) -> int:
    return count_for(fraction, total) if 0 < fraction < 1 else int(fraction * total)


def main_table(summary: pd.DataFrame, differences: pd.DataFrame, ranking: str = "gates", fractions: Sequence[Fraction] = MAIN_FRACTIONS) -> pd.DataFrame:
    """Per model and task, one row per fraction of constant heads (k = 0 ``none``, ``ranking`` in between,
    k = all ``all``): columns :data:`MAIN_COLUMNS`.

    ``score``, ``std``, ``seed_min``/``seed_max``, ``n_seeds``: the seed mean and spread of :func:`summarise`.
    ``difference``, ``low``, ``high``, ``real``, ``relative_drop``, ``relative_low``/``relative_high``,
    ``n_examples``: the row of ``differences`` (:func:`papa.analysis.stats.paired_differences`) with the same model,
    task, ranking and k, copied as they are (NaN / None at k = 0 or where no run stored dev predictions).
    Only runs of the full probe (``probe_input == "all"``) count.
    """
    rows = summary[summary["probe_input"] == "all"]
    diffs = differences[differences["probe_input"] == "all"].set_index(_KEYS) if len(differences) else None
    out = []
    for (model, task), group in rows.groupby(["model", "task"], sort=True):
        total = int(group["total_heads"].iloc[0])
        ks = dict.fromkeys(_k_of(Fraction(f), total) for f in fractions)  # in order, once (15/16 of 8 heads is all 8)
        for k in ks:
            name = ranking_method(ranking, k, total)
            match = group[(group["k"] == k) & (group["ranking"] == name)]
            if match.empty:
                continue
            row = match.iloc[0]
            record = {
                "model": model,
                "task": task,
                "ranking": name,
                "k": k,
                "fraction": k / total,
                "total_heads": total,
                "metric": row["metric"],
                "score": row["mean"],
                "std": row["std"],
                "seed_min": row["min"],
                "seed_max": row["max"],
                "n_seeds": int(row["n_seeds"]),
                **dict.fromkeys(["difference", "low", "high", "relative_drop", "relative_low", "relative_high", "n_examples"], math.nan),
                "real": None,
            }
            if diffs is not None and (model, task, name, k) in diffs.index:
                d = diffs.loc[[(model, task, name, k)]].iloc[0]
                record.update({key: d[key] for key in ("difference", "low", "high", "relative_drop", "relative_low", "relative_high", "n_examples")})
                record["real"] = bool(d["real"])
            out.append(record)
    return pd.DataFrame(out, columns=MAIN_COLUMNS)


# --- the random baseline -------------------------------------------------------------------------------------


def _family(result: dict) -> tuple[str, int, int]:
    c = result["config"]
    k, total = int(c["constant_heads"]), int(c["total_heads"])
    name = ranking_method(c.get("ranking"), k, total)
    return ("random" if name.startswith("random") else name), k, total


def random_baseline(records: Mapping[str, dict], fractions: Sequence[Fraction] = RANDOM_FRACTIONS, resamples: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Does a ranking beat random? At each of ``fractions``, per model and task with seeded random orderings
    (``random-<n>``, pooled as ``random``): one row per other ranking (gates, deviation ...) with its seed-mean
    ``score``, the pooled random ``random_score``, their ``n_runs``/``n_random``, and the paired bootstrap
    (:func:`papa.analysis.stats.paired_bootstrap`, base = the random runs, other = the ranking's runs, on the same
    dev examples) ``difference`` = ranking − random with ``low``/``high``; ``verdict`` "beats random" when the
    interval lies above 0, "worse than random" below 0, else "no real difference".

    ``records``: the result records of the full probe (runs without dev predictions are skipped).
    """
    groups: dict[tuple, list[dict]] = {}
    for result in records.values():
        c = result["config"]
        if not result.get("dev") or c.get("probe_input", "all") != "all":
            continue
        family, k, total = _family(result)
        groups.setdefault((c["model"], result["task"], c.get("mode"), k, total), {}).setdefault(family, []).append(result)
    out = []
    for (model, task, mode, k, total), by_family in sorted(groups.items(), key=lambda item: tuple(str(x) for x in item[0])):
        if "random" not in by_family or not any(k == _k_of(Fraction(f), total) for f in fractions):
            continue
        random_runs = sorted(by_family["random"], key=lambda r: (r["config"].get("ranking") or "", r["config"]["seed"]))
        for family, runs in sorted(by_family.items()):
            if family == "random":
                continue
            runs = sorted(runs, key=lambda r: r["config"]["seed"])
            token = bool(runs[0]["dev"].get("lengths"))
            stats = paired_bootstrap([run_statistics(r) for r in random_runs], [run_statistics(r) for r in runs], runs[0]["metric"], token, resamples, seed)
            low, high = stats["low"], stats["high"]
            verdict = "beats random" if low > 0 else "worse than random" if high < 0 else "no real difference"
            out.append(
                {
                    "model": model,
                    "task": task,
                    "mode": mode,
                    "k": k,
                    "total_heads": total,
                    "fraction": k / total,
                    "ranking": family,
                    "score": stats["score"],
                    "random_score": stats["base_score"],
                    "n_runs": stats["n_runs"],
                    "n_random": stats["n_base"],
                    "difference": stats["difference"],
                    "low": low,
                    "high": high,
                    "verdict": verdict,
                }
            )
    columns = ["model", "task", "mode", "k", "total_heads", "fraction", "ranking", "score", "random_score", "n_runs", "n_random", "difference", "low", "high", "verdict"]
    return pd.DataFrame(out, columns=columns)


# --- the convergence gate over runs --------------------------------------------------------------------------


def baseline_intervals(records: Mapping[str, dict], main: pd.DataFrame, resamples: int = 2000, seed: int = 0) -> dict[tuple, tuple[float, float]]:
    """Per (model, task, mode): the 95% bootstrap interval over dev examples of the k = 0 probe's seed-mean score
    (the main metric, :func:`papa.analysis.stats.score_interval`), from the dev predictions of ``main``'s k = 0
    runs on all states. A group has none unless every run stores its dev predictions and all score the same dev
    examples (one ``data.eval_indices_sha``), so the interval is always about the seeds the score averages."""
    rows = main[(main["k"] == 0) & (main["probe_input"] == "all") & main["is_main"]]
    intervals = {}
    for (model, task, mode), group in rows.groupby(["model", "task", "mode"], sort=True):
        runs = [records.get(r) or {} for r in sorted(set(group["run_id"]))]
        if not all(r.get("dev") for r in runs) or len({((r.get("data") or {}).get("eval_indices_sha"), len(r["dev"]["labels"])) for r in runs}) != 1:
            continue
        token = bool(runs[0]["dev"].get("lengths"))
        found = score_interval([run_statistics(r) for r in runs], runs[0]["metric"], token, resamples, seed)
        intervals[model, task, mode] = (found["low"], found["high"])
    return intervals


def gate_runs(tidy: pd.DataFrame) -> tuple[set[str], dict]:
    """The convergence gate over the runs of ``tidy`` (one row per run × metric, with ``converged``):
    ``(kept run ids, summary)`` of :func:`papa.analysis.stats.convergence_gate` (a run without a held-out curve
    counts as *unknown* and is left out)."""
    runs = tidy.drop_duplicates("run_id")[["run_id", "converged"]] if len(tidy) else pd.DataFrame(columns=["run_id", "converged"])
    kept, summary = convergence_gate(runs.astype({"converged": object}))
    return set(kept["run_id"]), summary


__all__ = [
    "ALL_DROP_RANGE",
    "ALL_MAX_DROP",
    "CLAIM_VERDICTS",
    "HALF_MAX_DROP",
    "MAIN_COLUMNS",
    "MAIN_FRACTIONS",
    "RANDOM_FRACTIONS",
    "gate_runs",
    "main_table",
    "random_baseline",
]
