"""Matthews correlation coefficient (an ``evaluate`` metric script, shipped with papa so that it loads offline with
``evaluate.load(path_to_this_folder)``). Binary: (TP*TN - FP*FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)); for more
classes Gorodkin's (2004) generalisation, as scikit-learn's ``matthews_corrcoef``; 0.0 when the denominator is 0
(e.g. every prediction the same label)."""

from __future__ import annotations

import math
from collections import Counter

import evaluate

from papa.probing.metrics.metric_info import metric_info

_DESCRIPTION = "Matthews correlation coefficient, in [-1, 1]; 0.0 when undefined."
_KWARGS_DESCRIPTION = """
Args:
    predictions (list of int): predicted label ids.
    references (list of int): true label ids.
Returns:
    matthews_correlation (float): in [-1, 1].
"""


class PapaMcc(evaluate.Metric):
    def _info(self) -> evaluate.MetricInfo:
        return metric_info(_DESCRIPTION, _KWARGS_DESCRIPTION)

    def _compute(self, predictions, references):
        n = len(references)
        correct = sum(int(p == r) for p, r in zip(predictions, references))
        pred_counts = Counter(predictions)
        true_counts = Counter(references)
        labels = set(pred_counts) | set(true_counts)
        cov_pt = correct * n - sum(pred_counts[k] * true_counts[k] for k in labels)
        cov_pp = n * n - sum(c * c for c in pred_counts.values())
        cov_tt = n * n - sum(c * c for c in true_counts.values())
        denom = math.sqrt(cov_pp * cov_tt)
        return {"matthews_correlation": cov_pt / denom if denom else 0.0}
