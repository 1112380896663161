"""Accuracy: the fraction of predictions equal to their references (an ``evaluate`` metric script, shipped with
papa so that it loads offline with ``evaluate.load(path_to_this_folder)``), computed from the bootstrap's sufficient
statistics (:mod:`papa.probing.metrics.statistics`)."""

from __future__ import annotations

import evaluate

from papa.probing.metrics.metric_info import metric_info
from papa.probing.metrics.statistics import example_statistics, metric_from_sums

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
        sums = example_statistics("accuracy", predictions, references).sum(0)  # (correct, total); 0.0 when empty
        return {"accuracy": float(metric_from_sums("accuracy", sums))}
