"""The paper's three claims judged from pooled intervals, each verdict one of the seven below (*reproduced*, with a
smaller or larger effect, *points the paper's way* or *against the paper, not significant*, *not reproduced*, *not
testable*) and derived by a rule the method chapter states before the results (issue 26).

Every rule reads the pooled average relative drop and its bootstrap interval ``[low, high]``
(:func:`papa.analysis.pooled_drops.pooled_drop`), or, for claim 3, Spearman's ρ with its exact one-sided p
(:func:`papa.analysis.pooled_drops.claim3`):

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
#: The paper's number beside each basis of the sensitivity table.
PAPER_BY_BASIS = {
    "all": "little or no drop at half, 8% average with every head (abstract); over its own models and tasks",
    "families": "none: the paper states no average per task family",
}
NOT_SIGNIFICANT = ("points the paper's way, not significant", "points against the paper, not significant")


def _nan(*values: float) -> bool:
    return any(v is None or (isinstance(v, float) and math.isnan(v)) for v in values)


def interval_text(value: float, low: float, high: float) -> str:
    """``"4.6% [2.8%, 6.3%]"`` (never ``-0.0%``); ``"–"`` without a value."""
    if _nan(value):
        return "–"
    cell = percent_text(value)
    return cell if _nan(low, high) else f"{cell} [{percent_text(low)}, {percent_text(high)}]"


def percent_text(value: float) -> str:
    """``0.046`` → ``"4.6%"``; never ``"-0.0%"``."""
    text = f"{value:.1%}"
    return "0.0%" if text == "-0.0%" else text


def points_text(value: float) -> str:
    """A difference of rates in signed percentage points: ``0.012`` → ``"+1.2"``; a value that rounds to zero
    without a sign (``"0.0"``, never ``"-0.0"`` or ``"+0.0"``)."""
    text = f"{value * 100:+.1f}"
    return "0.0" if text in ("+0.0", "-0.0") else text


def claim1_verdict(value: float, low: float, high: float) -> tuple[str, str]:
    """Claim 1's verdict and its one-sentence reason from the pooled drop at half the heads."""
    limit, p = f"{HALF_MAX_DROP:.0%}", percent_text
    if _nan(value, low, high):
        return "not testable", "No informative task has a paired interval with half of the heads constant."
    whole = "The whole interval of the average drop lies"
    if high <= HALF_MAX_DROP:
        return "reproduced", f"{whole} at or below {limit} (upper end {p(high)})."
    if low > HALF_MAX_DROP:
        return "not reproduced", f"{whole} above {limit} (lower end {p(low)})."
    if value <= HALF_MAX_DROP:
        return NOT_SIGNIFICANT[
            0
        ], f"The average drop {p(value)} is at most {limit}, but its interval reaches {p(high)}."
    return NOT_SIGNIFICANT[
        1
    ], f"The average drop {p(value)} is above {limit}, but its interval reaches down to {p(low)}."


def claim2_verdict(value: float, low: float, high: float) -> tuple[str, str]:
    """Claim 2's first part, the average: verdict and reason from the pooled drop with every head constant."""
    paper, p = f"{PAPER_DROP_ALL:.0%}", percent_text
    if _nan(value, low, high):
        return "not testable", "No informative task has a paired interval with every head constant."
    if high < 0:
        why = f"The whole interval lies below 0 (upper end {p(high)}): every head constant is a real gain, not a drop."
        return "not reproduced", why
    if low <= 0:
        if value > 0:
            return NOT_SIGNIFICANT[
                0
            ], f"The average drop {p(value)} is positive, but its interval reaches down to {p(low)}."
        return NOT_SIGNIFICANT[1], f"The average {p(value)} is no drop, and its interval [{p(low)}, {p(high)}] holds 0."
    if low > PAPER_DROP_ALL:
        why = f"the whole interval lies above it (lower end {p(low)})"
        return "reproduced with a larger effect", f"A real drop, larger than the paper's {paper}: {why}."
    if high < PAPER_DROP_ALL:
        why = f"the whole interval lies below it (upper end {p(high)})"
        return "reproduced with a smaller effect", f"A real drop, smaller than the paper's {paper}: {why}."
    return "reproduced", f"A real drop whose interval [{p(low)}, {p(high)}] holds the paper's {paper}."


def claim2_bound_verdict(cells: pd.DataFrame) -> tuple[str, str]:
    """Claim 2's second part, the bound: no task loses more than :data:`MAX_DROP_ALL` with every head constant.
    ``cells``: the all-heads cells judged (each with ``relative_drop``, ``relative_low``/``relative_high``)."""
    most, p = f"{MAX_DROP_ALL:.0%}", percent_text
    usable = cells.dropna(subset=["relative_drop", "relative_low", "relative_high"])
    if usable.empty:
        return "not testable", "No informative task has a paired interval with every head constant."
    name = lambda row: f"{row['model']} on {task_name(row['task'])}"
    above = usable[usable["relative_low"] > MAX_DROP_ALL]
    if len(above):
        row = above.loc[above["relative_low"].idxmax()]
        why = f"{name(row)} alone is shown to lose more than {most} (lower end {p(row['relative_low'])})."
        return "not reproduced", why
    if (usable["relative_high"] <= MAX_DROP_ALL).all():
        highest = p(usable["relative_high"].max())
        return "reproduced", f"Every task's interval lies at or below {most} (the highest upper end: {highest})."
    row = usable.loc[usable["relative_drop"].idxmax()]
    if row["relative_drop"] <= MAX_DROP_ALL:
        return NOT_SIGNIFICANT[
            0
        ], f"Every task's drop is at most {most}, but the interval of {name(row)} reaches above it."
    drop, low = p(row["relative_drop"]), p(row["relative_low"])
    return NOT_SIGNIFICANT[1], f"{name(row)} loses {drop}, above {most}, but its interval reaches down to {low}."


def largest_drop_text(cells: pd.DataFrame) -> str:
    """The largest all-heads drop among ``cells`` with its interval and pair, as text (claim 2's bound)."""
    usable = cells.dropna(subset=["relative_drop"])
    if usable.empty:
        return "–"
    row = usable.loc[usable["relative_drop"].idxmax()]
    drop = interval_text(row["relative_drop"], row["relative_low"], row["relative_high"])
    return f"{drop} ({row['model']}, {task_name(row['task'])})"


def claim3_verdict(better: Mapping) -> tuple[str, str]:
    """Claim 3's verdict and reason from :func:`papa.analysis.pooled_drops.claim3`'s dict (``n``, ``spearman``,
    ``p_value``)."""
    n, rho, p = int(better.get("n", 0)), better.get("spearman", math.nan), better.get("p_value", math.nan)
    if n < 3:
        models = "model" if n == 1 else "models"
        return (
            "not testable",
            f"{n} {models} to compare: a correlation needs at least 3 (two points always give ρ = ±1).",
        )
    if _nan(rho):
        return NOT_SIGNIFICANT[1], f"The {n} models' drops or scores do not vary, so they show no association at all."
    floor = " (with 3 models the smallest possible p is 1/6)" if n == 3 else ""
    spearman = f"Spearman ρ = {rho:+.2f} over {n} models"
    if p < ALPHA and rho > 0:
        return "reproduced", f"{spearman}, one-sided exact p = {p:.3f} < {ALPHA}."
    if p < ALPHA and rho < 0:
        return "not reproduced", f"{spearman}: better models lose less, one-sided exact p = {p:.3f} < {ALPHA}."
    if rho > 0:
        return NOT_SIGNIFICANT[0], f"{spearman}, but one-sided exact p = {p:.3f}{floor}."
    return NOT_SIGNIFICANT[1], f"{spearman} (no association the paper's way), p = {p:.3f}{floor}."


def judge(cells: pd.DataFrame, informative: bool | None = True, families: list[str] | None = None) -> dict:
    """The claims on one basis (``informative``, ``families``: :func:`papa.analysis.pooled_drops.select`): per claim
    (:data:`CLAIM_KEYS`) the verdict and ``<key>_reason``, and the numbers: ``half``/``all`` (:func:`pooled_drop`
    dicts), ``bound`` (the all-heads cells claim 2's bound reads), ``points``/``common`` (claim 3's per-model
    points and the tasks they average) and ``better`` (claim 3's dict)."""
    half, full = (pooled_drop(select(cells, at, informative, families)) for at in ("half", "all"))
    bound = select(cells, "all", informative, families)
    points, common = claim3_points(cells, informative, families)
    better = claim3(points)
    out = {"half": half, "all": full, "bound": bound, "points": points, "common": common, "better": better}
    verdicts = (
        claim1_verdict(half["value"], half["low"], half["high"]),
        claim2_verdict(full["value"], full["low"], full["high"]),
        claim2_bound_verdict(bound),
        claim3_verdict(better),
    )
    for key, (verdict, reason) in zip(CLAIM_KEYS, verdicts):
        out[key], out[f"{key}_reason"] = verdict, reason
    return out


def claim_numbers(judged: Mapping) -> tuple[str, str, str, str]:
    """The number each claim's verdict rests on, as text (in :data:`CLAIM_KEYS` order): the pooled drops with their
    intervals, the largest single drop with its interval, and ρ with its p."""
    better = judged["better"]
    n = int(better.get("n", 0))
    if _nan(better.get("spearman", math.nan)):
        rho = f"no ρ ({n} {'model' if n == 1 else 'models'})"
    else:
        rho = f"ρ = {better['spearman']:+.2f}, p = {better['p_value']:.3f} (n = {n})"
    half, full = (interval_text(judged[a]["value"], judged[a]["low"], judged[a]["high"]) for a in ("half", "all"))
    return half, full, largest_drop_text(judged["bound"]), rho


#: The rule of each claim, in :data:`CLAIMS` order, as the claims table states it.
RULES = (
    f"Pooled drop at half the heads: reproduced when its interval lies at or below {HALF_MAX_DROP:.0%}, not"
    " reproduced when above, else points the paper's way / against it by the average.",
    "Pooled drop with every head constant: reproduced when its interval excludes 0 and holds"
    f" {PAPER_DROP_ALL:.0%}; with a smaller / larger effect when it lies below / above {PAPER_DROP_ALL:.0%}; not"
    " reproduced when it lies below 0; else not significant.",
    f"Each task's drop with every head constant: reproduced when every interval lies at or below {MAX_DROP_ALL:.0%},"
    " not reproduced when some task's interval lies above it, else not significant (by whether every task's drop is"
    f" at most {MAX_DROP_ALL:.0%}).",
    "Spearman ρ between the models' k = 0 score and drop over the tasks every model has: reproduced when ρ > 0 with"
    f" exact p < {ALPHA}, not reproduced when ρ < 0 likewise, else not significant; fewer than 3 models: not"
    " testable.",
)


def claims_table(cells: pd.DataFrame, gate: Mapping) -> pd.DataFrame:
    """The claims on informative tasks of converged runs, one row per :data:`CLAIMS`: columns claim, paper, ours
    (the number and its pooled interval, and what it averages), verdict, reason (one sentence), rule (with the
    gate's counts)."""
    judged = judge(cells)
    numbers = claim_numbers(judged)
    gate_words = (
        f" {gate['converged']} of {gate['runs']} probe results converged; the gate left out {gate['left_out']}."
    )
    ours = []
    for at, number in (("half", numbers[0]), ("all", numbers[1])):
        p = judged[at]
        what = f"average relative drop over {p['n']} informative model/task {'pair' if p['n'] == 1 else 'pairs'}"
        ours.append(number + f"; {what}" + (f" ({p['excluded']} left out: drop undefined)" if p["excluded"] else ""))
    ours.append(f"largest single drop {numbers[2]}, of {len(judged['bound'])} informative model/task pairs")
    points = judged["points"]
    columns = (points[c] for c in ("model", "drop", "low", "high", "score"))
    per_model = ", ".join(f"{m} {interval_text(d, lo, hi)} at {s:.3f}" for m, d, lo, hi, s in zip(*columns))
    over = f" over {', '.join(task_name(t) for t in judged['common'])}" if judged["common"] else ""
    ours.append(numbers[3] + (f"; drop at k = 0 score, per model{over}: {per_model}" if per_model else ""))
    rows = []
    for claim, paper, key, number, rule in zip(CLAIMS, (w for _, w, _ in PAPER_NUMBERS), CLAIM_KEYS, ours, RULES):
        rows.append([claim, paper, number, judged[key], judged[f"{key}_reason"], rule + gate_words])
    return pd.DataFrame(rows, columns=["claim", "paper", "ours", "verdict", "reason", "rule"])


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
    (:data:`PAPER_BY_BASIS`)."""
    rows = []
    for label, informative, families in BASES:
        judged = judge(cells, informative, families)
        row = {"basis": label, "n_half": judged["half"]["n"], "n_all": judged["all"]["n"]}
        row["excluded"] = judged["half"]["excluded"] + judged["all"]["excluded"]
        for key, number in zip(CLAIM_KEYS, claim_numbers(judged)):
            row |= {key: number, f"{key}_verdict": judged[key]}
        rows.append(row | {"paper": PAPER_BY_BASIS["families" if families else "all"]})
    return pd.DataFrame(rows)
