"""papa.analysis.figures: every chart builds a valid Vega-Lite spec that fits the text column (measured
on the SVG Vega renders), with a caption written from the same specification; the offline renderer and
bundle need no network."""

from __future__ import annotations

import json
import re

import altair as alt
import numpy as np
import pandas as pd
import pytest
import torch
from test_results import grid

from papa.analysis.figure_kit import TEXT_WIDTH, Figure, glue_figure
from papa.analysis.figures import fig_convergence, fig_score_vs_dynamic_heads
from papa.analysis.offline import (
    VEGA_BUNDLE_NAME,
    VEGALITE_MIMETYPE,
    enable_offline_renderer,
    offline_html,
    write_vega_bundle,
)
from papa.analysis.results import epoch_table, floors_table, load_results, summarise
from papa.analysis.run_figures import _downsample, fig_constants, fig_head_ranking
from papa.core.errors import PapaError


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    folder = tmp_path_factory.mktemp("results")
    for task in ("sst2", "pos"):
        grid(folder, task=task)
    grid(folder, task="sst2", model="bert", total=144, baseline=(0.89, 0.90, 0.91))
    df = load_results(folder)
    return summarise(df), floors_table(df), epoch_table(folder)


def valid(figure) -> dict:
    assert isinstance(figure, Figure) and figure.caption and figure.label.startswith("fig-")
    spec = figure.chart.to_dict(validate=True)
    assert spec["config"]["legend"]["orient"] == "bottom"  # legends below the plot: never off-screen to the right
    assert spec["$schema"].startswith("https://vega.github.io/schema/vega-lite/")
    return spec


def data_rows(spec: dict) -> list[dict]:
    return [row for rows in spec.get("datasets", {}).values() for row in rows]


def has_tooltip(spec) -> bool:
    return '"tooltip"' in json.dumps(spec)


def svg_size(figure) -> tuple[float, float]:
    """The width and height of the SVG Vega draws for ``figure`` (axes, headers and legends included)."""
    import vl_convert

    svg = vl_convert.vegalite_to_svg(figure.chart.to_dict())
    width, height = re.search(r'<svg[^>]*width="([\d.]+)"[^>]*height="([\d.]+)"', svg).groups()
    return float(width), float(height)


def test_score_vs_dynamic_heads(tables):
    summary, floors, _ = tables
    figure = fig_score_vs_dynamic_heads(summary, floors)
    spec = valid(figure)
    assert has_tooltip(spec) and spec["resolve"]["scale"]["y"] == "independent"
    rows = data_rows(spec)
    floors_drawn = {(r["task"], r["floor"]) for r in rows if r["layer"] == "floor"}
    assert ("sst2", "majority class") in floors_drawn and ("pos", "attention-free probe") in floors_drawn
    scores = [r for r in rows if r["layer"] == "score" and r["model"] == "minilm-l6" and r["task"] == "sst2"]
    assert sorted(r["dynamic"] for r in scores) == [0, 36, 72]  # the k=0 baseline starts the gates line
    assert {r["ranking"] for r in scores} == {"gates"}
    assert {r["panel"] for r in rows} == {"minilm-l6 · SST-2", "minilm-l6 · POS (CoNLL-2003)", "bert · SST-2"}
    assert "pick_ranking" in json.dumps(spec)  # legend selection
    assert (
        spec["columns"] == 2 and spec["spec"]["layer"][1]["encoding"]["y"]["title"] == "score (accuracy)"
    )  # three panels wrap in rows of two


def test_floor_dashes_and_caption_come_from_one_specification(tables):
    """Fig. 1's old caption said both floors were dashed while the legend drew one solid."""
    summary, floors, _ = tables
    figure = fig_score_vs_dynamic_heads(summary, floors)
    dash = figure.chart.to_dict()["spec"]["layer"][2]["encoding"]["strokeDash"]
    assert dash["scale"] == {
        "domain": ["majority class", "attention-free probe"],
        "range": [[8, 4], [2, 3]],
    }  # neither is solid
    assert "Grey rules: the majority class floor (dashed); the attention-free probe floor (dotted)." in figure.caption
    assert "over 3 probe seeds" in figure.caption and "one colour per ranking (gates)" in figure.caption
    assert "(of 144 in bert and 72 in minilm-l6)" in figure.caption  # two models: the totals are named per model
    without_free = floors.assign(attention_free=float("nan"))
    only = fig_score_vs_dynamic_heads(summary, without_free)
    assert only.chart.to_dict()["spec"]["layer"][2]["encoding"]["strokeDash"]["scale"]["range"] == [[8, 4]]
    assert "Grey rules: the majority class floor (dashed)." in only.caption and "attention-free" not in only.caption


def test_every_figure_fits_the_text_column(tables):
    """Measured on the SVG Vega draws: panels wrap, legends sit below, nothing is wider than the text column."""
    summary, floors, epochs = tables
    heads = [(layer, head) for layer in range(24) for head in range(16)]
    figures = [
        fig_score_vs_dynamic_heads(summary, floors),
        fig_convergence(epochs),
        fig_head_ranking(heads, 24, 16),
        fig_constants(torch.rand(2, 3, 64, 64).softmax(-1), [(0, 0), (0, 1), (1, 0), (1, 2)]),
    ]
    for figure in figures:
        width, _ = svg_size(figure)
        assert 300 < width <= TEXT_WIDTH, (figure.label, width)


def test_convergence(tables):
    _, _, epochs = tables
    figure = fig_convergence(epochs)
    spec = valid(figure)
    rows = data_rows(spec)
    assert "mean over 3 probe seeds" in figure.caption and "one panel per model and task" in figure.caption
    assert {r["condition"] for r in rows} == {"k = 0 (all heads attend)", "k = all (all heads constant)"}
    assert len(rows) == 3 * 2 * 2  # (model, task) pairs × conditions × epochs, averaged over seeds
    assert has_tooltip(spec)


def test_head_ranking():
    ranking = [(layer, head) for layer in range(2) for head in range(3)][::-1]
    figure = fig_head_ranking(ranking, 2, 3, k_values=[0, 3, 6], source="minilm-l6__mnli__gates")
    assert figure.caption.startswith(
        "Rank of every head (2 layers × 3 heads) in the gates ranking of minilm-l6 on MNLI:"
    )  # names its task
    spec = valid(figure)
    rows = {(r["layer"], r["head"]): r for r in data_rows(spec) or spec["layer"][0]["data"]["values"]}
    assert rows[(1, 2)]["rank"] == 1 and rows[(1, 2)]["constant_from"] == "k = 3"
    assert rows[(0, 0)]["rank"] == 6 and rows[(0, 0)]["constant_from"] == "k = 6"
    assert has_tooltip(spec)


def test_constants_downsampled_and_small():
    constants = torch.rand(2, 3, 64, 64).softmax(-1)
    figure = fig_constants(constants, [(0, 0), (1, 2)], max_cells=16, source="SST-2 (32 sentences)")
    assert (
        "of layer 0 head 0 and layer 1 head 2 (layers and heads count from 0), estimated on SST-2 (32 sentences)"
        in figure.caption
    )
    assert "at most 16 × 16 cells" in figure.caption
    spec = valid(figure)
    rows = data_rows(spec)
    assert len(rows) == 2 * 16 * 16 and has_tooltip(spec)
    assert len(json.dumps(spec)) < 40_000
    with pytest.raises(PapaError):
        fig_constants(constants, [(2, 0)])
    with pytest.raises(PapaError):
        fig_constants(constants, [(0, 0)], max_cells=65)


def test_downsample_is_block_mean():
    matrix = np.arange(16, dtype=float).reshape(4, 4)
    small, starts = _downsample(matrix, 2)
    assert starts.tolist() == [0, 2]
    assert small.tolist() == [[2.5, 4.5], [10.5, 12.5]]
    same, _ = _downsample(matrix, 8)
    assert same is matrix


def test_a_figure_answers_as_its_chart():
    """Attributes a Figure lacks come from its chart (callers that treat it as an Altair chart); dunders do not."""
    chart = alt.Chart(alt.Data(values=[{"a": 1}])).mark_point().encode(x="a:Q")
    figure = Figure(chart, "A caption.", "fig-x")
    spec = figure.to_dict()
    assert sorted(spec) == ["$schema", "config", "data", "encoding", "mark"]  # the chart's own, nothing added
    assert (spec["mark"], spec["encoding"], spec["data"]) == (
        {"type": "point"},
        {"x": {"field": "a", "type": "quantitative"}},
        {"values": [{"a": 1}]},
    )
    assert figure.properties(width=123).to_dict()["width"] == 123
    assert (figure.caption, figure.label) == ("A caption.", "fig-x")
    with pytest.raises(AttributeError):
        figure.__no_such_dunder__  # noqa: B018 - a dunder is never looked up on the chart


def test_offline_renderer_html_has_no_url_and_calls_vega_embed():
    previous = alt.renderers.active
    try:
        enable_offline_renderer()
        assert alt.renderers.active == "papa"
        chart = alt.Chart(alt.Data(values=[{"a": 1, "b": "</script>"}])).mark_point().encode(x="a:Q", tooltip="b:N")
        bundle = chart._repr_mimebundle_()
        bundle = bundle[0] if isinstance(bundle, tuple) else bundle
        figure_bundle = Figure(chart, "A caption.", "fig-x")._repr_mimebundle_()
        figure_bundle = figure_bundle[0] if isinstance(figure_bundle, tuple) else figure_bundle
    finally:
        alt.renderers.enable(previous)
    assert figure_bundle[VEGALITE_MIMETYPE] == bundle[VEGALITE_MIMETYPE]  # a Figure displays (and glues) as its chart
    assert bundle[VEGALITE_MIMETYPE]["mark"] == {"type": "point"}
    html = bundle["text/html"]
    assert "http" not in html
    element = re.search(r'<div id="([\w-]+)"></div>', html).group(1)
    assert f'vegaEmbed("#{element}", spec, {{"actions": false' in html
    assert html.count("</script>") == 1  # the data's "</script>" is escaped
    fixed = offline_html(chart.to_dict(), "fixed")
    assert (
        fixed.startswith('<div id="fixed"></div>\n')
        and 'vegaEmbed("#fixed", spec, {"actions": false, "mode": "vega-lite"})' in fixed
    )
    shown = json.loads(re.search(r"var spec = (.*);\n", fixed).group(1).replace("<\\/", "</"))
    assert "$schema" not in shown  # the mode is given explicitly instead
    encoding = {"x": {"field": "a", "type": "quantitative"}, "tooltip": {"field": "b", "type": "nominal"}}
    expected = {"data": {"values": [{"a": 1, "b": "</script>"}]}, "mark": {"type": "point"}, "encoding": encoding}
    assert {key: shown[key] for key in expected} == expected


def test_chart_ids_are_deterministic():
    spec = {"mark": "point", "data": {"values": [{"unique": "test_chart_ids_are_deterministic"}]}}
    first, second = offline_html(spec), offline_html(spec)
    id_1, id_2 = (re.search(r'id="([\w-]+)"', h).group(1) for h in (first, second))
    assert id_2 == id_1 + "-1"  # the same spec shown twice on a page gets a distinct id
    other = offline_html({**spec, "mark": "line"})
    assert re.search(r'id="([\w-]+)"', other).group(1) != id_1


def test_write_vega_bundle(tmp_path):
    path = write_vega_bundle(tmp_path / "_static")
    assert path.name == VEGA_BUNDLE_NAME and path.parent == tmp_path / "_static"
    code = path.read_text()
    import vl_convert

    header = (
        f"/* papa offline Vega bundle: vega {vl_convert.get_vega_version()}, vega-lite "
        f"{alt.SCHEMA_VERSION[1:].rsplit('.', 1)[0]}, "
    )
    assert code.startswith(header)  # the installed Altair's Vega-Lite (major.minor)
    assert code.splitlines()[1] == "(function () {"  # its names stay inside one function
    assert re.search(
        r"window\.vegaEmbed=[\w$]+;window\.vega=[\w$]+;\n\}\)\(\);\n$", code
    )  # sets the globals the pages call, last
    assert path.stat().st_size > 100_000  # vega + vega-lite + vega-embed, not a loader stub
    assert not re.search(r"<script[^>]+src=|import\s*\(\s*['\"]https?:", code)  # nothing fetched at load


def test_glue_figure_glues_the_chart_and_its_caption(monkeypatch):
    import myst_nb

    glued = []
    monkeypatch.setattr(myst_nb, "glue", lambda name, value, display=True: glued.append((name, value, display)))
    figure = Figure(alt.Chart().mark_point(), "The caption.", "fig-demo")
    glue_figure(figure)
    assert glued == [("fig-demo", figure, False), ("fig-demo-caption", "The caption.", False)]


def test_paper_analogues_fit_and_say_their_verdict(tmp_path):
    """(a)–(c) from hand-made records: each fits the text column (measured on the SVG) and its caption is written
    from its data (the models with their heads, the claim-3 n and verdict)."""
    from test_chapters_science import CONFIG, write_grid

    from papa.analysis import analogues
    from papa.book.analogue_figures import fig_paper_scores, fig_relative_score, placeholder_figure
    from papa.book.chapters.results import analogue_figures, answers
    from tests.hand_cells import book_data

    write_grid(tmp_path)
    data = book_data(CONFIG, tmp_path)
    result = answers(data, resamples=50)
    points = analogues.score_vs_dynamic_heads(result.summary, data.floors, result.all_cells)
    a = fig_paper_scores(points, "gates")
    b = fig_relative_score(analogues.relative_score_vs_constant_fraction(result.summary, data.floors, result.all_cells))
    c = analogue_figures(result)[2]  # drawn with claim 3's verdict in words
    for figure in (a, b, c, placeholder_figure("fig-x", "Nothing to draw.")):
        valid(figure)
        assert svg_size(figure)[0] <= TEXT_WIDTH, figure.label
    bars = [r for r in data_rows(a.chart.to_dict()) if r["layer"] == "score" and r["k"] == 8 and r["model"] == "ma"]
    assert bars[0]["low"] == pytest.approx(
        0.85 + result.differences.set_index(["model", "k"]).loc[("ma", 8), "low"], abs=1e-4
    )
    assert "one colour per model (ma, 8 heads and mb, 8 heads)" in a.caption
    assert "(n = 2)" in c.caption and "Verdict: not testable." in c.caption
    assert [f.label for f in analogue_figures(result)] == [
        "fig-paper-scores",
        "fig-relative-score",
        "fig-better-models",
    ]
    with pytest.raises(PapaError, match="nothing to draw"):
        fig_relative_score(pd.DataFrame())


def test_a_placeholder_figure_wraps_its_sentence_inside_the_text_column():
    from papa.book.analogue_figures import placeholder_figure

    why = (
        "No run of the main grid scored the dev split after every "
        "epoch (the dev split is scored once, by the reported probe)."
    )
    figure = placeholder_figure("fig-x", why)
    assert figure.caption == why and svg_size(figure)[0] <= TEXT_WIDTH


def test_the_convergence_figure_draws_the_held_out_curve_when_the_dev_split_is_scored_once():
    from papa.analysis.figures import fig_convergence

    rows = [
        {
            "run_id": f"r{k}{s}",
            "model": "m",
            "task": "sst2",
            "metric": "accuracy",
            "mode": "cached",
            "probe_input": "all",
            "k": k,
            "total_heads": 8,
            "seed": s,
            "epoch": e,
        }
        | {"train_loss": 1.0 / e, "score": float("nan"), "heldout": 0.5 + 0.01 * e + 0.001 * s}
        for k in (0, 8)
        for s in (1, 2)
        for e in (1, 2, 3)
    ]
    figure = fig_convergence(pd.DataFrame(rows), curve="heldout")
    assert (
        figure.caption.startswith("Held-out training score (accuracy) after every epoch")
        and "the dev split is scored once" in figure.caption
    )
    assert sorted(figure.chart.data["mean"].round(4).unique().tolist()) == [0.5115, 0.5215, 0.5315]


def test_glue_figures_glues_each_chart_and_caption_in_order(monkeypatch):
    import myst_nb

    from papa.book.load import glue_figures

    glued = []
    monkeypatch.setattr(myst_nb, "glue", lambda name, value, display=True: glued.append((name, display)))
    glue_figures([Figure(alt.Chart().mark_point(), f"Caption {i}.", f"fig-{i}") for i in (1, 2)])
    assert glued == [("fig-1", False), ("fig-1-caption", False), ("fig-2", False), ("fig-2-caption", False)]
