"""Pooled intervals and the claims' verdicts (papa.analysis.pooled_drops, papa.analysis.claims) on hand-made numbers:
the pooled interval is a percentile interval of the average itself, it covers a known average about 95% of the time,
every branch of every verdict rule gives the verdict written here by hand, and the method chapter states the rules."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from papa.analysis import bootstrap, pooled_drops
from papa.analysis import claims as V
from papa.book import words as W
from papa.book.chapters import results as RS
from papa.book.words import interval_text, percent
from tests.hand_cells import cell, cells, spread

NAN = math.nan
#: The verdicts, every claim's from this set.
VERDICTS = ("reproduced", "reproduced with a smaller effect", "reproduced with a larger effect")
VERDICTS += ("points the paper's way, not significant", "points against the paper, not significant")
VERDICTS += ("not reproduced", "not testable")


# -- the pooled interval ----------------------------------------------------------------------------------------


def test_the_pooled_interval_is_the_percentile_interval_of_the_average_on_every_resample():
    a, b = np.array([0.0, 0.1, 0.2, 0.3]), np.array([0.4, 0.2, 0.0, 0.2])
    frame = cells(
        [cell("m", "sst2", "all", 0.15, a), cell("m", "mnli", "all", 0.2, b), cell("m", "cola", "all", NAN, [0.1] * 4)]
    )
    out = pooled_drops.pooled_drop(frame)
    averages = (a + b) / 2  # [0.2, 0.15, 0.1, 0.25]
    assert (out["value"], out["n"], out["excluded"], out["tasks"]) == (pytest.approx(0.175), 2, 1, ["mnli", "sst2"])
    assert (out["low"], out["high"]) == (
        pytest.approx(np.quantile(averages, 0.025)),
        pytest.approx(np.quantile(averages, 0.975)),
    )
    assert (out["low"], out["high"]) == (pytest.approx(0.10375), pytest.approx(0.24625))


def test_a_resample_without_a_drop_leaves_its_cell_out_and_counts_it():
    frame = cells([cell("m", "sst2", "all", 0.1, [0.1, 0.2]), cell("m", "cola", "all", 0.3, [0.3, NAN])])
    out = pooled_drops.pooled_drop(frame)
    assert (out["value"], out["n"], out["excluded"]) == (pytest.approx(0.1), 1, 1)
    empty = pooled_drops.pooled_drop(frame.iloc[:0])
    assert (empty["n"], math.isnan(empty["value"]), math.isnan(empty["low"])) == (0, True, True)


def _accuracy_stats(correct: np.ndarray) -> np.ndarray:
    return np.stack([correct, np.ones_like(correct)], axis=1).astype(float)


def test_one_cell_pooled_is_its_paired_bootstrap_interval():
    rng = np.random.default_rng(3)
    base, other = rng.random(300) < 0.8, rng.random(300) < 0.7
    rows = bootstrap.resample_rows(300, 500, 0, "dev-a")
    out = bootstrap.paired_bootstrap(
        [_accuracy_stats(base)], [_accuracy_stats(other)], "accuracy", resamples=500, rows=rows
    )
    pooled_one = pooled_drops.pooled_drop(
        cells([cell("m", "sst2", "all", out["relative_drop"], out["relative_samples"])])
    )
    assert (pooled_one["value"], pooled_one["low"], pooled_one["high"]) == (
        out["relative_drop"],
        pytest.approx(out["relative_low"]),
        pytest.approx(out["relative_high"]),
    )


def test_each_dev_set_has_its_own_resample_stream_and_a_shared_one_is_shared():
    a, b = bootstrap.resample_rows(50, 4, 0, "sha-a"), bootstrap.resample_rows(50, 4, 0, "sha-b")
    assert (a == bootstrap.resample_rows(50, 4, 0, "sha-a")).all() and not (a == b).all()
    assert (bootstrap.resample_rows(50, 4, 0) == np.random.default_rng(0).integers(0, 50, size=(4, 50))).all()


#: The known joint distribution of (correct at k = 0, correct at k) per task: P(1,1), P(1,0), P(0,1), P(0,0).
JOINT = {"t1": (0.70, 0.10, 0.05, 0.15), "t2": (0.80, 0.10, 0.00, 0.10)}


def test_the_pooled_interval_covers_the_true_average_about_95_percent_of_the_time():
    """Two tasks with known per-example distributions (true relative drops 0.05/0.80 and 0.10/0.90): over 200 seeded
    draws of 300 dev examples per task, the pooled 95% interval holds the true average drop in 92–98% of them (±2
    binomial standard errors)."""
    truth = np.mean([(p11 + p10 - (p11 + p01)) / (p11 + p10) for p11, p10, p01, _ in JOINT.values()])
    rng = np.random.default_rng(2026)
    covered, draws, n, resamples = 0, 200, 300, 200
    for draw in range(draws):
        rows = []
        for task, probabilities in JOINT.items():
            outcome = rng.choice(4, size=n, p=probabilities)  # 0: (1,1), 1: (1,0), 2: (0,1), 3: (0,0)
            base, other = np.isin(outcome, (0, 1)), np.isin(outcome, (0, 2))
            found = bootstrap.paired_bootstrap(
                [_accuracy_stats(base)],
                [_accuracy_stats(other)],
                "accuracy",
                resamples=resamples,
                rows=bootstrap.resample_rows(n, resamples, draw, task),
            )
            rows.append(cell("m", task, "all", found["relative_drop"], found["relative_samples"]))
        out = pooled_drops.pooled_drop(cells(rows))
        covered += out["low"] <= truth <= out["high"]
    assert truth == pytest.approx((0.05 / 0.80 + 0.10 / 0.90) / 2)
    assert 0.92 <= covered / draws <= 0.98, covered  # 187 of 200 with these seeds


# -- the verdict rules, every branch ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, low, high, verdict",
    [
        (0.01, -0.01, 0.04, "reproduced"),
        (-0.03, -0.05, -0.01, "reproduced"),  # a real gain is no drop
        (0.09, 0.06, 0.12, "not reproduced"),
        (0.04, 0.01, 0.07, "points the paper's way, not significant"),
        (0.06, 0.03, 0.09, "points against the paper, not significant"),
        (NAN, NAN, NAN, "not testable"),
    ],
)
def test_claim1_rule(value, low, high, verdict):
    assert W.verdict_words(V.claim1_verdict(value, low, high)) == verdict


def test_claim1_reasons_say_which_end_decides():
    assert (
        W.reason("claim1", V.claim1_verdict(0.01, -0.01, 0.04))
        == "The whole interval of the average drop lies at or below 5% (upper end 4.0%)."
    )
    assert (
        W.reason("claim1", V.claim1_verdict(0.04, 0.01, 0.07))
        == "The average drop 4.0% is at most 5%, but its interval reaches 7.0%."
    )


@pytest.mark.parametrize(
    "value, low, high, verdict",
    [
        (NAN, NAN, NAN, "not testable"),
        (-0.05, -0.08, -0.02, "not reproduced"),  # a real gain
        (0.30, 0.25, 0.35, "reproduced with a larger effect"),  # the average alone: the bound is claim 2b's
        (0.02, -0.01, 0.05, "points the paper's way, not significant"),
        (-0.01, -0.03, 0.01, "points against the paper, not significant"),
        (0.12, 0.09, 0.15, "reproduced with a larger effect"),  # the whole interval above 8%
        (0.046, 0.028, 0.063, "reproduced with a smaller effect"),  # the 4.6% [2.8%, 6.3%]
        (0.08, 0.05, 0.11, "reproduced"),
        (0.069, 0.057, 0.081, "reproduced"),  # the book's 6.9% [5.7%, 8.1%] holds 8%: claim 2a is reproduced
    ],
)
def test_claim2_average_rule(value, low, high, verdict):
    assert W.verdict_words(V.claim2_verdict(value, low, high)) == verdict


def test_claim2_reason_names_the_direction():
    reason = W.reason("claim2", V.claim2_verdict(0.046, 0.028, 0.063))
    assert reason == "A real drop, smaller than the paper's 8%: the whole interval lies below it (upper end 6.3%)."


def _bound(*drops: tuple[float, float, float]) -> pd.DataFrame:
    rows = [
        {"model": "m", "task": t, "relative_drop": d, "relative_low": lo, "relative_high": hi}
        for t, (d, lo, hi) in zip(("cola", "sst2", "mnli"), drops)
    ]
    return pd.DataFrame(rows, columns=["model", "task", "relative_drop", "relative_low", "relative_high"])


@pytest.mark.parametrize(
    "drops, verdict",
    [
        ((), "not testable"),
        (((0.347, 0.239, 0.462), (0.05, 0.01, 0.09)), "not reproduced"),  # the book's mpnet-base CoLA: shown above 20%
        (((0.10, 0.05, 0.15), (0.05, 0.01, 0.09)), "reproduced"),  # every interval at or below 20%
        (((0.15, 0.05, 0.25), (0.05, 0.01, 0.09)), "points the paper's way, not significant"),
        (((0.25, 0.15, 0.35), (0.05, 0.01, 0.09)), "points against the paper, not significant"),
    ],
)
def test_claim2_bound_rule(drops, verdict):
    assert W.verdict_words(V.claim2_bound_verdict(_bound(*drops))) == verdict


def test_claim2_bound_reason_names_the_pair():
    reason = W.reason("claim2b", V.claim2_bound_verdict(_bound((0.347, 0.239, 0.462), (0.05, 0.01, 0.09))))
    assert reason == "m on CoLA alone is shown to lose more than 20% (lower end 23.9%)."


@pytest.mark.parametrize(
    "drops, verdict",
    [
        ([0.01, 0.05], "not testable"),
        ([0.01, 0.02, 0.03, 0.08], "reproduced"),  # ρ = +1 over 4 models: p = 1/24
        ([0.08, 0.03, 0.02, 0.01], "not reproduced"),  # ρ = −1: p = 1/24 the other way
        ([0.01, 0.02, 0.05], "points the paper's way, not significant"),  # 3 models: p ≥ 1/6
        ([0.05, 0.02, 0.01], "points against the paper, not significant"),
        ([0.02, 0.02, 0.02], "points against the paper, not significant"),  # ρ undefined → no direction
    ],
)
def test_claim3_rule(drops, verdict):
    scores = [0.6, 0.7, 0.8, 0.9][: len(drops)]
    better = pooled_drops.claim3(pd.DataFrame({"drop": drops, "score": scores}))
    assert W.verdict_words(V.claim3_verdict(better)) == verdict


def test_claim3_reason_at_three_models_says_the_floor_of_p():
    better = pooled_drops.claim3(pd.DataFrame({"drop": [0.01, 0.02, 0.05], "score": [0.7, 0.8, 0.9]}))
    assert (
        W.reason("claim3", V.claim3_verdict(better)) == "Spearman ρ = +1.00 over 3 models, but one-sided exact p "
        "= 0.167 (with 3 models the smallest possible p is 1/6)."
    )


def test_intervals_are_written_without_negative_zero_and_an_undefined_one_as_a_dash():
    assert interval_text(-0.00001, -0.01, 0.0) == "0.0% [-1.0%, 0.0%]" and interval_text(NAN, 0, 1) == "–"


# -- the claims and the sensitivity table on hand-made cells --------------------------------------------------


def _grid() -> pd.DataFrame:
    """Three models on SST-2 (sentence) and NER (token), CoLA uninformative and without a drop for model a."""
    rows = []
    for model, score, (sst, ner) in (("a", 0.70, (0.04, 0.00)), ("b", 0.80, (0.08, 0.01)), ("c", 0.90, (0.14, 0.04))):
        for task, drop in (("sst2", sst), ("ner", ner)):
            rows += [
                cell(model, task, "half", drop / 4, spread(drop / 4, 0.01), score_0=score),
                cell(model, task, "all", drop, spread(drop, 0.01), score_0=score),
            ]
        cola = NAN if model == "a" else 0.3
        rows += [
            cell(
                model,
                "cola",
                at,
                cola,
                spread(0.3, 0.1) if model != "a" else [NAN] * 101,
                informative=False,
                score_0=0.1,
            )
            for at in ("half", "all")
        ]
    return cells(rows)


def test_claims_table_reads_the_pooled_drops():
    claims = RS.claims_frame(V.judge(_grid()), {"runs": 10, "converged": 9, "left_out": 1}).set_index(
        pd.Index(["1", "2a", "2b", "3"])
    )
    assert (
        V.judge(_grid()).evidence.all["value"] == pytest.approx(0.31 / 6)
        and claims.loc["2a", "verdict"] == "reproduced with a smaller effect"
    )
    assert (
        claims.loc["1", "verdict"] == "reproduced"
        and claims.loc["3", "verdict"] == "points the paper's way, not significant"
    )
    assert claims.loc["2a", "ours"].startswith("5.2% [") and claims.loc["2a", "ours"].endswith(
        "average relative drop over 6 informative model/task pairs"
    )
    assert (
        claims.loc["2b", "ours"].startswith("largest single drop 14.0% [13.1%, 15.0%] (c, SST-2)")
        and claims.loc["2b", "verdict"] == "reproduced"
    )
    assert (
        "a 2.0% [" in claims.loc["3", "ours"]
        and " at 0.700" in claims.loc["3", "ours"]
        and claims.loc["3", "rule"].endswith("9 of 10 probe results converged; the gate left out 1.")
    )
    assert set(claims["verdict"]) <= set(VERDICTS)


def test_each_claim_is_judged_once_into_one_frozen_judgement():
    """Every claim of CLAIMS has its words and one judgement: the number its verdict rests on, its interval and what
    that interval covers; the informative basis of the sensitivity table is the same judgement object."""
    judged = V.judge(_grid())
    assert [c.key for c in V.CLAIMS] == list(judged.judgements) == list(W.CLAIM_WORDS)
    half, bound, rho = (judged.judgements[k] for k in ("claim1", "claim2b", "claim3"))
    assert (half.value, half.low, half.high, half.covers) == (
        judged.evidence.half["value"],
        judged.evidence.half["low"],
        judged.evidence.half["high"],
        "pooled",
    )
    assert (bound.value, bound.covers, bound.verdict, bound.reason) == (
        pytest.approx(0.14),
        "pair",
        "reproduced",
        "every_task_below",
    )
    assert (rho.value, math.isnan(rho.low), rho.covers, rho.verdict) == (1.0, True, "none", "paper_way")
    with pytest.raises(AttributeError):
        half.verdict = "reproduced"  # frozen
    assert V.judge_bases(_grid(), judged)["informative"] is judged


def test_sensitivity_every_task_and_per_family():
    table = RS.sensitivity_frame(V.judge_bases(_grid())).set_index("basis")
    informative, every, sentence, token = (table.iloc[i] for i in range(4))
    assert (every["excluded_half"], every["excluded_all"]) == (1, 1)  # one pair, (a, cola): undefined on both sides
    assert (informative["n_all"], every["n_all"], sentence["n_all"], token["n_all"]) == (6, 8, 3, 3)
    assert every["claim2"].startswith(f"{percent((0.31 + 0.6) / 8)} [")
    assert (sentence["claim2_verdict"], token["claim2_verdict"]) == ("reproduced", "reproduced with a smaller effect")
    assert sentence["paper"].startswith("none: the paper states no average per task family") and informative[
        "paper"
    ].startswith("little or no drop at half")


def test_the_method_chapter_states_every_verdict_and_threshold_before_the_results():
    method = Path("book/method.md").read_text(encoding="utf-8")
    rules = method.index("## Verdicts: the rules, stated before the results")
    for verdict in VERDICTS:
        assert f"*{verdict}*" in method[rules:].replace("\n   ", " ").replace("\n", " "), verdict
    for threshold in (V.HALF_MAX_DROP, V.PAPER_DROP_ALL, V.MAX_DROP_ALL):
        assert f"{threshold:.0%}".replace("%", "\\%") in method[rules:] or f"{threshold:.0%}" in method[rules:]
    assert f"{bootstrap.RESAMPLES:,} times (seed 0" in " ".join(method.split())


def test_claim3_with_two_models_has_no_rho_and_says_so():
    two = _grid()[_grid()["model"] != "c"]
    claims = RS.claims_frame(V.judge(two), {"runs": 4, "converged": 4, "left_out": 0})
    assert claims.iloc[3]["ours"].startswith(
        "no ρ (2 models); drop at k = 0 score, per model over NER "
        "(CoNLL-2003), SST-2: a 2.0% [1.0%, 2.9%] at 0.700, b 4.5% ["
    )
    assert claims.iloc[3]["verdict"] == "not testable"


def test_every_branch_of_every_rule_has_its_sentence_and_no_sentence_is_unreachable():
    """Each hand-made case above, worded by the book: every (claim, branch) the rules reach has a template that
    fills without a missing value, and every template is reached by some case."""
    reached = {}
    for value, low, high in [(0.01, -0.01, 0.04), (0.09, 0.06, 0.12), (0.04, 0.01, 0.07), (0.06, 0.03, 0.09)]:
        reached["claim1", V.claim1_verdict(value, low, high).reason] = V.claim1_verdict(value, low, high)
    reached["claim1", "no_cells"] = V.claim1_verdict(NAN, NAN, NAN)
    for value, low, high in [(NAN, NAN, NAN), (-0.05, -0.08, -0.02), (0.02, -0.01, 0.05), (-0.01, -0.03, 0.01)]:
        reached["claim2", V.claim2_verdict(value, low, high).reason] = V.claim2_verdict(value, low, high)
    for value, low, high in [(0.12, 0.09, 0.15), (0.046, 0.028, 0.063), (0.08, 0.05, 0.11)]:
        reached["claim2", V.claim2_verdict(value, low, high).reason] = V.claim2_verdict(value, low, high)
    for drops in [(), ((0.347, 0.239, 0.462),), ((0.10, 0.05, 0.15),), ((0.15, 0.05, 0.25),), ((0.25, 0.15, 0.35),)]:
        verdict = V.claim2_bound_verdict(_bound(*drops))
        reached["claim2b", verdict.reason] = verdict
    for drops in [[0.01, 0.05], [0.01, 0.02, 0.03, 0.08], [0.08, 0.03, 0.02, 0.01], [0.01, 0.02, 0.05]]:
        better = pooled_drops.claim3(pd.DataFrame({"drop": drops, "score": [0.6, 0.7, 0.8, 0.9][: len(drops)]}))
        reached["claim3", V.claim3_verdict(better).reason] = V.claim3_verdict(better)
    for drops in [[0.05, 0.02, 0.01], [0.02, 0.02, 0.02]]:
        better = pooled_drops.claim3(pd.DataFrame({"drop": drops, "score": [0.7, 0.8, 0.9]}))
        reached["claim3", V.claim3_verdict(better).reason] = V.claim3_verdict(better)
    assert set(reached) == set(W.REASONS)
    for (key, _), verdict in reached.items():
        sentence = W.reason(key, verdict)
        assert sentence.endswith(".") and "{" not in sentence and W.verdict_words(verdict) in VERDICTS, sentence


def test_every_verdict_code_of_the_analysis_has_its_words():
    """The analysis gives codes, the book's words write them: a code without words would fail on a page."""
    from papa.analysis import drop_tables
    from papa.analysis import replacements as RP

    assert set(W.VERDICT_WORDS) == set(V.VERDICTS) and set(W.VERDICT_WORDS.values()) == set(VERDICTS)
    assert set(W.REPLACEMENT_ANSWERS) == set(RP.ANSWERS) and set(W.REPLACEMENT_QUESTIONS) == set(RP.ALTERNATIVES)
    assert set(W.RANDOM_VERDICTS) == set(drop_tables.RANDOM_VERDICTS)
    assert set(W.BASIS_WORDS) == {code for code, _, _ in V.BASES}
