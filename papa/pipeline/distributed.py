"""The grid on Dask distributed: ``--scheduler local:N | tcp://HOST:PORT | slurm[:JOBS]``.

The driver (:func:`papa.pipeline.runner.run_grid`) keeps the lock and alone writes the manifest; a
:class:`DaskExecutor` sends each ready run to a worker, where :func:`run_attempt` calls the same ``execute`` as
the sequential path. Workers need a shared filesystem (the checkout, data and runs folder at the driver's paths),
run one run per process (papermill's chdir is process-wide), get their thread counts from ``--threads-per-run``
(Dask sets them to 1), and each attempt has its own scratch folder and a hashed Dask key (a key equal to a task
argument would be replaced by that task's result). A run whose worker dies is submitted again, at most
:data:`MAX_ATTEMPTS` times; a kernel that never started is tried once more in the same task. Nothing here imports
Dask at module level: ``--scheduler sequential`` never loads it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from papa.core.errors import PapaError
from papa.core.fields import CHAPTERS
from papa.core.names import short_hash
from papa.core.provenance import package_versions
from papa.pipeline import clusters
from papa.pipeline.clusters import default_threads, start_cluster, thread_environment
from papa.pipeline.executors import Executor, Outcome, SequentialExecutor
from papa.pipeline.plan import ROOT, Run
from papa.pipeline.sources import PACKAGE

#: Attempts per run when its worker dies (the first one included).
MAX_ATTEMPTS = 3
#: Packages whose versions must agree between the driver and every worker.
FINGERPRINT_PACKAGES = ("torch", "transformers", "tokenizers", "datasets", "papermill")
#: What a kernel that never started says (jupyter_client, pyzmq); the run is tried once more.
KERNEL_START_ERRORS = ("Kernel died before replying to kernel_info", "Kernel didn't respond", "Address already in use")


def dask_key(run_id: str, attempt: int) -> str:
    """The Dask key of one attempt: hashed, so that it never equals a task argument."""
    return f"papa-run-{short_hash(run_id, 16)}-{attempt}"


def attempt_leftovers(run: Run, root: Path = ROOT) -> list[Path]:
    """What an attempt killed with its worker may leave of this run in ``book/runs/<grid>/.executing/``."""
    scratch = root / "book" / "runs" / run.grid / ".executing"
    if not scratch.is_dir():
        return []
    names = {f"{run.run_id}.ipynb", f"{run.run_id}.source.ipynb"}
    pattern = re.compile(re.escape(run.run_id) + r"\.\d+")
    return [p for p in scratch.iterdir() if p.name in names or pattern.fullmatch(p.name)]


# --- on a worker -------------------------------------------------------------------------------

_ONE_RUN = threading.Lock()  # papermill's chdir is process-wide: one run per process


def run_attempt(
    execute: Callable[..., float], run: Run, root: str, threads_per_run: int | None
) -> tuple[str, float, str]:
    """The task a worker runs, one per process at a time: ``("ok", seconds, "")`` or ``("failed", 0.0, message)``."""
    with _ONE_RUN:
        os.environ.update(thread_environment(threads_per_run))  # the kernel inherits this environment
        if threads_per_run and "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(int(threads_per_run))
        for retry in (False, True):
            try:
                return ("ok", float(execute(run, Path(root))), "")
            except PapaError as err:
                if not retry and any(pattern in str(err) for pattern in KERNEL_START_ERRORS):
                    continue
                return ("failed", 0.0, str(err))
    raise AssertionError("unreachable")


def fingerprint(root: str) -> dict:
    """papa's sources' sha256, the :data:`FINGERPRINT_PACKAGES` versions and whether ``root`` is visible here."""
    digest = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*.py")):
        digest.update(path.relative_to(PACKAGE).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    versions = package_versions(FINGERPRINT_PACKAGES)
    return {"sources": digest.hexdigest(), "versions": versions, "root_visible": Path(root).is_dir()}


def fingerprint_problem(worker: str, mine: dict, theirs: dict, root: Path = ROOT) -> PapaError | None:
    """The error refusing ``worker`` (None when its fingerprint matches the driver's)."""
    if not theirs.get("root_visible"):
        hint = "Workers need a shared filesystem with the driver: the checkout, book/runs and the data at the same"
        return PapaError(f"Worker {worker} cannot see the repository at {root}", hint + " paths.")
    if theirs["sources"] != mine["sources"]:
        hint = "Point the workers at the driver's checkout (same commit, same edits) and restart them."
        return PapaError(f"Worker {worker} runs different papa sources than the driver", hint)
    versions = theirs["versions"]
    differ = [f"{n} {versions.get(n)} (driver {v})" for n, v in mine["versions"].items() if versions.get(n) != v]
    if differ:
        hint = "Start the workers from the driver's environment (pip install -e '.[dask]' in the same venv)."
        return PapaError(f"Worker {worker} has different package versions: {', '.join(differ)}", hint)
    return None


# --- the executor ------------------------------------------------------------------------------


class DaskExecutor:
    """An executor on a ``distributed.Client``; every worker is checked against :func:`fingerprint` first."""

    def __init__(self, client, execute, *, root=ROOT, gpus_per_run=0, threads_per_run=None, cluster=None, out=None):
        self._client, self._cluster, self._execute, self._root = client, cluster, execute, Path(root)
        self._gpus, self._threads, self._out = gpus_per_run, threads_per_run, out or sys.stdout
        self._futures: dict = {}  # future -> (run, attempt)
        self._fingerprint = fingerprint(str(self._root))
        self._checked: set[str] = set()
        self.slots = 1
        self._refresh()

    def _refresh(self) -> None:
        """Check new workers, then count the slots."""
        threads = self._client.nthreads()
        new = [w for w in threads if w not in self._checked]
        if new:
            answers = self._client.run(fingerprint, str(self._root), workers=new, on_error="return")
            for worker, theirs in answers.items():
                if isinstance(theirs, BaseException):
                    continue  # it died while answering: asked again at the next refresh
                problem = fingerprint_problem(worker, self._fingerprint, theirs, self._root)
                if problem:
                    raise problem
                self._checked.add(worker)
        self.slots = max(1, sum(threads.values()))

    def submit(self, run: Run, attempt: int = 1) -> None:
        # chapters need no GPU under --gpus-per-run (they only read JSON); every other kind asks for one
        resources = {"GPU": self._gpus} if self._gpus and run.kind not in CHAPTERS else None
        options = dict(key=dask_key(run.run_id, attempt), resources=resources, pure=False, retries=0)
        future = self._client.submit(run_attempt, self._execute, run, str(self._root), self._threads, **options)
        self._futures[future] = (run, attempt)

    def _outcome(self, future, run: Run, attempt: int) -> Outcome | None:
        """The run's outcome, or None when it was lost (its worker died or its connection broke) and submitted again."""
        from concurrent.futures import CancelledError

        from distributed import KilledWorker
        from distributed.comm.core import CommClosedError

        if future.status == "finished":
            status, seconds, message = future.result()
            return Outcome(run, status, seconds=seconds, error=message)
        error = None if future.status == "cancelled" else future.exception()
        if future.status == "cancelled" or isinstance(error, KilledWorker | CommClosedError | CancelledError):
            reason = "cancelled" if future.status == "cancelled" else f"{type(error).__name__}: {error}"
            for path in attempt_leftovers(run, self._root):
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
            if attempt < MAX_ATTEMPTS:
                again = f"submitting it again (attempt {attempt + 1})"
                print(f"  lost {run.run_id} (its worker died: {reason[:200]}); {again}", file=self._out, flush=True)
                self.submit(run, attempt + 1)
                return None
            return Outcome(run, "lost", error=f"Run {run.run_id} was lost {attempt} times (last: {reason[:200]})")
        why = f"{type(error).__name__}: {str(error)[:300]}"
        return Outcome(run, "failed", error=f"Run {run.run_id} failed on its worker ({why})")

    def wait(self) -> list[Outcome]:
        from distributed import wait

        while True:
            self._refresh()  # before collecting: a refused worker never drops a finished outcome
            done, _ = wait(list(self._futures), return_when="FIRST_COMPLETED")
            outcomes = []
            for future in done:
                run, attempt = self._futures.pop(future)
                outcome = self._outcome(future, run, attempt)
                future.release()
                if outcome is not None:
                    outcomes.append(outcome)
            if outcomes:
                return outcomes

    def close(self) -> None:
        for future in list(self._futures):
            future.cancel()
        self._futures.clear()
        clusters.close(self._client, self._cluster)


def make_executor(
    scheduler: str | None,
    execute: Callable[..., float],
    *,
    gpus_per_run: int = 0,
    threads_per_run: int | None = None,
    stale: list[Run] = (),
    manifest=None,
    root=None,
    out=None,
) -> Executor:
    """The executor for ``--scheduler`` (SLURM: the longest ``stale`` run checked against the walltime); ``root``:
    where the workers write (default: the driver's repository root)."""
    spec = clusters.parse_scheduler(scheduler or "sequential")
    if gpus_per_run < 0 or (threads_per_run is not None and threads_per_run < 1):
        problem = f"--gpus-per-run {gpus_per_run} / --threads-per-run {threads_per_run}: out of range"
        raise PapaError(problem, "Give --gpus-per-run >= 0 and --threads-per-run >= 1.")
    if spec.kind == "sequential":
        if gpus_per_run:
            hint = "Use --scheduler local:N (one worker per GPU) or leave --gpus-per-run out."
            raise PapaError("--gpus-per-run needs a Dask scheduler", hint)
        return SequentialExecutor(execute, thread_environment(threads_per_run))
    if spec.kind == "slurm" and stale:
        from papa.pipeline.estimate import run_wall_seconds

        longest = max(((r.run_id, run_wall_seconds(r, manifest)) for r in stale), key=lambda item: item[1])
        walltime = os.environ.get("PAPA_SLURM_WALLTIME") or clusters.SLURM_SETTINGS["PAPA_SLURM_WALLTIME"]
        warning = clusters.walltime_warning(walltime, longest)
        if warning:
            print(warning, file=out, flush=True)
    client, cluster = start_cluster(spec, gpus_per_run, threads_per_run)  # its workers pass the preflight
    try:
        sizes = dict(gpus_per_run=gpus_per_run, threads_per_run=default_threads(spec, threads_per_run))
        return DaskExecutor(client, execute, root=root or ROOT, cluster=cluster, out=out, **sizes)
    except BaseException:
        clusters.close(client, cluster)
        raise
