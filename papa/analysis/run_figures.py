"""Figures of a single run: the constant matrices an estimate run wrote (:func:`fig_constants`) and the head order a
ranking run wrote (:func:`fig_head_ranking`).

Apart from :mod:`papa.analysis.figures` so that the run notebooks import only what they draw: a run's key follows the
papa modules its notebook imports (:mod:`papa.pipeline.sources`), so a chapter-figure edit never stales a run.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import altair as alt
import numpy as np
import pandas as pd

from papa.analysis.figure_kit import AXIS_PX, TEXT_WIDTH, Figure, finish, legend, panel_layout, words
from papa.core.errors import PapaError
from papa.core.names import name_parts
from papa.core.tasks import task_name


def _ranking_words(source: str | None) -> str:
    if not source:
        return "the ranking"
    parts = name_parts(source)
    if len(parts) == 3:
        return f"the {parts[2]} ranking of {parts[0]} on {task_name(parts[1])}"
    return source


def fig_head_ranking(
    ranking: Sequence[Sequence[int]] | str | Path,
    num_layers: int,
    num_heads: int,
    k_values: Sequence[int] | None = None,
    source: str | None = None,
    label: str = "fig-ranking",
) -> Figure:
    """Layer × head heatmap of each head's rank (1 = made constant first) in ``ranking`` (``(layer, head)`` pairs or
    a ranking file); the tooltip gives the first of ``k_values`` where it is constant. ``source`` names the ranking in
    the caption: a key ``"<model>__<task>__<method>"`` (as in ``BookData.rankings``) or words."""
    if isinstance(ranking, (str, Path)):
        from papa.core.heads import load_ranking

        ranking, _ = load_ranking(ranking, num_layers, num_heads)
    steps = sorted(int(k) for k in (k_values or []))
    rows = []
    for position, (layer, head) in enumerate(ranking, start=1):
        first = next((k for k in steps if k >= position), None)
        rows.append(
            {
                "layer": int(layer),
                "head": int(head),
                "rank": position,
                "constant_from": f"k = {first}" if first is not None else "never (in these k)",
            }
        )
    data = pd.DataFrame(rows)
    size = max(12, min(28, (TEXT_WIDTH - AXIS_PX) // max(num_heads, 1)))
    base = alt.Chart(data).encode(
        x=alt.X("head:O", title="head (index within its layer)"), y=alt.Y("layer:O", title="layer")
    )
    rank_legend = legend("rank (1 = made constant first)", gradientLength=min(300, size * num_heads))
    cells = base.mark_rect().encode(
        color=alt.Color("rank:Q", scale=alt.Scale(scheme="viridis"), legend=rank_legend),
        tooltip=["layer:O", "head:O", "rank:Q", alt.Tooltip("constant_from:N", title="constant from")],
    )
    text = base.mark_text(fontSize=8).encode(
        text="rank:Q", color=alt.condition(alt.datum.rank > len(data) / 2, alt.value("black"), alt.value("white"))
    )
    chart = alt.layer(cells, text).properties(width=size * num_heads, height=size * num_layers)
    caption = (
        f"Rank of every head ({num_layers} layers × {num_heads} heads) in {_ranking_words(source)}: "
        "1 is made constant first. "
        "Darker cells become constant earlier; the number in each cell is its rank."
    )
    return finish(chart, caption, label)


def _downsample(matrix: np.ndarray, cells: int) -> tuple[np.ndarray, np.ndarray]:
    """Block means to at most ``cells × cells``; returns (matrix, block start positions)."""
    length = matrix.shape[0]
    if length <= cells:
        return matrix, np.arange(length)
    starts = np.unique(np.linspace(0, length, cells + 1).round().astype(int))[:-1]
    sizes = np.diff(np.append(starts, length))
    summed = np.add.reduceat(np.add.reduceat(matrix, starts, axis=0), starts, axis=1)
    return summed / np.outer(sizes, sizes), starts


def fig_constants(
    constants: Any,
    picks: Sequence[tuple[int, int]],
    max_cells: int = 32,
    columns: int = 2,
    source: str | None = None,
    label: str = "fig-constants",
) -> Figure:
    """Heatmaps (query row × key column) of ``constants[layer, head]`` (``[layers, heads, L, L]``, torch or numpy)
    for ``picks``, block-averaged to at most ``max_cells × max_cells`` (≤ 64) and rounded (a small spec); panels wrap
    after ``columns``. ``source``: what they were estimated on (e.g. "SST-2, 1,000 sentences")."""
    if not 1 <= max_cells <= 64:
        raise PapaError(f"max_cells={max_cells} is outside [1, 64]", "Use e.g. 32.")
    array = constants.detach().cpu().float().numpy() if hasattr(constants, "detach") else np.asarray(constants, float)
    if array.ndim != 4 or array.shape[-1] != array.shape[-2]:
        raise PapaError(
            f"Constants of shape {list(array.shape)} are not [layers, heads, L, L]", "Pass ConstantSet.constants."
        )
    if not picks:
        raise PapaError("No heads picked", "Pass picks=[(layer, head), ...].")
    columns, width = panel_layout(len(picks), max_columns=columns, min_width=120)
    width = min(width, 240)
    charts = []
    for layer, head in picks:
        if not (0 <= layer < array.shape[0] and 0 <= head < array.shape[1]):
            raise PapaError(
                f"Head ({layer}, {head}) is out of range for {array.shape[0]}×{array.shape[1]} heads",
                "Layers and heads count from 0.",
            )
        matrix, starts = _downsample(array[layer, head].astype(np.float64), max_cells)
        ii, jj = np.meshgrid(starts, starts, indexing="ij")
        data = pd.DataFrame({"i": ii.ravel(), "j": jj.ravel(), "v": np.round(matrix.ravel(), 4)})
        charts.append(
            alt.Chart(data, title=f"layer {layer}, head {head}")
            .mark_rect()
            .encode(
                x=alt.X("j:O", title="key position", axis=alt.Axis(labelOverlap=True)),
                y=alt.Y("i:O", title="query position", axis=alt.Axis(labelOverlap=True)),
                color=alt.Color(
                    "v:Q", scale=alt.Scale(scheme="blues"), legend=legend("attention weight", gradientLength=width - 20)
                ),
                tooltip=[
                    alt.Tooltip("i:O", title="query"),
                    alt.Tooltip("j:O", title="key"),
                    alt.Tooltip("v:Q", title="weight", format=".4f"),
                ],
            )
            .properties(width=width, height=width)
        )
    chart = alt.concat(*charts, columns=columns).resolve_scale(color="independent")
    heads = words([f"layer {layer} head {head}" for layer, head in picks])
    caption = (
        f"Constant attention matrices of {heads} (layers and heads count from 0)"
        + (f", estimated on {source}" if source else "")
        + f": the weight each query position (row) gives each key position (column), "
        f"averaged over blocks of positions to at most "
        f"{max_cells} × {max_cells} cells. Each panel has its own colour scale."
    )
    return finish(chart, caption, label)
