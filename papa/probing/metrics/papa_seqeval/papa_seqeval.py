"""Entity-level micro precision / recall / F1 over tag sequences, and token accuracy (an ``evaluate`` metric script,
shipped with papa so that it loads offline with ``evaluate.load(path_to_this_folder)``).

A pure-Python re-implementation of seqeval's default (non-strict, conlleval-style) mode, giving the numbers of
``seqeval.metrics.f1_score`` etc.: for IOB2 tags a span starts at ``B-X`` (or at ``I-X`` not after ``B-X``/``I-X``),
ends before the next tag that is not ``I-X``, and is correct only if its type and both boundaries equal a reference
span's. No span crosses sentences; ``E-``/``S-`` tags (IOBES) follow seqeval's rules too.
"""

from __future__ import annotations

import datasets
import evaluate

from papa.probing.metrics.metric_info import metric_info

_DESCRIPTION = "Entity-level micro precision, recall and F1 (seqeval default mode), and token accuracy."
_KWARGS_DESCRIPTION = """
Args:
    predictions (list of list of str): predicted tag names per sentence, e.g. ["B-PER", "I-PER", "O"].
    references (list of list of str): true tag names per sentence, same lengths.
Returns:
    precision, recall, f1 (float): entity-level micro averages over all entity types.
    accuracy (float): token accuracy.
"""


def _split_tag(tag):
    """``("B", "PER")`` for ``"B-PER"``; ``("O", "_")`` for ``"O"`` (seqeval's convention)."""
    prefix = tag[:1]
    kind = tag[1:].split("-", maxsplit=1)[-1] or "_"
    return prefix, kind


def _end_of_chunk(prev_tag, tag, prev_type, type_):
    if prev_tag in ("E", "S"):
        return True
    if prev_tag in ("B", "I") and tag in ("B", "S", "O"):
        return True
    return prev_tag not in ("O", ".") and prev_type != type_


def _start_of_chunk(prev_tag, tag, prev_type, type_):
    if tag in ("B", "S"):
        return True
    if prev_tag in ("E", "S", "O") and tag in ("E", "I"):
        return True
    return tag not in ("O", ".") and prev_type != type_


def get_entities(sentence):
    """The spans ``(type, first, last)`` of one sentence's tag sequence, seqeval-style."""
    chunks = []
    prev_tag, prev_type, begin = "O", "", 0
    for i, tag_name in enumerate(list(sentence) + ["O"]):
        tag, type_ = _split_tag(tag_name)
        if _end_of_chunk(prev_tag, tag, prev_type, type_):
            chunks.append((prev_type, begin, i - 1))
        if _start_of_chunk(prev_tag, tag, prev_type, type_):
            begin = i
        prev_tag, prev_type = tag, type_
    return chunks


class PapaSeqeval(evaluate.Metric):
    def _info(self) -> evaluate.MetricInfo:
        return metric_info(_DESCRIPTION, _KWARGS_DESCRIPTION, datasets.Sequence(datasets.Value("string")))

    def _compute(self, predictions, references):
        n_pred = n_true = n_correct = 0
        n_tokens = n_tokens_correct = 0
        for number, (pred, ref) in enumerate(zip(predictions, references)):
            if len(pred) != len(ref):
                raise ValueError(f"Sentence {number} has {len(pred)} predicted tags but {len(ref)} reference tags.")
            pred_spans = set(get_entities(pred))
            true_spans = set(get_entities(ref))
            n_pred += len(pred_spans)
            n_true += len(true_spans)
            n_correct += len(pred_spans & true_spans)
            n_tokens += len(ref)
            n_tokens_correct += sum(int(p == r) for p, r in zip(pred, ref))
        precision = n_correct / n_pred if n_pred else 0.0
        recall = n_correct / n_true if n_true else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return {
            "precision": precision,
            "recall": recall,
            "f1": f1,
            "accuracy": n_tokens_correct / n_tokens if n_tokens else 0.0,
        }
