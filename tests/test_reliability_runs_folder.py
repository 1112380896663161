"""Issue 35, the runs folder: it holds no links, and an executed notebook edited after its run is never
published (on hand-made runs folders; nothing is executed).

* A path the plan writes (``artifacts/lr``, ``artifacts``, ``stamps``) that is a link leading outside
  ``book/runs/<grid>/`` is refused, by a run and by a dry run, before anything is written through it.
* An executed notebook that differs from the one its stamp sealed is stale for that reason ("its executed
  notebook was edited after it ran"), not for "its code, data, parameters or environment", and
  ``papa book build --as-is`` (:func:`papa.pipeline.runner.stale_runs`) refuses it instead of publishing it.
"""

from __future__ import annotations

import io
import shutil
import uuid

import nbformat
import pytest
import yaml

from papa.core.errors import PapaError
from papa.pipeline import runner, stamps
from papa.pipeline.plan import ROOT, expand, load_config, run_notebook_path
from papa.pipeline.runner import grid_status, run_grid, stale_runs

HINT = "Replace the link by a real folder or file: papa writes only inside the runs folder."
SMOKE = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text(encoding="utf-8"))


@pytest.fixture
def grid(tmp_path, monkeypatch):
    """``(config path, config, runs folder)``: the smoke grid's plan under a new name (its folder removed after).
    Nothing can execute: a run that got as far as an executor fails the test."""
    monkeypatch.setenv("PAPA_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PAPA_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "data").mkdir()

    def never(*args, **kwargs):
        raise AssertionError("a run was about to execute")

    monkeypatch.setattr(runner, "make_executor", never)
    name = f"test-reliability-{uuid.uuid4().hex[:8]}"
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(dict(SMOKE, name=name)))
    folder = ROOT / "book" / "runs" / name
    try:
        yield path, load_config(path), folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _files(folder) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


LINKS = [("artifacts/lr", "artifacts/lr/minilm-l6__sst2.json"), ("artifacts", None), ("stamps", None)]


@pytest.mark.parametrize("link, written", LINKS)
def test_a_link_leading_out_of_the_runs_folder_is_refused_before_anything_is_written(grid, tmp_path, link, written):
    path, config, folder = grid
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (folder / link).parent.mkdir(parents=True, exist_ok=True)
    (folder / link).symlink_to(elsewhere, target_is_directory=True)
    before = _files(folder)
    problem = rf"^The runs folder book/runs/{folder.name} holds a link: {link} leads outside it "
    problem += rf"\(to {elsewhere}\), and "
    problem += written.replace(".", r"\.") if written else f"{link}[ /]"
    for dry_run in (True, False):
        with pytest.raises(PapaError, match=problem) as err:
            run_grid(path, dry_run=dry_run, out=io.StringIO())
        assert str(err.value).endswith(HINT)

    assert not list(elsewhere.iterdir())  # nothing written through the link
    assert _files(folder) == before  # nor beside it: no lock, owner record or manifest


def test_a_link_that_stays_inside_the_runs_folder_is_followed(grid):
    path, config, folder = grid
    (folder / "lr-store").mkdir(parents=True)
    (folder / "artifacts").mkdir()
    (folder / "artifacts" / "lr").symlink_to(folder / "lr-store", target_is_directory=True)
    out = io.StringIO()
    assert run_grid(path, dry_run=True, out=out) == 0
    assert (
        "12 to execute" in out.getvalue()
    )  # the smoke grid: an estimate, a ranking, an lr choice, six probes, three chapters


def _sealed_chapters(config: dict, folder, key: str | None = None) -> dict:
    """The two chapter runs, each a hand-made executed notebook sealed by its stamp (its real key, or ``key``)."""
    status = grid_status(config)
    chapters = {run.run_id: run for run in expand(config) if run.kind in ("results", "controls")}
    for rid, run in chapters.items():
        nb = nbformat.v4.new_notebook()
        cell = nbformat.v4.new_code_cell("score")
        cell.outputs = [nbformat.v4.new_output("execute_result", {"text/plain": "0.91"}, execution_count=1)]
        nb.cells = [nbformat.v4.new_markdown_cell(f"# {rid}"), cell]
        target = ROOT / run_notebook_path(run)
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, target)
        stamps.seal(run, key or status.keys[rid][0], status.components[rid], status.displays[rid], None, 1.0, folder)
    return chapters


def _edit(run) -> str:
    """Turn the chapter's score 0.91 into 0.99 (a valid notebook: only its bytes betray it)."""
    target = ROOT / run_notebook_path(run)
    target.write_text(target.read_text(encoding="utf-8").replace("0.91", "0.99"), encoding="utf-8")
    return run_notebook_path(run)


def test_an_edited_chapter_notebook_is_stale_for_that_reason(grid):
    path, config, folder = grid
    chapters = _sealed_chapters(config, folder)
    status = grid_status(config)
    assert not [r for r in status.reasons.get("results", []) if "notebook" in r]
    rel = _edit(chapters["results"])
    why = f"its executed notebook was edited after it ran ({rel} differs from what the run wrote)"
    assert grid_status(config).reasons["results"] == [why]
    assert grid_status(config).reasons["controls"] == status.reasons["controls"]  # untouched: what it was


@pytest.mark.parametrize("key", [None, "0" * 64], ids=["its key holds", "stale for its code too"])
def test_the_book_as_is_refuses_an_edited_chapter_notebook(grid, monkeypatch, key):
    """What ``papa book build --as-is`` calls: the edited results notebook is refused (it was published as-is, as
    a run "whose code, data, parameters or environment changed"), whether or not its run is stale otherwise."""
    from papa.book import build

    path, config, folder = grid
    chapters = _sealed_chapters(config, folder, key)
    stale_runs(config)  # sealed, not edited: no refusal
    rel = _edit(chapters["results"])
    published = []
    monkeypatch.setattr(build, "write_pages", lambda *args: published.append(args))
    monkeypatch.setattr(build.subprocess, "run", lambda *args, **kwargs: published.append(args))
    with pytest.raises(PapaError) as err:
        build.build_book(str(path), as_is=True, replace_pages=True)
    refused = f"1 executed notebook was edited after it ran: {rel}. Restore it (git checkout -- FILE) or re-execute it"
    assert str(err.value).startswith(refused)
    assert "--only results" in str(err.value)
    assert published == []
    with pytest.raises(PapaError, match="^1 executed notebook was edited after it ran"):
        stale_runs(config)
