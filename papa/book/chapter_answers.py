"""The results chapter's answers with intervals, read once per grid from the main grid's one basis (converged runs,
drops paired by probe seed): the main table, the random baseline, the paper's analogues and the claims
(:func:`build_answers`), and the numbers of the prose and the front page (:func:`answer_numbers`)."""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass

import altair as alt
import pandas as pd

from papa.analysis import analogues as P
from papa.analysis import bootstrap as S
from papa.analysis import drop_tables as F
from papa.analysis import pooled_drops
from papa.analysis.basis import build_basis, claim_cells
from papa.analysis.claims import CLAIM_KEYS, claim3_verdict, judge
from papa.analysis.figure_kit import AXIS_PX, TEXT_WIDTH, Figure, finish, task_name
from papa.book import claim_texts as CT
from papa.book.analogue_figures import fig_better_models, fig_paper_scores, fig_relative_score
from papa.book.load import BookData
from papa.book.table_format import and_list, fraction_words, interval_end, interval_text, percent, plural


@dataclass
class ChapterAnswers:
    """What the results chapter shows, every score and drop read from the main grid's
    :class:`~papa.analysis.basis.Basis`: a cell of it, or a pooled drop of the claims' cells."""

    ranking: str
    differences: pd.DataFrame  # paired differences to k = 0 of the basis's runs (bootstrap.paired_differences)
    table: pd.DataFrame  # drop_tables.main_table of the basis's runs, with a ``converged`` count column
    gate: dict  # the convergence gate over the main runs (the basis's)
    basis: str  # which runs the tables and analogues are drawn from, in words
    summary: pd.DataFrame  # the seed means of the basis's runs
    random: pd.DataFrame  # drop_tables.random_baseline
    better: tuple[pd.DataFrame, dict]  # analogues.better_models_lose_more of the cells (claim 3's points, statistics)
    claims: pd.DataFrame  # claim_texts.claims_table
    model_drops: pd.DataFrame  # pooled_drops.model_drops of the cells
    cells: pd.DataFrame  # basis.claim_cells: the cells the claims average (at half and all heads)
    all_cells: pd.DataFrame  # basis.cells: every model, task, ranking and k > 0
    sensitivity: pd.DataFrame  # claim_texts.sensitivity
    paper: pd.DataFrame  # analogues.paper_table of the basis's scores and cells


def converged_flag(value: object) -> bool | None:
    """A convergence flag as True, False or None (no held-out curve), whatever pandas made of it."""
    return None if value is None or (not isinstance(value, (bool, str)) and pd.isna(value)) else bool(value)


def records_of(data: BookData, run_ids: set[str]) -> dict[str, dict]:
    return {run_id: data.records[run_id] for run_id in sorted(run_ids) if run_id in data.records}


def _converged_counts(table: pd.DataFrame, main: pd.DataFrame) -> pd.DataFrame:
    runs = main.drop_duplicates("run_id")
    runs = runs[runs["probe_input"] == "all"]
    runs = runs.assign(ranking=runs["ranking"].where(~runs["ranking"].str.startswith("random"), "random"))
    converged = lambda s: int(sum(converged_flag(x) is True for x in s))
    counts = runs.groupby(["model", "task", "ranking", "k"])["converged"].agg(converged=converged, runs="size")
    words = {key: f"{c} of {n}" for key, (c, n) in counts.iterrows()}
    keys = zip(table["model"], table["task"], table["ranking"], table["k"])
    return table.assign(converged=[words.get(key) for key in keys])


def build_answers(data: BookData, ranking: str | None = None, resamples: int = S.RESAMPLES) -> ChapterAnswers:
    """Everything the results chapter shows, read from ``data.basis``; with no run converged, no claim is
    testable."""
    basis = data.basis if resamples == S.RESAMPLES else build_basis(data.main, data.records, resamples)
    ranking = ranking or data.config.rank.methods[0]
    table = F.main_table(basis.summary, basis.cells, ranking)
    cells = claim_cells(basis, ranking)
    if not basis.gated:
        cells = cells.iloc[:0]
    return ChapterAnswers(
        ranking=ranking,
        differences=basis.differences,
        table=_converged_counts(table, data.main),
        gate=basis.gate,
        basis=basis.words,
        summary=basis.summary,
        random=F.random_baseline(records_of(data, set(basis.runs["run_id"])), resamples=resamples),
        better=P.better_models_lose_more(cells),
        claims=CT.claims_table(cells, basis.gate),
        model_drops=pooled_drops.model_drops(cells),
        cells=cells,
        all_cells=basis.cells,
        sensitivity=CT.sensitivity(cells),
        paper=P.paper_table(basis.summary, basis.floors, cells, ranking) if len(basis.summary) else pd.DataFrame(),
    )


def gate_numbers(gate: dict) -> dict:
    """The convergence gate's counts by glue key (``n_gated_runs``, ``n_converged`` ...), for both chapters."""
    counts = {f"n_{key}": gate[key] for key in ("converged", "left_out", "not_converged", "unknown")}
    return {"n_gated_runs": gate["runs"]} | counts


def answer_numbers(result: ChapterAnswers) -> dict:
    """The numbers the prose and the front page cite, by glue key, every one from ``result.cells``: per claim its
    verdict, number, reason and table text; the gate's counts; the pooled drops at half and all heads and the largest
    single drop; the bootstrap's resamples and seed."""
    resamples = int(result.differences["resamples"].iloc[0]) if len(result.differences) else S.RESAMPLES
    numbers: dict = gate_numbers(result.gate) | {
        "analogue_basis": result.basis,
        "claim3_n": int(result.better[1].get("n", 0)),
        "claim3_tasks": and_list(task_name(t) for t in result.better[1].get("tasks", [])) or "no task",
        "pooled_resamples": f"{resamples:,}",
        "pooled_seed": "0",
    }
    judged = judge(result.cells)
    for key, row, number in zip(CLAIM_KEYS, result.claims.itertuples(), CT.claim_numbers(judged)):
        numbers[f"{key}_verdict"] = row.verdict
        numbers[f"{key}_ours"] = row.ours
        numbers[f"{key}_reason"] = row.reason
        numbers[f"{key}_number"] = number
    for name in ("half", "all"):
        numbers[f"drop_{name}_mean"] = judged[name]["value"]
        numbers[f"drop_{name}_interval"] = _interval(judged[name]["low"], judged[name]["high"])
        numbers[f"n_pairs_{name}"] = judged[name]["n"]
    largest = largest_drop(result)
    found = largest is not None
    numbers["drop_all_max"] = float(largest["relative_drop"]) if found else math.nan
    numbers["drop_all_max_pair"] = f"{largest['model']} on {task_name(largest['task'])}" if found else "no pair"
    numbers["random_summary"] = random_summary(result.random, result.ranking)
    return numbers


def largest_drop(result: ChapterAnswers) -> pd.Series | None:
    """The claims' cell with every head constant whose relative drop is largest (``drop_all_max``), or None."""
    full = pooled_drops.select(result.cells, "all").dropna(subset=["relative_drop"])
    return None if full.empty else full.loc[full["relative_drop"].idxmax()]


def _interval(low: float, high: float) -> str:
    """``[low, high]`` in percent, each end as the tables write it (:func:`interval_end`: near 0, its side)."""
    if math.isnan(low) or math.isnan(high):
        return "(no interval)"
    return f"[{interval_end(percent, low)}, {interval_end(percent, high)}]"


def random_summary(random: pd.DataFrame, ranking: str) -> str:
    """One sentence on how many of ``ranking``'s comparisons with the seeded random orderings
    (:func:`papa.analysis.drop_tables.random_baseline`) beat random or are worse, where and at which fractions."""
    rows = random[random["ranking"] == ranking] if len(random) else random
    if not len(rows):
        return f"no seeded random ordering ran beside the {ranking} ranking, so whether it beats random is not measured"

    def which(verdict: str) -> tuple[int, str]:
        hits = rows[rows["verdict"] == verdict]
        named = (
            f"{m} {task_name(t)} at {fraction_words(f)}"
            for m, t, f in zip(hits["model"], hits["task"], hits["fraction"])
        )
        return len(hits), f" ({and_list(named)})" if len(hits) else ""

    (beats, won), (worse, lost) = which("beats random"), which("worse than random")
    fractions = and_list(fraction_words(f) for f in sorted(set(rows["fraction"])))
    where = f"the comparisons are on {and_list(sorted(set(rows['model'])))}, with {fractions} of the heads constant"
    comparisons = f"{len(rows)} {plural(len(rows), 'comparison')}"
    said = f"the {ranking} ranking beats the seeded random orderings in {beats} of its {comparisons}{won}"
    rest = ", and the others show no real difference" if len(rows) - beats - worse else ""
    return f"{said} and is worse in {worse or 'none'}{lost}; {where}{rest}"


def model_drops_display_frame(result: ChapterAnswers) -> pd.DataFrame:
    """The front page's per-model table: heads, and the pooled drops at half and all heads with their intervals and
    the number of informative pairs each averages (the paper's table's average rows show the same numbers)."""
    rows = []
    for r in result.model_drops.itertuples():
        half = interval_text(r.drop_half, r.drop_half_low, r.drop_half_high)
        full = interval_text(r.drop_all, r.drop_all_low, r.drop_all_high)
        rows.append([r.model, int(r.total_heads), half, int(r.n_tasks_half), full, int(r.n_tasks_all)])
    half_header = f"drop, half of the heads constant ({result.ranking})"
    columns = ["model", "heads", half_header, "pairs, half", "drop, all heads constant", "pairs, all"]
    return pd.DataFrame(rows, columns=columns)


def placeholder_figure(label: str, why: str) -> Figure:
    """A figure that says in words why there is nothing to draw (its caption says the same)."""
    lines = textwrap.wrap(why, 72)  # one long line would draw past the text column
    chart = (
        alt.Chart(pd.DataFrame({"text": ["\n".join(lines)]}))
        .mark_text(fontSize=13, lineBreak="\n")
        .encode(text="text:N")
        .properties(width=TEXT_WIDTH - 2 * AXIS_PX, height=18 * len(lines) + 10)
    )
    return finish(chart, why, label)


def analogue_figures(result: ChapterAnswers, data: BookData) -> list[Figure]:
    """The paper's analogues (a)–(c) (:mod:`papa.book.analogue_figures`), each a :func:`placeholder_figure` when
    its data is empty."""
    summary, floors, cells, ranking = result.summary, data.floors, result.all_cells, result.ranking
    points = P.score_vs_dynamic_heads(summary, floors, cells) if len(summary) else pd.DataFrame(columns=["ranking"])
    relative = P.relative_score_vs_constant_fraction(summary, floors, cells, ranking) if len(summary) else []
    points_c, verdict = result.better  # the claims table's points and verdict (converged runs), never recomputed
    verdict_words = CT.verdict_sentence("claim3", claim3_verdict(verdict))
    figures = (
        ("fig-paper-scores", len(points[points["ranking"] == ranking]), lambda: fig_paper_scores(points, ranking)),
        ("fig-relative-score", len(relative), lambda: fig_relative_score(relative)),
        ("fig-better-models", len(points_c), lambda: fig_better_models(points_c, verdict, verdict_words)),
    )
    why = {
        "fig-paper-scores": f"No run of the {ranking} ranking to draw.",
        "fig-relative-score": "No informative task: no relative score to average.",
        "fig-better-models": "No informative task with k = 0 and all-heads runs: no point to draw.",
    }
    return [draw() if ready else placeholder_figure(label, why[label]) for label, ready, draw in figures]
