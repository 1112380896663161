"""The book's words for what :mod:`papa.analysis` computes: number formats (a score, a rate in percent, a signed
difference, an interval, heads and fractions, a learning rate, a duration, lists and plurals: never ``-0.000``, a
Python list or a ``(s)`` plural), verdict phrases (:data:`VERDICT_WORDS`), each claim's title, the paper's words and
the rule (:data:`CLAIM_WORDS`), each reason's sentence (:data:`REASONS`, filled with a judgement's facts by
:func:`reason`), the number each verdict rests on (:func:`claim_number`) and the sensitivity table's bases
(:data:`BASIS_WORDS`). Task and metric display names come from the task registry, :mod:`papa.core.tasks`."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import pandas as pd

from papa.analysis import claims as V
from papa.analysis import replacements as RP
from papa.analysis.basis import Basis
from papa.analysis.drop_tables import nominal_fraction
from papa.core.tasks import task_name

NBSP = "\u00a0"
#: What every interval of the book covers (:mod:`papa.analysis.bootstrap`: seeds drawn, then dev examples).
INTERVAL_COVERS = "95% two-level bootstrap interval over probe seeds and dev examples"
DASH = "\u2013"  # en dash: a missing value


def is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA or value is pd.NaT


def unsigned_zero(cell: str) -> str:
    """A number that rounds to zero without its sign: ``"-0.000"`` → ``"0.000"``, ``"+0.0%"`` → ``"0.0%"``."""
    return cell[1:] if re.fullmatch(r"[-+\u2212]0(\.0*)?%?", cell) else cell


def score(value: Any, digits: int = 3) -> str | None:
    """``0.81234`` → ``"0.812"``; None for a missing value; never ``"-0.000"``."""
    return None if is_missing(value) else unsigned_zero(f"{float(value):.{digits}f}")


def percent(value: Any, digits: int = 1) -> str | None:
    """``0.04321`` → ``"4.3%"``; never ``"-0.0%"``."""
    return None if is_missing(value) else unsigned_zero(f"{float(value):.{digits}%}")


def signed(value: Any, digits: int = 3) -> str | None:
    """``0.0123`` → ``"+0.012"``; a value that rounds to zero is ``"0.000"``."""
    return None if is_missing(value) else unsigned_zero(f"{float(value):+.{digits}f}")


def heads_words(k: Any, total: Any) -> str:
    """The number of constant heads by its real count: ``"0 of 36 (none)"``, ``"18 of 36 (1/2)"``,
    ``"32 of 36 (≈ 7/8)"``, ``"36 of 36 (all)"``."""
    k, total = int(k), int(total)
    if k == 0 or k == total:
        return f"{k} of {total} ({'none' if k == 0 else 'all'})"
    fraction, exact = nominal_fraction(k, total)
    return f"{k} of {total} ({'' if exact else '≈' + NBSP}{fraction})"


def integer(value: Any) -> str | None:
    """``67349`` → ``"67,349"``."""
    return None if is_missing(value) else f"{int(value):,}"


def yes_no(value: Any) -> str | None:
    """True → ``"yes"``, False → ``"no"``."""
    return None if is_missing(value) else ("yes" if bool(value) else "no")


def text(value: Any) -> str | None:
    return None if is_missing(value) else str(value)


def score_spread(mean: Any, spread: Any) -> str | None:
    """``"0.812 ± 0.020"`` with non-breaking spaces (one line); the mean alone when ``spread`` is missing."""
    if is_missing(mean):
        return None
    return str(score(mean)) + ("" if is_missing(spread) else f"{NBSP}±{NBSP}{score(spread)}")


def with_interval(cell: Callable[..., str | None], value: Any, low: Any, high: Any) -> str | None:
    """``cell(value)`` followed, when both ends are there, by ``[low, high]``, with non-breaking spaces (one line):
    ``"0.812 [0.800, 0.840]"``; None without a value. The ends have the value's precision (one per column): an end
    that rounds to zero is ``0.000`` / ``0.0%`` whatever its side; whether an interval excludes 0 is the verdict's
    (a "real?" or verdict cell beside it), decided on the unrounded ends."""
    if is_missing(value):
        return None
    ends = "" if is_missing(low) or is_missing(high) else f"{cell(low)},{NBSP}{cell(high)}"
    return f"{cell(value)}{f'{NBSP}[{ends}]' if ends else ''}"


def interval_text(value: Any, low: Any, high: Any) -> str:
    """A drop and its interval in running text: ``"4.6% [2.8%, 6.3%]"`` (never ``-0.0%``); the drop alone without
    an interval; ``"–"`` without a value."""
    return (with_interval(percent, value, low, high) or DASH).replace(NBSP, " ")


def points_text(value: Any, digits: int = 1) -> str:
    """A difference of rates in signed percentage points: ``0.012`` → ``"+1.2"``, ``0.0001`` → ``"0.0"``."""
    return str(signed(float(value) * 100, digits))


def distinct_digits(rows: Iterable[Any], write: Callable[[Any, int], str], least: int = 1, most: int = 3) -> int:
    """The fewest digits (``least`` to ``most``) at which ``write(row, digits)`` tells every two different ``rows``
    of one column apart, so that two rows never print alike when their numbers differ; ``most`` when none does."""
    rows = list(dict.fromkeys(rows))
    return next((d for d in range(least, most) if len({write(r, d) for r in rows}) == len(rows)), most)


_SMALL = ["no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"]


def and_list(items) -> str:
    """``["a", "b", "c"]`` → ``"a, b and c"``; one item is itself, none is ``""``."""
    items = [str(i) for i in items]
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} and {items[-1]}"


def count(n: int, noun: str) -> str:
    """``count(3, "seed")`` → ``"three seeds"``; ``count(1, "model")`` → ``"one model"``; 13 and up in digits."""
    word = _SMALL[n] if 0 <= n < len(_SMALL) else f"{n:,}"
    return f"{word} {plural(n, noun)}"


def plural(n: int, noun: str) -> str:
    return noun if n == 1 else f"{noun}s"


def lr_text(lr: float) -> str:
    """A learning rate as a person writes it: ``2e-5``, ``1.5e-4``, ``1e-3``, ``0.01``, ``0.1``."""
    value = float(lr)
    if value != 0 and abs(value) < 0.01:
        mantissa, exponent = f"{value:e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    return f"{value:g}"


def fraction_words(value) -> str:
    """A head fraction (``0``, ``"1/2"``, ``0.875``, ``63 / 72``, ``1``) in words: none, half, 7/8, all."""
    fraction = Fraction(str(value).strip()).limit_denominator(10_000)
    if fraction == 0:
        return "none"
    if fraction == 1:
        return "all"
    if fraction == Fraction(1, 2):
        return "half"
    return f"{fraction.numerator}/{fraction.denominator}"


def duration(seconds: float | None) -> str:
    """``42.3`` → ``"42 s"``; ``754`` → ``"12.6 min"``; ``7300`` → ``"2.0 h"``; None → ``""``."""
    if seconds is None:
        return ""
    seconds = float(seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


#: Each verdict code of :data:`papa.analysis.claims.VERDICTS` in words.
VERDICT_WORDS = {
    V.REPRODUCED: "reproduced",
    V.SMALLER: "reproduced with a smaller effect",
    V.LARGER: "reproduced with a larger effect",
    V.PAPER_WAY: "points the paper's way, not significant",
    V.AGAINST: "points against the paper, not significant",
    V.NOT_REPRODUCED: "not reproduced",
    V.NOT_TESTABLE: "not testable",
}


@dataclass(frozen=True)
class ClaimWords:
    """A claim in words: its ``title``, the ``paper``'s own words and ``where`` it states them, and its ``rule``."""

    title: str
    paper: str
    where: str
    rule: str


_PAPER = "of arXiv:2211.03495"
#: Each claim of :data:`papa.analysis.claims.CLAIMS` in words, by claim key. What the paper states in numbers: every
#: other per-task or per-model result of the paper is drawn (its Figures 2 and 4) for models that did not run here
#: (BERT, RoBERTa, DeBERTa), so none is quoted.
CLAIM_WORDS = {
    "claim1": ClaimWords(
        "1. Half the heads constant: little or no drop",
        "“little or no performance drop”; “in almost all cases … no major drop”",
        f"abstract and Section 4 {_PAPER}",
        f"Pooled drop at half the heads: reproduced when its interval lies at or below {V.HALF_MAX_DROP:.0%}, not"
        " reproduced when above, else points the paper's way / against it by the average.",
    ),
    "claim2": ClaimWords(
        "2a. All heads constant: an average drop of about 8%",
        "“an average relative drop of only 8% from the probing baseline”",
        f"abstract {_PAPER}",
        "Pooled drop with every head constant: reproduced when its interval excludes 0 and holds"
        f" {V.PAPER_DROP_ALL:.0%}; with a smaller / larger effect when it lies below / above {V.PAPER_DROP_ALL:.0%};"
        " not reproduced when it lies below 0; else not significant.",
    ),
    "claim2b": ClaimWords(
        "2b. All heads constant: at most 20% on any task",
        "at most ≈ 20% (this book's reading of the curves; the text states no per-task bound)",
        f"Figure 2 {_PAPER}",
        "Each task's drop with every head constant: reproduced when every interval lies at or below"
        f" {V.MAX_DROP_ALL:.0%}, not reproduced when some task's interval lies above it, else not significant (by"
        f" whether every task's drop is at most {V.MAX_DROP_ALL:.0%}).",
    ),
    "claim3": ClaimWords(
        "3. Better models lose more",
        "“better-performing models lose more from applying our method than weaker models”",
        f"abstract and Figure 4 {_PAPER}",
        "Spearman ρ between the models' k = 0 score and drop over the tasks every model has: reproduced when ρ > 0"
        f" with exact p < {V.ALPHA}, not reproduced when ρ < 0 likewise, else not significant; fewer than 3 models:"
        " not testable.",
    ),
}
#: What each claim's paper number is called in the table of the paper's own numbers.
PAPER_QUANTITIES = {
    "claim1": "half of the heads constant",
    "claim2": "every head constant, average",
    "claim2b": "every head constant, one task",
    "claim3": "better models lose more",
}
#: The question each alternative of :data:`papa.analysis.replacements.ALTERNATIVES` answers.
REPLACEMENT_QUESTIONS = {
    RP.UNIFORM: "Does the task-average pattern beat uniform attention?",
    RP.MEAN: "Does input-dependent V matter once attention is constant?",
    RP.ZERO: "Is a constant better than removing the head?",
}
#: Each answer code of :data:`papa.analysis.replacements.ANSWERS` in words.
REPLACEMENT_ANSWERS = {
    "more": "yes",
    "less": "the reverse",
    "no_difference": "no difference shown",
    "not_testable": "not testable",
}
#: Each verdict of a ranking against random (:data:`papa.analysis.drop_tables.RANDOM_VERDICTS`) in words.
RANDOM_VERDICTS = {"beats": "beats random", "worse": "worse than random", "no_difference": "no real difference"}
#: The sensitivity table's bases (:data:`papa.analysis.claims.BASES`) in words.
BASIS_WORDS = {
    "informative": "informative tasks (the verdicts' basis)",
    "every": "every task",
    "sentence": "sentence-level tasks (CoLA, SST-2, MRPC, MNLI), informative",
    "token": "token-level tasks (NER, POS), informative",
}
#: The paper's number beside each basis of the sensitivity table.
PAPER_BY_BASIS = {
    "all": "little or no drop at half, 8% average with every head (abstract); over its own models and tasks",
    "families": "none: the paper states no average per task family",
}
#: One sentence per claim and rule branch (:attr:`papa.analysis.claims.Judgement.reason`).
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
#: How :func:`reason` writes each fact (any other fact is a rate, in percent).
_FORMATS = {"rho": "{:+.2f}", "p": "{:.3f}", "limit": "{:.0%}", "paper": "{:.0%}"}
_FORMATS |= dict.fromkeys(["model", "task", "n", "alpha"], "{}")


def basis_words(basis: Basis) -> str:
    """Which runs ``basis`` reads: ``"the 412 converged probe results"``, or all of them when none had a held-out
    curve to pass the convergence gate."""
    n = int(basis.runs["run_id"].nunique()) if len(basis.runs) else 0
    return (
        f"the {n} converged probe results"
        if basis.gated
        else f"all {n} probe results (none passed the convergence gate)"
    )


def pair_words(model: str, task: str) -> str:
    """``"<model> on <task display name>"``."""
    return f"{model} on {task_name(task)}"


def reason(key: str, judgement: V.Judgement) -> str:
    """The one sentence that says why claim ``key`` got ``judgement``'s verdict."""
    facts = dict(judgement.facts)
    words = {name: _FORMATS[name].format(v) if name in _FORMATS else percent(v) for name, v in facts.items()}
    if "model" in facts:
        words["pair"] = pair_words(str(facts["model"]), str(facts["task"]))
    if "n" in facts:
        words |= {"models": plural(int(facts["n"]), "model"), "floor": P_FLOOR if facts["n"] == 3 else ""}
    return REASONS[key, judgement.reason].format(**words)


def verdict_words(judgement: V.Judgement) -> str:
    """The verdict of ``judgement`` in words (:data:`VERDICT_WORDS`)."""
    return VERDICT_WORDS[judgement.verdict]


def claim_number(judgement: V.Judgement) -> str:
    """The number a claim's verdict rests on (``judgement``'s), as text: a pooled drop with its interval, one pair's
    drop with that pair (claim 2b's largest), or ρ with its p (claim 3)."""
    if judgement.covers == "none":
        n, p = int(judgement.facts.get("n", 0)), judgement.facts.get("p")
        if is_missing(judgement.value) or p is None:
            return f"no ρ ({n} {plural(n, 'model')})"
        return f"ρ = {judgement.value:+.2f}, p = {float(p):.3f} (n = {n})"
    drop = interval_text(judgement.value, judgement.low, judgement.high)
    if judgement.covers == "pair":
        return drop if judgement.pair is None else f"{drop} ({judgement.pair[0]}, {task_name(judgement.pair[1])})"
    return drop


def random_summary(random: pd.DataFrame, ranking: str) -> str:
    """One sentence on how many of ``ranking``'s comparisons with the seeded random orderings
    (:func:`papa.analysis.drop_tables.random_baseline`) beat random or are worse, where and at which fractions."""
    rows = random[random["ranking"] == ranking] if len(random) else random
    if not len(rows):
        return f"no seeded random ordering ran beside the {ranking} ranking, so whether it beats random is not measured"

    def which(verdict: str) -> tuple[int, str]:
        hits = rows[rows["verdict"] == verdict]
        named = (
            f"{m} {task_name(t)} at {fraction_words(f)}"
            for m, t, f in zip(hits["model"], hits["task"], hits["fraction"])
        )
        return len(hits), f" ({and_list(named)})" if len(hits) else ""

    (beats, won), (worse, lost) = which("beats"), which("worse")
    fractions = and_list(fraction_words(f) for f in sorted(set(rows["fraction"])))
    where = f"the comparisons are on {and_list(sorted(set(rows['model'])))}, with {fractions} of the heads constant"
    comparisons = f"{len(rows)} {plural(len(rows), 'comparison')}"
    said = f"the {ranking} ranking beats the seeded random orderings in {beats} of its {comparisons}{won}"
    rest = ", and the others show no real difference" if len(rows) - beats - worse else ""
    return f"{said} and is worse in {worse or 'none'}{lost}; {where}{rest}"


def paper_numbers_frame() -> pd.DataFrame:
    """The numbers the paper states, one row per claim, with where it states them."""
    rows = [[PAPER_QUANTITIES[c.key], CLAIM_WORDS[c.key].paper, CLAIM_WORDS[c.key].where] for c in V.CLAIMS]
    return pd.DataFrame(rows, columns=["quantity", "the paper", "where the paper states it"])


def gate_words(gate: Mapping) -> str:
    """The convergence gate's counts as the claims table's rule column ends."""
    return f" {gate['converged']} of {gate['runs']} probe results converged; the gate left out {gate['left_out']}."


#: Why a ranking combined from gate draws is or is not informative (codes of
#: :func:`papa.analysis.robustness.ranking_judgement`), filled with ``overlap``, ``chance``, ``p`` and ``rho``.
RANKING_REASONS = {
    "above_chance": "informative: the draws share {overlap} first-half heads (chance {chance}; p = {p}), ρ = {rho}",
    "overlap_at_chance": "no informative ranking: the draws share {overlap} first-half heads, no more than chance"
    " ({chance}; p = {p}); its half-heads drop is read as a random-heads drop",
    "order_at_chance": "no informative ranking: the draws share {overlap} first-half heads (chance {chance}) but"
    " order the heads no better than chance (ρ = {rho}); its half-heads drop is read as a random-heads drop",
    "one_draw": "one gate draw: nothing to agree with",
}
