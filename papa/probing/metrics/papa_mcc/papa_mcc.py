"""Matthews correlation coefficient (an ``evaluate`` metric script, shipped with papa so that it loads offline with
``evaluate.load(path_to_this_folder)``). Binary: (TP*TN - FP*FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)); for more
classes Gorodkin's (2004) generalisation, as scikit-learn's ``matthews_corrcoef``; 0.0 when the denominator is 0
(e.g. every prediction the same label). Computed from the bootstrap's sufficient statistics
(:mod:`papa.probing.metrics.statistics`)."""

from __future__ import annotations

import evaluate
import numpy as np

from papa.probing.metrics.metric_info import metric_info
from papa.probing.metrics.statistics import example_statistics, metric_from_sums

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
        preds, refs = np.asarray(predictions, np.int64), np.asarray(references, np.int64)
        labels = np.unique(np.concatenate([preds, refs]))  # any label ids, as 0..C-1 below
        ids = [np.searchsorted(labels, values) for values in (preds, refs)]
        cells = example_statistics("matthews_correlation", *ids, num_labels=len(labels))
        return {"matthews_correlation": float(metric_from_sums("matthews_correlation", cells.sum(0)))}
