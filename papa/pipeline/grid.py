"""The grid, as a whole (an overview; the code lives in the modules it names).

One YAML config per grid → a dependency-ordered list of notebook runs, executed with papermill.

A config (``configs/*.yaml``) names models × tasks × head fractions × seeds × modes × sizes and the
extra studies; :func:`load_config` validates it (unknown keys, models, tasks, methods and
fractions are errors before anything runs). :func:`expand` turns it into runs::

    estimate (model, task) → rank (model, task, method)
        → probe (model, task, method, k, seed, mode, input) → aggregate

Each run executes one notebook of ``notebooks/`` into ``book/runs/<config>/<run_id>.ipynb`` (cwd:
the repository root; all paths repo-relative) and writes its artefacts under
``book/runs/<config>/artifacts/``. A run's key (:mod:`papa.pipeline.keys`) covers everything that
can change its result:

* its notebook's code cells (normalised; markdown is not code) and the run's parameters;
* the papa modules the notebook executes, from a static import graph (:mod:`papa.pipeline.sources`),
  each fingerprinted on its syntax tree without docstrings: a comment or docstring edit stales nothing;
* the environment (torch, transformers, tokenizers, datasets, evaluate versions);
* the keys of the runs it depends on (so a change propagates to its dependants);
* apart from the key, the task data (the sha256 lines of ``SHA256SUMS`` for the task's folder),
  checked when a local data folder is set (without one the recorded fingerprint is trusted).

A finished run is sealed (:mod:`papa.pipeline.stamps`): ``stamps/<run_id>.json`` binds its key to the
sha256 of every output, and the runner trusts an output only when that proof holds; anything else is
re-executed, and ``--dry-run`` says why. A markdown-only edit refreshes the executed notebook's text
without re-executing. The manifest ``book/runs/<config>/manifest.json`` caches the stamps (it is
rebuilt from them when missing or corrupt) and records failures. A failed run keeps its executed
notebook (with the error) as ``<run_id>.failed.ipynb``; the grid goes on with the runs that do not
depend on it, reports every failure at the end and exits non-zero. A runs folder serves one config
(``grid.json``), and a lock keeps a second runner off it. What no run of the plan wrote (the runs of a study
the config dropped) is named by ``--dry-run`` as "not in the plan" and removed by ``--prune``; a run page
executed before its kind's title changed has its text refreshed, not re-executed.
"""
