"""The claims in words (the verdicts are :mod:`papa.analysis.claims`'s): each verdict's one-sentence reason
(:data:`REASONS` filled with its facts), the rules, the number each verdict rests on, and the claims and sensitivity
tables of the results chapter."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd

from papa.analysis import claims as V
from papa.analysis.figure_kit import task_name
from papa.book.table_format import interval_text, percent, plural

#: One template per claim and rule branch (:attr:`papa.analysis.claims.Verdict.case`).
REASONS: dict[tuple[str, str], str] = {
    ("claim1", "no_cells"): "No informative task has a paired interval with half of the heads constant.",
    ("claim1", "interval_at_or_below"): "The whole interval of the average drop lies at or below {limit}"
    " (upper end {high}).",
    ("claim1", "interval_above"): "The whole interval of the average drop lies above {limit} (lower end {low}).",
    ("claim1", "mean_at_or_below"): "The average drop {value} is at most {limit}, but its interval reaches {high}.",
    ("claim1", "mean_above"): "The average drop {value} is above {limit}, but its interval reaches down to {low}.",
    ("claim2", "no_cells"): "No informative task has a paired interval with every head constant.",
    ("claim2", "real_gain"): "The whole interval lies below 0 (upper end {high}): every head constant is a real"
    " gain, not a drop.",
    ("claim2", "drop_not_real"): "The average drop {value} is positive, but its interval reaches down to {low}.",
    ("claim2", "no_drop"): "The average {value} is no drop, and its interval [{low}, {high}] holds 0.",
    ("claim2", "above_paper"): "A real drop, larger than the paper's {paper}: the whole interval lies above it"
    " (lower end {low}).",
    ("claim2", "below_paper"): "A real drop, smaller than the paper's {paper}: the whole interval lies below it"
    " (upper end {high}).",
    ("claim2", "holds_paper"): "A real drop whose interval [{low}, {high}] holds the paper's {paper}.",
    ("claim2b", "no_cells"): "No informative task has a paired interval with every head constant.",
    ("claim2b", "task_above"): "{pair} alone is shown to lose more than {limit} (lower end {low}).",
    ("claim2b", "every_task_below"): "Every task's interval lies at or below {limit} (the highest upper end: {high}).",
    ("claim2b", "largest_at_or_below"): "Every task's drop is at most {limit}, but the interval of {pair} reaches"
    " above it.",
    ("claim2b", "largest_above"): "{pair} loses {value}, above {limit}, but its interval reaches down to {low}.",
    ("claim3", "too_few_models"): "{n} {models} to compare: a correlation needs at least 3 (two points always give"
    " ρ = ±1).",
    ("claim3", "no_variation"): "The {n} models' drops or scores do not vary, so they show no association at all.",
    ("claim3", "significant"): "Spearman ρ = {rho} over {n} models, one-sided exact p = {p} < {alpha}.",
    ("claim3", "significant_reverse"): "Spearman ρ = {rho} over {n} models: better models lose less, one-sided"
    " exact p = {p} < {alpha}.",
    ("claim3", "paper_way"): "Spearman ρ = {rho} over {n} models, but one-sided exact p = {p}{floor}.",
    ("claim3", "against"): "Spearman ρ = {rho} over {n} models (no association the paper's way), p = {p}{floor}.",
}
#: Claim 3's p with 3 models cannot fall below 1/6.
P_FLOOR = " (with 3 models the smallest possible p is 1/6)"
#: The rule of each claim, in :data:`papa.analysis.claims.CLAIMS` order, as the claims table states it.
RULES = (
    f"Pooled drop at half the heads: reproduced when its interval lies at or below {V.HALF_MAX_DROP:.0%}, not"
    " reproduced when above, else points the paper's way / against it by the average.",
    "Pooled drop with every head constant: reproduced when its interval excludes 0 and holds"
    f" {V.PAPER_DROP_ALL:.0%}; with a smaller / larger effect when it lies below / above {V.PAPER_DROP_ALL:.0%};"
    " not reproduced when it lies below 0; else not significant.",
    "Each task's drop with every head constant: reproduced when every interval lies at or below"
    f" {V.MAX_DROP_ALL:.0%}, not reproduced when some task's interval lies above it, else not significant (by"
    f" whether every task's drop is at most {V.MAX_DROP_ALL:.0%}).",
    "Spearman ρ between the models' k = 0 score and drop over the tasks every model has: reproduced when ρ > 0 with"
    f" exact p < {V.ALPHA}, not reproduced when ρ < 0 likewise, else not significant; fewer than 3 models: not"
    " testable.",
)
#: How :func:`reason` writes each fact (any other fact is a rate, in percent).
_FORMATS = {"rho": "{:+.2f}", "p": "{:.3f}", "limit": "{:.0%}", "paper": "{:.0%}"}
_FORMATS |= dict.fromkeys(["model", "task", "n", "alpha"], "{}")
#: The paper's number beside each basis of the sensitivity table.
PAPER_BY_BASIS = {
    "all": "little or no drop at half, 8% average with every head (abstract); over its own models and tasks",
    "families": "none: the paper states no average per task family",
}


def reason(key: str, verdict: V.Verdict) -> str:
    """The one sentence that says why claim ``key`` (:data:`papa.analysis.claims.CLAIM_KEYS`) got ``verdict``."""
    facts = dict(verdict.facts)
    words = {name: _FORMATS[name].format(v) if name in _FORMATS else percent(v) for name, v in facts.items()}
    if "model" in facts:
        words["pair"] = f"{facts['model']} on {task_name(str(facts['task']))}"
    if "n" in facts:
        words |= {"models": plural(int(facts["n"]), "model"), "floor": P_FLOOR if facts["n"] == 3 else ""}
    return REASONS[key, verdict.case].format(**words)


def verdict_sentence(key: str, verdict: V.Verdict) -> str:
    """``"Verdict: <label>. <reason>"`` for a caption."""
    return f"Verdict: {verdict.label}. {reason(key, verdict)}"


def claim_numbers(judged: Mapping) -> tuple[str, str, str, str]:
    """The number each claim's verdict rests on, as text, in :data:`~papa.analysis.claims.CLAIM_KEYS` order."""
    better = judged["better"]
    n = int(better.get("n", 0))
    rho = better.get("spearman", math.nan)
    if rho is None or math.isnan(rho):
        rho_text = f"no ρ ({n} {plural(n, 'model')})"
    else:
        rho_text = f"ρ = {rho:+.2f}, p = {better['p_value']:.3f} (n = {n})"
    half, full = (interval_text(judged[a]["value"], judged[a]["low"], judged[a]["high"]) for a in ("half", "all"))
    usable = judged["bound"].dropna(subset=["relative_drop"])  # claim 2's bound: the largest drop and its pair
    largest = "–"
    if not usable.empty:
        row = usable.loc[usable["relative_drop"].idxmax()]
        drop = interval_text(row["relative_drop"], row["relative_low"], row["relative_high"])
        largest = f"{drop} ({row['model']}, {task_name(row['task'])})"
    return half, full, largest, rho_text


def claims_table(cells: pd.DataFrame, gate: Mapping) -> pd.DataFrame:
    """One row per claim (:data:`~papa.analysis.claims.CLAIMS`): claim, paper, ours (the number, its pooled interval
    and what it averages), verdict, reason, rule (with the gate's counts)."""
    judged = V.judge(cells)
    numbers = claim_numbers(judged)
    gate_words = (
        f" {gate['converged']} of {gate['runs']} probe results converged; the gate left out {gate['left_out']}."
    )
    ours = []
    for at, number in (("half", numbers[0]), ("all", numbers[1])):
        p = judged[at]
        what = f"average relative drop over {p['n']} informative model/task {plural(p['n'], 'pair')}"
        ours.append(number + f"; {what}" + (f" ({p['excluded']} left out: drop undefined)" if p["excluded"] else ""))
    ours.append(f"largest single drop {numbers[2]}, of {len(judged['bound'])} informative model/task pairs")
    points = judged["points"]
    columns = (points[c] for c in ("model", "drop", "low", "high", "score"))
    per_model = ", ".join(f"{m} {interval_text(d, lo, hi)} at {s:.3f}" for m, d, lo, hi, s in zip(*columns))
    over = f" over {', '.join(task_name(t) for t in judged['common'])}" if judged["common"] else ""
    ours.append(numbers[3] + (f"; drop at k = 0 score, per model{over}: {per_model}" if per_model else ""))
    rows = []
    paper_words = (words for _, words, _ in V.PAPER_NUMBERS)
    for claim, paper, key, number, rule in zip(V.CLAIMS, paper_words, V.CLAIM_KEYS, ours, RULES):
        verdict = judged[key]
        rows.append([claim, paper, number, verdict.label, reason(key, verdict), rule + gate_words])
    return pd.DataFrame(rows, columns=["claim", "paper", "ours", "verdict", "reason", "rule"])


def sensitivity(cells: pd.DataFrame) -> pd.DataFrame:
    """One row per basis of :data:`~papa.analysis.claims.BASES`: the pairs it averages, each claim's number and
    verdict, and the paper's number for that basis (:data:`PAPER_BY_BASIS`)."""
    rows = []
    for label, informative, families in V.BASES:
        judged = V.judge(cells, informative, families)
        row = {"basis": label, "n_half": judged["half"]["n"], "n_all": judged["all"]["n"]}
        row["excluded"] = judged["half"]["excluded"] + judged["all"]["excluded"]
        for key, number in zip(V.CLAIM_KEYS, claim_numbers(judged)):
            row |= {key: number, f"{key}_verdict": judged[key].label}
        rows.append(row | {"paper": PAPER_BY_BASIS["families" if families else "all"]})
    return pd.DataFrame(rows)
