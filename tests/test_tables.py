"""papa.book.tables: display tables by hand — formatted cells, dashes with footnotes instead of NaN,
no index, every row, key columns first; the ranking tie; pipes inside Markdown table cells."""

from __future__ import annotations

import math
import re

import pandas as pd
from hand_cells import cell as hand_cell
from hand_cells import cells as hand_cells
from hand_cells import table_cells
from test_results import grid, result, write

from papa.analysis.basis import build_basis, retained_gains
from papa.analysis.results import floors_table, load_results, read_results, summarise
from papa.book import words as W
from papa.book.load import floors_display
from papa.book.table_format import auto_table, enable_table_display, table
from papa.book.tables import retained_gains_display, scores_display
from papa.book.words import DASH, NBSP, score_spread

BAD = re.compile(r"\bNaN\b|\bnan\b|\bNone\b|rows × |\d+ rows")


def cells(html: str) -> list[str]:
    return re.findall(r"<td[^>]*>(.*?)</td>", html)


def test_cell_formats():
    assert score_spread(0.81234, 0.02) == f"0.812{NBSP}±{NBSP}0.020"  # one unbreakable cell
    assert score_spread(0.0, 0.0) == f"0.000{NBSP}±{NBSP}0.000"
    assert score_spread(0.8, math.nan) == "0.800" and score_spread(math.nan, 0.1) is None
    assert W.with_interval(W.score, 0.81, 0.8, 0.84) == f"0.810{NBSP}[0.800,{NBSP}0.840]"
    assert W.with_interval(W.score, 0.81, None, 0.84) == "0.810"


def test_missing_cells_are_dashes_with_a_footnote_and_nothing_is_truncated():
    frame = pd.DataFrame(
        {"name": [f"run {i}" for i in range(205)], "drop": [0.043] * 204 + [math.nan], "score": [0.333333] * 205}
    )
    shown = table(
        frame,
        {"drop": "percent", "name": "text", "score": "score"},
        {"drop": "relative drop"},
        {"drop": "the k = all run failed"},
    )
    html = shown._repr_html_()
    assert shown.columns == ["relative drop", "name", "score"]  # key columns in the order asked
    assert len(re.findall(r"<tr>", html)) == 1 + 205  # header and every row
    assert cells(html)[:3] == ["4.3%", "run 0", "0.333"]
    assert f"<td>{DASH}<sup>a</sup></td>" in html and f"<sup>a</sup>{NBSP}{DASH}: the k = all run failed" in html
    assert not BAD.search(html) and "<th></th>" not in html  # no NaN, no truncation note, no index column
    assert (
        "white-space:nowrap" in html and "overflow-x:auto" in html
    )  # cells stay on one line; a wide table scrolls in its box


def test_auto_table_turns_the_index_into_columns_and_formats_by_kind():
    frame = pd.DataFrame(
        {
            "task": ["sst2", "cola"],
            "k": [0, 36],
            "relative_drop": [0.0, 0.07585],
            "mean": [0.9, math.nan],
            "real": [True, False],
        }
    ).set_index("task")
    shown = auto_table(frame)
    assert shown.columns == ["task", "k", "relative drop", "mean", "real"]
    assert shown.rows == [["SST-2", "0", "0.0%", "0.900", "yes"], ["CoLA", "36", "7.6%", None, "no"]]
    assert not BAD.search(shown._repr_html_())


def test_enable_table_display_formats_every_dataframe():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    enable_table_display()
    data, _ = shell.display_formatter.format(pd.DataFrame({"score": [0.5, math.nan]}))
    assert "papa-table" in data["text/html"] and not BAD.search(data["text/html"])


def test_scores_display_one_cell_per_k(tmp_path):
    shown = scores_display(summarise(load_results(grid(tmp_path))))
    frame = table_cells(shown)
    assert shown.columns == ["task", "ranking", "k = 0", "k = 36", "k = 72 (all)"]
    assert frame.iloc[0].tolist() == [
        "SST-2",
        "gates",
        f"0.820{NBSP}±{NBSP}0.020",
        f"0.810{NBSP}±{NBSP}0.020",
        f"0.720{NBSP}±{NBSP}0.020",
    ]


def test_floors_display_names_the_model_when_there_are_several_and_dashes_a_missing_floor(tmp_path):
    runs = {
        f"{m}_{s}": result(model=m, seed=s, score=0.8 + 0.001 * s) for m in ("minilm-l6", "minilm-l3") for s in (1, 2)
    }
    two = floors_display(floors_table(load_results(write(tmp_path / "two", runs))))
    assert two.columns[:2] == ["model", "task"] and ["minilm-l3", "SST-2"] == two.rows[0][:2]
    one = floors_display(
        floors_table(load_results(write(tmp_path / "one", {k: v for k, v in runs.items() if "l6" in k})))
    )
    assert one.columns == [
        "task",
        "informative",
        "metric",
        "majority class",
        "attention-free probe",
        "k = 0 probe",
        "k = 0, 95% interval",
    ]
    assert one.rows == [
        ["SST-2", "yes", "accuracy", "0.500", None, f"0.802{NBSP}±{NBSP}0.001", None]
    ]  # no interval given: margin rule
    assert "attention-free probe (embedding layer only) of this pair ran" in one._repr_html_()
    assert not BAD.search(one._repr_html_())


def test_retained_gains_display_puts_drop_and_gain_first(tmp_path):
    records = read_results(grid(tmp_path))
    for record in records.values():  # 100 dev examples, the first round(100 × score) of them right
        right = round(100 * record["score"])
        record["dev"] = {
            "predictions": [1] * right + [0] * (100 - right),
            "labels": [1] * 100,
            "label_names": ["a", "b"],
        }
    shown = retained_gains_display(retained_gains(build_basis(load_results(records), records)))
    assert shown.columns[:5] == ["task", "ranking", "k", "relative drop", "retained gain"]
    full = [row for row in shown.rows if row[2] == "72"][0]
    assert [int(row[2]) for row in shown.rows] == sorted(int(row[2]) for row in shown.rows)  # by k within the task
    # drop (0.82 − 0.72) / 0.82; gain (0.72 − 0.56) / (0.82 − 0.56) over the attention-free floor
    assert full[3:5] == [f"{(0.82 - 0.72) / 0.82:.1%}", f"{(0.72 - 0.56) / (0.82 - 0.56):.1%}"]


def test_an_empty_result_is_an_empty_table():
    from papa.book.tables import rising_display

    shown = rising_display(pd.DataFrame())
    assert shown.rows == [] and shown.columns[0] == "run"
    assert (
        shown._repr_html_()
        == '<p class="papa-table-empty"><em>Nothing to show: no run of this grid belongs in this table.</em></p>'
    )


# -- the tables with intervals ---------------------------------------------------------------------
def _main_rows() -> pd.DataFrame:
    from papa.analysis.drop_tables import MAIN_COLUMNS

    rows = [
        ("m", "sst2", "none", 0, 0.0, 8, "accuracy", 0.85, 0.01, 0.84, 0.86, 3) + (math.nan,) * 6 + (None, math.nan),
        (
            "m",
            "sst2",
            "gates",
            4,
            0.5,
            8,
            "accuracy",
            0.848,
            0.0,
            0.848,
            0.848,
            3,
            -0.0025,
            -0.0075,
            0.0,
            0.0029,
            0.0,
            0.0088,
            False,
            400,
        ),
        (
            "m",
            "sst2",
            "all",
            8,
            1.0,
            8,
            "accuracy",
            0.70,
            math.nan,
            0.70,
            0.70,
            1,
            -0.15,
            -0.1713,
            -0.13,
            0.1765,
            0.153,
            0.2,
            True,
            400,
        ),
    ]
    frame = pd.DataFrame(rows, columns=MAIN_COLUMNS)
    return frame.assign(converged=["3 of 3", "2 of 3", "1 of 1"])


def test_main_table_display_cells():
    from papa.book.interval_tables import main_table_display

    shown = main_table_display(_main_rows())
    cells = table_cells(shown)
    assert list(cells.columns) == [
        "task",
        "constant heads",
        "ranking",
        "score ± seed std",
        "difference to k = 0 [95% interval]",
        "relative drop [95% interval]",
        "real?",
        "seed range",
        "seeds",
        "converged seeds",
    ]
    assert cells["constant heads"].tolist() == ["0 of 8 (none)", "4 of 8 (1/2)", "8 of 8 (all)"]
    assert cells.iloc[2]["difference to k = 0 [95% interval]"] == f"-0.150{NBSP}[-0.171,{NBSP}-0.130]"
    assert cells.iloc[2]["relative drop [95% interval]"] == f"17.6%{NBSP}[15.3%,{NBSP}20.0%]"
    assert cells.iloc[1]["real?"] == "no" and cells.iloc[2]["score ± seed std"] == "0.700" and shown.rows[0][4] is None
    html = shown._repr_html_()
    assert "nan" not in html.lower() and f"{DASH}<sup>a</sup>" in html and "k = 0 is the reference" in html


def test_verdicts_and_paper_table_display():
    from papa.analysis.analogues import paper_table
    from papa.book.interval_tables import paper_table_display, verdicts_display

    claims = pd.DataFrame(
        [("1. Half", "≈0–2%", "1.3% [0.1%, 2.0%]", "reproduced", "Upper end 2.0%.", "rule")],
        columns=["claim", "paper", "ours", "verdict", "reason", "rule"],
    )
    assert verdicts_display(claims).columns == [
        "claim",
        "verdict",
        "our runs (pooled 95% interval)",
        "why",
        "the paper",
        "rule and runs counted",
    ]
    summary = pd.DataFrame(
        [
            ("m", "sst2", r, k, k / 8, 8, "cached", "all", "accuracy", s, 0.0, s, s, 3)
            for r, k, s in (("none", 0, 0.8), ("gates", 4, 0.78), ("all", 8, 0.72))
        ],
        columns=[
            "model",
            "task",
            "ranking",
            "k",
            "fraction",
            "total_heads",
            "mode",
            "probe_input",
            "metric",
            "mean",
            "std",
            "min",
            "max",
            "n_seeds",
        ],
    )
    floors = pd.DataFrame(
        {"model": ["m"], "task": ["sst2"], "informative": [True], "majority": [0.5], "attention_free": [0.6]}
    )
    drops = hand_cells(
        [hand_cell("m", "sst2", "half", 0.025, [0.02, 0.03]), hand_cell("m", "sst2", "all", 0.10, [0.09, 0.11])]
    )
    shown = table_cells(paper_table_display(paper_table(summary, floors, drops)))
    assert shown["task"].tolist() == ["SST-2", "average of its informative tasks"]
    assert shown.iloc[0][["drop, half", "drop, all"]].tolist() == ["2.5%", "10.0%"]  # a task's drop: the cell's
    # the average: the pooled drop with the 2.5th and 97.5th percentiles of its two resampled drops (numpy's linear
    # interpolation: 2.025% and 2.975%, 9.05% and 10.95%, each printed to one decimal from its float)
    assert shown.iloc[1][["drop, half", "drop, all", "largest drop, all"]].tolist() == [
        f"2.5%{NBSP}[2.0%,{NBSP}3.0%]",
        f"10.0%{NBSP}[9.0%,{NBSP}10.9%]",
        "10.0%",
    ]


def test_constant_heads_are_named_by_the_papers_fraction():
    from papa.book.words import heads_words

    assert [heads_words(k, 36) for k in (0, 18, 32, 34, 36)] == [
        "0 of 36 (none)",
        "18 of 36 (1/2)",
        f"32 of 36 (≈{NBSP}7/8)",
        f"34 of 36 (≈{NBSP}15/16)",
        "36 of 36 (all)",
    ]
    assert heads_words(5, 36) == "5 of 36 (5/36)" and heads_words(63, 72) == "63 of 72 (7/8)"


def test_no_number_shows_a_negative_zero():
    from papa.book.words import percent, score, signed, with_interval

    assert (score(-0.0001), percent(-0.00001), signed(-0.0004), signed(0.0004), signed(-0.002)) == (
        "0.000",
        "0.0%",
        "0.000",
        "0.000",
        "-0.002",
    )
    assert (
        with_interval(signed, -0.0001, -0.0102, 0.0) == f"0.000{NBSP}[-0.010,{NBSP}0.000]"
        and with_interval(percent, -0.00001, -0.01, 0.0) == f"0.0%{NBSP}[-1.0%,{NBSP}0.0%]"
    )


def test_an_interval_has_one_precision_and_an_end_that_rounds_to_zero_reads_0():
    """One precision per column: an interval's ends have the value's digits ("[-0.0001%, 0.5%]" and
    "[-0.004, +0.000001]" mixed them), and an end that rounds to zero reads 0 without a sign, whichever side it lies
    on; whether the interval excludes 0 is the verdict beside it ("real?", "beats random"), decided unrounded."""
    from papa.book.words import interval_text, percent, signed, with_interval

    assert with_interval(signed, 0.018, 0.0004, 0.036) == f"+0.018{NBSP}[0.000,{NBSP}+0.036]"
    assert with_interval(signed, -0.004, -0.0042, 0.000001) == f"-0.004{NBSP}[-0.004,{NBSP}0.000]"
    assert with_interval(percent, 0.002, -0.000001, 0.005) == f"0.2%{NBSP}[0.0%,{NBSP}0.5%]"
    assert interval_text(0.012, -0.0004, 0.02) == "1.2% [0.0%, 2.0%]"


def test_every_drop_interval_in_running_text_is_written_alike():
    """The claims' glued numbers and the replacements chapter's drops write their ends as the tables do (one
    precision, an end that rounds to zero reads 0), and a drop in percent has percent ends ("[4.5%, 20.1%]", not
    "[4.5, 20.1]"); differences in points keep their signed points."""
    from papa.book.chapters.replacements import points_with_interval
    from papa.book.words import interval_text

    assert interval_text(0.0004, -0.0003, 0.021) == "0.0% [0.0%, 2.1%]"
    assert interval_text(float("nan"), 0.01, 0.021) == "\u2013"
    assert interval_text(0.123, 0.045, 0.201) == "12.3% [4.5%, 20.1%]"  # the replacements chapter's drops
    assert points_with_interval(0.012, -0.003, 0.027) == "+1.2 points [-0.3, +2.7]"  # its extra drops
    assert points_with_interval(0.012, -0.003, 0.027, digits=2) == "+1.20 points [-0.30, +2.70]"


def test_two_extra_drops_that_differ_never_print_alike():
    """ "+16.7 points [+15.0, +18.5]" stood for both the mean and the zero replacement: the answers' column gets the
    one more digit that tells them apart, every row at the same precision; equal numbers may print alike."""
    import pandas as pd

    from papa.book.chapters.replacements import answer_words
    from papa.book.words import distinct_digits

    answers = pd.DataFrame(
        {
            "replacement": ["uniform", "mean", "zero"],
            "answer": ["more", "more", "more"],
            "extra": [0.05, 0.16712, 0.16684],
            "low": [0.03, 0.15012, 0.14996],
            "high": [0.07, 0.18488, 0.18512],
            "n": [10, 10, 10],
        }
    )
    numbers = list(answer_words(answers)["number"])
    assert numbers == [
        "+5.00 points [+3.00, +7.00]",
        "+16.71 points [+15.01, +18.49]",
        "+16.68 points [+15.00, +18.51]",
    ]
    assert "[+15.01, +18.49] points lies above 0" in answer_words(answers)["reason"][1]
    assert distinct_digits([(1.0,), (1.0,)], lambda r, d: f"{r[0]:.{d}f}") == 1  # the same numbers: no more digits
    nan = float("nan")
    untestable = answers.assign(extra=[0.05, nan, nan], low=[0.03, nan, nan], high=[0.07, nan, nan])
    untestable = untestable.assign(answer=["more", "not_testable", "not_testable"])
    assert list(answer_words(untestable)["number"]) == ["+5.0 points [+3.0, +7.0]", "\u2013", "\u2013"]
    assert distinct_digits([0.11111, 0.11112], lambda r, d: f"{r:.{d}f}") == 3  # apart only beyond: the most


def test_every_score_table_labels_each_share_by_its_real_counts():
    from papa.book.tables import scores_display

    rows = [("s", 36, k, r) for k, r in ((0, "none"), (32, "gates"), (36, "all"))] + [
        ("b", 72, k, r) for k, r in ((0, "none"), (63, "gates"), (72, "all"))
    ]
    summary = pd.DataFrame(
        [(m, "sst2", r, k, k / t, t, "cached", "all", "accuracy", 0.8, 0.01, 0.79, 0.81, 3) for m, t, k, r in rows],
        columns=[
            "model",
            "task",
            "ranking",
            "k",
            "fraction",
            "total_heads",
            "mode",
            "probe_input",
            "metric",
            "mean",
            "std",
            "min",
            "max",
            "n_seeds",
        ],
    )
    columns = scores_display(summary).columns
    assert columns[-3:] == ["no head constant", f"≈{NBSP}7/8 of the heads (32 of 36, 63 of 72)", "all heads constant"]


def test_retained_gain_of_an_uninformative_task_is_not_shown():
    from papa.book.tables import NOISY_GAIN, retained_gains_display

    gains = pd.DataFrame(
        [
            ("m", "cola", "all", 8, 1.0, 0.01, 3, 1.0, float("nan"), False),
            ("m", "sst2", "all", 8, 1.0, 0.7, 3, 0.1, 0.6, True),
        ],
        columns=[
            "model",
            "task",
            "ranking",
            "k",
            "fraction",
            "score",
            "n_pairs",
            "relative_drop",
            "retained_gain",
            "informative",
        ],
    )
    shown = retained_gains_display(gains)
    column = shown.columns.index("retained gain")
    assert [row[column] for row in shown.rows] == [None, "60.0%"] and NOISY_GAIN in repr(shown)


def test_a_relative_drop_from_a_k0_score_within_noise_of_zero_is_a_dash_with_a_note():
    from papa.book.interval_tables import main_table_display

    rows = _main_rows()
    # a resample's k = 0 score was ≤ 0: the basis gives no ratio (tests/test_basis.py), and the table says why
    rows.loc[2, ["relative_drop", "relative_low", "relative_high"]] = math.nan
    shown = main_table_display(rows)
    column = shown.columns.index("relative drop [95% interval]")
    assert shown.rows[2][column] is None and shown.rows[1][column] == f"0.3%{NBSP}[0.0%,{NBSP}0.9%]"
    assert "the k = 0 score is within noise of zero" in repr(shown)


def test_an_empty_paper_table_says_so_in_one_sentence():
    from papa.book.interval_tables import paper_table_display

    assert "No run to tabulate." in paper_table_display(pd.DataFrame())._repr_html_()


def test_a_model_report_whose_book_cannot_be_read_shows_one_sentence_in_each_book_table():
    from papa.book import report_chapter as SC

    chapter = SC.ReportChapter(None, None, "m", ["sst2"], "configs/missing.yaml", book_missing="no such file")
    assert SC.protocol_table(chapter) == SC.book_claims_table(chapter) == SC.BOOK_UNREADABLE


def test_a_runs_score_on_the_chapters_basis_averages_its_converged_seeds():
    """The appendix's Score column must agree with the chapters (converged seeds only: minilm-l6 NER all heads read
    0.722 there against 0.718 in the results); a run without a converged seed falls back to every seed's mean."""
    from papa.analysis.basis import basis_score

    seed = lambda score, converged: {"score": score, "convergence": {"converged": converged}}
    assert basis_score([seed(0.7, True), seed(0.8, False), seed(0.9, True)]) == (0.8, True)
    assert basis_score([seed(0.7, None), {"score": 0.8}]) == (0.75, False)
    assert basis_score([]) == (None, False)
