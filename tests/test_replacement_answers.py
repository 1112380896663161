"""The replacement comparison on hand-made cells: extra drops paired resample by resample, pooled means
with their intervals, and each answer of the rule the method chapter states."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from papa.analysis import replacements as RP
from papa.book.chapters.replacements import answer_reason, answer_words
from papa.book.words import REPLACEMENT_QUESTIONS
from tests.hand_cells import cell


def _cells(rows: list[tuple[str, str, str, str, float, list[float]]]) -> pd.DataFrame:
    return pd.DataFrame(
        [cell(model, task, at, drop, samples) | {"replacement": mode} for mode, model, task, at, drop, samples in rows]
    )


def test_an_extra_drop_is_the_difference_resample_by_resample():
    """Two modes' resampled drops are paired (one stream per dev set): the extra drop's samples are their
    differences, so a shift common to both sides cancels where independent intervals would overlap."""
    papa = [0.00, 0.10, 0.20, 0.30]
    uniform = [0.05, 0.15, 0.25, 0.35]  # always 5 points more, though the two ranges overlap
    extra = RP.extra_drops(
        _cells([("papa", "m", "sst2", "all", 0.15, papa), ("uniform", "m", "sst2", "all", 0.20, uniform)])
    )
    assert len(extra) == 1
    row = extra.iloc[0]
    assert (row.drop_papa, row.relative_drop, row.replacement) == (0.15, 0.20, "uniform")
    assert row.extra == pytest.approx(0.05) and row.low == pytest.approx(0.05) and row.high == pytest.approx(0.05)
    assert np.allclose(row.samples, [0.05] * 4)


def test_a_mode_without_papa_or_without_a_drop_has_no_extra_drop():
    rows = [
        ("papa", "m", "sst2", "all", 0.1, [0.1, 0.1]),
        ("zero", "m", "sst2", "half", 0.3, [0.3, 0.3]),  # PAPA has no half cell here
        ("zero", "m", "sst2", "all", 0.3, [0.3, math.nan]),  # s̄₀ ≤ 0 on a resample: the basis gives no drop
    ]
    assert RP.extra_drops(_cells(rows)).empty


def test_answers_average_informative_pairs_and_follow_the_rule():
    rows = []
    for task, papa, mean, zero, uniform in (("sst2", 0.02, 0.10, 0.40, 0.01), ("mrpc", 0.04, 0.12, 0.30, 0.06)):
        rows += [
            ("papa", "m", task, "all", papa, [papa - 0.01, papa, papa + 0.01]),
            ("mean", "m", task, "all", mean, [mean - 0.01, mean, mean + 0.01]),
            ("zero", "m", task, "all", zero, [zero + 0.01, zero, zero - 0.01]),
            ("uniform", "m", task, "all", uniform, [uniform + 0.03, uniform, uniform - 0.03]),
        ]
    rows.append(("papa", "m", "cola", "all", 0.5, [0.5, 0.5, 0.5]))
    rows.append(("zero", "m", "cola", "all", 0.0, [0.0, 0.0, 0.0]))
    cells = _cells(rows)
    cells.loc[cells["task"] == "cola", "informative"] = False  # left out of every pooled number
    extra = RP.extra_drops(cells)
    table = RP.answers(extra, "all").set_index("replacement")
    mean = table.loc["mean"]
    assert (mean["n"], mean["models"]) == (2, "m")
    assert (
        mean["extra"] == pytest.approx(0.08)
        and mean["low"] == pytest.approx(0.08)
        and mean["high"] == pytest.approx(0.08)
    )
    assert table.loc["zero", "extra"] == pytest.approx(
        ((0.40 - 0.02) + (0.30 - 0.04)) / 2
    )  # cola (papa 0.5, zero 0.0) is not informative
    uniform = table.loc["uniform"]  # resampled means 0.045, 0.005, −0.035: the interval holds 0
    assert uniform["extra"] == pytest.approx(0.005) and uniform["low"] < 0 < uniform["high"]
    assert table.loc["mean", "answer"] == "more" and table.loc["zero", "answer"] == "more"
    assert table.loc["uniform", "answer"] == "no_difference"
    assert answer_reason("uniform", table.loc["uniform"], "no_difference") == (
        "The extra drop's interval [-3.3, +4.3] points over 2 model/task "
        "pairs holds 0: uniform may do as well as PAPA's constant."
    )
    words = answer_words(RP.answers(extra, "all")).set_index("replacement")
    assert list(words["question"]) == [REPLACEMENT_QUESTIONS[mode] for mode in RP.ALTERNATIVES]
    assert (words.loc["zero", "answer"], words.loc["uniform", "answer"]) == ("yes", "no difference shown")
    assert words.loc["uniform", "reason"] == answer_reason("uniform", table.loc["uniform"], "no_difference")


@pytest.mark.parametrize(
    ("pooled", "expected"),
    [
        ({"n": 3, "low": 0.001, "high": 0.2}, "more"),
        ({"n": 3, "low": -0.2, "high": -0.001}, "less"),
        ({"n": 3, "low": 0.0, "high": 0.2}, "no_difference"),  # an interval touching 0 holds it
        ({"n": 0, "low": math.nan, "high": math.nan}, "not_testable"),
    ],
)
def test_the_answer_rule(pooled, expected):
    assert RP.answer(pooled) == expected


def test_pooled_by_model_reads_each_modes_informative_cells():
    rows = [("papa", "m", t, "all", d, [d, d]) for t, d in (("sst2", 0.1), ("mrpc", 0.3))]
    rows += [("zero", "m", "sst2", "all", 0.5, [0.4, 0.6])]
    table = RP.pooled_by_model(_cells(rows))
    assert list(zip(table["replacement"], table["value"], table["n"])) == [
        ("papa", pytest.approx(0.2), 2),
        ("zero", 0.5, 1),
    ]
    assert table.loc[1, "low"] == pytest.approx(0.405) and table.loc[1, "high"] == pytest.approx(0.595)
