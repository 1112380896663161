"""Pooled numbers with intervals of their own: the average relative drop over many cells of
:func:`papa.analysis.basis.claim_cells` with a bootstrap interval of that average, and claim 3's statistics.

**Pooled interval** (:func:`pooled_drop`): every dev set is resampled on its own stream
(:func:`papa.analysis.bootstrap.resample_rows`), so cells of one task (any model, any k) share their resamples; on
each of the R resamples the cells' relative drops (``samples``) are averaged, and the interval is the 2.5 and 97.5
percentiles of those R averages.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from papa.analysis.bootstrap import percentile_interval


def pooled_drop(cells: pd.DataFrame) -> dict:
    """The average relative drop over ``cells`` with its 95% interval: ``value``, ``low``, ``high``, ``n`` (cells
    averaged), ``excluded`` (cells whose drop is undefined), and the ``models`` and ``tasks`` averaged."""
    kept = cells[cells["relative_drop"].notna()]
    out = {"n": int(len(kept)), "excluded": int(len(cells) - len(kept))}
    out |= {"models": sorted(set(kept["model"])), "tasks": sorted(set(kept["task"]))}
    if kept.empty:
        return out | {"value": math.nan, "low": math.nan, "high": math.nan}
    averages = np.vstack(kept["samples"].tolist()).mean(0)  # [R]
    low, high = percentile_interval(averages)
    return out | {"value": float(kept["relative_drop"].mean()), "low": low, "high": high}


def select(cells: pd.DataFrame, at: str, informative: bool | None = True, families: Iterable[str] | None = None):
    """The cells at ``at`` ("half" / "all"), of informative pairs only (``informative=True``) or of every pair
    (None), of the given task ``families`` (None: all)."""
    keep = cells["at"] == at
    if informative is not None:
        keep &= cells["informative"] == informative
    if families is not None:
        keep &= cells["family"].isin(list(families))
    return cells[keep]


#: The pooled drop columns of :func:`model_drops`.
DROP_COLUMNS = [f"drop_{at}{end}" for at in ("half", "all") for end in ("", "_low", "_high")]


def model_drops(cells: pd.DataFrame) -> pd.DataFrame:
    """Per model: :func:`pooled_drop` at half and at all heads over its informative cells (``drop_half``, its
    ``_low``/``_high``, ``n_tasks_half``, the same for ``all``) and the ``tasks`` averaged at all heads."""
    out = []
    for model, group in cells.groupby("model", sort=True):
        record: dict = {"model": model, "total_heads": int(group["total_heads"].iloc[0])}
        for at in ("half", "all"):
            p = pooled_drop(select(group, at))
            record |= {f"drop_{at}": p["value"], f"drop_{at}_low": p["low"], f"drop_{at}_high": p["high"]}
            record[f"n_tasks_{at}"] = p["n"]
        out.append(record | {"tasks": ", ".join(p["tasks"])})  # the tasks at all heads
    return pd.DataFrame(out, columns=["model", "total_heads", *DROP_COLUMNS, "n_tasks_half", "n_tasks_all", "tasks"])


def claim3_points(
    cells: pd.DataFrame, informative: bool | None = True, families: Iterable[str] | None = None
) -> tuple[pd.DataFrame, list[str]]:
    """``(points, common tasks)``: per model, its :func:`pooled_drop` with all heads constant (``drop``, ``low``,
    ``high``) and mean k = 0 ``score`` over the tasks that *every* model has, and ``n_tasks``."""
    rows = select(cells, "all", informative, families)
    rows = rows[rows["relative_drop"].notna()]
    models = sorted(set(rows["model"]))
    common = sorted(t for t, g in rows.groupby("task") if set(g["model"]) >= set(models))
    out = []
    for model in models:
        mine = rows[(rows["model"] == model) & rows["task"].isin(common)]
        if mine.empty:
            continue
        p = pooled_drop(mine)
        out.append([model, p["value"], p["low"], p["high"], float(mine["score_0"].mean()), int(len(mine))])
    return pd.DataFrame(out, columns=["model", "drop", "low", "high", "score", "n_tasks"]), common


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    x, y = x - x.mean(), y - y.mean()
    denominator = math.sqrt(float((x * x).sum() * (y * y).sum()))
    return float((x * y).sum() / denominator) if denominator > 0 else math.nan


def spearman_exact_p(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Spearman's ρ and its one-sided permutation p-value P(ρ_perm ≥ ρ): exact over all ``n!`` orderings of
    ``y`` for ``n`` ≤ 9, else over :data:`PERMUTATIONS` seeded random orderings plus the observed one, so
    p ≥ 1/20,001 (ties by average ranks)."""
    rx, ry = (pd.Series(np.asarray(v, float)).rank(method="average").to_numpy() for v in (x, y))
    rho = _pearson(rx, ry)
    if math.isnan(rho):
        return rho, math.nan
    if len(rx) <= 9:
        perms = [_pearson(rx, ry[list(p)]) for p in itertools.permutations(range(len(ry)))]
        return rho, sum(r >= rho - 1e-12 for r in perms) / len(perms)
    rng = np.random.default_rng(0)
    perms = [_pearson(rx, ry[rng.permutation(len(ry))]) for _ in range(PERMUTATIONS)]
    return rho, (1 + sum(r >= rho - 1e-12 for r in perms)) / (1 + len(perms))  # the observed ordering counts once


#: Random orderings of the permutation test above 9 models (9! = 362,880 is the exact test's largest).
PERMUTATIONS = 20000


def claim3(points: pd.DataFrame) -> dict:
    """Claim 3's statistics from one point per model (``drop``, ``score``): ``n``, Spearman's ``spearman`` with the
    one-sided exact ``p_value`` in its own direction (1 for ρ = 0), and Pearson's ``pearson``; NaN below 3 models
    (two points always give ρ = ±1). The verdict is :func:`papa.analysis.claims.claim3_verdict`'s."""
    frame = points.dropna(subset=["drop", "score"])
    out = {"n": int(len(frame)), "spearman": math.nan, "pearson": math.nan, "p_value": math.nan}
    if len(frame) < 3:
        return out
    x, y = frame["score"].to_numpy(float), frame["drop"].to_numpy(float)
    rho, p_greater = spearman_exact_p(x, y)
    out.update(spearman=rho, pearson=_pearson(x, y))
    if math.isnan(rho) or rho == 0:
        return out | {"p_value": 1.0}
    return out | {"p_value": p_greater if rho > 0 else spearman_exact_p(x, -y)[1]}
