"""What a runs folder holds beyond the plan's runs, and what a run page is titled, on hand-made runs folders
(nothing is executed).

* ``papa grid run --dry-run`` names every executed notebook, artefact, stamp and manifest entry that no run
  of the current plan wrote as "not in the plan"; ``--prune`` removes exactly those, keeps the plan's files,
  the runner's own files and a plan run's failed notebook, and never follows a link.
* A run page is titled after its kind (``Learning rate — …`` for an lr choice, never ``Constants``); a run
  executed before its title changed is refreshed (text only), not re-executed.
"""

from __future__ import annotations

import io
import json
import shutil
import uuid
from pathlib import Path

import nbformat
import pytest
import yaml

from papa.cli import main
from papa.pipeline import stamps
from papa.pipeline.executed import heading, run_kind, run_title, title_is_stale
from papa.pipeline.notebook import read_source
from papa.pipeline.plan import ROOT, expand, load_config, run_notebook_path
from papa.pipeline.runner import grid_status, run_grid

SMOKE = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text(encoding="utf-8"))  # its plan, under another name
LEFTOVER = "probe__minilm-l6__sst2__gates__k36__cached__tuned"
SELECT = "select_lr__minilm-l6__sst2"


@pytest.fixture
def grid(tmp_path, monkeypatch):
    """``(config path, config, runs folder)`` of the smoke grid's plan under a new name, whose runs folder is made
    by hand (removed after)."""
    monkeypatch.setenv(
        "PAPA_CACHE_DIR", str(tmp_path / "cache")
    )  # a runner's start cleans the feature cache's old temp files
    name = f"test-folder-{uuid.uuid4().hex[:8]}"
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(dict(SMOKE, name=name)))
    config = load_config(path)
    folder = ROOT / "book" / "runs" / name
    try:
        yield path, config, folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _write(path: Path, text: str = "{}") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _plan_files(config: dict) -> list[Path]:
    """Every file of the plan's runs, written by hand (not proven: nothing here reads them as results)."""
    written = []
    for run in expand(config):
        written += [_write(ROOT / rel) for rel in stamps.run_files(run)]
        written.append(_write(stamps.stamp_path(ROOT / "book" / "runs" / config["name"], run.run_id)))
    return written


def _dry_run(path: Path) -> str:
    out = io.StringIO()
    assert run_grid(path, dry_run=True, out=out) == 0
    return out.getvalue()


def test_dry_run_names_what_no_run_of_the_plan_wrote_and_prune_removes_exactly_that(grid, tmp_path):
    path, config, folder = grid
    kept = _plan_files(config)
    kept.append(
        _write(folder / "probe__minilm-l6__sst2__none__k0__cached.failed.ipynb")
    )  # a plan run's failed attempt: read it
    stamps.Manifest(folder / "manifest.json").save()
    manifest = stamps.Manifest(folder / "manifest.json")
    manifest.entries = {"estimate__minilm-l6__sst2": {"status": "ok"}, LEFTOVER: {"status": "ok", "seconds": 3.0}}
    manifest.save()
    kept += [folder / "manifest.json", _write(folder / "grid.json", json.dumps({"config": config["_path"]}))]
    outside = tmp_path / "elsewhere.json"
    outside.write_text("not in the runs folder")
    leftovers = [
        _write(folder / f"{LEFTOVER}.ipynb"),
        _write(folder / "artifacts" / "results" / f"{LEFTOVER}__s42.json"),
        _write(stamps.stamp_path(folder, LEFTOVER)),
        _write(folder / f"{LEFTOVER}.failed.ipynb"),
        _write(folder / "artifacts" / "old-study" / "deep" / "x.json"),
    ]
    link = folder / "artifacts" / "linked.json"
    link.symlink_to(outside)
    leftovers.append(link)
    temp = _write(
        folder / "artifacts" / "results" / ".p.json.abcd1234.tmp"
    )  # papa's temporary file: not the plan's business

    report = _dry_run(path)
    assert f"not in the plan: {len(leftovers)} files and 1 manifest entries (--prune removes them)" in report
    listed = {
        line.split("not in the plan: ", 1)[1]
        for line in report.splitlines()
        if line.startswith("    not in the plan: ")
    }
    assert listed == {str(p.relative_to(folder)) for p in leftovers} | {f"manifest entry {LEFTOVER}"}
    assert all(p.exists() or p.is_symlink() for p in leftovers)  # a dry run removes nothing

    out = io.StringIO()  # a run without --prune counts them and keeps them
    assert run_grid(path, only="no-such-run", out=out) == 0
    assert (
        f"not in the plan: {len(leftovers)} files and 1 manifest entries (--dry-run lists them, --prune removes them)"
        in out.getvalue()
    )
    assert all(p.exists() or p.is_symlink() for p in leftovers)

    out = io.StringIO()
    assert (
        run_grid(path, only="no-such-run", prune=True, out=out) == 0
    )  # --only selects nothing: only the pruning happens
    assert f"removed, not in the plan: {len(leftovers)} files and 1 manifest entries" in out.getvalue()
    assert f"    removed: {LEFTOVER}.ipynb" in out.getvalue()
    assert not any(p.exists() or p.is_symlink() for p in leftovers)
    assert not (folder / "artifacts" / "old-study").exists()  # emptied folders go too
    assert outside.read_text() == "not in the runs folder"  # a link is removed, never followed
    assert all(p.is_file() for p in kept), [str(p) for p in kept if not p.is_file()]
    assert not temp.exists()  # the runner's start removed the temporary file (clean_leftovers)
    assert set(stamps.Manifest(folder / "manifest.json").entries) == {"estimate__minilm-l6__sst2"}
    assert "not in the plan" not in _dry_run(path)


def test_the_command_line_prunes(grid, capsys):
    path, config, folder = grid
    _plan_files(config)
    leftover = _write(folder / f"{LEFTOVER}.ipynb")
    assert main(["grid", "run", str(path), "--dry-run"]) == 0
    assert f"    not in the plan: {LEFTOVER}.ipynb" in capsys.readouterr().out
    assert leftover.is_file()
    assert main(["grid", "run", str(path), "--only", "no-such-run", "--prune"]) == 0
    assert f"    removed: {LEFTOVER}.ipynb" in capsys.readouterr().out
    assert not leftover.exists()


def test_nothing_is_pruned_from_a_plan_that_lacks_a_models_probes(grid, monkeypatch):
    """A model the plan cannot size offline has no probes in it: its probes' files are not called leftovers."""
    path, config, folder = grid
    config_text = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump(dict(config_text, models=["minilm-l6", "unknown-org/unsized-model"])))
    _write(folder / "probe__unknown-org-unsized-model__sst2__none__k0__cached.ipynb")
    report = _dry_run(path)
    assert "not in the plan: not checked (the plan lacks the probes of unknown-org/unsized-model)" in report
    assert "--prune" not in report


# -- titles ------------------------------------------------------------------------------------------
def test_every_run_kind_of_the_smoke_plan_gets_its_own_title():
    """Each kind's title names the kind (the lr choice is never "Constants"); the chapters keep their heading."""
    runs = {r.kind: r for r in expand(load_config(ROOT / "configs" / "smoke.yaml"))}
    assert {kind: run_kind(run.params) for kind, run in runs.items()} == {
        "estimate": "estimate",
        "rank": "rank",
        "select_lr": "select_lr",
        "probe": "probe",
        "results": None,
        "controls": None,
        "replacements": None,
    }
    words = {"estimate": "Constants — ", "rank": "Ranking — ", "select_lr": "Learning rate — ", "probe": "Probe — "}
    for kind, start in words.items():
        assert run_title(runs[kind].params, ROOT).startswith(start + "minilm-l6 · SST-2")
    assert run_title(runs["select_lr"].params, ROOT) == "Learning rate — minilm-l6 · SST-2 · chosen among 2e-05, 0.001"
    assert run_kind({"model": "m", "task": "sst2"}) is None  # an unknown kind keeps its own heading, never "Constants"


def _executed_before_the_title_changed(run, config: dict) -> None:
    """The lr choice's notebook as papermill left it when its pages were titled "Constants"."""
    nb = read_source(ROOT / run.notebook)
    nb.metadata["papermill"] = {"parameters": run.params}
    at = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell("# Parameters\n", metadata={"tags": ["injected-parameters"]}))
    lines = nb.cells[0].source.splitlines()
    nb.cells[0].source = "\n".join(["# Constants — minilm-l6 · SST-2", *lines[1:]])
    _write(ROOT / run_notebook_path(run), nbformat.writes(nb))
    for rel in run.outputs:
        _write(ROOT / rel, json.dumps({"lr": 0.001}))


def test_a_run_titled_before_its_kind_got_its_title_is_refreshed_not_re_executed(grid):
    path, config, folder = grid
    run = next(r for r in expand(config) if r.run_id == SELECT)
    _executed_before_the_title_changed(run, config)
    status = grid_status(config)
    rid = run.run_id
    stamps.seal(
        run, status.keys[rid][0], status.components[rid], status.displays[rid], status.keys[rid][1], 1.0, folder
    )
    notebook = ROOT / run_notebook_path(run)
    assert title_is_stale(notebook, run.params, ROOT)

    status = grid_status(config)
    assert rid not in status.reasons and [r.run_id for r in status.refresh] == [rid]
    assert f"would refresh the text of {rid} (title changed; not re-executed)" in _dry_run(path)
    out = io.StringIO()
    assert run_grid(path, only="no-such-run", out=out) == 0
    assert f"refreshes the text of {rid} (title changed; not re-executed)" in out.getvalue()
    title = heading(json.loads(notebook.read_text()))
    assert title == run_title(run.params, ROOT) and title.startswith(
        "Learning rate — minilm-l6 · SST-2 · chosen among "
    )
    status = grid_status(config)
    assert rid not in status.reasons and status.refresh == []  # proven, and its title is now right
