"""Outputs bound to the key that produced them, and the manifest as a cache of that binding.

:func:`seal` writes a finished run's key into its executed notebook's metadata, then its stamp
``book/runs/<grid>/stamps/<run_id>.json`` (atomic, checksummed: run_id, key, components, display, data, seconds,
``outputs`` {path: sha256} and ``inputs`` {dep: digest of what it read}). :func:`verify` trusts outputs only when
the stamp's checksum, the key and every output's sha256 hold. The manifest caches the stamps and records failures;
missing or corrupt, it is rebuilt from them (:class:`Manifest`). The runs folder serves one config
(:func:`check_owner`), :class:`GridLock` keeps a second runner off it, :func:`clean_leftovers` removes what a killed
runner left, and :func:`outside_plan` / :func:`prune_outside_plan` find and remove what no planned run wrote.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import shutil
from pathlib import Path

from papa.core.errors import PapaError
from papa.core.io import atomic_write_json, atomic_write_text, canonical_json, read_json_verified, sha256_file
from papa.pipeline.keys import what_changed
from papa.pipeline.plan import ROOT, Run, run_notebook_path


def _sha(obj) -> str:
    """sha256 of ``obj`` as canonical JSON."""
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()


def stamp_path(folder: Path, run_id: str) -> Path:
    return folder / "stamps" / f"{run_id}.json"


def verification_path(folder: Path, run_id: str) -> Path:
    """A run's verification record (``papa grid verify``, :mod:`papa.pipeline.verify`)."""
    return folder / "verified" / f"{run_id}.json"


def run_files(run: Run) -> list[str]:
    """Every file a run must leave behind: its artefacts and its executed notebook (repo-relative)."""
    return [*run.outputs, run_notebook_path(run)]


def _verified(path: Path) -> dict | None:
    """The JSON object at ``path`` if its ``sha256`` holds, else None (missing, unreadable, edited or without one)."""
    try:
        return read_json_verified(path, require_checksum=True)
    except PapaError:
        return None


def read_stamp(path: Path) -> dict | None:
    """A stamp whose checksum holds, else None (missing, unreadable, edited or without ``sha256``)."""
    stamp = _verified(path)
    return stamp if stamp is not None and isinstance(stamp.get("outputs"), dict) else None


def digest(stamp: dict) -> str:
    """16 hex digits over a run's key and artefact checksums (its executed notebook left out)."""
    artefacts = {path: sha for path, sha in stamp["outputs"].items() if not path.endswith(".ipynb")}
    return _sha({"key": stamp["key"], "outputs": artefacts})[:16]


def seal(
    run: Run, key: str, components: dict, display: str, data: str | None, seconds: float, folder: Path, root=ROOT
) -> dict:
    """Bind a finished run's outputs to ``key``: key into the notebook's metadata, then the stamp."""
    import nbformat

    notebook = root / run_notebook_path(run)
    try:
        nb = nbformat.read(notebook, as_version=4)
    except (OSError, ValueError) as err:  # nbformat's NotJSONError is a ValueError
        problem = f"Run {run.run_id} left no readable notebook ({type(err).__name__})"
        raise PapaError(problem, "Run the grid again; the run is re-executed.") from None
    nb.metadata["papa"] = {"run_id": run.run_id, "key": key}
    atomic_write_text(notebook, nbformat.writes(nb))
    outputs = {}
    for rel in run_files(run):
        if not (root / rel).is_file():
            hint = f"Read {run_notebook_path(run)}: the notebook must write every output the plan names."
            raise PapaError(f"Run {run.run_id} finished without writing {rel}", hint)
        outputs[rel] = sha256_file(root / rel)
    upstream = {dep: read_stamp(stamp_path(folder, dep)) for dep in run.deps}
    inputs = {dep: digest(stamp) if stamp else None for dep, stamp in upstream.items()}
    stamp = {"run_id": run.run_id, "key": key, "components": components, "display": display, "data": data}
    # when it was sealed, to the second: with ``seconds``, when it ran (runs made side by side are counted once)
    finished = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    stamp |= {"seconds": round(seconds, 1), "finished": finished, "outputs": outputs, "inputs": inputs}
    atomic_write_json(stamp_path(folder, run.run_id), stamp)
    return stamp


def verify(run: Run, key: str, components: dict, data: str | None, stamp: dict | None, root: Path = ROOT) -> list[str]:
    """Why ``run``'s outputs cannot be trusted for ``key`` (empty: proven). ``data`` None: unchecked."""
    if stamp is None:
        return ["no record"]
    if stamp.get("key") != key:
        return what_changed(stamp.get("components"), components)
    if data is not None and stamp.get("data") not in (None, data):
        return ["data changed"]
    reasons = []
    for rel in run_files(run):
        path = root / rel
        if not path.is_file():
            reasons.append(f"output missing ({rel})")
        elif rel == run_notebook_path(run) and notebook_edited(run, stamp, root):
            reasons.append(f"its executed notebook was edited after it ran ({rel} differs from what the run wrote)")
        elif rel not in stamp["outputs"] or sha256_file(path) != stamp["outputs"][rel]:
            reasons.append(f"output not proven ({rel} differs from what the run wrote)")
    return reasons


def notebook_edited(run: Run, stamp: dict | None, root: Path = ROOT) -> bool:
    """Whether ``run``'s executed notebook is there but is not the one its stamp sealed (whatever the key)."""
    rel = run_notebook_path(run)
    sealed = (stamp or {}).get("outputs", {}).get(rel)
    return sealed is not None and (root / rel).is_file() and sha256_file(root / rel) != sealed


class Manifest:
    """``{run_id: {"key", "data", "status", "seconds", "finished", "components", "error"}}``, stored atomically with a
    checksum: a cache of the stamps. Missing or corrupt, it is rebuilt from the stamps (``rebuilt``)."""

    def __init__(self, path: Path):
        self.path = path
        self.rebuilt = False
        runs = (_verified(path) or {}).get("runs")
        if isinstance(runs, dict) and all(isinstance(e, dict) for e in runs.values()):
            self.entries: dict[str, dict] = runs
            return
        self.entries = {stamp["run_id"]: entry_of(stamp) for stamp in read_stamps(path.parent)}
        self.rebuilt = bool(self.entries) or path.is_file()

    def save(self) -> None:
        atomic_write_json(self.path, {"runs": self.entries})


def entry_of(stamp: dict) -> dict:
    entry = {"key": stamp["key"], "data": stamp.get("data"), "status": "ok", "seconds": stamp.get("seconds")}
    if stamp.get("finished"):
        entry["finished"] = stamp["finished"]
    return entry | {"components": stamp.get("components")}


def _by_run(folder: Path) -> dict[str, dict]:
    """The JSON objects of ``folder`` whose checksum holds and that name their run, by run id (file name order)."""
    found = (_verified(path) for path in sorted(folder.glob("*.json")))
    return {obj["run_id"]: obj for obj in found if obj is not None and isinstance(obj.get("run_id"), str)}


def read_stamps(folder: Path) -> list[dict]:
    """Every stamp of a runs folder whose checksum holds and that names its run, sorted by file name."""
    return [stamp for stamp in _by_run(folder / "stamps").values() if isinstance(stamp.get("outputs"), dict)]


def read_records(folder: Path) -> dict[str, dict]:
    """Every verification record of a runs folder (:func:`verification_path`) whose checksum holds, by run id."""
    return _by_run(folder / "verified")


# -- one runs folder, one config -----------------------------------------------------------------
OWNER_FILE = "grid.json"


def config_fingerprint(config: dict) -> str:
    """sha256 of a loaded config's normalised content (its path left out)."""
    return _sha({k: v for k, v in config.items() if not k.startswith("_")})


def check_owner(config: dict, folder: Path, replace: bool = False) -> bool:
    """Refuse a config that is not the one the runs folder serves; returns whether to (re)write the record."""
    path = folder / OWNER_FILE
    if not path.is_file():
        return True
    try:
        owner = read_json_verified(path, "grid record")
    except PapaError:
        owner = {}
    same_file = owner.get("config") == config["_path"]
    same_content = owner.get("content_sha256") == config_fingerprint(config)
    if same_file and same_content:
        return False
    if same_file or same_content or replace or not owner:
        return True
    name = config["name"]
    problem = f"The runs folder book/runs/{name} serves the config {owner.get('config')}, not {config['_path']}"
    hint = f"Give this config its own name: rename it (name: {name}-2) or pass --replace to let it take over"
    raise PapaError(f"{problem} (both are named {name!r})", f"{hint} book/runs/{name}.")


def check_no_links(runs: list[Run], folder: Path) -> None:
    """Refuse a runs folder in which a path the plan writes resolves outside it, through a link."""
    base = folder.resolve()
    own = [folder / name for name in (*RUNNER_FILES, "stamps", ".executing")]
    paths = own + list(planned_files(runs, folder))
    for path in sorted({p.absolute() for p in paths}):
        if not path.is_relative_to(folder.absolute()) or path.resolve().is_relative_to(base):
            continue
        rel = path.relative_to(folder.absolute())
        link = next((p for p in (path, *path.parents) if p.is_symlink()), path)
        where = f"{link.relative_to(folder.absolute())} leads outside it (to {link.resolve()})"
        problem = f"The runs folder book/runs/{folder.name} holds a link: {where}, and {rel} would be written there"
        raise PapaError(problem, "Replace the link by a real folder or file: papa writes only inside the runs folder.")


def remove_if_unused(folder: Path) -> bool:
    """Remove ``folder`` when it holds nothing but the runner's own files; returns whether it did."""
    entries = list(folder.iterdir()) if folder.is_dir() and not folder.is_symlink() else None
    if entries is None or any(p.name not in RUNNER_FILES | {".executing"} for p in entries):
        return False
    if any(p.is_file() or p.is_symlink() for p in (folder / ".executing").rglob("*")):
        return False
    shutil.rmtree(folder, ignore_errors=True)
    return True


def record_owner(config: dict, folder: Path) -> None:
    atomic_write_json(folder / OWNER_FILE, {"config": config["_path"], "content_sha256": config_fingerprint(config)})


class GridLock:
    """An exclusive lock on a grid's folder; a second runner's error names the holder (``.lock.owner``)."""

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
            hint = "Wait for it to finish (or stop it), then run again."
            raise PapaError(f"Another papa runner ({holder}) is working on {self.path.parent}", hint) from None
        atomic_write_text(self.owner, f"host {socket.gethostname()}, pid {os.getpid()}\n")
        return self

    def __exit__(self, *exc):
        self.owner.unlink(missing_ok=True)
        self.lock.release()


#: Cached features older than this, left half-written by a killed writer, are removed at a runner's start
#: (another process may be streaming into the shared cache right now: newer ones are spared).
CACHE_TEMP_AGE_S = 3600


#: The prefix of ``papa grid verify``'s scratch folders in the system temp folder: ``papa-verify-<pid>-<random>``.
SCRATCH_PREFIX = "papa-verify-"
#: A scratch folder whose name carries no process id (an older papa's) is removed once this old.
SCRATCH_AGE_S = 3600.0


def scratch_folder() -> Path:
    """A new scratch folder for one re-execution, named after this process (see :func:`remove_dead_scratch`)."""
    import tempfile

    return Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # PermissionError: another user's live process
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def remove_dead_scratch(parent: Path | None = None) -> list[Path]:
    """Remove the scratch folders of verifications whose process is gone (a killed ``papa grid verify``), and those of
    an older papa (no process id in the name) over an hour old; called by every verify and every grid run."""
    import tempfile
    import time

    removed: list[Path] = []
    for path in Path(parent or tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*"):
        pid = path.name[len(SCRATCH_PREFIX) :].split("-", 1)[0]
        try:
            dead = not _alive(int(pid)) if pid.isdigit() else time.time() - path.stat().st_mtime > SCRATCH_AGE_S
        except OSError:
            continue
        if dead and path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def clean_leftovers(folder: Path) -> list[Path]:
    """Remove what a killed runner left (temporary files, ``.executing/``, ``*.source.ipynb``) under the lock, and a
    killed verification's scratch folders (:func:`remove_dead_scratch`)."""
    from papa.core.io import remove_stale_temp_files
    from papa.probing.features import cache_root

    removed = remove_stale_temp_files(folder) + remove_stale_temp_files(cache_root(), min_age_s=CACHE_TEMP_AGE_S)
    removed += remove_dead_scratch()
    sources = [p for p in folder.glob("*.source.ipynb") if p.is_file()]
    for path in sources:
        path.unlink(missing_ok=True)
    removed += sources
    if (folder / ".executing").exists():
        removed.append(folder / ".executing")
        shutil.rmtree(folder / ".executing", ignore_errors=True)
    return removed


# -- files of the runs folder that no run of the plan wrote ---------------------------------------
#: The runner's own files at the top of a runs folder (not any run's): kept by :func:`outside_plan`.
RUNNER_FILES = frozenset({"manifest.json", OWNER_FILE, ".lock", ".lock.owner"})


def planned_files(runs: list[Run], folder: Path) -> set[Path]:
    """Every file a plan's runs may leave: artefacts, notebooks (failed ones too), stamps, verification records."""
    files = {stamp_path(folder, run.run_id) for run in runs} | {verification_path(folder, run.run_id) for run in runs}
    for run in runs:
        files |= {ROOT / rel for rel in run_files(run)}
        files.add((ROOT / run_notebook_path(run)).with_suffix(".failed.ipynb"))
    return {path.absolute() for path in files}


def outside_plan(runs: list[Run], folder: Path) -> list[Path]:
    """The files of ``folder`` that no run of a whole plan wrote, sorted (links listed, never followed)."""
    from papa.core.io import TEMP_NAME

    folder = folder.absolute()
    if not folder.is_dir():
        return []
    keep = planned_files(runs, folder)
    found = []
    for here, dirs, names in os.walk(folder):
        base = Path(here)
        if base == folder:
            dirs[:] = [d for d in dirs if d != ".executing"]
            names = [n for n in names if n not in RUNNER_FILES]
        linked = [d for d in dirs if (base / d).is_symlink()]
        dirs[:] = [d for d in dirs if d not in linked]
        for name in [*names, *linked]:
            path = (base / name).absolute()
            if path not in keep and not TEMP_NAME.fullmatch(name):
                found.append(path)
    return sorted(found)


def manifest_outside_plan(runs: list[Run], manifest: Manifest) -> list[str]:
    """Run ids the manifest records that the plan no longer has (the reproducibility page lists the manifest)."""
    planned = {run.run_id for run in runs}
    return sorted(run_id for run_id in manifest.entries if run_id not in planned)


def prune_outside_plan(runs: list[Run], folder: Path, manifest: Manifest) -> list[Path]:
    """Remove :func:`outside_plan`'s files, manifest entries and emptied folders; returns the files."""
    folder = folder.absolute()
    removed = outside_plan(runs, folder)
    for path in removed:
        path.unlink(missing_ok=True)
    for run_id in manifest_outside_plan(runs, manifest):
        del manifest.entries[run_id]
    for path in sorted({p.parent for p in removed}, key=lambda p: len(p.parts), reverse=True):
        while path != folder and path.is_relative_to(folder) and path.is_dir() and not any(path.iterdir()):
            path.rmdir()
            path = path.parent
    return removed
