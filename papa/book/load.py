"""The data behind the chapter notebooks: one grid's tidy results, studies, comparisons and the numbers glued into
the text."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from papa.analysis import results as R
from papa.analysis.basis import Basis, build_basis
from papa.analysis.figure_kit import Figure, glue_figure
from papa.book import table_format as T
from papa.book import words as W
from papa.core.errors import PapaError
from papa.core.grid_schema import GridConfig, Study, study_settings
from papa.core.io import read_json_verified
from papa.core.tasks import metric_name, task_name
from papa.pipeline.plan import ROOT, count_probe_runs, expand, grid_model, load_config


@dataclass
class BookData:
    """Everything a chapter needs from one grid's runs (tables are pandas frames)."""

    config: GridConfig
    tidy: pd.DataFrame  # every run × metric
    main: pd.DataFrame  # the main grid's rows (floors included)
    summary: pd.DataFrame  # main metric over seeds of the converged runs (basis.summary)
    floors: pd.DataFrame  # floors of the converged runs (basis.floors)
    epochs: pd.DataFrame  # per-epoch rows of the main grid
    studies: dict[str, pd.DataFrame] = field(default_factory=dict)
    rankings: dict[str, list] = field(default_factory=dict)  # "<model>__<task>__<method>" → ranking
    records: dict[str, dict] = field(default_factory=dict)  # run id → result record (with its dev predictions)
    lr_choices: dict[str, dict] = field(default_factory=dict)  # "<model>__<task>" → lr choice (probing.protocol)
    basis: Basis | None = None  # the main grid's runs on the book's one basis (papa.analysis.basis)
    ranking_meta: dict[str, dict] = field(default_factory=dict)  # "<model>__<task>__<method>" → its file's meta
    study_bases: dict[str, Basis] = field(default_factory=dict, repr=False)  # built once each, by study_basis

    def study_basis(self, name: str) -> Basis:
        """The basis of study ``name``'s runs (:func:`papa.analysis.basis.build_basis`), built on first use."""
        if name not in self.study_bases:
            self.study_bases[name] = build_basis(self.studies[name], self.records)
        return self.study_bases[name]

    @property
    def models(self) -> list[str]:
        return sorted(self.main["model"].unique())

    @property
    def tasks(self) -> list[str]:
        return [t for t in self.config.tasks if t in set(self.main["task"])]


def study_probe_settings(grid: GridConfig, study: Study | None = None, model: str | None = None) -> dict:
    """The settings that say how ``study`` (None: the main grid) trains ``model``'s probe
    (:func:`papa.core.grid_schema.study_settings`): lr, epochs, modes, replacements, selection, held-out and training
    examples."""
    settings = study_settings(grid, study, model)
    keys = ("lr", "epochs", "modes", "replacements", "selection", "heldout_examples")
    return {key: settings[key] for key in keys} | {"train_examples": settings["max_train_examples"]}


def probe_setting_studies(grid: GridConfig) -> list[str]:
    """The studies that train the probe otherwise than the main grid (:func:`study_probe_settings`) for some of their
    models: their runs are never main-grid runs."""
    differs = lambda study, model: study_probe_settings(grid, study, model) != study_probe_settings(grid, None, model)
    return [s.name for s in grid.studies if any(differs(s, model) for model in s.models or grid.models)]


def study_frame(tidy: pd.DataFrame, grid: GridConfig, study: Study | None = None) -> pd.DataFrame:
    """Rows of ``tidy`` that belong to a study (None: the main grid): per model its settings' lr, epochs, epoch
    selection, modes and tasks, and per model and task the largest training size not above the study's. A named
    study keeps only its own runs (``__<name>__s<seed>``); the main grid leaves out every study that trains the
    probe otherwise (:func:`probe_setting_studies`: with ``lr: select`` any lr would pass)."""
    if study is not None:
        tidy = tidy[tidy["run_id"].str.contains(f"__{study.name}__s", regex=False)]
    else:
        for name in probe_setting_studies(grid):
            tidy = tidy[~tidy["run_id"].str.contains(f"__{name}__s", regex=False)]
    tasks = (study and study.tasks) or grid.tasks
    parts = []
    for model in (study and study.models) or grid.models:
        s = study_probe_settings(grid, study, model)
        same_lr = True if isinstance(s["lr"], str) else tidy["lr"].astype(float).round(12) == round(s["lr"], 12)
        keep = same_lr & (tidy["model"] == model) & (tidy["epochs"] == s["epochs"])
        keep &= (tidy["selection"] == s["selection"]) & tidy["mode"].isin(s["modes"])
        keep &= tidy["replacement"].isin(s["replacements"]) & tidy["task"].isin(tasks)
        most = math.inf if s["train_examples"] is None else s["train_examples"]
        parts.append(tidy[keep & (tidy["train_examples"] <= most)])
    rows = pd.concat(parts) if parts else tidy.iloc[:0]
    if rows.empty:
        return rows
    return rows[rows["train_examples"] == rows.groupby(["model", "task"])["train_examples"].transform("max")]


def load_book_data(config_path: str) -> BookData:
    """Load a grid's results for the chapters (``config_path`` relative to the repository root): exactly the outputs
    of its current plan, each read with its checksum; a result the plan names but that is missing, corrupt or not a
    result is an error (never silently a run fewer)."""
    config = load_config(ROOT / config_path)
    results: dict[str, dict] = {}
    rankings: dict[str, list] = {}
    meta: dict[str, dict] = {}
    lr_choices: dict[str, dict] = {}
    for run in expand(config):
        for output in run.outputs:
            path = ROOT / output
            if run.kind == "probe":
                result = read_json_verified(path, "result")
                if "config" not in result or "score" not in result:
                    fix = "Run the grid again: `papa grid run` re-executes the run that wrote it."
                    raise PapaError(f"The result {output} is not a probe result", fix)
                results[path.stem] = result
            elif run.kind == "rank":
                ranking = read_json_verified(path, "ranking")
                rankings[path.stem], meta[path.stem] = [tuple(h) for h in ranking["ranking"]], ranking.get("meta") or {}
            elif run.kind == "select_lr":
                lr_choices[path.stem] = read_json_verified(path, "lr choice")
    return book_data_from(config, results, rankings, lr_choices, meta)


def read_manifest(runs_dir: Path) -> dict:
    """The runs of a runs folder's manifest (``{}`` without one)."""
    path = runs_dir / "manifest.json"
    return read_json_verified(path, "manifest")["runs"] if path.is_file() else {}


def book_data_from(
    config: dict | GridConfig,
    records: dict[str, dict],
    rankings: dict[str, list],
    lr_choices: dict | None = None,
    ranking_meta: dict | None = None,
) -> BookData:
    """:class:`BookData` from result records (``{run id: result}``, dev predictions included), rankings (``{stem:
    [(layer, head), ...]}``), lr choices (``{"<model>__<task>": choice}``) and the rankings' metadata (``{stem:
    meta}``); a ``config`` dict is validated as a :class:`~papa.core.grid_schema.GridConfig`."""
    grid = grid_model(config)
    tidy = R.load_results(records)
    main = study_frame(tidy, grid)
    epochs = R.epoch_table(records)
    basis = build_basis(main, records)
    studies = {s.name: study_frame(tidy, grid, s) for s in grid.studies}
    epochs = epochs[epochs["run_id"].isin(set(main["run_id"]))]
    lr = dict(lr_choices or {})
    frames = (tidy, main, basis.summary, basis.floors, epochs, studies)
    return BookData(grid, *frames, rankings, records, lr, basis, dict(ranking_meta or {}))


def floors_display(floors: pd.DataFrame) -> T.Table:
    """The floors table for reading: one row per (model and) task, means ± seed std, and the verdict."""
    f = floors
    frame = f.assign(
        free=[
            None if W.is_missing(m) else f"{W.score_spread(m, s)}{' (still rising)' if bool(rising) else ''}"
            for m, s, rising in zip(f["attention_free"], f["attention_free_std"], f["attention_free_rising"])
        ],
        base=[W.score_spread(m, s) for m, s in zip(f["baseline"], f["baseline_std"])],
        interval=[
            None if W.is_missing(lo) else f"[{W.score(lo)}, {W.score(hi)}]"
            for lo, hi in zip(f["baseline_low"], f["baseline_high"])
        ],
        task=f["task"].map(task_name),
        metric=f["metric"].map(metric_name),
    )
    kinds = T.model_task_kinds(f) | {"informative": "yes/no"}
    kinds |= {"metric": "text", "majority": "score", "free": W.text, "base": W.text, "interval": W.text}
    headers = {"informative": "informative", "majority": "majority class", "free": "attention-free probe"}
    headers |= {"base": "k = 0 probe", "interval": "k = 0, 95% interval"}
    missing = {
        "free": "no attention-free probe (embedding layer only) of this pair ran: the higher floor is the majority"
        " class",
        "base": "no k = 0 probe of this pair converged (or none ran)",
        "interval": "not every seed stored its dev predictions: informative by the seed-spread margin alone",
    }
    notes = [
        "Every floor and score here is a mean over the converged runs only (the book's basis); ± is the standard"
        " deviation over those probe seeds, and a score without ± comes from a single seed. Still rising: no"
        " attention-free probe of the pair converged, so its floor is the mean of those still rising at their epoch"
        " cap, a lower bound of the converged floor (and closer to it than the majority class alone).",
        f"The interval is the {W.INTERVAL_COVERS}. Informative: the k = 0 mean exceeds the higher floor by more than"
        " twice the seed spread (and at least 0.01), and the interval's lower bound lies above it.",
    ]
    return T.table(frame, kinds, headers, missing, notes)


def seed_level_words(config: GridConfig, models: Iterable[str]) -> dict[str, str]:
    """How many probe seeds the main grid's models run (``probe_seeds_words``: "three seeds", or a range when
    ``probe.per_model`` sets them apart) and how many distinct draws the bootstrap's seed level has
    (``seed_level_draws``): drawing S seeds with replacement gives C(2S − 1, S) multisets."""
    counts = sorted({len(study_settings(config, None, model)["seeds"]) for model in models}) or [0]
    low, high = counts[0], counts[-1]
    draws = lambda s: math.comb(2 * s - 1, s) if s else 0
    if low == high:
        return {"probe_seeds_words": W.count(low, "seed"), "seed_level_draws": W.count(draws(low), "distinct draw")}
    return {
        "probe_seeds_words": f"{low} to {high} seeds",
        "seed_level_draws": f"{draws(low)} to {draws(high)} distinct draws",
    }


def headline_numbers(data: BookData) -> dict:
    """The counts and names the results chapter's prose cites (the drops and verdicts come from
    :func:`papa.book.chapters.results.answer_numbers`, on the one basis of every drop)."""
    ranking = data.config.rank.methods[0]
    informative = data.floors[data.floors["informative"]]
    uninformative = data.floors[~data.floors["informative"]]
    label = (lambda m, t: f"{m}/{t}") if len(data.models) > 1 else (lambda m, t: t)
    size = data.config.probe.max_train_examples
    return {
        "config_name": data.config.name,
        # a probe run is one executed probe notebook; it writes one probe result per seed (count_probe_runs)
        "n_probe_runs": count_probe_runs(data.main["run_id"].unique()),
        "n_probe_results": int(data.main["run_id"].nunique()),
        "n_probe_runs_all": count_probe_runs(data.tidy["run_id"].unique()),
        "models": ", ".join(data.models),
        "models_sized": and_sized(data.main),
        "tasks": ", ".join(data.tasks),
        "ranking": ranking,
        "n_models": len(data.models),
        "informative_tasks": ", ".join(map(label, informative["model"], informative["task"])) or "none",
        "uninformative_tasks": ", ".join(map(label, uninformative["model"], uninformative["task"])) or "none",
        **seed_level_words(data.config, data.models),
        "probe_train_examples": "the whole training split" if size is None else f"{size:,}",
    }


def and_sized(main: pd.DataFrame) -> str:
    """The models with their sizes in attention heads: ``"minilm-l3 (36 heads) and mpnet-base (144 heads)"``."""
    heads = main.groupby("model", sort=True)["total_heads"].max() if len(main) else {}
    return W.and_list(f"{model} ({int(n)} heads)" for model, n in heads.items()) or "no model"


def glue_numbers(numbers: dict) -> None:
    """``myst_nb.glue`` every number (not displayed); a float as a score, as a percentage when its key starts with
    ``drop``, NaN as ``"n/a"``."""
    from myst_nb import glue

    for key, value in numbers.items():
        if isinstance(value, float):
            value = "n/a" if math.isnan(value) else W.percent(value) if key.startswith("drop") else W.score(value)
        glue(key, value, display=False)


def glue_figures(figures: Iterable[Figure]) -> None:
    """Glue each figure's chart and caption (:func:`papa.analysis.figure_kit.glue_figure`)."""
    for figure in figures:
        glue_figure(figure)


def records_of(data: BookData, run_ids: set[str]) -> dict[str, dict]:
    """The result records of ``run_ids`` that ``data`` holds, by run id."""
    return {run_id: data.records[run_id] for run_id in sorted(run_ids) if run_id in data.records}


def gate_numbers(gate: dict) -> dict:
    """The convergence gate's counts by glue key (``n_gated_runs``, ``n_converged`` ...), for both chapters."""
    counts = {f"n_{key}": gate[key] for key in ("converged", "left_out", "not_converged", "unknown")}
    return {"n_gated_runs": gate["runs"]} | counts
