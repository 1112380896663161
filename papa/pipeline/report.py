"""``papa study MODEL`` makes a *model report*: check the model, write its sized config
(:mod:`papa.pipeline.report_config`), run its grid as ``papa grid run`` does (:func:`papa.pipeline.runner.run_grid`),
then execute the report's chapter (:data:`NOTEBOOK`) into ``book/studies/<grid>.ipynb``, outside the runs folder,
with the runs' own executor (:func:`papa.pipeline.executors.execute_notebook`). The book lists those chapters and
builds one alone (:mod:`papa.book.report_site`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from papa.core.io import atomic_write_text
from papa.pipeline import report_config as RC
from papa.pipeline.estimate import format_duration
from papa.pipeline.executed import visible
from papa.pipeline.executors import attempt_folder, execute_notebook
from papa.pipeline.plan import ROOT, runs_dir
from papa.pipeline.runner import run_grid

#: The model report's chapter notebook, where its executions go (a path the README documents), and the book's
#: sidebar part that lists them.
NOTEBOOK = "notebooks/07_report.md"
CHAPTERS_DIR = "book/studies"
PART_CAPTION = "Your models"


@dataclass(frozen=True)
class ReportSettings:
    """What ``papa study`` was asked: the model and its tasks, the time ``budget`` in seconds (None: full size), the
    report's ``name`` (None: from the model), the device, ``dry_run`` (print, write nothing), the book config whose
    protocol it copies, another ``protocol`` (tests: tiny sizes) and how the grid runs (scheduler, resources)."""

    model: str
    tasks: tuple[str, ...]
    budget: float | None = None
    name: str | None = None
    device: str = "auto"
    dry_run: bool = False
    book_config: str = RC.BOOK_CONFIG
    protocol: dict[str, Any] | None = None
    scheduler: str = "sequential"
    gpus_per_run: int = 0
    threads_per_run: int | None = None


def chapter_path(grid: str, root: Path = ROOT) -> Path:
    """Where the chapter of the model report ``grid`` (``study-<name>``) is written."""
    return root / CHAPTERS_DIR / f"{grid}.ipynb"


def execute_chapter(grid: str, book_config: str = RC.BOOK_CONFIG) -> Path:
    """Execute the chapter of the model report ``grid`` (``configs/<grid>.yaml``) beside ``book_config``'s runs;
    returns its path. A failed chapter is kept beside it (``.failed.ipynb``); the runs are kept either way."""
    params = {"grid_config": f"configs/{grid}.yaml", "book_config": book_config}
    scratch = attempt_folder(runs_dir({"name": grid}), "chapter")
    target = chapter_path(grid)
    execute_notebook(NOTEBOOK, params, target, scratch, f"The chapter of {grid}")
    return target


def run_report(settings: ReportSettings, out: TextIO | None = None) -> int:
    """``papa study``: size the protocol to the budget, write ``configs/study-<name>.yaml`` (a dry run prints it and
    writes nothing), run its grid, then execute its chapter. 0 when the chapter is written (or on a dry run), else
    the grid's status."""
    out = out or sys.stdout
    checked = RC.check_model(settings.model)
    name = settings.name or RC.default_name(settings.model)
    protocol = settings.protocol if settings.protocol is not None else RC.book_protocol(settings.book_config)
    config = RC.report_config(settings.model, list(settings.tasks), name, protocol, settings.device)
    budget = settings.budget
    fitted = RC.fit_budget(config, budget)
    path = RC.config_path(name)
    text = RC.config_text(fitted, budget, settings.book_config)
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    what = f"{checked.model_type}, {checked.heads} heads"
    print(f"study {config['name']}: {visible(settings.model)} ({what}) on {', '.join(settings.tasks)}", file=out)
    for cut in fitted.cuts:
        print(f"  cut to fit the budget of {format_duration(budget or 0)}: {cut}", file=out)
    size = f" (budget {format_duration(budget)})" if budget else " (the book's protocol at full size)"
    print(f"  estimate {format_duration(fitted.seconds)} on 2 CPU cores{size}", file=out)
    if settings.dry_run:
        print(f"would write {where}:\n{text}", file=out)
        return 0
    RC.check_same_model(path, config["models"][0])
    atomic_write_text(path, text)
    print(f"wrote {where}", file=out, flush=True)
    resources = dict(gpus_per_run=settings.gpus_per_run, threads_per_run=settings.threads_per_run)
    status = run_grid(path, out=out, scheduler=settings.scheduler, **resources)
    if status != 0:
        again = f"fix them and run the same command again (`papa grid run {where}` works too)"
        print(f"the chapter is not executed: some runs failed; {again}", file=out)
        return status
    chapter = execute_chapter(config["name"], settings.book_config)
    later = f"(the book lists it under '{PART_CAPTION}' at its next build)"
    print(f"chapter: {chapter.relative_to(ROOT)} {later}", file=out)
    return 0
