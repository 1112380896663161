"""The "Which replacement?" chapter (``notebooks/08_replacements.md``): :func:`build` computes every frame, the
figure and every glued value it shows into one :class:`ReplacementsChapter`: every mode's drops from a basis of its
runs with the main grid's k = 0 runs, read by :mod:`papa.analysis.replacements`; the ``*_display`` functions format
its tables for reading."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import altair as alt
import pandas as pd

from papa.analysis import replacements as RP
from papa.analysis.basis import Basis, build_basis
from papa.analysis.figure_kit import AXIS_PX, TEXT_WIDTH, Figure, clean, finish, glue_figure, legend, words
from papa.book.load import BookData, read_manifest
from papa.book.table_format import Table, key_text, model_task_kinds, table
from papa.book.words import (
    DASH,
    REPLACEMENT_ANSWERS,
    REPLACEMENT_QUESTIONS,
    and_list,
    distinct_digits,
    interval_text,
    is_missing,
    points_text,
)
from papa.core import replacements as core_replacements
from papa.core.errors import PapaError
from papa.core.grid_schema import GridConfig, study_settings
from papa.pipeline.plan import STUDY_AIMS, chapter_study_minutes, config_dict, runs_dir

AT_WORDS = {"half": "half of the heads", "all": "every head"}


def replacement_runs(data: BookData) -> pd.DataFrame:
    """Every run of this chapter's studies (``chapter: replacements``), converged or not (tidy rows)."""
    studies = [s.name for s in data.config.studies if s.chapter == "replacements"]
    frames = [data.studies[name] for name in studies if name in data.studies]
    return pd.concat(frames) if frames else data.main.iloc[:0]


def replacement_bases(data: BookData, runs: pd.DataFrame | None = None) -> dict[str, Basis]:
    """Per mode, its basis: ``papa`` the main grid's, every other mode's runs (``runs``, default
    :func:`replacement_runs`) joined to the main grid's k = 0 runs, so that its drops pair with the same seeds."""
    runs = replacement_runs(data) if runs is None else runs
    base = data.main[data.main["k"] == 0]
    bases = {"papa": data.basis}
    for mode in RP.ALTERNATIVES:
        mine = runs[runs["replacement"] == mode] if len(runs) else runs
        if len(mine):
            bases[mode] = build_basis(pd.concat([base, mine]), data.records)
    return bases


@dataclass(frozen=True)
class ReplacementsChapter:
    """What the chapter shows, each frame from :mod:`papa.analysis.replacements`."""

    ranking: str
    cells: pd.DataFrame  # papa.analysis.replacements.replacement_cells
    extra: pd.DataFrame  # papa.analysis.replacements.extra_drops
    by_model: pd.DataFrame  # papa.analysis.replacements.pooled_by_model
    answers: pd.DataFrame  # papa.analysis.replacements.answers at all heads, with each answer's reason
    words: str  # which runs, in words
    figure: Figure | None = None  # fig_replacements (None: no mode has a pooled drop yet)
    glue: dict = field(default_factory=dict)  # every number and phrase of the prose, by glue key


def check_modes() -> None:
    """Every mode of the core table (:data:`papa.core.replacements.REPLACEMENT_TABLE`) is one the chapter reads:
    PAPA's constant, or an alternative (:data:`papa.analysis.replacements.ALTERNATIVES`) with its question
    (:data:`papa.book.words.REPLACEMENT_QUESTIONS`). Raises a :class:`~papa.core.errors.PapaError` naming the rest."""
    missing = [
        mode
        for mode in core_replacements.REPLACEMENT_TABLE
        if mode != RP.PAPA and (mode not in RP.ALTERNATIVES or mode not in REPLACEMENT_QUESTIONS)
    ]
    if missing:
        raise PapaError(
            f"The replacements chapter asks nothing about the replacement mode(s) {', '.join(missing)}",
            "Add each to papa.analysis.replacements.ALTERNATIVES and its question to "
            "papa.book.words.REPLACEMENT_QUESTIONS (or drop it from papa.core.replacements.REPLACEMENT_TABLE).",
        )


def build(data: BookData) -> ReplacementsChapter:
    """The chapter of a grid's committed runs (:func:`papa.book.load.load_book_data`)."""
    check_modes()
    chapter = replacement_answers(data)
    figure = fig_replacements(chapter) if len(chapter.by_model.dropna(subset=["value"])) else None
    glue = replacement_numbers(chapter, data.config)
    return dataclasses.replace(chapter, figure=figure, glue=glue)


def replacement_answers(data: BookData) -> ReplacementsChapter:
    """The chapter's frames (no figure or glue yet: :func:`build` adds them)."""
    ranking = data.config.rank.methods[0]
    ran = replacement_runs(data)
    bases = replacement_bases(data, ran)
    cells = RP.replacement_cells(bases, ranking)
    extra = RP.extra_drops(cells)
    modes = [m for m in bases if m != "papa"]
    n_runs = sum(int(bases[m].runs.loc[bases[m].runs["replacement"] == m, "run_id"].nunique()) for m in modes)
    n_all = int(ran.loc[ran["replacement"].isin(modes), "run_id"].nunique()) if len(ran) else 0
    left = f" ({n_all - n_runs} of {n_all} left out: not converged)" if n_all > n_runs else ""
    runs_words = f"{n_runs} converged probe results of {words(modes)}{left}" if modes else "no run of another mode yet"
    answers = answer_words(RP.answers(extra, "all"))
    return ReplacementsChapter(ranking, cells, extra, RP.pooled_by_model(cells), answers, runs_words)


def answer_words(answers: pd.DataFrame) -> pd.DataFrame:
    """:func:`papa.analysis.replacements.answers` in words: each alternative's ``question``, its ``answer``
    (:data:`papa.book.words.REPLACEMENT_ANSWERS`), its extra drop as ``number`` (:func:`points_with_interval`, in
    as many digits as tell the rows apart) and the ``reason`` (:func:`answer_reason`)."""
    triples = list(zip(answers["extra"], answers["low"], answers["high"]))
    defined = [t for t in triples if not is_missing(t[0])]  # every missing one reads "–" (NaN ≠ NaN would count)
    digits = distinct_digits(defined, lambda t, d: points_with_interval(*t, digits=d))
    numbers = [points_with_interval(*t, digits=digits) for t in triples]
    reasons = [answer_reason(row.replacement, row._asdict(), row.answer, digits) for row in answers.itertuples()]
    question = [REPLACEMENT_QUESTIONS[mode] for mode in answers["replacement"]]
    words = answers.assign(answer=[REPLACEMENT_ANSWERS[code] for code in answers["answer"]], reason=reasons)
    return words.assign(question=question, number=numbers)[["question", *answers.columns, "number", "reason"]]


def answer_reason(replacement: str, pooled: Mapping[str, float], verdict: str, digits: int = 1) -> str:
    """One sentence saying why ``verdict`` (:data:`papa.analysis.replacements.ANSWERS`) follows from ``pooled``
    (``low``, ``high`` in rates, ``n``; points with ``digits`` decimals)."""
    if verdict == "not_testable":
        return f"No informative task has a paired drop for both PAPA's constant and {replacement}."
    span = f"[{points_text(pooled['low'], digits)}, {points_text(pooled['high'], digits)}] points"
    pairs = f"over {pooled['n']} model/task pairs"
    if verdict in ("more", "less"):
        more, side = ("more", "above") if verdict == "more" else ("less", "below")
        lead = f"{replacement.capitalize()} loses {more} than PAPA's constant {pairs}"
        return f"{lead}: the extra drop's interval {span} lies {side} 0."
    return f"The extra drop's interval {span} {pairs} holds 0: {replacement} may do as well as PAPA's constant."


def points_with_interval(value: float, low: float, high: float, digits: int = 1) -> str:
    """An extra drop and its interval in percentage points: ``"+1.2 points [-0.3, +2.7]"``; "–" without a value."""
    if is_missing(value):
        return DASH
    span = "" if is_missing(low) or is_missing(high) else f" [{points_text(low, digits)}, {points_text(high, digits)}]"
    return f"{points_text(value, digits)} points{span}"


def replacement_numbers(science: ReplacementsChapter, grid: GridConfig) -> dict[str, str]:
    """The chapter's glue: per question (``q_<mode>``) the question, its answer, its pooled extra drop in points and
    its reason; which runs, the constants' training examples and the studies' cost."""
    numbers = {"replacement_runs": science.words, "estimate_examples": f"{grid.estimate.max_examples:,}"}
    numbers |= study_cost(grid)
    studies = [s for s in grid.studies if s.chapter == "replacements"]
    one_seed = {m for s in studies for m in s.models or grid.models if len(study_settings(grid, s, m)["seeds"]) == 1}
    numbers["one_seed_models"] = and_list(sorted(one_seed)) or "none"
    for row in science.answers.itertuples(index=False):
        key = f"q_{row.replacement}"
        numbers[f"{key}_question"] = row.question
        numbers[f"{key}_answer"] = row.answer
        numbers[f"{key}_number"] = row.number
        numbers[f"{key}_reason"] = row.reason
    return numbers


def study_cost(grid: GridConfig) -> dict[str, str]:
    """What the chapter's studies cost: their runs in the grid's manifest, their share of the machine's minutes (as
    the reproducibility page counts the grid's: :func:`~papa.pipeline.plan.chapter_study_minutes`) and the aim
    (:data:`~papa.pipeline.plan.STUDY_AIMS`)."""
    config = config_dict(grid)
    runs, minutes = chapter_study_minutes(config, read_manifest(runs_dir(config)), "replacements")
    cost = {"replacement_study_runs": str(runs), "replacement_study_minutes": f"{minutes:.1f}"}
    return cost | {"replacement_study_aim": f"{STUDY_AIMS['replacements']:.0f}"}


def mode_drops_display(science: ReplacementsChapter) -> Table:
    """Per model, task and ``at``: each mode's relative drop with its 95% interval (one column per mode)."""
    cells = science.cells
    if cells.empty:
        return table(pd.DataFrame(), {"task": "text"})
    drops = zip(cells["relative_drop"], cells["relative_low"], cells["relative_high"])
    cell_text = [None if math.isnan(d) else interval_text(d, lo, hi) for d, lo, hi in drops]
    pivot = dict(index=["model", "task", "at"], columns="replacement", values="cell", aggfunc="first")
    wide = cells.assign(cell=cell_text).pivot_table(**pivot).reset_index()
    modes = [m for m in RP.MODES if m in wide.columns]
    ran = set(zip(cells["model"], cells["at"], cells["replacement"]))  # a mode not run at a model's count of heads
    keys = list(zip(wide["model"], wide["at"]))
    for m in modes:
        wide[m] = [v if (*key, m) in ran else "not run" for key, v in zip(keys, wide[m])]
    wide = key_text(wide).assign(heads=[AT_WORDS[a] for a in wide["at"]])
    # text: a drop and its interval may wrap
    kinds = model_task_kinds(wide) | {"heads": "text"} | {m: "text" for m in modes}
    missing = {m: "no converged pair of runs, or a k = 0 score within noise of zero" for m in modes}
    return table(wide.where(wide.notna(), None), kinds, headers={"heads": "constant"}, missing=missing)


def by_model_display(science: ReplacementsChapter) -> Table:
    """Per model, ``at`` and mode: the mean relative drop over its informative tasks with its pooled interval."""
    by = science.by_model
    drops = [interval_text(*v) for v in zip(by["value"], by["low"], by["high"])]
    frame = by.assign(heads=[AT_WORDS[a] for a in by["at"]], drop=drops)
    kinds = {"model": "text", "heads": "text", "replacement": "text", "drop": "text", "n": "int", "tasks": "text"}
    headers = {"heads": "constant", "drop": "mean relative drop [95% interval]", "n": "tasks averaged"}
    return table(frame, kinds, headers=headers)


def answers_display(science: ReplacementsChapter) -> Table:
    """The three questions at every head constant: answer, pooled extra drop over PAPA (points) and reason."""
    kinds = {"question": "text", "answer": "text", "number": "text", "n": "int", "reason": "text"}
    return table(science.answers, kinds, headers={"number": "extra drop over PAPA [95% interval]", "n": "pairs"})


def glue_replacement_figure(chapter: ReplacementsChapter) -> None:
    """Glue the chapter's figure, or, while no mode has a pooled drop, a sentence saying so in its place."""
    from myst_nb import glue

    if chapter.figure is not None:
        glue_figure(chapter.figure)
    else:
        why = "No mode has a pooled drop yet: no informative task has converged runs of a mode."
        glue("fig-replacements", why, display=False)
        glue("fig-replacements-caption", "The modes side by side (none yet).", display=False)


def fig_replacements(science: ReplacementsChapter) -> Figure:
    """Per model: each mode's mean relative drop with its pooled 95% interval, one colour per share of heads."""
    frame = science.by_model.dropna(subset=["value"])
    if frame.empty:
        raise ValueError("No mode has a pooled drop to draw")
    data = clean(frame.assign(constant=[AT_WORDS[a] for a in frame["at"]]))
    order = [m for m in RP.MODES if m in set(data["replacement"])]
    base = alt.Chart(data).encode(
        x=alt.X("replacement:N", sort=order, title="what replaces the heads"),
        color=alt.Color("constant:N", legend=legend("heads constant")),
        xOffset="constant:N",
    )
    drops = [alt.Tooltip(f"{c}:Q", format=".1%") for c in ("value", "low", "high")]
    points = base.mark_point(filled=True, size=60).encode(
        y=alt.Y("value:Q", axis=alt.Axis(format="%"), title="mean relative drop"),
        tooltip=["model:N", "replacement:N", "constant:N", *drops, "n:Q", "tasks:N"],
    )
    bars = base.mark_rule().encode(y="low:Q", y2="high:Q")
    models = sorted(set(data["model"]))
    width = (TEXT_WIDTH - len(models) * AXIS_PX) // max(len(models), 1)
    chart = (bars + points).properties(width=width, height=220).facet(column=alt.Column("model:N", title=None))
    caption = (
        "Per model, the mean relative drop over its informative tasks when the heads are replaced by PAPA's "
        "constant, uniform attention, the head's mean output or zero, with the pooled 95% bootstrap interval, at half "
        f"of the heads ({science.ranking} order) and with every head replaced."
    )
    return finish(chart, caption, "fig-replacements")
