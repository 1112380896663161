"""The results and controls chapters' answers with intervals, computed once per grid from :class:`BookData`.

:func:`chapter_science` bootstraps the paired differences of the main grid's runs (their dev predictions live in
``data.records``), applies the convergence gate, and builds the main table, the random baseline, the paper's
analogues (a)–(d) and the claims. :func:`literal_comparison` and :func:`convergence_summary` feed the controls
chapter; :func:`science_numbers` the prose and the front page.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import altair as alt
import pandas as pd

from papa.analysis import findings as F
from papa.analysis import paper as P
from papa.analysis import pooled
from papa.analysis import results as R
from papa.analysis import stats as S
from papa.analysis import verdicts as V
from papa.analysis.figure_kit import AXIS_PX, TEXT_WIDTH, Figure, finish
from papa.analysis.paper_figures import fig_better_models, fig_paper_scores, fig_relative_score
from papa.book.data import BookData
from papa.book.words import and_list, fraction_words, plural, task_name

#: The paper's literal setting (the ``literal`` studies): lr, epochs, epoch selection.
LITERAL = (2e-5, 15, "final")


@dataclass
class Science:
    """What the results chapter shows; every table is a pandas frame. Every drop on every page is a row of
    ``cells`` (:func:`papa.analysis.pooled.drop_cells`: converged runs, paired by probe seed) or a
    :func:`papa.analysis.pooled.pooled_drop` of them."""

    ranking: str
    differences: pd.DataFrame  # paired differences to k = 0 of the basis's runs (stats.paired_differences)
    table: pd.DataFrame  # findings.main_table of the basis's runs, with a ``converged`` count column
    gate: dict  # the convergence gate over the main runs (stats.convergence_gate's summary)
    converged_table: pd.DataFrame  # findings.main_table of the converged runs only
    basis: str  # which runs the tables and analogues are drawn from, in words
    summary: pd.DataFrame  # the seed means of the basis's runs
    differences_basis: pd.DataFrame
    random: pd.DataFrame  # findings.random_baseline
    better: tuple[pd.DataFrame, dict]  # paper.better_models_lose_more of the cells (claim 3's points and statistics)
    claims: pd.DataFrame  # verdicts.claims_table
    model_drops: pd.DataFrame  # pooled.model_drops of the cells
    cells: pd.DataFrame  # pooled.drop_cells of the converged runs: the one source of every drop
    sensitivity: pd.DataFrame  # verdicts.sensitivity


def _flag(value: object) -> bool | None:
    """A convergence flag as True, False or None (no held-out curve), whatever pandas made of it."""
    return None if value is None or (not isinstance(value, (bool, str)) and pd.isna(value)) else bool(value)


def _records(data: BookData, run_ids: set[str]) -> dict[str, dict]:
    return {run_id: data.records[run_id] for run_id in sorted(run_ids) if run_id in data.records}


def _converged_counts(table: pd.DataFrame, main: pd.DataFrame) -> pd.DataFrame:
    runs = main.drop_duplicates("run_id")
    runs = runs[runs["probe_input"] == "all"].assign(ranking=lambda f: f["ranking"].where(~f["ranking"].str.startswith("random"), "random"))
    counts = runs.groupby(["model", "task", "ranking", "k"])["converged"].agg(converged=lambda s: int(sum(_flag(x) is True for x in s)), runs="size")
    words = {key: f"{c} of {n}" for key, (c, n) in counts.iterrows()}
    return table.assign(converged=[words.get((m, t, r, k)) for m, t, r, k in zip(table["model"], table["task"], table["ranking"], table["k"])])


def chapter_science(data: BookData, ranking: str | None = None, resamples: int = S.RESAMPLES) -> Science:
    """Everything the results chapter shows, from the main grid's runs (``data.main``) and their records.

    The basis is the converged runs (the convergence gate), each drop paired by probe seed; only when no run
    converged do the tables fall back to every run (and the claims are not testable)."""
    ranking = ranking or data.config["rank"].get("methods", ["gates"])[0]
    main_ids = set(data.main["run_id"])
    kept, gate = F.gate_runs(data.main)
    ids = kept or main_ids
    summary = R.summarise(data.main[data.main["run_id"].isin(ids)])
    differences = S.paired_differences(_records(data, ids), resamples=resamples)
    table = F.main_table(summary, differences, ranking)
    cells = pooled.drop_cells(differences, summary, data.floors, ranking) if kept else pooled.drop_cells(differences.iloc[:0], summary.iloc[:0], data.floors, ranking)
    basis = f"the {len(kept)} converged runs" if kept else f"all {gate['runs']} runs (none passed the convergence gate)"
    return Science(
        ranking=ranking,
        differences=differences,
        table=_converged_counts(table, data.main),
        gate=gate,
        converged_table=table if kept else table.iloc[:0],
        basis=basis,
        summary=summary,
        differences_basis=differences,
        random=F.random_baseline(_records(data, main_ids), resamples=resamples),
        better=P.better_models_lose_more(cells),
        claims=V.claims_table(cells, gate),
        model_drops=pooled.model_drops(cells),
        cells=cells,
        sensitivity=V.sensitivity(cells),
    )


def science_numbers(result: Science, data: BookData) -> dict:
    """The numbers the prose and the front page cite, every one from ``result.cells``: per claim its verdict
    (``claim{i}_verdict``), the number it rests on with its pooled interval (``claim{i}_number``), one sentence why
    (``claim{i}_reason``) and the table's text (``claim{i}_ours``); the gate's counts; the pooled drops at half and
    all heads over informative tasks (``drop_half_mean``, ``drop_half_interval`` ...) and the largest single drop
    with every head constant (``drop_all_max``); the bootstrap's resamples and seed."""
    numbers: dict = {
        "n_gated_runs": result.gate["runs"],
        "n_converged": result.gate["converged"],
        "n_left_out": result.gate["left_out"],
        "n_not_converged": result.gate["not_converged"],
        "n_unknown": result.gate["unknown"],
        "analogue_basis": result.basis,
        "claim3_n": int(result.better[1].get("n", 0)),
        "claim3_tasks": and_list(task_name(t) for t in result.better[1].get("tasks", [])) or "no task",
        "pooled_resamples": f"{int(result.differences['resamples'].iloc[0]) if len(result.differences) else S.RESAMPLES:,}",
        "pooled_seed": "0",
    }
    judged = V.judge(result.cells)
    for index, (row, number) in enumerate(zip(result.claims.itertuples(), V.claim_numbers(judged)), start=1):
        numbers[f"claim{index}_verdict"] = row.verdict
        numbers[f"claim{index}_ours"] = row.ours
        numbers[f"claim{index}_reason"] = row.reason
        numbers[f"claim{index}_number"] = number
    for name in ("half", "all"):
        numbers[f"drop_{name}_mean"] = judged[name]["value"]
        numbers[f"drop_{name}_interval"] = _interval(judged[name]["low"], judged[name]["high"])
        numbers[f"n_pairs_{name}"] = judged[name]["n"]
    largest = _largest_cell(result)
    numbers["drop_all_max"] = float(largest["relative_drop"]) if largest is not None else math.nan
    numbers["drop_all_max_pair"] = f"{largest['model']} on {task_name(largest['task'])}" if largest is not None else "no pair"
    numbers["random_summary"] = random_summary(result.random, result.ranking)
    return numbers


def _largest_cell(result: Science) -> pd.Series | None:
    """The claims' cell with every head constant whose relative drop is largest, or None without one."""
    full = pooled.select(result.cells, "all").dropna(subset=["relative_drop"])
    return None if full.empty else full.loc[full["relative_drop"].idxmax()]


def largest_drop(result: Science) -> tuple[str, str] | None:
    """``(model, task)`` of the largest relative drop with every head constant among the claims' cells
    (``drop_all_max``), or None without one."""
    row = _largest_cell(result)
    return None if row is None else (str(row["model"]), str(row["task"]))


def _interval(low: float, high: float) -> str:
    return "(no interval)" if math.isnan(low) or math.isnan(high) else f"[{V.percent_text(low)}, {V.percent_text(high)}]"


def random_summary(random: pd.DataFrame, ranking: str) -> str:
    """One sentence on whether ``ranking`` beats the seeded random orderings (``findings.random_baseline`` rows):
    how many of its comparisons beat random, how many are worse, on which models and at which fractions."""
    rows = random[random["ranking"] == ranking] if len(random) else random
    if not len(rows):
        return f"no seeded random ordering ran beside the {ranking} ranking, so whether it beats random is not measured"
    beats, worse = int((rows["verdict"] == "beats random").sum()), int((rows["verdict"] == "worse than random").sum())
    fractions = and_list(fraction_words(f) for f in sorted(set(rows["fraction"])))
    where = f"on {and_list(sorted(set(rows['model'])))}, with {fractions} of the heads constant"
    rest = len(rows) - beats - worse
    return f"the {ranking} ranking beats the seeded random orderings in {beats} of its {len(rows)} {plural(len(rows), 'comparison')} and is worse in {worse or 'none'} ({where}" + (
        "; the others show no real difference)" if rest else ")"
    )


def model_drops_display_frame(result: Science) -> pd.DataFrame:
    """The front page's per-model table: heads, informative tasks, and the pooled drops at half and all heads with
    their pooled bootstrap intervals (text; the paper's table's average rows show the same numbers)."""
    rows = []
    half_header = f"drop, half of the heads constant ({result.ranking})"
    for row in result.model_drops.itertuples():
        rows.append(
            {
                "model": row.model,
                "heads": int(row.total_heads),
                "pairs averaged": int(max(row.n_tasks_half, row.n_tasks_all)),
                half_header: V.interval_text(row.drop_half, row.drop_half_low, row.drop_half_high),
                "drop, all heads constant": V.interval_text(row.drop_all, row.drop_all_low, row.drop_all_high),
            }
        )
    return pd.DataFrame(rows, columns=["model", "heads", "pairs averaged", half_header, "drop, all heads constant"])


def placeholder_figure(label: str, why: str) -> Figure:
    """A figure that says in words why there is nothing to draw (its caption says the same)."""
    import textwrap

    lines = textwrap.wrap(why, 72)  # one long line would draw past the text column
    chart = (
        alt.Chart(pd.DataFrame({"text": ["\n".join(lines)]}))
        .mark_text(fontSize=13, lineBreak="\n")
        .encode(text="text:N")
        .properties(width=TEXT_WIDTH - 2 * AXIS_PX, height=18 * len(lines) + 10)
    )
    return finish(chart, why, label)


def analogue_figures(result: Science, data: BookData) -> list[Figure]:
    """The paper's analogues (a)–(c) drawn from ``result.basis``'s runs (:mod:`papa.analysis.paper_figures`), each
    replaced by a :func:`placeholder_figure` when its data is empty (e.g. no informative task)."""
    differences = result.differences_basis if len(result.differences_basis) else None  # no run stored dev predictions
    points = P.score_vs_dynamic_heads(result.summary, data.floors, differences) if len(result.summary) else pd.DataFrame(columns=["ranking"])
    relative = P.relative_score_vs_constant_fraction(result.summary, data.floors, result.ranking, differences=differences) if len(result.summary) else pd.DataFrame()
    points_c, verdict = result.better  # the claims table's points and verdict (converged runs), never recomputed on others
    out = []
    for label, ready, draw, why in (
        (
            "fig-paper-scores",
            len(points[points["ranking"] == result.ranking]) > 0,
            lambda: fig_paper_scores(points, result.ranking),
            f"No run of the {result.ranking} ranking to draw.",
        ),
        ("fig-relative-score", len(relative) > 0, lambda: fig_relative_score(relative), "No informative task: no relative score to average."),
        ("fig-better-models", len(points_c) > 0, lambda: fig_better_models(points_c, verdict), "No informative task with k = 0 and all-heads runs: no point to draw."),
    ):
        out.append(draw() if ready else placeholder_figure(label, why))
    return out


# --- the controls chapter --------------------------------------------------------------------------------------


def literal_studies(config: dict) -> list[str]:
    """The names of the studies that run the paper's literal setting (:data:`LITERAL`) in cached mode."""
    lr, epochs, selection = LITERAL
    names = []
    for study in config.get("studies", []):
        study_lr = study.get("lr")
        if isinstance(study_lr, (int, float)) and round(float(study_lr), 12) == lr and study.get("epochs") == epochs and study.get("selection") == selection:
            if "faithful" not in study.get("modes", ["cached"]):
                names.append(study["name"])
    return names


def _shared_table(data: BookData, frame: pd.DataFrame, ranking: str, resamples: int) -> pd.DataFrame:
    """:func:`findings.main_table` at k = 0 and all heads of ``frame``'s runs (only those runs are bootstrapped)."""
    shared = frame[frame["ranking"].isin(R.SHARED_RANKINGS)]
    differences = S.paired_differences(_records(data, set(shared["run_id"])), resamples=resamples)
    return F.main_table(R.summarise(shared), differences, ranking, fractions=(F.MAIN_FRACTIONS[0], F.MAIN_FRACTIONS[-1]))


def literal_comparison(data: BookData, resamples: int = S.RESAMPLES) -> pd.DataFrame:
    """Per model and task: the main protocol's k = 0 and all-heads scores and relative drop with its interval, beside
    the paper's literal setting's (lr 2e-5, 15 epochs, final epoch); ``lr`` is the main protocol's chosen lr.
    Empty when no literal run exists."""
    frames = [data.studies[name] for name in literal_studies(data.config) if name in data.studies and len(data.studies[name])]
    columns = [
        "model",
        "task",
        "lr",
        "main_k0",
        "main_all",
        "main_drop",
        "main_low",
        "main_high",
        "main_real",
        "literal_k0",
        "literal_all",
        "literal_drop",
        "literal_low",
        "literal_high",
        "literal_real",
        "literal_seeds",
    ]
    if not frames:
        return pd.DataFrame(columns=columns)
    ranking = data.config["rank"].get("methods", ["gates"])[0]
    literal_table = _shared_table(data, pd.concat(frames, ignore_index=True), ranking, resamples)
    kept, _ = F.gate_runs(data.main)  # the main protocol's side on the book's one basis: its converged runs (the literal runs have no held-out curve)
    main_table = _shared_table(data, data.main[data.main["run_id"].isin(kept)] if kept else data.main, ranking, resamples)
    out = []
    for (model, task), group in literal_table.groupby(["model", "task"], sort=True):
        main = main_table[(main_table["model"] == model) & (main_table["task"] == task)]
        lit_all, main_all = group[group["k"] == group["total_heads"]], main[main["k"] == main["total_heads"]]
        lit_0, main_0 = group[group["k"] == 0], main[main["k"] == 0]
        if lit_all.empty or lit_0.empty:
            continue
        lrs = data.main.loc[(data.main["model"] == model) & (data.main["task"] == task) & (data.main["k"] == 0), "lr"].dropna().unique()
        pick = lambda frame, column: frame[column].iloc[0] if len(frame) else math.nan  # noqa: E731
        out.append(
            {
                "model": model,
                "task": task,
                "lr": float(lrs[0]) if len(lrs) == 1 else math.nan,
                "main_k0": pick(main_0, "score"),
                "main_all": pick(main_all, "score"),
                "main_drop": pick(main_all, "relative_drop"),
                "main_low": pick(main_all, "relative_low"),
                "main_high": pick(main_all, "relative_high"),
                "main_real": pick(main_all, "real") if len(main_all) else None,
                "literal_k0": lit_0["score"].iloc[0],
                "literal_all": lit_all["score"].iloc[0],
                "literal_drop": lit_all["relative_drop"].iloc[0],
                "literal_low": lit_all["relative_low"].iloc[0],
                "literal_high": lit_all["relative_high"].iloc[0],
                "literal_real": lit_all["real"].iloc[0],
                "literal_seeds": int(min(lit_0["n_seeds"].iloc[0], lit_all["n_seeds"].iloc[0])),
            }
        )
    return pd.DataFrame(out, columns=columns)


def convergence_summary(data: BookData) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(per model and task, still rising)``: how many of the main grid's runs converged, still rose at the cap
    (not converged) or have no held-out curve, with the mean epochs trained; and one row per run that still rose."""
    table = S.convergence_table(_records(data, set(data.main["run_id"])))
    runs = data.main.drop_duplicates("run_id")[["run_id", "model", "task", "ranking", "k", "seed", "probe_input"]]
    merged = runs.merge(table, on="run_id", how="left")
    rows = []
    for (model, task), group in merged.groupby(["model", "task"], sort=True):
        flags = [_flag(x) for x in group["converged"]]
        trained = pd.to_numeric(group["epochs_trained"], errors="coerce")
        rows.append(
            {
                "model": model,
                "task": task,
                "runs": len(group),
                "converged": sum(x is True for x in flags),
                "still rising": sum(x is False for x in flags),
                "no held-out curve": sum(x is not True and x is not False for x in flags),
                "mean epochs trained": float(trained.mean()) if trained.notna().any() else math.nan,
            }
        )
    per_task = pd.DataFrame(rows, columns=["model", "task", "runs", "converged", "still rising", "no held-out curve", "mean epochs trained"])
    rising = merged[[_flag(x) is False for x in merged["converged"]]][["run_id", "model", "task", "ranking", "k", "seed", "best_epoch", "epochs_trained"]]
    return per_task, rising.reset_index(drop=True)


__all__ = [
    "LITERAL",
    "Science",
    "analogue_figures",
    "placeholder_figure",
    "convergence_summary",
    "literal_comparison",
    "largest_drop",
    "literal_studies",
    "model_drops_display_frame",
    "chapter_science",
    "random_summary",
    "science_numbers",
]
