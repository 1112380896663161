"""Every chapter of the built book read in headless Chromium at 1,280 px, as a reader would: no
horizontal page scroll, no figure beyond the text column, no "rows × columns" truncation, no NaN cell.

Each page is copied beside itself with a measuring script appended (so its relative links still
resolve); Chromium loads it with a virtual-time budget, the script waits for the charts to draw,
measures, and writes its findings into a ``data-papa-layout`` attribute that ``--dump-dom`` returns.
Debian's ``chromium`` is required: ``make test`` installs it when it is missing.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
import yaml
from headless import dump_dom

WINDOW = (1280, 900)
#: The window at which the text column is narrowest (the contents bar appears on the right): pages with
#: charts are read there too.
NARROWEST = 1200
SLACK_PX = 2  # sub-pixel rounding

#: Runs in the page after load: waits (≤ 10 s of virtual time) until every chart has an <svg> or
#: <canvas>, then measures.
MEASURE = r"""
<script>
(function () {
  function measure() {
    var column = document.querySelector("article.bd-article") || document.querySelector("main") || document.body;
    var rect = column.getBoundingClientRect(), style = getComputedStyle(column);
    var left = rect.left + parseFloat(style.paddingLeft), right = rect.right - parseFloat(style.paddingRight);
    var box = {left: left, right: right, width: right - left};  // the content box: the text column itself
    var figures = [];
    document.querySelectorAll('div[id^="papa-vl-"]').forEach(function (chart) {
      var drawn = chart.querySelector("svg, canvas");
      var rect = (drawn || chart).getBoundingClientRect();
      figures.push({id: chart.id, drawn: !!drawn, left: rect.left, right: rect.right, width: rect.width});
    });
    var bad = [];
    document.querySelectorAll("td, th").forEach(function (cell) {
      var text = cell.textContent.trim();
      if (["NaN", "nan", "None", "<NA>", "NaT"].indexOf(text) >= 0) { bad.push(text); }
    });
    var truncated = (document.body.innerText.match(/\d+\s+rows\s+×\s+\d+\s+columns/g) || []);
    var result = {
      innerWidth: window.innerWidth,
      scrollWidth: document.documentElement.scrollWidth,
      column: {left: box.left, right: box.right, width: box.width},
      figures: figures, badCells: bad, truncated: truncated,
      chartErrors: (document.body.innerText.match(/Chart (error|not shown)[^\n]*/g) || [])
    };
    document.body.setAttribute("data-papa-layout", JSON.stringify(result));
  }
  var waited = 0;
  function wait() {
    var charts = document.querySelectorAll('div[id^="papa-vl-"]');
    var done = Array.prototype.every.call(charts, function (c) {
      return c.querySelector("svg, canvas") || c.textContent.trim();
    });
    if (done || waited > 10000) { measure(); } else { waited += 250; setTimeout(wait, 250); }
  }
  window.addEventListener("load", function () { setTimeout(wait, 250); });
})();
</script>
"""


def layout(page: Path, profile: Path, width: int = WINDOW[0]) -> dict:
    """Load ``page`` in headless Chromium ``width`` px wide and return what the measuring script found."""
    source = page.read_text(encoding="utf-8")
    probe = page.with_name(page.stem + ".layout-check.html")
    probe.write_text(
        source.replace("</body>", MEASURE + "</body>") if "</body>" in source else source + MEASURE, encoding="utf-8"
    )
    try:
        dom = dump_dom(
            probe.as_uri(),
            profile,
            "--hide-scrollbars",
            f"--window-size={width},{WINDOW[1]}",
            "--run-all-compositor-stages-before-draw",
            "--virtual-time-budget=20000",
            timeout=180,
        )
    finally:
        probe.unlink()
    found = re.search(r'data-papa-layout="([^"]*)"', dom)
    assert found, f"{page.name}: the measuring script did not finish (page DOM of {len(dom)} characters)"
    return json.loads(html.unescape(found.group(1)))


def chapters(book: Path) -> list[Path]:
    """Every page in the built book's table of contents (root, chapters and their sections)."""
    toc = yaml.safe_load((book.parent.parent / "_toc.yml").read_text())
    files = [toc["root"]]

    def walk(entries: list) -> None:
        for entry in entries or []:
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("sections", []))
            walk(entry.get("chapters", []))

    for part in toc.get("parts", []):
        walk(part.get("chapters", []))
    walk(toc.get("chapters", []))
    return [book / f"{name}.html" for name in files]


def problems(name: str, found: dict) -> list[str]:
    """What a reader would trip over on one page (empty when the page reads well)."""
    out = []
    if found["scrollWidth"] > found["innerWidth"] + SLACK_PX:
        out.append(
            f"{name}: the page scrolls sideways ({found['scrollWidth']} px wide in a {found['innerWidth']} px window)"
        )
    column = found["column"]
    for figure in found["figures"]:
        if not figure["drawn"]:
            out.append(f"{name}: chart {figure['id']} was not drawn")
        elif figure["right"] > column["right"] + SLACK_PX or figure["left"] < column["left"] - SLACK_PX:
            out.append(
                f"{name}: chart {figure['id']} ({figure['width']:.0f} px) reaches beyond the text column "
                f"({column['width']:.0f} px)"
            )
    if found["truncated"]:
        out.append(f"{name}: a truncated table ({found['truncated'][0]})")
    if found["badCells"]:
        out.append(f"{name}: {len(found['badCells'])} table cells read {sorted(set(found['badCells']))}")
    out += [f"{name}: {error}" for error in found["chartErrors"]]
    return out


pytestmark = pytest.mark.book


def test_the_measurement_sees_what_a_reader_sees(tmp_path):
    """The checks themselves, on a hand-made page: a 1,900 px chart, a NaN cell and pandas' truncation note are
    found."""
    page = tmp_path / "bad.html"
    page.write_text(
        '<html><body><main style="width:700px"><div id="papa-vl-wide"><svg width="1900" height="10"></svg></div>'
        "<table><tr><td>NaN</td><td>0.500</td></tr></table><p>96 rows × 7 columns</p></main></body></html>"
    )
    found = layout(page, tmp_path / "profile")
    assert found["innerWidth"] == WINDOW[0] and found["scrollWidth"] >= 1900
    issues = problems("bad.html", found)
    assert any("scrolls sideways" in i for i in issues) and any("beyond the text column" in i for i in issues)
    assert any("truncated table (96 rows × 7 columns)" in i for i in issues) and any("['NaN']" in i for i in issues)
    page.write_text(
        '<html><body><main style="width:700px"><div id="papa-vl-ok"><svg width="600" '
        'height="10"></svg></div><table><tr><td>–</td></tr></table></main></body></html>'
    )
    assert problems("good.html", layout(page, tmp_path / "profile")) == []


@pytest.mark.data
@pytest.mark.slow
def test_every_chapter_reads_well_at_1280_px(built_book, tmp_path):
    pages = chapters(built_book)
    assert len(pages) >= 7 and all(page.is_file() for page in pages), [p.name for p in pages if not p.is_file()]
    issues = []
    for page in pages:
        name = str(page.relative_to(built_book))
        found = layout(page, tmp_path / "profile")
        issues += problems(name, found)
        if found["figures"]:
            issues += problems(f"{name} at {NARROWEST} px", layout(page, tmp_path / "profile", NARROWEST))
    assert issues == [], "\n".join(issues)
