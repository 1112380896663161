"""The results chapter (``notebooks/04_results.md``): every frame, figure and glued number it shows, computed once
by :func:`build_results` (drops, verdicts and intervals from :func:`papa.book.chapter_answers.build_answers`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from papa.analysis.basis import retained_gains
from papa.analysis.claims import PAPER_NUMBERS
from papa.analysis.figure_kit import Figure
from papa.book import chapter_answers as CA
from papa.book.load import BookData, headline_numbers
from papa.book.studies import drop_checks, drop_checks_summary


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
