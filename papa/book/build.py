"""``papa book build`` (what ``make book`` runs): bring the grid's runs up to date (``--as-is``: render the committed
runs as they are, stale ones marked), write the generated pages and the offline assets
(:func:`papa.book.pages.write_pages`), then run ``jupyter-book build`` into ``_build/html``.

There is one book: its pages (``_toc.yml``, ``book/*.md``) are tracked, generated from the default grid
(:data:`TRACKED_GRID`). Building another grid's book rewrites those pages, so it is refused unless asked for with
``replace_pages`` (``--replace-pages``): do it in a copy of the repository, or restore them afterwards."""

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
#: The grid whose book the repository tracks (``_toc.yml`` and ``book/*.md`` are generated from it).
TRACKED_GRID = "default"


def build_book(
    config_path: str = "configs/default.yaml", as_is: bool = False, strict: bool = False, replace_pages: bool = False
) -> int:
    """Bring the runs up to date (unless ``as_is``), write the generated pages, build ``_build/html``; another grid
    than :data:`TRACKED_GRID` only with ``replace_pages`` (module docstring)."""
    path = Path(config_path)
    if not path.is_absolute() and not path.exists():  # relative to the working folder, else to the repository
        path = ROOT / path
    config = load_config(path)
    check_assets()  # before anything runs or is written: a missing asset leaves the committed pages as they were
    if config["name"] != TRACKED_GRID and not replace_pages:
        raise PapaError(
            f"papa book build --config {path.name} would rewrite the {TRACKED_GRID} book's tracked pages (_toc.yml, "
            f"book/*.md) with grid {config['name']!r}'s",
            "Build it in a copy of the repository (git worktree add), or pass --replace-pages to rewrite them here "
            "(git checkout -- _toc.yml book restores them).",
        )
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
