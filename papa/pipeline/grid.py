"""The grid, as a whole (an overview; the code lives in the modules it names).

One YAML config per grid (``configs/*.yaml``, validated by :func:`papa.pipeline.plan.load_config`) expands
(:func:`papa.pipeline.plan.expand`) into dependency-ordered notebook runs: estimate → rank → probe → the chapters.
Each executes one notebook of ``notebooks/`` with papermill into ``book/runs/<config>/<run_id>.ipynb``, writing its
artefacts under ``book/runs/<config>/artifacts/``. A run's key (:mod:`papa.pipeline.keys`) covers its notebook's
code, its parameters, the papa modules it executes (docstrings and comments ignored, :mod:`papa.pipeline.sources`),
the library versions and its upstream runs' keys; the task data is checked apart. A finished run is sealed
(:mod:`papa.pipeline.stamps`); only proven outputs are trusted, the rest re-executes (``--dry-run`` says why), and a
markdown-only edit refreshes the executed notebook's text. A failed run keeps ``<run_id>.failed.ipynb`` and blocks
only its dependants. A runs folder serves one config under a lock; ``--prune`` removes what no planned run wrote.
"""
