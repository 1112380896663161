"""``papa study``: check the model, write the sized config, run the grid as ``papa grid run`` does, and execute the
study chapter (``notebooks/07_study.md``) into ``book/studies/<grid>.ipynb``, outside the runs folder; the book
lists those chapters in a "Your models" part (:func:`studies_part`), ``--site`` builds one alone (:func:`build_site`).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from papa.book.assets import stage_assets
from papa.core.errors import PapaError
from papa.core.fields import TASKS
from papa.core.io import atomic_write_text
from papa.pipeline import study as S
from papa.pipeline.estimate import format_duration
from papa.pipeline.executed import clean_executed, visible
from papa.pipeline.kernels import papermill_options
from papa.pipeline.notebook import read_source
from papa.pipeline.plan import ROOT

#: The study chapter's notebook, where its executions go, and the sidebar part that lists them.
NOTEBOOK = "notebooks/07_study.md"
CHAPTERS_DIR = "book/studies"
PART_CAPTION = "Your models"


def parse_tasks(text: str | None) -> list[str]:
    """``sst2,mrpc`` → the tasks, in the given order (None or empty: all six); an unknown or repeated task is
    refused."""
    if not text or not text.strip():
        return list(TASKS)
    tasks = [t.strip().lower() for t in text.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        fix = f"Use a comma list of {', '.join(TASKS)} (e.g. --tasks sst2,mrpc)."
        raise PapaError(f"--tasks: unknown task(s) {', '.join(unknown)}", fix)
    if len(set(tasks)) != len(tasks):
        raise PapaError(f"--tasks lists a task twice ({text})", "List each task once.")
    return tasks


def chapter_path(grid: str, root: Path = ROOT) -> Path:
    return root / CHAPTERS_DIR / f"{grid}.ipynb"


def execute_chapter(grid: str, book_config: str = S.BOOK_CONFIG) -> Path:
    """Execute the study chapter of grid ``grid`` (``configs/<grid>.yaml``) beside ``book_config``'s runs; returns
    its path."""
    import nbformat
    import papermill

    target = chapter_path(grid)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="papa-study-") as scratch:
        source, executed = Path(scratch) / "source.ipynb", Path(scratch) / "executed.ipynb"
        source.write_text(nbformat.writes(read_source(ROOT / NOTEBOOK)), encoding="utf-8")
        params = {"grid_config": f"configs/{grid}.yaml", "book_config": book_config}
        options = dict(parameters=params, cwd=str(ROOT), **papermill_options())
        try:
            papermill.execute_notebook(str(source), str(executed), **options)
        except Exception as err:
            reason = f"{getattr(err, 'ename', type(err).__name__)}: {getattr(err, 'evalue', str(err))}".strip()
            fix = "Its runs are kept: fix the cause and run `papa study` again."
            raise PapaError(f"The chapter of {grid} failed ({reason[:300]})", fix) from None
        nb = clean_executed(nbformat.read(executed, as_version=4), ROOT)
    atomic_write_text(target, nbformat.writes(nbformat.from_dict(nb)))
    return target


def study_chapters(root: Path = ROOT) -> list[str]:
    """The executed study chapters (repository-relative, no suffix), sorted: what the "Your models" part lists."""
    folder = root / CHAPTERS_DIR
    found = sorted(folder.glob(f"{S.PREFIX}*.ipynb")) if folder.is_dir() else []
    return [f"{CHAPTERS_DIR}/{path.stem}" for path in found]


def studies_part(toc: str, root: Path = ROOT) -> str:
    """``_toc.yml``'s text ``toc`` with the "Your models" part (every executed study chapter, a file named with
    other characters than ``[A-Za-z0-9_./-]`` as a JSON string) before the appendix, unless none or already there."""
    chapters = study_chapters(root)
    if not chapters or f"caption: {PART_CAPTION}" in toc:
        return toc
    files = [c if re.fullmatch(r"[\w./-]+", c, re.ASCII) else json.dumps(c) for c in chapters]
    part = f"  - caption: {PART_CAPTION}\n    chapters:\n" + "".join(f"      - file: {f}\n" for f in files)
    marker = "  - caption: Appendix\n"
    return toc.replace(marker, part + marker, 1) if marker in toc else toc + part


def build_site(grid: str) -> Path:
    """A standalone site of one study chapter (its own Jupyter Book) in ``_build/<grid>/html``; returns its
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
    title = json.dumps(f"papa study: {visible(grid.removeprefix(S.PREFIX))}")  # a YAML string, whatever the name
    atomic_write_text(source / "_config.yml", config.replace("\ntitle:", f"\ntitle: {title}\n# the book's title:", 1))
    atomic_write_text(source / "_toc.yml", "format: jb-book\nroot: index\n")
    stage_assets(source / "book" / "_static")
    command = [str(Path(sys.executable).parent / "jupyter-book"), "build", str(source), "--path-output", str(site)]
    build = subprocess.run(command, cwd=source, capture_output=True, text=True)
    if build.returncode != 0:
        what = f"jupyter-book build of the {grid} site failed: {build.stderr[-500:] or build.stdout[-500:]}"
        raise PapaError(what, "Read the message above.")
    return site / "_build" / "html" / "index.html"


def run_study(
    model: str,
    tasks: list[str],
    budget: float | None = None,
    name: str | None = None,
    device: str = "auto",
    dry_run: bool = False,
    site: bool = False,
    out=None,
    book_config: str = S.BOOK_CONFIG,
    protocol: dict | None = None,
    **grid_options,
) -> int:
    """``papa study``: size the book's protocol (``protocol``: another, tests use tiny sizes) to ``budget`` (seconds),
    write ``configs/study-<name>.yaml`` (``dry_run``: print it, write nothing), run it with
    :func:`papa.pipeline.runner.run_grid` (``grid_options``), then execute the chapter (and with ``site`` build it)."""
    from papa.pipeline.runner import run_grid

    out = out or sys.stdout
    checked = S.check_model(model)
    name = name or S.default_name(model)
    protocol = protocol if protocol is not None else S.book_protocol(book_config)
    config = S.study_config(model, tasks, name, protocol, device)
    fitted = S.fit_budget(config, budget)
    path = S.config_path(name)
    text = S.config_text(fitted, budget, book_config)
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    what = f"{checked.model_type}, {checked.heads} heads"
    print(f"study {config['name']}: {visible(model)} ({what}) on {', '.join(tasks)}", file=out)
    for cut in fitted.cuts:
        print(f"  cut to fit the budget of {format_duration(budget or 0)}: {cut}", file=out)
    size = f" (budget {format_duration(budget)})" if budget else " (the book's protocol at full size)"
    print(f"  estimate {format_duration(fitted.seconds)} on 2 CPU cores{size}", file=out)
    if dry_run:
        print(f"would write {where}:\n{text}", file=out)
        return 0
    S.check_same_model(path, config["models"][0])
    atomic_write_text(path, text)
    print(f"wrote {where}", file=out, flush=True)
    status = run_grid(path, out=out, **grid_options)
    if status != 0:
        again = f"fix them and run the same command again (`papa grid run {where}` works too)"
        print(f"the chapter is not executed: some runs failed; {again}", file=out)
        return status
    chapter = execute_chapter(config["name"], book_config)
    later = f"(the book lists it under '{PART_CAPTION}' at its next build)"
    print(f"chapter: {chapter.relative_to(ROOT)} {later}", file=out)
    if site:
        print(f"site: {build_site(config['name'])}", file=out)
    return 0
