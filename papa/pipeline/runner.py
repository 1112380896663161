"""The runner: which runs are stale and why, the lock and the driver (a run executes: :mod:`~papa.pipeline.executors`).

:func:`run_grid` takes the grid's lock, cleans what a killed runner left, checks the runs folder's owner, computes
the stale runs under the lock (:func:`grid_status`), refreshes executed notebooks whose source changed only in its
text and hands the stale runs to an executor. Only the driver seals runs and writes the manifest; a failed run
blocks only its dependants, and the summary is always printed.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from papa.core.errors import PapaError
from papa.pipeline import stamps
from papa.pipeline.clusters import parse_scheduler, preflight
from papa.pipeline.distributed import make_executor
from papa.pipeline.estimate import estimate_seconds, feature_reuse, format_duration, report_disk, reuse_words, size_line
from papa.pipeline.executed import title_is_stale
from papa.pipeline.executors import execute, refresh_text
from papa.pipeline.keys import data_fingerprints, key_of, plan_facts, run_components, upstream
from papa.pipeline.plan import ROOT, Plan, Run, expand, load_config, run_notebook_path, runs_dir
from papa.pipeline.stamps import GridLock, Manifest


@dataclass
class GridStatus:
    """Where a grid stands: every run, the stale ones with their reasons, and what planning found."""

    runs: Plan
    stale: list[Run]
    reasons: dict[str, list[str]]  # run_id → why it is stale
    keys: dict[str, tuple[str, str | None]]  # run_id → (key, data fingerprint)
    components: dict[str, dict]
    displays: dict[str, str]
    stamps: dict[str, dict | None]
    manifest: Manifest
    refresh: list[Run] = field(default_factory=list)  # proven runs whose text (source markdown or title) changed
    refresh_why: dict[str, str] = field(default_factory=dict)  # run_id → "markdown changed" or "title changed"


def grid_status(config: dict) -> GridStatus:
    """Plan a grid and verify every run's outputs against its expected key (read-only)."""
    runs = expand(config)
    folder = runs_dir(config)
    facts = plan_facts(runs)
    components = run_components(runs, facts=facts)
    data = data_fingerprints(runs)
    displays = {r.run_id: facts[r.notebook]["display"] for r in runs}  # markdown included: a change refreshes text
    keys = {r.run_id: (key_of(components[r.run_id]), data[r.run_id]) for r in runs}
    found = {r.run_id: stamps.read_stamp(stamps.stamp_path(folder, r.run_id)) for r in runs}
    reasons: dict[str, list[str]] = {}
    for run in runs:  # dependency order: upstream verdicts are known
        rid, stamp = run.run_id, found[run.run_id]
        why = stamps.verify(run, keys[rid][0], components[rid], data[rid], stamp)
        if stamp is None and stamps.stamp_path(folder, rid).exists():
            why = ["record corrupt (its stamp fails its checksum)"]
        if not why:
            rerun = [d for d in run.deps if d in reasons]
            read = stamp.get("inputs") or {}
            moved = [d for d in run.deps if d not in reasons and read.get(d) != stamps.digest(found[d])]
            why = [upstream(rerun, "re-runs")] if rerun else []
            why += [upstream(moved, "has other outputs than when this run read them")] if moved else []
        if why:
            reasons[rid] = why
    stale = [r for r in runs if r.run_id in reasons]
    proven = [r for r in runs if r.run_id not in reasons]
    retitle = {r.run_id for r in proven if title_is_stale(ROOT / run_notebook_path(r), r.params, ROOT)}
    marked = {r.run_id for r in proven if found[r.run_id].get("display") != displays[r.run_id]}
    refresh = [r for r in proven if r.run_id in marked or r.run_id in retitle]
    why = {r.run_id: "markdown changed" if r.run_id in marked else "title changed" for r in refresh}
    manifest = Manifest(folder / "manifest.json")
    return GridStatus(runs, stale, reasons, keys, components, displays, found, manifest, refresh, why)


def mark_dependants(status: GridStatus) -> None:
    """Make every run downstream of a stale one stale too, and rebuild ``status.stale`` in plan order."""
    for run in status.runs:  # dependency order: upstream verdicts are known
        rerun = [d for d in run.deps if d in status.reasons]
        if rerun and run.run_id not in status.reasons:
            status.reasons[run.run_id] = [upstream(rerun, "re-runs")]
    status.stale = [r for r in status.runs if r.run_id in status.reasons]


def stale_runs(config: dict) -> tuple[list[Run], list[Run], dict[str, tuple[str, str | None]], Manifest]:
    """``(all runs, stale runs, {run_id: (key, data fingerprint)}, manifest)``; refuses executed notebooks that differ
    from what their run wrote (its stamp's sha256), stale or not."""
    status = grid_status(config)
    edited = [r for r in status.runs if stamps.notebook_edited(r, status.stamps[r.run_id])]
    if edited:
        more = f" and {len(edited) - 3} more" if len(edited) > 3 else ""
        names = ", ".join(run_notebook_path(r) for r in edited[:3]) + more
        only = edited[0].run_id if len(edited) == 1 else "RUN_ID"
        rerun = f"papa grid run {config.get('_path', 'CONFIG')} --only {only}"
        hint = f"Restore it (git checkout -- FILE) or re-execute it ({rerun}); an edited notebook is never published."
        were = "s were" if len(edited) > 1 else " was"
        raise PapaError(f"{len(edited)} executed notebook{were} edited after it ran: {names}", hint)
    return status.runs, status.stale, status.keys, status.manifest


def check_data_available(stale: list[Run]) -> None:
    """Stale runs that read task data need PAPA_DATA_DIR or the hub: say so before anything runs."""
    from papa.probing.data import resolve_data_dir

    if not any(r.kind in ("estimate", "rank", "probe") for r in stale):
        return
    root = resolve_data_dir()
    if root is not None and not root.is_dir():
        hint = "Point PAPA_DATA_DIR at the task data (TASK/SPLIT.jsonl)."
        raise PapaError(f"PAPA_DATA_DIR={root} is not a folder", hint)
    if root is None and os.environ.get("HF_DATASETS_OFFLINE", "") in ("1", "true", "TRUE"):
        problem = f"{len(stale)} runs are missing or stale and need the task data, but PAPA_DATA_DIR is unset"
        hint = "Set PAPA_DATA_DIR to the data folder (e.g. ../shared/data), or build with --as-is"
        raise PapaError(problem + " and the hub is offline", hint + " to render the committed runs.")


def _drive(executor, stale: list[Run], keys: dict, manifest: Manifest, failed: dict, started: float, out, seal=None):
    """Hand every stale run to ``executor`` once its stale dependencies are done; seal and record each outcome (``seal``
    returns the run's stamp, whose ``finished`` time the manifest keeps)."""
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
                elapsed = format_duration(time.perf_counter() - started)
                print(f"[{number}/{len(stale)}] {run_id} (elapsed {elapsed})", file=out, flush=True)
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
            status, error, sealed = outcome.status, outcome.error, None
            if status == "ok" and seal is not None:
                try:
                    sealed = seal(outcome.run, outcome.seconds)
                except Exception as err:  # noqa: BLE001 - a run that cannot be sealed fails; the grid goes on
                    error = str(err) if isinstance(err, PapaError) else f"sealing failed ({type(err).__name__}: {err})"
                    status = "failed"
            entry = {"key": keys[run_id][0], "data": keys[run_id][1], "status": status}
            if status == "ok":
                done.add(run_id)
                entry["seconds"] = round(outcome.seconds, 1)
                if sealed and sealed.get("finished"):
                    entry["finished"] = sealed["finished"]
            else:
                failed[run_id] = error
                entry["error"] = error[:500]
                print(f"  FAILED: {error}", file=out, flush=True)
            # a success clears an old error
            previous = {k: v for k, v in manifest.entries.get(run_id, {}).items() if k != "error"}
            manifest.entries[run_id] = dict(previous, **entry)
            _save(manifest, out)


def _save(manifest: Manifest, out) -> None:
    try:
        manifest.save()
    except PapaError as err:  # the stamps still hold every finished run: the manifest is rebuilt from them
        print(f"  warning: manifest not saved ({err})", file=out, flush=True)


def resized_runs(status: GridStatus, stale: list[Run]) -> set[str]:
    """The stale runs whose parameters differ from their stamp's: their last duration no longer predicts them."""
    recorded = {r.run_id: ((status.stamps.get(r.run_id) or {}).get("components") or {}).get("params") for r in stale}
    return {rid for rid, params in recorded.items() if params not in (None, status.components[rid]["params"])}


def _report_plan(status: GridStatus, stale: list[Run], config: dict, out, dry_run: bool) -> None:
    say = functools.partial(print, file=out)
    seconds = estimate_seconds(stale, status.manifest, resized_runs(status, stale))
    estimated = format_duration(seconds)
    say(f"grid {config['name']}: {len(status.runs)} runs, {len(stale)} to execute, estimated {estimated}")
    if status.manifest.rebuilt:
        say("  (manifest missing or corrupt: rebuilt from the runs' stamps)")
    if dry_run:
        from papa.probing.features import memory_budget_bytes

        reuse, budget = feature_reuse(stale), memory_budget_bytes() if stale else 0
    for run in stale:
        say(f"  {'would run' if dry_run else 'runs'} {run.run_id}: {'; '.join(status.reasons[run.run_id])}")
        if dry_run:
            say(f"      {', '.join(filter(None, [size_line(run, budget), reuse_words(reuse.get(run.run_id))]))}")
    for run in status.refresh:
        why = status.refresh_why.get(run.run_id, "markdown changed")
        say(f"  {'would refresh' if dry_run else 'refreshes'} the text of {run.run_id} ({why}; not re-executed)")
    report_disk(stale, out)


def _report_outside_plan(status: GridStatus, folder: Path, out, mode: str) -> None:
    """What no run of the plan wrote: ``mode`` ``"dry-run"`` names it, ``"prune"`` removes it, ``"count"`` counts."""
    say = functools.partial(print, file=out)
    if status.runs.unsized:
        say(f"  not in the plan: not checked (the plan lacks the probes of {', '.join(status.runs.unsized)})")
        return
    entries = stamps.manifest_outside_plan(status.runs, status.manifest)
    if mode == "prune":
        files = stamps.prune_outside_plan(status.runs, folder, status.manifest)
    else:
        files = stamps.outside_plan(status.runs, folder)
    if not files and not entries:
        return
    hints = {"dry-run": " (--prune removes them)", "count": " (--dry-run lists them, --prune removes them)"}
    what = f"{len(files)} files and {len(entries)} manifest entries{hints.get(mode, '')}"
    say(f"  {'removed, not in the plan' if mode == 'prune' else 'not in the plan'}: {what}")
    if mode != "count":
        names = [str(path.relative_to(folder.absolute())) for path in files] + [f"manifest entry {e}" for e in entries]
        for name in names:
            say(f"    {'removed' if mode == 'prune' else 'not in the plan'}: {name}")


def _warn_unsized(plan: Plan) -> None:
    """One line on stderr per model the plan could not size offline (its probe runs are not planned)."""
    for model, why in plan.unsized.items():
        print(f"cannot size {model}: {why}; its probe runs are not planned", file=sys.stderr)


def _check_sized(plan: Plan) -> None:
    if plan.unsized:
        hint = "Download the model once with the hub reachable (or use a local folder), or plan with --dry-run."
        models = ", ".join(plan.unsized)
        raise PapaError(f"Cannot count the heads of {models} offline: its probe runs are not planned", hint)


def check_local_models(plan: Plan) -> None:
    """Check every local model folder the plan runs on as a whole (tokenizer, size, tensors against the config: no
    weights read) before anything is written; embedded models are checked when they load, hub ids by the hub."""
    from papa.core.model_folders import check_model_fits
    from papa.core.models import EMBEDDED_MODELS, check_model_folder

    for model in sorted({str(run.params["model"]) for run in plan if "model" in run.params}):
        if model not in EMBEDDED_MODELS and Path(model).expanduser().is_dir():
            check_model_folder(Path(model).expanduser(), model)
            check_model_fits(Path(model).expanduser(), model)


def _check_runnable(status: GridStatus, stale: list[Run], only: str | None) -> None:
    """Refuse an incomplete plan, or (``only``) a selected run whose stale upstream run is not selected."""
    _check_sized(status.runs)
    if not only:
        return
    selected, stale_ids = {r.run_id for r in stale}, {r.run_id for r in status.stale}
    needed = {d for r in stale for d in r.deps}
    for run in reversed(status.runs):  # dependency order: every run that needs this one came after it
        if run.run_id in needed:
            needed.update(run.deps)
    missing = sorted(rid for rid in needed if rid in stale_ids and rid not in selected)
    if missing:
        hint = "Run those first (or without --only): a run never executes on stale constants, rankings or lr choices."
        raise PapaError(f"--only {only!r} selects runs whose upstream runs are stale: {', '.join(missing)}", hint)


def run_grid(
    config_path: str | Path,
    only: str | None = None,
    dry_run: bool = False,
    out=None,
    *,
    replace: bool = False,
    scheduler: str = "sequential",
    gpus_per_run: int = 0,
    threads_per_run: int | None = None,
    prune: bool = False,
) -> int:
    """Bring a grid's runs up to date (``papa grid run``); 0 when every run is up to date, else 1."""
    out = out or sys.stdout
    config = load_config(config_path)
    folder = runs_dir(config)
    if dry_run:
        stamps.check_owner(config, folder, replace)
        status = grid_status(config)
        check_local_models(status.runs)
        _warn_unsized(status.runs)
        stamps.check_no_links(status.runs, folder)
        stale = [r for r in status.stale if not only or only in r.run_id]
        _report_plan(status, stale, config, out, dry_run=True)
        _report_outside_plan(status, folder, out, "dry-run")
        return 0
    preflight(parse_scheduler(scheduler))  # a scheduler that cannot come up fails in seconds, writing nothing
    plan = expand(config)
    check_local_models(plan)
    _warn_unsized(plan)
    _check_sized(plan)
    stamps.check_no_links(plan, folder)
    created = not folder.exists()
    try:
        sizes = {"gpus_per_run": gpus_per_run, "threads_per_run": threads_per_run}
        return _run_locked(config, folder, only, replace, scheduler, sizes, prune, out)
    except BaseException:
        if created:  # e.g. the scheduler never came up: no new runs folder is left behind
            stamps.remove_if_unused(folder)
        raise


def _run_locked(config: dict, folder: Path, only, replace: bool, scheduler: str, sizes: dict, prune: bool, out) -> int:
    """:func:`run_grid` under the grid's lock: plan, report, then execute the stale runs."""
    failed: dict[str, str] = {}
    started = time.perf_counter()
    with GridLock(folder):
        if stamps.check_owner(config, folder, replace):
            stamps.record_owner(config, folder)
        stamps.clean_leftovers(folder)
        status = grid_status(config)  # under the lock: a runner that waited sees the other's work
        manifest = status.manifest
        for run in status.refresh:
            try:
                rid = run.run_id
                status.stamps[rid] = refresh_text(run, status.stamps[rid], status.displays[rid], folder)
            except (PapaError, OSError, ValueError):
                status.reasons[run.run_id] = ["executed notebook does not pair with its source"]
                mark_dependants(status)
        for run in status.runs:  # the manifest caches what the stamps prove
            stamp, entry = status.stamps[run.run_id], manifest.entries.get(run.run_id, {})
            recorded = (entry.get("key"), entry.get("status"))
            if run.run_id not in status.reasons and stamp and recorded != (stamp["key"], "ok"):
                manifest.entries[run.run_id] = stamps.entry_of(stamp)
        stale = [r for r in status.stale if not only or only in r.run_id]
        _check_runnable(status, stale, only)
        _report_plan(status, stale, config, out, dry_run=False)
        _report_outside_plan(status, folder, out, "prune" if prune else "count")
        _save(manifest, out)
        if not stale:
            return 0
        check_data_available(stale)

        def seal_run(run: Run, seconds: float) -> dict:
            rid, (key, data) = run.run_id, status.keys[run.run_id]
            sealed = stamps.seal(run, key, status.components[rid], status.displays[rid], data, seconds, folder)
            status.stamps[rid] = sealed
            return sealed

        executor = make_executor(scheduler, execute, stale=stale, manifest=manifest, out=out, **sizes)
        try:
            _drive(executor, stale, status.keys, manifest, failed, started, out, seal=seal_run)
        finally:
            executor.close()
            ok = len(stale) - len(failed)
            print(f"done in {format_duration(time.perf_counter() - started)}: {ok} ok, {len(failed)} failed", file=out)
            for run_id, reason in failed.items():
                print(f"  {run_id}: {reason}", file=out)
    return 1 if failed else 0
