"""The book: a strict Jupyter Book build of the smoke grid's runs (any warning, broken reference or
error output fails), and headless Chromium finding every chart of the results page rendered offline."""

from __future__ import annotations

import re

import pytest
from headless import dump_dom

pytestmark = [pytest.mark.data, pytest.mark.slow, pytest.mark.book]
# `built_book` (conftest.py): the smoke grid's book, built once per session and shared with tests/test_browser.py.


def test_strict_build_has_every_chapter(built_book):
    for page in (
        "index.html",
        "book/method.html",
        "book/setup.html",
        "book/reproducibility.html",
        "book/runs/smoke/results.html",
        "book/runs/smoke/controls.html",
        "book/appendix.html",
    ):
        assert (built_book / page).is_file(), page
    results = (built_book / "book/runs/smoke/results.html").read_text()
    assert "Traceback" not in results
    for notebook in (built_book.parent.parent / "book" / "runs" / "smoke").glob("*.ipynb"):
        assert '"output_type": "error"' not in notebook.read_text(), f"{notebook.name} holds an error output"
    assert (built_book / "_static" / "papa-vega.js").stat().st_size > 100_000
    assert "cdn.jsdelivr" not in results and "https://cdn" not in results  # vega and MathJax are served locally
    assert (built_book / "_static" / "mathjax" / "tex-mml-chtml.js").is_file()


def test_every_chart_renders_offline_in_chromium(built_book, tmp_path):
    page = built_book / "book/runs/smoke/results.html"
    html = page.read_text()
    chart_ids = set(re.findall(r'<div id="(papa-vl-[0-9a-f-]+)"', html))
    assert len(chart_ids) >= 3, "the results page should hold the score, drop and ranking charts"
    dom = dump_dom(page.as_uri(), tmp_path, "--virtual-time-budget=15000")
    for chart_id in chart_ids:
        start = dom.find(f'id="{chart_id}"')
        assert start >= 0, f"{chart_id} missing from the rendered page"
        after = [dom.find(f'id="{other}"') for other in chart_ids if other != chart_id]
        block = dom[start : min([p for p in after if p > start], default=len(dom))]  # this chart's own element only
        assert "<canvas" in block or "<svg" in block, f"{chart_id} did not render"
