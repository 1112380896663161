"""Where and how runs execute: :func:`execute` runs one run's notebook with papermill (:func:`execute_notebook`,
which also executes a model report's chapter); the driver (:func:`papa.pipeline.runner.run_grid`) hands ready runs
to an :class:`Executor` and records what comes back. :class:`SequentialExecutor` (the default) runs one at a time in
this process; a Dask executor (:mod:`papa.pipeline.distributed`, which imports this module) runs several. An
executor never writes the manifest. After a text-only change of a notebook, :func:`refresh_text` rewrites an
executed notebook's text without executing it.
"""

from __future__ import annotations

import os
import shutil
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from papa.core.errors import PapaError
from papa.core.io import atomic_write_json, atomic_write_text, sha256_file
from papa.pipeline.plan import ROOT, Run, run_notebook_path
from papa.pipeline.stamps import stamp_path


@dataclass
class Outcome:
    """What became of one submitted run: ``status`` ``"ok"``, ``"failed"`` or ``"lost"`` (its worker died)."""

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
    """One run at a time, in this process, with ``environment`` (thread counts) set while it executes."""

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


# -- one run ------------------------------------------------------------------------------------------
def attempt_folder(folder: Path, run_id: str) -> Path:
    """A fresh scratch folder per attempt: ``.executing/<run_id>.<attempt>/``."""
    attempt = 1
    while True:
        path = folder / ".executing" / f"{run_id}.{attempt}"
        try:
            path.mkdir(parents=True)
            return path
        except FileExistsError:
            attempt += 1
        except OSError as err:
            hint = "Check the runs folder: free space, or a shorter name."
            raise PapaError(f"Cannot create the scratch folder {path} ({err.strerror})", hint) from None


def execute(run: Run, root: Path = ROOT) -> float:
    """Execute one run's notebook with papermill (cwd = repo root); returns seconds; any failure is a PapaError."""
    started = time.perf_counter()
    scratch = attempt_folder(root / "book" / "runs" / run.grid, run.run_id)
    execute_notebook(run.notebook, run.params, root / run_notebook_path(run), scratch, f"Run {run.run_id}", root)
    return time.perf_counter() - started


def execute_notebook(notebook: str, params: dict, target: Path, scratch: Path, what: str, root: Path = ROOT) -> None:
    """Execute ``notebook`` (repository-relative) with ``params`` into ``target``, cleaned, through the fresh folder
    ``scratch`` (removed after); a failed execution is kept beside ``target`` as ``.failed.ipynb``. Every failure
    is a PapaError that starts with ``what`` (``Run <run_id>``, ``The chapter of <grid>``)."""
    import nbformat
    import papermill

    from papa.pipeline.kernels import papermill_options
    from papa.pipeline.notebook import read_source

    failed_copy = target.with_suffix(".failed.ipynb")
    source, temp = scratch / "source.ipynb", scratch / "executed.ipynb"
    options = dict(parameters=params, cwd=str(root), **papermill_options())

    def keep(path: Path) -> None:
        """The executed notebook, cleaned, written at ``path``."""
        path.parent.mkdir(parents=True, exist_ok=True)
        write_cleaned(nbformat.read(temp, as_version=4), path, root)

    try:
        try:
            atomic_write_text(source, nbformat.writes(read_source(root / notebook)))
        except PapaError:
            raise
        except Exception as err:
            why = f"{type(err).__name__}: {err}"
            problem = f"{what} failed: its notebook {notebook} could not be prepared ({why})"
            raise PapaError(problem, "Fix the notebook, then run again.") from None
        try:
            papermill.execute_notebook(str(source), str(temp), **options)
        except Exception as err:  # the failed notebook is kept for reading, when it can be
            reason = f"{getattr(err, 'ename', type(err).__name__)}: {getattr(err, 'evalue', str(err))}".strip()
            kept = temp.is_file()
            try:
                if kept:
                    keep(failed_copy)
            except Exception:  # noqa: BLE001 - a failure to keep the failed notebook must not hide the failure
                kept = False
            lost = "No notebook was kept (it could not be read or written); fix the cause above and run again."
            hint = f"Read {failed_copy.relative_to(root)}" if kept else lost
            raise PapaError(f"{what} failed ({reason[:300]})", hint) from None
        try:
            keep(target)
        except PapaError:
            raise
        except Exception as err:  # e.g. nbformat's NotJSONError after a full disk, a too-long name
            problem = f"{what} failed writing its notebook ({type(err).__name__}: {str(err)[:200]})"
            raise PapaError(problem, "Free space in the runs folder or shorten the names, then run again.") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    failed_copy.unlink(missing_ok=True)


def write_cleaned(nb, path: Path, root: Path = ROOT) -> None:
    """An executed notebook ``nb``, cleaned (:func:`~papa.pipeline.executed.clean_executed`), written at ``path``."""
    import nbformat

    from papa.pipeline.executed import clean_executed

    atomic_write_text(path, nbformat.writes(nbformat.from_dict(clean_executed(nb, root))))


# -- a text-only change ---------------------------------------------------------------------------
def refresh_text(run: Run, stamp: dict, display: str, folder: Path, root: Path = ROOT) -> dict:
    """Rebuild an executed notebook's text from its source after a text-only change; returns the new stamp."""
    import nbformat

    from papa.pipeline.notebook import read_source

    target = root / run_notebook_path(run)
    executed = nbformat.read(target, as_version=4)
    source = read_source(root / run.notebook)

    def tags(cell) -> list:
        return cell.get("metadata", {}).get("tags", [])

    injected = [c for c in executed.cells if "injected-parameters" in tags(c)]
    ran = [c for c in executed.cells if c.cell_type == "code" and "injected-parameters" not in tags(c)]
    code = [c for c in source.cells if c.cell_type == "code"]
    if len(ran) != len(code):
        problem = f"The executed notebook of {run.run_id} does not pair with its source"
        raise PapaError(problem, "Run the grid again: the run is re-executed.")
    cells, pairs = [], iter(ran)
    for cell in source.cells:
        if cell.cell_type != "code":
            cells.append(cell)
            continue
        done = next(pairs)
        done.source = cell.source
        done.metadata["tags"] = list(tags(cell))
        cells.append(done)
        if "parameters" in tags(cell):
            cells.extend(injected)
    executed.cells = cells
    write_cleaned(executed, target, root)
    outputs = dict(stamp["outputs"], **{run_notebook_path(run): sha256_file(target)})
    stamp = dict(stamp, display=display, outputs=outputs)
    atomic_write_json(stamp_path(folder, run.run_id), stamp)
    return stamp
