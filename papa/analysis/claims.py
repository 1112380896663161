"""The paper's claims judged from pooled intervals, by the rules the method chapter states before the results.

A claim is one :class:`Claim` (:data:`CLAIMS`): its key, the cells it reads and the limit its rule holds the number
against. Each claim is judged **once** per basis (:func:`judge`) into a frozen :class:`Judgement`: the number the
verdict rests on with its interval and what that interval covers, the verdict (one of :data:`VERDICTS`, a code) and
the reason (the rule's branch that gave it, a code) with the numbers that branch read (``facts``). No words here:
:mod:`papa.book.words` writes verdicts, reasons and claims in English.

Claims 1, 2a and 2b read the pooled average relative drop and its bootstrap interval ``[low, high]``
(:func:`papa.analysis.pooled_drops.pooled_drop`) or each task's; claim 3 reads Spearman's ρ with its exact one-sided
p (:func:`papa.analysis.pooled_drops.claim3`). A claim without the numbers it needs is *not testable*.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
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
#: Every verdict a claim can get (codes; :data:`papa.book.words.VERDICT_WORDS` writes them).
VERDICTS = ("reproduced", "smaller", "larger", "paper_way", "against", "not_reproduced", "not_testable")
REPRODUCED, SMALLER, LARGER, PAPER_WAY, AGAINST, NOT_REPRODUCED, NOT_TESTABLE = VERDICTS
#: What a judgement's interval covers: the pooled 95% bootstrap interval of an average over pairs, one pair's paired
#: 95% bootstrap interval, or no interval (a rank correlation with its exact p).
COVERS = ("pooled", "pair", "none")
#: The sensitivity table's bases: (code, informative, families); :data:`papa.book.words.BASIS_WORDS` names them.
BASES = (
    ("informative", True, None),
    ("every", None, None),
    ("sentence", True, ["sentence"]),
    ("token", True, ["token"]),
)


@dataclass(frozen=True)
class Judgement:
    """One claim judged on one basis: the number its verdict rests on (``value``, a rate or ρ) with its interval
    (``low``/``high``, NaN without one) and what that interval ``covers`` (:data:`COVERS`), the ``verdict``
    (:data:`VERDICTS`), the ``reason`` (the rule's branch), the numbers that branch read (``facts``) and, when the
    number is one pair's (``covers`` "pair"), that ``pair`` (model, task)."""

    value: float
    low: float
    high: float
    covers: str
    verdict: str
    reason: str
    facts: Mapping[str, float | str] = field(default_factory=dict)
    pair: tuple[str, str] | None = None


@dataclass(frozen=True)
class Evidence:
    """What the claims read on one basis: the pooled drops at half and all heads (``pooled_drop`` dicts), claim 2b's
    all-heads cells (``bound``), claim 3's per-model ``points`` over the ``common`` tasks and its statistics
    (``better``: ``n``, ``spearman``, ``p_value``, ``pearson``)."""

    half: Mapping
    all: Mapping
    bound: pd.DataFrame
    points: pd.DataFrame
    common: list[str]
    better: Mapping


@dataclass(frozen=True)
class Claim:
    """One claim of the paper: its ``key`` (glue and column key), the cells it reads (``at``: half or all heads),
    the ``limit`` its rule holds the number against, and the ``rule`` that judges it from :class:`Evidence`."""

    key: str
    at: str
    limit: float
    rule: Callable[[Evidence], Judgement]


@dataclass(frozen=True)
class Judged:
    """The claims judged once on one basis: the :class:`Evidence` they read and one :class:`Judgement` per claim
    key, in :data:`CLAIMS` order."""

    evidence: Evidence
    judgements: Mapping[str, Judgement]


def _nan(*values: float) -> bool:
    return any(v is None or (isinstance(v, float) and math.isnan(v)) for v in values)


def _untestable(covers: str, facts: Mapping | None = None, reason: str = "no_cells") -> Judgement:
    return Judgement(math.nan, math.nan, math.nan, covers, NOT_TESTABLE, reason, facts or {})


def claim1_verdict(value: float, low: float, high: float) -> Judgement:
    """Claim 1 from the pooled drop at half the heads: is it shown to be at most :data:`HALF_MAX_DROP`?"""
    if _nan(value, low, high):
        return _untestable("pooled")
    judged = lambda verdict, reason: Judgement(value, low, high, "pooled", verdict, reason, facts)
    facts = {"value": value, "low": low, "high": high, "limit": HALF_MAX_DROP}
    if high <= HALF_MAX_DROP:
        return judged(REPRODUCED, "interval_at_or_below")
    if low > HALF_MAX_DROP:
        return judged(NOT_REPRODUCED, "interval_above")
    if value <= HALF_MAX_DROP:
        return judged(PAPER_WAY, "mean_at_or_below")
    return judged(AGAINST, "mean_above")


def claim2_verdict(value: float, low: float, high: float) -> Judgement:
    """Claim 2a from the pooled drop with every head constant: a real drop, against :data:`PAPER_DROP_ALL`."""
    if _nan(value, low, high):
        return _untestable("pooled")
    judged = lambda verdict, reason: Judgement(value, low, high, "pooled", verdict, reason, facts)
    facts = {"value": value, "low": low, "high": high, "paper": PAPER_DROP_ALL}
    if high < 0:
        return judged(NOT_REPRODUCED, "real_gain")
    if low <= 0:
        return judged(PAPER_WAY, "drop_not_real") if value > 0 else judged(AGAINST, "no_drop")
    if low > PAPER_DROP_ALL:
        return judged(LARGER, "above_paper")
    if high < PAPER_DROP_ALL:
        return judged(SMALLER, "below_paper")
    return judged(REPRODUCED, "holds_paper")


def claim2_bound_verdict(cells: pd.DataFrame) -> Judgement:
    """Claim 2's second part, the bound: no task loses more than :data:`MAX_DROP_ALL` with every head constant.
    ``cells``: the all-heads cells judged (each with ``relative_drop``, ``relative_low``/``relative_high``). The
    judgement's number is the largest single drop, with that pair's interval."""
    usable = cells.dropna(subset=["relative_drop", "relative_low", "relative_high"])
    if usable.empty:
        return _untestable("pair")
    largest = usable.loc[usable["relative_drop"].idxmax()]
    value, low, high = (float(largest[c]) for c in ("relative_drop", "relative_low", "relative_high"))
    where = (str(largest["model"]), str(largest["task"]))
    judged = lambda verdict, reason, facts: Judgement(value, low, high, "pair", verdict, reason, facts, where)
    pair = lambda row: {"model": row["model"], "task": row["task"], "limit": MAX_DROP_ALL}
    above = usable[usable["relative_low"] > MAX_DROP_ALL]
    if len(above):
        row = above.loc[above["relative_low"].idxmax()]
        return judged(NOT_REPRODUCED, "task_above", pair(row) | {"low": row["relative_low"]})
    if (usable["relative_high"] <= MAX_DROP_ALL).all():
        facts = {"high": usable["relative_high"].max(), "limit": MAX_DROP_ALL}
        return judged(REPRODUCED, "every_task_below", facts)
    facts = pair(largest) | {"value": largest["relative_drop"], "low": largest["relative_low"]}
    if largest["relative_drop"] <= MAX_DROP_ALL:
        return judged(PAPER_WAY, "largest_at_or_below", facts)
    return judged(AGAINST, "largest_above", facts)


def claim3_verdict(better: Mapping) -> Judgement:
    """Claim 3 from :func:`papa.analysis.pooled_drops.claim3`'s dict (``n``, ``spearman``, ``p_value``): its
    number is Spearman's ρ (no interval: the exact p decides)."""
    n, rho, p = int(better.get("n", 0)), better.get("spearman", math.nan), better.get("p_value", math.nan)
    if n < 3:
        return _untestable("none", {"n": n}, "too_few_models")
    if _nan(rho):
        return Judgement(math.nan, math.nan, math.nan, "none", AGAINST, "no_variation", {"n": n})
    judged = lambda verdict, reason: Judgement(rho, math.nan, math.nan, "none", verdict, reason, facts)
    facts = {"n": n, "rho": rho, "p": p, "alpha": ALPHA}
    if p < ALPHA and rho > 0:
        return judged(REPRODUCED, "significant")
    if p < ALPHA and rho < 0:
        return judged(NOT_REPRODUCED, "significant_reverse")
    return judged(PAPER_WAY, "paper_way") if rho > 0 else judged(AGAINST, "against")


#: The paper's claims, each one object, in the order the book states them.
CLAIMS = (
    Claim("claim1", "half", HALF_MAX_DROP, lambda e: claim1_verdict(e.half["value"], e.half["low"], e.half["high"])),
    Claim("claim2", "all", PAPER_DROP_ALL, lambda e: claim2_verdict(e.all["value"], e.all["low"], e.all["high"])),
    Claim("claim2b", "all", MAX_DROP_ALL, lambda e: claim2_bound_verdict(e.bound)),
    Claim("claim3", "all", ALPHA, lambda e: claim3_verdict(e.better)),
)


def evidence(cells: pd.DataFrame, informative: bool | None = True, families: list[str] | None = None) -> Evidence:
    """What the claims read on one basis (``informative``, ``families``: :func:`papa.analysis.pooled_drops.select`)
    of :func:`papa.analysis.basis.claim_cells`."""
    half, full = (pooled_drop(select(cells, at, informative, families)) for at in ("half", "all"))
    points, common = claim3_points(cells, informative, families)
    bound = select(cells, "all", informative, families)
    return Evidence(half=half, all=full, bound=bound, points=points, common=common, better=claim3(points))


def judge(cells: pd.DataFrame, informative: bool | None = True, families: list[str] | None = None) -> Judged:
    """Every claim of :data:`CLAIMS` judged once on one basis (:func:`evidence`)."""
    read = evidence(cells, informative, families)
    return Judged(evidence=read, judgements={claim.key: claim.rule(read) for claim in CLAIMS})


def judge_bases(cells: pd.DataFrame, main: Judged | None = None) -> dict[str, Judged]:
    """The claims on every basis of :data:`BASES`, by basis code; ``main``: the informative basis judged already
    (:func:`judge` with its defaults), reused rather than judged again."""
    out = {}
    for code, informative, families in BASES:
        reuse = main is not None and informative is True and families is None
        out[code] = main if reuse else judge(cells, informative, families)
    return out


def judge_models(cells: pd.DataFrame) -> dict[str, Judged]:
    """The claims judged once per model on its own informative cells (claim 3, across models, is not testable on
    one), by model: the per-model verdicts beside the pooled ones."""
    return {str(model): judge(group) for model, group in cells.groupby("model", sort=True)}
