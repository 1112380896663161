"""The config of a *model report* (what ``papa study MODEL`` makes): the book's protocol on one model, as a grid
config sized to a time budget. ("Study" in a grid config means something else: an extra probe sub-grid, the
``studies:`` key; a model report's config has none.)

:func:`check_model` refuses a model papa cannot study before anything is written; :func:`report_config` applies the
book's protocol (:func:`book_protocol`) to one model and its tasks; :func:`fit_budget` makes the cuts of
:func:`cut_steps` until :func:`estimate_report` fits the budget. :mod:`papa.pipeline.report` runs it.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

from papa.core.config_files import read_yaml, validate
from papa.core.errors import PapaError
from papa.core.fields import MAX_NAME_LENGTH, TASKS, parse_fraction
from papa.core.grid_schema import GridConfig
from papa.pipeline.estimate import estimate_seconds, format_duration
from papa.pipeline.plan import ROOT, config_dict, expand, head_count

#: The grid whose protocol a model report copies (the book's).
BOOK_CONFIG = "configs/default.yaml"
#: The keys of the book's config that make its protocol (everything but its models, tasks, studies and names).
PROTOCOL_KEYS = ("max_length", "relayout", "data_seed", "estimate", "rank", "lr_selection", "probe", "floors")
#: A model report's grid is named ``study-<name>`` (after the command that writes it).
PREFIX = "study-"
#: The smallest training draw per seed and dev split the cuts go down to.
MIN_TRAIN_EXAMPLES = 250
DEV_CAPS = (500, 250)


# -- the model -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CheckedModel:
    """A model papa can study: its name as given, where it is, its ``model_type`` and its total heads."""

    name: str
    source: str  # "embedded", "local" or "hub"
    model_type: str
    heads: int


def _config_json(name: str) -> tuple[dict, str]:
    """``(config.json, source)`` of a model, reading no weights (a hub id not cached while offline is refused)."""
    from papa.core.models import _hub_cached_config, check_model_config, check_model_folder, resolve_model_path

    path, source = resolve_model_path(name)
    file = _hub_cached_config(path) if source == "hub" else Path(path) / "config.json"
    if file is None:
        from huggingface_hub import hf_hub_download

        file = Path(hf_hub_download(path, "config.json"))
    hint = "Point MODEL at a folder written by save_pretrained."
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        raise PapaError(f"The config.json of model {name} is not readable JSON", hint) from None
    if not isinstance(config, dict):
        raise PapaError(f"The config.json of model {name} is not a JSON object", hint)
    _refuse_decoder(name, config)
    if source != "hub":
        check_model_folder(path, name)  # custom code, pickled or missing weights
    else:
        check_model_config(config, name)  # custom code (auto_map, an unknown model_type), before anything is written
    return config, source


def _refuse_decoder(name: str, config: dict) -> None:
    """A decoder-only model (GPT-2, Llama, ...) or an encoder set up as a decoder: causal attention."""
    from transformers.models.auto import modeling_auto as auto

    from papa.core.architectures import ADAPTERS, supported_model_types

    model_type = config.get("model_type")
    causal, masked = auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES
    if config.get("is_decoder") is True:
        why = "its config sets is_decoder: true"
    elif model_type not in ADAPTERS and model_type in causal and model_type not in masked:
        why = f"{model_type!r} is a decoder-only architecture"
    else:
        return
    raise PapaError(
        f"Cannot study {name}: {why} (causal attention: each token attends only to the tokens before it), and PAPA's"
        " constant matrices average the attention of a bidirectional encoder",
        f"Study an encoder of a supported architecture ({', '.join(supported_model_types())}).",
    )


def check_model(name: str) -> CheckedModel:
    """The model ``name`` if papa can study it, else one :class:`PapaError` saying why (reads JSON, file names,
    safetensors headers and the tokenizer; no weights)."""
    from papa.core.architectures import ADAPTERS, supported_model_types
    from papa.core.model_folders import check_model_fits
    from papa.core.models import resolve_model_path

    config, source = _config_json(name)
    model_type = config.get("model_type")
    if model_type not in ADAPTERS:
        problem = f"Cannot study {name}: papa has no adapter for its architecture {model_type!r}"
        hint = f"Study a model of a supported architecture ({', '.join(supported_model_types())}), or add a row to"
        raise PapaError(f"{problem}, so it cannot make its heads constant", f"{hint} papa.core.architectures.ADAPTERS.")
    if source != "hub":  # tokenizer, size and tensors against the config (headers only, the model on meta)
        check_model_fits(resolve_model_path(name)[0], name)
    heads, why = head_count(name)
    if heads is None:
        hint = "Use a folder whose config.json has num_hidden_layers and num_attention_heads."
        raise PapaError(f"Cannot study {name}: cannot count its heads ({why})", hint)
    return CheckedModel(name, source, model_type, heads)


def default_name(model: str) -> str:
    """A model report's name from its model: ``minilm-l6``, a folder's last part, a hub id's name (lower case, safe)."""
    base = Path(model.rstrip("/")).name if Path(model).expanduser().is_dir() else model.rsplit("/", 1)[-1]
    name = re.sub(r"_+", "_", re.sub(r"[^a-z0-9_-]+", "-", base.lower())).strip("-_") or "model"
    return name[: MAX_NAME_LENGTH - len(PREFIX)].rstrip("-_")


# -- the config ----------------------------------------------------------------------------------------
def book_protocol(book_config: str | Path = BOOK_CONFIG) -> dict[str, Any]:
    """The protocol keys (:data:`PROTOCOL_KEYS`) of the book's config, as written there (validated first)."""
    path = Path(book_config) if Path(book_config).is_absolute() else ROOT / book_config
    data = read_yaml(path)
    validate(GridConfig, data, f"Config {path.name}")
    protocol = {key: copy.deepcopy(data[key]) for key in PROTOCOL_KEYS if key in data}
    protocol.get("probe", {}).pop("per_model", None)  # the book's per-model settings belong to its models
    return protocol


def report_config(model: str, tasks: list[str], name: str, protocol: dict[str, Any], device: str = "auto") -> dict:
    """The grid config of a model report (validated): ``study-<name>``, one model, ``tasks``, the protocol, no
    studies (sub-grids)."""
    folder = Path(model).expanduser()
    config = {
        "name": PREFIX + name,
        "description": f"papa study of {model}: the book's protocol on {', '.join(tasks)}",
        "models": [str(folder.resolve()) if folder.is_dir() else model],
        "tasks": list(tasks),
        **copy.deepcopy(protocol),
        "device": device,
        "studies": [],
    }
    evaluation = config.get("probe", {}).get("max_eval_examples")
    if isinstance(evaluation, dict):  # only the report's tasks' dev sizes (a task not listed: its whole split)
        kept = {task: size for task, size in evaluation.items() if task in tasks}
        config["probe"]["max_eval_examples"] = kept or None
    validate(GridConfig, config, f"Model report {name}")
    return config


def estimate_report(config: dict[str, Any]) -> float:
    """Seconds the whole model report takes from scratch on 2 CPU cores (as ``papa grid run --dry-run`` estimates)."""
    grid = validate(GridConfig, config, f"Model report {config['name']}")
    plan = expand(config_dict(grid), path=f"configs/{config['name']}.yaml")
    if plan.unsized:
        model, why = next(iter(plan.unsized.items()))
        hint = "Use a local model folder, or download the model once with the hub reachable."
        raise PapaError(f"Cannot size the model report of {model}: {why}", hint)
    return estimate_seconds(list(plan), None)  # nothing recorded yet


# -- the flags: tasks and budget ----------------------------------------------------------------------
def parse_tasks(text: str | None) -> list[str]:
    """``sst2,mrpc`` → the tasks, in the given order (None or empty: all six); an unknown or repeated task is
    refused."""
    if not text or not text.strip():
        return list(TASKS)
    tasks = [t.strip().lower() for t in text.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        fix = f"Use a comma list of {', '.join(TASKS)} (e.g. --tasks sst2,mrpc)."
        raise PapaError(f"--tasks: unknown task(s) {', '.join(unknown)}", fix)
    if len(set(tasks)) != len(tasks):
        raise PapaError(f"--tasks lists a task twice ({text})", "List each task once.")
    return tasks


def parse_budget(text: str) -> float:
    """``30m``, ``2h``, ``1h30m``, ``90s`` → seconds; anything else is one :class:`PapaError`."""
    match = re.fullmatch(r"\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s)?\s*", text.lower())
    if not text.strip() or not match or not any(match.groups()):
        raise PapaError(f"--budget {text!r} is not a duration", "Write it as 90s, 15m, 2h or 1h30m.")
    hours, minutes, seconds = (float(g or 0) for g in match.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if total <= 0:
        raise PapaError(f"--budget {text!r} is no time at all", "Give a positive duration such as 15m.")
    return total


@dataclass(frozen=True)
class Cut:
    """One step of shrinking a model report: what it cuts, in words, and the config it leaves (every cut before
    included)."""

    what: str
    config: dict


_SIZE_WORDS = {"pool_examples": "training pool", "max_train_examples": "training draw per seed"}
_SIZE_WORDS["heldout_examples"] = "held-out draw per seed"


def _dev_size(config: dict, task: str) -> int | None:
    evaluation = config["probe"].get("max_eval_examples")
    return evaluation.get(task) if isinstance(evaluation, dict) else evaluation


def cut_steps(config: dict) -> list[Cut]:
    """The cuts in order, each on top of the ones before: the training draw halved down to
    :data:`MIN_TRAIN_EXAMPLES`, the dev split capped (:data:`DEV_CAPS`), the middle head fractions dropped (largest
    first), then fewer seeds down to one. k = 0, all heads, the lr selection, the floor and the epoch cap stay."""
    steps: list[Cut] = []
    last = lambda: steps[-1].config if steps else config

    def cut(what: str, **probe) -> None:  # the last config with these probe settings
        after = copy.deepcopy(last())
        after["probe"] |= probe
        steps.append(Cut(what, after))

    train = config["probe"].get("max_train_examples")
    while train and round(train / 2) >= MIN_TRAIN_EXAMPLES:
        sizes = {key: last()["probe"][key] for key in _SIZE_WORDS if last()["probe"].get(key)}
        halved = {key: max(1, round(size / 2)) for key, size in sizes.items()}
        cut(", ".join(f"{_SIZE_WORDS[key]} {sizes[key]:,} → {halved[key]:,}" for key in sizes), **halved)
        train = round(train / 2)
    largest = max((_dev_size(config, task) or 10**9 for task in config["tasks"]), default=10**9)
    for cap in (c for c in DEV_CAPS if c < largest):
        capped = {task: min(cap, _dev_size(last(), task) or cap) for task in config["tasks"]}
        evaluation = cap if set(capped.values()) == {cap} else capped
        cut(f"dev split capped at {cap:,} examples per task", max_eval_examples=evaluation)
    middle = [f for f in config["probe"]["fractions"] if 0 < parse_fraction(f) < 1]
    for f in sorted(middle, key=parse_fraction, reverse=True):
        kept = [x for x in last()["probe"]["fractions"] if parse_fraction(x) != parse_fraction(f)]
        cut(f"head fraction {Fraction(parse_fraction(f))} dropped", fractions=kept)
    seeds = config["probe"].get("seeds", [42])
    for n in range(len(seeds) - 1, 0, -1):
        cut(f"probe seeds {n + 1} → {n} ({', '.join(map(str, seeds[:n]))})", seeds=seeds[:n])
    return steps


@dataclass
class Fitted:
    """A model report's config that fits its budget: the cuts it took and its estimate in seconds."""

    config: dict
    cuts: list[str]
    seconds: float


def fit_budget(config: dict, budget: float | None, estimate: Callable[[dict], float] = estimate_report) -> Fitted:
    """``config`` with the first cuts that bring ``estimate`` within ``budget`` seconds, else a PapaError."""
    seconds = estimate(config)
    if budget is None or seconds <= budget:
        return Fitted(config, [], seconds)
    cuts: list[str] = []
    for step in cut_steps(config):
        cuts.append(step.what)
        seconds = estimate(step.config)
        if seconds <= budget:
            return Fitted(step.config, cuts, seconds)
    listed = "; ".join(cuts) if cuts else "nothing is left to cut"
    least = f"{format_duration(seconds)} (--budget {-(-int(seconds) // 60)}m)"
    raise PapaError(
        f"A budget of {format_duration(budget)} is too small for this model report: even one seed at k = 0 and all"
        f" heads takes about {format_duration(seconds)} by the estimate, after every cut ({listed})",
        f"Give a budget of at least {least}, or study fewer tasks (--tasks).",
    )


def config_text(fitted: Fitted, budget: float | None, book_config: str = BOOK_CONFIG) -> str:
    """The YAML a model report writes: a header (protocol, budget, cuts, estimate), then the config."""
    budget_words = format_duration(budget) if budget else "none (the protocol at full size)"
    lines = [
        "# yaml-language-server: $schema=grid.schema.json",
        f"# Written by `papa study`: the book's protocol ({book_config}) on one model.",
        f"# Budget: {budget_words}; estimate {format_duration(fitted.seconds)} on 2 CPU cores.",
    ]
    cuts = [f"# Cut to fit the budget: {cut}" for cut in fitted.cuts]
    lines += cuts or ["# Nothing cut: the book's protocol at full size."]
    dumped = yaml.safe_dump(fitted.config, sort_keys=False, allow_unicode=True, width=120, default_flow_style=None)
    return "\n".join(lines) + "\n" + dumped


def config_path(name: str) -> Path:
    """Where a model report's config is written: ``configs/study-<name>.yaml`` in the project."""
    return ROOT / "configs" / f"{PREFIX}{name}.yaml"


def check_same_model(path: Path, model: str) -> None:
    """Refuse to overwrite a model report's config of another model (same default name from two folders)."""
    if not path.is_file():
        return
    try:
        existing = read_yaml(path)
    except PapaError:
        return  # not a config papa can read: it is rewritten
    models = existing.get("models") if isinstance(existing, dict) else None
    if isinstance(models, list) and models and models != [model]:
        hint = "Give this report its own name with --name, or remove that config (and its runs folder) to study"
        problem = f"{path.name} is the model report of {models[0]}, not of {model}"
        raise PapaError(problem, hint + " this model under that name.")
