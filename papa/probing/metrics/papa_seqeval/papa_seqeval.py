"""Entity-level micro precision / recall / F1 over tag sequences, and token accuracy (an ``evaluate`` metric script,
shipped with papa so that it loads offline with ``evaluate.load(path_to_this_folder)``).

A pure-Python re-implementation of seqeval's default (non-strict, conlleval-style) mode, giving the numbers of
``seqeval.metrics.f1_score`` etc.: for IOB2 tags a span starts at ``B-X`` (or at ``I-X`` not after ``B-X``/``I-X``),
ends before the next tag that is not ``I-X``, and is correct only if its type and both boundaries equal a reference
span's. No span crosses sentences; ``E-``/``S-`` tags (IOBES) follow seqeval's rules too. Computed from the
bootstrap's sufficient statistics (:func:`papa.probing.metrics.statistics.tag_statistics`).
"""

from __future__ import annotations

import datasets
import evaluate

from papa.probing.metrics.metric_info import metric_info
from papa.probing.metrics.statistics import metric_from_sums, tag_statistics

_DESCRIPTION = "Entity-level micro precision, recall and F1 (seqeval default mode), and token accuracy."
_KWARGS_DESCRIPTION = """
Args:
    predictions (list of list of str): predicted tag names per sentence, e.g. ["B-PER", "I-PER", "O"].
    references (list of list of str): true tag names per sentence, same lengths.
Returns:
    precision, recall, f1 (float): entity-level micro averages over all entity types.
    accuracy (float): token accuracy.
"""


class PapaSeqeval(evaluate.Metric):
    def _info(self) -> evaluate.MetricInfo:
        return metric_info(_DESCRIPTION, _KWARGS_DESCRIPTION, datasets.Sequence(datasets.Value("string")))

    def _compute(self, predictions, references):
        sums = tag_statistics(predictions, references).sum(0)  # spans: correct, predicted, true; tokens: correct, all
        spans = {name: float(metric_from_sums(name, sums[:3], token=True)) for name in ("precision", "recall", "f1")}
        return spans | {"accuracy": float(metric_from_sums("accuracy", sums[3:]))}
