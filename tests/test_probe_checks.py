"""The controls chapter's probe checks on hand-made lr choices and dev predictions: exact cells and counts."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest
from test_results import result

from papa.analysis import probe_checks as AC
from papa.book.chapters import controls
from papa.book.load import BookData, book_data_from
from papa.book.probe_checks import lr_choice_display, lr_choice_numbers, prediction_share_display
from papa.book.words import lr_text
from papa.pipeline.plan import grid_model


def lr_choice_frame(data: BookData) -> pd.DataFrame:
    """The lr-choice frame of ``data``, as the controls chapter builds it."""
    return AC.lr_choice_frame(data.lr_choices)


def prediction_share_frame(data: BookData) -> pd.DataFrame:
    """The prediction-share frame over every hand-made row of ``data.main`` (no basis: the chapter passes the
    converged runs, :func:`test_the_probe_checks_read_the_converged_runs_only`)."""
    return AC.prediction_share_frame(data.main, data.records)


def near_floor_frame(data: BookData) -> pd.DataFrame:
    """The near-floor frame of ``data``, as the controls chapter builds it."""
    return controls.probe_checks(data)[1]


def _choice(model: str, task: str, chosen: float, runs: list[tuple[float, float, int, int, bool]]) -> dict:
    return {
        "model": model,
        "task": task,
        "lr": chosen,
        "heldout": {str(lr): score for lr, score, *_ in runs},
        "runs": [
            {"lr": lr, "seed": 0, "heldout": score, "best_epoch": best, "epochs_trained": trained, "converged": ok}
            for lr, score, best, trained, ok in runs
        ],
    }


def _data(lr_choices: dict | None = None, main: pd.DataFrame | None = None, records: dict | None = None) -> BookData:
    empty = pd.DataFrame()
    main = (
        main
        if main is not None
        else pd.DataFrame(columns=["model", "task", "k", "probe_input", "is_main", "run_id", "metric", "value"])
    )
    grid = grid_model({"name": "hand", "models": ["m"], "tasks": ["sst2", "cola"], "probe": {}})
    return BookData(grid, main, main, empty, empty, empty, {}, {}, records or {}, lr_choices or {})


def _record(
    model: str,
    task: str,
    k: int,
    seed: int,
    score: float,
    size: int,
    epoch: int | None,
    epochs: int = 20,
    total: int = 72,
) -> dict:
    """A probe result of the main protocol (lr chosen, early stopping on held-out examples) with its reported epoch."""
    metric = "matthews_correlation" if task == "cola" else "accuracy"
    record = result(task, k, seed, score, model=model, total=total, metric=metric, epochs=epochs, train_examples=size)
    record["config"]["selection"], record["selected_epoch"] = "heldout", epoch
    return record


CHOICES = {
    "m__cola": _choice(
        "m", "cola", 2e-4, [(2e-5, 0.0, 1, 4, True), (2e-4, 0.204, 4, 7, True), (1e-3, 0.077, 4, 7, True)]
    ),
    "m__sst2": _choice("m", "sst2", 2e-5, [(2e-5, 0.83, 20, 20, False), (2e-4, 0.80, 2, 5, True)]),
}


def test_lr_text_reads_as_written() -> None:
    assert [lr_text(x) for x in (2e-5, 2e-4, 1e-3, 1.5e-4, 0.01, 0.1, 1.0)] == [
        "2e-5",
        "2e-4",
        "1e-3",
        "1.5e-4",
        "0.01",
        "0.1",
        "1",
    ]


def test_lr_choice_table_cells_and_order() -> None:
    frame = lr_choice_frame(_data(CHOICES))
    assert list(frame["task"].unique()) == ["cola", "sst2"]  # by task id, as the other tables
    assert frame["chosen"].tolist() == [False, True, False, True, False]
    table = lr_choice_display(frame)
    assert table.columns == [
        "task",
        "chosen lr",
        "held-out at lr 2e-5 (the paper's)",
        "held-out at lr 2e-4",
        "held-out at lr 1e-3",
    ]
    cola, sst2 = table.rows
    assert sst2 == [
        "SST-2",
        "2e-5",
        "0.830 (epoch 20 of 20, at the cap)",
        "0.800 (epoch 2 of 5)",
        None,
    ]  # 1e-3 was no candidate
    assert cola == ["CoLA", "2e-4", "0.000 (epoch 1 of 4)", "0.204 (epoch 4 of 7)", "0.077 (epoch 4 of 7)"]


def test_lr_choice_numbers_count_flat_and_rising_paper_runs() -> None:
    numbers = lr_choice_numbers(
        lr_choice_frame(
            _data(CHOICES | {"n__cola": _choice("n", "cola", 1e-3, [(2e-5, 0.0, 1, 4, True), (1e-3, 0.3, 3, 6, True)])})
        )
    )
    assert numbers == {
        "n_lr_pairs": 3,
        "n_lr_paper_chosen": 1,
        "n_lr_paper_flat": 2,
        "lr_paper_flat": "CoLA (m, n)",
        "n_lr_paper_rising": 1,
    }
    assert lr_choice_numbers(lr_choice_frame(_data()))["lr_paper_flat"] == "none"
    assert (
        lr_choice_display(lr_choice_frame(_data(CHOICES | {"n__cola": CHOICES["m__cola"] | {"model": "n"}}))).columns[0]
        == "model"
    )  # several models
    assert lr_choice_display(lr_choice_frame(_data())).rows == []


def test_prediction_share_pools_seeds_and_skips_token_tasks() -> None:
    rows = [
        {
            "model": "m",
            "task": "cola",
            "k": 0,
            "probe_input": "all",
            "is_main": True,
            "run_id": "a",
            "metric": "matthews_correlation",
            "value": 0.1,
        },
        {
            "model": "m",
            "task": "cola",
            "k": 0,
            "probe_input": "all",
            "is_main": True,
            "run_id": "b",
            "metric": "matthews_correlation",
            "value": 0.0,
        },
        {
            "model": "m",
            "task": "cola",
            "k": 0,
            "probe_input": "all",
            "is_main": True,
            "run_id": "e",
            "metric": "matthews_correlation",
            "value": 0.9,
        },  # no predictions
        {
            "model": "m",
            "task": "cola",
            "k": 36,
            "probe_input": "all",
            "is_main": True,
            "run_id": "c",
            "metric": "matthews_correlation",
            "value": 0.0,
        },
        {
            "model": "m",
            "task": "ner",
            "k": 0,
            "probe_input": "all",
            "is_main": True,
            "run_id": "d",
            "metric": "f1",
            "value": 0.5,
        },
    ]
    names = ["unacceptable", "acceptable"]
    records = {
        "a": {"dev": {"label_names": names, "labels": [1, 1, 0, 0], "predictions": [1, 1, 1, 0]}},
        "b": {"dev": {"label_names": names, "labels": [1, 1, 0, 0], "predictions": [1, 1, 1, 1]}},
        "e": {},
        "c": {
            "dev": {"label_names": names, "labels": [1, 1, 0, 0], "predictions": [0, 0, 0, 0]}
        },  # k = 36: not counted
        "d": {
            "dev": {"label_names": ["O", "B-PER"], "labels": [0, 1, 0], "predictions": [0, 0, 0], "lengths": [2, 1]}
        },  # flat tokens
    }
    frame = prediction_share_frame(_data(main=pd.DataFrame(rows), records=records))
    assert frame.to_dict("records") == [
        {
            "model": "m",
            "task": "cola",
            "metric": "matthews_correlation",
            "score": pytest.approx(0.05),
            "seeds": 2,
            "predicted_class": "acceptable",
            "predicted_share": 7 / 8,
            "label_share": 0.5,
        }
    ]
    assert prediction_share_display(frame).rows[0] == ["CoLA", "0.050", "2", "acceptable", "87.5%", "50.0%"]


def test_size_studies_are_those_that_change_only_the_training_size():
    from papa.book import studies
    from papa.pipeline.plan import ROOT, load_config

    size_studies = lambda config: studies.size_studies(grid_model(config))

    assert size_studies(load_config(ROOT / "configs" / "default.yaml")) == [
        "colamore"
    ]  # not literal, cachedsmall or random (mpnetmore went with per_model)
    config = {
        "probe": {
            "lr": "select",
            "epochs": 20,
            "selection": "heldout",
            "modes": ["cached"],
            "max_train_examples": 2000,
            "heldout_examples": 200,
            "pool_examples": 2600,
            "patience": 3,
        },
        "name": "hand",
        "tasks": ["cola"],
        "models": ["m"],
    }
    more = {"name": "more", "max_train_examples": 8000, "pool_examples": 8551}
    assert size_studies(config | {"studies": [more]}) == ["more"]
    assert (
        size_studies(config | {"studies": [more | {"heldout_examples": 500}]}) == []
    )  # early stopping on another held-out size
    assert size_studies(config | {"studies": [more | {"max_eval_examples": 200}]}) == []  # another dev split
    assert size_studies(config | {"studies": [more | {"lr": 2e-5}]}) == []
    assert size_studies(config | {"studies": [{"name": "same", "seeds": [1]}]}) == []  # the main grid's size
    budget = config | {
        "models": ["m", "big"],
        "probe": config["probe"] | {"per_model": {"big": {"max_train_examples": 1000, "epochs": 15}}},
    }
    assert size_studies(budget | {"studies": [{"name": "bigmore", "models": ["big"], "max_train_examples": 2000}]}) == [
        "bigmore"
    ]  # 2,000 is more than big's 1,000
    assert (
        size_studies(budget | {"studies": [{"name": "both", "max_train_examples": 2000}]}) == []
    )  # m's main size: no change for m
    assert (
        size_studies(
            budget | {"studies": [{"name": "cap", "models": ["big"], "max_train_examples": 2000, "epochs": 20}]}
        )
        == []
    )  # big's cap is 15


def test_near_floor_pairs_sit_beside_their_checks() -> None:
    """Hand-made: m is near its CoLA floor, big clears it; m trained on 8,000 examples in study `more` (its k = 0
    CoLA mean 0.15) and on 2,000 in the main grid; m clears its SST-2 floor and is left out."""
    from papa.book.probe_checks import near_floor_display, near_floor_numbers

    config = {
        "models": ["m", "big"],
        "tasks": ["cola", "sst2"],
        "probe": {
            "lr": "select",
            "epochs": 20,
            "selection": "heldout",
            "modes": ["cached"],
            "max_train_examples": 2000,
            "heldout_examples": 200,
            "pool_examples": 2600,
            "patience": 3,
        },
        "name": "hand",
        "studies": [
            {
                "name": name,
                "models": ["m"],
                "tasks": ["cola"],
                "fractions": [0, 1],
                "max_train_examples": n,
                "pool_examples": 8551,
            }
            for name, n in (("more", 8000), ("less", 1000), ("mid", 4000))
        ],
    }
    names = ["unacceptable", "acceptable"]
    dev = {"label_names": names, "labels": [1, 1, 1, 0]}
    runs = {  # run id: (k, seed, score, training examples, selected epoch)
        "a": (0, 42, 0.04, 2000, 1),
        "b": (0, 43, 0.06, 2000, None),  # seed 43 reports no epoch
        "c": (72, 42, 0.02, 2000, 3),
    }
    for name, size, value in (("more", 8000, 0.15), ("less", 1000, 0.3), ("mid", 4000, 0.12)):
        runs |= {
            f"x__{name}__s42": (0, 42, value, size, 3),
            f"y__{name}__s42": (72, 42, value - 0.05 * (name == "more"), size, 3),
        }
    records = {run_id: _record("m", "cola", *fields) for run_id, fields in runs.items()}
    records["a"] |= {
        "dev": dev | {"predictions": [1, 1, 1, 1]},
        "epochs": [{"epoch": 1, "train_loss": 0.6}, {"epoch": 2, "train_loss": 0.5}],
    }
    records["b"] |= {
        "dev": dev | {"predictions": [1, 1, 1, 0]},
        "epochs": [{"epoch": e, "train_loss": v} for e, v in ((1, 0.7), (2, 0.4), (3, 0.3))],
    }
    everything = book_data_from(config, records, {})
    studies = (
        everything.studies
    )  # the largest study of more examples wins; one of fewer than the main grid's never counts
    nan = float("nan")
    columns = [
        "model",
        "task",
        "metric",
        "majority",
        "attention_free",
        "baseline",
        "baseline_low",
        "baseline_high",
        "informative",
    ]
    floors = pd.DataFrame(
        [
            ("big", "cola", "matthews_correlation", 0.0, 0.1, 0.32, 0.28, 0.36, True),
            ("m", "cola", "matthews_correlation", 0.0, 0.03, 0.05, 0.01, 0.09, False),
            ("m", "sst2", "accuracy", 0.51, nan, 0.8, 0.77, 0.83, True),
        ],
        columns=columns,
    )
    data = replace(everything, floors=floors, lr_choices=CHOICES)
    frame = near_floor_frame(data)
    assert frame.to_dict("records") == [
        {
            "model": "m",
            "task": "cola",
            "metric": "matthews_correlation",
            "score": 0.05,
            "low": 0.01,
            "high": 0.09,
            "floor": 0.03,
            "floor_kind": "attention-free",
            "seed_scores": [(0.04, 1), (0.06, None)],  # by seed; seed 43 has no reported epoch
            "loss_first": pytest.approx(0.65),
            "loss_last": pytest.approx(0.4),
            "heldout": 0.204,
            "predicted_share": 7 / 8,
            "label_share": 0.75,
            "more_data_score": 0.15,
            "more_data_setting": "8,000 training examples",
            "best_model": "big",
            "best_score": 0.32,
            "best_informative": True,
        }
    ]
    assert near_floor_display(frame).rows == [
        [
            "m",
            "CoLA",
            "0.050\u00a0[0.010,\u00a00.090]",
            "0.030 (attention-free)",
            "0.040 (epoch 1), 0.060",
            "0.65 → 0.40",
            "0.204",
        ]
        + ["87.5% (75.0% of the labels)", "0.150 (8,000 training examples)", "0.320 (big)"]
    ]
    assert near_floor_numbers(frame) == {"n_near_floor": 1, "near_floor_pairs": "CoLA (m)"}
    both = near_floor_display(
        near_floor_frame(replace(everything, floors=floors.assign(informative=False), studies={}))
    )
    assert [(row[0], row[1], row[-1]) for row in both.rows] == [
        ("big", "CoLA", "0.050 (m, not informative)"),
        ("m", "CoLA", "0.320 (big, not informative)"),
        ("m", "SST-2", None),
    ]
    assert both.rows[2][3] == "0.510 (majority)"  # no attention-free floor: the majority class's
    only_less = near_floor_frame(replace(data, studies={"less": studies["less"]}))
    assert only_less["more_data_setting"].tolist() == [None]
    empty = near_floor_frame(replace(everything, floors=floors.assign(informative=True), studies={}))
    assert (
        empty.empty
        and near_floor_display(empty).rows == []
        and near_floor_numbers(empty) == {"n_near_floor": 0, "near_floor_pairs": "none"}
    )


def test_share_cell_without_labels_shows_the_predictions_alone() -> None:
    from papa.book.probe_checks import _share_cell

    assert (_share_cell(0.875, 0.75), _share_cell(0.875, float("nan")), _share_cell(float("nan"), 0.5)) == (
        "87.5% (75.0% of the labels)",
        "87.5%",
        None,
    )


def test_sensitivity_reads_each_model_against_its_own_main_grid_settings() -> None:
    """big trains on 1,000 examples (15 epochs) in the main grid by probe.per_model; its 2,000-example study
    differs in size only, not in epochs: the row says so, and a study at m's own size has no row."""
    from papa.book.studies import sensitivity_table

    budget = {"per_model": {"big": {"max_train_examples": 1000, "epochs": 15}}}
    config = {
        "models": ["m", "big"],
        "tasks": ["sst2"],
        "probe": {"lr": "select", "epochs": 20, "selection": "heldout", "modes": ["cached"], "max_train_examples": 2000}
        | {"patience": 3, "pool_examples": 2600, "heldout_examples": 200}
        | budget,
        "studies": [{"name": "more", "max_train_examples": 2000}],
        "name": "hand",
    }

    runs = {  # run id: (model, k, score, training examples, epochs)
        "big0": ("big", 0, 0.8, 1000, 15),
        "bigall": ("big", 144, 0.72, 1000, 15),
        "m0": ("m", 0, 0.8, 2000, 20),
        "mall": ("m", 144, 0.78, 2000, 20),
        "big0__more__s42": ("big", 0, 0.84, 2000, 15),
        "bigall__more__s42": ("big", 144, 0.80, 2000, 15),
        "m0__more__s42": ("m", 0, 0.8, 2000, 20),
        "mall__more__s42": ("m", 144, 0.78, 2000, 20),
    }
    records = {
        run_id: _record(model, "sst2", k, 42, score, size, 4, epochs=epochs, total=144)
        for run_id, (model, k, score, size, epochs) in runs.items()
    }
    data = book_data_from(config, records, {})
    table = sensitivity_table(data)
    assert table[["study", "setting", "model", "k=0 official", "k=0 study"]].to_dict("records") == [
        {"study": "more", "setting": "2,000 training examples", "model": "big", "k=0 official": 0.8, "k=0 study": 0.84}
    ]
    assert table[["train examples official", "train examples study"]].values.tolist() == [[1000, 2000]]
    assert table["drop official"].tolist() == [pytest.approx(0.1)] and table["drop study"].tolist() == [
        pytest.approx(0.04 / 0.84)
    ]


def test_candidates_that_round_to_one_score_show_the_digits_that_tell_them_apart() -> None:
    """mpnet-base POS: 0.9292 against 0.9289 read "0.929" in every column, so the choice looked arbitrary; a model
    and task whose candidates tie at 3 digits get the digits that separate them (every column of that row)."""
    choices = {"m__sst2": CHOICES["m__sst2"]}
    runs = choices["m__sst2"]["runs"]
    choices["m__sst2"] = choices["m__sst2"] | {"runs": [runs[0] | {"heldout": 0.92921}, runs[1] | {"heldout": 0.92889}]}
    (row,) = lr_choice_display(lr_choice_frame(_data(choices))).rows
    assert [cell.split(" ")[0] for cell in row[2:4]] == ["0.9292", "0.9289"]
    assert lr_choice_display(lr_choice_frame(_data(CHOICES))).rows[1][2].startswith("0.830 ")  # apart at 3 digits
    below = choices["m__sst2"] | {"runs": [runs[0] | {"heldout": -0.0002}, runs[1] | {"heldout": 0.5}]}
    (row,) = lr_choice_display(lr_choice_frame(_data({"m__sst2": below}))).rows  # an MCC just below 0
    assert [cell.split(" ")[0] for cell in row[2:4]] == ["0.000", "0.500"]


def test_the_probe_checks_read_the_converged_runs_only():
    """A k = 0 seed whose held-out curve still rose at the cap is left out of the near-floor seeds and the prediction
    shares, as it is of the score beside them."""
    probe = {"lr": "select", "epochs": 20, "selection": "heldout", "modes": ["cached"], "max_train_examples": 2000}
    probe |= {"heldout_examples": 200, "pool_examples": 2600, "patience": 3}
    config = {"name": "hand", "models": ["m"], "tasks": ["cola"], "probe": probe}
    dev = {"label_names": ["unacceptable", "acceptable"], "labels": [1, 1, 1, 0]}
    records = {
        run_id: _record("m", "cola", 0, seed, score, 2000, 2)
        for run_id, seed, score in (("a", 42, 0.04), ("b", 43, 0.3))
    }
    records["a"] |= {"dev": dev | {"predictions": [1, 1, 1, 1]}, "convergence": {"converged": True}}
    records["b"] |= {"dev": dev | {"predictions": [0, 0, 0, 0]}, "convergence": {"converged": False}}
    records["c"] = _record("m", "cola", 72, 42, 0.02, 2000, 2) | {"convergence": {"converged": True}}
    data = book_data_from(config, records, {})
    floors = data.floors.assign(informative=False)
    checks, near = controls.probe_checks(replace(data, floors=floors))
    assert checks.prediction_share[["score", "seeds", "predicted_class", "predicted_share"]].to_dict("records") == [
        {"score": pytest.approx(0.04), "seeds": 1, "predicted_class": "acceptable", "predicted_share": 1.0}
    ]
    assert near["seed_scores"].tolist() == [[(0.04, 2)]] and near["score"].tolist() == [pytest.approx(0.04)]
