"""Tables for reading: the tidy frames of :mod:`papa.analysis.results` and :mod:`papa.book.data`
turned into display tables.

A :class:`Table` renders as one HTML table: no pandas index, headers a person would write, every row
(never "96 rows × 7 columns"), numbers formatted by kind (percentages with one decimal, scores with
three decimals and their "± spread" or "[lo, hi]" in one cell that never wraps), and no ``NaN``: a
missing value is an en dash with a footnote that says why. Key columns come first. Wider than the
text column, the table scrolls inside its own box, never the page.

The table machinery (:class:`Table`, :func:`table`, formatters) lives in :mod:`papa.book.table_format`, the
tables with intervals in :mod:`papa.book.interval_tables`; this module holds the other chapter tables:

* :func:`scores_display`, :func:`retained_gains_display`, :func:`layer_display`,
  :func:`sensitivity_display`, :func:`compare_display`, :func:`rising_display` — the chapters' tables;
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pandas as pd

from papa.analysis.results import spread_shared
from papa.book.table_format import (
    NBSP,
    SEED_RANGE_NOTE,
    Table,
    has_several,
    is_missing,
    key_text,
    model_task_kinds,
    nominal_fraction,
    score,
    score_spread,
    table,
    text,
)

# -- the chapters' tables ----------------------------------------------------------------------------


def scores_display(summary: pd.DataFrame, probe_input: str = "all") -> Table:
    """Every score: one row per (model,) task and ranking, one "mean ± std" column per number of constant
    heads k (per fraction of the heads when models differ in size). The k = 0 and k = all runs every
    ranking shares are shown in each ranking's row."""
    rows = summary[summary["probe_input"] == probe_input]
    parts = [spread_shared(group) for _, group in rows.groupby(["model", "task", "mode"], sort=True)]
    rows = key_text(pd.concat(parts, ignore_index=True)) if parts else key_text(rows)
    by_fraction = rows["total_heads"].nunique() > 1
    if by_fraction:  # models of different sizes: one column per share of the heads, labelled by its real counts
        rows = rows.assign(share=[nominal_fraction(k, t)[0] for k, t in zip(rows["k"], rows["total_heads"])])
    step = "share" if by_fraction else "k"
    steps = sorted(rows[step].unique())
    total = int(rows["total_heads"].iloc[0]) if len(rows) else 0
    if by_fraction:
        counts = {s: sorted({(int(k), int(t)) for k, t in zip(rows.loc[rows["share"] == s, "k"], rows.loc[rows["share"] == s, "total_heads"])}, key=lambda c: c[1]) for s in steps}
        header = {s: _share_header(s, counts[s]) for s in steps}
    else:
        header = {s: f"k = {int(s)}" + (" (all)" if int(s) == total else "") for s in steps}
    keys = [c for c in ("model", "task", "ranking", "mode") if has_several(rows, c) or c in ("task", "ranking")]
    wide = rows.assign(cell=[score_spread(m, s) for m, s in zip(rows["mean"], rows["std"])]).pivot_table(index=keys, columns=step, values="cell", aggfunc="first").reset_index()
    kinds: dict[str, Any] = {k: "text" for k in keys} | {s: text for s in steps}
    notes = ["A score without ± comes from a single seed; ± is the standard deviation over seeds."]
    return table(wide, kinds, header, {s: "this ranking was not run with this many constant heads" for s in steps}, notes)


def _share_header(share: Fraction, counts: list[tuple[int, int]]) -> str:
    """A column of heads by share, with each model size's real count: ``"≈ 7/8 of the heads (32 of 36, 63 of 72)"``."""
    if share == 0:
        return "no head constant"
    if share == 1:
        return "all heads constant"
    exact = all(Fraction(k, t) == share for k, t in counts)
    return f"{'' if exact else '≈' + NBSP}{share} of the heads ({', '.join(f'{k} of {t}' for k, t in counts)})"


#: Why a relative drop is not shown (its denominator, the k = 0 score, is within noise of zero).
NOISY_DROP = "not shown: the k = 0 score is not above 0 on every bootstrap resample, so the ratio's denominator is within noise of zero"
#: Why a retained gain is not shown (a ratio whose denominator is within noise of zero).
NOISY_GAIN = (
    "not shown: the task is not informative, so the k = 0 probe's gain over the floor (the ratio's denominator) is within noise of zero"
    " and the ratio would be meaningless (e.g. −1000%)"
)


def retained_gains_display(gains: pd.DataFrame) -> Table:
    """:func:`papa.analysis.basis.retained_gains` for reading: the drop and the retained gain first, then the paired
    scores they are computed from. The retained gain of a task that is not informative is not shown
    (:data:`NOISY_GAIN`)."""
    kinds = model_task_kinds(gains) | {
        "ranking": "text",
        "k": "int",
        "relative_drop": "percent",
        "retained_gain": "percent",
        "score": "score",
        "n_pairs": "int",
        "informative": "yes/no",
    }
    headers = {
        "relative_drop": "relative drop",
        "retained_gain": "retained gain",
        "score": "mean score",
        "n_pairs": "seeds paired",
        "informative": "informative task",
    }
    missing = {"retained_gain": NOISY_GAIN, "relative_drop": NOISY_DROP}
    return table(key_text(gains.drop(columns=["fraction"], errors="ignore")), kinds, headers, missing)


def layer_display(layers: pd.DataFrame) -> Table:
    """:func:`papa.book.data.layer_table` for reading (a model with fewer layers shows dashes)."""
    columns = [c for c in layers.columns if str(c).startswith("layer ")]
    kinds = model_task_kinds(layers) | {"ranking": "text"} | {c: "int" for c in columns}
    return table(key_text(layers), kinds, missing={c: "this model has fewer layers" for c in columns})


def drop_checks_display(checks: pd.DataFrame) -> Table:
    """:func:`papa.book.studies.drop_checks` for reading: one row per probe setting, each seed's scores in one cell."""
    from papa.book.words import lr_text, study_words

    seeds_text = lambda values: ", ".join(score(v) for v in values)  # noqa: E731
    columns = ["setting", "lr", "seeds", "k0_scores", "all_scores", "drop", "apart", "epoch_reported", "epochs_trained", "cap"]
    checks = checks.reindex(columns=list(dict.fromkeys([*checks.columns, *columns])))  # an empty frame may lack its columns
    frame = checks.assign(
        setting=["main grid" if s == "main grid" else study_words(s) for s in checks["setting"]],
        lr_cell=[None if is_missing(v) else lr_text(v) for v in checks["lr"]],
        k0_cell=[seeds_text(v) for v in checks["k0_scores"]],
        all_cell=[seeds_text(v) for v in checks["all_scores"]],
    )
    kinds = {
        "setting": "text",
        "lr_cell": "text",
        "seeds": "int",
        "k0_cell": "text",
        "all_cell": "text",
        "drop": "percent",
        "apart": "yes/no",
        "epoch_reported": "text",
        "epochs_trained": "text",
        "cap": "int",
    }
    headers = {
        "lr_cell": "lr",
        "k0_cell": "k = 0, per seed",
        "all_cell": "all heads, per seed",
        "drop": "drop of the means",
        "apart": "seeds apart?",
        "epoch_reported": "epoch reported",
        "epochs_trained": "epochs trained",
        "cap": "epoch cap",
    }
    notes = [
        "seeds apart?: whether every seed's score with every head constant lies below every seed's score at k = 0.",
        "epoch reported, epochs trained: the range over the setting's runs at k = 0 and with every head constant.",
    ]
    out = table(frame, kinds, headers, {"lr_cell": "the lr differs between runs"}, notes)
    out.empty = "No run to check."
    return out


def sensitivity_display(sensitivity: pd.DataFrame) -> Table:
    """:func:`papa.book.studies.sensitivity_table` for reading: the drops and whether each change is real first."""
    kinds = (
        {"study": "text", "setting": "text"}
        | model_task_kinds(sensitivity)
        | {
            "drop official": "percent",
            "drop study": "percent",
            "k=0 change beyond seed range": "yes/no",
            "k=all change beyond seed range": "yes/no",
            "k=0 official": "score",
            "k=0 study": "score",
            "k=all official": "score",
            "k=all study": "score",
            "mean epoch reported": lambda v: None if is_missing(v) else f"{float(v):.1f}",
        }
    )
    headers = {
        "drop official": "drop (main grid)",
        "drop study": "drop (study)",
        "k=0 change beyond seed range": "k = 0 change beyond seed range?",
        "k=all change beyond seed range": "k = all change beyond seed range?",
        "k=0 official": "k = 0, main grid",
        "k=0 study": "k = 0, study",
        "k=all official": "k = all, main grid",
        "k=all study": "k = all, study",
        "mean epoch reported": "mean epoch reported",
    }
    from papa.book.words import study_words

    frame = key_text(sensitivity)
    if "study" in frame:
        frame["study"] = frame["study"].map(study_words)
    notes = ["drop: the relative drop with every head constant, paired by seed among the converged runs (the book's basis). " + SEED_RANGE_NOTE]
    return table(frame, kinds, headers, {"drop official": NOISY_DROP, "drop study": NOISY_DROP}, notes)


def compare_display(comparison: pd.DataFrame, label_a: str, label_b: str) -> Table:
    """:func:`papa.book.studies.compare` for reading: the difference and whether it is real first."""
    kinds = model_task_kinds(comparison) | {"ranking": "text", "k": "int", "difference": "score", "real": "yes/no", label_a: "score", label_b: "score"}
    kinds |= {f"{label_a} seeds": "int", f"{label_b} seeds": "int"}
    headers = {"difference": f"difference ({label_b} − {label_a})", "real": "beyond seed range?"}
    return table(key_text(comparison), kinds, headers, notes=[SEED_RANGE_NOTE])


def rising_display(rising: pd.DataFrame) -> Table:
    """:func:`papa.book.data.still_rising` for reading."""
    kinds = {"run_id": "text"} | model_task_kinds(rising) | {"k": "int", "seed": "int", "late_gain": "score", "rising": "yes/no"}
    return table(key_text(rising), kinds, {"run_id": "run", "late_gain": "gain over the last 3 epochs", "rising": "still rising"})


__all__ = [
    "NOISY_DROP",
    "NOISY_GAIN",
    "compare_display",
    "drop_checks_display",
    "layer_display",
    "retained_gains_display",
    "rising_display",
    "scores_display",
    "sensitivity_display",
]
