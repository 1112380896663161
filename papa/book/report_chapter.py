"""The chapter of a model report (``papa study``; ``notebooks/07_report.md``): one model's results beside the
book's, each grid on its own :class:`~papa.book.chapters.results.ResultsChapter` science (never pooled); a book model
is compared only when its protocol matches (:func:`protocol_differences`), the others are named with their
differences."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from papa.analysis.figure_kit import Figure
from papa.book import table_format as T
from papa.book import words as W
from papa.book.chapters.results import ResultsChapter, analogue_figures, answers
from papa.book.interval_tables import verdicts_display
from papa.book.load import BookData, load_book_data
from papa.book.words import and_list, plural
from papa.core.errors import PapaError
from papa.core.grid_schema import GridConfig, study_settings
from papa.core.tasks import task_name

#: The probe settings that make a protocol (with the grid's max_length, layout, data seed, constants, ranking and lr
#: selection): two models are compared only when all of them are equal. Seeds and head fractions are coverage.
PROBE_KEYS = {"lr": "probe lr", "epochs": "epoch cap", "patience": "patience", "selection": "epoch selection"}
PROBE_KEYS |= {"pool_examples": "training pool", "max_train_examples": "training draw per seed"}
PROBE_KEYS |= {"heldout_examples": "held-out draw per seed", "modes": "modes", "heldout_fraction": "held-out share"}
GRID_KEYS = {"max_length": "max_length", "relayout": "PAPA layout", "data_seed": "data seed"}
RANK_KEYS = {"epochs": "gate epochs", "lr": "gate lr", "max_train_examples": "gate training examples"}
RANK_KEYS |= {"max_eval_examples": "gate dev examples", "seed": "gate seed"}
SECTION_KEYS = {"estimate": {"max_examples": "constants' examples"}, "rank": RANK_KEYS}
SECTION_KEYS["lr_selection"] = {"lrs": "lrs tried", "seeds": "lr-selection seeds", "epochs": "lr-selection cap"}
#: What stands in a table's place when the book's runs cannot be read (``report_beside`` says why).
BOOK_UNREADABLE = "The book's runs could not be read."


def _words(value: Any) -> str:
    if value is None:
        return "the whole split"
    if isinstance(value, list):
        return "[" + ", ".join(_words(v) for v in value) + "]"
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def protocol(grid: GridConfig, model: str, tasks: list[str]) -> dict[str, Any]:
    """The protocol ``model``'s main probes ran under in ``grid``, on ``tasks``: ``{words: value}``."""
    settings = study_settings(grid, None, model)
    out: dict[str, Any] = {words: getattr(grid, key) for key, words in GRID_KEYS.items()}
    out |= {words: settings[key] for key, words in PROBE_KEYS.items()}
    for task in tasks:
        evaluation = settings["max_eval_examples"]
        out[f"{task_name(task)} dev examples"] = evaluation.get(task) if isinstance(evaluation, dict) else evaluation
    for section, keys in SECTION_KEYS.items():
        values = getattr(grid, section).model_dump()
        out |= {words: values[key] for key, words in keys.items()}
    return out


def protocol_differences(
    report: GridConfig, model: str, book: GridConfig, book_model: str, tasks: list[str]
) -> list[str]:
    """What differs between the report's protocol for ``model`` and the book's for ``book_model`` (empty: none)."""
    mine, theirs = protocol(report, model, tasks), protocol(book, book_model, tasks)
    return [f"{k} {_words(mine[k])} here, {_words(theirs[k])} in the book" for k in mine if mine[k] != theirs[k]]


def coverage_notes(report: GridConfig, model: str, book: GridConfig, book_model: str) -> list[str]:
    """Differences that leave the protocol the same but change what was run: probe seeds and head fractions."""
    mine, theirs = study_settings(report, None, model), study_settings(book, None, book_model)
    notes = []
    if len(mine["seeds"]) != len(theirs["seeds"]):
        notes.append(f"{plural(len(mine['seeds']), 'probe seed')} here, {len(theirs['seeds'])} in the book")
    ours, book_fractions = ([str(f) for f in side["fractions"]] for side in (mine, theirs))
    if ours != book_fractions:
        notes.append(f"head fractions {_words(ours)} here, {_words(book_fractions)} in the book")
    return notes


@dataclass
class ReportChapter:
    """A model report's own results and the book's (None when its runs cannot be read: ``book_missing`` says why), with
    each book model's protocol differences (empty: compared) and coverage notes."""

    data: BookData
    science: ResultsChapter
    model: str
    tasks: list[str]
    book_config: str
    analogues: list[Figure] = field(default_factory=list)
    book: BookData | None = None
    book_science: ResultsChapter | None = None
    book_missing: str = ""
    differences: dict[str, list[str]] = field(default_factory=dict)
    coverage: dict[str, list[str]] = field(default_factory=dict)

    @property
    def matched(self) -> list[str]:
        """The book's models whose protocol matches the report's: the only ones compared."""
        return [model for model, why in self.differences.items() if not why]


def report_chapter(grid_config: str, book_config: str = "configs/default.yaml") -> ReportChapter:
    """A model report's chapter data: its own science, and the book's beside it (from the book's committed runs)."""
    data = load_book_data(grid_config)
    science = answers(data)
    model, tasks = data.config.models[0], list(data.config.tasks)
    chapter = ReportChapter(data, science, model, tasks, book_config, analogue_figures(science))
    try:
        chapter.book = load_book_data(book_config)
        chapter.book_science = answers(chapter.book, science.ranking)
    except PapaError as err:
        chapter.book_missing = str(err)
        return chapter
    book = chapter.book.config
    for book_model in book.models:
        chapter.differences[book_model] = protocol_differences(data.config, model, book, book_model, tasks)
        chapter.coverage[book_model] = coverage_notes(data.config, model, book, book_model)
    return chapter


def comparison_frame(chapter: ReportChapter) -> pd.DataFrame:
    """Per task, the report's model and each matched book model (each from its own grid's cells): the k = 0 score,
    the relative drops at half and all heads with their 95% intervals, and whether it is informative."""
    parts = [chapter.science.cells.assign(source="this model")]
    if chapter.book_science is not None and chapter.matched:
        book = chapter.book_science.cells
        matched = book[book["model"].isin(chapter.matched) & book["task"].isin(chapter.tasks)]
        parts.append(matched.assign(source="the book"))
    cells = pd.concat(parts, ignore_index=True)
    rows = []
    for (source, model, task), group in cells.groupby(["source", "model", "task"], sort=False):
        first = group.iloc[0]
        row = [task, model, source, int(first["total_heads"]), float(first["score_0"])]
        for at in ("half", "all"):
            hit = group[group["at"] == at]
            row.append(tuple(hit[["relative_drop", "relative_low", "relative_high"]].iloc[0]) if len(hit) else None)
        rows.append([*row, bool(first["informative"])])
    columns = ["task", "model", "source", "total_heads", "score_0", "drop_half", "drop_all", "informative"]
    order = {task: i for i, task in enumerate(chapter.tasks)}
    key = lambda s: s.map(order) if s.name == "task" else s != "this model"
    frame = pd.DataFrame(rows, columns=columns)
    return frame.sort_values(["task", "source"], key=key, kind="stable").reset_index(drop=True)


def comparison_display(frame: pd.DataFrame) -> T.Table:
    """:func:`comparison_frame` for reading."""
    drop = lambda v: None if v is None else W.with_interval(W.percent, *v)
    shown = T.key_text(frame).assign(drop_half=frame["drop_half"].map(drop), drop_all=frame["drop_all"].map(drop))
    kinds = {"task": "text", "model": "text", "source": "text", "total_heads": "int", "score_0": "score"}
    kinds |= {"drop_half": W.text, "drop_all": W.text, "informative": "yes/no"}
    headers = {"total_heads": "heads", "score_0": "k = 0", "drop_half": "drop, half constant"}
    headers["drop_all"] = "drop, all constant"
    missing = {"drop_half": "no converged, paired run at half of the heads"}
    missing["drop_all"] = "no converged, paired run with every head constant"
    notes = [
        f"Each row from its own grid's converged runs, paired by probe seed; each interval is the {W.INTERVAL_COVERS}."
    ]
    return T.table(shown, kinds, headers, missing, notes=notes)


def book_claims_table(chapter: ReportChapter) -> T.Table | str:
    """The book's own claims table (its results chapter's, not recomputed with this model), or
    :data:`BOOK_UNREADABLE`."""
    return verdicts_display(chapter.book_science.claims) if chapter.book_science is not None else BOOK_UNREADABLE


def protocol_table(chapter: ReportChapter) -> T.Table | str:
    """Per book model: compared or not, the protocol differences that keep it out, and the coverage notes; or
    :data:`BOOK_UNREADABLE`."""
    if chapter.book is None:
        return BOOK_UNREADABLE
    rows = []
    for model, why in chapter.differences.items():
        coverage = "; ".join(chapter.coverage.get(model, [])) or "the same"
        rows.append([model, not why, "; ".join(why) or "none", coverage])
    frame = pd.DataFrame(rows, columns=["model", "compared", "differences", "coverage"])
    kinds = {"model": "text", "compared": "yes/no", "differences": "text", "coverage": "text"}
    headers = {"model": "the book's model", "differences": "protocol differences (not compared when any)"}
    return T.table(frame, kinds, headers | {"coverage": "seeds and head fractions"})


def report_numbers(chapter: ReportChapter) -> dict[str, str]:
    """The words the chapter's prose glues: the model, its tasks, and the comparison in one sentence."""
    if chapter.book is None:
        beside = f"The book's runs ({chapter.book_config}) could not be read, so nothing stands beside this model: "
        beside += chapter.book_missing
    elif chapter.matched:
        others = [m for m in chapter.differences if m not in chapter.matched]
        beside = f"Beside it stand the book's {and_list(chapter.matched)}, whose protocol is this model's"
        if others:
            verb = "is" if len(others) == 1 else "are"
            beside += (
                f"; {and_list(others)} ran under another protocol and {verb} not compared (the table says what differs)"
            )
    else:
        beside = "No model of the book ran under this model's protocol (the table says what differs), so none is"
        beside += " compared: each grid's numbers stand alone"
    return {
        "report_model": chapter.model,
        "report_tasks": and_list(task_name(t) for t in chapter.tasks),
        "report_grid": chapter.data.config.name,
        "report_beside": beside + ".",
        "book_grid": chapter.book.config.name if chapter.book is not None else "",
    }
