"""Binary F1 of the positive label 1 (an ``evaluate`` metric script, shipped with papa so that it loads offline
with ``evaluate.load(path_to_this_folder)``): 2 TP / (2 TP + FP + FN), 0.0 without a positive prediction or
reference (scikit-learn's ``f1_score`` with ``zero_division=0``); also precision and recall. Computed from the
bootstrap's sufficient statistics (:mod:`papa.probing.metrics.statistics`)."""

from __future__ import annotations

import evaluate

from papa.probing.metrics.metric_info import metric_info
from papa.probing.metrics.statistics import binary_statistics, metric_from_sums

_DESCRIPTION = "Binary F1 score of the positive label (default 1): 2TP / (2TP + FP + FN)."
_KWARGS_DESCRIPTION = """
Args:
    predictions (list of int): predicted label ids.
    references (list of int): true label ids.
    pos_label (int): the positive label, default 1.
Returns:
    f1, precision, recall (float): in [0, 1].
"""


class PapaF1(evaluate.Metric):
    def _info(self) -> evaluate.MetricInfo:
        return metric_info(_DESCRIPTION, _KWARGS_DESCRIPTION)

    def _compute(self, predictions, references, pos_label=1):
        sums = binary_statistics(predictions, references, pos_label).sum(0)  # (tp, fp, fn, tn)
        return {name: float(metric_from_sums(name, sums)) for name in ("f1", "precision", "recall")}
