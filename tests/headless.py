"""Debian's headless Chromium for the book's browser tests (``make test`` installs it when missing)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

#: Offline and quiet: no sandbox (root in CI), no GPU, no background connections this machine would refuse.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run")


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail("Debian's chromium is not installed: `make test` installs it (apt-get install chromium) before running the tests.")
    return found


def dump_dom(url: str, profile: Path, *extra: str, timeout: float = 120) -> str:
    """The DOM of ``url`` after its scripts ran (``--dump-dom``), in a fresh profile folder."""
    command = [chromium(), *FLAGS, f"--user-data-dir={profile}", *extra, "--dump-dom", url]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout).stdout
