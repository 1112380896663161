"""Which replacement matters: PAPA's constant against uniform attention, a zero output and the head's
mean output, each read on its own :class:`~papa.analysis.basis.Basis` (the main grid's k = 0 runs with that mode's
runs), so every mode's drop is gated, paired and resampled exactly as PAPA's.

Every dev set is resampled on one stream, so a mode's *extra drop* over PAPA, ``drop(mode) − drop(papa)``, has the
percentile interval of its R resampled differences, and a pooled extra drop that of the R resampled means. Each
alternative (:data:`ALTERNATIVES`) is answered by its pooled extra drop's interval (:func:`answer`: one of
:data:`ANSWERS`, a code that :data:`papa.book.words.REPLACEMENT_ANSWERS` writes in words).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from papa.analysis.basis import Basis, claim_cells
from papa.analysis.bootstrap import percentile_interval
from papa.analysis.pooled_drops import pooled_drop

#: Every answer: the alternative loses more than PAPA's constant (its interval above 0), less (below 0), no difference
#: shown (the interval holds 0), or not testable (no informative pair).
ANSWERS = ("more", "less", "no_difference", "not_testable")
#: The modes, in the chapter's order: PAPA's constant (the task-average attention matrix, V input-dependent),
#: uniform attention over the real tokens, the head's mean output per position, and a zero output.
MODES = ("papa", "uniform", "mean", "zero")
PAPA, UNIFORM, MEAN, ZERO = MODES
#: The alternatives to PAPA's constant, each asking one question (in the chapter's order).
ALTERNATIVES = (UNIFORM, MEAN, ZERO)
#: Columns of :func:`extra_drops`.
EXTRA_COLUMNS = "model task family at k replacement drop_papa relative_drop extra low high informative samples".split()


def replacement_cells(bases: Mapping[str, Basis], ranking: str) -> pd.DataFrame:
    """The claim cells (:func:`papa.analysis.basis.claim_cells`: at half heads in ``ranking``'s order and at all
    heads) of every mode's basis, with a ``replacement`` column; ``bases`` maps a mode to its basis."""
    frames = [claim_cells(basis, ranking).assign(replacement=mode) for mode, basis in bases.items()]
    frames = [frame for frame in frames if len(frame)]
    empty = pd.DataFrame(columns=["replacement", "model", "task", "at"])
    return pd.concat(frames, ignore_index=True) if frames else empty


def extra_drops(cells: pd.DataFrame) -> pd.DataFrame:
    """Per model, task, ``at`` and alternative mode with a defined drop on both sides: the mode's drop, PAPA's, and
    the extra drop ``drop − drop_papa`` with its paired 95% interval and its ``[R]`` resampled values
    (:data:`EXTRA_COLUMNS`)."""
    rows = []
    papa = {(c.model, c.task, c.at): c for c in cells[cells["replacement"] == "papa"].itertuples(index=False)}
    for c in cells[cells["replacement"] != "papa"].itertuples(index=False):
        base = papa.get((c.model, c.task, c.at))
        if base is None or not (math.isfinite(c.relative_drop) and math.isfinite(base.relative_drop)):
            continue
        samples = np.asarray(c.samples, dtype=float) - np.asarray(base.samples, dtype=float)
        low, high = percentile_interval(samples)
        keys = [c.model, c.task, c.family, c.at, int(c.k), c.replacement, float(base.relative_drop)]
        extra = float(c.relative_drop - base.relative_drop)
        ok = bool(c.informative and base.informative)
        rows.append([*keys, float(c.relative_drop), extra, float(low), float(high), ok, samples])
    return _sorted(pd.DataFrame(rows, columns=EXTRA_COLUMNS), ["model", "task", "at"])


def _sorted(frame: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """``frame`` sorted by ``by``, replacements in :data:`MODES` order."""
    order = {mode: i for i, mode in enumerate(MODES)}
    key = lambda s: s.map(order) if s.name == "replacement" else s
    return frame.sort_values(by, key=key, ignore_index=True)


def answer(pooled: Mapping[str, float]) -> str:
    """The answer (:data:`ANSWERS`) from a pooled extra drop: "more" (its interval lies above 0: the alternative
    loses more than PAPA's constant), "less" (below 0), "no_difference" (it holds 0) or "not_testable" (no
    informative pair)."""
    if not pooled.get("n"):
        return "not_testable"
    if pooled["low"] > 0:
        return "more"
    if pooled["high"] < 0:
        return "less"
    return "no_difference"


def answers(extra: pd.DataFrame, at: str = "all") -> pd.DataFrame:
    """One row per alternative (:data:`ALTERNATIVES`) at ``at``: the mean extra drop over every model's informative
    tasks with its interval, the pairs it averages and the :func:`answer`."""
    rows = []
    for mode in ALTERNATIVES:
        mine = extra[(extra["replacement"] == mode) & (extra["at"] == at) & extra["informative"]]
        p = pooled_drop(mine.assign(relative_drop=mine["extra"]))
        row = {"replacement": mode, "at": at, "extra": p["value"], "low": p["low"]}
        rows.append(row | {"high": p["high"], "n": p["n"], "models": ", ".join(p["models"]), "answer": answer(p)})
    return pd.DataFrame(rows)


def pooled_by_model(cells: pd.DataFrame) -> pd.DataFrame:
    """Per model, mode and ``at``: the mean relative drop over the model's informative tasks with its pooled 95%
    interval (:func:`papa.analysis.pooled_drops.pooled_drop`), and the tasks averaged."""
    rows = []
    for (model, mode, at), group in cells.groupby(["model", "replacement", "at"], sort=True):
        p = pooled_drop(group[group["informative"]])
        rows.append([model, mode, at, p["value"], p["low"], p["high"], p["n"], ", ".join(p["tasks"])])
    frame = pd.DataFrame(rows, columns=["model", "replacement", "at", "value", "low", "high", "n", "tasks"])
    return _sorted(frame, ["model", "at", "replacement"])
