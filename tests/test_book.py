"""The book: a strict Jupyter Book build of the smoke grid's runs (any warning, broken reference or
error output fails), and headless Chromium finding every chart of the results page rendered offline."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from papa.pipeline.plan import ROOT

pytestmark = [pytest.mark.data, pytest.mark.slow, pytest.mark.book]
SMOKE_RUNS = ROOT / "book" / "runs" / "smoke"


@pytest.fixture(scope="module")
def built_book(tmp_path_factory) -> Path:
    """A copy of the repository (tracked and unignored files, plus the smoke runs) with its book built."""
    if not (SMOKE_RUNS / "results.ipynb").is_file():
        pytest.fail("The smoke grid has not been run: `make test` runs it first (papa grid run configs/smoke.yaml).")
    copy = tmp_path_factory.mktemp("repo")
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True)
    for name in files.stdout.splitlines():
        source = ROOT / name
        if source.is_file() and not name.startswith("book/runs/"):
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    shutil.copytree(SMOKE_RUNS, copy / "book" / "runs" / "smoke", ignore=shutil.ignore_patterns(".executing", ".lock"))
    (copy / ".venv").symlink_to(ROOT / ".venv")  # the installed tools, MathJax included
    env = dict(os.environ, PYTHONPATH=str(copy))
    build = subprocess.run(
        [sys.executable, "-m", "papa.cli", "book", "build", "--config", "configs/smoke.yaml", "--as-is", "--strict"], cwd=copy, env=env, capture_output=True, text=True, timeout=900
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    return copy / "_build" / "html"


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
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.fail("Debian's chromium is not installed: `make test` (via .ci/run) installs it with apt-get.")
    page = built_book / "book/runs/smoke/results.html"
    html = page.read_text()
    chart_ids = set(re.findall(r'<div id="(papa-vl-[0-9a-f-]+)"', html))
    assert len(chart_ids) >= 3, "the results page should hold the score, drop and ranking charts"
    dom = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={tmp_path}",
            "--virtual-time-budget=15000",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    for chart_id in chart_ids:
        start = dom.find(f'id="{chart_id}"')
        assert start >= 0, f"{chart_id} missing from the rendered page"
        block = dom[start : start + 4000]
        assert "<canvas" in block or "<svg" in block, f"{chart_id} did not render"
