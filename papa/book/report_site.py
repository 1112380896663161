"""The pages of model reports (what ``papa study MODEL`` makes; :mod:`papa.pipeline.report` runs them): the book
lists their executed chapters in a "Your models" part (:func:`reports_part`), and ``papa study --site`` builds one
alone (:func:`build_site`)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from papa.book.assets import stage_assets
from papa.core.errors import PapaError
from papa.core.io import atomic_write_text
from papa.pipeline.executed import visible
from papa.pipeline.plan import ROOT
from papa.pipeline.report import CHAPTERS_DIR, PART_CAPTION, chapter_path
from papa.pipeline.report_config import PREFIX


def report_chapters(root: Path = ROOT) -> list[str]:
    """The executed model reports' chapters (repository-relative, no suffix), sorted: what "Your models" lists."""
    folder = root / CHAPTERS_DIR
    found = sorted(folder.glob(f"{PREFIX}*.ipynb")) if folder.is_dir() else []
    return [f"{CHAPTERS_DIR}/{path.stem}" for path in found]


def reports_part(toc: str, root: Path = ROOT) -> str:
    """``_toc.yml``'s text ``toc`` with the "Your models" part (every executed model report's chapter, a file named
    with other characters than ``[A-Za-z0-9_./-]`` as a JSON string) before the appendix, unless none or already
    there."""
    chapters = report_chapters(root)
    if not chapters or f"caption: {PART_CAPTION}" in toc:
        return toc
    files = [c if re.fullmatch(r"[\w./-]+", c, re.ASCII) else json.dumps(c) for c in chapters]
    part = f"  - caption: {PART_CAPTION}\n    chapters:\n" + "".join(f"      - file: {f}\n" for f in files)
    marker = "  - caption: Appendix\n"
    return toc.replace(marker, part + marker, 1) if marker in toc else toc + part


def build_site(grid: str) -> Path:
    """A standalone site of one model report's chapter (its own Jupyter Book) in ``_build/<grid>/html``; returns its
    ``index.html``."""
    chapter = chapter_path(grid)
    if not chapter.is_file():
        fix = "Run `papa study MODEL` (without --dry-run) first."
        raise PapaError(f"The chapter of {grid} has not been executed", fix)
    site = ROOT / "_build" / grid
    source = site / "source"
    shutil.rmtree(source, ignore_errors=True)
    (source / "book" / "_static").mkdir(parents=True)
    shutil.copy2(chapter, source / "index.ipynb")
    shutil.copy2(ROOT / "book" / "references.bib", source / "book" / "references.bib")
    config = (ROOT / "_config.yml").read_text(encoding="utf-8")
    title = json.dumps(f"papa study: {visible(grid.removeprefix(PREFIX))}")  # a YAML string, whatever the name
    atomic_write_text(source / "_config.yml", config.replace("\ntitle:", f"\ntitle: {title}\n# the book's title:", 1))
    atomic_write_text(source / "_toc.yml", "format: jb-book\nroot: index\n")
    stage_assets(source / "book" / "_static")
    command = [str(Path(sys.executable).parent / "jupyter-book"), "build", str(source), "--path-output", str(site)]
    build = subprocess.run(command, cwd=source, capture_output=True, text=True)
    if build.returncode != 0:
        what = f"jupyter-book build of the {grid} site failed: {build.stderr[-500:] or build.stdout[-500:]}"
        raise PapaError(what, "Read the message above.")
    return site / "_build" / "html" / "index.html"
