"""A grid config (``configs/*.yaml``) → its validated form and the dependency-ordered list of runs.

Each run's parameters are a params model of :mod:`papa.core.schema` dumped to a dict; run ids and artefact names
are slugs (:mod:`papa.core.names`). Planning is offline (:func:`head_count`): a model it cannot size is named in
:attr:`Plan.unsized` instead of failing the plan. See :mod:`papa.pipeline.grid` for the whole flow."""

from __future__ import annotations

import datetime
import functools
import itertools
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from papa.core import schema
from papa.core.config_files import read_yaml, validate
from papa.core.fields import CHAPTERS, CHOSEN_LRS, RUNNER_UP, parse_fraction
from papa.core.grid_schema import GridConfig, study_settings
from papa.core.names import run_id, slug


def project_root(start: Path | None = None) -> Path:
    """The project folder a grid runs in: ``$PAPA_PROJECT_DIR``, else the nearest folder at or above ``start`` with
    ``notebooks/03_probe.md`` and ``configs/``, else the checkout this package was imported from."""
    if os.environ.get("PAPA_PROJECT_DIR"):
        return Path(os.environ["PAPA_PROJECT_DIR"]).expanduser().resolve()
    start = (start or Path.cwd()).resolve()
    for folder in (start, *start.parents):
        if (folder / "notebooks" / "03_probe.md").is_file() and (folder / "configs").is_dir():
            return folder
    return Path(__file__).resolve().parents[2]


ROOT = project_root()
NOTEBOOKS = {
    "estimate": "notebooks/01_estimate_constants.md",
    "rank": "notebooks/02_rank_heads.md",
    "probe": "notebooks/03_probe.md",
    "select_lr": "notebooks/06_select_lr.md",
    "results": "notebooks/04_results.md",
    "controls": "notebooks/05_controls.md",
    "replacements": "notebooks/08_replacements.md",
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


class Plan(list):
    """The runs of a grid in dependency order (a ``list[Run]``). ``unsized`` maps each model whose
    head count could not be found offline to the reason: its probe runs are not in the plan."""

    def __init__(self, runs=(), unsized: dict[str, str] | None = None):
        super().__init__(runs)
        self.unsized = dict(unsized or {})


def load_config(path: str | Path) -> dict:
    """Read and validate a grid config: a plain dict with every default filled in, plus ``_path``."""
    path = Path(path)
    data = read_yaml(path)
    grid = validate(GridConfig, data, f"Config {path.name}")
    config = config_dict(grid)
    try:
        config["_path"] = str(path.resolve().relative_to(ROOT))
    except ValueError:
        config["_path"] = str(path.resolve())
    return config


def config_dict(grid: GridConfig) -> dict:
    """``grid`` as the dict the rest of papa reads (``config["probe"]["lr"]``, ``study.get("tasks", ...)``)."""
    config = grid.model_dump(exclude={"studies"})
    config["studies"] = [s.model_dump(include=s.model_fields_set | {"name", "chapter"}) for s in grid.studies]
    per_model = grid.probe.per_model.items()
    config["probe"]["per_model"] = {model: settings.model_dump(exclude_unset=True) for model, settings in per_model}
    return config


def grid_model(config: dict | GridConfig) -> GridConfig:
    """The typed config behind a dict of :func:`load_config` (validated again: a hand-edited dict is checked too)."""
    if isinstance(config, GridConfig):
        return config
    data = {k: v for k, v in config.items() if not k.startswith("_")}
    return validate(GridConfig, data, f"Config {config.get('name', '?')}")


# --- head counts, offline ---------------------------------------------------------------------------------------------
#: Layers × heads of the embedded models and of the paper's hub models (and their usual relatives).
KNOWN_HEAD_COUNTS = {"minilm-l6": 6 * 12, "minilm-l3": 3 * 12, "mpnet-base": 12 * 12}
_HUB_NAMES = [f"{org}bert-{{}}-{case}" for org in ("", "google-bert/") for case in ("uncased", "cased")]
_HUB_NAMES += [f"{org}{name}-{{}}" for org in ("", "FacebookAI/") for name in ("roberta", "xlm-roberta")]
_HUB_NAMES += ["microsoft/deberta-{}", "microsoft/deberta-v3-{}", "google/electra-{}-discriminator"]
KNOWN_HEAD_COUNTS |= {name.format(size): n for name in _HUB_NAMES for size, n in (("base", 144), ("large", 384))}
EMBEDDED = ("minilm-l6", "minilm-l3", "mpnet-base")


def _heads_in(config_file: str | Path) -> int | None:
    try:
        config = json.loads(Path(config_file).read_text(encoding="utf-8"))
        layers, heads = config["num_hidden_layers"], config["num_attention_heads"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return layers * heads if isinstance(layers, int) and isinstance(heads, int) else None


def head_count(model: str) -> tuple[int | None, str]:
    """``(layers × heads, where it came from)`` without loading the model, or ``(None, why not)``."""
    if model in EMBEDDED:
        return KNOWN_HEAD_COUNTS[model], "embedded"
    folder = Path(model).expanduser()
    if folder.is_dir():
        heads = _heads_in(folder / "config.json")
        why = f"the folder {model} has no readable config.json with num_hidden_layers and num_attention_heads"
        return (heads, "config.json") if heads else (None, why)
    if model in KNOWN_HEAD_COUNTS:
        return KNOWN_HEAD_COUNTS[model], "table"
    try:
        from huggingface_hub import hf_hub_download, try_to_load_from_cache

        cached = try_to_load_from_cache(model, "config.json")
        if isinstance(cached, str) and _heads_in(cached):
            return _heads_in(cached), "cache"
        if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() not in ("1", "true", "yes", "on"):
            heads = _heads_in(hf_hub_download(model, "config.json"))
            if heads:
                return heads, "hub"
    except Exception:  # noqa: BLE001 (no network, unknown id, bad cache: the model stays unsized)
        pass
    unknown = "not in papa's table of known models, not a local folder, and its config.json is not"
    return None, unknown + " in the Hugging Face cache"


# --- expansion --------------------------------------------------------------------------------------------------------
#: The probe settings a probe run takes as they are from its study's effective settings.
PROBE_SETTINGS = (
    "epochs selection heldout_fraction max_train_examples patience pool_examples heldout_examples dev_every_epoch"
    " eval_chunk_examples"
).split()


@dataclass(frozen=True)
class _Artefacts:
    """Where a grid's runs write: under ``book/runs/<grid>/artifacts`` (``art``)."""

    art: str

    def constants(self, model: str, task: str) -> str:
        return f"{self.art}/constants/{slug(model)}__{task}.safetensors"

    def ranking(self, model: str, task: str, method: str) -> str:
        return f"{self.art}/rankings/{slug(model)}__{task}__{method}.json"

    def lr_file(self, model: str, task: str) -> str:
        return f"{self.art}/lr/{slug(model)}__{task}.json"


#: One study of a grid: (name, models, tasks, probe input, model -> effective settings).
_Study = tuple[str, list, list, str, Any]


def expand(config: dict | GridConfig, path: str | None = None) -> Plan:
    """All runs of a config in dependency order (estimates, rankings, probes, then the chapters)."""
    grid = grid_model(config)
    path = path or (config.get("_path") if isinstance(config, dict) else None) or schema.ChapterParams().grid_config
    where = _Artefacts(f"book/runs/{grid.name}/artifacts")
    common = dict(max_length=grid.max_length, relayout=grid.relayout, device=grid.device)
    studies = _studies(grid)
    runs: dict[str, Run] = {}
    for model, task in itertools.product(grid.models, grid.tasks):
        rid, out = run_id("estimate", model, task), where.constants(model, task)
        fields = dict(model=model, task=task, max_examples=grid.estimate.max_examples, out=out)
        params = schema.EstimateParams(**fields, **common)
        runs[rid] = Run(rid, "estimate", params.model_dump(), outputs=[out])
    _add_rank_runs(runs, grid, studies, where)
    _add_select_lr_runs(runs, grid, studies, where, common)
    totals = {model: head_count(model) for model in grid.models}
    unsized = {model: why for model, (heads, why) in totals.items() if heads is None}
    for study in studies:
        for model in study[1]:
            if totals[model][0] is not None:
                _add_probe_runs(runs, grid, study, model, (totals[model][0], where, common))
    upstream = [r.run_id for r in runs.values() if r.kind in ("probe", "rank", "select_lr")]
    for chapter in grid_chapters(config):
        runs[chapter] = Run(chapter, chapter, schema.ChapterParams(grid_config=path).model_dump(), deps=upstream)
    for run in runs.values():
        run.grid = grid.name
    return Plan(runs.values(), unsized)


def _studies(grid: GridConfig) -> list[_Study]:
    """The grid's studies: the main one, the attention-free floor (when asked for), then its own studies."""
    main = functools.partial(study_settings, grid, None)
    studies: list[_Study] = [("main", grid.models, grid.tasks, "all", main)]
    if grid.floors.attention_free:
        floor = lambda model: {**main(model), "fractions": [0]}
        studies.append(("floor", grid.models, grid.tasks, "embeddings", floor))
    for study in grid.studies:
        models, tasks = study.models or grid.models, study.tasks or grid.tasks
        studies.append((study.name, models, tasks, study.probe_input, functools.partial(study_settings, grid, study)))
    return studies


def _add_rank_runs(runs: dict[str, Run], grid: GridConfig, studies: list[_Study], where: _Artefacts) -> None:
    """Add a rank run per (model, task, method) the studies rank by; with several gate draws, one per draw
    (``gates-<seed>``) and a ``gates`` run that combines them (the draws' mean λ)."""
    ranked = set()  # (model, task, method)
    for _, models, tasks, _, settings in studies:
        for model in models:
            ranked |= {(model, t, m) for t in tasks for m in (settings(model)["methods"] or grid.rank.methods)}
    seeds = grid.rank.draw_seeds()
    combined = len(seeds) > 1  # gates: the draws' mean λ, each draw its own rank run (gates-<seed>)
    ranked |= {(m, t, f"gates-{seed}") for m, t, method in ranked if method == "gates" and combined for seed in seeds}
    rank = grid.rank.model_dump(include=set(schema.RankParams.model_fields) - {"seed"})
    for model, task, method in sorted(ranked, key=lambda r: (r[0], r[1], combined and r[2] == "gates", r[2])):
        rid, out = run_id("rank", model, task, method), where.ranking(model, task, method)
        fields = dict(model=model, task=task, method=method, constants=where.constants(model, task), out=out, **rank)
        fields["seed"] = int(method[6:]) if method.startswith("gates-") else grid.rank.seed
        deps = [run_id("estimate", model, task)]
        if combined and method == "gates":  # combines its draws, trains nothing
            fields["draws"] = [where.ranking(model, task, f"gates-{seed}") for seed in seeds]
            deps = [run_id("rank", model, task, f"gates-{seed}") for seed in seeds]
        params = schema.RankParams(**fields, data_seed=grid.data_seed, device=grid.device)
        runs[rid] = Run(rid, "rank", params.model_dump(), deps=deps, outputs=[out])


def _add_select_lr_runs(
    runs: dict[str, Run], grid: GridConfig, studies: list[_Study], where: _Artefacts, common: dict
) -> None:
    """Add a select_lr run per (model, task) whose probes read a chosen lr (``lr: select`` or its runner-up)."""
    selected = set()  # (model, task)
    for _, models, tasks, _, settings in studies:
        for model in models:
            selected |= {(model, t) for t in tasks} if settings(model)["lr"] in CHOSEN_LRS else set()
    main = functools.partial(study_settings, grid, None)
    for model, task in sorted(selected):
        rid, out, s = run_id("select_lr", model, task), where.lr_file(model, task), main(model)
        fields = grid.lr_selection.model_dump(exclude={"epochs"})
        # unset epochs: the cap the model's probes train under
        fields |= {"epochs": grid.lr_selection.epochs or s["epochs"], "patience": s["patience"] or 3}
        fallbacks = {"pool_examples": s["max_train_examples"], "max_train_examples": None, "heldout_examples": None}
        for key, fallback in fallbacks.items():
            fields[key] = s[key] or fallback or schema.SelectLrParams.model_fields[key].default
        params = schema.SelectLrParams(model=model, task=task, **fields, data_seed=grid.data_seed, out=out, **common)
        runs[rid] = Run(rid, "select_lr", params.model_dump(), outputs=[out])


def _add_probe_runs(runs: dict[str, Run], grid: GridConfig, study: _Study, model: str, sized: tuple) -> None:
    """Add one study's probe runs of ``model`` (``sized``: its head count, the :class:`_Artefacts` and the settings
    every run shares), one per (task, fraction, method, mode, replacement); a run another study already plans is
    kept as it is."""
    from papa.core.heads import count_for

    name, _, tasks, probe_input, settings = study
    total, where, common = sized
    s = settings(model)
    single = {parse_fraction(f) for f in s["single_seed_fractions"]}
    chosen = s["lr"] in CHOSEN_LRS
    lr = None if chosen else s["lr"]  # chosen: the run's page shows the lr it read from lr_file, not a default
    for task, fraction in itertools.product(tasks, s["fractions"]):
        k = count_for(parse_fraction(fraction), total)
        methods = ["none"] if k == 0 else ["all"] if k == total else (s["methods"] or grid.rank.methods)
        seeds = s["seeds"][:1] if parse_fraction(fraction) in single else s["seeds"]
        replacements = [r for r in s["replacements"] if k or r == "papa"]  # k = 0: one run serves them all
        evaluation = s["max_eval_examples"]
        evaluation = evaluation.get(task) if isinstance(evaluation, dict) else evaluation
        for method, mode, replacement in itertools.product(methods, s["modes"], replacements):
            extra = [] if probe_input == "all" else [probe_input]
            extra += [] if replacement == "papa" else [replacement]
            extra += [] if name in ("main", "floor") else [name]
            rid = run_id("probe", model, task, method, f"k{k}", mode, *extra)
            if rid in runs:
                continue
            by_rank = method not in ("none", "all")
            deps = [run_id("estimate", model, task)] if k else []
            deps += [run_id("select_lr", model, task)] if chosen else []
            deps += [run_id("rank", model, task, method)] if by_rank else []
            out = f"{where.art}/results/{rid}__s{{seed}}.json"
            heads = dict(k=k, constants=where.constants(model, task) if k else "")
            heads["ranking"] = where.ranking(model, task, method) if by_rank else ""
            how = dict(mode=mode, replacement=replacement, seeds=list(seeds), probe_input=probe_input, lr=lr)
            how |= {"lr_file": where.lr_file(model, task) if chosen else "", "max_eval_examples": evaluation}
            how |= {"lr_choice": "runner-up" if s["lr"] == RUNNER_UP else "chosen"}
            how |= {key: s[key] for key in PROBE_SETTINGS}
            fields = dict(model=model, task=task, **heads, **how, data_seed=grid.data_seed, out=out)
            params = schema.ProbeParams(**fields, **common)
            outputs = [out.format(seed=seed) for seed in seeds]
            runs[rid] = Run(rid, "probe", params.model_dump(), deps=deps, outputs=outputs)


def grid_chapters(config: dict) -> list[str]:
    """The chapter runs of a grid: results and controls always, and every other chapter of
    :data:`papa.core.fields.CHAPTERS` that one of its studies names (``chapter: replacements``)."""
    named = {study.get("chapter") for study in config.get("studies", [])}
    return [chapter for chapter in CHAPTERS if chapter in ("results", "controls") or chapter in named]


#: Wall-time aims, in minutes on two CPU cores: of the grids the book is built from (the default grid in
#: four hours; the runs of studies with an aim of their own left out), and of a chapter's studies.
TIME_AIMS = {"default": 240.0}
STUDY_AIMS = {"replacements": 60.0}


def chapter_study_runs(config: dict, run_ids: Iterable[str], chapter: str) -> list[str]:
    """The runs of ``run_ids`` that belong to the studies reported in ``chapter`` (a study's runs end in
    ``__<study>``; the k = 0 runs they share with the main grid are the main grid's)."""
    names = [study["name"] for study in config.get("studies", []) if study.get("chapter") == chapter]
    return [run_id for run_id in run_ids if any(run_id.endswith(f"__{name}") for name in names)]


def chapter_study_minutes(config: dict, manifest: dict[str, dict], chapter: str) -> tuple[int, float]:
    """``(runs, minutes)``: the manifest's runs of ``chapter``'s studies and their share of the machine's time
    (:func:`machine_shares`; their summed wall time where a run lacks its end)."""
    run_ids = chapter_study_runs(config, manifest, chapter)
    shares = machine_shares(manifest) or {r: float(manifest[r].get("seconds") or 0) for r in run_ids}
    return len(run_ids), sum(shares[run_id] for run_id in run_ids) / 60


def machine_shares(manifest: dict[str, dict]) -> dict[str, float] | None:
    """Each run's share of the machine's time, in seconds: its span ``[finished − seconds, finished]`` with every
    instant split evenly among the runs running then (one at a time: its wall time; two side by side: half each).
    The shares add up to the time the machine ran any run; None when a run lacks ``finished`` (sealed before runs
    recorded it)."""
    spans = {}
    for name, entry in manifest.items():
        if not entry.get("finished"):
            return None
        end = datetime.datetime.fromisoformat(entry["finished"]).timestamp()
        spans[name] = (end - float(entry.get("seconds") or 0), end)
    shares = dict.fromkeys(spans, 0.0)
    edges = sorted({t for span in spans.values() for t in span})
    for start, end in zip(edges, edges[1:]):
        running = [name for name, (a, b) in spans.items() if a <= start and end <= b]
        for name in running:
            shares[name] += (end - start) / len(running)
    return shares


def probe_run_id(result_key: str) -> str:
    """The probe run (one executed probe notebook) a probe result belongs to: its key ``<run id>__s<seed>``
    without the seed."""
    return result_key.rsplit("__s", 1)[0]


def count_probe_runs(result_keys: Iterable[str]) -> int:
    """How many probe runs (executed probe notebooks, each with one probe result per seed) the probe results
    keyed ``<run id>__s<seed>`` come from: the one count of probe runs every page prints."""
    return len({probe_run_id(key) for key in result_keys})


def runs_dir(config: dict) -> Path:
    return ROOT / "book" / "runs" / config["name"]


def run_notebook_path(run: Run) -> str:
    return f"book/runs/{run.grid}/{run.run_id}.ipynb"
