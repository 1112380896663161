"""The sensitivity studies of earlier grids (training size, probe settings) and the cached-vs-faithful comparison:
tables the controls chapter shows when a grid runs such studies."""

from __future__ import annotations

import pandas as pd

from papa.analysis.basis import Basis
from papa.analysis.controls import DROP_CHECK_COLUMNS, compare, drop_check, setting_change
from papa.book.load import BookData, study_probe_settings
from papa.book.words import DASH, and_list, is_missing, lr_text, percent, plural, score
from papa.core.grid_schema import GridConfig, Study


def faithful_comparison(data: BookData) -> pd.DataFrame | None:
    """:func:`compare` of the faithful study (``modes: [faithful]``) with its cached twin (``modes: [cached]`` at the
    same epoch cap): None when the grid ran no such pair."""
    studies = data.config.studies
    faithful = [s for s in studies if s.modes == ["faithful"]]
    twins = [s for s in studies if faithful and s.modes == ["cached"] and s.epochs == faithful[0].epochs]
    if not twins or not len(data.studies.get(faithful[0].name, [])):
        return None
    return compare(data.studies[twins[0].name], data.studies[faithful[0].name], "cached", "faithful")


def size_sensitivity(data: BookData) -> pd.DataFrame:
    """The rows of :func:`sensitivity_table` whose study changes only the training size (:func:`size_studies`)."""
    sizes = sensitivity_table(data)
    return sizes[sizes["study"].isin(size_studies(data.config))] if len(sizes) else sizes


def _probe_change(grid: GridConfig, study: Study, model: str, whole_split: int | None = None) -> str:
    """How ``study`` trains ``model``'s full probe otherwise than the main grid, in words: its lr, epochs, epoch
    selection or training size (``whole_split``: the examples of the whole training split, when the study used it);
    "" when it changes none of them, probes another input, or runs in another mode."""
    settings = study_probe_settings(grid, study, model)
    official = study_probe_settings(grid, None, model)  # the main grid's, for the same model
    if study.probe_input != "all" or settings["modes"] != official["modes"]:
        return ""
    parts = []
    if settings["lr"] != official["lr"]:
        parts.append(f"lr {settings['lr']}" if isinstance(settings["lr"], str) else f"lr {lr_text(settings['lr'])}")
    if settings["epochs"] != official["epochs"]:
        parts.append(f"{settings['epochs']} epochs")
    if settings["selection"] != official["selection"]:
        heldout = settings["selection"] == "heldout"
        parts.append("epoch chosen on held-out training data" if heldout else f"{settings['selection']} epoch")
    if settings["train_examples"] != official["train_examples"]:
        size = settings["train_examples"]
        whole = "the whole training split" + (f" ({whole_split:,} examples)" if whole_split else "")
        parts.append(whole if size is None else f"{size:,} training examples")
    return ", ".join(parts)


def _study_bases(data: BookData) -> list[tuple[Study, Basis]]:
    """Each study that ran and trains some model's full probe otherwise (:func:`_probe_change`), with its basis."""
    out = []
    for study in data.config.studies:
        frame = data.studies.get(study.name)
        if frame is None or frame.empty:
            continue
        if any(_probe_change(data.config, study, m) for m in set(frame["model"])):
            out.append((study, data.study_basis(study.name)))
    return out


def sensitivity_table(data: BookData) -> pd.DataFrame:
    """Does the PAPA drop depend on how well the probe is trained? One row per study that trains the probe otherwise
    (:func:`_probe_change`) × model × task: the study, its change in words, and
    :func:`papa.analysis.controls.setting_change` of the main grid's basis and the study's."""
    rows = []
    for study, basis in _study_bases(data):
        for model, task in sorted(set(zip(basis.runs["model"], basis.runs["task"]))):
            if not _probe_change(data.config, study, model):
                continue
            change = setting_change(data.basis, basis, model, task)
            if change is None:
                continue
            examples = change["train examples study"]
            row = {"study": study.name, "setting": _probe_change(data.config, study, model, examples)}
            row |= {"train examples official": change["train examples official"]}
            rows.append(row | {"train examples study": examples, "model": model, "task": task} | change)
    return pd.DataFrame(rows)


#: Study keys that leave the probe as the main grid trains it, apart from how much of the training split it sees.
_SIZE_KEYS = {"name", "chapter", "models", "tasks", "fractions", "seeds", "methods", "max_train_examples"}
_SIZE_KEYS |= {"pool_examples", "heldout_examples"}


def size_studies(grid: GridConfig) -> list[str]:
    """The studies that change only the training size: no key outside :data:`_SIZE_KEYS`, and for each of their
    models the main grid's probe settings but another training size."""
    same = ("lr", "epochs", "selection", "modes", "heldout_examples")

    def only_size(study: Study) -> bool:
        if not study.model_fields_set <= _SIZE_KEYS:
            return False
        for model in study.models or grid.models:
            mine, main = study_probe_settings(grid, study, model), study_probe_settings(grid, None, model)
            if any(mine[key] != main[key] for key in same) or mine["train_examples"] == main["train_examples"]:
                return False
        return True

    return [study.name for study in grid.studies if only_size(study)]


def drop_checks(data: BookData, model: str, task: str) -> pd.DataFrame:
    """Does one model × task's drop with every head constant survive another way of training the probe? One row per
    setting that ran the pair (the main grid, then each study of :func:`_probe_change`), on its basis: the setting,
    its change in words, and :func:`papa.analysis.controls.drop_check`'s row."""
    sources = [("main grid", "", data.basis)]
    for study, basis in _study_bases(data):
        change = _probe_change(data.config, study, model)
        if change:
            sources.append((study.name, change, basis))
    checked = ((name, change, drop_check(basis, data.records, model, task)) for name, change, basis in sources)
    rows = [[name, change, *row] for name, change, row in checked if row is not None]
    return pd.DataFrame(rows, columns=DROP_CHECK_COLUMNS.split())


def drop_checks_summary(checks: pd.DataFrame) -> str:
    """:func:`drop_checks` in words: in how many settings the seeds are apart, each drop, and whether a better-trained
    k = 0 probe than the main grid's loses more or less."""
    if checks.empty:
        return "no run to check"
    apart = int(checks["apart"].sum())
    where = "In every setting" if apart == len(checks) else f"In {apart} of {len(checks)} settings"
    seeds = lambda n: f"{n} {plural(n, 'seed')}"
    setting = lambda row: "the main grid" if row.setting == "main grid" else row.change
    drop = lambda value: percent(value) or DASH  # undefined where a k = 0 score is not above 0
    drops = and_list(f"{drop(row.drop)} ({setting(row)}; {seeds(row.seeds)})" for row in checks.itertuples())
    below = "every seed's score with every head constant lies below every seed's score at k = 0"
    sentence = f"{where}, {below}; the drop is {drops}"
    best, main = checks.loc[checks["k0"].idxmax()], checks[checks["setting"] == "main grid"]
    if best["setting"] != "main grid" and len(main):
        main = main.iloc[0]
        sentence += (
            f". The best-trained probe at k = 0 is not the main grid's: {best['change']} ({seeds(best['seeds'])})"
            f" scores {score(best['k0'])} against {score(main['k0'])}"
        )
        if not (is_missing(best["drop"]) or is_missing(main["drop"])):
            sentence += f", and loses {'more' if best['drop'] > main['drop'] else 'less'} with every head constant"
    return sentence
