"""Hand-made drop cells (rows of :attr:`papa.analysis.basis.Basis.cells`) for the verdict and pooled-interval tests."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from papa.analysis.basis import CELL_COLUMNS, task_family


def cell(
    model: str,
    task: str,
    at: str,
    drop: float,
    samples: list[float] | np.ndarray,
    informative: bool = True,
    score_0: float = 0.8,
    total: int = 8,
) -> dict:
    """One cell: ``drop`` with its resampled drops ``samples`` (its interval is their 2.5/97.5 percentiles)."""
    samples = np.asarray(samples, dtype=float)
    low, high = (
        (np.quantile(samples, [0.025, 0.975]) if np.isfinite(samples).all() else (math.nan, math.nan))
        if len(samples)
        else (math.nan, math.nan)
    )
    clear = bool(len(samples)) and bool(np.isfinite(samples).all())  # as the basis: no drop where s̄₀ ≤ 0 on a resample
    return {
        "model": model,
        "task": task,
        "family": task_family(task),
        "at": at,
        "k": total if at == "all" else total // 2,
        "total_heads": total,
        "score_0": score_0,
        "score": score_0 * (1 - drop),
        "paired_score_0": score_0,
        "paired_score": score_0 * (1 - drop),
        "ranking": "all" if at == "all" else "gates",
        "fraction": 1.0 if at == "all" else 0.5,
        "relative_drop": drop if clear else math.nan,
        "relative_low": float(low),
        "relative_high": float(high),
        "real": bool(low > 0 or high < 0),
        "n_pairs": 3,
        "informative": informative,
        "samples": samples,
    }


def cells(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=[*CELL_COLUMNS, "at"])  # at: as papa.analysis.basis.claim_cells labels them


def spread(centre: float, width: float, n: int = 101) -> np.ndarray:
    """``n`` evenly spaced resampled drops from ``centre − width`` to ``centre + width``."""
    return np.linspace(centre - width, centre + width, n)


def book_data(config: dict, folder: Path):
    """:class:`papa.book.load.BookData` of a loaded grid ``config`` from every result under an artefacts ``folder``
    (``results/``, ``rankings/``), without the plan (hand-made runs, a copied runs folder)."""
    from papa.analysis.results import read_results
    from papa.book.load import book_data_from
    from papa.core.io import read_json_verified

    files = {path.stem: read_json_verified(path, "ranking") for path in sorted((folder / "rankings").glob("*.json"))}
    rankings = {stem: [tuple(h) for h in found["ranking"]] for stem, found in files.items()}
    meta = {stem: found.get("meta") or {} for stem, found in files.items()}
    lr_choices = {path.stem: read_json_verified(path, "lr choice") for path in sorted((folder / "lr").glob("*.json"))}
    return book_data_from(config, read_results(folder / "results"), rankings, lr_choices, meta)


def table_cells(table) -> pd.DataFrame:
    """A display :class:`~papa.book.table_format.Table`'s cells as strings (missing: None), by header."""
    return pd.DataFrame(table.rows, columns=table.columns)
