"""The results chapter's tables with intervals (the claims' verdicts are in :mod:`papa.analysis.claims`):

* :func:`main_table` — per model, task and k (0, ½, ⅞, 15/16, all): the seed mean and spread, the paired
  difference to k = 0 with its 95 % bootstrap interval, the relative drop with its interval, and whether the
  difference is *real* (its interval excludes 0);
* :func:`random_baseline` — at ½ and ⅞ of the heads: each ranking against the pooled seeded random orderings,
  on the same dev examples (:func:`papa.analysis.bootstrap.paired_bootstrap` of ranking − random).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction

import pandas as pd

from papa.analysis.bootstrap import paired_bootstrap, run_statistics
from papa.analysis.results import ranking_method
from papa.core.heads import count_for

#: The fractions of constant heads of the main table (the paper's).
MAIN_FRACTIONS = (Fraction(0), Fraction(1, 2), Fraction(7, 8), Fraction(15, 16), Fraction(1))
#: The fractions at which the random orderings run.
RANDOM_FRACTIONS = (Fraction(1, 2), Fraction(7, 8))
MAIN_COLUMNS = (
    "model task ranking k fraction total_heads metric score std seed_min seed_max n_seeds difference low high"
    " relative_drop relative_low relative_high real n_examples"
).split()
#: The paired columns :func:`main_table` copies from a cell.
_PAIRED = ["difference", "low", "high", "relative_drop", "relative_low", "relative_high", "n_examples"]
_KEYS = ["model", "task", "ranking", "k"]


def _k_of(fraction: Fraction, total: int) -> int:
    return count_for(fraction, total) if 0 < fraction < 1 else int(fraction * total)


def main_table(summary: pd.DataFrame, cells: pd.DataFrame, ranking: str = "gates") -> pd.DataFrame:
    """Per model and task, one row per fraction of :data:`MAIN_FRACTIONS` (k = 0 ``none``, ``ranking`` in between,
    k = all ``all``): columns :data:`MAIN_COLUMNS`.

    ``score``, ``std``, ``seed_min``/``seed_max``, ``n_seeds``: the seed mean and spread of :func:`summarise`.
    ``difference``, ``low``, ``high``, ``real``, ``relative_drop``, ``relative_low``/``relative_high``,
    ``n_examples``: the cell of ``cells`` (:attr:`papa.analysis.basis.Basis.cells`, the full probe's) with the same
    model, task, ranking and k, copied as they are (NaN / None at k = 0 or where no seed pairs).
    Only runs of the full probe (``probe_input == "all"``) count.
    """
    rows = summary[summary["probe_input"] == "all"]
    diffs = cells.set_index(_KEYS) if len(cells) else None
    out = []
    for (model, task), group in rows.groupby(["model", "task"], sort=True):
        total = int(group["total_heads"].iloc[0])
        ks = dict.fromkeys(_k_of(f, total) for f in MAIN_FRACTIONS)  # in order, once (15/16 of 8 heads is all 8)
        for k in ks:
            name = ranking_method(ranking, k, total)
            match = group[(group["k"] == k) & (group["ranking"] == name)]
            if match.empty:
                continue
            row = match.iloc[0]
            record = dict(model=model, task=task, ranking=name, k=k, fraction=k / total, total_heads=total)
            record |= dict(metric=row["metric"], score=row["mean"], std=row["std"], seed_min=row["min"])
            record |= dict(seed_max=row["max"], n_seeds=int(row["n_seeds"]), **dict.fromkeys(_PAIRED, math.nan))
            record["real"] = None
            if diffs is not None and (model, task, name, k) in diffs.index:
                d = diffs.loc[[(model, task, name, k)]].iloc[0]
                record |= {key: d[key] for key in _PAIRED} | {"real": bool(d["real"])}
            out.append(record)
    return pd.DataFrame(out, columns=MAIN_COLUMNS)


# --- the random baseline -------------------------------------------------------------------------------------


def _family(result: dict) -> tuple[str, int, int]:
    c = result["config"]
    k, total = int(c["constant_heads"]), int(c["total_heads"])
    name = ranking_method(c.get("ranking"), k, total)
    return ("random" if name.startswith("random") else name), k, total


def random_baseline(records: Mapping[str, dict], resamples: int = 2000) -> pd.DataFrame:
    """Does a ranking beat random? At each of :data:`RANDOM_FRACTIONS`, per model and task with seeded random orderings
    (``random-<n>``, pooled as ``random``): one row per other ranking (gates, deviation ...) with its seed-mean
    ``score``, the pooled random ``random_score``, their ``n_runs``/``n_random``, and the paired bootstrap
    (:func:`papa.analysis.bootstrap.paired_bootstrap`, base = the random runs, other = the ranking's runs, on the same
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
        key = (c["model"], result["task"], c.get("mode"), k, total)
        groups.setdefault(key, {}).setdefault(family, []).append(result)
    out = []
    for (model, task, mode, k, total), by_family in sorted(groups.items(), key=lambda item: tuple(map(str, item[0]))):
        if "random" not in by_family or not any(k == _k_of(f, total) for f in RANDOM_FRACTIONS):
            continue
        order = lambda r: (r["config"].get("ranking") or "", r["config"]["seed"])
        random_stats = [run_statistics(r) for r in sorted(by_family["random"], key=order)]
        for family, runs in sorted(by_family.items()):
            if family == "random":
                continue
            runs = sorted(runs, key=lambda r: r["config"]["seed"])
            token = bool(runs[0]["dev"].get("lengths"))
            st = paired_bootstrap(random_stats, [run_statistics(r) for r in runs], runs[0]["metric"], token, resamples)
            low, high = st["low"], st["high"]
            verdict = "beats random" if low > 0 else "worse than random" if high < 0 else "no real difference"
            keys = [model, task, mode, k, total, k / total, family, st["score"], st["base_score"], st["n_runs"]]
            out.append([*keys, st["n_base"], st["difference"], low, high, verdict])
    columns = "model task mode k total_heads fraction ranking score random_score n_runs n_random difference low high"
    return pd.DataFrame(out, columns=[*columns.split(), "verdict"])
