"""The book's one basis (papa.analysis.basis): every table that shows a score or a drop shows the basis's value, on
hand-made runs and on the committed default grid; a tampered probe result changes every place it feeds and nothing
else; a ratio whose denominator is within noise of zero is never a number."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from test_chapters_science import CONFIG, RESAMPLES, TOTAL, _predictions, _record, write_grid

from papa.analysis import analogues as P
from papa.analysis.basis import build_basis, claim_cells, retained_gains
from papa.analysis.results import load_results
from papa.book.chapters.results import answers as build_answers
from papa.book.chapters.results import drops_by_model as model_drops_display_frame
from papa.book.words import interval_text
from papa.core.io import atomic_write_json
from tests.hand_cells import book_data

KEYS = ["model", "task", "ranking", "k"]


def _places(data, result) -> dict[str, pd.DataFrame]:
    """Every table of the results chapter that shows a score or a drop, keyed by (model, task, ranking, k) where it
    has one."""
    paper = result.paper[~result.paper["task"].isin(["average", "common"])]
    return {
        "main": result.table.set_index(KEYS)[["score", "relative_drop", "relative_low", "relative_high"]],
        "cells": result.cells.set_index(KEYS)[["score_0", "score", "relative_drop", "relative_low", "relative_high"]],
        "paper": paper.set_index(["model", "task"])[["score_0", "score_half", "score_all", "drop_half", "drop_all"]],
        "gains": retained_gains(data.basis).set_index(KEYS)[["score", "relative_drop", "retained_gain"]],
        "averages": result.paper[result.paper["task"] == "average"].set_index("model")[["drop_half", "drop_all"]],
        "front": model_drops_display_frame(result).set_index("model"),
    }


@pytest.fixture()
def hand(tmp_path):
    write_grid(tmp_path, random=False, literal=False)
    data = book_data(CONFIG, tmp_path)
    return tmp_path, data, build_answers(data, resamples=RESAMPLES)


def test_every_table_shows_the_basis_value(hand):
    _, data, result = hand
    basis, places = data.basis, _places(data, hand[2])
    for (model, task, ranking, k), cell in basis.cells.set_index(KEYS).iterrows():
        key = (model, task, ranking, k)
        assert places["main"].loc[key, "relative_drop"] == cell["relative_drop"], key
        assert places["main"].loc[key, "score"] == cell["score"] == basis.score(model, task, ranking, k), key
        assert (
            places["gains"].loc[key, "relative_drop"] == cell["relative_drop"]
            and places["gains"].loc[key, "score"] == cell["score"]
        )
        at = "all" if k == TOTAL else "half" if k == TOTAL // 2 else None
        if at:
            assert places["paper"].loc[(model, task), f"drop_{at}"] == cell["relative_drop"], key
            assert places["paper"].loc[(model, task), f"score_{at}"] == cell["score"], key
            assert places["cells"].loc[key, "relative_drop"] == cell["relative_drop"], key
    for model, average in places["averages"].iterrows():  # the front page prints the paper table's averages
        row = result.paper[(result.paper["model"] == model) & (result.paper["task"] == "average")].iloc[0]
        assert places["front"].loc[model, "drop, all heads constant"] == interval_text(
            average["drop_all"], row["drop_all_low"], row["drop_all_high"]
        )
    # the floors table's k = 0 score is the basis's k = 0 score
    for floor in data.floors.itertuples():
        assert floor.baseline == basis.score(floor.model, floor.task, "none", 0)


def test_a_tampered_probe_result_changes_every_place_it_feeds_and_nothing_else(hand):
    folder, data, result = hand
    before = _places(data, result)
    # ma's seed 43 with every head constant: 0.70 → 0.60 (its dev predictions and its score, as a re-run would write)
    preds = _predictions(0.60, 43)
    atomic_write_json(
        folder / "results" / f"ma__sst2__k{TOTAL}__s43.json", _record("ma", TOTAL, TOTAL, 43, preds, None, True)
    )
    data_after = book_data(CONFIG, folder)
    after = _places(data_after, build_answers(data_after, resamples=RESAMPLES))
    fed = ("ma", "sst2", "all", TOTAL)
    for name in ("main", "cells", "gains"):
        changed = {key for key in before[name].index if not before[name].loc[[key]].equals(after[name].loc[[key]])}
        assert changed == {fed}, (name, changed)
    assert after["main"].loc[fed, "score"] == pytest.approx(before["main"].loc[fed, "score"] - 0.10 / 3)
    assert after["main"].loc[fed, "relative_drop"] > before["main"].loc[fed, "relative_drop"]
    assert before["paper"].loc[("mb", "sst2")].equals(after["paper"].loc[("mb", "sst2")])
    assert not before["paper"].loc[("ma", "sst2")].equals(after["paper"].loc[("ma", "sst2")])
    assert after["paper"].loc[("ma", "sst2"), "drop_all"] == after["cells"].loc[fed, "relative_drop"]
    assert before["averages"].loc["mb"].equals(after["averages"].loc["mb"]) and not before["averages"].loc["ma"].equals(
        after["averages"].loc["ma"]
    )
    assert before["front"].loc["mb"].equals(after["front"].loc["mb"]) and not before["front"].loc["ma"].equals(
        after["front"].loc["ma"]
    )


def test_a_k0_score_within_noise_of_zero_gives_no_relative_drop():
    """CoLA's MCC near 0 at k = 0: some resamples' k = 0 score is ≤ 0, so the ratio has no denominator; the paired
    difference (no ratio) is still there."""
    records = {}
    for seed in (42, 43):
        for k, accuracy in ((0, 0.51), (TOTAL, 0.50)):
            record = _record("ma", k, TOTAL, seed, _predictions(accuracy, seed), None, True)
            record["task"], record["config"]["task"], record["metric"] = "cola", "cola", "matthews_correlation"
            record["dev"]["label_names"] = ["unacceptable", "acceptable"]
            records[f"ma__cola__k{k}__s{seed}"] = record
    basis = build_basis(load_results(records), records, resamples=RESAMPLES)
    cell = basis.cells.iloc[0]
    assert math.isnan(cell["relative_drop"]) and math.isnan(cell["relative_low"]) and np.isfinite(cell["difference"])
    assert claim_cells(basis, "gates")["at"].tolist() == ["all"]


@pytest.mark.data
def test_the_committed_default_book_shows_one_value_per_quantity():
    """The default grid's committed runs: each (model, task, ranking, k) shows the basis's score and drop in the main
    table, the paper's table, the retained gains, the sensitivity table's main-grid side and figure (b)'s data. Every
    committed result is read (not the plan's list), so the check holds while a re-run of the grid is under way."""
    from papa.book.studies import sensitivity_table
    from papa.pipeline.plan import ROOT, load_config
    from tests.hand_cells import book_data

    data = book_data(load_config(ROOT / "configs" / "default.yaml"), ROOT / "book" / "runs" / "default" / "artifacts")
    result = build_answers(data)
    basis, places = data.basis, _places(data, result)
    checked = 0
    for (model, task, ranking, k), cell in basis.cells.set_index(KEYS).iterrows():
        key = (model, task, ranking, k)
        gain_drop = places["gains"].loc[key, "relative_drop"]
        assert gain_drop == cell["relative_drop"] or (math.isnan(gain_drop) and math.isnan(cell["relative_drop"])), key
        if key in places["main"].index:
            main = places["main"].loc[key]
            assert (main["score"], main["relative_drop"]) == (cell["score"], cell["relative_drop"]) or (
                math.isnan(main["relative_drop"]) and math.isnan(cell["relative_drop"])
            )
            checked += 1
    assert checked >= 60  # 3 models × 6 tasks × 4 counts of constant heads, less those no seed pairs
    paper = places["paper"]
    for cell in result.cells.itertuples():
        drop = paper.loc[(cell.model, cell.task), f"drop_{cell.at}"]
        assert drop == cell.relative_drop or (math.isnan(drop) and math.isnan(cell.relative_drop))
    for row in sensitivity_table(data).to_dict("records"):
        total = int(
            basis.cells.loc[(basis.cells["model"] == row["model"]) & (basis.cells["ranking"] == "all"), "k"].iloc[0]
        )
        official = basis.cell(row["model"], row["task"], "all", total)
        assert row["drop official"] == official["relative_drop"] or (
            math.isnan(row["drop official"]) and math.isnan(official["relative_drop"])
        )
        assert row["k=0 official"] == basis.score(row["model"], row["task"], "none", 0)
    relative = P.relative_score_vs_constant_fraction(result.summary, data.floors, result.all_cells).set_index(
        ["model", "k"]
    )
    averages = result.paper[result.paper["task"] == "average"].set_index("model")
    for model, row in averages.iterrows():
        total = int(result.cells.loc[result.cells["model"] == model, "total_heads"].iloc[0])
        if not math.isnan(row["drop_all"]):
            assert relative.loc[(model, total), "relative_score"] == pytest.approx(1 - row["drop_all"], abs=1e-12)
    # a floor still rising: the mean of the attention-free runs the gate left out, only where none converged
    free = data.main[(data.main["k"] == 0) & (data.main["probe_input"] == "embeddings") & data.main["is_main"]]
    kept = set(basis.runs["run_id"])
    for floor in data.floors.itertuples():
        runs = free[(free["model"] == floor.model) & (free["task"] == floor.task)]
        left_out = runs[~runs["run_id"].isin(kept)]
        assert floor.attention_free_rising == (len(runs) > 0 and len(left_out) == len(runs)), floor
        if floor.attention_free_rising:
            assert floor.attention_free == pytest.approx(left_out["value"].astype(float).mean())
    assert data.floors["attention_free_rising"].any()  # mpnet-base POS and SST-2 in the committed runs
