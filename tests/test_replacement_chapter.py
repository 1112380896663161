"""The "Which replacement?" chapter's numbers on hand-made result records: every mode's drops are read on its own
basis, paired with the main grid's k = 0 runs exactly as PAPA's are, and the answers follow from them."""

from __future__ import annotations

import numpy as np
import pytest
from hand_cells import table_cells

from papa.analysis import bootstrap as S
from papa.book.chapters import replacements as RPG
from papa.core.io import atomic_write_json
from papa.pipeline.plan import grid_model
from tests.hand_cells import book_data
from tests.test_chapters_science import _predictions, _record

TOTAL = 8
#: Accuracy per mode at half (k = 4) and all (k = 8) heads; k = 0 is 0.90.
ACCURACY = {"papa": (0.89, 0.85), "uniform": (0.88, 0.86), "mean": (0.80, 0.70), "zero": (0.75, 0.60)}
CONFIG = {
    "name": "hand",
    "models": ["ma"],
    "tasks": ["sst2"],
    "rank": {"methods": ["gates"]},
    "probe": {"lr": "select", "epochs": 20, "selection": "heldout", "modes": ["cached"], "max_train_examples": 2000}
    | {"patience": 3, "pool_examples": 2600, "heldout_examples": 200},
    "studies": [
        {
            "name": "replace",
            "chapter": "replacements",
            "fractions": ["1/2", 1],
            "replacements": ["uniform", "zero", "mean"],
        }
    ],
}


def _write(folder) -> None:
    out = folder / "results"
    for seed in (42, 43, 44):
        atomic_write_json(
            out / f"ma__sst2__k0__s{seed}.json", _record("ma", 0, TOTAL, seed, _predictions(0.90, seed), None, True)
        )
        for mode, accuracies in ACCURACY.items():
            for k, accuracy in zip((4, 8), accuracies):
                record = _record(
                    "ma",
                    k,
                    TOTAL,
                    seed,
                    _predictions(accuracy, seed + 10 * k),
                    "ma__sst2__gates.json" if k == 4 else None,
                    True,
                )
                record["config"]["replacement"] = mode
                suffix = "" if mode == "papa" else f"__{mode}__replace"
                atomic_write_json(out / f"ma__sst2__k{k}{suffix}__s{seed}.json", record)


@pytest.fixture(scope="module")
def science(tmp_path_factory):
    folder = tmp_path_factory.mktemp("replace")
    _write(folder)
    data = book_data(CONFIG, folder)
    return folder, data, RPG.replacement_answers(data)


def test_the_main_grid_holds_papa_only_and_every_mode_pairs_with_its_k0_runs(science):
    folder, data, result = science
    assert set(data.main["replacement"]) == {"papa"} and len(data.main["run_id"].unique()) == 9
    assert set(data.studies["replace"]["replacement"]) == {"uniform", "zero", "mean"}
    cells = result.cells.set_index(["replacement", "at"])
    assert sorted(set(result.cells["replacement"])) == ["mean", "papa", "uniform", "zero"]
    for mode, (half, full) in ACCURACY.items():
        assert cells.loc[(mode, "all"), "paired_score"] == pytest.approx(full)
        assert cells.loc[(mode, "all"), "relative_drop"] == pytest.approx((0.90 - full) / 0.90)
        assert cells.loc[(mode, "half"), "relative_drop"] == pytest.approx((0.90 - half) / 0.90)
    # the zero mode's interval at all heads is stats.paired_bootstrap of its runs against the main k = 0 runs
    base = [S.run_statistics(data.records[f"ma__sst2__k0__s{s}"]) for s in (42, 43, 44)]
    zero = [S.run_statistics(data.records[f"ma__sst2__k8__zero__replace__s{s}"]) for s in (42, 43, 44)]
    expected = S.paired_bootstrap(base, zero, "accuracy", pairs=[(0, 0), (1, 1), (2, 2)], dev_set="sst2:same")
    assert cells.loc[("zero", "all"), "relative_low"] == expected["relative_low"]
    assert cells.loc[("zero", "all"), "relative_high"] == expected["relative_high"]


def test_extra_drops_and_answers(science):
    _, data, result = science
    extra = result.extra.set_index(["replacement", "at"])
    assert extra.loc[("zero", "all"), "extra"] == pytest.approx((0.85 - 0.60) / 0.90)
    assert extra.loc[("uniform", "all"), "extra"] == pytest.approx((0.85 - 0.86) / 0.90)
    answers = result.answers.set_index("replacement")
    assert (
        answers.loc["zero", "answer"] == "yes" and answers.loc["mean", "answer"] == "yes"
    )  # 25 and 15 points more, on 400 examples
    # uniform keeps 4 examples more than PAPA's constant on every seed: a small, consistent gain over the same examples
    assert answers.loc["uniform", "answer"] == "the reverse" and answers.loc["uniform", "high"] < 0
    numbers = RPG.replacement_numbers(result, data.config)
    assert numbers["q_zero_answer"] == "yes"
    low, high = answers.loc["zero", "low"], answers.loc["zero", "high"]
    assert numbers["q_zero_number"] == f"+27.8 points [{low * 100:+.1f}, {high * 100:+.1f}]"
    assert numbers["replacement_runs"] == "18 converged probe results of uniform, mean and zero"
    assert numbers["one_seed_models"] == "ma"  # the study inherits the probe's seeds: [42]
    three = grid_model(CONFIG | {"probe": CONFIG["probe"] | {"seeds": [42, 43, 44]}})
    assert RPG.replacement_numbers(result, three)["one_seed_models"] == "none"


def test_the_tables_and_the_figure_show_every_mode(science):
    _, _, result = science
    drops = table_cells(RPG.mode_drops_display(result))
    assert list(drops.columns) == ["task", "constant", "papa", "uniform", "mean", "zero"]
    row = drops[drops["constant"] == "every head"].iloc[0]
    cell = result.cells[(result.cells["replacement"] == "zero") & (result.cells["at"] == "all")].iloc[0]
    assert row["zero"] == f"{cell.relative_drop:.1%} [{cell.relative_low:.1%}, {cell.relative_high:.1%}]"
    by_model = table_cells(RPG.by_model_display(result))
    assert len(by_model) == 8 and set(by_model["replacement"]) == {"papa", "uniform", "mean", "zero"}
    figure = RPG.fig_replacements(result)
    spec = figure.chart.to_dict()
    values = spec["datasets"][next(iter(spec["datasets"]))]
    drawn = {(v["replacement"], v["constant"]): v["value"] for v in values}
    assert drawn[("mean", "every head")] == pytest.approx(round((0.90 - 0.70) / 0.90, 4))
    assert np.isclose(len(drawn), 8)


@pytest.mark.data
def test_the_committed_replacement_study_reads_papas_drops_from_the_results_basis():
    """The default grid's committed runs: in the replacements chapter, PAPA's drop at half and at all heads is the
    results chapter's claim cell (one basis), and every other mode's cell pairs with the same k = 0 runs (the same
    k = 0 score). Every committed result is read, so the check holds while the grid is re-running."""
    import math

    from papa.book.chapters.results import answers as build_answers
    from papa.pipeline.plan import ROOT, load_config

    data = book_data(load_config(ROOT / "configs" / "default.yaml"), ROOT / "book" / "runs" / "default" / "artifacts")
    science, claims = RPG.replacement_answers(data), build_answers(data).cells.set_index(["model", "task", "at"])
    cells = science.cells.set_index(["model", "task", "at"])
    papa, others = cells[cells["replacement"] == "papa"], cells[cells["replacement"] != "papa"]
    assert len(papa) == len(claims) and len(others)  # the study's committed runs have cells of their own
    for key, row in claims.iterrows():
        drop = papa.loc[key, "relative_drop"]
        assert drop == row["relative_drop"] or (math.isnan(drop) and math.isnan(row["relative_drop"])), key
    for key, row in others.iterrows():
        assert row["score_0"] == papa.loc[key, "score_0"], (key, row["replacement"])
    ran, bases = RPG.replacement_runs(data), RPG.replacement_bases(data)
    kept = sum(int(b.runs["run_id"][b.runs["replacement"] == m].nunique()) for m, b in bases.items() if m != "papa")
    total = int(ran.loc[ran["replacement"] != "papa", "run_id"].nunique())
    assert science.words.startswith(f"{kept} converged probe results of uniform, mean and zero")
    assert science.words.endswith(f" ({total - kept} of {total} left out: not converged)") == (total > kept)
