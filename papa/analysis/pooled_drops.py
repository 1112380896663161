"""Pooled numbers with intervals of their own (issue 26): the average relative drop over many model/task pairs
with a bootstrap interval of that average, and claim 3, "better models lose more", on the same per-model averages.

Every drop averaged here is a cell of :mod:`papa.analysis.basis` (its ``claim_cells``: the converged runs, each
drop paired by probe seed); this module only pools them.

**Pooled interval** (:func:`pooled_drop`): the bootstrap resamples each dev set within itself (every task's own
examples, :func:`papa.analysis.bootstrap.resample_rows`: one stream per dev set, so every model and k of a task, and
NER and POS, which share their sentences, are resampled on the same draws: paired across k and models). On each
of the R resamples every cell's relative drop is recomputed (``relative_samples``) and the cells are averaged; the
interval is the 2.5 and 97.5 percentiles of those R averages. R = :data:`papa.analysis.bootstrap.RESAMPLES` (2,000),
seed 0.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd


def pooled_drop(cells: pd.DataFrame) -> dict:
    """The average relative drop over ``cells`` (rows of :func:`papa.analysis.basis.claim_cells`) with the 95%
    percentile bootstrap interval of that average: ``value``, ``low``, ``high``, ``n`` (cells averaged),
    ``excluded`` (cells whose drop is undefined: a k = 0 score ≤ 0 on the dev set or on a resample), ``models``,
    ``tasks`` (sorted, of the cells averaged). Without a cell: NaN and ``n`` = 0."""
    kept = cells[cells["relative_drop"].notna()]
    out = {"n": int(len(kept)), "excluded": int(len(cells) - len(kept))}
    out |= {"models": sorted(set(kept["model"])), "tasks": sorted(set(kept["task"]))}
    if kept.empty:
        return out | {"value": math.nan, "low": math.nan, "high": math.nan}
    averages = np.vstack(kept["samples"].tolist()).mean(0)  # [R]
    low, high = np.quantile(averages, [0.025, 0.975])
    return out | {"value": float(kept["relative_drop"].mean()), "low": float(low), "high": float(high)}


def select(cells: pd.DataFrame, at: str, informative: bool | None = True, families: Iterable[str] | None = None):
    """The cells at ``at`` ("half" / "all"), of informative pairs only (``informative=True``) or of every pair
    (None), of the given task ``families`` (None: all)."""
    keep = cells["at"] == at
    if informative is not None:
        keep &= cells["informative"] == informative
    if families is not None:
        keep &= cells["family"].isin(list(families))
    return cells[keep]


def model_drops(cells: pd.DataFrame) -> pd.DataFrame:
    """Per model: :func:`pooled_drop` at half and at all heads over its informative cells. Columns: model,
    total_heads, ``drop_half``, ``drop_half_low``, ``drop_half_high``, ``n_tasks_half``, the same for ``all``,
    and ``tasks`` (the tasks averaged at all heads, comma-separated)."""
    out = []
    for model, group in cells.groupby("model", sort=True):
        record: dict = {"model": model, "total_heads": int(group["total_heads"].iloc[0])}
        for at in ("half", "all"):
            p = pooled_drop(select(group, at))
            record |= {f"drop_{at}": p["value"], f"drop_{at}_low": p["low"], f"drop_{at}_high": p["high"]}
            record[f"n_tasks_{at}"] = p["n"]
        record["tasks"] = ", ".join(p["tasks"])  # the tasks at all heads
        out.append(record)
    drops = [f"drop_{at}{s}" for at in ("half", "all") for s in ("", "_low", "_high")]
    return pd.DataFrame(out, columns=["model", "total_heads", *drops, "n_tasks_half", "n_tasks_all", "tasks"])


def claim3_points(
    cells: pd.DataFrame, informative: bool | None = True, families: Iterable[str] | None = None
) -> tuple[pd.DataFrame, list[str]]:
    """Claim 3's points from the all-heads cells: one per model, its :func:`pooled_drop` (``drop``, ``low``,
    ``high``) and its mean k = 0 score (``score``), both over the tasks that *every* model has (so that no model's
    average rises or falls by which tasks it has), and ``n_tasks``. Returns ``(points, the common tasks)``."""
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


# --- claim 3: better models lose more --------------------------------------------------------------


def _ranks(values: np.ndarray) -> np.ndarray:
    return pd.Series(values).rank(method="average").to_numpy()


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    x, y = x - x.mean(), y - y.mean()
    denominator = math.sqrt(float((x * x).sum() * (y * y).sum()))
    return float((x * y).sum() / denominator) if denominator > 0 else math.nan


def spearman_exact_p(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Spearman's ρ and its one-sided permutation p-value P(ρ_perm ≥ ρ): exact over all ``n!`` orderings of
    ``y`` for ``n`` ≤ 9, else over :data:`PERMUTATIONS` seeded random orderings plus the observed one, so
    p ≥ 1/20,001 (ties by average ranks)."""
    rx, ry = _ranks(np.asarray(x, float)), _ranks(np.asarray(y, float))
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


def claim3(points: pd.DataFrame, alpha: float = 0.05) -> dict:
    """The claim-3 verdict from one point per model: ``drop`` (average relative drop with all heads constant)
    and ``score`` (average k = 0 score). "Better models lose more" predicts a positive association.

    Fewer than 3 models: ``"not testable"`` (two points always give ρ = ±1). Otherwise Spearman's ρ (with its
    exact one-sided permutation p-value) and Pearson's r over the ``n`` models; ``"reproduced"`` when ρ > 0 with
    p < ``alpha``, ``"contradicted"`` when ρ < 0 with P(ρ_perm ≤ ρ) < ``alpha``, else ``"inconclusive"``. With
    3 models the smallest possible p is 1/6, so 3 models can at most say ``"inconclusive"`` with a direction.
    """
    frame = points.dropna(subset=["drop", "score"])
    n = int(len(frame))
    out = {"n": n, "spearman": math.nan, "pearson": math.nan, "p_value": math.nan}
    out |= {"direction": "none", "verdict": "not testable"}
    if n < 3:
        return out
    x, y = frame["score"].to_numpy(float), frame["drop"].to_numpy(float)
    rho, p_greater = spearman_exact_p(x, y)
    _, p_less = spearman_exact_p(x, -y)
    out.update(spearman=rho, pearson=_pearson(x, y))
    if math.isnan(rho) or rho == 0:
        out.update(p_value=1.0, verdict="inconclusive")
        return out
    out["direction"] = "better models lose more" if rho > 0 else "better models lose less"
    p = p_greater if rho > 0 else p_less
    out["p_value"] = p
    out["verdict"] = ("reproduced" if rho > 0 else "contradicted") if p < alpha else "inconclusive"
    return out
