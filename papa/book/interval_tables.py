"""The results and controls chapters' tables with intervals, for reading: the main table, the random
baseline, the claims, the paper's table, the literal setting and the convergence counts."""

from __future__ import annotations

from typing import Any

import pandas as pd

from papa.book import words as W
from papa.book.table_format import Table, key_text, model_task_kinds, table
from papa.book.words import is_missing, lr_text, percent, text

INTERVAL_NOTE = (
    f"The difference to k = 0 is paired by probe seed and on the same dev examples, with its {W.INTERVAL_COVERS};"
    " real?: whether that interval excludes 0."
)


def _cells(cell, *columns: pd.Series) -> list[str | None]:
    """``with_interval(cell, value, low, high)`` down the columns ``value``, ``low``, ``high``."""
    return [W.with_interval(cell, *values) for values in zip(*columns)]


def _heads(frame: pd.DataFrame) -> list[str]:
    return [W.heads_words(k, t) for k, t in zip(frame["k"], frame["total_heads"])]


def main_table_display(main: pd.DataFrame) -> Table:
    """:func:`papa.analysis.drop_tables.main_table` for reading: per model, task and constant heads, the score, the
    difference to k = 0 and the relative drop with their intervals, real?, and the seeds."""
    spread = [
        None if is_missing(a) or is_missing(b) else f"{float(b) - float(a):.3f}"
        for a, b in zip(main["seed_min"], main["seed_max"])
    ]
    frame = key_text(main).assign(
        heads=_heads(main),
        score_cell=[W.score_spread(m, s) for m, s in zip(main["score"], main["std"])],
        difference_cell=_cells(W.signed, main["difference"], main["low"], main["high"]),
        drop_cell=_cells(percent, main["relative_drop"], main["relative_low"], main["relative_high"]),
        spread=spread,
    )
    if "n_converged" in main:
        counts = zip(main["n_converged"], main["n_runs"])
        frame = frame.assign(converged=[None if is_missing(n) else f"{c} of {n}" for c, n in counts])
    kinds: dict[str, Any] = model_task_kinds(frame) | {"heads": "text", "ranking": "text", "score_cell": text}
    kinds |= {"difference_cell": text, "drop_cell": text, "real": "yes/no", "spread": text, "n_seeds": "int"}
    if "converged" in frame:
        kinds["converged"] = "text"
    headers = {"heads": "constant heads", "score_cell": "score ± seed std", "real": "real?", "spread": "seed range"}
    headers |= {"difference_cell": "difference to k = 0 [95% interval]", "drop_cell": "relative drop [95% interval]"}
    headers |= {"n_seeds": "seeds", "converged": "converged seeds"}
    no_pair = "k = 0 is the reference, or no run here shares a probe seed and stored dev predictions with k = 0"
    missing = {"difference_cell": no_pair, "real": "no interval at k = 0", "score_cell": "not run", "spread": "not run"}
    missing["drop_cell"] = (
        f"{no_pair}, or the k = 0 score is within noise of zero (a bootstrap resample's is ≤ 0), so the ratio"
        " (s₀ − sₖ)/s₀ is not shown"
    )
    notes = [
        INTERVAL_NOTE,
        "seed range: max − min of the per-seed scores; ± is their standard deviation (a score without ± comes from"
        " one seed).",
    ]
    # the drop and real? stay in view
    return table(frame, kinds, headers, missing, notes, details=["difference_cell", "spread", "n_seeds"])


def random_display(baseline: pd.DataFrame) -> Table:
    """:func:`papa.analysis.drop_tables.random_baseline` for reading."""
    frame = key_text(baseline).assign(
        heads=_heads(baseline),
        difference_cell=_cells(W.signed, baseline["difference"], baseline["low"], baseline["high"]),
        runs=[f"{a} / {b}" for a, b in zip(baseline["n_runs"], baseline["n_random"])],
        verdict=[W.RANDOM_VERDICTS[v] for v in baseline["verdict"]],
    )
    kinds = model_task_kinds(frame) | {"heads": "text", "k": "int", "ranking": "text", "score": "score"}
    kinds |= {"random_score": "score", "difference_cell": text, "verdict": "text", "runs": "text"}
    headers = {"heads": "constant heads", "score": "ranking's score", "random_score": "random's score"}
    headers |= {"difference_cell": "ranking − random [95% interval]", "runs": "probe results (ranking / random)"}
    details = ["k", "score", "random_score", "runs"]
    empty = "No seeded random ordering ran in this grid, so no ranking can be compared with random here."
    return table(frame, kinds, headers, details=details, empty=empty)


def verdicts_display(claims: pd.DataFrame) -> Table:
    """:func:`papa.book.chapters.results.claims_frame` for reading."""
    kinds = dict.fromkeys(["claim", "verdict", "ours", "reason", "paper", "rule"], "text")
    headers = {"ours": "our runs (pooled 95% interval)", "reason": "why", "paper": "the paper"}
    headers["rule"] = "rule and runs counted"
    return table(claims, {c: k for c, k in kinds.items() if c in claims}, headers)


def verdict_sensitivity_display(frame: pd.DataFrame) -> Table:
    """:func:`papa.book.chapters.results.sensitivity_frame` for reading: each claim's number and verdict per basis,
    and the pairs each drop averages (at half and at all heads) under "More columns"."""
    kinds = {"basis": "text", "n_half": "int", "n_all": "int", "excluded_half": "int", "excluded_all": "int"}
    kinds |= {"claim1": text}
    kinds |= {"claim1_verdict": "text", "claim2": text, "claim2_verdict": "text", "claim2b": text}
    kinds |= {"claim2b_verdict": "text", "claim3": text, "claim3_verdict": "text", "paper": "text"}
    headers = {"n_half": "pairs, half", "n_all": "pairs, all", "excluded_half": "left out, half (drop undefined)"}
    headers["excluded_all"] = "left out, all (drop undefined)"
    headers |= {"claim1": "1. drop, half constant", "claim1_verdict": "1. verdict", "claim2": "2. drop, all constant"}
    headers |= {"claim2_verdict": "2. verdict", "claim2b": "2b. largest drop", "claim2b_verdict": "2b. verdict"}
    headers |= {"claim3": "3. ρ (models)", "claim3_verdict": "3. verdict", "paper": "the paper, for this basis"}
    details = ["n_half", "n_all", "excluded_half", "excluded_all", "claim2b", "claim2b_verdict", "claim3", "paper"]
    return table(frame, kinds, headers, details=details)


def paper_table_display(frame: pd.DataFrame) -> Table:
    """:func:`papa.analysis.analogues.paper_table` for reading: the scores at k = 0, half and all heads and the
    relative drops with their intervals, per model and task and each model's averages."""
    if not len(frame):
        return table(frame, {"task": "text"}, empty="No run to tabulate.")
    if "n_tasks" in frame:  # a model without an informative task has no average to show
        frame = frame[~(frame["task"].isin(["average", "common"]) & (frame["n_tasks"].fillna(0) == 0))]
    shown = key_text(frame)
    label = {"average": "average of its informative tasks", "common": "average of the tasks every model has (claim 3)"}
    shown["task"] = [label.get(raw, name) for raw, name in zip(frame["task"], shown["task"])]
    for at in ("half", "all"):
        nan = pd.Series(float("nan"), index=frame.index)
        low, high = (frame[f"drop_{at}_{s}"] if f"drop_{at}_{s}" in frame else nan for s in ("low", "high"))
        shown[f"drop_{at}"] = _cells(percent, frame[f"drop_{at}"], low, high)
    kinds = model_task_kinds(shown) | {"score_0": "score", "score_half": "score", "score_all": "score"}
    kinds |= {"drop_half": text, "drop_all": text, "informative": "yes/no"}
    if "max_drop_all" in shown:
        kinds["max_drop_all"] = "percent"
    headers = {"score_0": "k = 0", "score_half": "half constant", "score_all": "all constant"}
    headers |= {"drop_half": "drop, half", "drop_all": "drop, all", "informative": "informative"}
    headers["max_drop_all"] = "largest drop, all"
    notes = [
        "Drops: paired by probe seed over the converged runs (the main table's); an average's interval is the pooled"
        " 95% bootstrap interval of that average."
    ]
    if len(frame):
        average, most = frame["paper_average_drop_all"].iloc[0], frame["paper_max_drop_all"].iloc[0]
        notes.append(
            f"The paper: {average:.0%} average relative drop with all heads constant, at most {most:.0%} on a task."
        )
    claim3 = "not shown on claim 3's row"
    missing = {"max_drop_all": "given on each model's average row only", "score_half": f"not run, or {claim3}"}
    no_drop = "not run, no paired interval, or the k = 0 score is within noise of zero (the ratio is not shown)"
    missing |= {"drop_half": f"{claim3}, {no_drop}", "drop_all": no_drop, "score_all": claim3}
    return table(shown, kinds, headers, missing, notes, details=["score_half", "score_all"])


def literal_display(comparison: pd.DataFrame) -> Table:
    """:func:`papa.book.chapters.controls.literal_comparison` for reading."""
    c = comparison
    frame = key_text(c).assign(
        main_drop_cell=_cells(percent, c["main_drop"], c["main_low"], c["main_high"]),
        literal_drop_cell=_cells(percent, c["literal_drop"], c["literal_low"], c["literal_high"]),
        lr_cell=[None if is_missing(v) else lr_text(v) for v in c["lr"]],
    )
    kinds = model_task_kinds(frame) | {"main_drop_cell": text, "literal_drop_cell": text}
    kinds |= {"main_real": "yes/no", "literal_real": "yes/no", "main_k0": "score", "main_all": "score"}
    kinds |= {"literal_k0": "score", "literal_all": "score", "lr_cell": text, "literal_seeds": "int"}
    headers = {"main_drop_cell": "drop, main protocol [95% interval]", "main_real": "main drop real?"}
    headers |= {"literal_drop_cell": "drop, literal setting [95% interval]", "literal_real": "literal drop real?"}
    headers |= {"main_k0": "k = 0, main", "main_all": "all, main", "literal_k0": "k = 0, literal"}
    headers |= {"literal_all": "all, literal", "lr_cell": "main protocol's lr", "literal_seeds": "literal seeds"}
    missing = {"main_drop_cell": "the main protocol has no interval here", "literal_drop_cell": "no interval"}
    missing |= {"lr_cell": "the lr differs between runs", "main_real": "no interval"}
    return table(frame, kinds, headers, missing, empty="The paper's literal setting did not run in this grid.")


def convergence_display(per_task: pd.DataFrame) -> Table:
    """:func:`papa.book.chapters.controls.convergence_summary`'s per-task counts for reading."""
    counts = dict.fromkeys(["runs", "converged", "still rising", "no held-out curve"], "int")
    kinds = model_task_kinds(per_task) | counts
    kinds["mean epochs trained"] = lambda v: None if is_missing(v) else f"{float(v):.1f}"
    missing = {"mean epochs trained": "no run recorded a held-out curve"}
    return table(key_text(per_task), kinds, {"runs": "probe results"}, missing)


def still_rising_display(rising: pd.DataFrame) -> Table:
    """The runs whose held-out curve still rose at the cap."""
    kinds = {"run_id": "text"} | model_task_kinds(rising) | {"ranking": "text", "k": "int", "seed": "int"}
    kinds |= {"best_epoch": "int", "epochs_trained": "int"}
    headers = {"run_id": "run", "best_epoch": "best held-out epoch", "epochs_trained": "epochs trained"}
    return table(key_text(rising), kinds, headers, empty="No run's held-out curve was still rising at the cap.")
