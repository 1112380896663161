"""One YAML config per grid → a dependency-ordered list of notebook runs, executed with papermill.

A config (``configs/*.yaml``) names models × tasks × head fractions × seeds × modes × sizes and the
extra studies; :func:`load_config` validates it (unknown keys, models, tasks, methods and
fractions are errors before anything runs). :func:`expand` turns it into runs::

    estimate (model, task) → rank (model, task, method) → probe (model, task, method, k, seed, mode, input) → aggregate

Each run executes one notebook of ``notebooks/`` into ``book/runs/<config>/<run_id>.ipynb`` (cwd:
the repository root; all paths repo-relative) and writes its artefacts under
``book/runs/<config>/artifacts/``. The manifest ``book/runs/<config>/manifest.json`` stores, per
run, a key over everything that can change its result:

* the notebook file and the run's parameters;
* the source of the papa modules that kind of run imports (:data:`DEPENDS_ON`) — editing e.g.
  ``papa/cli.py`` or ``papa/grid.py`` invalidates nothing;
* the task data (the sha256 lines of ``SHA256SUMS`` for the task's folder, else file sizes), checked
  when a local data folder is set (without one the manifest's record is trusted);
* the environment (torch, transformers, datasets, evaluate versions);
* the keys of the runs it depends on (so a change propagates to its dependants).

A run whose key matches the manifest and whose outputs exist is up to date and never executed
twice. A failed run keeps its executed notebook (with the error) beside the others as
``<run_id>.failed.ipynb``; the grid goes on with the runs that do not depend on it, reports every
failure at the end and exits non-zero. Notebooks and the manifest are written atomically, and a
lock file keeps a second runner off the same grid.
"""

from papa.pipeline.estimate import *  # noqa: F403
from papa.pipeline.estimate import (
    _format,  # noqa: F401
    _train_split_size,  # noqa: F401
)
from papa.pipeline.keys import *  # noqa: F403
from papa.pipeline.keys import _data_fingerprint, _sha  # noqa: F401
from papa.pipeline.plan import *  # noqa: F403
from papa.pipeline.plan import _fraction, _heads_for  # noqa: F401
from papa.pipeline.runner import *  # noqa: F403
