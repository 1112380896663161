"""The editing path, in a browser: ``make lab`` starts JupyterLab on the text notebooks, a user opens
``notebooks/03_probe.md`` — jupytext makes it a notebook —, edits a markdown cell and saves; the ``.md`` file on
disk holds exactly that edit, and the runner then refreshes the probe pages' text instead of re-executing them.

Everything happens in a temporary copy of the project (the notebooks, jupytext's settings, the smoke config and
the Makefile, ``.venv`` linked): the repository's notebooks and runs are never touched. In the copy, the smoke grid's
estimate, ranking, lr choice and probes are sealed as papermill would leave them (their notebooks rebuilt from
the sources, placeholder artefacts, stamps under the keys of the code as it is now), so the runner's verdict on the
edit does not depend on executing anything. JupyterLab is started by ``make lab`` itself, on a loopback port with a
token; Debian's headless chromium is driven over the DevTools protocol (:class:`headless.DevTools`): double-click
the cell, type, Shift+Enter, Ctrl+S.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import jupytext
import pytest
from conftest import skip_or_fail
from headless import stop_group

from papa.pipeline.plan import ROOT, expand, load_config

pytestmark = [pytest.mark.slow, pytest.mark.book]

NOTEBOOK = "03_probe.md"
ADDED = "A sentence added in JupyterLab by tests/test_lab.py."
#: What the copy needs: the text notebooks and jupytext's settings, the smoke config, and what `make lab` reads.
FILES = ("Makefile", "pyproject.toml", "constraints.txt", "jupytext.toml", "configs/smoke.yaml")


#: Run in the copy (``PAPA_PROJECT_DIR``): every run but the chapters, sealed as if papermill had just executed it.
SEAL = """
import nbformat
from papa.core.io import atomic_write_text
from papa.pipeline.executed import clean_executed
from papa.pipeline.notebook import read_source
from papa.pipeline.plan import ROOT, load_config, run_notebook_path, runs_dir
from papa.pipeline.runner import grid_status
from papa.pipeline.stamps import seal

config = load_config(ROOT / "configs" / "smoke.yaml")
status = grid_status(config)
for run in status.runs:
    if run.kind in ("results", "controls"):
        continue
    nb = read_source(ROOT / run.notebook)
    nb.metadata["papermill"] = {"parameters": run.params}
    at = next(i for i, cell in enumerate(nb.cells) if "parameters" in cell.metadata.get("tags", []))
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell("# Parameters", metadata={"tags": ["injected-parameters"]}))
    nb = nbformat.from_dict(clean_executed(nb, ROOT))
    atomic_write_text(ROOT / run_notebook_path(run), nbformat.writes(nb))
    for output in run.outputs:
        atomic_write_text(ROOT / output, "placeholder: nothing here reads it")
    key, data = status.keys[run.run_id]
    seal(run, key, status.components[run.run_id], status.displays[run.run_id], data, 1.0, runs_dir(config))
"""


def _env(project: Path) -> dict:
    return dict(
        os.environ, PAPA_PROJECT_DIR=str(project), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_EVALUATE_OFFLINE="1"
    )


@pytest.fixture
def project(tmp_path) -> Path:
    """A copy of what ``make lab`` and the smoke grid's plan read, with the smoke grid's runs sealed in it."""
    copy = tmp_path / "project"
    shutil.copytree(ROOT / "notebooks", copy / "notebooks", ignore=shutil.ignore_patterns(".ipynb_checkpoints", "book"))
    for name in FILES:
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, copy / name)
    (copy / ".venv").symlink_to(ROOT / ".venv")
    done = subprocess.run(
        [sys.executable, "-c", SEAL], cwd=copy, env=_env(copy), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return copy


def _dry_run(project: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "papa.cli", "grid", "run", "configs/smoke.yaml", "--dry-run"],
        cwd=project,
        env=_env(project),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Lab:
    """``make lab`` in ``project`` on a loopback port with a token; ``stop()`` shuts the server (and its kernels)
    down."""

    def __init__(self, project: Path, home: Path):
        self.port, self.token = _free_port(), secrets.token_hex(16)
        args = (
            f"--no-browser --ip=127.0.0.1 --port={self.port} --ServerApp.port_retries=0 "
            f"--IdentityProvider.token={self.token}"
        )
        args += " --allow-root" if os.geteuid() == 0 else ""  # a container's root (CI): jupyter refuses root without it
        env = dict(
            os.environ,
            HOME=str(home),
            JUPYTER_CONFIG_DIR=str(home / "config"),
            JUPYTER_RUNTIME_DIR=str(home / "runtime"),
        )
        env |= {
            "JUPYTERLAB_SETTINGS_DIR": str(home / "lab-user-settings"),
            "JUPYTERLAB_WORKSPACES_DIR": str(home / "lab-workspaces"),
        }
        home.mkdir(parents=True, exist_ok=True)
        self.log = (home / "lab.log").open("w")
        # -o: the copy's .venv is the repository's, installed already: never re-install it from here
        command = ["make", "--no-print-directory", "-o", ".venv/.papa-installed", "lab", f"LAB_ARGS={args}"]
        self.process = subprocess.Popen(
            command, cwd=project, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/api/status?token={self.token}", timeout=5) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            if self.process.poll() is not None or time.time() > deadline:
                self.stop()
                pytest.fail(f"`make lab` did not serve JupyterLab: {(home / 'lab.log').read_text()[-3000:]}")
            time.sleep(0.5)

    def stop(self) -> None:
        if self.process.poll() is None:
            try:  # the server's own shutdown also ends the kernel it started for the notebook
                request = urllib.request.Request(
                    f"{self.url}/api/shutdown", method="POST", headers={"Authorization": f"token {self.token}"}
                )
                urllib.request.urlopen(request, timeout=10).close()
                self.process.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                stop_group(self.process)
        self.log.close()


#: The open notebook's markdown cells as the page shows them.
MARKDOWN_CELLS = "document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-MarkdownCell')"


@pytest.fixture
def browser_installed() -> None:
    """Debian's chromium, checked before the project is copied: a skip locally without it, a failure in CI."""
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        skip_or_fail("Debian's chromium is not installed (`make browser` installs it): this test needs a browser")


def test_a_markdown_edit_saved_in_jupyterlab_lands_in_the_md_file_and_refreshes_the_runs_text_only(
    browser_installed, project, tmp_path
):
    from headless import DevTools

    source = project / "notebooks" / NOTEBOOK
    before = source.read_text(encoding="utf-8")
    probes = [r.run_id for r in expand(load_config(ROOT / "configs" / "smoke.yaml")) if r.kind == "probe"]
    report = _dry_run(project)
    assert not any(f"would run {p}:" in report or f"the text of {p}" in report for p in probes), (
        report
    )  # proven, text included

    lab = _Lab(project, tmp_path / "home")
    browser = None
    try:
        browser = DevTools(tmp_path / "profile")
        browser.send("Page.navigate", url=f"{lab.url}/lab/tree/{NOTEBOOK}?token={lab.token}")
        # opened as a notebook (jupytext), not as a text file: a notebook panel titled 03_probe.md, with its code cells
        browser.wait_for(
            f"{MARKDOWN_CELLS}.length > 0 && document.querySelectorAll('.jp-NotebookPanel .jp-CodeCell').length > 0",
            what="the notebook's cells",
        )
        assert (
            browser.evaluate(
                "document.querySelector('#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current "
                ".lm-TabBar-tabLabel').textContent"
            )
            == NOTEBOOK
        )
        first = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-MarkdownCell .jp-RenderedMarkdown"
        browser.wait_for(
            f"document.querySelector({first!r}).textContent.startsWith('Probing runs')",
            60,
            "the first markdown cell to render",
        )

        browser.click(first)  # select the cell (command mode), then Enter opens its editor
        browser.wait_for(
            "document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-MarkdownCell.jp-mod-selected') !== null",
            30,
            "the cell to be selected",
        )
        browser.press("Enter")
        browser.wait_for(
            "document.activeElement && document.activeElement.closest('.jp-MarkdownCell .cm-editor') !== null",
            30,
            "the cell's editor to take the focus",
        )
        browser.press("Control+End")
        browser.type("\n\n" + ADDED)
        browser.press("Shift+Enter")  # render the cell
        browser.wait_for(
            f"Array.from({MARKDOWN_CELLS}).some(c => c.textContent.includes({ADDED!r}))",
            30,
            "the edited cell to render",
        )
        browser.press("Control+s")
        deadline = time.time() + 60
        while source.read_text(encoding="utf-8") == before and time.time() < deadline:
            time.sleep(0.25)
    finally:
        if browser is not None:
            browser.close()
        lab.stop()

    after = source.read_text(encoding="utf-8")
    intro = before.split("---\n", 2)[2].split("\n\n```{code-cell}", 1)[0]  # the title and the first paragraph
    assert f"{intro}\n\n{ADDED}\n\n```{{code-cell}}" in after, after[:3000]  # the new paragraph, where it was typed
    old, new = jupytext.reads(before, fmt="md:myst"), jupytext.reads(after, fmt="md:myst")
    assert new.cells[0].source == old.cells[0].source + "\n\n" + ADDED
    assert [(c.cell_type, c.source, c.metadata.get("tags")) for c in new.cells[1:]] == [
        (c.cell_type, c.source, c.metadata.get("tags")) for c in old.cells[1:]
    ]
    assert new.metadata["kernelspec"]["name"] == old.metadata["kernelspec"]["name"] and after.count(ADDED) == 1

    report = _dry_run(project)
    for probe in probes:
        assert f"would refresh the text of {probe} (markdown changed; not re-executed)" in report, report
        assert f"would run {probe}:" not in report, report
    assert (ROOT / "notebooks" / NOTEBOOK).read_text(
        encoding="utf-8"
    ) == before  # the repository's notebook is untouched
