"""What the shipped metric scripts (``papa_*/papa_*.py``) share: their :class:`evaluate.MetricInfo`.

A script imports it as a library (``from papa.probing.metrics.metric_info import metric_info``): ``evaluate.load``
copies only the script (and its relative imports) into its module cache and checks that each library import is
installed, so the import resolves to this module, offline. A shared *function*, not a base class: ``evaluate``
takes the first :class:`evaluate.Metric` subclass in the script's namespace as the metric, which an imported base
class would be.
"""

from __future__ import annotations

import datasets
import evaluate


def metric_info(
    description: str, inputs_description: str, value: datasets.Value | datasets.Sequence | None = None
) -> evaluate.MetricInfo:
    """A script's info: ``predictions`` and ``references`` both of type ``value`` (default one ``int64`` label id per
    example; e.g. ``datasets.Sequence(datasets.Value("string"))`` for tag names per sentence), no citation."""
    if value is None:
        value = datasets.Value("int64")
    return evaluate.MetricInfo(
        description=description,
        citation="",
        inputs_description=inputs_description,
        features=datasets.Features({"predictions": value, "references": value}),
    )
