"""Tasks and probes on top of :mod:`papa.core`: data, encoder features, the probe, metrics, head rankings, one run."""
