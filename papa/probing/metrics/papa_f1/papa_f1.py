"""Binary F1 of the positive label 1 (an ``evaluate`` metric script, shipped with papa so that it loads offline
with ``evaluate.load(path_to_this_folder)``): 2 TP / (2 TP + FP + FN), 0.0 without a positive prediction or
reference (scikit-learn's ``f1_score`` with ``zero_division=0``); also precision and recall."""

from __future__ import annotations

import evaluate

from papa.probing.metrics.metric_info import metric_info

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
        tp = fp = fn = 0
        for p, r in zip(predictions, references):
            if p == pos_label and r == pos_label:
                tp += 1
            elif p == pos_label:
                fp += 1
            elif r == pos_label:
                fn += 1
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn) if tp + fn else 0.0
        f1 = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
        return {"f1": f1, "precision": precision, "recall": recall}
