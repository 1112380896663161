"""``papa book build`` (what ``make book`` runs): bring the grid's runs up to date (``--as-is``: render the committed
runs as they are, stale ones marked), write the generated pages and the offline assets
(:func:`papa.book.pages.write_pages`), then run ``jupyter-book build`` into ``_build/html``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from papa.book.assets import check_assets
from papa.book.pages import write_pages
from papa.core.errors import PapaError
from papa.pipeline.plan import ROOT, grid_chapters, load_config
from papa.pipeline.runner import run_grid, stale_runs

BUILD_DIR = ROOT / "_build" / "html"


def build_book(config_path: str = "configs/default.yaml", as_is: bool = False, strict: bool = False) -> int:
    """Bring the runs up to date (unless ``as_is``), write the generated pages, build ``_build/html``."""
    path = Path(config_path)
    if not path.is_absolute() and not path.exists():  # relative to the working folder, else to the repository
        path = ROOT / path
    config = load_config(path)
    check_assets()  # before anything runs or is written: a missing asset leaves the committed pages as they were
    jupyter_book = Path(sys.executable).parent / "jupyter-book"
    if not jupyter_book.is_file():
        raise PapaError(f"jupyter-book is not installed beside {sys.executable}", "Run `make install`.")
    status = 0
    if not as_is:
        status = run_grid(path)  # the same file, from any working folder
    runs, stale, _, _ = stale_runs(config)
    present = [r.run_id for r in runs if (ROOT / "book" / "runs" / config["name"] / f"{r.run_id}.ipynb").is_file()]
    if set(grid_chapters(config)) - set(present):
        fix = "Run `make book` with the task data (PAPA_DATA_DIR)."
        raise PapaError(f"The chapters of grid {config['name']!r} have not been run", fix)
    write_pages(config, [r.run_id for r in stale if r.run_id in present], present)
    command = [str(jupyter_book), "build", str(ROOT), "--path-output", str(ROOT)]
    if strict:
        command += ["-W", "-n", "--keep-going"]
    pages = f"{len(present)} run pages, {len(runs) - len(present)} missing"
    print(f"building the book ({pages}) into {BUILD_DIR.relative_to(ROOT)}", flush=True)
    build = subprocess.run(command, cwd=ROOT)
    if build.returncode != 0:
        raise PapaError("jupyter-book build failed", "Read the messages above.")
    print(f"book: {BUILD_DIR / 'index.html'}")
    return status
