"""The results chapter's robustness sections (papa.analysis.robustness, papa.book.chapters.robustness) on hand-made
draws: the agreement rule against chance (exact hypergeometric tails), claim 1 per gate draw and with the draws
pooled (a paired bootstrap over the draws' runs), the all-heads drop at the runner-up lr, the claims per model, and
"not in this grid" where a grid has none of these runs."""

from __future__ import annotations

import math

import pytest

from papa.analysis import bootstrap as S
from papa.analysis import robustness as R
from papa.book.chapters import results as RS
from papa.book.chapters import robustness as RB
from papa.core.io import atomic_write_json
from tests.hand_cells import book_data
from tests.test_chapters_science import CONFIG, TOTAL, _predictions, _record, _stats, write_grid

HEADS = [[0, h] for h in range(4)] + [[1, h] for h in range(4)]


def _agreement(overlap: float, spearman: float, seeds=(42, 43)) -> dict:
    return {"seeds": list(seeds), "overlap": overlap, "overlap_chance": 18.0, "spearman": spearman}


def test_the_overlap_of_two_random_halves_is_hypergeometric():
    # 4 heads, halves of 2: both halves equal with probability 1 / C(4, 2); sharing none, the same
    assert R.overlap_p_value(2, 4) == pytest.approx(1 / 6) and R.overlap_p_value(1, 4) == pytest.approx(5 / 6)
    assert R.overlap_p_value(0, 4) == 1.0 and R.overlap_p_value(1.9, 4) == pytest.approx(5 / 6)  # rounded down


def test_draws_that_agree_no_better_than_chance_give_no_informative_ranking():
    """72 heads: chance shares 18 of 36. minilm-l6 CoLA's 20 is chance; SST-2's 25 is not."""
    informative, reason, p = R.ranking_judgement([_agreement(20, 0.05), _agreement(19, 0.02)], 72)
    assert (informative, reason) == (False, "overlap_at_chance") and p > 0.05
    informative, reason, p = R.ranking_judgement([_agreement(25, 0.4), _agreement(27, 0.5)], 72)
    assert (informative, reason) == (True, "above_chance") and p < 0.01
    assert R.ranking_judgement([_agreement(27, -0.1)], 72)[:2] == (False, "order_at_chance")
    assert R.ranking_judgement([], 72)[:2] == (None, "one_draw")


def _meta(overlaps: list[float], near: tuple = ()) -> dict:
    draws = [{"seed": s, "final": 0.1, "floor": 0.0, "chance": 0.0, "near_floor": s in near} for s in (42, 43, 44)]
    pairs = [[42, 43], [42, 44], [43, 44]]
    agreement = [{"seeds": p, "overlap": o, "overlap_chance": 2.0, "spearman": 0.3} for p, o in zip(pairs, overlaps)]
    return {"method": "gates", "draws": draws, "agreement": agreement, "near_floor": len(near)}


def test_the_agreement_table_reads_the_combined_rankings_metadata():
    rankings = {f"m{i}__sst2__gates": HEADS for i in (1, 2)} | {"m1__sst2__gates-42": HEADS}
    meta = {"m1__sst2__gates": _meta([4, 4, 4]), "m2__sst2__gates": _meta([2, 3, 1], near=(43,))}
    meta["m1__sst2__gates-42"] = {"method": "gates"}  # a single draw: not a combined ranking
    frame = R.agreement_frame(meta, rankings).set_index("model")
    assert list(frame.index) == ["m1", "m2"]
    assert frame.loc["m1", ["heads", "half", "pairs", "overlap_min", "overlap_max", "overlap_chance"]].tolist() == [
        8, 4, 3, 4.0, 4.0, 2.0
    ]  # fmt: skip
    # the same first half in every pair of draws: 1 / C(8, 4) by chance
    assert frame.loc["m1", "p_value"] == pytest.approx(1 / 70) and bool(frame.loc["m1", "informative"])
    # mean 2 of 4 shared: exactly chance for 8 heads
    assert (bool(frame.loc["m2", "informative"]), frame.loc["m2", "reason"], frame.loc["m2", "near_floor"]) == (
        False, "overlap_at_chance", [43]
    )  # fmt: skip
    words = RB.agreement_summary(frame.reset_index())
    assert "1 of 2 model/task pairs have draws that agree above chance" in words
    assert "random-heads drop): m2 on SST-2" in words and "m2 on SST-2 (seed 43)" in words
    meta["m2__sst2__gates"] = _meta([2, 3, 1], near=(43, 44))
    words = RB.agreement_summary(R.agreement_frame(meta, rankings))
    assert "m2 on SST-2 (seeds 43 and 44)" in words and "without having learned" not in words
    # draws that agree although none learned the task (minilm-l6 MRPC's three draws in the committed grid)
    meta["m1__sst2__gates"] = _meta([4, 4, 4], near=(42, 43, 44))
    words = RB.agreement_summary(R.agreement_frame(meta, rankings))
    assert words.endswith(
        ". The draws of m1 on SST-2 agree although every one's gate probe ended near its floor: their ranking orders"
        " the heads alike without having learned the task"
    )
    shown = RB.agreement_display(R.agreement_frame(meta, rankings))._repr_html_()
    assert shown.count("every draw near its floor: not learned from the task") == 1
    one = {"m1__sst2__gates": _meta([]) | {"draws": _meta([])["draws"][:1]}}  # one draw: no overlap, no ρ
    shown = RB.agreement_display(R.agreement_frame(one, rankings))._repr_html_()
    assert "nan" not in shown and "one gate draw: nothing to agree with" in shown


#: Accuracy of each draw's own half-heads run (seed 42), per model.
DRAWS = {"ma": (0.84, 0.80, 0.76), "mb": (0.88, 0.86, 0.87)}


def _draws_grid(folder) -> None:
    write_grid(folder)
    for model, accuracies in DRAWS.items():
        for seed, accuracy in zip((42, 43, 44), accuracies):
            record = _record(
                model, 4, TOTAL, 42, _predictions(accuracy, 200 + seed), f"{model}__sst2__gates-{seed}.json", True
            )
            atomic_write_json(folder / "results" / f"{model}__sst2__k4__gates-{seed}__draws__s42.json", record)
        for k, accuracy in ((0, 0.80), (8, 0.60)):
            record = _record(model, k, TOTAL, 42, _predictions(accuracy, 300 + k), None, True, lr=2e-4)
            atomic_write_json(folder / "results" / f"{model}__sst2__k{k}__lrnext__s42.json", record)
        choice = {"model": model, "task": "sst2", "lr": 1e-3, "runner_up": 2e-4, "within_noise": model == "ma"}
        choice |= {"heldout": {"0.001": 0.9, "0.0002": 0.89}, "stderr": {"0.001": 0.01, "0.0002": 0.01}}
        atomic_write_json(
            folder / "lr" / f"{model}__sst2.json", choice | {"converged": {"0.001": True, "0.0002": False}}
        )
        atomic_write_json(
            folder / "rankings" / f"{model}__sst2__gates.json", {"ranking": HEADS, "meta": _meta([4, 4, 4])}
        )


CONFIG_DRAWS = CONFIG | {
    "studies": CONFIG["studies"]
    + [
        {"name": "draws", "models": ["ma", "mb"], "fractions": ["1/2"], "methods": ["gates-42", "gates-43", "gates-44"]}
        | {"seeds": [42]},
        {"name": "lrnext", "fractions": [0, 1], "lr": "runner-up", "seeds": [42]},
    ]
}


@pytest.fixture(scope="module")
def robust(tmp_path_factory):
    folder = tmp_path_factory.mktemp("draws")
    _draws_grid(folder)
    data = book_data(CONFIG_DRAWS, folder)
    chapter = RS.answers(data, resamples=300)
    return folder, data, RB.build(data, chapter.cells, chapter.judged, chapter.ranking)


def test_claim1_per_draw_and_with_the_draws_pooled(robust):
    folder, data, rb = robust
    by_draw = rb.by_draw.set_index("ranking")
    assert list(by_draw.index) == ["gates, combined (mean λ)", "draw 42", "draw 43", "draw 44", "the draws pooled"]
    assert set(by_draw["pairs"]) == {2}
    # draw 44 on ma: 0.85 → 0.76 at seed 42, a 10.6% drop
    cell = rb.draws[(rb.draws["model"] == "ma") & (rb.draws["ranking"] == "gates-44")].iloc[0]
    assert cell["relative_drop"] == pytest.approx((0.85 - 0.76) / 0.85) and cell["n_pairs"] == 1
    # the draws pooled: the seed-42 k = 0 run paired with each draw's run, the bootstrap drawing those pairs
    pooled = rb.draws[(rb.draws["model"] == "ma") & (rb.draws["ranking"] == "draws")].iloc[0]
    base = [_stats(folder, f"ma__sst2__k0__s{s}") for s in (42, 43, 44)]
    other = [_stats(folder, f"ma__sst2__k4__gates-{s}__draws__s42") for s in (42, 43, 44)]
    expected = S.paired_bootstrap(base, other, "accuracy", pairs=[(0, 0), (0, 1), (0, 2)], dev_set="sst2:same")
    for column in ("relative_drop", "relative_low", "relative_high"):
        assert pooled[column] == expected[column], column
    assert pooled["relative_drop"] == pytest.approx((0.85 - 0.80) / 0.85) and pooled["n_pairs"] == 3
    assert "claim 1 reads: gates, combined (mean λ)" in rb.glue["draws_summary"]


def test_draws_that_cannot_be_pooled_are_named_not_skipped(robust):
    """Without ma's seed-42 k = 0 record no draw run of ma pairs with a k = 0 run: its draws are not pooled, and the
    chapter's sentence names it (the per-draw cells stay)."""
    _, data, rb = robust
    draws = ["gates-42", "gates-43", "gates-44"]
    records = {run: record for run, record in data.records.items() if run != "ma__sst2__k0__s42"}
    drawn, pooled = R.draw_cells(data.basis, draws), R.draws_pooled_cells(data.basis, records, draws)
    assert list(pooled["model"]) == ["mb"] and R.unpooled_pairs(drawn, pooled) == [("ma", "sst2")]
    assert R.unpooled_pairs(drawn, R.draws_pooled_cells(data.basis, data.records, draws)) == []
    words = RB.draws_summary(rb.by_draw, "gates", R.unpooled_pairs(drawn, pooled))
    assert words.endswith("; the draws of ma on SST-2 are not pooled (fewer than two of their runs pair with a"
                          " converged k = 0 run of the same probe seed)")  # fmt: skip
    assert "not pooled" not in rb.glue["draws_summary"]


def test_the_runner_up_drop_shows_where_the_lr_choice_was_within_noise(robust):
    _, _, rb = robust
    row = rb.runner_up.iloc[0]
    assert list(rb.runner_up["model"]) == ["ma"]  # mb's choice was not within noise
    assert (row["heldout"], row["runner_up_heldout"], row["runner_up_converged"]) == (0.9, 0.89, False)
    assert row["runner_up_drop"] == pytest.approx(0.25) and row["drop"] == pytest.approx((0.85 - 0.70) / 0.85)
    assert bool(row["paired"]) and bool(row["runner_up_paired"])
    # paired runs whose relative drop is undefined (a k = 0 MCC at 0) against runs the grid lacks
    assert RB.drop_cell(True, math.nan, math.nan, math.nan) == "undefined"
    assert RB.drop_cell(False, math.nan, math.nan, math.nan) == "–"
    assert RB.drop_cell(True, 0.25, 0.2, 0.3) == "25.0% [20.0%, 30.0%]"
    assert "ma on SST-2 17.6% [" in rb.glue["runner_up_summary"] and "25.0%" in rb.glue["runner_up_summary"]
    assert "still rising" in RB.runner_up_display(rb.runner_up)._repr_html_()


def test_the_claims_per_model_beside_the_pooled_ones(robust):
    _, _, rb = robust
    frame = rb.by_model.set_index("models")
    assert list(frame.index) == ["all models (pooled)", "ma", "mb"]
    assert frame.loc["ma", "claim2"].startswith("17.6% [") and frame.loc["mb", "claim2"].startswith("10.0% [")
    assert frame.loc["ma", "pairs, all"] == 1
    assert rb.glue["model_verdicts_summary"].startswith("per model, ma: claim 1 ")
    assert "Claim 3 compares models" in RB.models_display(rb.by_model)._repr_html_()


def test_a_grid_without_draws_says_so(tmp_path):
    write_grid(tmp_path)
    data = book_data(CONFIG, tmp_path)
    chapter = RS.answers(data, resamples=50)
    rb = RB.build(data, chapter.cells, chapter.judged, chapter.ranking)
    assert rb.agreement.empty and rb.by_draw.empty and rb.runner_up.empty
    assert rb.glue["agreement_summary"].startswith("not in this grid")
    assert rb.glue["draws_summary"].startswith("not in this grid")
    assert rb.glue["runner_up_summary"].startswith("not in this grid")
    assert "Not in this grid" in RB.agreement_display(rb.agreement)._repr_html_()
    assert "Not in this grid" in RB.draws_display(rb.draws, "gates")._repr_html_()
    assert not math.isnan(chapter.judged.evidence.all["value"])


def test_the_random_baseline_reads_any_study_of_seeded_orderings(tmp_path):
    """mpnet-base's orderings run in the ``randombase`` study: the baseline pools random-<n> runs by ranking, not by
    study name."""
    from papa.analysis.drop_tables import random_baseline

    write_grid(tmp_path, random=False)
    for r in (1, 2, 3):
        record = _record("mb", 4, TOTAL, 42, _predictions(0.75, 100 + r), f"mb__sst2__random-{r}.json", True)
        atomic_write_json(tmp_path / "results" / f"mb__sst2__k4__random-{r}__randombase__s42.json", record)
    config = CONFIG | {"studies": [{"name": "randombase", "models": ["mb"], "fractions": ["1/2"]}
                                   | {"methods": ["random-1", "random-2", "random-3"], "seeds": [42]}]}  # fmt: skip
    data = book_data(config, tmp_path)
    frame = random_baseline(data.records, resamples=50)
    assert frame[["model", "ranking", "n_runs", "n_random", "verdict"]].values.tolist() == [
        ["mb", "gates", 3, 3, "beats"]
    ]
