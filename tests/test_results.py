"""papa.analysis.results: arithmetic by hand, tidy loading of hand-written result files, floors and claims."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from papa.analysis.results import (
    attention_free_values,
    beyond_seed_range,
    epoch_table,
    floors_table,
    load_results,
    ranking_method,
    read_results,
    relative_drop,
    retained_gain,
    summarise,
)
from papa.core.errors import CorruptFileError, PapaError
from papa.core.io import atomic_write_json


def result(
    task="sst2",
    k=0,
    seed=1,
    score=0.8,
    probe_input="all",
    ranking="gates",
    model="minilm-l6",
    total=72,
    mode="cached",
    majority=0.5,
    metric="accuracy",
    epochs=2,
    lr=2e-5,
    train_examples=1000,
    selection="final",
) -> dict:
    """A result dict in the format of papa.probing.experiment.run_probe."""
    metrics = {metric: score, "main": score}
    if metric == "combined":
        metrics.update(accuracy=score + 0.01, f1=score - 0.01)
    history = [
        {"epoch": e, "train_loss": 1.0 / e, **{m: v - 0.1 * (epochs - e) for m, v in metrics.items()}}
        for e in range(1, epochs + 1)
    ]
    return {
        "config": {
            "model": model,
            "task": task,
            "constant_heads": k,
            "total_heads": total,
            "ranking": f"{model}__{task}__{ranking}.json" if k else None,
            "constants": None,
            "mode": mode,
            "seed": seed,
            "lr": lr,
            "epochs": epochs,
            "batch_size": 16,
            "probe_input": probe_input,
            "selection": selection,
        },
        "task": task,
        "metric": metric,
        "score": score,
        "metrics": metrics,
        "epochs": history,
        "floors": {
            "majority": {
                metric: majority,
                "main": majority,
                **({"accuracy": majority, "f1": majority} if metric == "combined" else {}),
            }
        },
        "timings": {"total": 3.5},
        "data": {"train_examples": train_examples, "eval_examples": 100},
    }


def write(folder: Path, runs: dict[str, dict]) -> Path:
    for name, obj in runs.items():
        atomic_write_json(folder / f"{name}.json", obj)
    return folder


# --- arithmetic --------------------------------------------------------------------------------


def test_relative_drop_and_retained_gain_by_hand():
    assert relative_drop(0.7, 0.8) == pytest.approx(0.125)
    assert retained_gain(0.7, 0.8, 0.6) == pytest.approx(0.5)
    assert relative_drop(0.8, 0.8) == 0
    assert relative_drop(0.9, 0.8) == pytest.approx(-0.125)  # a gain is a negative drop
    assert math.isnan(retained_gain(0.7, 0.6, 0.6))
    assert math.isnan(retained_gain(0.7, 0.5, 0.6))
    assert math.isnan(relative_drop(0.1, 0.0))


def test_beyond_seed_range_needs_more_than_the_seed_spread():
    assert beyond_seed_range([0.80, 0.82, 0.81], [0.70, 0.71])  # gap 0.105 > ranges 0.02, 0.01
    assert not beyond_seed_range([0.80, 0.90], [0.84, 0.86])  # gap 0.02 < range 0.10
    assert not beyond_seed_range([0.80, 0.84], [0.80, 0.76])  # gap 0.04 == range 0.04: not more
    assert beyond_seed_range([0.8], [0.79])  # one seed each: ranges 0
    with pytest.raises(PapaError):
        beyond_seed_range([], [0.5])


def test_ranking_method_from_file_name():
    assert ranking_method("minilm-l6__sst2__gates.json", 36) == "gates"
    assert ranking_method("bert__mrpc__deviation.json", 1) == "deviation"
    assert ranking_method("minilm-l6__sst2__gates.json", 0) == "none"
    assert ranking_method("plain.json", 5) == "plain"


# --- loading -----------------------------------------------------------------------------------


def test_load_results_tidy_shape(tmp_path):
    write(tmp_path / "a", {"sst2_k0_s1": result(), "sst2_k36_s1": result(k=36, score=0.75)})
    write(tmp_path / "b", {"mrpc_k0_s1": result(task="mrpc", metric="combined", score=0.7)})
    atomic_write_json(tmp_path / "ranking.json", {"ranking": [[0, 0]], "meta": {}})  # not a result
    (tmp_path / "plain_list.json").write_text("[[0, 1], [0, 0]]")  # official sorted_heads.json style
    df = load_results(tmp_path)
    # sst2: accuracy only (main dropped) → 1 row per run; mrpc: combined, accuracy, f1 → 3 rows
    assert len(df) == 2 + 3
    assert set(df["run_id"]) == {"sst2_k0_s1", "sst2_k36_s1", "mrpc_k0_s1"}
    assert "main" not in set(df["metric"])
    row = df[df["run_id"] == "sst2_k36_s1"].iloc[0]
    assert (row["k"], row["total_heads"], row["fraction"], row["ranking"]) == (36, 72, 0.5, "gates")
    assert (row["seed"], row["mode"], row["probe_input"], row["train_examples"]) == (1, "cached", "all", 1000)
    assert row["value"] == 0.75 and row["is_main"] and row["majority"] == 0.5 and row["seconds"] == 3.5
    mrpc = df[df["run_id"] == "mrpc_k0_s1"].set_index("metric")
    assert mrpc.loc["combined", "is_main"] and not mrpc.loc["f1", "is_main"]
    assert mrpc.loc["combined", "ranking"] == "none"
    assert df["is_main"].sum() == 3


def test_load_results_rejects_a_tampered_result(tmp_path):
    write(tmp_path, {"run": result()})
    path = tmp_path / "run.json"
    path.write_text(path.read_text().replace('"score": 0.8', '"score": 0.9'))
    with pytest.raises(CorruptFileError):
        load_results(tmp_path)


def test_repeated_stems_get_relative_run_ids(tmp_path):
    write(tmp_path / "x", {"run": result()})
    write(tmp_path / "y", {"run": result(seed=2)})
    assert sorted(read_results(tmp_path)) == ["x/run", "y/run"]


def test_epoch_table(tmp_path):
    write(tmp_path, {"r0": result(epochs=3), "r1": result(k=72, score=0.6, epochs=3)})
    table = epoch_table(tmp_path)
    assert len(table) == 6
    last = table[(table["run_id"] == "r1") & (table["epoch"] == 3)].iloc[0]
    assert last["score"] == pytest.approx(0.6) and last["ranking"] == "all" and last["k"] == 72
    first = table[(table["run_id"] == "r0") & (table["epoch"] == 1)].iloc[0]
    assert first["score"] == pytest.approx(0.6) and first["train_loss"] == 1.0


# --- summaries, floors, claims -----------------------------------------------------------------


def grid(
    tmp_path,
    baseline=(0.80, 0.82, 0.84),
    half=(0.79, 0.81, 0.83),
    full=(0.70, 0.72, 0.74),
    free=(0.55, 0.56, 0.57),
    majority=0.5,
    task="sst2",
    model="minilm-l6",
    total=72,
) -> Path:
    runs = {}
    for seed, (b, h, f, e) in enumerate(zip(baseline, half, full, free), start=1):
        tag = f"{model}_{task}_s{seed}"
        runs[f"{tag}_k0"] = result(task, 0, seed, b, model=model, total=total, majority=majority)
        runs[f"{tag}_half"] = result(task, total // 2, seed, h, model=model, total=total, majority=majority)
        runs[f"{tag}_all"] = result(task, total, seed, f, model=model, total=total, majority=majority)
        runs[f"{tag}_emb"] = result(task, 0, seed, e, "embeddings", model=model, total=total, majority=majority)
    return write(tmp_path, runs)


def test_summarise_means_and_stds(tmp_path):
    summary = summarise(load_results(grid(tmp_path)))
    assert len(summary) == 4  # k0 all, k0 embeddings, half, all
    base = summary[(summary["k"] == 0) & (summary["probe_input"] == "all")].iloc[0]
    assert base["mean"] == pytest.approx(0.82) and base["std"] == pytest.approx(0.02)
    assert (base["min"], base["max"], base["n_seeds"], base["ranking"]) == (0.80, 0.84, 3, "none")
    full = summary[summary["k"] == 72].iloc[0]
    assert full["mean"] == pytest.approx(0.72) and full["fraction"] == 1.0 and full["ranking"] == "all"


def test_summarise_single_seed_std_is_nan_and_mixed_settings_raise(tmp_path):
    write(tmp_path / "one", {"r": result()})
    assert math.isnan(summarise(load_results(tmp_path / "one"))["std"].iloc[0])
    write(tmp_path / "mixed", {"a": result(seed=1), "b": result(seed=2, lr=1e-3)})
    with pytest.raises(PapaError, match=r"differ in lr \(\[2e-05, 0\.001\]\): a, b") as error:
        summarise(load_results(tmp_path / "mixed"))
    assert "papa grid run CONFIG --prune" in str(error.value)
    write(tmp_path / "dup", {"a": result(seed=1), "b": result(seed=1)})
    with pytest.raises(PapaError, match="seed"):
        summarise(load_results(tmp_path / "dup"))


def test_floors_table_informative_flags(tmp_path):
    # sst2: baseline 0.82 ± 0.02 vs floors max(0.5, 0.56): gap 0.26 > margin 0.04 → informative
    grid(tmp_path / "g", task="sst2")
    # cola: baseline 0.10 ± 0.02 vs attention-free 0.09: gap 0.01 < margin 0.04 → not informative
    grid(
        tmp_path / "g",
        task="cola",
        baseline=(0.08, 0.10, 0.12),
        half=(0.08, 0.1, 0.1),
        full=(0.0, 0.01, 0.02),
        free=(0.08, 0.09, 0.10),
        majority=0.0,
    )
    # mrpc: majority 0.81 beats the attention-free floor; baseline 0.815 → gap 0.005 < 0.01 → not informative
    grid(tmp_path / "g", task="mrpc", baseline=(0.815,) * 3, free=(0.6,) * 3, majority=0.81)
    df = load_results(tmp_path / "g")
    floors = floors_table(df).set_index("task")
    assert floors.loc["sst2", "informative"] and not floors.loc["cola", "informative"]
    assert not floors.loc["mrpc", "informative"]
    assert floors.loc["sst2", "attention_free"] == pytest.approx(0.56)
    assert floors.loc["sst2", "margin"] == pytest.approx(0.04)
    assert floors.loc["mrpc", "margin"] == pytest.approx(0.01)
    assert floors.loc["sst2", "majority"] == 0.5 and floors.loc["sst2", "baseline_n"] == 3


#: What a grid config needs beside ``lr: select``: early stopping on a held-out draw from a training pool.
HELDOUT = {"selection": "heldout", "patience": 3, "pool_examples": 2600, "heldout_examples": 200}


def test_sensitivity_table_by_hand(tmp_path):
    from papa.book.load import book_data_from, study_frame
    from papa.book.studies import sensitivity_table
    from papa.pipeline.plan import grid_model

    runs = {}
    for seed in (1, 2, 3):  # official: 0.80 → 0.72 (drop 10%); tuned: 0.90 → 0.88 (drop ≈2.2%)
        runs[f"o0_{seed}"] = result(k=0, seed=seed, score=0.80 + 0.001 * seed, epochs=2)
        runs[f"oa_{seed}"] = result(k=72, seed=seed, score=0.72 + 0.001 * seed, epochs=2)
        for k, score in ((0, 0.90), (72, 0.88)):
            r = result(k=k, seed=seed, score=score + 0.001 * seed, epochs=4, lr=1e-3)
            r["config"]["selection"], r["selected_epoch"] = "heldout", 3
            runs[f"probe__sst2__k{k}__tuned__s{seed}"] = r  # a study's runs carry its name (papa.pipeline.plan.expand)
    tidy = load_results(write(tmp_path, runs))
    config = {
        "name": "x",
        "models": ["minilm-l6"],
        "tasks": ["sst2"],
        "probe": {"lr": 2e-5, "epochs": 2, "max_train_examples": 1000, "modes": ["cached"]},
        "studies": [{"name": "tuned", "lr": 1e-3, "epochs": 4, "selection": "heldout"}],
    }
    grid = grid_model(config)
    main = study_frame(tidy, grid)
    assert set(main["lr"]) == {2e-5}  # the tuned runs are not mixed into the main grid
    data = book_data_from(config, read_results(tmp_path), {})
    assert data.studies["tuned"]["run_id"].tolist() == study_frame(tidy, grid, grid.studies[0])["run_id"].tolist()
    row = sensitivity_table(data).iloc[0]
    assert row["setting"] == "lr 1e-3, 4 epochs, epoch chosen on held-out training data"
    assert row["k=0 official"] == pytest.approx(0.802) and row["k=all official"] == pytest.approx(0.722)
    assert row["drop official"] == pytest.approx(0.08 / 0.802)
    assert row["drop study"] == pytest.approx(0.02 / 0.902)
    assert (
        row["k=0 change beyond seed range"]
        and row["k=all change beyond seed range"]
        and row["mean epoch reported"] == 3
    )


def test_still_rising_by_hand():
    from papa.analysis.controls import still_rising

    def run(run_id, scores):
        return [
            {
                "run_id": run_id,
                "model": "minilm-l6",
                "task": "sst2",
                "k": 0,
                "seed": 1,
                "probe_input": "all",
                "epoch": e + 1,
                "score": s,
            }
            for e, s in enumerate(scores)
        ]

    epochs = pd.DataFrame(
        run("rising", [0.5, 0.6, 0.7, 0.8, 0.85, 0.9])
        + run("flat", [0.7, 0.71, 0.7, 0.7, 0.701, 0.7])
        + run("short", [0.1, 0.2, 0.3, 0.4])
    )
    table = still_rising(epochs).set_index("run_id")
    assert table.loc["rising", "late_gain"] == pytest.approx(0.85 - 0.6) and table.loc["rising", "rising"]
    assert not table.loc["flat", "rising"] and "short" not in table.index  # fewer than 2 × 3 epochs: not judged


def test_sensitivity_table_names_the_whole_split_and_skips_what_is_not_its_own(tmp_path):
    from papa.book.load import book_data_from, study_frame
    from papa.book.studies import sensitivity_table
    from papa.pipeline.plan import grid_model

    runs = {}
    for seed in (1, 2):
        for size, (k0, kall), tag in (
            (1000, (0.80, 0.72), ""),
            (67349, (0.85, 0.84), "__fulldata"),
            (8000, (0.83, 0.82), "__more"),
        ):
            runs[f"p0{tag}__s{seed}"] = result(k=0, seed=seed, score=k0 + 0.001 * seed, train_examples=size)
            runs[f"pa{tag}__s{seed}"] = result(k=72, seed=seed, score=kall + 0.001 * seed, train_examples=size)
        runs[f"pf__floorfull__s{seed}"] = result(
            k=0, seed=seed, score=0.7, probe_input="embeddings", train_examples=67349
        )
    config = {
        "name": "x",
        "models": ["minilm-l6"],
        "tasks": ["sst2"],
        "probe": {"lr": 2e-5, "epochs": 2, "max_train_examples": 1000, "modes": ["cached"]},
        "studies": [
            {"name": "fulldata", "max_train_examples": None},
            {"name": "floorfull", "max_train_examples": None, "probe_input": "embeddings"},
        ],
    }

    def table(names):
        folder = write(tmp_path / "_".join(names), {r: v for r, v in runs.items() if any(n in r for n in names)})
        assert set(study_frame(load_results(folder), grid_model(config))["train_examples"]) == {1000}
        return sensitivity_table(book_data_from(config, read_results(folder), {}))

    rows = table(["p0", "pa", "pf"])
    assert rows["study"].tolist() == ["fulldata"]  # the embeddings-only study is not a row of its own
    assert rows.iloc[0]["setting"] == "the whole training split (67,349 examples)"
    assert rows.iloc[0]["k=0 study"] == pytest.approx(0.8515) and rows.iloc[0]["drop study"] == pytest.approx(
        0.01 / 0.8515
    )
    # before fulldata has run, it has no row: the 8000-example runs of another study are not borrowed
    assert table(["p0__s", "pa__s", "__more"]).empty


# --- runs of the main grid's protocol: convergence flags, no per-epoch dev curve ------------------------------------


def test_epoch_table_and_tidy_frame_without_a_per_epoch_dev_curve(tmp_path):
    """dev_every_epoch=False: the epochs hold only the held-out score; the tidy frame carries the convergence flag."""
    early = result(seed=1) | {
        "epochs": [
            {"epoch": 1, "train_loss": 0.9, "heldout_main": 0.6},
            {"epoch": 2, "train_loss": 0.5, "heldout_main": 0.7},
        ],
        "convergence": {"converged": False, "best_epoch": 2, "epochs_trained": 2, "stopped_early": False},
        "dev": {"predictions": [1, 0, 1], "labels": [1, 1, 1], "label_names": ["a", "b"], "lengths": None},
    }
    final = result(seed=2) | {"epochs": [], "convergence": None}
    write(tmp_path, {"early": early, "final": final})
    epochs = epoch_table(tmp_path)
    assert epochs["run_id"].tolist() == ["early", "early"] and epochs["score"].isna().all()
    assert epochs["heldout"].tolist() == [0.6, 0.7] and epochs["train_loss"].tolist() == [0.9, 0.5]
    tidy = load_results(tmp_path).drop_duplicates("run_id").set_index("run_id")
    assert tidy.loc["early", "converged"] is False and tidy.loc["final", "converged"] is None
    assert tidy.loc["final", "selected_epoch"] is None or math.isnan(tidy.loc["final", "selected_epoch"])
    assert not any(
        isinstance(v, list) for v in load_results(tmp_path).to_numpy().ravel()
    )  # dev predictions stay in the records


def test_book_data_keeps_the_records_and_reads_the_chosen_lr(tmp_path):
    """``lr: select``: the main grid takes every chosen lr; the records (with their dev predictions) stay loaded."""
    from tests.hand_cells import book_data

    (tmp_path / "results").mkdir()
    write(
        tmp_path / "results",
        {
            "a": result(seed=1, lr=1e-3, epochs=20, selection="heldout"),
            "b": result(task="cola", seed=1, lr=2e-4, epochs=20, metric="matthews_correlation", selection="heldout"),
        },
    )
    config = {
        "name": "x",
        "models": ["minilm-l6"],
        "tasks": ["sst2", "cola"],
        "rank": {"methods": ["gates"]},
        "probe": {"lr": "select", "epochs": 20, "max_train_examples": 1000} | HELDOUT,
    }
    data = book_data(config, tmp_path)
    assert sorted(data.main["lr"].unique()) == [2e-4, 1e-3] and set(data.records) == {"a", "b"}
    assert data.records["a"]["config"]["lr"] == 1e-3


def test_study_frame_applies_per_model_settings(tmp_path):
    """probe.per_model: mpnet-base's runs (15-epoch cap, 1,000 examples) belong to the main grid beside the MiniLM's
    (20, 2,000); the largest size is kept per model and task, not per task."""
    from tests.hand_cells import book_data

    (tmp_path / "results").mkdir()
    runs = {
        "l6": result(seed=1, lr=1e-3, epochs=20, train_examples=2000, selection="heldout"),
        "mp": result(
            seed=1, lr=2e-4, epochs=15, train_examples=1000, model="mpnet-base", total=144, selection="heldout"
        ),
        "mp_other_cap": result(
            seed=2, lr=2e-4, epochs=20, train_examples=1000, model="mpnet-base", total=144, selection="heldout"
        ),
    }
    write(tmp_path / "results", runs)
    probe = {
        "lr": "select",
        "epochs": 20,
        "max_train_examples": 2000,
        "per_model": {"mpnet-base": {"epochs": 15, "max_train_examples": 1000}},
    } | HELDOUT
    config = {
        "name": "x",
        "models": ["minilm-l6", "mpnet-base"],
        "tasks": ["sst2"],
        "rank": {"methods": ["gates"]},
        "probe": probe,
    }
    assert sorted(book_data(config, tmp_path).main["run_id"].unique()) == ["l6", "mp"]


def test_floors_table_with_intervals_asks_the_lower_bound_to_clear_the_floor(tmp_path):
    """With a k = 0 interval, a task is informative when its lower bound lies above the higher floor *and* the
    seed-spread margin holds; a task without one keeps the margin rule alone."""
    grid(tmp_path / "g", task="sst2")  # baseline 0.82, floors max(0.5, 0.56)
    grid(
        tmp_path / "g", task="cola", baseline=(0.05, 0.05, 0.05), free=(0.0,) * 3, majority=0.0
    )  # no spread: margin rule says yes
    df = load_results(tmp_path / "g")
    assert floors_table(df).set_index("task").loc["cola", "informative"]
    intervals = {("minilm-l6", "cola", "cached"): (-0.01, 0.11), ("minilm-l6", "sst2", "cached"): (0.561, 0.9)}
    floors = floors_table(df, intervals=intervals).set_index("task")
    assert not floors.loc["cola", "informative"] and floors.loc["sst2", "informative"]
    assert (floors.loc["cola", "baseline_low"], floors.loc["cola", "baseline_high"]) == (-0.01, 0.11)
    intervals[("minilm-l6", "sst2", "cached")] = (0.56, 0.9)  # on the floor is not above it
    assert not floors_table(df, intervals=intervals).set_index("task").loc["sst2", "informative"]
    grid(tmp_path / "h", task="cola", baseline=(0.0, 0.0, 0.15), free=(0.0,) * 3, majority=0.0)  # mean 0.05, std 0.087
    spread = floors_table(load_results(tmp_path / "h"), intervals={("minilm-l6", "cola", "cached"): (0.02, 0.08)}).iloc[
        0
    ]
    assert (
        spread["baseline_low"] == 0.02 and not spread["informative"]
    )  # the interval clears 0, two seeds learned nothing


def test_baseline_intervals_bootstrap_the_k0_score_over_dev_examples():
    from papa.analysis.basis import baseline_intervals

    def record(predictions, labels):
        return {"metric": "accuracy", "dev": {"predictions": predictions, "labels": labels, "label_names": ["a", "b"]}}

    labels = [0, 1] * 50
    records = {
        "p1": record(labels, labels),
        "p2": record(labels, labels),
        "q1": record([0] * 100, labels),
        "r1": {"metric": "accuracy"},
    }
    rows = [("m", "sst2", "p1"), ("m", "sst2", "p2"), ("m", "cola", "q1"), ("m", "mrpc", "r1")]
    main = pd.DataFrame(
        [
            {"model": m, "task": t, "mode": "cached", "k": 0, "probe_input": "all", "is_main": True, "run_id": r}
            for m, t, r in rows
        ]
    )
    found = baseline_intervals(records, main)
    assert found[("m", "sst2", "cached")] == (1.0, 1.0)  # always right, on every resample
    low, high = found[("m", "cola", "cached")]  # one class of two, half the labels: accuracy 0.5
    assert 0.39 < low < 0.5 < high < 0.61
    assert ("m", "mrpc", "cached") not in found  # no dev predictions stored
    records["p2"] = {**record(labels, labels), "data": {"eval_indices_sha": "other"}}
    assert ("m", "sst2", "cached") not in baseline_intervals(records, main)  # the seeds scored different dev examples
    records["p2"] = {"metric": "accuracy"}
    assert ("m", "sst2", "cached") not in baseline_intervals(
        records, main
    )  # one seed without predictions: none for the group


def test_a_study_comparison_names_its_rule_beyond_seed_range_not_real():
    """The cached-vs-faithful table's yes/no is the seed-range rule, in a column that says so (the bootstrap's
    "real?" is another rule)."""
    from papa.analysis.controls import compare

    def runs(values: list[float]) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "model": "m",
                "task": "sst2",
                "ranking": "none",
                "k": 0,
                "probe_input": "all",
                "is_main": True,
                "value": values,
            }
        )

    out = compare(runs([0.80, 0.82]), runs([0.70, 0.71, 0.72]), "cached", "faithful")
    assert bool(out.loc[0, "beyond_seed_range"]) and "real" not in out
    assert out.loc[0, "difference"] == pytest.approx(0.71 - 0.81)
    assert not compare(runs([0.80, 0.90]), runs([0.84]), "cached", "faithful").loc[0, "beyond_seed_range"]


def test_a_pair_whose_attention_free_probes_all_rose_to_the_cap_is_floored_by_them_not_by_the_majority(tmp_path):
    """mpnet-base POS: every attention-free run still rose at its cap, and the floor fell back to the majority class
    (0.169), far below those runs' 0.86, so the pair looked informative by a margin it may not have. Their mean is a
    lower bound of the converged floor: it is the floor, marked as still rising."""
    df = load_results(grid(tmp_path))  # baseline 0.82 ± 0.02 (margin 0.04), attention-free 0.56, majority 0.5
    kept = df[df["probe_input"] != "embeddings"]  # the gate left no attention-free run
    rising = attention_free_values(df[df["probe_input"] == "embeddings"].assign(value=[0.79, 0.80, 0.81]))
    assert rising == {("minilm-l6", "sst2", "cached"): [0.79, 0.80, 0.81]}
    alone = floors_table(kept).iloc[0]
    assert math.isnan(alone["attention_free"]) and not alone["attention_free_rising"] and alone["informative"]
    floor = floors_table(kept, rising=rising).iloc[0]
    assert floor["attention_free"] == pytest.approx(0.80) and floor["attention_free_rising"]
    assert not floor["informative"]  # 0.82 − 0.80 is inside the margin
    converged = floors_table(df, rising=rising).iloc[0]  # a converged floor is never replaced
    assert converged["attention_free"] == pytest.approx(0.56) and not converged["attention_free_rising"]
