"""The paper's three claims judged from pooled intervals (issue 26), by the rules the method chapter states before
the results: each claim's :class:`Verdict` is one of :data:`VERDICTS`. No prose here: a verdict carries the rule's
branch that gave it (``case``) and the numbers that branch read (``facts``); :mod:`papa.book.claim_texts` words them.

Claims 1, 2a and 2b read the pooled average relative drop and its bootstrap interval ``[low, high]``
(:func:`papa.analysis.pooled_drops.pooled_drop`) or each task's; claim 3 reads Spearman's ρ with its exact one-sided
p (:func:`papa.analysis.pooled_drops.claim3`). A claim without the numbers it needs is *not testable*.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import pandas as pd

from papa.analysis.pooled_drops import claim3, claim3_points, pooled_drop, select

#: Claim 1: "little or no drop" is an average relative drop of at most this.
HALF_MAX_DROP = 0.05
#: Claim 2: the paper's average relative drop with every head constant, and its largest on a task.
PAPER_DROP_ALL = 0.08
MAX_DROP_ALL = 0.20
#: Claim 3: the one-sided significance level.
ALPHA = 0.05
CLAIMS = (
    "1. Half the heads constant: little or no drop",
    "2a. All heads constant: an average drop of about 8%",
    "2b. All heads constant: at most 20% on any task",
    "3. Better models lose more",
)
#: The glue and column keys of the claims, in :data:`CLAIMS` order.
CLAIM_KEYS = ("claim1", "claim2", "claim2b", "claim3")
#: Every verdict a claim can get.
VERDICTS = (
    "reproduced",
    "reproduced with a smaller effect",
    "reproduced with a larger effect",
    "points the paper's way, not significant",
    "points against the paper, not significant",
    "not reproduced",
    "not testable",
)
REPRODUCED, SMALLER, LARGER, PAPER_WAY, AGAINST, NOT_REPRODUCED, NOT_TESTABLE = VERDICTS
#: What the paper itself states in numbers, with where (of arXiv:2211.03495), one ``what|words|where`` per claim:
#: every other per-task or per-model result of the paper is drawn (its Figures 2 and 4) for models that did not run
#: here (BERT, RoBERTa, DeBERTa), so none is quoted.
PAPER_NUMBERS = tuple(
    (what, words, f"{where} of arXiv:2211.03495")
    for what, words, where in (
        row.split("|")
        for row in (
            "half of the heads constant|“little or no performance drop”; “in almost all cases … no major"
            " drop”|abstract and Section 4",
            "every head constant, average|“an average relative drop of only 8% from the probing baseline”|abstract",
            "every head constant, one task|at most ≈ 20% (this book's reading of the curves; the text states no"
            " per-task bound)|Figure 2",
            "better models lose more|“better-performing models lose more from applying our method than weaker"
            " models”|abstract and Figure 4",
        )
    )
)
#: The sensitivity table's bases: (label, informative, families).
BASES = (
    ("informative tasks (the verdicts' basis)", True, None),
    ("every task", None, None),
    ("sentence-level tasks (CoLA, SST-2, MRPC, MNLI), informative", True, ["sentence"]),
    ("token-level tasks (NER, POS), informative", True, ["token"]),
)


@dataclass(frozen=True)
class Verdict:
    """A claim's verdict: ``label`` (one of :data:`VERDICTS`), the rule's branch that gave it (``case``) and the
    numbers that branch read (``facts``: fractions, a pair's ``model``/``task``, or claim 3's ``n``, ``rho``, ``p``)."""

    label: str
    case: str
    facts: Mapping[str, float | str] = field(default_factory=dict)


def _nan(*values: float) -> bool:
    return any(v is None or (isinstance(v, float) and math.isnan(v)) for v in values)


def claim1_verdict(value: float, low: float, high: float) -> Verdict:
    """Claim 1 from the pooled drop at half the heads: is it shown to be at most :data:`HALF_MAX_DROP`?"""
    if _nan(value, low, high):
        return Verdict(NOT_TESTABLE, "no_cells")
    facts = {"value": value, "low": low, "high": high, "limit": HALF_MAX_DROP}
    if high <= HALF_MAX_DROP:
        return Verdict(REPRODUCED, "interval_at_or_below", facts)
    if low > HALF_MAX_DROP:
        return Verdict(NOT_REPRODUCED, "interval_above", facts)
    if value <= HALF_MAX_DROP:
        return Verdict(PAPER_WAY, "mean_at_or_below", facts)
    return Verdict(AGAINST, "mean_above", facts)


def claim2_verdict(value: float, low: float, high: float) -> Verdict:
    """Claim 2a from the pooled drop with every head constant: a real drop, against :data:`PAPER_DROP_ALL`."""
    if _nan(value, low, high):
        return Verdict(NOT_TESTABLE, "no_cells")
    facts = {"value": value, "low": low, "high": high, "paper": PAPER_DROP_ALL}
    if high < 0:
        return Verdict(NOT_REPRODUCED, "real_gain", facts)
    if low <= 0:
        return Verdict(PAPER_WAY, "drop_not_real", facts) if value > 0 else Verdict(AGAINST, "no_drop", facts)
    if low > PAPER_DROP_ALL:
        return Verdict(LARGER, "above_paper", facts)
    if high < PAPER_DROP_ALL:
        return Verdict(SMALLER, "below_paper", facts)
    return Verdict(REPRODUCED, "holds_paper", facts)


def claim2_bound_verdict(cells: pd.DataFrame) -> Verdict:
    """Claim 2's second part, the bound: no task loses more than :data:`MAX_DROP_ALL` with every head constant.
    ``cells``: the all-heads cells judged (each with ``relative_drop``, ``relative_low``/``relative_high``)."""
    usable = cells.dropna(subset=["relative_drop", "relative_low", "relative_high"])
    if usable.empty:
        return Verdict(NOT_TESTABLE, "no_cells")
    pair = lambda row: {"model": row["model"], "task": row["task"], "limit": MAX_DROP_ALL}
    above = usable[usable["relative_low"] > MAX_DROP_ALL]
    if len(above):
        row = above.loc[above["relative_low"].idxmax()]
        return Verdict(NOT_REPRODUCED, "task_above", pair(row) | {"low": row["relative_low"]})
    if (usable["relative_high"] <= MAX_DROP_ALL).all():
        return Verdict(REPRODUCED, "every_task_below", {"high": usable["relative_high"].max(), "limit": MAX_DROP_ALL})
    row = usable.loc[usable["relative_drop"].idxmax()]
    facts = pair(row) | {"value": row["relative_drop"], "low": row["relative_low"]}
    if row["relative_drop"] <= MAX_DROP_ALL:
        return Verdict(PAPER_WAY, "largest_at_or_below", facts)
    return Verdict(AGAINST, "largest_above", facts)


def claim3_verdict(better: Mapping) -> Verdict:
    """Claim 3 from :func:`papa.analysis.pooled_drops.claim3`'s dict (``n``, ``spearman``, ``p_value``)."""
    n, rho, p = int(better.get("n", 0)), better.get("spearman", math.nan), better.get("p_value", math.nan)
    if n < 3:
        return Verdict(NOT_TESTABLE, "too_few_models", {"n": n})
    if _nan(rho):
        return Verdict(AGAINST, "no_variation", {"n": n})
    facts = {"n": n, "rho": rho, "p": p, "alpha": ALPHA}
    if p < ALPHA and rho > 0:
        return Verdict(REPRODUCED, "significant", facts)
    if p < ALPHA and rho < 0:
        return Verdict(NOT_REPRODUCED, "significant_reverse", facts)
    return Verdict(PAPER_WAY, "paper_way", facts) if rho > 0 else Verdict(AGAINST, "against", facts)


def judge(cells: pd.DataFrame, informative: bool | None = True, families: list[str] | None = None) -> dict:
    """The claims on one basis (``informative``, ``families``: :func:`papa.analysis.pooled_drops.select`): each
    claim's :class:`Verdict` (:data:`CLAIM_KEYS`) and what they read: ``half``/``all`` (pooled drops), ``bound``
    (claim 2b's cells), ``points``/``common``/``better`` (claim 3's points, their tasks and statistics)."""
    half, full = (pooled_drop(select(cells, at, informative, families)) for at in ("half", "all"))
    bound = select(cells, "all", informative, families)
    points, common = claim3_points(cells, informative, families)
    better = claim3(points)
    out = {"half": half, "all": full, "bound": bound, "points": points, "common": common, "better": better}
    out["claim1"] = claim1_verdict(half["value"], half["low"], half["high"])
    out["claim2"] = claim2_verdict(full["value"], full["low"], full["high"])
    out["claim2b"] = claim2_bound_verdict(bound)
    out["claim3"] = claim3_verdict(better)
    return out
