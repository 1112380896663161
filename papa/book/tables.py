"""The chapters' other tables for reading (those with intervals are in :mod:`papa.book.interval_tables`): every
score, the retained gains, the layers of a ranking, the sensitivity studies, two studies compared, the runs still
rising."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pandas as pd

from papa.analysis.results import spread_shared
from papa.book import table_format as T
from papa.book import words as W
from papa.book.table_format import Table, key_text, model_task_kinds, table
from papa.book.words import is_missing, lr_text, text
from papa.pipeline.executed import study_words


def scores_display(summary: pd.DataFrame) -> Table:
    """Every score: one row per (model,) task and ranking (with the k = 0 and all-heads runs they share), one
    "mean ± std" column per number of constant heads (per share of the heads when models differ in size)."""
    rows = summary[summary["probe_input"] == "all"]
    parts = [spread_shared(group) for _, group in rows.groupby(["model", "task", "mode"], sort=True)]
    rows = key_text(pd.concat(parts, ignore_index=True)) if parts else key_text(rows)
    by_fraction = rows["total_heads"].nunique() > 1
    if by_fraction:  # models of different sizes: one column per share of the heads, labelled by its real counts
        rows = rows.assign(share=[W.nominal_fraction(k, t)[0] for k, t in zip(rows["k"], rows["total_heads"])])
    step = "share" if by_fraction else "k"
    steps = sorted(rows[step].unique())
    total = int(rows["total_heads"].iloc[0]) if len(rows) else 0
    if by_fraction:
        counted = list(zip(rows["k"], rows["total_heads"], rows["share"]))
        counts = {s: {(int(k), int(t)) for k, t, share in counted if share == s} for s in steps}
        header = {s: _share_header(s, sorted(counts[s], key=lambda c: c[1])) for s in steps}
    else:
        header = {s: f"k = {int(s)}" + (" (all)" if int(s) == total else "") for s in steps}
    keys = [c for c in ("model", "task", "ranking", "mode") if T.has_several(rows, c) or c in ("task", "ranking")]
    cells = rows.assign(cell=[W.score_spread(m, s) for m, s in zip(rows["mean"], rows["std"])])
    wide = cells.pivot_table(index=keys, columns=step, values="cell", aggfunc="first").reset_index()
    kinds: dict[str, Any] = {k: "text" for k in keys} | {s: text for s in steps}
    missing = {s: "this ranking was not run with this many constant heads" for s in steps}
    return table(wide, kinds, header, missing)


def _share_header(share: Fraction, counts: list[tuple[int, int]]) -> str:
    """A column of heads by share, with each model's real count: ``"≈ 7/8 of the heads (32 of 36, 63 of 72)"``."""
    if share == 0:
        return "no head constant"
    if share == 1:
        return "all heads constant"
    exact = all(Fraction(k, t) == share for k, t in counts)
    return f"{'' if exact else '≈' + W.NBSP}{share} of the heads ({', '.join(f'{k} of {t}' for k, t in counts)})"


#: Why a relative drop is not shown (its denominator, the k = 0 score, is within noise of zero).
NOISY_DROP = (
    "not shown: the k = 0 score is not above 0 on every bootstrap resample, so the ratio's denominator is within"
    " noise of zero"
)
#: Why a retained gain is not shown (a ratio whose denominator is within noise of zero).
NOISY_GAIN = (
    "not shown: the task is not informative, so the k = 0 probe's gain over the floor (the ratio's denominator) is"
    " within noise of zero and the ratio would be meaningless (e.g. −1000%)"
)


def retained_gains_display(gains: pd.DataFrame) -> Table:
    """:func:`papa.analysis.basis.retained_gains` for reading (a task that is not informative: :data:`NOISY_GAIN`)."""
    kinds = model_task_kinds(gains) | {"ranking": "text", "k": "int", "relative_drop": "percent"}
    kinds |= {"retained_gain": "percent", "score": "score", "n_pairs": "int", "informative": "yes/no"}
    headers = {"relative_drop": "relative drop", "retained_gain": "retained gain", "score": "mean score"}
    headers |= {"n_pairs": "pairs of probe results", "informative": "informative task"}
    missing = {"retained_gain": NOISY_GAIN, "relative_drop": NOISY_DROP}
    missing["score"] = "the seeded random orderings, pooled: each ordering's score is in the random-baseline table"
    return table(key_text(gains.drop(columns=["fraction"], errors="ignore")), kinds, headers, missing)


def layer_display(layers: pd.DataFrame) -> Table:
    """:func:`papa.analysis.controls.layer_table` for reading (a model with fewer layers shows dashes)."""
    columns = [c for c in layers.columns if str(c).startswith("layer ")]
    kinds = model_task_kinds(layers) | {"ranking": "text"} | {c: "int" for c in columns}
    return table(key_text(layers), kinds, missing={c: "this model has fewer layers" for c in columns})


def drop_checks_display(checks: pd.DataFrame) -> Table:
    """:func:`papa.book.studies.drop_checks` for reading: one row per probe setting, each seed's scores in one cell."""
    seeds_text = lambda values: ", ".join(W.score(v) for v in values)
    columns = "setting lr seeds k0_scores all_scores drop apart epoch_reported epochs_trained cap".split()
    checks = checks.reindex(columns=list(dict.fromkeys([*checks.columns, *columns])))  # an empty frame may lack some
    frame = checks.assign(
        setting=["main grid" if s == "main grid" else study_words(s) for s in checks["setting"]],
        lr_cell=[None if is_missing(v) else lr_text(v) for v in checks["lr"]],
        k0_cell=[seeds_text(v) for v in checks["k0_scores"]],
        all_cell=[seeds_text(v) for v in checks["all_scores"]],
    )
    kinds = {"setting": "text", "lr_cell": "text", "seeds": "int", "k0_cell": "text", "all_cell": "text"}
    kinds |= {"drop": "percent", "apart": "yes/no", "epoch_reported": "text", "epochs_trained": "text", "cap": "int"}
    headers = {"lr_cell": "lr", "k0_cell": "k = 0, per seed", "all_cell": "all heads, per seed"}
    headers |= {"drop": "drop of the means", "apart": "seeds apart?", "epoch_reported": "epoch reported"}
    headers |= {"epochs_trained": "epochs trained", "cap": "epoch cap"}
    return table(frame, kinds, headers, {"lr_cell": "the lr differs between runs"}, empty="No run to check.")


def sensitivity_display(sensitivity: pd.DataFrame) -> Table:
    """:func:`papa.book.studies.sensitivity_table` for reading."""
    beyond = ["k=0 change beyond seed range", "k=all change beyond seed range"]
    scores = ["k=0 official", "k=0 study", "k=all official", "k=all study"]
    kinds = {"study": "text", "setting": "text"} | model_task_kinds(sensitivity)
    kinds |= {"drop official": "percent", "drop study": "percent"} | dict.fromkeys(beyond, "yes/no")
    kinds |= dict.fromkeys(scores, "score")
    kinds["mean epoch reported"] = lambda v: None if is_missing(v) else f"{float(v):.1f}"
    headers = {"drop official": "drop (main grid)", "drop study": "drop (study)"}
    headers |= {beyond[0]: "k = 0 change beyond seed range?", beyond[1]: "k = all change beyond seed range?"}
    headers |= {"k=0 official": "k = 0, main grid", "k=0 study": "k = 0, study", "k=all study": "k = all, study"}
    headers["k=all official"] = "k = all, main grid"
    frame = key_text(sensitivity)
    if "study" in frame:
        frame["study"] = frame["study"].map(study_words)
    return table(frame, kinds, headers, {"drop official": NOISY_DROP, "drop study": NOISY_DROP})


def compare_display(comparison: pd.DataFrame | None, label_a: str, label_b: str, empty: str = "") -> Table:
    """:func:`papa.analysis.controls.compare` for reading; ``empty``: why there is none when ``comparison`` is None."""
    if comparison is None:
        return Table([], [], empty=empty)
    kinds = model_task_kinds(comparison) | {"ranking": "text", "k": "int", "difference": "score"}
    kinds["beyond_seed_range"] = "yes/no"
    kinds |= {label_a: "score", label_b: "score", f"{label_a} seeds": "int", f"{label_b} seeds": "int"}
    headers = {"difference": f"difference ({label_b} − {label_a})", "beyond_seed_range": "beyond seed range?"}
    return table(key_text(comparison), kinds, headers)


def rising_display(rising: pd.DataFrame) -> Table:
    """:func:`papa.analysis.controls.still_rising` for reading."""
    kinds = {"run_id": "text"} | model_task_kinds(rising) | {"k": "int", "seed": "int", "late_gain": "score"}
    kinds["rising"] = "yes/no"
    headers = {"run_id": "run", "late_gain": "gain over the last 3 epochs", "rising": "still rising"}
    return table(key_text(rising), kinds, headers)
