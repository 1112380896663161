"""A grid config (``configs/*.yaml``) → its validated form and the dependency-ordered list of runs.

See :mod:`papa.pipeline.grid` for the whole flow."""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

from papa.core.errors import PapaError

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = {
    "estimate": "notebooks/01_estimate_constants.md",
    "rank": "notebooks/02_rank_heads.md",
    "probe": "notebooks/03_probe.md",
    "results": "notebooks/04_results.md",
    "controls": "notebooks/05_controls.md",
}

_TOP_KEYS = {"name", "description", "models", "tasks", "max_length", "relayout", "data_seed", "device", "estimate", "rank", "probe", "floors", "studies"}
_SECTION_KEYS = {
    "estimate": {"max_examples", "batch_size"},
    "rank": {"methods", "epochs", "lr", "max_train_examples", "max_eval_examples", "seed"},
    "probe": {"fractions", "seeds", "single_seed_fractions", "modes", "epochs", "lr", "max_train_examples", "max_eval_examples", "methods", "selection", "heldout_fraction"},
    "floors": {"attention_free"},
}
_STUDY_KEYS = {
    "name",
    "chapter",
    "tasks",
    "models",
    "fractions",
    "seeds",
    "single_seed_fractions",
    "modes",
    "epochs",
    "lr",
    "max_train_examples",
    "max_eval_examples",
    "methods",
    "probe_input",
    "selection",
    "heldout_fraction",
}


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
    from papa.core.heads import count_for
    from papa.core.models import EMBEDDED_MODELS
    from papa.probing.data import TASKS
    from papa.probing.probe import SELECTIONS
    from papa.probing.ranking import METHODS

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
            raise PapaError(
                f"Unknown epoch selection {where['selection']!r} in {path.name}", "Use final (the official runs) or heldout (best epoch on held-out training examples)."
            )
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

    from papa.core.models import resolve_model_path

    config = AutoConfig.from_pretrained(resolve_model_path(model)[0])
    return config.num_hidden_layers * config.num_attention_heads


def expand(config: dict) -> list[Run]:
    """All runs of a config in dependency order (estimates, rankings, probes, then the chapters)."""
    from papa.core.heads import count_for

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
    methods_needed = {
        (m, t, meth)
        for s in studies
        for m in s.get("models", config["models"])
        for t in s.get("tasks", config["tasks"])
        for meth in s.get("methods", rank.get("methods", ["gates"]))
    }
    for model in config["models"]:
        for task in config["tasks"]:
            rid = f"estimate__{model}__{task}"
            runs[rid] = Run(
                rid,
                "estimate",
                dict(model=model, task=task, max_examples=est.get("max_examples", 2000), **common, device=device, out=f"{art}/constants/{model}__{task}.safetensors"),
                outputs=[f"{art}/constants/{model}__{task}.safetensors"],
            )
    for model, task, method in sorted(methods_needed):
        rid = f"rank__{model}__{task}__{method}"
        runs[rid] = Run(
            rid,
            "rank",
            dict(
                model=model,
                task=task,
                method=method,
                constants=f"{art}/constants/{model}__{task}.safetensors",
                epochs=rank.get("epochs", 15),
                lr=float(rank.get("lr", 2e-5)),
                max_train_examples=rank.get("max_train_examples", 1000),
                max_eval_examples=rank.get("max_eval_examples", probe.get("max_eval_examples")) or 1_000_000,
                seed=rank.get("seed", 42),
                data_seed=data_seed,
                device=device,
                out=f"{art}/rankings/{model}__{task}__{method}.json",
            ),
            deps=[f"estimate__{model}__{task}"],
            outputs=[f"{art}/rankings/{model}__{task}__{method}.json"],
        )
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
                            runs[rid] = Run(
                                rid,
                                "probe",
                                dict(
                                    model=model,
                                    task=task,
                                    k=k,
                                    constants=f"{art}/constants/{model}__{task}.safetensors" if k else "",
                                    ranking=f"{art}/rankings/{model}__{task}__{method}.json" if method not in ("none", "all") else "",
                                    mode=mode,
                                    seeds=list(seeds),
                                    epochs=study.get("epochs", 15),
                                    lr=float(study.get("lr", 2e-5)),
                                    probe_input=probe_input,
                                    selection=study.get("selection", "final"),
                                    heldout_fraction=float(study.get("heldout_fraction", 0.1)),
                                    max_train_examples=study.get("max_train_examples", 1000),
                                    max_eval_examples=study.get("max_eval_examples") or 1_000_000,
                                    data_seed=data_seed,
                                    device=device,
                                    out=out,
                                    **common,
                                ),
                                deps=deps,
                                outputs=[out.format(seed=s) for s in seeds],
                            )
    upstream = [r.run_id for r in runs.values() if r.kind in ("probe", "rank")]
    for chapter in ("results", "controls"):
        runs[chapter] = Run(chapter, chapter, dict(grid_config=config["_path"]), deps=upstream)
    for run in runs.values():
        run.grid = name
    return list(runs.values())


def runs_dir(config: dict) -> Path:
    return ROOT / "book" / "runs" / config["name"]


def run_notebook_path(run: Run) -> str:
    return f"book/runs/{run.grid}/{run.run_id}.ipynb"
