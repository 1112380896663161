"""What every figure of the book shares: the :class:`Figure` (chart, caption, label), the width budget
(:data:`TEXT_WIDTH`), wrapped panels, legends below the plot, and the words captions are written with."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import altair as alt
import pandas as pd

from papa.core.tasks import metric_name, task_name

#: The widest a figure may be, in CSS pixels: the text column is narrowest (624 px) at a 1,200 px window, where the
#: contents bar appears on the right (measured in Chromium, tests/test_browser.py).
TEXT_WIDTH = 600
#: Room one panel's y axis takes (tick labels and title), and Vega-Lite's gap between panels.
AXIS_PX, PANEL_SPACING = 60, 20
PANEL_HEIGHT, MAX_PANEL_WIDTH = 130, 420


@dataclass(frozen=True)
class Figure:
    """A chart with its caption and cross-reference label; displays as the chart."""

    chart: Any  # an Altair top-level chart
    caption: str
    label: str

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Any:
        return self.chart._repr_mimebundle_(include=include, exclude=exclude)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "chart":
            raise AttributeError(name)
        return getattr(self.chart, name)


def glue_figure(figure: Figure) -> None:
    """Glue the chart as ``figure.label`` and the caption as ``<label>-caption`` (not displayed), for
    ``{glue:figure} <label>`` with ``:name: <label>`` and ``{glue:text}`<label>-caption``` as its caption."""
    from myst_nb import glue

    glue(figure.label, figure, display=False)
    glue(f"{figure.label}-caption", figure.caption, display=False)


def panel_layout(panels: int, max_columns: int = 3, min_width: int = 150) -> tuple[int, int]:
    """``(columns, panel width)``: as many columns (≤ ``max_columns``) as fit :data:`TEXT_WIDTH` with each panel's y
    axis, panels at least ``min_width`` wide (at most :data:`MAX_PANEL_WIDTH`)."""
    columns = max(1, min(panels, max_columns))
    while True:
        width = (TEXT_WIDTH - columns * AXIS_PX - (columns - 1) * PANEL_SPACING) // columns
        if width >= min_width or columns == 1:
            return columns, min(width, MAX_PANEL_WIDTH)
        columns -= 1


def legend(title: str | None = None, **extra: Any) -> alt.Legend:
    """A horizontal legend below the plot, labels and title never truncated."""
    return alt.Legend(title=title, orient="bottom", direction="horizontal", labelLimit=0, titleLimit=0, **extra)


def finish(chart: Any, caption: str, label: str) -> Figure:
    """The :class:`Figure` of ``chart`` with its legends below the plot, untruncated."""
    return Figure(chart.configure_legend(orient="bottom", labelLimit=0, titleLimit=0), caption, label)


def panels(frame: pd.DataFrame) -> tuple[pd.DataFrame, str, str]:
    """(frame with a ``panel`` column, the y title's metric words, what a panel shows); the metric in brackets when
    tasks differ in it."""
    metrics = sorted(frame["metric"].dropna().unique()) if "metric" in frame else []
    several_models = frame["model"].nunique() > 1
    names = [  # the task, or "model · task" with several models
        f"{m} · {task_name(t)}" if several_models else task_name(t) for m, t in zip(frame["model"], frame["task"])
    ]
    if len(metrics) > 1:
        names = [f"{n} ({metric_name(x)})" for n, x in zip(names, frame["metric"])]
    unit = metric_name(metrics[0]) if len(metrics) == 1 else "each panel's metric"
    return frame.assign(panel=names), unit, "model and task" if several_models else "task"


def facet(
    chart: alt.LayerChart, frame: pd.DataFrame, width: int | None = None, x_independent: bool = False
) -> alt.FacetChart:
    """Wrap the panels of ``frame`` (column ``panel``) in rows of at most three; independent y."""
    columns, fitted = panel_layout(frame["panel"].nunique())
    faceted = chart.properties(width=min(width or fitted, fitted), height=PANEL_HEIGHT).facet(
        facet=alt.Facet("panel:N", title=None, header=alt.Header(labelLimit=0)), columns=columns
    )
    return faceted.resolve_scale(y="independent", x="independent" if x_independent else "shared")


def clean(frame: pd.DataFrame, digits: int = 4) -> pd.DataFrame:
    """Round floats (smaller JSON; Altair writes NaN as null)."""
    out = frame.copy()
    for column in out.select_dtypes("float").columns:
        out[column] = out[column].round(digits)
    return out


def seeds_words(counts: Sequence[int]) -> str:
    """``"3 probe seeds"`` (``"1 probe seed"``), or ``"2–3 probe seeds"`` when the counts differ."""
    counts = sorted({int(c) for c in counts}) or [0]
    low, high = counts[0], counts[-1]
    return f"{high} probe seed" + ("s" if high != 1 else "") if low == high else f"{low}–{high} probe seeds"


def words(items: Sequence[str]) -> str:
    """``"a, b and c"``; ``"none"`` for no items."""
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1] if items else "none"
