"""The paper's figure and table analogues (papa.analysis.analogues) on a hand-made summary."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from papa.analysis import analogues, bootstrap, pooled_drops
from papa.analysis.basis import gate_runs
from papa.analysis.claims import claim3_verdict, evidence
from papa.analysis.results import SUMMARY_KEYS
from papa.book import words as W
from tests.hand_cells import cell, cells, spread


def _summary(scores: dict[tuple[str, str], dict[tuple[str, int], float]], total: int = 8) -> pd.DataFrame:
    rows = []
    for (model, task), by_k in scores.items():
        for (ranking, k), mean in by_k.items():
            row = dict(
                model=model,
                task=task,
                ranking=ranking,
                k=k,
                fraction=k / total,
                total_heads=total,
                mode="cached",
                probe_input="all",
                metric="accuracy",
            )
            rows.append({**row, "mean": mean, "std": 0.01, "min": mean - 0.01, "max": mean + 0.01, "n_seeds": 3})
    return pd.DataFrame(rows, columns=SUMMARY_KEYS + ["mean", "std", "min", "max", "n_seeds"])


def _task(base: float, half: float, full: float) -> dict:
    return {("none", 0): base, ("gates", 4): half, ("gates", 7): (half + full) / 2, ("all", 8): full}


SCORES = {
    ("a", "t1"): _task(0.80, 0.80, 0.72),
    ("a", "t2"): _task(0.50, 0.50, 0.50),  # not informative
    ("b", "t1"): _task(0.90, 0.88, 0.81),
    ("b", "t2"): _task(0.60, 0.57, 0.54),
    ("c", "t1"): _task(0.70, 0.70, 0.67),
    ("c", "t2"): _task(0.40, 0.40, 0.38),
}
FLOORS = pd.DataFrame(
    [
        {"model": m, "task": t, "majority": 0.5, "attention_free": 0.45, "informative": (m, t) != ("a", "t2")}
        for m, t in SCORES
    ],
)


def test_figure2_rows_run_from_all_heads_dynamic_to_none_with_floors():
    differences = pd.DataFrame(
        [{"model": "a", "task": "t1", "ranking": "all", "k": 8, "low": -0.1, "high": -0.06, "real": True}]
    )
    frame = analogues.score_vs_dynamic_heads(_summary(SCORES), FLOORS, differences)
    line = frame[(frame["model"] == "a") & (frame["task"] == "t1")]
    assert line["ranking"].unique().tolist() == ["gates"]
    assert line["dynamic_heads"].tolist() == [8, 4, 1, 0] and line["score"].tolist() == [0.80, 0.80, 0.76, 0.72]
    assert (line["majority"].unique().tolist(), line["attention_free"].unique().tolist()) == ([0.5], [0.45])
    last = line.iloc[-1]
    assert (last["low"], last["high"], last["real"]) == (pytest.approx(0.70), pytest.approx(0.74), True)
    assert math.isnan(line.iloc[0]["low"])


def _all_cells(scores: dict) -> pd.DataFrame:
    """Every k > 0 of ``scores`` as a basis cell's key and drop (the seed means' drop: every seed paired)."""
    rows = [
        {"model": m, "task": t, "ranking": r, "k": k, "relative_drop": (by_k[("none", 0)] - score) / by_k[("none", 0)]}
        for (m, t), by_k in scores.items()
        for (r, k), score in by_k.items()
        if k > 0
    ]
    return pd.DataFrame(rows)


def test_relative_score_averages_informative_tasks_only():
    frame = analogues.relative_score_vs_constant_fraction(_summary(SCORES), FLOORS, _all_cells(SCORES))
    a = frame[frame["model"] == "a"].set_index("k")
    assert a["relative_score"].to_dict() == {0: 1.0, 4: 1.0, 7: pytest.approx(0.95), 8: pytest.approx(0.9)}
    assert a["n_tasks"].unique().tolist() == [1] and a["tasks"].unique().tolist() == ["t1"]
    b = frame[frame["model"] == "b"].set_index("k")
    assert b.loc[8, "relative_score"] == pytest.approx((0.81 / 0.90 + 0.54 / 0.60) / 2) and b.loc[8, "fraction"] == 1.0


def _cells(scores: dict) -> pd.DataFrame:
    """Drop cells of ``scores`` (the seed means' drops, each with a narrow spread of resampled drops)."""
    rows = []
    for (model, task), by_k in scores.items():
        base = by_k[("none", 0)]
        for at, key in (("half", ("gates", 4)), ("all", ("all", 8))):
            drop = (base - by_k[key]) / base
            rows.append(
                cell(
                    model,
                    task,
                    at,
                    drop,
                    spread(drop, 0.01),
                    informative=bool(FLOORS.set_index(["model", "task"]).loc[(model, task), "informative"]),
                    score_0=base,
                )
            )
    return cells(rows)


def test_better_models_lose_more_points_and_verdict():
    read = evidence(_cells(SCORES))  # claim 3's points and statistics, as the chapter's figure (c) reads them
    points, verdict = read.points, {**read.better, "tasks": read.common}
    # t2 is not informative for model a, so every model's point averages t1 alone (the tasks all models share):
    # otherwise b's and c's averages would fall with t2's lower scores and decide the correlation
    assert points["model"].tolist() == ["a", "b", "c"]
    assert points["drop"].tolist() == [pytest.approx(0.10), pytest.approx(0.10), pytest.approx(0.03 / 0.70)]
    assert points["score"].tolist() == [pytest.approx(0.80), pytest.approx(0.90), pytest.approx(0.70)]
    assert points["low"].tolist() == [
        pytest.approx(0.10 - 0.0095),
        pytest.approx(0.10 - 0.0095),
        pytest.approx(0.03 / 0.70 - 0.0095),
    ]
    assert points["n_tasks"].tolist() == [1, 1, 1] and verdict["tasks"] == ["t1"]
    assert (
        {k: v for k, v in verdict.items() if k != "tasks"} == pooled_drops.claim3(points)
        and verdict["n"] == 3
        and W.verdict_words(claim3_verdict(verdict)) == "points the paper's way, not significant"
    )
    two = {key: value for key, value in SCORES.items() if key[0] != "c"}
    assert W.verdict_words(claim3_verdict(evidence(_cells(two)).better)) == "not testable"


def test_paper_table_with_cells_shows_the_cells_drops_and_the_pooled_averages():
    table = analogues.paper_table(_summary(SCORES), FLOORS, _cells(SCORES)).set_index(["model", "task"])
    assert table.loc[("b", "t2"), "drop_all"] == pytest.approx(0.10)
    average = table.loc[("b", "average")]
    assert average["drop_all"] == pytest.approx((0.09 / 0.90 + 0.10) / 2) and average["drop_all_low"] == pytest.approx(
        average["drop_all"] - 0.0095
    )
    common = table.loc[("b", "common")]
    assert (common["drop_all"], common["score_0"], common["tasks"], common["n_tasks"]) == (
        pytest.approx(0.10),
        pytest.approx(0.90),
        "t1",
        1,
    )


def test_paper_table_has_each_task_and_the_informative_average():
    table = analogues.paper_table(_summary(SCORES), FLOORS, _cells(SCORES)).set_index(["model", "task"])
    assert table.loc[("b", "t2"), ["score_0", "score_half", "score_all"]].tolist() == [0.60, 0.57, 0.54]
    assert table.loc[("b", "t2"), "drop_all"] == pytest.approx(0.10) and table.loc[
        ("b", "t2"), "drop_half"
    ] == pytest.approx(0.05)
    average = table.loc[("a", "average")]
    assert (average["score_0"], average["drop_all"], average["max_drop_all"], average["n_tasks"]) == (
        0.80,
        pytest.approx(0.10),
        pytest.approx(0.10),
        1,
    )
    assert table.loc[("b", "average"), "drop_half"] == pytest.approx((0.02 / 0.90 + 0.05) / 2)
    assert table["paper_average_drop_all"].unique().tolist() == [0.08] and table[
        "paper_max_drop_all"
    ].unique().tolist() == [0.20]


def test_convergence_table_reads_each_run():
    results = {
        "r1": {"convergence": {"converged": True, "best_epoch": 4, "epochs_trained": 7, "stopped_early": True}},
        "r2": {"convergence": None},
    }
    table = bootstrap.convergence_table(results)
    assert table.iloc[0].to_dict() == {
        "run_id": "r1",
        "converged": True,
        "best_epoch": 4,
        "epochs_trained": 7,
        "stopped_early": True,
    }
    assert table["converged"].tolist() == [True, None] and math.isnan(table["best_epoch"].iloc[1])
    kept, summary = gate_runs(table)
    assert kept == {"r1"} and (summary["unknown"], summary["left_out_runs"]) == (1, ["r2"])
