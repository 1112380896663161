"""The results chapter (``notebooks/04_results.md``): every frame, figure and glued number it shows, computed once
by :func:`build_results` (drops, verdicts and intervals from :func:`papa.book.chapter_answers.build_answers`), and its
two figures of heads: the order in which one ranking makes heads constant, and a few of one task's constant matrices
(which ranking and which constants are shown is decided here, from the book's data)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from papa.analysis.basis import retained_gains
from papa.analysis.claims import PAPER_NUMBERS
from papa.analysis.figure_kit import Figure, task_name
from papa.analysis.run_figures import fig_constants, fig_head_ranking
from papa.book import chapter_answers as CA
from papa.book.load import BookData, headline_numbers
from papa.book.studies import drop_checks, drop_checks_summary
from papa.core.constants import load_constants
from papa.pipeline.plan import ROOT


@dataclass(frozen=True)
class ResultsChapter:
    """What the results chapter shows, each frame documented where it is built."""

    data: BookData
    answers: CA.ChapterAnswers  # the main table, random baseline, claims and analogues on the one basis
    drops_by_model: pd.DataFrame  # chapter_answers.model_drops_display_frame: the front page's table
    analogues: list[Figure]  # chapter_answers.analogue_figures: the paper's analogues (a)-(c)
    drop_checks: pd.DataFrame  # studies.drop_checks of the largest drop with every head constant (empty: none)
    paper_numbers: pd.DataFrame  # the numbers the paper states, with where it states them
    retained: pd.DataFrame  # basis.retained_gains: the retained gain over the higher floor beside each drop
    glue: dict = field(default_factory=dict)  # every number and phrase of the prose, by glue key


def build_results(data: BookData) -> ResultsChapter:
    """The results chapter of a grid's committed runs (:func:`papa.book.load.load_book_data`)."""
    glue = headline_numbers(data)
    answers = CA.build_answers(data, glue["ranking"])
    glue |= CA.answer_numbers(answers)  # verdicts and drops with intervals, on the one basis
    largest = CA.largest_drop(answers)
    checks = pd.DataFrame() if largest is None else drop_checks(data, str(largest["model"]), str(largest["task"]))
    glue["largest_drop_summary"] = drop_checks_summary(checks)
    return ResultsChapter(
        data=data,
        answers=answers,
        drops_by_model=CA.model_drops_display_frame(answers),
        analogues=CA.analogue_figures(answers, data),
        drop_checks=checks,
        paper_numbers=pd.DataFrame(PAPER_NUMBERS, columns=["quantity", "the paper", "where the paper states it"]),
        retained=retained_gains(data.basis),
        glue=glue,
    )


def shown_ranking(data: BookData, ranking: str) -> str:
    """The ``<model>__<task>__<method>`` stem of the ranking the chapter draws: ``ranking`` on the largest model's
    first informative task, else the largest model's first ranking of any kind."""
    floors = data.floors
    pairs = zip(floors["model"], floors["task"], floors["informative"])
    informative = [f"{m}__{t}__{ranking}" for m, t, ok in pairs if ok]
    candidates = [stem for stem in informative if stem in data.rankings] or sorted(data.rankings)[:1]
    return max(candidates, key=lambda stem: len(data.rankings[stem]))


def ranking_figure(data: BookData, stem: str) -> tuple[Figure, dict[str, str]]:
    """The heatmap of ranking ``stem`` (:func:`shown_ranking`) with the k values the main grid ran, and the words the
    prose glues: ``ranking_model``, ``ranking_task`` (display name), ``ranking_method``."""
    heads = data.rankings[stem]
    model, task, method = stem.split("__")
    layers, per_layer = 1 + max(layer for layer, _ in heads), 1 + max(head for _, head in heads)
    figure = fig_head_ranking(heads, layers, per_layer, k_values=sorted(set(data.main["k"])), source=stem)
    return figure, {"ranking_model": model, "ranking_task": task_name(task), "ranking_method": method}


def constants_figure(data: BookData, stem: str) -> tuple[Figure, dict]:
    """Four constant matrices (the first two heads of the first and the last layer) of the shown ranking's model and
    task (else of the grid's first constants file), and the glued ``constants_task`` and ``constants_examples``."""
    folder = ROOT / "book" / "runs" / data.config.name / "artifacts" / "constants"
    pair = folder / f"{stem.rsplit('__', 1)[0]}.safetensors"
    constant_set = load_constants(pair if pair.is_file() else sorted(folder.glob("*.safetensors"))[0])
    last = constant_set.constants.shape[0] - 1  # [layers, heads, L, L]
    task, examples = constant_set.meta["task"], constant_set.meta["num_examples"]
    picks = [(0, 0), (0, 1), (last, 0), (last, 1)]
    figure = fig_constants(constant_set.constants, picks=picks, source=f"{task_name(task)} ({examples:,} examples)")
    return figure, {"constants_task": task, "constants_examples": examples}
