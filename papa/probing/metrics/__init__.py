"""Task metrics, computed with ``evaluate`` metric scripts shipped inside papa (``evaluate.load("accuracy")`` fetches
its script from the hub, which fails offline): :func:`compute_task_metrics` (always the task's main metric and
``main``) and :func:`majority_baseline` (the task's floor).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from papa.core.errors import PapaError
from papa.core.tasks import TaskSpec, get_task

METRICS_DIR = Path(__file__).resolve().parent

#: Short names accepted by :func:`load_metric`, and their script folders.
METRIC_SCRIPTS: dict[str, str] = {
    "accuracy": "papa_accuracy",
    "f1": "papa_f1",
    "mcc": "papa_mcc",
    "seqeval": "papa_seqeval",
}


def metric_path(name: str) -> Path:
    """The folder of the shipped metric script ``name`` (``accuracy``, ``f1``, ``mcc``, ``seqeval``)."""
    folder = METRIC_SCRIPTS.get(name, name if name in METRIC_SCRIPTS.values() else None)
    if folder is None:
        raise PapaError(f"Unknown metric {name!r}", f"Use one of: {', '.join(METRIC_SCRIPTS)}.")
    path = METRICS_DIR / folder
    if not (path / f"{folder}.py").is_file():
        raise PapaError(
            f"The metric script {path / (folder + '.py')} is missing",
            "Reinstall papa: the metric scripts ship as package data.",
        )
    return path


@functools.cache
def load_metric(name: str) -> Any:
    """Load a shipped metric script by path with ``evaluate.load`` (cached per name, kept in memory)."""
    import evaluate

    return evaluate.load(str(metric_path(name)), keep_in_memory=True)


def _compute(name: str, predictions: list, references: list) -> dict[str, float]:
    result = load_metric(name).compute(predictions=predictions, references=references)
    return {key: float(value) for key, value in result.items()}


def compute_task_metrics(
    task: str | TaskSpec,
    predictions: Sequence[Any],
    references: Sequence[Any],
    label_names: Sequence[str] | None = None,
) -> dict[str, float]:
    """The task's metrics for ``predictions`` against ``references``: label ids (token tasks: per-sentence lists,
    aligned: first word piece only, ignored positions removed; NER also needs ``label_names`` in id order for its
    entity spans). Always the task's main metric and ``main`` (its value):

    * cola: ``matthews_correlation``; sst2, mnli: ``accuracy``;
    * mrpc: ``accuracy``, ``f1`` (positive label 1) and ``combined`` = their mean;
    * ner: entity-level micro ``precision``, ``recall``, ``f1`` (seqeval default mode) and ``accuracy``;
    * pos: token ``accuracy``.
    """
    spec = get_task(task)
    preds, refs = list(predictions), list(references)
    if len(preds) != len(refs):
        raise PapaError(
            f"{len(preds)} predictions but {len(refs)} references for task {spec.name}",
            "Pass one prediction per evaluation example.",
        )
    if not refs:
        raise PapaError(f"No predictions to score for task {spec.name}", "Evaluate at least one example.")
    if spec.is_token_task:
        out = _token_metrics(spec, preds, refs, label_names)
    else:
        preds, refs = _as_ids(preds, "predictions"), _as_ids(refs, "references")
        if spec.main_metric == "matthews_correlation":
            out = _compute("mcc", preds, refs)
            out.update(_compute("accuracy", preds, refs))
        elif spec.main_metric == "combined":
            out = _compute("accuracy", preds, refs)
            out["f1"] = _compute("f1", preds, refs)["f1"]
            out["combined"] = (out["accuracy"] + out["f1"]) / 2
        else:
            out = _compute("accuracy", preds, refs)
    out["main"] = out[spec.main_metric]
    return out


def majority_baseline(
    task: str | TaskSpec,
    train_labels: Sequence[Any],
    eval_labels: Sequence[Any],
    label_names: Sequence[str] | None = None,
) -> dict[str, float]:
    """Metrics of always predicting the most frequent training label (per token for token tasks; ties: the smallest
    id). For NER the majority tag is ``O``, which finds no entity: F1 0."""
    spec = get_task(task)
    flat = [t for seq in train_labels for t in seq] if spec.is_token_task else list(train_labels)
    if not flat:
        raise PapaError(
            f"No training labels for the majority baseline of task {spec.name}", "Pass the training split's labels."
        )
    counts = Counter(_as_ids(flat, "training labels"))
    majority = min(counts, key=lambda label: (-counts[label], label))
    if spec.is_token_task:
        preds: list[Any] = [[majority] * len(seq) for seq in eval_labels]
    else:
        preds = [majority] * len(eval_labels)
    return compute_task_metrics(spec, preds, eval_labels, label_names)


def _token_metrics(spec: TaskSpec, preds: list, refs: list, label_names: Sequence[str] | None) -> dict[str, float]:
    for number, (p, r) in enumerate(zip(preds, refs)):
        if len(p) != len(r):
            raise PapaError(
                f"Sentence {number} has {len(p)} predicted tags but {len(r)} reference tags",
                "Align predictions to words (first word piece) and drop ignored positions.",
            )
    if spec.main_metric == "f1":  # NER: spans need tag names
        if not label_names:
            raise PapaError(
                f"Task {spec.name} needs label_names to find entity spans",
                "Pass the tag names in id order, e.g. papa.probing.data.label_names(task, dataset).",
            )
        names = list(label_names)

        def to_names(seqs: list, what: str) -> list[list[str]]:
            try:
                return [[names[t] for t in _as_ids(seq, what)] for seq in seqs]
            except IndexError:
                raise PapaError(
                    f"The {what} hold a tag id outside the {len(names)} label names",
                    "Check that the label names belong to this model and task.",
                ) from None

        return _compute("seqeval", to_names(preds, "predictions"), to_names(refs, "references"))
    flat_p = _as_ids([t for seq in preds for t in seq], "predictions")
    flat_r = _as_ids([t for seq in refs for t in seq], "references")
    if not flat_r:
        raise PapaError(f"No tokens to score for task {spec.name}", "Evaluate at least one non-empty sentence.")
    return _compute("accuracy", flat_p, flat_r)


def _as_ids(values: Sequence[Any], what: str) -> list[int]:
    out = []
    for value in values:
        try:
            as_int = int(value)
        except (TypeError, ValueError):
            raise PapaError(
                f"The {what} hold {value!r}, not a label id", "Pass integer label ids (argmax of the logits)."
            ) from None
        if as_int != value or as_int < 0:
            raise PapaError(
                f"The {what} hold {value!r}, not a non-negative integer label id",
                "Pass integer label ids; drop ignored positions (-100) first.",
            )
        out.append(as_int)
    return out
