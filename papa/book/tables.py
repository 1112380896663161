"""Tables for reading: the tidy frames of :mod:`papa.analysis.results` and :mod:`papa.book.data`
turned into display tables.

A :class:`Table` renders as one HTML table: no pandas index, headers a person would write, every row
(never "96 rows × 7 columns"), numbers formatted by kind (percentages with one decimal, scores with
three decimals and their "± spread" or "[lo, hi]" in one cell that never wraps), and no ``NaN``: a
missing value is an en dash with a footnote that says why. Key columns come first. Wider than the
text column, the table scrolls inside its own box, never the page.

* :func:`table` — any frame, with explicit column kinds, headers and footnotes;
* :func:`scores_display`, :func:`retained_gains_display`, :func:`claims_display`,
  :func:`ordering_display`, :func:`layer_display`, :func:`sensitivity_display`,
  :func:`train_size_display`, :func:`compare_display`, :func:`rising_display` — the chapters' tables;
* :func:`enable_table_display` — every other DataFrame a notebook shows goes through :func:`auto_table`;
* :func:`md_cell`, :func:`escape_cell_pipes` — a literal ``|`` inside a Markdown table cell.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from papa.analysis.figures import metric_name, task_name

NBSP = "\u00a0"
DASH = "\u2013"  # en dash: a missing value
#: The footnote of every "real?" column.
REAL_NOTE = "real?: whether the difference exceeds the larger of the two seed ranges (max − min over seeds)."
#: Why a value is missing when the caller gives no reason.
DEFAULT_MISSING = "no run of this grid measured this value"
_STYLE = (
    "<style>.papa-table-wrap{overflow-x:auto;max-width:100%;margin-bottom:1em}"
    ".papa-table{border-collapse:collapse;font-size:0.9em}"
    ".papa-table th,.papa-table td{padding:0.25em 0.6em;white-space:nowrap;text-align:right;border-bottom:1px solid #ddd}"
    ".papa-table th{white-space:normal;vertical-align:bottom;min-width:4em}"
    ".papa-table td.text,.papa-table th.text{text-align:left}.papa-table td.text{white-space:normal;min-width:6em}"
    ".papa-table-notes{font-size:0.85em;margin-top:0.3em}</style>"
)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA or value is pd.NaT


def score(value: Any, digits: int = 3) -> str | None:
    """``0.81234`` → ``"0.812"``; None for a missing value."""
    return None if _missing(value) else f"{float(value):.{digits}f}"


def percent(value: Any, digits: int = 1) -> str | None:
    """``0.04321`` → ``"4.3%"``."""
    return None if _missing(value) else f"{float(value):.{digits}%}"


def integer(value: Any) -> str | None:
    """``67349`` → ``"67,349"``."""
    return None if _missing(value) else f"{int(value):,}"


def yes_no(value: Any) -> str | None:
    """True → ``"yes"``, False → ``"no"``."""
    return None if _missing(value) else ("yes" if bool(value) else "no")


def text(value: Any) -> str | None:
    return None if _missing(value) else str(value)


def score_spread(mean: Any, spread: Any, digits: int = 3) -> str | None:
    """``"0.812 ± 0.020"`` with non-breaking spaces (one line); the mean alone when ``spread`` is missing."""
    if _missing(mean):
        return None
    return f"{float(mean):.{digits}f}" + ("" if _missing(spread) else f"{NBSP}±{NBSP}{float(spread):.{digits}f}")


def score_interval(mean: Any, low: Any, high: Any, digits: int = 3) -> str | None:
    """``"0.812 [0.800, 0.840]"`` with non-breaking spaces; the mean alone when the interval is missing."""
    if _missing(mean):
        return None
    interval = "" if _missing(low) or _missing(high) else f"{NBSP}[{float(low):.{digits}f},{NBSP}{float(high):.{digits}f}]"
    return f"{float(mean):.{digits}f}{interval}"


#: Column kinds :func:`table` understands.
KINDS: dict[str, Callable[[Any], str | None]] = {"score": score, "percent": percent, "int": integer, "yes/no": yes_no, "text": text}


@dataclass
class Table:
    """A display table: string cells (None = missing), headers, per-column footnotes for missing cells."""

    columns: list[str]
    rows: list[list[str | None]]
    missing_notes: dict[str, str] = field(default_factory=dict)  # column → why a cell is missing
    text_columns: set[str] = field(default_factory=set)  # left-aligned
    notes: list[str] = field(default_factory=list)  # footnotes printed under the table
    empty: str = "Nothing to show: no run of this grid belongs in this table."  # shown instead of a table without rows

    def _marks(self) -> dict[str, str]:
        """Footnote letter per reason, for the columns that have a missing cell."""
        reasons: dict[str, str] = {}
        for j, column in enumerate(self.columns):
            if any(row[j] is None for row in self.rows):
                reason = self.missing_notes.get(column, DEFAULT_MISSING)
                reasons.setdefault(reason, "abcdefghijklmnopqrstuvwxyz"[len(reasons) % 26])
        return reasons

    def _repr_html_(self) -> str:
        if not self.rows:
            return f'<p class="papa-table-empty"><em>{html.escape(self.empty)}</em></p>'
        marks = self._marks()
        align = lambda c: ' class="text"' if c in self.text_columns else ""  # noqa: E731
        head = "".join(f"<th{align(c)}>{html.escape(c)}</th>" for c in self.columns)
        body = []
        for row in self.rows:
            cells = []
            for column, value in zip(self.columns, row):
                if value is None:
                    mark = marks[self.missing_notes.get(column, DEFAULT_MISSING)]
                    cells.append(f"<td{align(column)}>{DASH}<sup>{mark}</sup></td>")
                else:
                    cells.append(f"<td{align(column)}>{html.escape(value)}</td>")
            body.append("<tr>" + "".join(cells) + "</tr>")
        notes = [f"<sup>{mark}</sup>{NBSP}{DASH}: {html.escape(reason)}" for reason, mark in marks.items()] + [html.escape(n) for n in self.notes]
        foot = f'<p class="papa-table-notes">{"<br>".join(notes)}</p>' if notes else ""
        return f'{_STYLE}<div class="papa-table-wrap"><table class="papa-table"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>{foot}</div>'

    def __repr__(self) -> str:
        if not self.rows:
            return self.empty
        marks = self._marks()
        show = lambda c, v: v if v is not None else DASH + marks[self.missing_notes.get(c, DEFAULT_MISSING)]  # noqa: E731
        lines = [" | ".join(self.columns)] + [" | ".join(show(c, v) for c, v in zip(self.columns, row)) for row in self.rows]
        return "\n".join(lines + [f"{m}: {r}" for r, m in marks.items()] + self.notes)

    def to_frame(self) -> pd.DataFrame:
        """The cells as strings (missing: None), for tests and further work."""
        return pd.DataFrame(self.rows, columns=self.columns)


def table(
    frame: pd.DataFrame,
    kinds: Mapping[str, str | Callable[[Any], str | None]],
    headers: Mapping[str, str] | None = None,
    missing: Mapping[str, str] | None = None,
    notes: Sequence[str] = (),
) -> Table:
    """A :class:`Table` of ``frame``'s columns named in ``kinds`` (in that order: put the key columns
    first), each formatted by its kind (a name in :data:`KINDS` or a function of the cell).
    ``headers`` renames columns; ``missing`` says, per column (original name), why a cell is missing."""
    headers, missing = dict(headers or {}), dict(missing or {})
    columns = list(kinds)
    formatters = {c: KINDS[k] if isinstance(k, str) else k for c, k in kinds.items()}
    if frame.empty:
        frame = frame.reindex(columns=columns)  # an empty result may lack its columns
    rows = [[formatters[c](value) for c, value in zip(columns, values)] for values in frame[columns].itertuples(index=False, name=None)]
    named = [headers.get(c, c) for c in columns]
    text_columns = {headers.get(c, c) for c, k in kinds.items() if k == "text"}
    return Table(named, rows, {headers.get(c, c): why for c, why in missing.items()}, text_columns, list(notes))


def _key_text(frame: pd.DataFrame) -> pd.DataFrame:
    """Task ids as names (``sst2`` → ``SST-2``), metrics in words."""
    out = frame.copy()
    if "task" in out:
        out["task"] = out["task"].map(task_name)
    if "metric" in out:
        out["metric"] = out["metric"].map(lambda m: m if _missing(m) else metric_name(m))
    return out


def _several(frame: pd.DataFrame, column: str) -> bool:
    return column in frame and frame[column].nunique() > 1


def auto_table(frame: pd.DataFrame) -> Table:
    """Any frame for reading: the index (when it is not a plain 0..n-1) becomes leading columns; floats
    get three decimals (percent when the column name says drop or gain), bools yes/no, ints thousands separators."""
    if not isinstance(frame.index, pd.RangeIndex) or frame.index.name is not None:
        frame = frame.reset_index()
    frame = _key_text(frame)
    kinds: dict[str, str] = {}
    for column in frame.columns:
        series = frame[column]
        if pd.api.types.is_bool_dtype(series):
            kinds[column] = "yes/no"
        elif pd.api.types.is_integer_dtype(series):
            kinds[column] = "int"
        elif pd.api.types.is_float_dtype(series):
            kinds[column] = "percent" if re.search(r"drop|gain", str(column)) else "score"
        else:
            kinds[column] = "text"
    frame.columns = [str(c) for c in frame.columns]
    return table(frame, {str(c): k for c, k in kinds.items()}, {str(c): str(c).replace("_", " ") for c in kinds})


def enable_table_display() -> None:
    """Show every pandas DataFrame in this notebook as :func:`auto_table` (HTML, nothing truncated)."""
    from IPython import get_ipython

    shell = get_ipython()
    if shell is not None:
        shell.display_formatter.formatters["text/html"].for_type(pd.DataFrame, lambda frame: auto_table(frame)._repr_html_())


def md_cell(value: Any) -> str:
    """A value for a Markdown table cell: ``|`` escaped, newlines as spaces."""
    return str(value).replace("\\|", "|").replace("|", "\\|").replace("\n", " ")


def escape_cell_pipes(markdown: str) -> str:
    """Escape the literal ``|`` inside the cells of a Markdown document's tables (``|A−B| = 0.0 pt``).

    In a table row (a line starting with ``|``), a pipe is a cell delimiter only at the start or end of
    the line or with white space on both sides; every other pipe is text and gets a backslash.
    """
    out = []
    for line in markdown.split("\n"):
        stripped = line.rstrip()
        if not stripped.startswith("|"):
            out.append(line)
            continue
        chars = []
        for i, char in enumerate(stripped):
            delimiter = i == 0 or i == len(stripped) - 1 or (stripped[i - 1].isspace() and stripped[i + 1].isspace())
            chars.append(char if char != "|" or delimiter or stripped[i - 1] == "\\" else "\\|")
        out.append("".join(chars))
    return "\n".join(out)


# -- the chapters' tables ----------------------------------------------------------------------------
def _model_task(frame: pd.DataFrame) -> dict[str, str]:
    """The leading key columns: model (only when there are several) and task."""
    return ({"model": "text"} if _several(frame, "model") else {}) | {"task": "text"}


def _fraction(value: float) -> str:
    from fractions import Fraction

    return str(Fraction(float(value)).limit_denominator(1000))


def scores_display(summary: pd.DataFrame, probe_input: str = "all") -> Table:
    """Every score: one row per (model,) task and ranking, one "mean ± std" column per number of constant
    heads k (per fraction of the heads when models differ in size). The k = 0 and k = all runs every
    ranking shares are shown in each ranking's row."""
    from papa.analysis.results import spread_shared

    rows = summary[summary["probe_input"] == probe_input]
    parts = [spread_shared(group) for _, group in rows.groupby(["model", "task", "mode"], sort=True)]
    rows = _key_text(pd.concat(parts, ignore_index=True)) if parts else _key_text(rows)
    by_fraction = rows["total_heads"].nunique() > 1
    step = "fraction" if by_fraction else "k"
    steps = sorted(rows[step].unique())
    total = int(rows["total_heads"].iloc[0]) if len(rows) else 0
    header = {s: (f"{_fraction(s)} of the heads" if by_fraction else f"k = {int(s)}" + (" (all)" if int(s) == total else "")) for s in steps}
    keys = [c for c in ("model", "task", "ranking", "mode") if _several(rows, c) or c in ("task", "ranking")]
    wide = rows.assign(cell=[score_spread(m, s) for m, s in zip(rows["mean"], rows["std"])]).pivot_table(index=keys, columns=step, values="cell", aggfunc="first").reset_index()
    kinds: dict[str, Any] = {k: "text" for k in keys} | {s: text for s in steps}
    notes = ["A score without ± comes from a single seed; ± is the standard deviation over seeds."]
    return table(wide, kinds, header, {s: "this ranking was not run with this many constant heads" for s in steps}, notes)


def retained_gains_display(gains: pd.DataFrame) -> Table:
    """:func:`papa.book.data.retained_gains` for reading: the drop and the retained gain first."""
    kinds = _model_task(gains) | {
        "ranking": "text",
        "k": "int",
        "relative_drop": "percent",
        "retained_gain": "percent",
        "score": "score",
        "spread": "score",
        "informative": "yes/no",
    }
    headers = {"relative_drop": "relative drop", "retained_gain": "retained gain", "score": "mean score", "spread": "seed range (max − min)", "informative": "informative task"}
    return table(_key_text(gains), kinds, headers, {"retained_gain": "no floor to measure the gain against"})


def claims_display(claims: pd.DataFrame) -> Table:
    """:func:`papa.analysis.results.claims_table` for reading (the raw ``value`` column left out)."""
    return table(claims, {"claim": "text", "verdict": "text", "ours": "text", "paper": "text", "note": "text"}, {"ours": "our runs", "paper": "the paper"})


def ordering_display(comparison: pd.DataFrame) -> Table:
    """:func:`papa.book.data.ordering_comparison` for reading: the two rankings and their means in one
    cell each, which is better (or a tie at three decimals) and whether the difference is real."""
    fixed = {"model", "task", "k", "seeds", "better", "real"}
    methods = [c for c in comparison.columns if c not in fixed]
    pairs, means = [], []
    for _, row in comparison.iterrows():
        present = [m for m in methods if not _missing(row[m])]
        pairs.append(" vs ".join(present))
        means.append(f"{NBSP}vs{NBSP}".join(f"{row[m]:.3f}" for m in present))
    frame = _key_text(comparison).assign(pair=pairs, means=means)
    kinds = _model_task(frame) | {"k": "int", "pair": "text", "means": "text", "better": "text", "real": "yes/no", "seeds": "text"}
    headers = {"pair": "rankings", "means": "mean scores", "real": "real?", "seeds": "seeds"}
    return table(frame, kinds, headers, notes=["A tie: both means are equal to three decimals.", REAL_NOTE])


def layer_display(layers: pd.DataFrame) -> Table:
    """:func:`papa.book.data.layer_table` for reading (a model with fewer layers shows dashes)."""
    columns = [c for c in layers.columns if str(c).startswith("layer ")]
    kinds = _model_task(layers) | {"ranking": "text"} | {c: "int" for c in columns}
    return table(_key_text(layers), kinds, missing={c: "this model has fewer layers" for c in columns})


def sensitivity_display(sensitivity: pd.DataFrame) -> Table:
    """:func:`papa.book.data.sensitivity_table` for reading: the drops and whether each change is real first."""
    kinds = (
        {"study": "text", "setting": "text"}
        | _model_task(sensitivity)
        | {
            "drop official": "percent",
            "drop study": "percent",
            "k=0 change real": "yes/no",
            "k=all change real": "yes/no",
            "k=0 official": "score",
            "k=0 study": "score",
            "k=all official": "score",
            "k=all study": "score",
            "mean epoch reported": lambda v: None if _missing(v) else f"{float(v):.1f}",
        }
    )
    headers = {
        "drop official": "drop (official)",
        "drop study": "drop (study)",
        "k=0 change real": "k = 0 change real?",
        "k=all change real": "k = all change real?",
        "k=0 official": "k = 0, official",
        "k=0 study": "k = 0, study",
        "k=all official": "k = all, official",
        "k=all study": "k = all, study",
        "mean epoch reported": "mean epoch reported",
    }
    return table(_key_text(sensitivity), kinds, headers, notes=["drop: the relative drop with every head constant. " + REAL_NOTE])


def train_size_display(sizes: pd.DataFrame) -> Table:
    """:func:`papa.book.data.train_size_study` for reading: per training size, the drop, whether it is
    real, the retained gain, then each score with its seed range ``[min, max]``."""
    frame = _key_text(sizes).assign(
        k0=[score_interval(m, lo, hi) for m, lo, hi in zip(sizes["k0_mean"], sizes["k0_min"], sizes["k0_max"])],
        kall=[score_interval(m, lo, hi) for m, lo, hi in zip(sizes["kall_mean"], sizes["kall_min"], sizes["kall_max"])],
        floor=[score_interval(m, lo, hi) for m, lo, hi in zip(sizes["floor_mean"], sizes["floor_min"], sizes["floor_max"])],
    )
    kinds = _model_task(frame) | {
        "train_examples": "int",
        "drop": "percent",
        "drop_real": "yes/no",
        "retained_gain": "percent",
        "k0": text,
        "kall": text,
        "floor": text,
        "n_seeds": "int",
    }
    headers = {
        "train_examples": "training examples",
        "drop": "relative drop",
        "drop_real": "real?",
        "retained_gain": "retained gain",
        "k0": "k = 0 [min, max]",
        "kall": "k = all [min, max]",
        "floor": "attention-free [min, max]",
        "n_seeds": "seeds",
    }
    no_floor = "the attention-free probe did not run at this size"
    return table(frame, kinds, headers, {"retained_gain": no_floor, "floor": no_floor}, [REAL_NOTE])


def compare_display(comparison: pd.DataFrame, label_a: str, label_b: str) -> Table:
    """:func:`papa.book.data.compare` for reading: the difference and whether it is real first."""
    kinds = _model_task(comparison) | {"ranking": "text", "k": "int", "difference": "score", "real": "yes/no", label_a: "score", label_b: "score"}
    kinds |= {f"{label_a} seeds": "int", f"{label_b} seeds": "int"}
    headers = {"difference": f"difference ({label_b} − {label_a})", "real": "real?"}
    return table(_key_text(comparison), kinds, headers, notes=[REAL_NOTE])


def rising_display(rising: pd.DataFrame) -> Table:
    """:func:`papa.book.data.still_rising` for reading."""
    kinds = {"run_id": "text"} | _model_task(rising) | {"k": "int", "seed": "int", "late_gain": "score", "rising": "yes/no"}
    return table(_key_text(rising), kinds, {"run_id": "run", "late_gain": "gain over the last 3 epochs", "rising": "still rising"})


__all__ = [
    "DASH",
    "KINDS",
    "NBSP",
    "Table",
    "auto_table",
    "claims_display",
    "compare_display",
    "layer_display",
    "ordering_display",
    "retained_gains_display",
    "rising_display",
    "scores_display",
    "sensitivity_display",
    "train_size_display",
    "enable_table_display",
    "escape_cell_pipes",
    "md_cell",
    "percent",
    "score",
    "score_interval",
    "score_spread",
    "table",
]
