"""Shared test set-up.

Tests marked ``data`` need the real task data in ``$PAPA_DATA_DIR``. Without it they are
skipped locally, but fail in CI (``$CI`` set), so CI cannot silently skip them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

_NO_DATA = (
    "PAPA_DATA_DIR is not set: tests marked 'data' need it to point to the task data folder "
    "(TASK/SPLIT.jsonl + TASK/labels.json)"
)


def _data_dir_missing() -> bool:
    return not os.environ.get("PAPA_DATA_DIR", "").strip()


def _skip_or_fail() -> None:
    if os.environ.get("CI"):
        pytest.fail(_NO_DATA + "; it is required in CI.", pytrace=False)
    pytest.skip(_NO_DATA + ".")


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
