"""Accuracy: the fraction of predictions equal to their references (an ``evaluate`` metric script, shipped with
papa so that it loads offline with ``evaluate.load(path_to_this_folder)``)."""

from __future__ import annotations

import evaluate

from papa.probing.metrics.metric_info import metric_info

_DESCRIPTION = "Accuracy = (number of predictions equal to their reference) / (number of predictions)."
_KWARGS_DESCRIPTION = """
Args:
    predictions (list of int): predicted label ids.
    references (list of int): true label ids.
Returns:
    accuracy (float): in [0, 1].
"""


class PapaAccuracy(evaluate.Metric):
    def _info(self) -> evaluate.MetricInfo:
        return metric_info(_DESCRIPTION, _KWARGS_DESCRIPTION)

    def _compute(self, predictions, references):
        total = len(references)
        correct = sum(int(p == r) for p, r in zip(predictions, references))
        return {"accuracy": correct / total if total else 0.0}
