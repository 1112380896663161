"""The papermill runner: manifest, lock, one run's execution and the grid driver."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from papa.core.errors import PapaError
from papa.core.io import atomic_write_json, atomic_write_text, read_json_verified
from papa.pipeline.estimate import _format, estimate_seconds
from papa.pipeline.executors import make_executor
from papa.pipeline.keys import data_fingerprints, run_keys
from papa.pipeline.plan import (
    ROOT,
    Run,
    expand,
    load_config,
    run_notebook_path,
    runs_dir,
)


class Manifest:
    """``{run_id: {"key", "data", "status", "seconds"}}`` stored atomically with a checksum."""

    def __init__(self, path: Path):
        self.path = path
        self.entries: dict[str, dict] = {}
        if path.is_file():
            self.entries = read_json_verified(path, "manifest").get("runs", {})

    def save(self) -> None:
        atomic_write_json(self.path, {"runs": self.entries})

    def up_to_date(self, run: Run, key: str, data: str | None = None) -> bool:
        entry = self.entries.get(run.run_id, {})
        return (
            entry.get("key") == key
            and entry.get("status") == "ok"
            and all((ROOT / o).is_file() for o in run.outputs)
            and (data is None or entry.get("data") in (None, data))
            and (ROOT / run_notebook_path(run)).is_file()
        )


def stale_runs(config: dict) -> tuple[list[Run], list[Run], dict[str, str], Manifest]:
    """``(all runs, stale runs, keys, manifest)``; ``keys[run_id]`` is ``(key, data fingerprint)``."""
    runs = expand(config)
    keys, data = run_keys(runs), data_fingerprints(runs)
    manifest = Manifest(runs_dir(config) / "manifest.json")
    stale = [r for r in runs if not manifest.up_to_date(r, keys[r.run_id], data[r.run_id])]
    return runs, stale, {r: (keys[r], data[r]) for r in keys}, manifest


#: A probe run never timed before is estimated from its size: seconds per training example for the
#: feature extraction (once per run) and per example × epoch × seed for the probe, measured on


def execute(run: Run, root: Path = ROOT) -> float:
    """Execute one run's notebook with papermill (cwd = repo root); returns seconds. Raises on failure."""
    import nbformat
    import papermill

    from papa.pipeline.notebook import clean_executed, read_source

    target = root / run_notebook_path(run)
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = target.parent / ".executing"
    scratch.mkdir(exist_ok=True)
    temp = scratch / f"{run.run_id}.ipynb"
    source = scratch / f"{run.run_id}.source.ipynb"
    atomic_write_text(source, nbformat.writes(read_source(root / run.notebook)))
    started = time.perf_counter()
    try:
        papermill.execute_notebook(
            str(source),
            str(temp),
            parameters=run.params,
            kernel_name="python3",
            cwd=str(root),
            progress_bar=False,
            log_output=False,
            report_mode=False,
        )
    except Exception as err:  # the failed notebook is kept for reading
        if temp.is_file():
            nb = nbformat.from_dict(clean_executed(nbformat.read(temp, as_version=4), root))
            atomic_write_text(target.with_suffix(".failed.ipynb"), nbformat.writes(nb))
            temp.unlink()
        reason = f"{getattr(err, 'ename', type(err).__name__)}: {getattr(err, 'evalue', str(err))}".strip()
        raise PapaError(f"Run {run.run_id} failed ({reason[:300]})", f"Read {target.with_suffix('.failed.ipynb').relative_to(root)}") from None
    nb = nbformat.from_dict(clean_executed(nbformat.read(temp, as_version=4), root))
    atomic_write_text(target, nbformat.writes(nb))
    temp.unlink()
    target.with_suffix(".failed.ipynb").unlink(missing_ok=True)
    source.unlink(missing_ok=True)
    return time.perf_counter() - started


class GridLock:
    """An exclusive lock on a grid's folder (:mod:`filelock`: portable); a second runner gets a clear
    error naming the host and process that hold it (recorded in ``.lock.owner``)."""

    def __init__(self, folder: Path):
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / ".lock"
        self.owner = folder / ".lock.owner"

    def __enter__(self):
        import socket

        from filelock import FileLock, Timeout

        self.lock = FileLock(str(self.path), timeout=0)
        try:
            self.lock.acquire()
        except Timeout:
            holder = self.owner.read_text(encoding="utf-8").strip() if self.owner.is_file() else "another process"
            raise PapaError(f"Another papa runner ({holder}) is working on {self.path.parent}", "Wait for it to finish (or stop it), then run again.") from None
        atomic_write_text(self.owner, f"host {socket.gethostname()}, pid {os.getpid()}\n")
        return self

    def __exit__(self, *exc):
        self.owner.unlink(missing_ok=True)
        self.lock.release()


def check_data_available(stale: list[Run]) -> None:
    """Stale runs that read task data need PAPA_DATA_DIR or the hub: say so before anything runs."""
    from papa.probing.data import resolve_data_dir

    if not any(r.kind in ("estimate", "rank", "probe") for r in stale):
        return
    root = resolve_data_dir()
    if root is not None:
        if not root.is_dir():
            raise PapaError(f"PAPA_DATA_DIR={root} is not a folder", "Point PAPA_DATA_DIR at the task data (TASK/SPLIT.jsonl).")
        return
    if os.environ.get("HF_DATASETS_OFFLINE", "") in ("1", "true", "TRUE"):
        raise PapaError(
            f"{len(stale)} runs are missing or stale and need the task data, but PAPA_DATA_DIR is unset and the hub is offline",
            "Set PAPA_DATA_DIR to the data folder (e.g. ../shared/data), or build with --as-is to render the committed runs.",
        )


def _drive(executor, stale: list[Run], keys: dict, manifest: Manifest, failed: dict[str, str], started: float, out) -> None:
    """Hand every stale run to ``executor`` once its stale dependencies are done; the driver alone
    records outcomes in the manifest. A failed run blocks its dependants."""
    pending = {run.run_id: run for run in stale}
    stale_ids = set(pending)
    done: set[str] = set()
    in_flight: set[str] = set()
    number = 0
    while pending or in_flight:
        for run_id, run in list(pending.items()):
            blocked = [d for d in run.deps if d in failed]
            if blocked:
                failed[run_id] = f"not run: depends on failed {blocked[0]}"
                del pending[run_id]
            elif len(in_flight) < executor.slots and all(d in done or d not in stale_ids for d in run.deps):
                number += 1
                print(f"[{number}/{len(stale)}] {run_id} (elapsed {_format(time.perf_counter() - started)})", file=out, flush=True)
                executor.submit(run)
                in_flight.add(run_id)
                del pending[run_id]
        if not in_flight:
            for run_id in pending:  # unreachable with a plan in dependency order; never loop forever
                failed[run_id] = "not run: its dependencies never finished"
            break
        for outcome in executor.wait():
            run_id = outcome.run.run_id
            in_flight.discard(run_id)
            entry = {"key": keys[run_id][0], "data": keys[run_id][1], "status": outcome.status}
            if outcome.status == "ok":
                done.add(run_id)
                entry["seconds"] = round(outcome.seconds, 1)
            else:
                failed[run_id] = outcome.error
                print(f"  FAILED: {outcome.error}", file=out, flush=True)
            manifest.entries[run_id] = entry
            manifest.save()


def run_grid(
    config_path: str | Path,
    only: str | None = None,
    dry_run: bool = False,
    out=None,
    scheduler: str = "sequential",
    gpus_per_run: int = 0,
    threads_per_run: int | None = None,
) -> int:
    """Bring a grid's runs up to date; returns 0 when every run is up to date, else 1."""
    out = out or sys.stdout
    config = load_config(config_path)
    runs, stale, keys, manifest = stale_runs(config)
    if only:
        stale = [r for r in stale if only in r.run_id]
    print(f"grid {config['name']}: {len(runs)} runs, {len(stale)} to execute, estimated {_format(estimate_seconds(stale, manifest))}", file=out)
    if dry_run or not stale:
        for run in stale:
            print(f"  would run {run.run_id}", file=out)
        return 0
    check_data_available(stale)
    failed: dict[str, str] = {}
    started = time.perf_counter()
    with GridLock(runs_dir(config)):
        manifest = Manifest(manifest.path)  # re-read under the lock
        executor = make_executor(scheduler, execute, gpus_per_run=gpus_per_run, threads_per_run=threads_per_run, stale=stale, manifest=manifest, out=out)
        try:
            _drive(executor, stale, keys, manifest, failed, started, out)
        finally:
            executor.close()
    print(f"done in {_format(time.perf_counter() - started)}: {len(stale) - len(failed)} ok, {len(failed)} failed", file=out)
    for run_id, reason in failed.items():
        print(f"  {run_id}: {reason}", file=out)
    return 1 if failed else 0
