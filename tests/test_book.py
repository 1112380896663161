"""The book: a strict Jupyter Book build of the smoke grid's runs (any warning, broken reference or
error output fails), and headless Chromium finding every chart of the results page rendered offline."""

from __future__ import annotations

import json
import re

import pytest
import yaml
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


def _table_rows(html: str) -> tuple[list[str], list[list[str]]]:
    """The header texts and the cell texts (tags stripped) of the first table of ``html``."""
    table = html.split("<table", 1)[1].split("</table>", 1)[0]
    header = [re.sub(r"<[^>]+>", "", h).strip() for h in re.findall(r"<th[^>]*>(.*?)</th>", table, re.S)]
    rows = [
        re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table.split("<tbody>", 1)[1], re.S)
    ]
    return header, rows


def test_the_built_pages_show_the_runs_numbers(built_book):
    """The appendix's score of every probe run is the mean of its seeds' recorded scores, and the setup page's sizes
    are the smoke config's: both computed here from the run records and the config file, not from papa."""
    runs = built_book.parent.parent / "book" / "runs" / "smoke"
    seeds: dict[str, list[float]] = {}
    for record in sorted((runs / "artifacts" / "results").glob("probe__*.json")):
        seeds.setdefault(record.stem.rsplit("__s", 1)[0], []).append(json.loads(record.read_text())["score"])
    assert (
        len(seeds) == 6
    )  # none, half and all of minilm-l6's heads constant on SST-2, and all heads in three other modes
    header, rows = _table_rows((built_book / "book" / "appendix.html").read_text())
    score_column = header.index("Score")
    shown = {
        re.search(r'href="[^"]*/([^/"]+)\.html"', row[-1]).group(1): re.sub(r"<[^>]+>", "", row[score_column])
        for row in rows
    }
    for run_id, scores in seeds.items():
        assert shown[run_id] == f"{sum(scores) / len(scores):.3f}", run_id
    config = yaml.safe_load((built_book.parent.parent / "configs" / "smoke.yaml").read_text())["probe"]
    setup = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", (built_book / "book" / "setup.html").read_text()))
    drawn = (
        f"draws its own {config['max_train_examples']} training and {config['heldout_examples']} held-out examples "
        f"from a pool of {config['pool_examples']} training examples"
    )
    assert drawn in setup and f"scored on at most {config['max_eval_examples']} validation examples" in setup


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
