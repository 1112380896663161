"""Display tables: the :class:`Table` (HTML without index, every row, one-line number cells, an en dash with a
footnote for a missing value), the column kinds that write each cell (:data:`KINDS`, with :mod:`papa.book.words`'
number formats), and :func:`auto_table` and :func:`enable_table_display` for any frame. The chapters' tables are in
:mod:`papa.book.tables`."""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from papa.book.words import DASH, NBSP, integer, is_missing, percent, score, text, yes_no
from papa.core.tasks import metric_name, task_name

#: Why a value is missing when the caller gives no reason.
DEFAULT_MISSING = "no run of this grid measured this value"
_STYLE = (
    "<style>.papa-table-wrap{overflow-x:auto;max-width:100%;margin-bottom:1em}"
    ".papa-table{border-collapse:collapse;font-size:0.85em}"
    ".papa-table th,.papa-table td{padding:0.25em 0.4em;white-space:nowrap;text-align:right;"
    "border-bottom:1px solid #ddd}"
    ".papa-table th{white-space:normal;vertical-align:bottom;min-width:4em}"
    ".papa-table td.text,.papa-table th.text{text-align:left}.papa-table td.text{white-space:normal;min-width:6em}"
    ".papa-table-notes{font-size:0.85em;margin-top:0.3em}"
    ".papa-table-more{margin:-0.6em 0 1em}.papa-table-more>summary{font-size:0.85em;cursor:pointer}</style>"
)


#: Column kinds :func:`table` understands.
KINDS: dict[str, Callable[[Any], str | None]] = {"score": score, "percent": percent, "int": integer}
KINDS |= {"yes/no": yes_no, "text": text}


@dataclass
class Table:
    """A display table: string cells (None = missing), headers, per-column footnotes for missing cells."""

    columns: list[str]
    rows: list[list[str | None]]
    missing_notes: dict[str, str] = field(default_factory=dict)  # column → why a cell is missing
    text_columns: set[str] = field(default_factory=set)  # left-aligned
    notes: list[str] = field(default_factory=list)  # footnotes printed under the table
    empty: str = "Nothing to show: no run of this grid belongs in this table."  # shown instead of a table without rows
    details: list[str] = field(default_factory=list)  # secondary columns, shown beside the keys under "More columns"
    keys: int = 0  # leading key columns, repeated in the "More columns" view

    def _marks(self) -> dict[str, str]:
        """Footnote letter per reason, for the columns that have a missing cell."""
        reasons: dict[str, str] = {}
        for j, column in enumerate(self.columns):
            if any(row[j] is None for row in self.rows):
                reason = self.missing_notes.get(column, DEFAULT_MISSING)
                reasons.setdefault(reason, "abcdefghijklmnopqrstuvwxyz"[len(reasons) % 26])
        return reasons

    def _html_table(self, columns: list[str], marks: dict[str, str]) -> str:
        align = lambda c: ' class="text"' if c in self.text_columns else ""
        index = [self.columns.index(c) for c in columns]
        head = "".join(f"<th{align(c)}>{html.escape(c)}</th>" for c in columns)

        def cell(column: str, value: str | None) -> str:
            mark = None if value is not None else marks[self.missing_notes.get(column, DEFAULT_MISSING)]
            return f"<td{align(column)}>{html.escape(value) if mark is None else f'{DASH}<sup>{mark}</sup>'}</td>"

        body = ["<tr>" + "".join(cell(self.columns[j], row[j]) for j in index) + "</tr>" for row in self.rows]
        table = f'<table class="papa-table"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
        return f'<div class="papa-table-wrap">{table}'

    def _repr_html_(self) -> str:
        """The table; its :attr:`details` columns (with the :attr:`keys`) in a folded "More columns" table below it,
        so that a table fits the text column with its deciding columns in view."""
        if not self.rows:
            return f'<p class="papa-table-empty"><em>{html.escape(self.empty)}</em></p>'
        marks = self._marks()
        main = [c for c in self.columns if c not in self.details]
        notes = [f"<sup>{mark}</sup>{NBSP}{DASH}: {html.escape(reason)}" for reason, mark in marks.items()]
        notes += [html.escape(n) for n in self.notes]
        foot = f'<p class="papa-table-notes">{"<br>".join(notes)}</p>' if notes else ""
        more = ""
        if self.details:
            folded = self.columns[: self.keys] + [c for c in self.columns if c in self.details]
            summary = f"<summary>More columns: {html.escape(', '.join(self.details))}</summary>"
            more = f'<details class="papa-table-more">{summary}{self._html_table(folded, marks)}</div></details>'
        return f"{_STYLE}{self._html_table(main, marks)}{foot}</div>{more}"

    def __repr__(self) -> str:
        if not self.rows:
            return self.empty
        marks = self._marks()
        show = lambda c, v: v if v is not None else DASH + marks[self.missing_notes.get(c, DEFAULT_MISSING)]
        lines = [" | ".join(self.columns)] + [" | ".join(map(show, self.columns, row)) for row in self.rows]
        return "\n".join(lines + [f"{m}: {r}" for r, m in marks.items()] + self.notes)


def model_task_kinds(frame: pd.DataFrame) -> dict[str, str]:
    """The leading key columns: model (only when there are several) and task."""
    return ({"model": "text"} if has_several(frame, "model") else {}) | {"task": "text"}


def table(
    frame: pd.DataFrame,
    kinds: Mapping[str, str | Callable[[Any], str | None]],
    headers: Mapping[str, str] | None = None,
    missing: Mapping[str, str] | None = None,
    notes: Sequence[str] = (),
    details: Sequence[str] = (),
    empty: str = Table.empty,
) -> Table:
    """A :class:`Table` of ``frame``'s columns named in ``kinds`` (key columns first), each formatted by its kind (a
    name in :data:`KINDS` or a function of the cell); ``headers`` renames columns, ``missing`` says why a cell is
    missing, ``details`` are shown under "More columns", ``empty`` instead of a table without rows."""
    headers, missing = dict(headers or {}), dict(missing or {})
    columns = list(kinds)
    formatters = {c: KINDS[k] if isinstance(k, str) else k for c, k in kinds.items()}
    if frame.empty:
        frame = frame.reindex(columns=columns)  # an empty result may lack its columns
    values = frame[columns].itertuples(index=False, name=None)
    rows = [[formatters[c](value) for c, value in zip(columns, row)] for row in values]
    name = lambda c: headers.get(c, c)
    text_columns = {name(c) for c, k in kinds.items() if k == "text"}
    keys = next((i for i, c in enumerate(columns) if kinds[c] != "text"), len(columns))
    folded = [name(c) for c in columns if c in set(details)]
    why = {name(c): reason for c, reason in missing.items()}
    return Table(list(map(name, columns)), rows, why, text_columns, list(notes), empty, folded, keys)


def key_text(frame: pd.DataFrame) -> pd.DataFrame:
    """Task ids as names (``sst2`` → ``SST-2``), metrics in words."""
    out = frame.copy()
    if "task" in out:
        out["task"] = out["task"].map(task_name)
    if "metric" in out:
        out["metric"] = out["metric"].map(lambda m: m if is_missing(m) else metric_name(m))
    return out


def has_several(frame: pd.DataFrame, column: str) -> bool:
    return column in frame and frame[column].nunique() > 1


def auto_table(frame: pd.DataFrame) -> Table:
    """Any frame for reading: the index (when it is not a plain 0..n-1) becomes leading columns; floats
    get three decimals (percent when the column name says drop or gain), bools yes/no, ints thousands separators."""
    if not isinstance(frame.index, pd.RangeIndex) or frame.index.name is not None:
        frame = frame.reset_index()
    frame = key_text(frame)
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
        html_formatter = shell.display_formatter.formatters["text/html"]
        html_formatter.for_type(pd.DataFrame, lambda frame: auto_table(frame)._repr_html_())
