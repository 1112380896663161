"""Shared test set-up.

Tests marked ``data`` need the real task data in ``$PAPA_DATA_DIR``. Without it they are
skipped locally, but fail in CI (``$CI`` set), so CI cannot silently skip them; :func:`skip_or_fail` does the
same for any other missing prerequisite (a browser, an optional package).

Tests marked ``cuda`` (``tests/test_cuda.py``) compare GPU and CPU numbers. On a machine without a
CUDA device they are deselected, and the report header says so; on a GPU machine they run with the
rest (``pytest -m cuda`` runs only them).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

_NO_DATA = (
    "PAPA_DATA_DIR is not set: tests marked 'data' need it to point "
    "to the task data folder (TASK/SPLIT.jsonl + TASK/labels.json)"
)


def _data_dir_missing() -> bool:
    return not os.environ.get("PAPA_DATA_DIR", "").strip()


def skip_or_fail(reason: str) -> None:
    """Skip a test for ``reason`` locally; fail it in CI (``$CI`` set), where nothing it needs may be missing.

    Test modules call it (``from conftest import skip_or_fail``) instead of ``pytest.skip`` for a missing
    prerequisite (the task data, a browser, an optional package), so CI cannot silently skip a test."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; it is required in CI.", pytrace=False)
    pytest.skip(f"{reason}.")


def _skip_or_fail() -> None:
    skip_or_fail(_NO_DATA)


def pytest_report_header(config: pytest.Config) -> str | None:
    if not torch.cuda.is_available():
        return "no CUDA device: the 'cuda' tests (tests/test_cuda.py) are deselected; run them on a GPU machine"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    deselected = [item for item in items if item.get_closest_marker("cuda") is not None]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if item.get_closest_marker("cuda") is None]


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("data") is not None and _data_dir_missing():
        _skip_or_fail()


@pytest.fixture
def data_dir() -> Path:
    """The task data folder, ``Path($PAPA_DATA_DIR)``."""
    if _data_dir_missing():
        _skip_or_fail()
    return Path(os.environ["PAPA_DATA_DIR"])


@pytest.fixture(autouse=True)
def _one_thread():
    """Tests run tiny models: one intra-op thread is fastest, and far faster on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _smoke_runs() -> Path:
    from papa.pipeline.plan import ROOT

    return ROOT / "book" / "runs" / "smoke"


@pytest.fixture(scope="session")
def built_book(tmp_path_factory) -> Path:
    """A copy of the repository (tracked and unignored files, plus the smoke runs) with its book built
    strictly; one build per session, shared by tests/test_book.py and tests/test_browser.py."""
    from papa.pipeline.plan import ROOT

    smoke_runs = _smoke_runs()
    if not (smoke_runs / "results.ipynb").is_file():
        pytest.fail("The smoke grid has not been run: `make test` runs it first (papa grid run configs/smoke.yaml).")
    copy = tmp_path_factory.mktemp("repo")
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    for name in files.stdout.splitlines():
        source = ROOT / name
        if source.is_file() and not name.startswith("book/runs/"):
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    shutil.copytree(smoke_runs, copy / "book" / "runs" / "smoke", ignore=shutil.ignore_patterns(".executing", ".lock"))
    (copy / ".venv").symlink_to(ROOT / ".venv")  # the installed tools, MathJax included
    env = dict(os.environ, PYTHONPATH=str(copy))
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "papa.cli",
            "book",
            "build",
            "--config",
            "configs/smoke.yaml",
            "--as-is",
            "--strict",
            "--replace-pages",
        ],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    return copy / "_build" / "html"
