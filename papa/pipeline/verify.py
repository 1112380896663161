"""``papa grid verify``: re-execute committed runs and compare what comes out with what the book publishes.

Per chosen run (estimate, rank, select_lr or probe, with a stamp and an executed notebook): a scratch folder
(``papa-verify-*``) gets the committed notebook, re-parameterised from its stamp (``--device`` replacing the device),
the upstream runs' committed outputs and a fresh feature cache; ``pytest --nbval-lax`` executes it once and compares
the cells tagged ``nbval-check-output`` after the sanitizer (``nbval_sanitize.cfg``); then every re-made output is
compared field by field (:mod:`papa.pipeline.output_diff`, numbers within ``tolerance``). A run matches when nbval
passed (or ``tolerance`` > 0) and no field differs. A checksummed record per run, ``verified/<run_id>.json``, says
when, where, what differed and what may explain it, and holds the sha256 of every committed output it compared; the
reproducibility page counts a record only while those are the run's current outputs (:func:`bound_records`). A
killed verification's scratch folder is removed by the next verify or grid run; nbval's colour codes never reach a
record. ``kernels="avx2"`` (:data:`~papa.pipeline.clusters.KERNEL_ENV`) lets an AVX-512 CPU re-make exactly a run
made on a CPU without AVX-512.
"""

from __future__ import annotations

import contextlib
import datetime
import fnmatch
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from xml.etree import ElementTree

from papa.core.errors import PapaError
from papa.core.io import atomic_write_json, sha256_file
from papa.core.names import parse_run_id
from papa.pipeline.clusters import KERNEL_ENV, machine_words, run_environment, threads_said
from papa.pipeline.keys import environment, what_changed
from papa.pipeline.output_diff import Difference, diff_files
from papa.pipeline.plan import ROOT, Run, load_config, run_notebook_path
from papa.pipeline.sources import PACKAGE, notebook_code_tree, papa_modules
from papa.pipeline.stamps import (
    GridLock,
    read_records,
    read_stamp,
    read_stamps,
    remove_dead_scratch,
    scratch_folder,
    stamp_path,
    verification_path,
)

#: The nbval sanitizer: what legitimately differs between two executions (durations, paths, devices, addresses).
SANITIZER = Path(__file__).with_name("nbval_sanitize.cfg")
#: The tag of the cells whose outputs nbval compares (``--nbval-lax`` checks only these).
CHECK_TAG = "nbval-check-output"
#: The kinds of run that are verified (the chapters, results and controls, only read the others' outputs).
VERIFIABLE = ("estimate", "rank", "select_lr", "probe")


def bound_records(folder: Path, runs: list[Run], root: Path = ROOT) -> tuple[dict[str, dict], dict[str, int]]:
    """The records of ``runs`` bound to what the book shows now, by run id, and how many were set aside, by reason:
    ``outdated`` (made for another execution: not the stamp's key), ``unbound`` (no checksums of the outputs it
    compared: made before records stored them), ``changed`` (those checksums are not of the run's current outputs:
    changed since, or a record copied from another run)."""
    by_id = {run.run_id: run for run in runs}
    counted: dict[str, dict] = {}
    aside = {"outdated": 0, "unbound": 0, "changed": 0}
    for run_id, record in read_records(folder).items():
        run = by_id.get(run_id)
        if run is None:
            continue
        outputs = record.get("outputs")
        if record.get("key") != (read_stamp(stamp_path(folder, run_id)) or {}).get("key"):
            aside["outdated"] += 1
        elif not isinstance(outputs, dict) or not outputs:
            aside["unbound"] += 1
        elif outputs != {rel: sha256_file(root / rel) for rel in run.outputs if (root / rel).is_file()}:
            aside["changed"] += 1
        else:
            counted[run_id] = record
    return counted, aside


def _provenances(run: Run, root: Path) -> list[dict]:
    """The ``provenance`` records of a run's committed JSON outputs (unreadable ones skipped)."""
    found = []
    for rel in run.outputs:
        if rel.endswith(".json") and (root / rel).is_file():
            try:
                data = json.loads((root / rel).read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError):
                continue
            found.append(data.get("provenance") or (data.get("meta") or {}).get("provenance") or {})
    return found


def run_commits(run: Run, root: Path = ROOT) -> list[str]:
    """The ``provenance.git_commit`` values of a run's committed JSON outputs (``-dirty``: uncommitted changes)."""
    return sorted({p["git_commit"] for p in _provenances(run, root) if isinstance(p.get("git_commit"), str)})


def run_threads(run: Run, root: Path = ROOT) -> int | None:
    """The torch thread count a CPU run recorded (its device ``cpu:x86_64x1``: 1), None if unrecorded or several:
    a re-execution uses the same, since thread pools may split a sum in another order."""
    counts = {
        match.group(1)
        for p in _provenances(run, root)
        if (match := re.fullmatch(r"cpu:.*x(\d+)", str(p.get("device") or "")))
    }
    return int(counts.pop()) if len(counts) == 1 else None


def stamped_runs(folder: Path) -> list[Run]:
    """The runs of a runs folder as their stamps recorded them, without planning (what the book publishes)."""
    runs = []
    for stamp in read_stamps(folder):
        params = (stamp.get("components") or {}).get("params") or {}
        outputs = [rel for rel in stamp["outputs"] if not rel.endswith(".ipynb")]
        run_id, deps = stamp["run_id"], list(stamp.get("inputs") or {})
        runs.append(Run(run_id, parse_run_id(run_id).kind, params, deps=deps, outputs=outputs, grid=folder.name))
    return runs


def dirty_runs(runs: list[Run], root: Path = ROOT) -> dict[str, list[str]]:
    """The runs whose outputs were computed in a working tree with uncommitted changes, with those commits."""
    found = {run.run_id: [c for c in run_commits(run, root) if c.endswith("-dirty")] for run in runs}
    return {run_id: commits for run_id, commits in found.items() if commits}


# -- which runs -----------------------------------------------------------------------------------------------------
def select_runs(
    runs: list[Run], stamps: dict[str, dict], pattern: str | None = None, sample: int | None = None, root: Path = ROOT
) -> list[Run]:
    """Verifiable runs with a stamp and an executed notebook; with ``pattern`` (comma-separated globs or texts) those
    it matches; with ``sample`` that many, one of every kind per round with the model turning, runs of an
    uncommitted tree first, then the cheapest."""
    ready = [r for r in runs if r.kind in VERIFIABLE and stamps.get(r.run_id)]
    ready = [r for r in ready if (root / run_notebook_path(r)).is_file()]
    if pattern:
        globs = [part if any(c in part for c in "*?[") else f"*{part}*" for part in pattern.split(",") if part.strip()]
        ready = [r for r in ready if any(fnmatch.fnmatchcase(r.run_id, glob.strip()) for glob in globs)]
    if sample is None:
        return ready
    dirty = dirty_runs(ready, root)
    models = sorted({r.params["model"] for r in ready})
    order = lambda r: (r.run_id not in dirty, stamps[r.run_id].get("seconds") or 0.0, r.run_id)
    groups = {(kind, model): [] for kind in VERIFIABLE for model in models}
    for r in sorted(ready, key=order):
        groups[(r.kind, r.params["model"])].append(r)
    chosen: list[Run] = []
    round_ = 0
    while len(chosen) < min(sample, len(ready)):  # every round some group gives a run until enough are chosen
        for index, kind in enumerate(VERIFIABLE):
            group = groups[(kind, models[(round_ + index) % len(models)])]
            if group and len(chosen) < sample:
                chosen.append(group.pop(0))
        round_ += 1
    return chosen


#: Differences up to this size, with nbval passing, are what other vector kernels give (measured: 2e-7 to 6e-7).
KERNEL_ROUNDING = 1e-5


# -- one run ----------------------------------------------------------------------------------------------------------
def _prepare(run: Run, stamp: dict, by_id: dict[str, Run], scratch: Path, device: str | None, root: Path) -> Path:
    """The committed notebook in ``scratch``, parameterised as its stamp recorded, beside its upstream outputs."""
    import nbformat
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    params = dict((stamp.get("components") or {}).get("params") or run.params)
    if device:
        params["device"] = device
    # papermill's reader: a cell without tags (a markdown cell the runner's text refresh wrote) gets empty ones
    nb = parameterize_notebook(load_notebook_node(str(root / run_notebook_path(run))), params)
    for dep in run.deps:
        for rel in by_id[dep].outputs:
            if not (root / rel).is_file():
                problem = f"Run {run.run_id} reads {rel}, which its upstream run {dep} has not committed"
                raise PapaError(problem, f"Run `papa grid run --only {dep}` first.")
            (scratch / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / rel, scratch / rel)
    notebook = scratch / f"{run.run_id}.ipynb"
    nbformat.write(nb, notebook)
    (scratch / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")  # nothing of the project's pytest set-up
    return notebook


#: A terminal colour or cursor code, raw (ESC) or as JUnit XML escapes it (``#x1B``).
_ANSI = re.compile(r"(?:\x1b|#x1B)\[[0-9;?]*[ -/]*[@-~]")


def plain(text: str) -> str:
    """``text`` without terminal colour codes (nbval colours its diffs)."""
    return _ANSI.sub("", text)


def _nbval(
    notebook: Path, scratch: Path, kernels: str | None = None, threads: int | None = None
) -> tuple[bool, list[str], str]:
    """``pytest --nbval-lax`` on ``notebook`` in ``scratch`` (the kernel on ``threads`` threads when given): (passed,
    failed cells with reasons, output tail)."""
    env = dict(os.environ, PAPA_CACHE_DIR=str(scratch / "cache"), **run_environment(threads, kernels))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE.parent), env.get("PYTHONPATH", "")]))
    for name in ("PAPA_DATA_DIR", "PAPA_MODEL_CACHE"):
        if env.get(name, "").strip():
            env[name] = str(Path(env[name]).expanduser().resolve())
    report = scratch / "nbval.xml"
    command = [sys.executable, "-m", "pytest", notebook.name, "--nbval-lax", "--nbval-current-env"]
    command += ["--nbval-sanitize-with", str(SANITIZER), "--nbval-kernel-startup-timeout", "300", "-c", "pytest.ini"]
    command += ["-p", "no:cacheprovider", "-q", f"--junitxml={report}"]
    done = subprocess.run(command, cwd=scratch, env=env, capture_output=True, text=True)
    failed = []
    if report.is_file():
        for case in ElementTree.parse(report).getroot().iter("testcase"):
            for problem in [*case.iter("failure"), *case.iter("error")]:
                text = plain(problem.text or problem.get("message") or "")
                lines = [line.strip() for line in text.splitlines() if line.strip()]
                reason = next((line for line in lines if line.startswith("Cell ")), lines[0] if lines else "failed")
                detail = " ".join(lines[lines.index("Traceback:") + 1 :])[:300] if "Traceback:" in lines else ""
                failed.append(f"{case.get('name')}: {reason.split(': ', 1)[-1]}" + (f" ({detail})" if detail else ""))
    tail = plain(done.stdout + done.stderr)[-2000:]
    if done.returncode != 0 and not failed:
        failed.append(f"pytest exited with status {done.returncode}")
    return done.returncode == 0, failed, tail


def _changed_since(run: Run, stamp: dict, root: Path) -> list[str]:
    """What changed since the run executed: the papa code its notebook executes and the library versions."""
    import nbformat

    old = stamp.get("components") or {}
    if not old:
        return []
    old = {part: old.get(part) for part in ("params", "notebook")} | {
        part: old.get(part) or {} for part in ("deps", "papa", "environment")
    }
    nb = nbformat.read(root / run_notebook_path(run), as_version=4)
    now = dict(old, papa=papa_modules(notebook_code_tree(nb)), environment=environment())
    return [reason for reason in what_changed(old, now) if reason != "key changed"]  # nothing changed: key changed


def verify_run(
    run: Run,
    stamp: dict,
    by_id: dict[str, Run],
    device: str | None = None,
    tolerance: float = 0.0,
    root: Path = ROOT,
    kernels: str | None = None,
) -> dict:
    """Re-execute ``run`` in a scratch folder and compare (the module docstring); returns its record."""
    import nbformat

    from papa.core.models import pick_device
    from papa.core.provenance import device_description, git_commit, package_versions
    from papa.core.version import __version__

    started = time.perf_counter()
    compared = {rel: sha256_file(root / rel) for rel in run.outputs if (root / rel).is_file()}
    scratch = scratch_folder()
    try:
        notebook = _prepare(run, stamp, by_id, scratch, device, root)
        cells = [c for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code"]
        checked = sum(CHECK_TAG in c.get("metadata", {}).get("tags", []) for c in cells)
        threads = run_threads(run, root)
        passed, failed_cells, tail = _nbval(notebook, scratch, kernels, threads)
        differences: list[tuple[str, Difference]] = []
        largest = 0.0
        for rel in run.outputs:
            found, size = diff_files(root / rel, scratch / rel, tolerance)
            differences += [(Path(rel).name, d) for d in found]
            largest = max(largest, size)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    matched = not differences and (passed or tolerance > 0)
    written = stamp["outputs"]  # a committed output that is not what the run wrote was edited
    edited = [rel for rel in run.outputs if (root / rel).is_file() and written.get(rel) != sha256_file(root / rel)]
    causes = [f"committed output edited after the run: {rel}" for rel in edited]
    causes += [f"since the run: {reason}" for reason in _changed_since(run, stamp, root)]
    several = len(run.outputs) > 1
    nbval = {"passed": passed, "checked_cells": checked, "failed_cells": failed_cells, "tail": "" if passed else tail}
    return {
        "run_id": run.run_id,
        "kind": run.kind,
        "key": stamp["key"],
        "verified_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_words(kernels),
        "device": threads_said(device_description(pick_device(device or run.params.get("device"))), threads),
        "python": platform.python_version(),
        "packages": package_versions(),
        "papa": {"version": __version__, "commit": git_commit(PACKAGE.parent)},
        "run_commits": run_commits(run, root),
        "tolerance": tolerance,
        "matched": matched,
        "largest_difference": largest,
        "outputs": compared,
        "differences": [dict(d.as_record(), file=name) if several else d.as_record() for name, d in differences[:50]],
        "fields": [f"{name}: {d.field}" if several else d.field for name, d in differences],
        "nbval": nbval,
        "causes": causes if not matched else [],
        "seconds": round(time.perf_counter() - started, 1),
    }


def differences_text(record: dict) -> str:
    """A failed record in words: the first five differing fields and failed nbval cells."""
    most = 5
    parts = []
    for d in record["differences"][:most]:
        size = f", |Δ| {d['size']:.3g}" if d["size"] is not None else ""
        values = f"committed {d['committed']}, re-made {d['remade']}{size}"
        parts.append(f"{d['file'] + ': ' if 'file' in d else ''}{d['field']} differs ({values})")
    if len(record["differences"]) > most:
        parts.append(f"and {len(record['fields']) - most} more fields")
    parts += [f"nbval {cell}" for cell in record["nbval"]["failed_cells"][:most]]
    return "; ".join(parts) + (f" [{'; '.join(record['causes'])}]" if record["causes"] else "")


# -- a grid ----------------------------------------------------------------------------------------------------------
def verify_grid(
    config_path: str | Path,
    pattern: str | None = None,
    sample: int | None = None,
    device: str | None = None,
    tolerance: float = 0.0,
    out=None,
    records: Path | None = None,
    root: Path = ROOT,
    kernels: str | None = None,
) -> int:
    """Verify the chosen committed runs of a grid and write their records; 0 when every run matched."""
    from papa.pipeline.runner import grid_status

    out = out or sys.stdout
    if kernels is not None and kernels not in KERNEL_ENV:
        raise PapaError(f"Unknown kernels {kernels!r}", f"Use one of {', '.join(KERNEL_ENV)}, or leave --kernels out.")
    if tolerance < 0:
        hint = "Pass an absolute tolerance such as 1e-5 (0: the values must be equal)."
        raise PapaError(f"--tolerance must be 0 or more, got {tolerance}", hint)
    config = load_config(config_path)
    name = config["name"]
    remove_dead_scratch()  # what a killed verification left in the temp folder
    folder = root / "book" / "runs" / config["name"]
    if not folder.is_dir():
        problem = f"Grid {name!r} has no runs folder (book/runs/{name})"
        raise PapaError(problem, f"Run it first: papa grid run {config_path}.")
    with contextlib.ExitStack() as stack:
        try:
            lock = stack.enter_context(GridLock(folder))
        except PapaError:  # a runner works on the grid: verify only the runs it will not rewrite
            lock = None
        committed = stamped_runs(folder)
        by_id = {r.run_id: r for r in committed}
        stamps = {r.run_id: read_stamp(stamp_path(folder, r.run_id)) for r in committed}
        candidates = committed
        # a runner re-executes the stale runs alone, so the up-to-date ones stay as committed; a sample reproduces
        # the book as it stands: never a run waiting to re-execute
        if lock is None or sample is not None:
            stale = grid_status(config).reasons
            candidates = [r for r in committed if r.run_id not in stale]
            why = f"a runner is working on grid {name}" if lock is None else f"grid {name} samples its up-to-date runs"
            print(
                f"{why}: {len(candidates)} of its {len(committed)} committed runs are up to date", file=out, flush=True
            )
        chosen = select_runs(candidates, stamps, pattern, sample, root)
        if not chosen:
            what = f" matching {pattern!r}" if pattern else ""
            hint = "Run the grid first (papa grid run CONFIG), or choose other runs with --runs."
            problem = f"Grid {name!r} has no committed estimate, rank, select_lr or probe run{what} to verify"
            raise PapaError(problem, hint)
        across = f", numbers within {tolerance:g}" if tolerance else ", exactly"
        print(f"grid {name}: verifying {len(chosen)} committed runs{across}", file=out, flush=True)
        failed, rounding = [], 0
        for number, run in enumerate(chosen, 1):
            record = verify_run(run, stamps[run.run_id], by_id, device, tolerance, root, kernels)
            path = records / f"{run.run_id}.json" if records else verification_path(folder, run.run_id)
            atomic_write_json(path, record)
            verdict = "matched" if record["matched"] else "DIFFERED"
            largest, cells = record["largest_difference"], record["nbval"]["checked_cells"]
            facts = f"largest |Δ| {largest:.3g}, nbval {cells} cells checked, {record['seconds']:.0f} s"
            print(f"[{number}/{len(chosen)}] {run.run_id}: {verdict} ({facts})", file=out, flush=True)
            if not record["matched"]:
                failed.append((run.run_id, differences_text(record)))
                rounding += record["nbval"]["passed"] and record["largest_difference"] <= KERNEL_ROUNDING
    print(f"verified {len(chosen)} runs: {len(chosen) - len(failed)} matched, {len(failed)} differed", file=out)
    for run_id, words in failed:
        print(f"  FAILED {run_id}: {words}", file=out)
    if rounding and kernels is None:
        why = f"{rounding} of them differ only at float rounding (at most {KERNEL_ROUNDING:g}), as runs made on a CPU"
        print(f"  {why} with other vector kernels do: try --kernels avx2 (runs made without AVX-512)", file=out)
    return 1 if failed else 0
