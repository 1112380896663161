"""Shared test set-up.

Tests marked ``data`` need the real task data in ``$PAPA_DATA_DIR``. Without it they are
skipped locally, but fail in CI (``$CI`` set), so CI cannot silently skip them.

Tests marked ``cuda`` (``tests/test_cuda.py``) compare GPU and CPU numbers. On a machine without a
CUDA device they are deselected, and the report header says so; on a GPU machine they run with the
rest (``pytest -m cuda`` runs only them).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

_NO_DATA = "PAPA_DATA_DIR is not set: tests marked 'data' need it to point to the task data folder (TASK/SPLIT.jsonl + TASK/labels.json)"


def _data_dir_missing() -> bool:
    return not os.environ.get("PAPA_DATA_DIR", "").strip()


def _skip_or_fail() -> None:
    if os.environ.get("CI"):
        pytest.fail(_NO_DATA + "; it is required in CI.", pytrace=False)
    pytest.skip(_NO_DATA + ".")


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
