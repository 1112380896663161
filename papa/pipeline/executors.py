"""Where runs execute: the driver (:func:`papa.pipeline.runner.run_grid`) hands ready runs to an
:class:`Executor` and records what comes back. Only the driver writes the manifest.

* :class:`SequentialExecutor` (the default) executes one run at a time in this process, with no
  extra dependency.
* A Dask executor (``--scheduler local:N | tcp://HOST:PORT | slurm[:JOBS]``) runs several at once.

An executor never writes the manifest; it returns one :class:`Outcome` per submitted run.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from papa.core.errors import PapaError
from papa.pipeline.plan import Run


@dataclass
class Outcome:
    """What became of one submitted run.

    ``status``: ``"ok"`` (notebook and outputs in place), ``"failed"`` (the notebook raised: a result,
    its dependants are blocked) or ``"lost"`` (the worker died or the kernel never started: the
    driver may submit it again).
    """

    run: Run
    status: str
    seconds: float = 0.0
    error: str = ""


class Executor(Protocol):
    """Runs submitted :class:`Run` objects; ``slots`` is how many may be in flight at once."""

    slots: int

    def submit(self, run: Run) -> None: ...

    def wait(self) -> list[Outcome]:
        """Block until at least one submitted run has finished; return the finished ones."""
        ...

    def close(self) -> None: ...


class SequentialExecutor:
    """One run at a time, in this process (``execute`` is :func:`papa.pipeline.runner.execute`). ``environment``
    (e.g. ``OMP_NUM_THREADS`` from ``--threads-per-run``) is set while a run executes, so its notebook kernel
    inherits it, and restored after."""

    slots = 1

    def __init__(self, execute: Callable[[Run], float], environment: dict[str, str] | None = None):
        self._execute = execute
        self._queue: deque[Run] = deque()
        self._environment = dict(environment or {})

    def submit(self, run: Run) -> None:
        self._queue.append(run)

    def wait(self) -> list[Outcome]:
        run = self._queue.popleft()
        saved = {name: os.environ.get(name) for name in self._environment}
        os.environ.update(self._environment)
        try:
            seconds = self._execute(run)
        except PapaError as err:
            return [Outcome(run, "failed", error=str(err))]
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        return [Outcome(run, "ok", seconds=seconds)]

    def close(self) -> None:
        self._queue.clear()


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
    """The executor for ``--scheduler``: :class:`SequentialExecutor` for ``sequential`` (Dask is not
    imported), else a :class:`papa.pipeline.distributed.DaskExecutor` whose workers passed the
    preflight. With SLURM, the longest of the ``stale`` runs (estimated from ``manifest``) is checked
    against the worker walltime. ``root``: the repository root the workers write under (default the
    driver's)."""
    from papa.pipeline import clusters

    spec = clusters.parse_scheduler(scheduler or "sequential")
    if gpus_per_run < 0 or (threads_per_run is not None and threads_per_run < 1):
        raise PapaError(f"--gpus-per-run {gpus_per_run} / --threads-per-run {threads_per_run}: out of range", "Give --gpus-per-run >= 0 and --threads-per-run >= 1.")
    if spec.kind == "sequential":
        if gpus_per_run:
            raise PapaError("--gpus-per-run needs a Dask scheduler", "Use --scheduler local:N (one worker per GPU) or leave --gpus-per-run out.")
        return SequentialExecutor(execute, clusters.thread_environment(threads_per_run))
    if spec.kind == "slurm" and stale:
        import os

        from papa.pipeline.estimate import estimate_seconds

        longest = max(((r.run_id, estimate_seconds([r], manifest)) for r in stale), key=lambda item: item[1])
        warning = clusters.walltime_warning(os.environ.get("PAPA_SLURM_WALLTIME") or clusters.SLURM_SETTINGS["PAPA_SLURM_WALLTIME"], longest)
        if warning:
            print(warning, file=out, flush=True)
    from papa.pipeline import distributed

    return distributed.make_dask_executor(spec, execute, root=root or distributed.ROOT, gpus_per_run=gpus_per_run, threads_per_run=threads_per_run, out=out)
