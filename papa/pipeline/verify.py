"""``papa grid verify``: re-execute committed runs and compare what comes out with what the book publishes.

For each chosen run (an estimate, rank, select_lr or probe run with a stamp and an executed notebook):

1. **A scratch folder** (``papa-verify-*`` in the system's temporary folder) receives a copy of the committed executed
   notebook, its ``injected-parameters`` cell written again from the parameters the run's stamp recorded (with
   ``--device``, that device), and the committed outputs of its upstream runs at the paths its parameters name
   (relative to the folder). The notebook writes its outputs there: nothing committed is touched. Its feature
   cache is a fresh folder there too, so a probe computes its features again rather than reading them.
2. **nbval executes it once**: ``pytest --nbval-lax --nbval-sanitize-with papa/pipeline/nbval_sanitize.cfg`` on
   the copy runs every cell in a kernel started in the scratch folder and compares the outputs of the cells tagged
   ``nbval-check-output`` (scores, drops, the chosen lr, the head order, the constants' checksum) with the committed
   ones, after the sanitizer removed durations, paths, device strings and addresses (nothing runs twice).
3. **The outputs, field by field** (:mod:`papa.pipeline.output_diff`): every re-made results file against the
   committed one, numbers within ``tolerance`` (0: equal), the rest exactly. nbval compares text, so across
   devices (``tolerance`` > 0) its verdict is recorded but the numbers decide.
4. **A record** per run, ``book/runs/<grid>/verified/<run_id>.json`` (atomic, with a checksum): when, the machine,
   device, versions and commit, matched or differed, every field that differed and the largest difference, nbval's
   cells, and what may explain a difference (code or versions changed since the run, an output edited after it).

``kernels="avx2"``: torch's, MKL's and oneDNN's AVX2 kernels (:data:`KERNEL_ENV`), so that an AVX-512 CPU re-makes
exactly a run made on a CPU without AVX-512 (its own kernels differ there at float rounding, train losses at 1e-7).

A run matches when nbval passed (or ``tolerance`` > 0) and no field differs. The book's reproducibility page reads
the records (:func:`read_records`) in its "Verified" section.
"""

from __future__ import annotations

import datetime
import fnmatch
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from xml.etree import ElementTree

from papa.core.errors import PapaError
from papa.core.io import atomic_write_json, read_json_verified, sha256_file
from papa.pipeline.keys import environment, key_of, what_changed
from papa.pipeline.output_diff import Difference, diff_files
from papa.pipeline.plan import ROOT, Run, load_config, run_notebook_path
from papa.pipeline.sources import PACKAGE, notebook_code_tree, papa_modules
from papa.pipeline.stamps import GridLock, read_stamp, stamp_path, verification_path

#: The nbval sanitizer: what legitimately differs between two executions (durations, paths, devices, addresses).
SANITIZER = Path(__file__).with_name("nbval_sanitize.cfg")
#: The tag of the cells whose outputs nbval compares (``--nbval-lax`` checks only these).
CHECK_TAG = "nbval-check-output"
#: The kinds of run that are verified (the chapters, results and controls, only read the others' outputs).
VERIFIABLE = ("estimate", "rank", "select_lr", "probe")


def read_records(folder: Path) -> dict[str, dict]:
    """Every verification record of a runs folder whose checksum holds, by run id."""
    records = {}
    for path in sorted((folder / "verified").glob("*.json")):
        try:
            record = read_json_verified(path, "verification record")
        except PapaError:
            continue
        if isinstance(record.get("run_id"), str):
            records[record["run_id"]] = record
    return records


def run_commits(run: Run, root: Path = ROOT) -> list[str]:
    """The commits a run's committed outputs say they were computed at (``provenance.git_commit`` of its results and
    rankings; constants and lr choices record none): ``-dirty`` marks a working tree with uncommitted changes."""
    commits = set()
    for rel in run.outputs:
        if rel.endswith(".json") and (root / rel).is_file():
            try:
                data = json.loads((root / rel).read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError):
                continue
            provenance = data.get("provenance") or (data.get("meta") or {}).get("provenance") or {}
            if isinstance(provenance.get("git_commit"), str):
                commits.add(provenance["git_commit"])
    return sorted(commits)


def stamped_runs(folder: Path) -> list[Run]:
    """The runs of a runs folder as their stamps recorded them (kind, parameters, upstream runs, artefacts), without
    planning: what the book publishes, whatever the config now says."""
    runs = []
    for path in sorted((folder / "stamps").glob("*.json")):
        stamp = read_stamp(path)
        if stamp and isinstance(stamp.get("run_id"), str):
            params = (stamp.get("components") or {}).get("params") or {}
            outputs = [rel for rel in stamp["outputs"] if not rel.endswith(".ipynb")]
            run_id, deps = stamp["run_id"], list(stamp.get("inputs") or {})
            runs.append(Run(run_id, run_id.split("__")[0], params, deps=deps, outputs=outputs, grid=folder.name))
    return runs


def dirty_runs(runs: list[Run], root: Path = ROOT) -> dict[str, list[str]]:
    """The runs whose outputs were computed in a working tree with uncommitted changes, with those commits."""
    found = {run.run_id: [c for c in run_commits(run, root) if c.endswith("-dirty")] for run in runs}
    return {run_id: commits for run_id, commits in found.items() if commits}


# -- which runs -----------------------------------------------------------------------------------------------------
def select_runs(
    runs: list[Run], stamps: dict[str, dict], pattern: str | None = None, sample: int | None = None, root: Path = ROOT
) -> list[Run]:
    """The runs to verify: verifiable runs with a stamp and an executed notebook; with ``pattern`` those whose id
    matches it (globs, or texts the id contains, separated by commas); with ``sample`` that many, spread over kinds
    and models (each round takes one run of every kind, the model turning), runs of an uncommitted tree first, then
    the cheapest by their recorded seconds. ``sample`` larger than the runs there are takes them all."""
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
    while len(chosen) < min(sample, len(ready)):
        for index, kind in enumerate(VERIFIABLE):
            group = groups[(kind, models[(round_ + index) % len(models)])] if models else []
            if group and len(chosen) < sample:
                chosen.append(group.pop(0))
        if round_ >= len(models) and not any(groups.values()):
            break
        round_ += 1
    return chosen


#: Differences up to this size, with nbval passing, are what other vector kernels give (measured: 2e-7 to 6e-7).
KERNEL_ROUNDING = 1e-5
#: The environment that makes torch (ATen), MKL and oneDNN use one instruction set's kernels, by ``--kernels`` name.
KERNEL_ENV = {
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
}


# -- one run ----------------------------------------------------------------------------------------------------------
def _prepare(run: Run, stamp: dict, by_id: dict[str, Run], scratch: Path, device: str | None, root: Path) -> Path:
    """The committed notebook in ``scratch``, parameterised as the stamp recorded (``device`` replacing the run's),
    with the committed outputs of its upstream runs at their paths; returns the notebook's path there."""
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


def _nbval(notebook: Path, scratch: Path, kernels: str | None = None) -> tuple[bool, list[str], str]:
    """Run ``pytest --nbval-lax`` on ``notebook`` in ``scratch``: (passed, the failed cells with nbval's reason, the
    tail of pytest's output). The kernel imports this papa and reads the data this process would, with
    :data:`KERNEL_ENV`'s ``kernels`` (None: the CPU's own)."""
    env = dict(os.environ, PAPA_CACHE_DIR=str(scratch / "cache"), **KERNEL_ENV.get(kernels or "", {}))
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
                text = problem.text or problem.get("message") or ""
                lines = [line.strip() for line in text.splitlines() if line.strip()]
                reason = next((line for line in lines if line.startswith("Cell ")), lines[0] if lines else "failed")
                detail = " ".join(lines[lines.index("Traceback:") + 1 :])[:300] if "Traceback:" in lines else ""
                failed.append(f"{case.get('name')}: {reason.split(': ', 1)[-1]}" + (f" ({detail})" if detail else ""))
    tail = (done.stdout + done.stderr)[-2000:]
    if done.returncode != 0 and not failed:
        failed.append(f"pytest exited with status {done.returncode}")
    return done.returncode == 0, failed, tail


def _changed_since(run: Run, stamp: dict, root: Path) -> list[str]:
    """What changed since the run executed that could change its outputs: the papa code its committed notebook
    executes and the library versions (its parameters and upstream outputs are the recorded ones)."""
    import nbformat

    old = stamp.get("components") or {}
    if not old:
        return []
    old = {"params": old.get("params"), "notebook": old.get("notebook")} | {
        part: old.get(part) or {} for part in ("deps", "papa", "environment")
    }
    nb = nbformat.read(root / run_notebook_path(run), as_version=4)
    now = dict(old, papa=papa_modules(notebook_code_tree(nb)), environment=environment())
    if key_of(now) == key_of(old):
        return []
    return [reason for reason in what_changed(old, now) if reason != "key changed"]


def _edited(run: Run, stamp: dict, root: Path) -> list[str]:
    """Committed outputs that are not what the run wrote (their sha256 is not the stamp's)."""
    written = stamp["outputs"]
    return [rel for rel in run.outputs if (root / rel).is_file() and written.get(rel) != sha256_file(root / rel)]


def _machine(kernels: str | None = None) -> str:
    """The CPU model (``/proc/cpuinfo`` on Linux, else the architecture), its core count and the vector kernels
    torch picks on it (``AVX2``, ``AVX512``): two CPUs of one model name with other kernels sum in another order,
    so their float tensors differ at rounding (``AMD EPYC, 2 cores, AVX512``)."""
    import torch

    model = platform.machine()
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
        model = names[0] if names else model
    except OSError:
        pass
    picked = f"{kernels.upper()} (forced)" if kernels else torch.backends.cpu.get_cpu_capability()
    return f"{model}, {os.cpu_count()} cores, {picked}"


def verify_run(
    run: Run,
    stamp: dict,
    by_id: dict[str, Run],
    device: str | None = None,
    tolerance: float = 0.0,
    root: Path = ROOT,
    kernels: str | None = None,
) -> dict:
    """Re-execute ``run`` in a scratch folder (with ``kernels``: :data:`KERNEL_ENV`) and compare (the module
    docstring); returns its verification record."""
    import nbformat

    from papa.core.models import pick_device
    from papa.core.provenance import device_description, git_commit, package_versions
    from papa.core.version import __version__

    started = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="papa-verify-"))
    try:
        notebook = _prepare(run, stamp, by_id, scratch, device, root)
        cells = [c for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code"]
        checked = sum(CHECK_TAG in c.get("metadata", {}).get("tags", []) for c in cells)
        passed, failed_cells, tail = _nbval(notebook, scratch, kernels)
        differences: list[tuple[str, Difference]] = []
        largest = 0.0
        for rel in run.outputs:
            found, size = diff_files(root / rel, scratch / rel, tolerance)
            differences += [(Path(rel).name, d) for d in found]
            largest = max(largest, size)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    matched = not differences and (passed or tolerance > 0)
    edited, changed = _edited(run, stamp, root), _changed_since(run, stamp, root)
    causes = [f"committed output edited after the run: {rel}" for rel in edited]
    causes += [f"since the run: {reason}" for reason in changed]
    several = len(run.outputs) > 1
    nbval = {"passed": passed, "checked_cells": checked, "failed_cells": failed_cells, "tail": "" if passed else tail}
    return {
        "run_id": run.run_id,
        "kind": run.kind,
        "key": stamp["key"],
        "verified_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": _machine(kernels),
        "device": device_description(pick_device(device or run.params.get("device"))),
        "python": platform.python_version(),
        "packages": package_versions(),
        "papa": {"version": __version__, "commit": git_commit(PACKAGE.parent)},
        "run_commits": run_commits(run, root),
        "tolerance": tolerance,
        "matched": matched,
        "largest_difference": largest,
        "differences": [dict(d.as_record(), file=name) if several else d.as_record() for name, d in differences[:50]],
        "fields": [f"{name}: {d.field}" if several else d.field for name, d in differences],
        "nbval": nbval,
        "causes": causes if not matched else [],
        "seconds": round(time.perf_counter() - started, 1),
    }


def differences_text(record: dict) -> str:
    """A failed record in words: the fields that differed (with both values and |Δ|) and nbval's failed cells, the
    first five of each."""
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
def _up_to_date(config: dict, committed: list[Run], why: str, out) -> list[Run]:
    """The committed runs that are up to date with their key (a stale run would re-execute changed code, so its
    outputs say nothing about reproducing the committed ones); prints how many, after ``why``."""
    from papa.pipeline.runner import grid_status

    status = grid_status(config)
    fresh = [r for r in committed if r.run_id not in status.reasons]
    print(f"{why}: {len(fresh)} of its {len(committed)} committed runs are up to date", file=out, flush=True)
    return fresh


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
    """Verify the chosen committed runs of a grid (:func:`select_runs`; a ``sample``, or any choice while a runner holds
    the grid, only among the runs up to date with their key), print one line per run and write each record into
    ``records`` (default: the runs folder's ``verified/``); ``kernels``: re-execute with :data:`KERNEL_ENV`'s kernels;
    returns 0 when every run matched, else 1."""
    out = out or sys.stdout
    if kernels is not None and kernels not in KERNEL_ENV:
        raise PapaError(f"Unknown kernels {kernels!r}", f"Use one of {', '.join(KERNEL_ENV)}, or leave --kernels out.")
    if tolerance < 0:
        hint = "Pass an absolute tolerance such as 1e-5 (0: the values must be equal)."
        raise PapaError(f"--tolerance must be 0 or more, got {tolerance}", hint)
    config = load_config(config_path)
    folder = root / "book" / "runs" / config["name"]
    if not folder.is_dir():
        problem = f"Grid {config['name']!r} has no runs folder (book/runs/{config['name']})"
        raise PapaError(problem, f"Run it first: papa grid run {config_path}.")
    lock = GridLock(folder)
    try:
        lock.__enter__()
    except PapaError:  # a runner works on the grid: verify only the runs it will not rewrite
        lock = None
    try:
        committed = stamped_runs(folder)
        by_id = {r.run_id: r for r in committed}
        stamps = {r.run_id: read_stamp(stamp_path(folder, r.run_id)) for r in committed}
        if lock is None:  # a runner re-executes the stale runs alone, so the up-to-date ones stay as committed
            candidates = _up_to_date(config, committed, f"a runner is working on grid {config['name']}", out)
        elif sample is not None:  # a sample reproduces the book as it stands: never a run waiting to re-execute
            candidates = _up_to_date(config, committed, f"grid {config['name']} samples its up-to-date runs", out)
        else:
            candidates = committed
        chosen = select_runs(candidates, stamps, pattern, sample, root)
        if not chosen:
            what = f" matching {pattern!r}" if pattern else ""
            hint = "Run the grid first (papa grid run CONFIG), or choose other runs with --runs."
            problem = f"Grid {config['name']!r} has no committed estimate, rank, select_lr or probe run{what} to verify"
            raise PapaError(problem, hint)
        across = f", numbers within {tolerance:g}" if tolerance else ", exactly"
        print(f"grid {config['name']}: verifying {len(chosen)} committed runs{across}", file=out, flush=True)
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
    finally:
        if lock is not None:
            lock.__exit__()
    print(f"verified {len(chosen)} runs: {len(chosen) - len(failed)} matched, {len(failed)} differed", file=out)
    for run_id, words in failed:
        print(f"  FAILED {run_id}: {words}", file=out)
    if rounding and kernels is None:
        why = f"{rounding} of them differ only at float rounding (at most {KERNEL_ROUNDING:g}), as runs made on a CPU"
        print(f"  {why} with other vector kernels do: try --kernels avx2 (runs made without AVX-512)", file=out)
    return 1 if failed else 0
