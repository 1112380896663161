"""Paired bootstrap intervals, the convergence gate and the claim-3 rule (papa.analysis.bootstrap) on hand-made numbers.

The bootstrap is checked against a naive loop over the documented two-level resamples (seeds drawn from
``default_rng([seed, 1])`` and, for the other side of an unpaired comparison, ``default_rng([seed, 2])``; examples from
rows of ``default_rng(seed).integers(0, N, size=(R, N))``), recomputing each metric with scikit-learn or papa's own
metric code on every resample.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from papa.analysis import bootstrap, pooled_drops
from papa.analysis.basis import gate_runs
from papa.analysis.claims import claim3_verdict
from papa.book import words as W
from papa.core.errors import PapaError
from papa.probing.metrics import statistics as metric_stats


def _naive(base_preds, other_preds, labels, score, resamples, seed=0, level=0.95, paired=False):
    """The documented procedure, one resample at a time: draw the seeds (as pairs when ``paired``), then the dev
    examples, and take the drawn seeds' mean metric at k minus at k = 0."""
    labels = np.asarray(labels)
    rows = np.random.default_rng(seed).integers(0, len(labels), size=(resamples, len(labels)), dtype=np.int64)
    seeds_base = np.random.default_rng([seed, 1]).integers(0, len(base_preds), size=(resamples, len(base_preds)))
    seeds_other = (
        seeds_base
        if paired
        else np.random.default_rng([seed, 2]).integers(0, len(other_preds), size=(resamples, len(other_preds)))
    )
    diffs = []
    for row, drawn_base, drawn_other in zip(rows, seeds_base, seeds_other):
        base = np.mean([score(labels[row], np.asarray(base_preds[i])[row]) for i in drawn_base])
        other = np.mean([score(labels[row], np.asarray(other_preds[i])[row]) for i in drawn_other])
        diffs.append(other - base)
    tail = (1 - level) / 2
    return np.quantile(diffs, [tail, 1 - tail])


def test_all_wrong_to_all_right_is_a_real_gain_of_one():
    labels = [0, 1, 1, 0, 1]
    base = [metric_stats.example_statistics("accuracy", [1, 0, 0, 1, 0], labels)]
    other = [metric_stats.example_statistics("accuracy", labels, labels)]
    out = bootstrap.paired_bootstrap(base, other, "accuracy", resamples=200)
    assert (out["base_score"], out["score"], out["difference"], out["low"], out["high"], out["real"]) == (
        0.0,
        1.0,
        1.0,
        1.0,
        1.0,
        True,
    )
    assert (out["n_examples"], out["n_base"], out["n_runs"], out["resamples"], out["seed_min"], out["seed_max"]) == (
        5,
        1,
        1,
        200,
        1.0,
        1.0,
    )


def test_one_changed_example_of_four_is_not_real():
    """Only example 1 changes (right → wrong): each resample's difference is −(times example 1 is drawn)/4, and
    (3/4)^4 = 32% of resamples miss it, so the upper end is exactly 0: not real."""
    labels = [1, 1, 0, 0]
    base_preds, other_preds = [1, 1, 1, 1], [1, 0, 1, 1]
    out = bootstrap.paired_bootstrap(
        [metric_stats.example_statistics("accuracy", base_preds, labels)],
        [metric_stats.example_statistics("accuracy", other_preds, labels)],
        "accuracy",
        resamples=500,
        seed=3,
    )
    assert out["difference"] == -0.25 and out["high"] == 0.0 and out["real"] is False
    low, high = _naive([base_preds], [other_preds], labels, accuracy_score, 500, seed=3)
    assert (out["low"], out["high"]) == (low, high)
    assert out["relative_drop"] == 0.25 / 0.5


def test_accuracy_with_three_seeds_matches_the_naive_loop():
    rng = np.random.default_rng(7)
    labels = rng.integers(0, 3, 60)
    base = [np.where(rng.random(60) < 0.8, labels, (labels + 1) % 3) for _ in range(3)]
    other = [np.where(rng.random(60) < 0.6, labels, (labels + 2) % 3) for _ in range(3)]
    out = bootstrap.paired_bootstrap(
        [metric_stats.example_statistics("accuracy", p, labels) for p in base],
        [metric_stats.example_statistics("accuracy", p, labels) for p in other],
        "accuracy",
        resamples=100,
        seed=11,
    )
    low, high = _naive(base, other, labels, accuracy_score, 100, seed=11)
    assert out["low"] == pytest.approx(low, abs=1e-12) and out["high"] == pytest.approx(high, abs=1e-12)
    per_seed = [accuracy_score(labels, o) - accuracy_score(labels, b) for b, o in zip(base, other)]
    assert out["difference"] == pytest.approx(np.mean(per_seed), abs=1e-12)
    assert (out["seed_min"], out["seed_max"]) == (pytest.approx(min(per_seed)), pytest.approx(max(per_seed)))
    assert high < 0 and out["real"] is True  # about 80% → 60%: the naive loop's interval lies below 0
    same = [metric_stats.example_statistics("accuracy", p, labels) for p in base]
    assert (
        bootstrap.paired_bootstrap(same, same, "accuracy", resamples=100, seed=11)["real"] is False
    )  # no change at all


def test_paired_seeds_are_drawn_as_pairs_like_the_naive_loop():
    rng = np.random.default_rng(8)
    labels = rng.integers(0, 2, 50)
    base = [np.where(rng.random(50) < 0.85, labels, 1 - labels) for _ in range(3)]
    other = [np.where(rng.random(50) < 0.65, labels, 1 - labels) for _ in range(3)]
    stats = lambda runs: [bootstrap.example_statistics("accuracy", p, labels) for p in runs]  # noqa: E731
    pairs = [(0, 0), (1, 1), (2, 2)]
    out = bootstrap.paired_bootstrap(stats(base), stats(other), "accuracy", resamples=80, seed=4, pairs=pairs)
    low, high = _naive(base, other, labels, accuracy_score, 80, seed=4, paired=True)
    assert out["low"] == pytest.approx(low, abs=1e-12) and out["high"] == pytest.approx(high, abs=1e-12)


def _accuracy_runs(labels: np.ndarray, rights: list[int]) -> list[np.ndarray]:
    """One run per entry: right on its first ``right`` examples, wrong on the rest (binary labels)."""
    return [bootstrap.example_statistics("accuracy", np.r_[labels[:r], 1 - labels[r:]], labels) for r in rights]


def test_seeds_far_apart_widen_the_interval_the_verdict_is_decided_on():
    """Two comparisons with the same seed-mean drop, 80% → 60% on 200 dev examples: the seeds of one agree (60%,
    60%, 60%), the seeds of the other lie far apart (90%, 60%, 30%). Over dev examples alone both intervals would be
    about as wide; over seeds and examples the far-apart seeds' interval is several times wider and reaches above 0,
    so its drop is not real, while the agreeing seeds' drop is."""
    labels = np.random.default_rng(0).integers(0, 2, 200)
    base = _accuracy_runs(labels, [160, 160, 160])
    pairs = [(0, 0), (1, 1), (2, 2)]
    agree = bootstrap.paired_bootstrap(base, _accuracy_runs(labels, [120] * 3), "accuracy", pairs=pairs)
    apart = bootstrap.paired_bootstrap(base, _accuracy_runs(labels, [180, 120, 60]), "accuracy", pairs=pairs)
    assert agree["difference"] == pytest.approx(-0.2) and apart["difference"] == pytest.approx(-0.2)
    assert agree["real"] is True and agree["high"] < -0.1
    assert apart["real"] is False and apart["high"] >= 0.05  # all three draws of the 90% seed: +0.1
    assert apart["high"] - apart["low"] > 3 * (agree["high"] - agree["low"])
    interval = bootstrap.score_interval(_accuracy_runs(labels, [180, 120, 60]), "accuracy")
    assert interval["score"] == pytest.approx(0.6) and interval["low"] < 0.35 and interval["high"] > 0.85


def test_one_seed_draws_nothing_at_the_seed_level():
    counts = bootstrap.resample_seeds(1, 50, seed=3, dev_set="x")
    assert counts.shape == (50, 1) and (counts == 1).all()
    many = bootstrap.resample_seeds(3, 400, seed=3, dev_set="x")
    assert (many.sum(1) == 3).all() and len({tuple(r) for r in many}) == 10  # every multiset of 3 seeds


@pytest.mark.parametrize("classes", [2, 3])
def test_mcc_is_recomputed_on_every_resample(classes: int):
    rng = np.random.default_rng(classes)
    labels = rng.integers(0, classes, 40)
    base = [np.where(rng.random(40) < 0.75, labels, rng.integers(0, classes, 40)) for _ in range(2)]
    other = [np.where(rng.random(40) < 0.55, labels, rng.integers(0, classes, 40)) for _ in range(2)]
    to_stats = lambda preds: metric_stats.example_statistics("matthews_correlation", preds, labels, num_labels=classes)  # noqa: E731
    for preds in base + other:
        assert metric_stats.metric_from_sums("matthews_correlation", to_stats(preds).sum(0)) == pytest.approx(
            matthews_corrcoef(labels, preds), abs=1e-12
        )
    out = bootstrap.paired_bootstrap(
        [to_stats(p) for p in base], [to_stats(p) for p in other], "matthews_correlation", resamples=50, seed=5
    )
    low, high = _naive(base, other, labels, matthews_corrcoef, 50, seed=5)
    assert out["low"] == pytest.approx(low, abs=1e-12) and out["high"] == pytest.approx(high, abs=1e-12)


def test_mcc_of_a_constant_prediction_is_zero():
    labels = [0, 1, 1, 0]
    assert (
        metric_stats.metric_from_sums(
            "matthews_correlation", metric_stats.example_statistics("matthews_correlation", [1, 1, 1, 1], labels).sum(0)
        )
        == 0.0
    )


def test_combined_and_f1_match_scikit_learn():
    labels = [1, 1, 0, 0, 1, 0, 1, 1]
    preds = [1, 0, 0, 1, 1, 0, 1, 0]
    sums = metric_stats.example_statistics("combined", preds, labels).sum(0)
    f1 = f1_score(labels, preds)
    assert metric_stats.metric_from_sums("f1", sums) == pytest.approx(f1, abs=1e-15)
    assert metric_stats.metric_from_sums("combined", sums) == pytest.approx(
        (accuracy_score(labels, preds) + f1) / 2, abs=1e-15
    )
    out = bootstrap.paired_bootstrap(
        [metric_stats.example_statistics("combined", labels, labels)],
        [metric_stats.example_statistics("combined", preds, labels)],
        "combined",
        resamples=100,
    )
    low, high = _naive(
        [labels], [preds], labels, lambda y, p: (accuracy_score(y, p) + f1_score(y, p, zero_division=0)) / 2, 100
    )
    assert out["low"] == pytest.approx(low, abs=1e-12) and out["high"] == pytest.approx(high, abs=1e-12)


def test_token_statistics_match_papa_metrics():
    from papa.probing.metrics import compute_task_metrics

    names = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    refs = [[1, 2, 0, 3], [0, 0], [3, 4, 4, 0, 1]]
    preds = [[1, 2, 0, 0], [0, 1], [3, 4, 0, 0, 1]]
    flat = lambda seqs: [t for s in seqs for t in s]  # noqa: E731
    lengths = [len(s) for s in refs]
    ner = metric_stats.example_statistics("f1", flat(preds), flat(refs), lengths, names)
    assert ner.tolist() == [[1, 1, 2], [0, 1, 0], [1, 2, 2]]  # (correct, predicted, true) spans per sentence
    expected = compute_task_metrics("ner", preds, refs, names)["f1"]
    assert (
        metric_stats.metric_from_sums("f1", ner.sum(0), token=True)
        == pytest.approx(expected, abs=1e-15)
        == 2 * 2 / (4 + 4)
    )
    pos = metric_stats.example_statistics("accuracy", flat(preds), flat(refs), lengths)
    assert pos.tolist() == [[3, 4], [1, 2], [4, 5]]
    assert (
        metric_stats.metric_from_sums("accuracy", pos.sum(0), token=True)
        == compute_task_metrics("pos", preds, refs)["accuracy"]
        == 8 / 11
    )
    with pytest.raises(PapaError, match="The sentence lengths add up to 10 tokens, but there are 11"):
        metric_stats.example_statistics("accuracy", flat(preds), flat(refs), [4, 2, 4])


def test_runs_on_different_dev_examples_are_refused():
    a, b = (
        metric_stats.example_statistics("accuracy", [1, 0], [1, 1]),
        metric_stats.example_statistics("accuracy", [1, 0, 1], [1, 1, 1]),
    )
    with pytest.raises(PapaError, match="The runs score 2 and 3 dev examples"):
        bootstrap.paired_bootstrap([a], [b], "accuracy")


def test_a_resample_count_out_of_range_is_one_clear_error():
    statistics = [metric_stats.example_statistics("accuracy", [1, 0], [1, 1])]
    with pytest.raises(PapaError, match=r"^Bootstrap resamples 0 out of range"):
        bootstrap.paired_bootstrap(statistics, statistics, "accuracy", resamples=0)
    with pytest.raises(PapaError, match=r"^Bootstrap resamples 0 out of range"):
        bootstrap.score_interval(statistics, "accuracy", resamples=0)


def _result(k: int, seed: int, preds: list[int], labels: list[int]) -> dict:
    config = {
        "model": "m",
        "constant_heads": k,
        "total_heads": 8,
        "ranking": "m__sst2__gates.json" if 0 < k < 8 else None,
        "seed": seed,
        "mode": "cached",
        "lr": 2e-5,
    }
    return {
        "config": config,
        "task": "sst2",
        "metric": "accuracy",
        "data": {"eval_indices_sha": "abc"},
        "dev": {"predictions": preds, "labels": labels},
    }


def test_paired_differences_pairs_each_k_with_k0_of_the_same_model_and_task():
    labels = [1, 0, 1, 1, 0, 0]
    results = {
        "a0": _result(0, 42, [1, 0, 1, 1, 0, 0], labels),
        "b0": _result(0, 43, [1, 0, 1, 1, 0, 1], labels),
        "a4": _result(4, 42, [1, 0, 1, 0, 0, 0], labels),  # example 3 lost, example 5 gained: no change on average
        "b4": _result(4, 43, [1, 0, 1, 1, 0, 0], labels),
        "a8": _result(8, 42, [0, 1, 0, 0, 1, 1], labels),
        "b8": _result(8, 43, [0, 1, 0, 0, 1, 1], labels),
    }
    table = bootstrap.paired_differences(results, resamples=400)
    assert table[["ranking", "k", "fraction"]].values.tolist() == [["gates", 4, 0.5], ["all", 8, 1.0]]
    assert table["base_score"].tolist() == [pytest.approx(11 / 12)] * 2
    assert table["score"].tolist() == [pytest.approx(11 / 12), 0.0]
    assert table["difference"].tolist() == [0.0, pytest.approx(-11 / 12)]
    assert table["real"].tolist() == [False, True]  # one example lost and one gained vs every example wrong
    assert table["n_runs"].tolist() == [2, 2]


def test_convergence_gate_counts_and_leaves_out():
    frame = pd.DataFrame({"run_id": ["a", "b", "c", "d"], "converged": [True, False, None, True]})
    kept, summary = gate_runs(frame)
    assert kept == {"a", "d"}
    assert summary == {
        "runs": 4,
        "converged": 2,
        "not_converged": 1,
        "unknown": 1,
        "left_out": 2,
        "left_out_runs": ["b", "c"],
    }


def test_claim3_with_two_models_is_not_testable():
    out = pooled_drops.claim3(pd.DataFrame({"model": ["a", "b"], "score": [0.7, 0.9], "drop": [0.01, 0.05]}))
    assert W.verdict_words(claim3_verdict(out)) == "not testable" and out["n"] == 2 and math.isnan(out["spearman"])


def test_claim3_with_three_models_can_only_be_inconclusive():
    out = pooled_drops.claim3(
        pd.DataFrame({"model": ["a", "b", "c"], "score": [0.7, 0.8, 0.9], "drop": [0.01, 0.02, 0.05]})
    )
    assert out["spearman"] == pytest.approx(1.0) and out["p_value"] == pytest.approx(1 / 6)
    assert out["pearson"] == pytest.approx(12 / math.sqrt(156), abs=1e-12)  # centred x ∝ (-1, 0, 1), y ∝ (-5, -2, 7)
    assert (out["n"], W.verdict_words(claim3_verdict(out))) == (3, "points the paper's way, not significant")
    out = pooled_drops.claim3(
        pd.DataFrame({"model": ["a", "b", "c"], "score": [0.7, 0.8, 0.9], "drop": [0.02, 0.05, 0.01]})
    )
    assert (
        out["spearman"] == pytest.approx(-0.5)
        and out["p_value"] == pytest.approx(3 / 6)
        and W.verdict_words(claim3_verdict(out)) == "points against the paper, not significant"
    )  # P(ρ ≤ −0.5) = 3/6


def test_claim3_with_four_ordered_models():
    scores = [0.6, 0.7, 0.8, 0.9]
    out = pooled_drops.claim3(pd.DataFrame({"score": scores, "drop": [0.01, 0.02, 0.03, 0.08]}))
    assert (out["spearman"], out["p_value"], W.verdict_words(claim3_verdict(out))) == (
        pytest.approx(1.0),
        pytest.approx(1 / 24),
        "reproduced",
    )
    out = pooled_drops.claim3(pd.DataFrame({"score": scores, "drop": [0.08, 0.03, 0.02, 0.01]}))
    assert (out["spearman"], out["p_value"], W.verdict_words(claim3_verdict(out))) == (
        pytest.approx(-1.0),
        pytest.approx(1 / 24),
        "not reproduced",
    )


def test_seeded_random_orderings_are_pooled_and_paired_by_probe_seed():
    labels = [1, 0, 1, 1, 0, 0]
    results = {"a0": _result(0, 42, labels, labels), "b0": _result(0, 43, [1, 0, 1, 1, 0, 1], labels)}
    for name, ordering, seed, preds in (("r1", 1, 43, [0, 0, 1, 1, 0, 0]), ("r2", 2, 42, [1, 0, 1, 1, 0, 0])):
        results[name] = _result(4, seed, preds, labels)
        results[name]["config"]["ranking"] = f"m__sst2__random-{ordering}.json"
    table = bootstrap.paired_differences(results, resamples=100)
    assert table[["ranking", "k", "n_base", "n_runs"]].values.tolist() == [["random", 4, 2, 2]]
    # seed 43: 5/6 → 5/6 (0); seed 42: 6/6 → 6/6 (0): paired by seed, not by position
    assert (table["seed_min"].item(), table["seed_max"].item()) == (0.0, 0.0)


def test_a_seed_the_gate_left_out_at_k_is_left_out_at_k0_too():
    """Seed 43 scores 3/6 at k = 0 and the others 6/6; at k, seeds 42 and 44 predict exactly as at k = 0 and seed 43's
    run is gone (the convergence gate). Paired by seed the difference is exactly 0 and not real; pooling every
    k = 0 run would make the lost seed's low score look like a gain of 1/6 (over dev examples alone a real one; the
    seed level of the interval, which sometimes draws no seed 43, keeps it from being called real)."""
    labels = [1, 0, 1, 1, 0, 0]
    worse = [0, 1, 0, 1, 0, 0]  # 3 of 6 right
    results = {
        "a0": _result(0, 42, labels, labels),
        "b0": _result(0, 43, worse, labels),
        "c0": _result(0, 44, labels, labels),
    }
    results |= {"a4": _result(4, 42, labels, labels), "c4": _result(4, 44, labels, labels)}
    row = bootstrap.paired_differences(results, resamples=300).iloc[0]
    assert (row["base_score"], row["score"], row["difference"], row["low"], row["high"], row["real"]) == (
        1.0,
        1.0,
        0.0,
        0.0,
        0.0,
        False,
    )
    assert (row["n_base"], row["n_runs"], row["n_unpaired"]) == (2, 2, 1)
    labels, worse = labels * 5, worse * 5  # 30 examples: pooled, the lost seed's errors make a gain
    unpaired = bootstrap.paired_bootstrap(
        [metric_stats.example_statistics("accuracy", p, labels) for p in (labels, worse, labels)],
        [metric_stats.example_statistics("accuracy", labels, labels)] * 2,
        "accuracy",
        resamples=300,
    )
    assert unpaired["difference"] == pytest.approx(1 / 6)  # what the pairing prevents
    assert unpaired["low"] == 0.0 and unpaired["real"] is False  # 8/27 of the seed draws hold no seed 43
    with pytest.raises(PapaError, match="No run at k shares a probe seed"):
        bootstrap.paired_bootstrap(
            [metric_stats.example_statistics("accuracy", labels, labels)],
            [metric_stats.example_statistics("accuracy", labels, labels)],
            "accuracy",
            pairs=[],
        )


def test_a_relative_drop_from_a_score_at_or_below_zero_is_undefined():
    """MCC −1/3 at k = 0 (every prediction flipped on 2 of 3 examples) and 0 at k: the difference is +1/3, the
    relative drop is undefined, not a "100% drop"; likewise in papa.analysis.results.relative_drop."""
    from papa.analysis.results import relative_drop

    labels = [1, 0, 1, 0]
    base = [metric_stats.example_statistics("matthews_correlation", [0, 1, 1, 0], labels, num_labels=2)]  # MCC 0
    other = [metric_stats.example_statistics("matthews_correlation", [1, 0, 1, 0], labels, num_labels=2)]  # MCC 1
    out = bootstrap.paired_bootstrap(base, other, "matthews_correlation", resamples=100)
    assert out["base_score"] == 0.0 and math.isnan(out["relative_drop"]) and math.isnan(out["relative_low"])
    assert (
        math.isnan(relative_drop(0.0, -0.01))
        and math.isnan(relative_drop(0.5, 0.0))
        and relative_drop(0.45, 0.5) == pytest.approx(0.1)
    )


def test_claim3_above_nine_models_uses_seeded_random_orderings():
    """Twelve models in perfect order: ρ = 1, and no random ordering of 20,000 reaches it (exact p = 1/12!)."""
    points = pd.DataFrame(
        {"model": [f"m{i}" for i in range(12)], "score": np.linspace(0.6, 0.9, 12), "drop": np.linspace(0.01, 0.2, 12)}
    )
    out = pooled_drops.claim3(points)
    assert (out["n"], out["spearman"], W.verdict_words(claim3_verdict(out))) == (
        12,
        pytest.approx(1.0),
        "reproduced",
    ) and out["p_value"] == 1 / 20001
    assert pooled_drops.claim3(points) == out  # seeded: the same p every time
