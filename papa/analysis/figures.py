"""Interactive Altair figures for the book, and an offline renderer.

Figures (each returns an Altair chart with tooltips; data is aggregated in pandas first so specs
stay small):

* :func:`fig_score_vs_dynamic_heads` — the paper's Figure 2: score vs number of input-dependent heads;
* :func:`fig_baseline_vs_drop` — Figure 4: baseline score vs relative drop with all heads constant;
* :func:`fig_convergence` — dev score per epoch for k = 0 and k = all;
* :func:`fig_score_vs_train_size` — k = 0 and k = all scores against the probe's training-set size;
* :func:`fig_head_ranking` — which heads become constant first (layer × head heatmap);
* :func:`fig_constants` — a few constant attention matrices.

Offline rendering: Altair's default HTML output loads vega from a CDN, which shows nothing offline.
:func:`write_vega_bundle` writes one self-contained JavaScript file (vega, vega-lite and
vega-embed, from ``vl_convert.javascript_bundle``) that defines the global ``vegaEmbed``; the book
ships it in ``_static/`` and loads it on every page (``html_js_files``). :func:`enable_offline_renderer`
makes every chart display as a mimebundle with the Vega-Lite JSON (rendered natively by JupyterLab)
and a ``text/html`` div + script that calls that global ``vegaEmbed`` — no URL anywhere.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import altair as alt
import numpy as np
import pandas as pd

from papa.analysis.results import drops_at
from papa.core.errors import PapaError
from papa.core.io import atomic_write_text

#: The file :func:`write_vega_bundle` writes (load it with ``html_js_files`` in the book's config).
VEGA_BUNDLE_NAME = "papa-vega.js"
#: The mimetype JupyterLab's built-in Vega-Lite renderer handles.
VEGALITE_MIMETYPE = "application/vnd.vegalite.v5+json"
RENDERER_NAME = "papa"
FACET_WIDTH, FACET_HEIGHT = 220, 160
#: The training-size figure's facets are wider: its log x axis spans 2–3 decades.
TRAIN_SIZE_WIDTH = 300
K0_LABEL, KALL_LABEL = "k = 0 (all heads attend)", "k = all (all heads constant)"
FLOOR_LABEL = "attention-free floor (embeddings only)"


def _mode_rows(frame: pd.DataFrame, mode: str | None) -> pd.DataFrame:
    modes = sorted(frame["mode"].dropna().unique())
    if not modes:
        raise PapaError("There are no runs to plot", "Load some results first.")
    chosen = mode if mode is not None else ("faithful" if "faithful" in modes else modes[0])
    if chosen not in modes:
        raise PapaError(f"No runs in mode {chosen!r}", f"Modes present: {', '.join(modes)}.")
    return frame[frame["mode"] == chosen]


def _facet(chart: alt.LayerChart, frame: pd.DataFrame, x_per_model: bool = False) -> alt.FacetChart:
    """Facet by task (wrapped), or model × task when there are several models; independent y
    (and x, with ``x_per_model``, when models differ)."""
    if frame["model"].nunique() > 1:
        faceted = chart.facet(row=alt.Row("model:N", title=None), column=alt.Column("task:N", title=None))
        return faceted.resolve_scale(y="independent", x="independent" if x_per_model else "shared")
    return chart.facet(facet=alt.Facet("task:N", title=None), columns=3).resolve_scale(y="independent")


def _clean(frame: pd.DataFrame, digits: int = 4) -> pd.DataFrame:
    """Round floats (smaller JSON; Altair writes NaN as null)."""
    out = frame.copy()
    for column in out.select_dtypes("float").columns:
        out[column] = out[column].round(digits)
    return out


# --- figures -----------------------------------------------------------------------------------


def fig_score_vs_dynamic_heads(summary: pd.DataFrame, floors: pd.DataFrame, mode: str | None = None) -> alt.FacetChart:
    """Figure 2 analogue: mean score (band: min–max over seeds) vs input-dependent heads, per task.

    ``summary`` from :func:`papa.analysis.results.summarise`, ``floors`` from :func:`papa.analysis.results.floors_table`.
    Colour is the ranking (click the legend to highlight one); dashed rules are the majority and
    attention-free floors. The k = 0 baseline is drawn as the start of every ranking's line.
    """
    rows = _mode_rows(summary, mode)
    rows = rows[rows["probe_input"] == "all"]
    chosen_mode = rows["mode"].iloc[0] if len(rows) else mode
    from papa.analysis.results import spread_shared

    parts = [spread_shared(group) for _, group in rows.groupby(["model", "task"], sort=True)]
    scores = pd.concat(parts) if parts else rows
    scores = scores.assign(layer="score", dynamic=scores["total_heads"] - scores["k"])
    scores = scores[["layer", "model", "task", "ranking", "k", "dynamic", "metric", "mean", "std", "min", "max", "n_seeds"]]
    lines = floors[floors["mode"] == chosen_mode].melt(id_vars=["model", "task"], value_vars=["majority", "attention_free"], var_name="floor", value_name="value")
    lines = lines.dropna(subset=["value"]).assign(layer="floor", floor=lambda f: f["floor"].str.replace("_", "-"))
    data = _clean(pd.concat([scores, lines], ignore_index=True))

    pick = alt.selection_point(name="pick_ranking", fields=["ranking"], bind="legend")
    x = alt.X("dynamic:Q", title="input-dependent heads (total − k)")
    is_score = alt.datum.layer == "score"
    band = (
        alt.Chart()
        .mark_area(opacity=0.2)
        .encode(
            x=x,
            y=alt.Y("min:Q", scale=alt.Scale(zero=False), title="score"),
            y2="max:Q",
            color=alt.Color("ranking:N", title="ranking"),
            opacity=alt.condition(pick, alt.value(0.25), alt.value(0.03)),
        )
        .transform_filter(is_score)
    )
    line = (
        alt.Chart()
        .mark_line(point=True)
        .encode(
            x=x,
            y=alt.Y("mean:Q", scale=alt.Scale(zero=False)),
            color="ranking:N",
            opacity=alt.condition(pick, alt.value(1.0), alt.value(0.15)),
            tooltip=[
                "task:N",
                "ranking:N",
                "k:Q",
                "dynamic:Q",
                "metric:N",
                alt.Tooltip("mean:Q", format=".4f"),
                alt.Tooltip("std:Q", format=".4f"),
                alt.Tooltip("min:Q", format=".4f"),
                alt.Tooltip("max:Q", format=".4f"),
                "n_seeds:Q",
            ],
        )
        .add_params(pick)
        .transform_filter(is_score)
    )
    rule = (
        alt.Chart()
        .mark_rule(color="gray")
        .encode(
            y="value:Q",
            strokeDash=alt.StrokeDash("floor:N", title="floor"),
            tooltip=["task:N", "floor:N", alt.Tooltip("value:Q", format=".4f")],
        )
        .transform_filter(alt.datum.layer == "floor")
    )
    layered = alt.layer(band, line, rule, data=data).properties(width=FACET_WIDTH, height=FACET_HEIGHT)
    return _facet(layered, data, x_per_model=True)


def fig_baseline_vs_drop(summary: pd.DataFrame, mode: str | None = None) -> alt.Chart:
    """Figure 4 analogue: baseline (k = 0) score vs relative drop with all heads constant.

    One point per model × task; colour = model, shape = task.
    """
    chosen = _mode_rows(summary, mode)["mode"].iloc[0]
    drops = drops_at(summary, 1, None, chosen)
    if drops.empty:
        raise PapaError("No model/task has both k=0 and k=all runs", "Run the k=0 and k=all probes first.")
    return (
        alt.Chart(_clean(drops))
        .mark_point(size=90, filled=True)
        .encode(
            x=alt.X("baseline:Q", scale=alt.Scale(zero=False, padding=20), title="baseline score (k = 0)"),
            y=alt.Y("drop:Q", scale=alt.Scale(padding=20), axis=alt.Axis(format="%"), title="relative drop, all heads constant"),
            color=alt.Color("model:N"),
            shape=alt.Shape("task:N"),
            tooltip=["model:N", "task:N", alt.Tooltip("baseline:Q", format=".4f"), alt.Tooltip("score:Q", format=".4f"), alt.Tooltip("drop:Q", format=".2%"), "real:N"],
        )
        .properties(width=360, height=260)
    )


def fig_convergence(epochs: pd.DataFrame, mode: str | None = None) -> alt.FacetChart:
    """Dev score per epoch (mean, band min–max over seeds) for k = 0 and k = all, per task.

    ``epochs`` from :func:`papa.analysis.results.epoch_table`.
    """
    rows = _mode_rows(epochs, mode)
    rows = rows[(rows["probe_input"] == "all") & ((rows["k"] == 0) | (rows["k"] == rows["total_heads"]))]
    rows = rows.assign(condition=np.where(rows["k"] == 0, K0_LABEL, KALL_LABEL))
    data = rows.groupby(["model", "task", "condition", "epoch"], as_index=False).agg(
        mean=("score", "mean"), min=("score", "min"), max=("score", "max"), loss=("train_loss", "mean"), n_seeds=("seed", "nunique")
    )
    data = _clean(data)
    color = alt.Color("condition:N", title=None)
    x = alt.X("epoch:Q", axis=alt.Axis(tickMinStep=1, format="d"))
    band = alt.Chart().mark_area(opacity=0.2).encode(x=x, y=alt.Y("min:Q", title="dev score"), y2="max:Q", color=color)
    line = (
        alt.Chart()
        .mark_line(point=True)
        .encode(
            x=x,
            y=alt.Y("mean:Q", scale=alt.Scale(zero=False)),
            color=color,
            tooltip=[
                "task:N",
                "condition:N",
                "epoch:Q",
                alt.Tooltip("mean:Q", format=".4f"),
                alt.Tooltip("min:Q", format=".4f"),
                alt.Tooltip("max:Q", format=".4f"),
                alt.Tooltip("loss:Q", format=".4f", title="train loss"),
                "n_seeds:Q",
            ],
        )
    )
    return _facet(alt.layer(band, line, data=data).properties(width=FACET_WIDTH, height=FACET_HEIGHT), data)


def fig_score_vs_train_size(table: pd.DataFrame) -> alt.FacetChart:
    """k = 0 and k = all scores (mean, band min–max over seeds) against the number of training
    examples the probe saw (log scale), per model × task; the vertical gap between the lines is the
    absolute drop with every head constant. The attention-free floor is drawn as points with min–max
    bars, only at the sizes where it ran (no line joins sizes it did not run at).

    ``table`` from :func:`papa.analysis.results.train_size_table`.
    """
    if table.empty:
        raise PapaError("No training size has both k = 0 and k = all runs", "Run the k = 0 and k = all probes at several sizes first.")
    parts = []
    for prefix, condition in (("k0", K0_LABEL), ("kall", KALL_LABEL), ("floor", FLOOR_LABEL)):
        part = table[["model", "task", "train_examples", "n_seeds", "drop", "drop_real", "retained_gain"]].copy()
        part["condition"] = condition
        for stat in ("mean", "min", "max"):
            part[stat] = table[f"{prefix}_{stat}"]
        if prefix == "floor":
            part["n_seeds"] = table["floor_n_seeds"]
        parts.append(part.dropna(subset=["mean"]))
    data = _clean(pd.concat(parts, ignore_index=True))
    color = alt.Color("condition:N", title=None)
    x = alt.X("train_examples:Q", scale=alt.Scale(type="log"), title="training examples (log scale)")
    y = alt.Y("mean:Q", scale=alt.Scale(zero=False), title="dev score")
    tooltip = [
        "model:N",
        "task:N",
        "condition:N",
        alt.Tooltip("train_examples:Q", format=","),
        alt.Tooltip("mean:Q", format=".4f"),
        alt.Tooltip("min:Q", format=".4f"),
        alt.Tooltip("max:Q", format=".4f"),
        alt.Tooltip("drop:Q", format=".2%", title="relative drop"),
        alt.Tooltip("drop_real:N", title="drop beyond seed spread"),
        alt.Tooltip("retained_gain:Q", format=".2%", title="retained gain over the higher floor"),
        "n_seeds:Q",
    ]
    probes, floor = alt.datum.condition != FLOOR_LABEL, alt.datum.condition == FLOOR_LABEL
    band = alt.Chart().transform_filter(probes).mark_area(opacity=0.2).encode(x=x, y="min:Q", y2="max:Q", color=color)
    line = alt.Chart().transform_filter(probes).mark_line(point=True).encode(x=x, y=y, color=color, tooltip=tooltip)
    floor_bar = alt.Chart().transform_filter(floor).mark_rule().encode(x=x, y="min:Q", y2="max:Q", color=color)
    floor_point = alt.Chart().transform_filter(floor).mark_point(shape="diamond", filled=True, size=60).encode(x=x, y=y, color=color, tooltip=tooltip)
    layers = alt.layer(band, line, floor_bar, floor_point, data=data)
    return _facet(layers.properties(width=TRAIN_SIZE_WIDTH, height=FACET_HEIGHT), data)


def fig_head_ranking(ranking: Sequence[Sequence[int]] | str | Path, num_layers: int, num_heads: int, k_values: Sequence[int] | None = None) -> alt.LayerChart:
    """Layer × head heatmap of each head's rank (1 = made constant first).

    ``ranking`` is a list of ``(layer, head)`` pairs or a ranking file; the tooltip gives the first
    of ``k_values`` at which the head is constant.
    """
    if isinstance(ranking, (str, Path)):
        from papa.core.heads import load_ranking

        ranking, _ = load_ranking(ranking, num_layers, num_heads)
    steps = sorted(int(k) for k in (k_values or []))
    rows = []
    for position, (layer, head) in enumerate(ranking, start=1):
        first = next((k for k in steps if k >= position), None)
        rows.append({"layer": int(layer), "head": int(head), "rank": position, "constant_from": f"k = {first}" if first is not None else "never (in these k)"})
    data = pd.DataFrame(rows)
    base = alt.Chart(data).encode(x=alt.X("head:O", title="head"), y=alt.Y("layer:O", title="layer"))
    cells = base.mark_rect().encode(
        color=alt.Color("rank:Q", scale=alt.Scale(scheme="viridis"), title="rank (1 = first constant)"),
        tooltip=["layer:O", "head:O", "rank:Q", alt.Tooltip("constant_from:N", title="constant from")],
    )
    size = max(12, min(28, 480 // max(num_heads, 1)))
    text = base.mark_text(fontSize=8).encode(text="rank:Q", color=alt.condition(alt.datum.rank > len(data) / 2, alt.value("black"), alt.value("white")))
    return alt.layer(cells, text).properties(width=size * num_heads, height=size * num_layers)


def _downsample(matrix: np.ndarray, cells: int) -> tuple[np.ndarray, np.ndarray]:
    """Block means to at most ``cells × cells``; returns (matrix, block start positions)."""
    length = matrix.shape[0]
    if length <= cells:
        return matrix, np.arange(length)
    starts = np.unique(np.linspace(0, length, cells + 1).round().astype(int))[:-1]
    sizes = np.diff(np.append(starts, length))
    summed = np.add.reduceat(np.add.reduceat(matrix, starts, axis=0), starts, axis=1)
    return summed / np.outer(sizes, sizes), starts


def fig_constants(constants: Any, picks: Sequence[tuple[int, int]], max_cells: int = 32, columns: int = 3) -> alt.ConcatChart:
    """Heatmaps of the constant matrices ``constants[layer, head]`` (query row × key column).

    ``constants`` is ``[layers, heads, L, L]`` (torch or numpy). Each matrix is block-averaged to at
    most ``max_cells × max_cells`` (≤ 64) cells and rounded, to keep the spec small.
    """
    if not 1 <= max_cells <= 64:
        raise PapaError(f"max_cells={max_cells} is outside [1, 64]", "Use e.g. 32.")
    array = constants.detach().cpu().float().numpy() if hasattr(constants, "detach") else np.asarray(constants, float)
    if array.ndim != 4 or array.shape[-1] != array.shape[-2]:
        raise PapaError(f"Constants of shape {list(array.shape)} are not [layers, heads, L, L]", "Pass ConstantSet.constants.")
    if not picks:
        raise PapaError("No heads picked", "Pass picks=[(layer, head), ...].")
    charts = []
    for layer, head in picks:
        if not (0 <= layer < array.shape[0] and 0 <= head < array.shape[1]):
            raise PapaError(f"Head ({layer}, {head}) is out of range for {array.shape[0]}×{array.shape[1]} heads", "Layers and heads count from 0.")
        matrix, starts = _downsample(array[layer, head].astype(np.float64), max_cells)
        ii, jj = np.meshgrid(starts, starts, indexing="ij")
        data = pd.DataFrame({"i": ii.ravel(), "j": jj.ravel(), "v": np.round(matrix.ravel(), 4)})
        charts.append(
            alt.Chart(data, title=f"layer {layer}, head {head}")
            .mark_rect()
            .encode(
                x=alt.X("j:O", title="key position", axis=alt.Axis(labelOverlap=True)),
                y=alt.Y("i:O", title="query position", axis=alt.Axis(labelOverlap=True)),
                color=alt.Color("v:Q", scale=alt.Scale(scheme="blues"), title="weight"),
                tooltip=[alt.Tooltip("i:O", title="query"), alt.Tooltip("j:O", title="key"), alt.Tooltip("v:Q", title="weight", format=".4f")],
            )
            .properties(width=180, height=180)
        )
    return alt.concat(*charts, columns=columns).resolve_scale(color="independent")


# --- offline rendering -------------------------------------------------------------------------


def write_vega_bundle(static_dir: str | Path, vl_version: str | None = None) -> Path:
    """Write :data:`VEGA_BUNDLE_NAME` (vega + vega-lite + vega-embed, no network) into ``static_dir``.

    The code comes from ``vl_convert.javascript_bundle`` with a snippet that sets the globals
    ``window.vegaEmbed`` and ``window.vega``; it is wrapped in a function so its minified top-level
    names do not leak into the page (a plain ``<script src>`` can load it). ``vl_version``
    defaults to the installed Altair's Vega-Lite version (major.minor) when vl_convert ships it.
    """
    import vl_convert

    if vl_version is None:
        wanted = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
        vl_version = wanted if wanted in vl_convert.get_vegalite_versions() else None
    code = vl_convert.javascript_bundle("window.vegaEmbed = vegaEmbed; window.vega = vega;", vl_version=vl_version)
    header = (
        f"/* papa offline Vega bundle: vega {vl_convert.get_vega_version()}, vega-lite {vl_version or 'latest'}, "
        f"vega-embed {vl_convert.get_vega_embed_version()}; written by papa.analysis.figures.write_vega_bundle. */\n"
    )
    return atomic_write_text(Path(static_dir) / VEGA_BUNDLE_NAME, header + "(function () {\n" + code + "\n})();\n")


_seen_ids: dict[str, int] = {}


def chart_id(spec: dict) -> str:
    """A deterministic element id: a hash of the spec, plus ``-N`` when the same spec is shown again."""
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode("utf-8")).hexdigest()[:12]
    count = _seen_ids.get(digest, 0)
    _seen_ids[digest] = count + 1
    return f"papa-vl-{digest}" + (f"-{count}" if count else "")


def offline_html(spec: dict, element_id: str | None = None) -> str:
    """A ``<div>`` plus a ``<script>`` that renders ``spec`` with the global ``vegaEmbed`` (no URLs).

    The spec's ``$schema`` URL is dropped (the mode is given explicitly). When the bundle has not
    loaded yet the script waits for the page's ``load`` event; if it never loads, the div says so.
    """
    element_id = element_id or chart_id(spec)
    body = {key: value for key, value in spec.items() if key != "$schema"}
    spec_json = json.dumps(body, sort_keys=True).replace("</", "<\\/")
    return (
        f'<div id="{element_id}"></div>\n'
        '<script type="text/javascript">\n'
        "(function () {\n"
        f"  var spec = {spec_json};\n"
        f'  var target = document.getElementById("{element_id}");\n'
        "  function show() {\n"
        '    if (typeof window.vegaEmbed !== "function") {\n'
        f'      target.textContent = "Chart not shown: the page does not load _static/{VEGA_BUNDLE_NAME}.";\n'
        "      return;\n"
        "    }\n"
        f'    vegaEmbed("#{element_id}", spec, {{"actions": false, "mode": "vega-lite"}})'
        '.catch(function (err) { target.textContent = "Chart error: " + err; });\n'
        "  }\n"
        '  if (typeof window.vegaEmbed === "function" || document.readyState === "complete") { show(); }\n'
        '  else { window.addEventListener("load", show); }\n'
        "})();\n"
        "</script>"
    )


def offline_renderer(spec: dict, **metadata: Any) -> dict[str, Any]:
    """Altair renderer: Vega-Lite JSON for JupyterLab plus offline HTML for the book."""
    return {VEGALITE_MIMETYPE: spec, "text/html": offline_html(spec), "text/plain": "<papa Vega-Lite chart>"}


def enable_offline_renderer() -> None:
    """Register and enable the Altair renderer ``"papa"`` (:func:`offline_renderer`).

    Returns nothing, so that a notebook cell ending with it shows no output.
    """
    alt.renderers.register(RENDERER_NAME, offline_renderer)
    alt.renderers.enable(RENDERER_NAME)


__all__ = [
    "RENDERER_NAME",
    "VEGALITE_MIMETYPE",
    "VEGA_BUNDLE_NAME",
    "chart_id",
    "enable_offline_renderer",
    "fig_baseline_vs_drop",
    "fig_constants",
    "fig_convergence",
    "fig_head_ranking",
    "fig_score_vs_dynamic_heads",
    "offline_html",
    "offline_renderer",
    "write_vega_bundle",
]
