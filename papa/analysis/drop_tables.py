"""The results chapter's tables with intervals: :func:`main_table` (per model, task and fraction of constant heads)
and :func:`random_baseline` (each ranking against the seeded random orderings)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction

import pandas as pd

from papa.analysis.bootstrap import RESAMPLES, paired_bootstrap, run_statistics
from papa.analysis.results import ranking_family, ranking_method
from papa.core.heads import count_for

#: The fractions of constant heads of the main table (the paper's).
MAIN_FRACTIONS = (Fraction(0), Fraction(1, 2), Fraction(7, 8), Fraction(15, 16), Fraction(1))
#: The fractions at which the random orderings run.
RANDOM_FRACTIONS = (Fraction(1, 2), Fraction(7, 8))
#: A ranking against the seeded random orderings: its paired interval lies above 0, below 0, or holds 0 (codes;
#: :data:`papa.book.words.RANDOM_VERDICTS` writes them).
RANDOM_VERDICTS = ("beats", "worse", "no_difference")
MAIN_COLUMNS = (
    "model task ranking k fraction total_heads metric score std seed_min seed_max n_seeds difference low high"
    " relative_drop relative_low relative_high real n_examples"
).split()
#: The paired columns :func:`main_table` copies from a cell.
_PAIRED = ["difference", "low", "high", "relative_drop", "relative_low", "relative_high", "n_examples"]


def k_of(fraction: Fraction, total: int) -> int:
    """The count of ``total`` heads that ``fraction`` of them makes constant (the paper's rounding inside (0, 1))."""
    return count_for(fraction, total) if 0 < fraction < 1 else int(fraction * total)


def nominal_fraction(k: int, total: int) -> tuple[Fraction, bool]:
    """The share of the heads that ``k`` of ``total`` stands for, and whether it is exact: the paper's fraction
    (½, ⅞, 15/16) whose rounded count is ``k`` (``(7/8, False)`` for 32 of 36), else ``k / total`` exactly."""
    k, total = int(k), int(total)
    paper = (f for f in MAIN_FRACTIONS if 0 < f < 1 and k_of(f, total) == k)
    nominal = next(paper, None) if 0 < k < total else None
    return (nominal, nominal == Fraction(k, total)) if nominal is not None else (Fraction(k, total), True)


def main_table(summary: pd.DataFrame, cells: pd.DataFrame, ranking: str = "gates") -> pd.DataFrame:
    """Per model and task of the full probe, one row per fraction of :data:`MAIN_FRACTIONS` (:data:`MAIN_COLUMNS`):
    the seed mean and spread of ``summary``, and the paired columns of the cell of ``cells`` with the same model,
    task, ranking and k (NaN / None at k = 0 or where no seed pairs)."""
    rows = summary[summary["probe_input"] == "all"]
    diffs = cells.set_index(["model", "task", "ranking", "k"]) if len(cells) else None
    out = []
    for (model, task), group in rows.groupby(["model", "task"], sort=True):
        total = int(group["total_heads"].iloc[0])
        ks = dict.fromkeys(k_of(f, total) for f in MAIN_FRACTIONS)  # in order, once (15/16 of 8 heads is all 8)
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


def random_baseline(records: Mapping[str, dict], resamples: int = RESAMPLES) -> pd.DataFrame:
    """Does a ranking beat random? At each of :data:`RANDOM_FRACTIONS`, per model and task with seeded random
    orderings: one row per other ranking with both seed-mean scores and run counts, the paired bootstrap difference
    ranking − random with its interval, and the ``verdict`` that interval gives."""
    groups: dict[tuple, list[dict]] = {}
    for result in records.values():
        c = result["config"]
        if not result.get("dev") or c.get("probe_input", "all") != "all":
            continue
        key = (c["model"], result["task"], c.get("mode"), int(c["constant_heads"]), int(c["total_heads"]))
        groups.setdefault(key, {}).setdefault(ranking_family(c), []).append(result)
    out = []
    for (model, task, mode, k, total), by_family in sorted(groups.items(), key=lambda item: tuple(map(str, item[0]))):
        if "random" not in by_family or not any(k == k_of(f, total) for f in RANDOM_FRACTIONS):
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
            verdict = "beats" if low > 0 else "worse" if high < 0 else "no_difference"
            keys = [model, task, mode, k, total, k / total, family, st["score"], st["base_score"], st["n_runs"]]
            out.append([*keys, st["n_base"], st["difference"], low, high, verdict])
    columns = "model task mode k total_heads fraction ranking score random_score n_runs n_random difference low high"
    return pd.DataFrame(out, columns=[*columns.split(), "verdict"])
