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

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

from .errors import PapaError
from .io import atomic_write_json, atomic_write_text, read_json_verified

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = {
    "estimate": "notebooks/01_estimate_constants.ipynb",
    "rank": "notebooks/02_rank_heads.ipynb",
    "probe": "notebooks/03_probe.ipynb",
    "results": "notebooks/04_results.ipynb",
    "controls": "notebooks/05_controls.ipynb",
}
_CORE = ["architectures", "constants", "data", "errors", "io", "layout", "models", "model_packages", "patching"]
#: papa modules whose source each kind of run depends on (the staleness rule).
DEPENDS_ON = {
    "estimate": _CORE + ["experiment"],
    "rank": _CORE + ["experiment", "features", "heads", "metrics", "probe", "ranking"],
    "probe": _CORE + ["experiment", "features", "heads", "metrics", "probe"],
    "results": ["book", "results", "figures", "io", "heads"],
    "controls": ["book", "results", "figures", "io", "heads"],
}
ENV_PACKAGES = ("torch", "transformers", "datasets", "evaluate")
DEFAULT_SECONDS = {"estimate": 60, "rank": 120, "probe": 60, "results": 40, "controls": 40}

_TOP_KEYS = {"name", "description", "models", "tasks", "max_length", "relayout", "data_seed", "device", "estimate", "rank", "probe", "floors", "studies"}
_SECTION_KEYS = {
    "estimate": {"max_examples", "batch_size"},
    "rank": {"methods", "epochs", "lr", "max_train_examples", "max_eval_examples", "seed"},
    "probe": {"fractions", "seeds", "single_seed_fractions", "modes", "epochs", "lr", "max_train_examples", "max_eval_examples", "methods",
              "selection", "heldout_fraction"},
    "floors": {"attention_free"},
}
_STUDY_KEYS = {"name", "chapter", "tasks", "models", "fractions", "seeds", "single_seed_fractions", "modes", "epochs", "lr", "max_train_examples", "max_eval_examples", "methods", "probe_input",
               "selection", "heldout_fraction"}


@dataclass
class Run:
    """One notebook execution."""

    run_id: str
    kind: str
    params: dict[str, Any]
    deps: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    grid: str = ""

    @property
    def notebook(self) -> str:
        return NOTEBOOKS[self.kind]


def _check_keys(section: dict, allowed: set[str], where: str) -> None:
    if not isinstance(section, dict):
        raise PapaError(f"Config section {where} must be a mapping", "See configs/default.yaml for the layout.")
    unknown = sorted(set(section) - allowed)
    if unknown:
        raise PapaError(f"Unknown config key(s) in {where}: {', '.join(unknown)}", f"Allowed: {', '.join(sorted(allowed))}.")


_LISTS = {"models", "tasks", "methods", "fractions", "seeds", "single_seed_fractions", "modes"}
_INTS = {"max_length", "data_seed", "max_examples", "batch_size", "epochs", "max_train_examples", "max_eval_examples", "seed"}


def _check_types(section: dict, where: str) -> None:
    """Lists must be lists, counts integers, and model/task names strings."""
    for key, value in section.items():
        name = f"{where}.{key}" if where else key
        if key in _LISTS and not isinstance(value, list):
            raise PapaError(f"Config key {name} must be a list, got {value!r}", f"Write it as a list, e.g. {key}: [{value}].")
        if key in _INTS and value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise PapaError(f"Config key {name} must be an integer, got {value!r}", "Write a whole number, e.g. 64.")
        if key in ("models", "tasks", "methods", "modes"):
            for item in value:
                if not isinstance(item, str):
                    label = {"models": "model", "tasks": "task", "methods": "ranking method", "modes": "mode"}[key]
                    hint = "Use minilm-l6, a local folder or a hub id." if key == "models" else "Write names as text."
                    raise PapaError(f"Unknown {label} {item!r} in {name} (not a name)", hint)


def load_config(path: str | Path) -> dict:
    """Read and validate a grid config (see ``configs/default.yaml``)."""
    from .data import TASKS
    from .heads import count_for
    from .models import EMBEDDED_MODELS
    from .probe import SELECTIONS
    from .ranking import METHODS

    path = Path(path)
    if not path.is_file():
        raise PapaError(f"Config {path} does not exist", "Use one of configs/*.yaml.")
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise PapaError(f"Config {path} is not valid YAML ({str(err).splitlines()[0]})", "Fix the YAML syntax.") from None
    _check_keys(config, _TOP_KEYS, path.name)
    if not str(config.get("name", "")).replace("-", "").replace("_", "").isalnum():
        raise PapaError(f"Config {path.name} needs a name of letters, digits, - and _", "Set `name:` (it names book/runs/<name>).")
    try:
        config["_path"] = str(path.resolve().relative_to(ROOT))
    except ValueError:
        config["_path"] = str(path.resolve())
    for key in ("name", "models", "tasks", "probe"):
        if key not in config:
            raise PapaError(f"Config {path.name} lacks the key {key!r}", "See configs/default.yaml.")
    for section, allowed in _SECTION_KEYS.items():
        _check_keys(config.setdefault(section, {}), allowed, f"{path.name}:{section}")
        _check_types(config[section], section)
    _check_types({k: v for k, v in config.items() if k not in _SECTION_KEYS and k != "studies"}, "")
    if not isinstance(config.setdefault("studies", []), list):
        raise PapaError("Config key studies must be a list of studies", "Write each study as a `- name: ...` item.")
    for model in config["models"]:
        if model not in EMBEDDED_MODELS and "/" not in model and not Path(model).is_dir() and not model.replace("-", "").replace("_", "").isalnum():
            raise PapaError(f"Unknown model {model!r} in {path.name}", f"Use {', '.join(EMBEDDED_MODELS)}, a folder or a hub id.")
    studies = config["studies"]
    for study in studies:
        _check_keys(study, _STUDY_KEYS, f"{path.name}:studies")
        _check_types(study, f"studies.{study.get('name', '?')}")
    for where in [config["probe"], config["rank"], *studies]:
        for task in where.get("tasks", config["tasks"]):
            if task not in TASKS:
                raise PapaError(f"Unknown task {task!r} in {path.name}", f"Use one of {', '.join(TASKS)}.")
        for method in where.get("methods", []):
            if method not in METHODS:
                raise PapaError(f"Unknown ranking method {method!r} in {path.name}", f"Use one of {', '.join(METHODS)}.")
        for fraction in where.get("fractions", []):
            count_for(_fraction(fraction), 144)
        for mode in where.get("modes", []):
            if mode not in ("cached", "faithful"):
                raise PapaError(f"Unknown mode {mode!r} in {path.name}", "Use cached or faithful.")
        if where.get("selection", "final") not in SELECTIONS:
            raise PapaError(f"Unknown epoch selection {where['selection']!r} in {path.name}",
                            "Use final (the official runs) or heldout (best epoch on held-out training examples).")
        fraction = where.get("heldout_fraction", 0.1)
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction < 1:
            raise PapaError(f"heldout_fraction must be a number in (0, 1), got {fraction!r} in {path.name}", "Use e.g. 0.1.")
    return config


def _fraction(value) -> Fraction:
    """A config fraction (``0``, ``1/2``, ``0.875``, ``1``) as an exact :class:`Fraction`."""
    try:
        return Fraction(str(value).strip())
    except (ValueError, ZeroDivisionError):
        raise PapaError(f"Head fraction {value!r} is not a number", "Write fractions as 0, 1/2, 7/8, 15/16 or 1.") from None


def _heads_for(model: str) -> int:
    """Total heads of a model (reads its config only)."""
    from transformers import AutoConfig

    from .models import resolve_model_path

    config = AutoConfig.from_pretrained(resolve_model_path(model)[0])
    return config.num_hidden_layers * config.num_attention_heads


def expand(config: dict) -> list[Run]:
    """All runs of a config in dependency order (estimates, rankings, probes, then the chapters)."""
    from .heads import count_for

    name = config["name"]
    art = f"book/runs/{name}/artifacts"
    common = {"max_length": int(config.get("max_length", 64)), "relayout": bool(config.get("relayout", True))}
    data_seed, device = int(config.get("data_seed", 0)), str(config.get("device", "auto"))
    est, rank, probe = config["estimate"], config["rank"], config["probe"]
    runs: dict[str, Run] = {}
    studies = [dict(probe, name="main", chapter="results", tasks=config["tasks"], models=config["models"])]
    if config["floors"].get("attention_free", True):
        studies.append(dict(probe, name="floor", chapter="results", fractions=[0], probe_input="embeddings", tasks=config["tasks"], models=config["models"]))
    studies += [dict(probe, **s) for s in config["studies"]]
    methods_needed = {(m, t, meth) for s in studies for m in s.get("models", config["models"]) for t in s.get("tasks", config["tasks"]) for meth in s.get("methods", rank.get("methods", ["gates"]))}
    for model in config["models"]:
        for task in config["tasks"]:
            rid = f"estimate__{model}__{task}"
            runs[rid] = Run(rid, "estimate", dict(model=model, task=task, max_examples=est.get("max_examples", 2000), **common,
                                                  device=device, out=f"{art}/constants/{model}__{task}.safetensors"),
                            outputs=[f"{art}/constants/{model}__{task}.safetensors"])
    for model, task, method in sorted(methods_needed):
        rid = f"rank__{model}__{task}__{method}"
        runs[rid] = Run(rid, "rank", dict(
            model=model, task=task, method=method, constants=f"{art}/constants/{model}__{task}.safetensors",
            epochs=rank.get("epochs", 15), lr=float(rank.get("lr", 2e-5)), max_train_examples=rank.get("max_train_examples", 1000),
            max_eval_examples=rank.get("max_eval_examples", probe.get("max_eval_examples")) or 1_000_000, seed=rank.get("seed", 42),
            data_seed=data_seed, device=device, out=f"{art}/rankings/{model}__{task}__{method}.json",
        ), deps=[f"estimate__{model}__{task}"], outputs=[f"{art}/rankings/{model}__{task}__{method}.json"])
    totals = {model: _heads_for(model) for model in config["models"]}
    for study in studies:
        for model in study.get("models", config["models"]):
            total = totals[model]
            for task in study.get("tasks", config["tasks"]):
                for fraction in study.get("fractions", probe.get("fractions", [0, 1])):
                    k = count_for(_fraction(fraction), total)
                    methods = ["none"] if k == 0 else ["all"] if k == total else study.get("methods", rank.get("methods", ["gates"]))
                    seeds = study.get("seeds", [42])
                    if _fraction(fraction) in {_fraction(f) for f in study.get("single_seed_fractions", [])}:
                        seeds = seeds[:1]
                    for method in methods:
                        for mode in study.get("modes", ["cached"]):
                            probe_input = study.get("probe_input", "all")
                            suffix = "" if probe_input == "all" else f"__{probe_input}"
                            tag = "" if study["name"] in ("main", "floor") else f"__{study['name']}"
                            rid = f"probe__{model}__{task}__{method}__k{k}__{mode}{suffix}{tag}"
                            if rid in runs:
                                continue
                            deps = [f"estimate__{model}__{task}"] if k else []
                            if method not in ("none", "all"):
                                deps.append(f"rank__{model}__{task}__{method}")
                            out = f"{art}/results/{rid}__s{{seed}}.json"
                            runs[rid] = Run(rid, "probe", dict(
                                model=model, task=task, k=k,
                                constants=f"{art}/constants/{model}__{task}.safetensors" if k else "",
                                ranking=f"{art}/rankings/{model}__{task}__{method}.json" if method not in ("none", "all") else "",
                                mode=mode, seeds=list(seeds), epochs=study.get("epochs", 15), lr=float(study.get("lr", 2e-5)),
                                probe_input=probe_input, selection=study.get("selection", "final"),
                                heldout_fraction=float(study.get("heldout_fraction", 0.1)),
                                max_train_examples=study.get("max_train_examples", 1000),
                                max_eval_examples=study.get("max_eval_examples") or 1_000_000, data_seed=data_seed, device=device,
                                out=out, **common,
                            ), deps=deps, outputs=[out.format(seed=s) for s in seeds])
    upstream = [r.run_id for r in runs.values() if r.kind in ("probe", "rank")]
    for chapter in ("results", "controls"):
        runs[chapter] = Run(chapter, chapter, dict(grid_config=config["_path"]), deps=upstream)
    for run in runs.values():
        run.grid = name
    return list(runs.values())


# -- staleness -----------------------------------------------------------------------------------
def _sha(text: str | bytes) -> str:
    return hashlib.sha256(text if isinstance(text, bytes) else text.encode()).hexdigest()


def _data_fingerprint(task: str | None) -> str:
    if task is None:
        return ""
    from .data import get_task, resolve_data_dir

    root = resolve_data_dir()
    if root is None:
        return "hub"
    folder = get_task(task).local_folder
    sums = root / "SHA256SUMS"
    if sums.is_file():
        lines = [line for line in sums.read_text().splitlines() if f"{folder}/" in line]
        return _sha("\n".join(sorted(lines)))
    files = sorted((root / folder).glob("*"))
    return _sha("\n".join(f"{f.name}:{f.stat().st_size}" for f in files))


def data_fingerprints(runs: list[Run]) -> dict[str, str | None]:
    """Per run, a fingerprint of its task's local data (``SHA256SUMS`` lines), or None when no local
    data folder is set: then the data cannot be checked, and the manifest's record is trusted (so a
    fresh clone renders its committed runs without the data)."""
    from .data import resolve_data_dir

    if resolve_data_dir() is None:
        return {run.run_id: None for run in runs}
    return {run.run_id: _data_fingerprint(run.params.get("task")) for run in runs}


def run_keys(runs: list[Run]) -> dict[str, str]:
    """A key per run over its notebook, parameters, papa sources, environment and upstream keys
    (the task data is checked separately, :func:`data_fingerprints`)."""
    source = {m: _sha((ROOT / "papa" / f"{m}.py").read_bytes() if (ROOT / "papa" / f"{m}.py").is_file() else
                      b"".join(p.read_bytes() for p in sorted((ROOT / "papa" / m).rglob("*.py"))))
              for kind in DEPENDS_ON.values() for m in kind}
    from .provenance import package_versions

    environment = package_versions(ENV_PACKAGES)
    keys: dict[str, str] = {}
    for run in runs:
        parts = {
            "notebook": _sha((ROOT / run.notebook).read_bytes()),
            "params": run.params,
            "papa": {m: source[m] for m in DEPENDS_ON[run.kind]},
            "environment": environment,
            "deps": {d: keys[d] for d in run.deps},
        }
        keys[run.run_id] = _sha(json.dumps(parts, sort_keys=True, default=str))[:24]
    return keys


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
        return entry.get("key") == key and entry.get("status") == "ok" and all((ROOT / o).is_file() for o in run.outputs) \
            and (data is None or entry.get("data") in (None, data)) and (ROOT / run_notebook_path(run)).is_file()


def runs_dir(config: dict) -> Path:
    return ROOT / "book" / "runs" / config["name"]


def run_notebook_path(run: Run) -> str:
    return f"book/runs/{run.grid}/{run.run_id}.ipynb"


def stale_runs(config: dict) -> tuple[list[Run], list[Run], dict[str, str], Manifest]:
    """``(all runs, stale runs, keys, manifest)``; ``keys[run_id]`` is ``(key, data fingerprint)``."""
    runs = expand(config)
    keys, data = run_keys(runs), data_fingerprints(runs)
    manifest = Manifest(runs_dir(config) / "manifest.json")
    stale = [r for r in runs if not manifest.up_to_date(r, keys[r.run_id], data[r.run_id])]
    return runs, stale, {r: (keys[r], data[r]) for r in keys}, manifest


#: A probe run never timed before is estimated from its size: seconds per training example for the
#: feature extraction (once per run) and per example × epoch × seed for the probe, measured on
#: MiniLM-L6 on two CPU cores (SST-2, 8000 examples: about 95 s of extraction, 90 s per seed), plus
#: a fixed start-up (kernel, model and data loading).
PROBE_SECONDS_PER_EXAMPLE = {"extract": 0.012, "train": 0.00075}
PROBE_STARTUP_SECONDS = 20
#: Training-split sizes on the hub, for a run that asks for the whole split when no local data says
#: how large it is (MNLI: the full 393k-pair split; the local stand-in holds a 9k subset).
HUB_TRAIN_SIZES = {"cola": 8551, "sst2": 67349, "mrpc": 3668, "mnli": 392702, "ner": 14041, "pos": 14041}


def _train_split_size(task: str) -> int:
    """Examples in the task's local ``train.jsonl`` (non-blank lines), else its hub size."""
    from .data import get_task, resolve_data_dir

    root = resolve_data_dir()
    path = root / get_task(task).local_folder / "train.jsonl" if root is not None else None
    if path is None or not path.is_file():
        return HUB_TRAIN_SIZES[get_task(task).name]
    with path.open("rb") as handle:
        return sum(1 for line in handle if line.strip())


def run_seconds_guess(run: Run) -> float:
    """Seconds a run is expected to take when the manifest has no earlier duration for it: a probe
    scales with its training examples, epochs and seeds (a faithful probe pays an encoder pass for
    every example of every epoch); other kinds take :data:`DEFAULT_SECONDS`."""
    if run.kind != "probe":
        return DEFAULT_SECONDS[run.kind]
    p = run.params
    examples = p["max_train_examples"] if p["max_train_examples"] is not None else _train_split_size(p["task"])
    passes = p["epochs"] * len(p["seeds"])
    rate = PROBE_SECONDS_PER_EXAMPLE
    per_example = rate["extract"] * passes if p["mode"] == "faithful" else rate["extract"] + rate["train"] * passes
    return PROBE_STARTUP_SECONDS + examples * per_example


def estimate_seconds(runs: list[Run], manifest: Manifest) -> float:
    """Expected seconds for ``runs``: each run's last recorded duration, else :func:`run_seconds_guess`."""
    seconds = 0.0
    for run in runs:
        previous = manifest.entries.get(run.run_id, {}).get("seconds")
        seconds += previous if previous else run_seconds_guess(run)
    return seconds


def execute(run: Run, root: Path = ROOT) -> float:
    """Execute one run's notebook with papermill (cwd = repo root); returns seconds. Raises on failure."""
    import nbformat
    import papermill

    from .notebook import clean_executed

    target = root / run_notebook_path(run)
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = target.parent / ".executing"
    scratch.mkdir(exist_ok=True)
    temp = scratch / f"{run.run_id}.ipynb"
    started = time.perf_counter()
    try:
        papermill.execute_notebook(
            str(root / run.notebook), str(temp), parameters=run.params, kernel_name="python3", cwd=str(root),
            progress_bar=False, log_output=False, report_mode=False,
        )
    except Exception as err:  # the failed notebook is kept for reading
        if temp.is_file():
            nb = nbformat.from_dict(clean_executed(nbformat.read(temp, as_version=4), root))
            atomic_write_text(target.with_suffix(".failed.ipynb"), nbformat.writes(nb))
            temp.unlink()
        reason = f"{getattr(err, 'ename', type(err).__name__)}: {getattr(err, 'evalue', str(err))}".strip()
        raise PapaError(f"Run {run.run_id} failed ({reason[:300]})",
                        f"Read {target.with_suffix('.failed.ipynb').relative_to(root)}") from None
    nb = nbformat.from_dict(clean_executed(nbformat.read(temp, as_version=4), root))
    atomic_write_text(target, nbformat.writes(nb))
    temp.unlink()
    target.with_suffix(".failed.ipynb").unlink(missing_ok=True)
    return time.perf_counter() - started


class GridLock:
    """An exclusive lock on a grid's folder; a second runner gets a clear error."""

    def __init__(self, folder: Path):
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / ".lock"

    def __enter__(self):
        self.handle = open(self.path, "w")
        try:
            fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.handle.close()
            raise PapaError(f"Another papa runner is working on {self.path.parent}", "Wait for it to finish (or stop it), then run again.") from None
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()


def _format(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


def check_data_available(stale: list[Run]) -> None:
    """Stale runs that read task data need PAPA_DATA_DIR or the hub: say so before anything runs."""
    from .data import resolve_data_dir

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


def run_grid(config_path: str | Path, only: str | None = None, dry_run: bool = False, out=None) -> int:
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
        for number, run in enumerate(stale, 1):
            blocked = [d for d in run.deps if d in failed]
            if blocked:
                failed[run.run_id] = f"not run: depends on failed {blocked[0]}"
                continue
            print(f"[{number}/{len(stale)}] {run.run_id} (elapsed {_format(time.perf_counter() - started)})", file=out, flush=True)
            try:
                seconds = execute(run)
            except PapaError as err:
                failed[run.run_id] = str(err)
                manifest.entries[run.run_id] = {"key": keys[run.run_id][0], "data": keys[run.run_id][1], "status": "failed"}
                manifest.save()
                print(f"  FAILED: {err}", file=out, flush=True)
                continue
            manifest.entries[run.run_id] = {"key": keys[run.run_id][0], "data": keys[run.run_id][1], "status": "ok",
                                            "seconds": round(seconds, 1)}
            manifest.save()
    print(f"done in {_format(time.perf_counter() - started)}: {len(stale) - len(failed)} ok, {len(failed)} failed", file=out)
    for run_id, reason in failed.items():
        print(f"  {run_id}: {reason}", file=out)
    return 1 if failed else 0
