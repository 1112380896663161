"""Every task metric as a function of sums over examples of a per-example count vector: the one implementation
of the metrics, shared by the shipped ``evaluate`` scripts (``papa_*/papa_*.py``) and the bootstrap
(:mod:`papa.analysis.bootstrap`), so that a reported score equals the bootstrap's point estimate by construction.

:func:`example_statistics` gives the count vectors ``[N, D]`` and :func:`metric_from_sums` the metric of their sums
(``[..., D]`` → ``[...]``): ``(correct, 1)`` for accuracy, the one-hot confusion cell (``C × C``) for MCC,
``(tp, fp, fn, tn)`` of the positive label for F1 and ``combined``, and per sentence ``(correct, predicted, true
spans)`` for NER's entity F1 (seqeval's default mode, :func:`get_entities`) or ``(correct tokens, tokens)`` for token
accuracy. Sums of counts are whole numbers, exact in float64, so each formula gives the bits of the scalar one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from papa.core.errors import PapaError

#: The metrics with per-example statistics (sequence tasks; token tasks).
SEQUENCE_METRICS = ("accuracy", "matthews_correlation", "combined", "f1")
TOKEN_METRICS = ("f1", "accuracy")


# --- entity spans (seqeval's default, conlleval-style mode) ----------------------------------------------------------
def _split_tag(tag: str) -> tuple[str, str]:
    """``("B", "PER")`` for ``"B-PER"``; ``("O", "_")`` for ``"O"`` (seqeval's convention)."""
    prefix = tag[:1]
    kind = tag[1:].split("-", maxsplit=1)[-1] or "_"
    return prefix, kind


def _end_of_chunk(prev_tag: str, tag: str, prev_type: str, type_: str) -> bool:
    if prev_tag in ("E", "S"):
        return True
    if prev_tag in ("B", "I") and tag in ("B", "S", "O"):
        return True
    return prev_tag not in ("O", ".") and prev_type != type_


def _start_of_chunk(prev_tag: str, tag: str, prev_type: str, type_: str) -> bool:
    if tag in ("B", "S"):
        return True
    if prev_tag in ("E", "S", "O") and tag in ("E", "I"):
        return True
    return tag not in ("O", ".") and prev_type != type_


def get_entities(sentence: Sequence[str]) -> list[tuple[str, int, int]]:
    """The spans ``(type, first, last)`` of one sentence's tag sequence, seqeval-style: for IOB2 tags a span starts at
    ``B-X`` (or at ``I-X`` not after ``B-X``/``I-X``) and ends before the next tag that is not ``I-X``; ``E-``/``S-``
    tags (IOBES) follow seqeval's rules too."""
    chunks = []
    prev_tag, prev_type, begin = "O", "", 0
    for i, tag_name in enumerate([*sentence, "O"]):
        tag, type_ = _split_tag(tag_name)
        if _end_of_chunk(prev_tag, tag, prev_type, type_):
            chunks.append((prev_type, begin, i - 1))
        if _start_of_chunk(prev_tag, tag, prev_type, type_):
            begin = i
        prev_tag, prev_type = tag, type_
    return chunks


def tag_statistics(predictions: Sequence[Sequence[str]], references: Sequence[Sequence[str]]) -> np.ndarray:
    """Per sentence of tag names: ``(correct spans, predicted spans, true spans, correct tokens, tokens)`` ``[N, 5]``
    (a span is correct when its type and both boundaries equal a reference span's)."""
    rows = []
    for number, (pred, ref) in enumerate(zip(predictions, references)):
        if len(pred) != len(ref):
            raise ValueError(f"Sentence {number} has {len(pred)} predicted tags but {len(ref)} reference tags.")
        found, true = set(get_entities(pred)), set(get_entities(ref))
        rows.append((len(found & true), len(found), len(true), sum(int(p == r) for p, r in zip(pred, ref)), len(ref)))
    return np.asarray(rows, dtype=np.float64).reshape(-1, 5)


# --- per-example statistics ------------------------------------------------------------------------------------------
def _sentences(flat: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
    if int(lengths.sum()) != len(flat):
        what = f"The sentence lengths add up to {int(lengths.sum())} tokens, but there are {len(flat)}"
        raise PapaError(what, "Store one length per dev sentence.")
    return np.split(flat, np.cumsum(lengths)[:-1])


def _token_statistics(
    metric: str, preds: np.ndarray, refs: np.ndarray, lengths: Sequence[int], label_names: Sequence[str] | None
) -> np.ndarray:
    """Token tasks: ``[N, 2]`` per sentence for accuracy, ``[N, 3]`` (spans) for entity F1."""
    sizes = np.asarray(lengths, dtype=np.int64)
    pred_sents, ref_sents = _sentences(preds, sizes), _sentences(refs, sizes)
    if metric == "accuracy":
        return np.stack([np.array([(p == r).sum(), len(r)]) for p, r in zip(pred_sents, ref_sents)]).astype(float)
    if metric == "f1":
        if not label_names:
            raise PapaError("Entity F1 needs the tag names", "Pass label_names in id order.")
        names = np.asarray(label_names, dtype=object)
        return tag_statistics([list(names[p]) for p in pred_sents], [list(names[r]) for r in ref_sents])[:, :3]
    fix = f"Use one of {', '.join(TOKEN_METRICS)}."
    raise PapaError(f"No per-example statistics for the token metric {metric!r}", fix)


def example_statistics(
    metric: str,
    predictions: Sequence[int],
    labels: Sequence[int],
    lengths: Sequence[int] | None = None,
    label_names: Sequence[str] | None = None,
    num_labels: int | None = None,
) -> np.ndarray:
    """Per-example count vectors ``[N, D]`` from which :func:`metric_from_sums` recomputes ``metric``.

    Sequence tasks: ``predictions``/``labels`` ``[N]`` (F1: of label 1). Token tasks: flat ``[T]`` over all labelled
    tokens, with ``lengths [N]`` (tokens per sentence); NER (token ``f1``) also needs ``label_names`` to find spans.
    """
    preds, refs = np.asarray(predictions, dtype=np.int64), np.asarray(labels, dtype=np.int64)
    if preds.shape != refs.shape or preds.ndim != 1:
        fix = "Pass one flat prediction per labelled example or token."
        raise PapaError(f"{preds.shape} predictions but {refs.shape} labels", fix)
    if lengths is not None:
        return _token_statistics(metric, preds, refs, lengths, label_names)
    if metric == "accuracy":
        return np.stack([preds == refs, np.ones_like(refs, dtype=bool)], axis=1).astype(np.float64)
    if metric == "matthews_correlation":
        classes = num_labels or int(max(preds.max(initial=0), refs.max(initial=0))) + 1
        cells = np.zeros((len(refs), classes * classes))
        cells[np.arange(len(refs)), refs * classes + preds] = 1.0
        return cells
    if metric in ("combined", "f1"):
        return binary_statistics(preds, refs)
    fix = f"Use one of {', '.join(SEQUENCE_METRICS)}."
    raise PapaError(f"No per-example statistics for the metric {metric!r}", fix)


def binary_statistics(predictions: Sequence[int], labels: Sequence[int], pos_label: int = 1) -> np.ndarray:
    """``(tp, fp, fn, tn)`` of ``pos_label`` per example ``[N, 4]``."""
    p, t = np.asarray(predictions) == pos_label, np.asarray(labels) == pos_label
    return np.stack([p & t, p & ~t, ~p & t, ~p & ~t], axis=1).astype(np.float64).reshape(-1, 4)


# --- the metrics from summed statistics ------------------------------------------------------------------------------
def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """``numerator / denominator``, 0 where the denominator is 0."""
    return np.where(denominator > 0, numerator / np.where(denominator > 0, denominator, 1), 0.0)


def _span_scores(sums: np.ndarray) -> dict[str, np.ndarray]:
    """Entity precision, recall and F1 (``2PR / (P + R)``, as seqeval) from ``(correct, predicted, true)`` sums."""
    precision, recall = _ratio(sums[..., 0], sums[..., 1]), _ratio(sums[..., 0], sums[..., 2])
    return {"precision": precision, "recall": recall, "f1": _ratio(2 * precision * recall, precision + recall)}


def _binary_scores(sums: np.ndarray) -> dict[str, np.ndarray]:
    """Binary F1 (``2 TP / (2 TP + FP + FN)``), precision, recall and ``combined`` (mean of accuracy and F1) from
    ``(tp, fp, fn, tn)`` sums."""
    tp, fp, fn, tn = (sums[..., i] for i in range(4))
    f1 = np.where(tp > 0, 2 * tp / np.where(2 * tp + fp + fn > 0, 2 * tp + fp + fn, 1), 0.0)
    out = {"f1": f1, "precision": _ratio(tp, tp + fp), "recall": _ratio(tp, tp + fn)}
    return out | {"combined": ((tp + tn) / (tp + fp + fn + tn) + f1) / 2}


def _mcc(sums: np.ndarray) -> np.ndarray:
    """Matthews correlation (Gorodkin's multi-class form, as scikit-learn) from one-hot confusion sums ``[..., C·C]``;
    0 where undefined."""
    classes = math.isqrt(sums.shape[-1])
    confusion = sums.reshape(*sums.shape[:-1], classes, classes)  # [..., true, predicted]
    t, p = confusion.sum(-1), confusion.sum(-2)
    c, s = np.trace(confusion, axis1=-2, axis2=-1), confusion.sum((-2, -1))
    numerator = c * s - (t * p).sum(-1)
    denominator = np.sqrt((s**2 - (p * p).sum(-1)) * (s**2 - (t * t).sum(-1)))
    return _ratio(numerator, denominator)


def metric_from_sums(metric: str, sums: np.ndarray, token: bool = False) -> np.ndarray:
    """The metric from summed statistics ``[..., D]`` (any leading shape) → ``[...]`` (``token``: a token task's
    statistics, where ``f1``, ``precision`` and ``recall`` are of entity spans)."""
    sums = np.asarray(sums, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        if metric == "accuracy":
            return _ratio(sums[..., 0], sums[..., 1])
        if metric == "matthews_correlation":
            return _mcc(sums)
        if metric in ("f1", "precision", "recall"):
            return (_span_scores(sums) if token else _binary_scores(sums))[metric]
        if metric == "combined" and not token:
            return _binary_scores(sums)["combined"]
    raise PapaError(f"Unknown metric {metric!r}", f"Use one of {', '.join(SEQUENCE_METRICS)}.")
