"""Metrics against hand-computed values, offline loading of the shipped scripts, majority floors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from papa.core.errors import PapaError
from papa.core.tasks import get_task
from papa.probing.metrics import METRIC_SCRIPTS, compute_task_metrics, load_metric, majority_baseline, metric_path

NER_NAMES = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
O, BP, IP, BL, IL = range(5)


# --- sequence tasks ----------------------------------------------------------------------------


def test_mcc_by_hand():
    refs = [1, 1, 1, 1, 0, 0, 0]
    preds = [1, 1, 1, 0, 0, 0, 1]
    # TP=3 (first three), FN=1, TN=2, FP=1:
    # (TP*TN - FP*FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = (3*2 - 1*1) / sqrt(4*4*3*3) = 5/12
    out = compute_task_metrics("cola", preds, refs)
    assert out["matthews_correlation"] == pytest.approx(5 / 12)
    assert out["main"] == out["matthews_correlation"]
    assert out["accuracy"] == pytest.approx(5 / 7)


def test_mcc_constant_prediction_is_zero():
    assert compute_task_metrics("cola", [1, 1, 1], [1, 0, 1])["main"] == 0.0


def test_mcc_perfect_and_inverted():
    assert compute_task_metrics("cola", [0, 1, 1], [0, 1, 1])["main"] == pytest.approx(1.0)
    assert compute_task_metrics("cola", [1, 0, 0], [0, 1, 1])["main"] == pytest.approx(-1.0)


def test_binary_f1_by_hand():
    preds = [1, 1, 1, 0, 0]
    refs = [1, 0, 0, 0, 1]
    # TP=1, FP=2, FN=1: precision 1/3, recall 1/2, F1 = 2TP/(2TP+FP+FN) = 2/5
    out = load_metric("f1").compute(predictions=preds, references=refs)
    assert out["f1"] == pytest.approx(2 / 5)
    assert out["precision"] == pytest.approx(1 / 3)
    assert out["recall"] == pytest.approx(1 / 2)


def test_f1_without_positives_is_zero():
    assert load_metric("f1").compute(predictions=[0, 0], references=[0, 0])["f1"] == 0.0


def test_mrpc_combined():
    preds = [1, 1, 1, 0, 0, 0]
    refs = [1, 0, 0, 0, 1, 0]
    # TP=1, FP=2, FN=1, TN=2: accuracy 3/6, F1 2/5, combined (0.5 + 0.4) / 2 = 0.45
    out = compute_task_metrics("mrpc", preds, refs)
    assert out["accuracy"] == pytest.approx(0.5)
    assert out["f1"] == pytest.approx(0.4)
    assert out["combined"] == pytest.approx(0.45)
    assert out["main"] == pytest.approx(0.45)


@pytest.mark.parametrize("task", ["sst2", "mnli"])
def test_accuracy_tasks(task):
    out = compute_task_metrics(task, [0, 2, 1, 1], [0, 2, 2, 1])
    assert out["accuracy"] == pytest.approx(0.75)
    assert out["main"] == pytest.approx(0.75)


def test_numpy_like_ints_accepted():
    class FakeInt(int):
        pass

    assert compute_task_metrics("sst2", [FakeInt(1)], [1])["main"] == 1.0


# --- token tasks -------------------------------------------------------------------------------


def test_ner_partly_right_span():
    refs = [[BP, IP, O, BL]]  # spans: PER 0-1, LOC 3-3
    preds = [[BP, O, O, BL]]  # spans: PER 0-0 (wrong end: one FP and one FN), LOC 3-3 (correct)
    # precision = 1/2, recall = 1/2, F1 = 1/2; token accuracy = 3/4
    out = compute_task_metrics("ner", preds, refs, NER_NAMES)
    assert out["precision"] == pytest.approx(0.5)
    assert out["recall"] == pytest.approx(0.5)
    assert out["f1"] == pytest.approx(0.5)
    assert out["accuracy"] == pytest.approx(0.75)
    assert out["main"] == out["f1"]


def test_ner_wrong_type_is_wrong():
    out = compute_task_metrics("ner", [[BL, IL]], [[BP, IP]], NER_NAMES)
    assert out["f1"] == 0.0 and out["accuracy"] == 0.0


def test_ner_span_may_start_with_i():
    # Non-strict (conlleval) mode: I-PER after O opens a span, so PER 1-2 matches the reference.
    out = compute_task_metrics("ner", [[O, IP, IP, O]], [[O, BP, IP, O]], NER_NAMES)
    assert out["f1"] == pytest.approx(1.0)
    assert out["accuracy"] == pytest.approx(0.75)


def test_get_entities_rules():
    from papa.probing.metrics.statistics import get_entities

    assert get_entities(["B-PER", "I-PER", "O", "B-LOC"]) == [("PER", 0, 1), ("LOC", 3, 3)]
    assert get_entities(["I-PER", "I-PER"]) == [("PER", 0, 1)]
    assert get_entities(["B-PER", "I-LOC"]) == [("PER", 0, 0), ("LOC", 1, 1)]  # type change splits
    assert get_entities(["B-PER", "B-PER"]) == [("PER", 0, 0), ("PER", 1, 1)]
    assert get_entities(["I-PER", "B-PER", "I-PER"]) == [("PER", 0, 0), ("PER", 1, 2)]
    assert get_entities(["O", "O"]) == []
    assert get_entities([]) == []


def test_ner_spans_do_not_cross_sentences():
    # Two sentences: "B-PER" | "I-PER" is two one-word spans, not one two-word span.
    out = compute_task_metrics("ner", [[BP], [IP]], [[BP], [BP]], NER_NAMES)
    assert out["f1"] == pytest.approx(1.0)
    assert out["accuracy"] == pytest.approx(0.5)


def test_ner_micro_average_over_types():
    refs = [[BP, O, BL], [BL, IL]]  # PER 0-0, LOC 2-2 | LOC 0-1
    preds = [[BP, O, O], [BL, O]]  # PER 0-0 (ok)     | LOC 0-0 (wrong end)
    # correct 1, predicted 2, true 3: P = 1/2, R = 1/3, F1 = 2PR/(P+R) = 2/5
    out = compute_task_metrics("ner", preds, refs, NER_NAMES)
    assert out["precision"] == pytest.approx(1 / 2)
    assert out["recall"] == pytest.approx(1 / 3)
    assert out["f1"] == pytest.approx(2 / 5)


def test_pos_token_accuracy():
    out = compute_task_metrics("pos", [[0, 1, 1], [3]], [[0, 1, 2], [3]], ["A", "B", "C", "D"])
    assert out == {"accuracy": pytest.approx(0.75), "main": pytest.approx(0.75)}


def test_ner_needs_label_names():
    with pytest.raises(PapaError, match="label_names"):
        compute_task_metrics("ner", [[0]], [[0]])


def test_ner_id_outside_names():
    with pytest.raises(PapaError, match="outside"):
        compute_task_metrics("ner", [[7]], [[0]], NER_NAMES)


# --- input errors ------------------------------------------------------------------------------


def test_length_mismatch():
    with pytest.raises(PapaError, match="2 predictions but 1 references"):
        compute_task_metrics("sst2", [0, 1], [0])


def test_sentence_length_mismatch():
    with pytest.raises(PapaError, match="Sentence 0"):
        compute_task_metrics("pos", [[0, 1]], [[0]], ["A", "B"])


def test_empty_predictions():
    with pytest.raises(PapaError, match="No predictions"):
        compute_task_metrics("sst2", [], [])


def test_ignored_positions_rejected():
    with pytest.raises(PapaError, match="-100"):
        compute_task_metrics("pos", [[0, -100]], [[0, -100]], ["A"])


def test_unknown_metric():
    with pytest.raises(PapaError, match="accuracy"):
        load_metric("bleu")


# --- majority baseline ---------------------------------------------------------------------------


def test_majority_baseline_sequence():
    assert majority_baseline("sst2", [1, 1, 0], [1, 0, 0, 0])["accuracy"] == pytest.approx(0.25)
    assert majority_baseline("cola", [1, 1, 0], [1, 0, 1])["main"] == 0.0  # constant => MCC 0


def test_majority_baseline_mrpc():
    out = majority_baseline(get_task("mrpc"), [0, 1, 1], [1, 0, 1, 1])
    # always 1: accuracy 3/4; TP=3, FP=1, FN=0 => F1 = 6/7
    assert out["accuracy"] == pytest.approx(0.75)
    assert out["f1"] == pytest.approx(6 / 7)
    assert out["main"] == pytest.approx((0.75 + 6 / 7) / 2)


def test_majority_baseline_tie_goes_to_smallest_id():
    assert majority_baseline("mnli", [2, 1, 2, 1], [1, 2])["accuracy"] == pytest.approx(0.5)
    assert majority_baseline("mnli", [2, 1, 2, 1], [1, 1])["accuracy"] == pytest.approx(1.0)


def test_majority_baseline_ner_is_zero_f1():
    train = [[O, BP, IP, O], [O, O]]
    evals = [[BP, O, O], [O]]
    out = majority_baseline("ner", train, evals, NER_NAMES)
    assert out["f1"] == 0.0
    assert out["accuracy"] == pytest.approx(3 / 4)


def test_majority_baseline_pos():
    out = majority_baseline("pos", [[2, 2, 1], [0, 2]], [[2, 1], [2, 2, 0]], ["A", "B", "C"])
    assert out["main"] == pytest.approx(3 / 5)


def test_majority_baseline_needs_train_labels():
    with pytest.raises(PapaError, match="No training labels"):
        majority_baseline("sst2", [], [1])


# --- shipping and offline loading ----------------------------------------------------------------


def test_scripts_ship_inside_the_package():
    import papa

    package = Path(papa.__file__).resolve().parent
    for folder in METRIC_SCRIPTS.values():
        script = package / "probing" / "metrics" / folder / f"{folder}.py"
        assert script.is_file()
        assert metric_path(folder) == script.parent


def test_evaluate_loads_scripts_offline(tmp_path):
    """Each script loads with evaluate.load(folder) with the hub switched off, in a fresh process."""
    folders = {name: str(metric_path(name)) for name in METRIC_SCRIPTS}
    code = (
        "import json, sys, evaluate\n"
        "folders = json.loads(sys.argv[1])\n"
        "out = {}\n"
        "for name, folder in folders.items():\n"
        "    m = evaluate.load(folder)\n"
        "    if name == 'seqeval':\n"
        "        out[name] = m.compute(predictions=[['B-X', 'O']], references=[['B-X', 'I-X']])\n"
        "    else:\n"
        "        out[name] = m.compute(predictions=[1, 0, 1], references=[1, 0, 0])\n"
        "print(json.dumps(out))\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_EVALUATE_OFFLINE": "1"}
    env["HF_MODULES_CACHE"] = str(tmp_path / "modules")  # a fresh module cache: nothing pre-loaded
    proc = subprocess.run(
        [sys.executable, "-c", code, json.dumps(folders)], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["accuracy"]["accuracy"] == pytest.approx(2 / 3)
    assert out["f1"]["f1"] == pytest.approx(2 / 3)
    assert out["mcc"]["matthews_correlation"] == pytest.approx(0.5)
    assert out["seqeval"]["f1"] == 0.0 and out["seqeval"]["accuracy"] == pytest.approx(0.5)


# --- one implementation: the scripts compute through the bootstrap's statistics ------------------------------------
def _scalar_scores(preds: list, refs: list) -> dict[str, float]:
    """The scripts' scalar formulas before they computed through the statistics (Python ints, exact)."""
    from collections import Counter
    from math import sqrt

    n, correct = len(refs), sum(int(p == r) for p, r in zip(preds, refs))
    tp = sum(p == 1 and r == 1 for p, r in zip(preds, refs))
    fp, fn = sum(p == 1 and r != 1 for p, r in zip(preds, refs)), sum(p != 1 and r == 1 for p, r in zip(preds, refs))
    pc, tc = Counter(preds), Counter(refs)
    cov_pt = correct * n - sum(pc[k] * tc[k] for k in set(pc) | set(tc))
    denom = sqrt((n * n - sum(c * c for c in pc.values())) * (n * n - sum(c * c for c in tc.values())))
    return {
        "accuracy": correct / n,
        "f1": 2 * tp / (2 * tp + fp + fn) if tp else 0.0,
        "precision": tp / (tp + fp) if tp + fp else 0.0,
        "recall": tp / (tp + fn) if tp + fn else 0.0,
        "matthews_correlation": cov_pt / denom if denom else 0.0,
    }


def _scalar_spans(preds: list, refs: list) -> dict[str, float]:
    from papa.probing.metrics.statistics import get_entities

    found = [set(get_entities(p)) for p in preds]
    true = [set(get_entities(r)) for r in refs]
    n_correct, n_pred, n_true = sum(len(f & t) for f, t in zip(found, true)), sum(map(len, found)), sum(map(len, true))
    precision = n_correct / n_pred if n_pred else 0.0
    recall = n_correct / n_true if n_true else 0.0
    tokens = sum(len(r) for r in refs)
    return {
        "precision": precision,
        "recall": recall,
        "f1": 2 * precision * recall / (precision + recall) if precision + recall else 0.0,
        "accuracy": sum(int(a == b) for p, r in zip(preds, refs) for a, b in zip(p, r)) / tokens,
    }


@pytest.mark.parametrize("seed", range(6))
def test_the_scripts_give_the_bits_of_their_scalar_formulas_and_the_bootstraps_point_estimate(seed):
    import numpy as np
    from sklearn.metrics import matthews_corrcoef

    from papa.analysis.bootstrap import score_interval
    from papa.probing.metrics.statistics import example_statistics

    rng = np.random.default_rng(seed)
    n, classes = int(rng.integers(5, 3000)), int(rng.integers(2, 4))
    refs = rng.integers(0, classes, n).tolist()
    preds = [r if rng.random() < 0.7 else int(rng.integers(0, classes)) for r in refs]
    expected = _scalar_scores(preds, refs)
    got = {name: _compute(name, preds, refs) for name in ("accuracy", "f1", "mcc")}
    assert got["accuracy"]["accuracy"] == expected["accuracy"]  # bit for bit
    assert got["mcc"]["matthews_correlation"] == expected["matthews_correlation"]
    assert got["mcc"]["matthews_correlation"] == pytest.approx(matthews_corrcoef(refs, preds), abs=1e-12)
    assert {k: got["f1"][k] for k in ("f1", "precision", "recall")} == {
        k: expected[k] for k in ("f1", "precision", "recall")
    }
    for task in ("cola", "sst2", "mrpc") if classes == 2 else ("cola",):
        metric = get_task(task).main_metric
        stats = example_statistics(metric, preds, refs, num_labels=classes)
        point = score_interval([stats], metric, resamples=1)["score"]
        assert point == compute_task_metrics(task, preds, refs)["main"]  # the reported score, by construction


def _compute(name: str, preds: list, refs: list) -> dict[str, float]:
    return load_metric(name).compute(predictions=preds, references=refs)


@pytest.mark.parametrize("seed", range(4))
def test_entity_scores_give_the_bits_of_the_scalar_seqeval_formulas_and_of_the_bootstrap(seed):
    import numpy as np

    from papa.analysis.bootstrap import score_interval
    from papa.probing.metrics.statistics import example_statistics

    rng = np.random.default_rng(seed)
    refs = [
        rng.integers(0, len(NER_NAMES), int(rng.integers(1, 12))).tolist() for _ in range(int(rng.integers(3, 300)))
    ]
    preds = [[t if rng.random() < 0.6 else int(rng.integers(0, len(NER_NAMES))) for t in r] for r in refs]
    as_names = lambda seqs: [[NER_NAMES[t] for t in s] for s in seqs]  # noqa: E731
    got = compute_task_metrics("ner", preds, refs, NER_NAMES)
    expected = _scalar_spans(as_names(preds), as_names(refs))
    assert {k: got[k] for k in expected} == expected  # bit for bit
    assert 0 < got["f1"] < 1 and expected["precision"] != expected["recall"]  # a case where the formulas matter
    flat = lambda seqs: [t for s in seqs for t in s]  # noqa: E731
    stats = example_statistics("f1", flat(preds), flat(refs), [len(r) for r in refs], NER_NAMES)
    assert score_interval([stats], "f1", token=True, resamples=1)["score"] == got["main"]
