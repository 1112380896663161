"""The paper's three claims judged from pooled intervals, each verdict one of :data:`VERDICTS` and derived by a
rule the method chapter states before the results (issue 26).

Every rule reads the pooled average relative drop and its bootstrap interval ``[low, high]``
(:func:`papa.analysis.pooled.pooled_drop`), or, for claim 3, Spearman's ρ with its exact one-sided p
(:func:`papa.analysis.pooled.claim3`):

* **Claim 1**, half of the heads constant costs little or nothing (the paper: ≈ 0–2 %). *reproduced* when
  ``high`` ≤ :data:`HALF_MAX_DROP` (the average drop is shown to be small); *not reproduced* when ``low`` >
  :data:`HALF_MAX_DROP`; else *points the paper's way, not significant* when the average itself is ≤
  :data:`HALF_MAX_DROP`, *points against the paper, not significant* when it is above.
* **Claim 2**, every head constant costs a modest drop (the paper: 8 % on average, at most ≈ 20 % per task).
  *not reproduced* when ``high`` < 0 (a real gain) or ``low`` > :data:`MAX_DROP_ALL` (shown larger than the paper's
  largest); with ``low`` ≤ 0 (no real drop) *points the paper's way, not significant* when the average is > 0,
  else *points against the paper, not significant*; with a real drop (0 < ``low`` ≤ 20 %): *reproduced with a
  larger effect* when some task's own drop is shown above 20 % or ``low`` > :data:`PAPER_DROP_ALL`, *reproduced
  with a smaller effect* when ``high`` < :data:`PAPER_DROP_ALL`, else *reproduced* (the interval holds 8 %).
* **Claim 3**, better models lose more: *reproduced* when ρ > 0 with p < :data:`ALPHA`; *not reproduced* when ρ < 0
  with P(ρ_perm ≤ ρ) < :data:`ALPHA`; else *points the paper's way, not significant* when ρ > 0, *points against
  the paper, not significant* when ρ ≤ 0 or undefined (no variation).
* Any claim without the numbers it needs (no informative task, fewer than 3 models) is *not testable*.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd

from papa.analysis.figure_kit import task_name
from papa.analysis.pooled import claim3, claim3_points, pooled_drop, select

#: The verdicts, every claim's from this set.
VERDICTS = (
    "reproduced",
    "reproduced with a smaller effect",
    "reproduced with a larger effect",
    "points the paper's way, not significant",
    "points against the paper, not significant",
    "not reproduced",
    "not testable",
)
#: Claim 1: "little or no drop" is an average relative drop of at most this.
HALF_MAX_DROP = 0.05
#: Claim 2: the paper's average relative drop with every head constant, and its largest on a task.
PAPER_DROP_ALL = 0.08
MAX_DROP_ALL = 0.20
#: Claim 3: the one-sided significance level.
ALPHA = 0.05
CLAIMS = ("1. Half the heads constant: little or no drop", "2. All heads constant: modest drop", "3. Better models lose more")


def paper_words() -> tuple[str, str, str]:
    """What the paper says of each claim, in its own words (:data:`papa.analysis.paper.PAPER_NUMBERS`; imported
    here, for papa.analysis.paper reads this module's thresholds)."""
    from papa.analysis.paper import PAPER_NUMBERS

    return PAPER_NUMBERS[0][1], f"{PAPER_NUMBERS[1][1]}; one task: {PAPER_NUMBERS[2][1]}", PAPER_NUMBERS[3][1]


def _nan(*values: float) -> bool:
    return any(v is None or (isinstance(v, float) and math.isnan(v)) for v in values)


def interval_text(value: float, low: float, high: float) -> str:
    """``"4.6% [2.8%, 6.3%]"`` (never ``-0.0%``); ``"–"`` without a value."""
    if _nan(value):
        return "–"
    cell = percent_text(value)
    return cell if _nan(low, high) else f"{cell} [{percent_text(low)}, {percent_text(high)}]"


def percent_text(value: float) -> str:
    text = f"{value:.1%}"
    return "0.0%" if text == "-0.0%" else text


def claim1_verdict(value: float, low: float, high: float) -> tuple[str, str]:
    """Claim 1's verdict and its one-sentence reason from the pooled drop at half the heads."""
    limit = f"{HALF_MAX_DROP:.0%}"
    if _nan(value, low, high):
        return "not testable", "No informative task has a paired interval with half of the heads constant."
    if high <= HALF_MAX_DROP:
        return "reproduced", f"The whole interval of the average drop lies at or below {limit} (upper end {percent_text(high)})."
    if low > HALF_MAX_DROP:
        return "not reproduced", f"The whole interval of the average drop lies above {limit} (lower end {percent_text(low)})."
    if value <= HALF_MAX_DROP:
        return "points the paper's way, not significant", f"The average drop {percent_text(value)} is at most {limit}, but its interval reaches {percent_text(high)}."
    return "points against the paper, not significant", f"The average drop {percent_text(value)} is above {limit}, but its interval reaches down to {percent_text(low)}."


def claim2_verdict(value: float, low: float, high: float, largest_task_low: float = math.nan, largest_task: str = "") -> tuple[str, str]:
    """Claim 2's verdict and reason from the pooled drop with every head constant; ``largest_task_low`` is the
    largest lower bound of a single task's drop (``largest_task`` names it)."""
    paper, most = f"{PAPER_DROP_ALL:.0%}", f"{MAX_DROP_ALL:.0%}"
    if _nan(value, low, high):
        return "not testable", "No informative task has a paired interval with every head constant."
    if high < 0:
        return "not reproduced", f"The whole interval lies below 0 (upper end {percent_text(high)}): every head constant is a real gain, not a drop."
    if low > MAX_DROP_ALL:
        return "not reproduced", f"The whole interval lies above {most} (lower end {percent_text(low)}), more than the paper's largest drop on any task."
    if low <= 0:
        if value > 0:
            return "points the paper's way, not significant", f"The average drop {percent_text(value)} is positive, but its interval reaches down to {percent_text(low)}."
        return "points against the paper, not significant", f"The average {percent_text(value)} is no drop, and its interval [{percent_text(low)}, {percent_text(high)}] holds 0."
    if not _nan(largest_task_low) and largest_task_low > MAX_DROP_ALL:
        return "reproduced with a larger effect", f"A real drop, but {largest_task} alone is shown to lose more than {most} (lower end {percent_text(largest_task_low)})."
    if low > PAPER_DROP_ALL:
        return "reproduced with a larger effect", f"A real drop, larger than the paper's {paper}: the whole interval lies above it (lower end {percent_text(low)})."
    if high < PAPER_DROP_ALL:
        return (
            "reproduced with a smaller effect",
            f"A real drop (the interval excludes 0), smaller than the paper's {paper}: the whole interval lies below it (upper end {percent_text(high)}).",
        )
    return "reproduced", f"A real drop whose interval [{percent_text(low)}, {percent_text(high)}] holds the paper's {paper}."


def claim3_verdict(better: Mapping) -> tuple[str, str]:
    """Claim 3's verdict and reason from :func:`papa.analysis.pooled.claim3`'s dict (``n``, ``spearman``, ``p_value``)."""
    n, rho, p = int(better.get("n", 0)), better.get("spearman", math.nan), better.get("p_value", math.nan)
    if n < 3:
        return "not testable", f"{n} {'model' if n == 1 else 'models'} to compare: a correlation needs at least 3 (two points always give ρ = ±1)."
    if _nan(rho):
        return "points against the paper, not significant", f"The {n} models' drops or scores do not vary, so they show no association at all."
    floor = " (with 3 models the smallest possible p is 1/6)" if n == 3 else ""
    if p < ALPHA and rho > 0:
        return "reproduced", f"Spearman ρ = {rho:+.2f} over {n} models, one-sided exact p = {p:.3f} < {ALPHA}."
    if p < ALPHA and rho < 0:
        return "not reproduced", f"Spearman ρ = {rho:+.2f} over {n} models: better models lose less, one-sided exact p = {p:.3f} < {ALPHA}."
    if rho > 0:
        return "points the paper's way, not significant", f"Spearman ρ = {rho:+.2f} over {n} models, but one-sided exact p = {p:.3f}{floor}."
    return "points against the paper, not significant", f"Spearman ρ = {rho:+.2f} over {n} models (no association the paper's way), p = {p:.3f}{floor}."


def _largest(cells: pd.DataFrame) -> tuple[float, str]:
    usable = cells.dropna(subset=["relative_low"])
    if usable.empty:
        return math.nan, ""
    row = usable.loc[usable["relative_low"].idxmax()]
    return float(row["relative_low"]), f"{row['model']}/{row['task']}"


def judge(cells: pd.DataFrame, informative: bool | None = True, families: list[str] | None = None) -> dict:
    """The three claims on one basis (``informative``, ``families``: :func:`papa.analysis.pooled.select`): per claim
    ``claim{i}`` the verdict, ``claim{i}_reason``, and the numbers: ``half``/``all`` (:func:`pooled_drop` dicts),
    ``points``/``common`` (claim 3's per-model points and the tasks they average) and ``better`` (claim 3's dict)."""
    half, full = pooled_drop(select(cells, "half", informative, families)), pooled_drop(select(cells, "all", informative, families))
    points, common = claim3_points(cells, informative, families)
    better = claim3(points)
    largest_low, largest_task = _largest(select(cells, "all", informative, families))
    out = {"half": half, "all": full, "points": points, "common": common, "better": better}
    for i, (verdict, reason) in enumerate(
        (claim1_verdict(half["value"], half["low"], half["high"]), claim2_verdict(full["value"], full["low"], full["high"], largest_low, largest_task), claim3_verdict(better)),
        start=1,
    ):
        out[f"claim{i}"], out[f"claim{i}_reason"] = verdict, reason
    return out


def claim_numbers(judged: Mapping) -> tuple[str, str, str]:
    """The number each claim's verdict rests on, as text: the pooled drops with their intervals, and ρ with its p."""
    better = judged["better"]
    n = int(better.get("n", 0))
    rho = f"no ρ ({n} {'model' if n == 1 else 'models'})" if _nan(better.get("spearman", math.nan)) else f"ρ = {better['spearman']:+.2f}, p = {better['p_value']:.3f} (n = {n})"
    return tuple(interval_text(judged[a]["value"], judged[a]["low"], judged[a]["high"]) for a in ("half", "all")) + (rho,)  # type: ignore[return-value]


def claims_table(cells: pd.DataFrame, gate: Mapping) -> pd.DataFrame:
    """The claims on informative tasks of converged runs: columns claim, paper, ours (the number and its pooled
    interval, and what it averages), verdict, reason (one sentence), rule (with the gate's counts), and the raw
    ``value``/``low``/``high`` (claim 3: ρ, NaN, NaN)."""
    judged = judge(cells)
    numbers = claim_numbers(judged)
    gate_words = f" {gate['converged']} of {gate['runs']} runs converged; the gate left out {gate['left_out']}."
    rows = []
    for i, at in ((1, "half"), (2, "all")):
        pooled = judged[at]
        what = f"average relative drop over {pooled['n']} informative model/task {'pair' if pooled['n'] == 1 else 'pairs'}"
        what += f" ({pooled['excluded']} left out: drop undefined)" if pooled["excluded"] else ""
        rows.append((numbers[i - 1] + f"; {what}", pooled["value"], pooled["low"], pooled["high"]))
    points = judged["points"]
    per_model = ", ".join(f"{m} {interval_text(d, lo, hi)} at {s:.3f}" for m, d, lo, hi, s in zip(points["model"], points["drop"], points["low"], points["high"], points["score"]))
    over = f" over {', '.join(task_name(t) for t in judged['common'])}" if judged["common"] else ""
    rows.append((numbers[2] + (f"; drop at k = 0 score, per model{over}: {per_model}" if per_model else ""), judged["better"].get("spearman", math.nan), math.nan, math.nan))
    rules = (
        f"Pooled drop at half the heads: reproduced when its interval lies at or below {HALF_MAX_DROP:.0%}, not reproduced when above,"
        " else points the paper's way / against it by the average.",
        f"Pooled drop with every head constant: reproduced when its interval excludes 0 and holds {PAPER_DROP_ALL:.0%}; with a smaller / larger effect when it lies below / above"
        f" {PAPER_DROP_ALL:.0%} (larger also when a task alone is shown above {MAX_DROP_ALL:.0%}); not reproduced when below 0 or above {MAX_DROP_ALL:.0%}; else not significant.",
        f"Spearman ρ between the models' k = 0 score and drop over the tasks every model has: reproduced when ρ > 0 with exact p < {ALPHA}, not reproduced when ρ < 0 likewise,"
        " else not significant; fewer than 3 models: not testable.",
    )
    out = []
    for i, ((ours, value, low, high), rule) in enumerate(zip(rows, rules), start=1):
        out.append(
            {
                "claim": CLAIMS[i - 1],
                "paper": paper_words()[i - 1],
                "ours": ours,
                "verdict": judged[f"claim{i}"],
                "reason": judged[f"claim{i}_reason"],
                "rule": rule + gate_words,
                "value": value,
                "low": low,
                "high": high,
            }
        )
    return pd.DataFrame(out, columns=["claim", "paper", "ours", "verdict", "reason", "rule", "value", "low", "high"])


#: The sensitivity table's bases: (label, informative, families).
BASES = (
    ("informative tasks (the verdicts' basis)", True, None),
    ("every task", None, None),
    ("sentence-level tasks (CoLA, SST-2, MRPC, MNLI), informative", True, ["sentence"]),
    ("token-level tasks (NER, POS), informative", True, ["token"]),
)


def sensitivity(cells: pd.DataFrame) -> pd.DataFrame:
    """The verdicts on every basis of :data:`BASES`: one row per basis with the pairs it averages (``n_half``,
    ``n_all``, ``excluded``), each claim's number (text) and verdict, and the paper's number for that basis
    (:data:`papa.analysis.paper.PAPER_BY_BASIS`)."""
    from papa.analysis.paper import PAPER_BY_BASIS

    rows = []
    for label, informative, families in BASES:
        judged = judge(cells, informative, families)
        numbers = claim_numbers(judged)
        rows.append(
            {
                "basis": label,
                "n_half": judged["half"]["n"],
                "n_all": judged["all"]["n"],
                "excluded": judged["half"]["excluded"] + judged["all"]["excluded"],
                "claim1": numbers[0],
                "claim1_verdict": judged["claim1"],
                "claim2": numbers[1],
                "claim2_verdict": judged["claim2"],
                "claim3": numbers[2],
                "claim3_verdict": judged["claim3"],
                "paper": PAPER_BY_BASIS["families" if families else "all"],
            }
        )
    return pd.DataFrame(rows)


__all__ = [
    "ALPHA",
    "BASES",
    "CLAIMS",
    "HALF_MAX_DROP",
    "MAX_DROP_ALL",
    "PAPER_DROP_ALL",
    "VERDICTS",
    "claim1_verdict",
    "claim2_verdict",
    "claim3_verdict",
    "claim_numbers",
    "claims_table",
    "interval_text",
    "percent_text",
    "judge",
    "sensitivity",
]
