"""Tables that fit: at a 1,280 px window the book's text column is 688 px wide (sphinx-book-theme, both
sidebars shown); no chapter table hides a deciding column (the relative drop, real?, a verdict) behind a sideways
scroll there. Wide tables fold their secondary columns into a "More columns" view. Measured in headless Chromium on
the chapters' tables built from hand-made runs under the book's real model and task names."""

from __future__ import annotations

import html
import json
import re

import pytest
from hand_cells import table_cells
from headless import dump_dom

from papa.book import interval_tables as IT
from papa.book.chapters.results import answers as build_answers
from tests.hand_cells import book_data
from tests.test_chapters_science import CONFIG, RESAMPLES, write_grid

#: The text column at a 1,280 px window (measured on the built book, tests/test_browser.py's window).
COLUMN_PX = 688
DECIDING = ("relative drop [95% interval]", "real?", "verdict", "drop, all", "1. verdict", "2. verdict", "3. verdict")
MEASURE = """<script>
window.addEventListener("load", function () {
  var out = [];
  document.querySelectorAll("body > div.column > .papa-table-wrap").forEach(function (wrap) {
    var w = wrap.getBoundingClientRect();
    wrap.querySelectorAll("th").forEach(function (th) {
      out.push([wrap.getAttribute("data-name"), th.textContent.trim(),
                th.getBoundingClientRect().right - w.left, w.width]);
    });
  });
  document.body.setAttribute("data-headers", JSON.stringify(out));
});
</script>"""


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fit")
    write_grid(folder)
    science = build_answers(book_data(CONFIG, folder), resamples=RESAMPLES)
    real_names = {"ma": "mpnet-base", "mb": "minilm-l6"}  # the book's longest model names
    rename = lambda frame: (
        frame.assign(model=frame["model"].map(lambda m: real_names.get(m, m))) if "model" in frame else frame
    )  # noqa: E731
    return {
        "main": IT.main_table_display(rename(science.table)),
        "random": IT.random_display(rename(science.random)),
        "paper": IT.paper_table_display(rename(science.paper)),
        "sensitivity": IT.verdict_sensitivity_display(science.sensitivity),
        "claims": IT.verdicts_display(science.claims),
    }


def test_no_deciding_column_hides_behind_a_sideways_scroll_at_1280_px(tables, tmp_path):
    body = "".join(
        f'<div class="column" style="width:{COLUMN_PX}px;font-family:sans-serif;font-size:16px">'
        + table._repr_html_().replace(
            '<div class="papa-table-wrap">', f'<div class="papa-table-wrap" data-name="{name}">', 1
        )
        + "</div>"
        for name, table in tables.items()
    )
    page = tmp_path / "tables.html"
    page.write_text(f"<!doctype html><html><body>{body}{MEASURE}</body></html>", encoding="utf-8")
    dom = dump_dom(page.as_uri(), tmp_path / "profile", "--window-size=1280,900", "--virtual-time-budget=5000")
    found = re.search(r'data-headers="([^"]*)"', dom)
    assert found, "the measuring script did not run"
    headers = json.loads(html.unescape(found.group(1)))
    assert {name for name, *_ in headers} == set(tables)
    hidden = [
        f"{name}: {header} ends at {right:.0f} px of {width:.0f}"
        for name, header, right, width in headers
        if header in DECIDING and right > width + 1
    ]
    assert not hidden, hidden
    shown = {(name, header) for name, header, *_ in headers}
    assert (
        ("main", "relative drop [95% interval]") in shown
        and ("main", "real?") in shown
        and ("random", "verdict") in shown
    )


def test_the_folded_columns_are_under_more_columns_with_the_keys(tables):
    page = tables["main"]._repr_html_()
    folded = page.split('<details class="papa-table-more">', 1)[1]
    assert folded.startswith("<summary>More columns: difference to k = 0 [95% interval], seed range, seeds</summary>")
    heads = re.findall(r"<th[^>]*>([^<]*)</th>", folded)
    assert heads == [
        "model",
        "task",
        "constant heads",
        "ranking",
        "difference to k = 0 [95% interval]",
        "seed range",
        "seeds",
    ]
    main = re.findall(r"<th[^>]*>([^<]*)</th>", page.split("<details", 1)[0])
    assert "seed range" not in main and "relative drop [95% interval]" in main
    assert list(table_cells(tables["main"]).columns)[-4:] == [
        "real?",
        "seed range",
        "seeds",
        "converged seeds",
    ]  # every column for tests
