"""Run keys follow what a run really executes: comments and docstrings change nothing, a code line
stales exactly the runs whose notebooks reach that module; the dry run's reasons; a markdown-only
edit refreshes the executed notebook without re-executing; stamps, the manifest cache, the runs
folder's owner and the driver's failure handling. No task data and no notebook execution needed."""

from __future__ import annotations

import ast
import errno
import io
import json
import shutil
from pathlib import Path

import nbformat
import pytest

from papa.core.errors import PapaError
from papa.pipeline import sources, stamps
from papa.pipeline.executors import Outcome, refresh_text
from papa.pipeline.keys import key_of, run_components, what_changed
from papa.pipeline.notebook import read_source
from papa.pipeline.plan import NOTEBOOKS, ROOT, Run, run_notebook_path
from papa.pipeline.runner import _drive
from papa.pipeline.sources import PACKAGE, module_fingerprint, notebook_fingerprints, papa_modules
from papa.pipeline.stamps import check_owner, clean_leftovers, config_fingerprint, record_owner

#: One run of every kind, without dependencies (so a key changes only through the run's own code).
RUNS = [Run(f"{kind}-run", kind, {"model": "minilm-l6", "epochs": 15}, grid="keys-test") for kind in NOTEBOOKS]


_REAL_READER = sources.read_module_source


def _edited_reader(edits: dict[str, str]):
    """A source reader that appends ``edits[relative path]`` to that module's text."""
    real = _REAL_READER

    def read(path: Path) -> str:
        return real(path) + edits.get(path.relative_to(PACKAGE).as_posix(), "")

    return read


def _keys(monkeypatch, edits: dict[str, str]) -> dict[str, str]:
    monkeypatch.setattr(sources, "read_module_source", _edited_reader(edits))
    return {rid: key_of(parts) for rid, parts in run_components(RUNS).items()}


def test_comments_docstrings_and_layout_change_no_key(monkeypatch):
    before = _keys(monkeypatch, {})
    every_module = {
        p.relative_to(PACKAGE).as_posix(): '\n# a comment\n"""a stray docstring"""\n' for p in PACKAGE.rglob("*.py")
    }
    assert _keys(monkeypatch, every_module) == before
    text = (PACKAGE / "analysis" / "figures.py").read_text()
    reformatted = text.replace("def fig_convergence(", "def   fig_convergence(", 1)
    assert reformatted != text
    assert ast.dump(sources._strip_docstrings(ast.parse(reformatted))) == ast.dump(
        sources._strip_docstrings(ast.parse(text))
    )


def test_a_code_line_stales_exactly_the_runs_that_execute_it(monkeypatch):
    before = _keys(monkeypatch, {})
    # the chapters alone draw the result figures and compute the statistics: a probe never re-runs for them
    for module in ("analysis/figures.py", "pipeline/executed.py"):
        after = _keys(monkeypatch, {module: "\n_EXTRA = 1\n"})
        assert {rid for rid in before if before[rid] != after[rid]} == {"results-run", "controls-run"}, module
    # the statistics, the data of the book and the plan: the replacements chapter reads them too
    for module in ("analysis/bootstrap.py", "analysis/drop_tables.py", "pipeline/plan.py", "book/load.py"):
        after = _keys(monkeypatch, {module: "\n_EXTRA = 1\n"})
        assert {rid for rid in before if before[rid] != after[rid]} == {
            "results-run",
            "controls-run",
            "replacements-run",
        }, module
    # the replacements chapter's own module restales that chapter alone
    after = _keys(monkeypatch, {"book/chapters/replacements.py": "\n_EXTRA = 1\n"})
    assert {rid for rid in before if before[rid] != after[rid]} == {"replacements-run"}
    # the single-run figures: the estimate and rank notebooks draw them, and the results chapter (not the controls)
    after = _keys(monkeypatch, {"analysis/run_figures.py": "\n_EXTRA = 1\n"})
    assert {rid for rid in before if before[rid] != after[rid]} == {"estimate-run", "rank-run", "results-run"}
    # the site code, the runner and Dask: no run executes them, so a wording change there restales no chapter
    for module in (
        "book/pages.py",
        "book/setup_page.py",
        "book/templates.py",
        "book/build.py",
        "pipeline/runner.py",
        "pipeline/distributed.py",
    ):
        after = _keys(monkeypatch, {module: "\n_EXTRA = 1\n"})
        assert after == before, module
    # the probe trainer: the probes and the lr choice, never the constants (whose key every run downstream carries)
    after = _keys(monkeypatch, {"probing/experiment.py": "\n_EXTRA = 1\n"})
    assert {rid for rid in before if before[rid] != after[rid]} == {"probe-run", "select_lr-run"}
    # a metric script is loaded by path (evaluate.load), not imported: it still keys every run that scores
    after = _keys(monkeypatch, {"probing/metrics/papa_mcc/papa_mcc.py": "\n_EXTRA = 1\n"})
    assert {rid for rid in before if before[rid] != after[rid]} == {r.run_id for r in RUNS} - {"estimate-run"}
    # what every run's kernel executes
    after = _keys(monkeypatch, {"pipeline/notebook.py": "\n_EXTRA = 1\n"})
    assert {rid for rid in before if before[rid] != after[rid]} == {r.run_id for r in RUNS}
    # papa.compute_ranking (a lazy name of papa/__init__) reaches papa.probing.ranking; no other notebook executes it
    after = _keys(monkeypatch, {"probing/ranking.py": "\n_EXTRA = 1\n"})
    assert {rid for rid in before if before[rid] != after[rid]} == {"rank-run"}
    # the CLI is executed by no notebook
    assert _keys(monkeypatch, {"cli.py": "\n_EXTRA = 1\n"}) == before


def test_static_graph_follows_lazy_names_attributes_and_local_imports():
    tree = ast.parse("import papa\nx = papa.compute_ranking\ny = papa.book\n")
    modules = papa_modules(tree)
    assert {"papa", "papa.probing.ranking", "papa.book"} <= set(modules) and "papa.book.load" not in modules
    assert {"papa.book", "papa.book.load", "papa.analysis.results"} <= set(
        papa_modules(ast.parse("from papa.book import load\n"))
    )
    assert "papa.cli" not in modules
    assert "papa.pipeline.runner" not in papa_modules(ast.parse("import papa\n"))
    # a function-local import is followed: papa.pipeline.keys imports papa.probing.data inside a function
    keys_only = papa_modules(ast.parse("from papa.pipeline import keys\n"))
    assert {"papa.pipeline.keys", "papa.probing.data", "papa.pipeline.sources"} <= set(keys_only)
    assert module_fingerprint("papa.no_such_module") == "absent"


def test_notebook_fingerprints_separate_code_from_text(tmp_path):
    nb = read_source(ROOT / NOTEBOOKS["estimate"])
    code, display = notebook_fingerprints(nb)
    markdown = next(c for c in nb.cells if c.cell_type == "markdown")
    markdown.source += "\nOne more sentence."
    code_after, display_after = notebook_fingerprints(nb)
    assert code_after == code  # a markdown edit leaves the code fingerprint alone ...
    assert display_after != display  # ... and changes the text's
    cell = next(c for c in nb.cells if c.cell_type == "code" and "parameters" not in c.metadata.get("tags", []))
    cell.source += "  # a comment in a code cell"
    assert notebook_fingerprints(nb)[0] == code
    cell.source += "\nextra = 1"
    assert notebook_fingerprints(nb)[0] != code


def test_what_changed_names_each_change():
    old = {
        "notebook": "a",
        "params": {"epochs": 15, "lr": 2e-5},
        "papa": {"papa.x": "1", "papa.y": "2"},
        "environment": {"torch": "2.1"},
        "deps": {"estimate__m__t": "k1"},
    }
    new = {
        "notebook": "b",
        "params": {"epochs": 20, "lr": 2e-5},
        "papa": {"papa.x": "9", "papa.z": "3"},
        "environment": {"torch": "2.2"},
        "deps": {"estimate__m__t": "k2"},
    }
    assert what_changed(old, new) == [
        "parameters changed (epochs 15 -> 20)",
        "notebook code changed",
        "code of papa.x changed",
        "now executes papa.z",
        "no longer executes papa.y",
        "environment changed (torch 2.1 -> 2.2)",
        "upstream estimate__m__t changed",
    ]
    assert what_changed(None, new) == ["no record"]


# -- stamps, refresh, manifest ---------------------------------------------------------------------
def _fake_executed(root: Path, run: Run) -> None:
    """What papermill leaves: the source's cells, an injected-parameters cell after ``parameters``,
    outputs on the code cells."""
    source = read_source(root / run.notebook)
    cells = []
    for cell in source.cells:
        if cell.cell_type == "code":
            cell = nbformat.v4.new_code_cell(
                cell.source,
                metadata=dict(cell.metadata),
                outputs=[nbformat.v4.new_output("stream", name="stdout", text=f"ran {len(cells)}\n")],
            )
        cells.append(cell)
        if "parameters" in cell.metadata.get("tags", []):
            cells.append(nbformat.v4.new_code_cell("max_examples = 32\n", metadata={"tags": ["injected-parameters"]}))
    nb = nbformat.v4.new_notebook(cells=cells)
    path = root / run_notebook_path(run)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(nbformat.writes(nb))
    for out in run.outputs:
        (root / out).parent.mkdir(parents=True, exist_ok=True)
        (root / out).write_bytes(b"constants")


@pytest.fixture
def tree(tmp_path):
    """A minimal repository copy: one source notebook and one executed run with a stamp."""
    (tmp_path / "notebooks").mkdir()
    shutil.copy(ROOT / NOTEBOOKS["estimate"], tmp_path / NOTEBOOKS["estimate"])
    run = Run(
        "estimate__m__t",
        "estimate",
        {"max_examples": 32},
        outputs=["book/runs/g/artifacts/constants/m__t.safetensors"],
        grid="g",
    )
    _fake_executed(tmp_path, run)
    folder = tmp_path / "book" / "runs" / "g"
    components = run_components([run], tmp_path)[run.run_id]
    display = notebook_fingerprints(read_source(tmp_path / run.notebook))[1]
    stamp = stamps.seal(run, key_of(components), components, display, None, 12.0, folder, tmp_path)
    return tmp_path, run, folder, components, stamp


def test_markdown_edit_refreshes_the_executed_notebook_without_executing(tree):
    root, run, folder, components, stamp = tree
    key = key_of(components)
    assert stamps.verify(run, key, components, None, stamp, root) == []
    source = root / run.notebook
    source.write_text(
        source.read_text().replace(
            "# Estimate constant attention matrices", "# Estimate the constant matrices\n\nA new paragraph."
        )
    )
    new_components = run_components([run], root)[run.run_id]
    assert key_of(new_components) == key  # the code is unchanged: no re-execution
    display = notebook_fingerprints(read_source(source))[1]
    assert display != stamp["display"]
    before = nbformat.read(root / run_notebook_path(run), as_version=4)
    refreshed = refresh_text(run, stamp, display, folder, root)
    after = nbformat.read(root / run_notebook_path(run), as_version=4)
    assert "A new paragraph." in "".join(c.source for c in after.cells if c.cell_type == "markdown")
    assert [c.outputs for c in after.cells if c.cell_type == "code"] == [
        c.outputs for c in before.cells if c.cell_type == "code"
    ]
    tags = [c.metadata.get("tags", []) for c in after.cells]
    assert "injected-parameters" in tags[tags.index(["parameters"]) + 1]
    assert after.metadata["papa"] == {"run_id": run.run_id, "key": key}
    assert refreshed["display"] == display and stamps.read_stamp(stamps.stamp_path(folder, run.run_id)) == refreshed
    assert stamps.verify(run, key, new_components, None, refreshed, root) == []


@pytest.mark.parametrize("damage", ["emptied", "truncated", "edited", "deleted"])
def test_outputs_that_do_not_match_their_stamp_are_not_trusted(tree, damage):
    root, run, folder, components, stamp = tree
    target = root / run.outputs[0]
    if damage == "deleted":
        target.unlink()
    else:
        target.write_bytes({"emptied": b"{}", "truncated": b"const", "edited": b"constantz"}[damage])
    reason = (
        f"output missing ({run.outputs[0]})"
        if damage == "deleted"
        else f"output not proven ({run.outputs[0]} differs from what the run wrote)"
    )
    assert stamps.verify(run, key_of(components), components, None, stamp, root) == [reason]


def test_a_stamp_without_or_with_a_wrong_checksum_is_no_stamp(tree):
    root, run, folder, components, stamp = tree
    path = stamps.stamp_path(folder, run.run_id)
    raw = json.loads(path.read_text())
    raw.pop("sha256")
    path.write_text(json.dumps(raw))
    assert stamps.read_stamp(path) is None
    raw["sha256"] = "0" * 64
    path.write_text(json.dumps(raw))
    assert stamps.read_stamp(path) is None


@pytest.mark.parametrize("content", [None, "{not json", '{"runs": []}', '{"runs": {"x": 1}}'])
def test_a_missing_or_corrupt_manifest_is_rebuilt_from_the_stamps(tree, content):
    root, run, folder, components, stamp = tree
    path = folder / "manifest.json"
    if content is not None:
        path.write_text(content)
    manifest = stamps.Manifest(path)
    assert manifest.rebuilt
    assert manifest.entries == {
        run.run_id: {
            "key": stamp["key"],
            "data": None,
            "status": "ok",
            "seconds": 12.0,
            "finished": stamp["finished"],
            "components": components,
        }
    }


# -- the runs folder's owner, leftovers ------------------------------------------------------------
def test_a_runs_folder_serves_one_config(tmp_path):
    mine = {"name": "g", "models": ["m"], "_path": "configs/g.yaml"}
    folder = tmp_path / "g"
    assert check_owner(mine, folder) is True
    record_owner(mine, folder)
    assert check_owner(mine, folder) is False
    assert check_owner(dict(mine, models=["n"]), folder) is True  # the same file, edited
    assert check_owner(dict(mine, _path="configs/moved.yaml"), folder) is True  # moved, same content
    other = dict(mine, models=["n"], _path="configs/other.yaml")
    with pytest.raises(PapaError) as caught:
        check_owner(other, folder)
    assert (
        caught.value.problem
        == "The runs folder book/runs/g serves the config configs/g.yaml, not configs/other.yaml (both are named 'g')"
    )
    assert "rename it (name: g-2) or pass --replace" in caught.value.hint
    assert check_owner(other, folder, replace=True) is True
    assert config_fingerprint(mine) != config_fingerprint(other)


def test_leftovers_of_a_killed_runner_are_removed(tmp_path, monkeypatch):
    import os
    import time

    cache = tmp_path / "cache"
    monkeypatch.setenv("PAPA_CACHE_DIR", str(cache))
    runs = tmp_path / "runs"
    keep = [
        runs / "manifest.json",
        runs / "a.ipynb",
        runs / "artifacts" / "constants" / "m.safetensors",
        runs / ".notes.tmp",
    ]  # not papa's temp name
    left = [
        runs / ".manifest.json.x1a2b3c4.tmp",
        runs / "artifacts" / "constants" / ".m.safetensors.q9w8e7r6.tmp",
        runs / "a.source.ipynb",
        runs / ".executing" / "a.1" / "executed.ipynb",
        cache / "features" / ".entry.safetensors.old00000.tmp",
    ]
    fresh = cache / "features" / ".entry.safetensors.new00000.tmp"  # another process may be writing it now
    for path in keep + left + [fresh]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    two_hours_ago = time.time() - 7200
    os.utime(left[-1], (two_hours_ago, two_hours_ago))
    clean_leftovers(runs)
    assert all(p.exists() for p in keep) and not any(p.exists() for p in left) and not (runs / ".executing").exists()
    assert fresh.exists()


# -- the driver: a failed write fails one run, the rest goes on --------------------------------------
class _Instant:
    slots = 1

    def __init__(self):
        self.queue = []

    def submit(self, run):
        self.queue.append(run)

    def wait(self):
        return [Outcome(self.queue.pop(0), "ok", seconds=1.0)]

    def close(self):
        pass


def test_a_failed_write_fails_its_run_and_blocks_only_its_dependants(tmp_path, monkeypatch):
    runs = [
        Run("a", "estimate", {}),
        Run("b", "rank", {}, deps=["a"]),
        Run("c", "probe", {}),
        Run("d", "results", {}, deps=["b", "c"]),
    ]
    keys = {r.run_id: (f"key-{r.run_id}", None) for r in runs}
    manifest = stamps.Manifest(tmp_path / "manifest.json")

    def seal(run, seconds):
        if run.run_id == "a":
            raise PapaError(f"No space left to write {run.run_id}", "Free disk space.")

    saves = []
    real_save = manifest.save

    def save():
        saves.append(1)
        if len(saves) == 1:  # the runs folder is full once, while saving the manifest
            raise PapaError("No space left to write manifest.json", "Free disk space.")
        real_save()

    monkeypatch.setattr(manifest, "save", save)
    failed, out = {}, io.StringIO()
    _drive(_Instant(), runs, keys, manifest, failed, 0.0, out, seal=seal)
    assert failed == {
        "a": "No space left to write a. Free disk space.",
        "b": "not run: depends on failed a",
        "d": "not run: depends on failed b",
    }
    assert {r: e["status"] for r, e in stamps.Manifest(tmp_path / "manifest.json").entries.items()} == {
        "a": "failed",
        "c": "ok",
    }
    assert "warning: manifest not saved (No space left to write manifest.json" in out.getvalue()


def test_the_atomic_writer_raising_enospc_fails_sealing(tree, monkeypatch):
    root, run, folder, components, stamp = tree

    def full(path, obj, checksum=True):
        from papa.core.io import _os_error

        raise _os_error(Path(path), OSError(errno.ENOSPC, "No space left on device"))

    monkeypatch.setattr(stamps, "atomic_write_json", full)
    with pytest.raises(PapaError, match="No space left to write"):
        stamps.seal(run, key_of(components), components, "d", None, 1.0, folder, root)


def test_the_environment_ignores_local_version_labels(monkeypatch):
    """torch 2.13.0+cpu (the CPU wheel) and 2.13.0 (PyPI) give one key: a user's install never stales every run."""
    from papa.pipeline import keys

    monkeypatch.setattr(
        keys, "package_versions", lambda names: {name: "2.13.0+cpu" if name == "torch" else "1.0" for name in names}
    )
    cpu = keys.environment()
    monkeypatch.setattr(
        keys, "package_versions", lambda names: {name: "2.13.0" if name == "torch" else "1.0" for name in names}
    )
    assert cpu == keys.environment() and cpu["torch"] == "2.13.0"


def test_a_run_that_turns_stale_after_planning_takes_its_dependants_along():
    """A failed text refresh makes its run stale after planning: what read its outputs re-executes in the
    same grid run, after it (plan order), and an unrelated run stays proven."""
    from papa.pipeline.runner import GridStatus, mark_dependants

    a, b, c, d = (
        Run("a", "estimate", {}),
        Run("b", "rank", {}, deps=["a"]),
        Run("c", "probe", {}, deps=["b", "d"]),
        Run("d", "select_lr", {}),
    )
    status = GridStatus(
        [a, d, b, c], [], {"a": ["executed notebook does not pair with its source"]}, {}, {}, {}, {}, None, []
    )
    mark_dependants(status)
    assert [r.run_id for r in status.stale] == ["a", "b", "c"]
    assert (
        status.reasons["b"] == ["upstream a re-runs"]
        and status.reasons["c"] == ["upstream b re-runs"]
        and "d" not in status.reasons
    )


def test_disk_report_counts_what_is_already_cached(tmp_path, monkeypatch, capsys):
    """A hand-made cache: 3 GB of shared sets and 1 GB held, 2 GB free, 1.5 GB already cached: the line says all
    four, and the warning gives the upper bound with what may already be there."""
    import collections
    import os
    import shutil
    import sys

    from papa.pipeline import estimate

    (tmp_path / "features").mkdir()
    (tmp_path / "features" / "a.safetensors").write_bytes(b"")
    os.truncate(tmp_path / "features" / "a.safetensors", 1_500_000_000)  # sparse: no disk used
    monkeypatch.setenv("PAPA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(estimate, "cache_bytes", lambda stale: (3_000_000_000, 1_000_000_000, 0))
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**12, 0, 2_000_000_000))
    estimate.report_disk([], sys.stdout)
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"  feature cache ({tmp_path}): ~3.0 GB of shared feature sets kept, up to 1.0 GB more while a run holds its "
        "own head set; 1.5 GB already cached, 2 GB free there",
        "  warning: the feature cache may fill the disk: these runs need up to 4 GB (less what the 1.5 GB already "
        "cached holds of it); point PAPA_CACHE_DIR elsewhere",
    ]
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**12, 0, 5_000_000_000))
    estimate.report_disk([], sys.stdout)
    assert len(capsys.readouterr().out.splitlines()) == 1  # it fits: no warning


def test_resized_runs_compare_recorded_with_planned_parameters():
    """The dry run costs a run from its size, not its last duration, exactly when its stamp recorded other
    parameters: a code change alone, or a run never stamped, keeps the duration (or has none)."""
    from papa.pipeline.runner import GridStatus, resized_runs

    runs = [Run(name, "probe", {"n": 1}) for name in ("sized", "code", "new", "corrupt")]
    planned = {run.run_id: {"params": {"n": 2 if run.run_id == "sized" else 1}, "notebook": "x"} for run in runs}
    stamps = {
        "sized": {"components": {"params": {"n": 1}, "notebook": "x"}},
        "code": {"components": {"params": {"n": 1}, "notebook": "old"}},
        "new": None,
        "corrupt": {},
    }
    status = GridStatus(runs, runs, {}, {}, planned, {}, stamps, None, [])
    assert resized_runs(status, runs) == {"sized"}
    assert resized_runs(status, runs[1:]) == set()


def test_a_sealed_run_records_when_it_finished_and_the_manifest_keeps_it(tree):
    import datetime

    _, _, _, _, stamp = tree
    finished = datetime.datetime.fromisoformat(stamp["finished"])
    assert abs((datetime.datetime.now(datetime.timezone.utc) - finished).total_seconds()) < 60
    assert stamps.entry_of(stamp)["finished"] == stamp["finished"] and stamps.entry_of(stamp)["seconds"] == 12.0
    assert "finished" not in stamps.entry_of({k: v for k, v in stamp.items() if k != "finished"})


#: The site's code: the generated pages, the sidebar, the build, the assets, model reports' pages, and the runner.
SITE_MODULES = [f"papa.book.{name}" for name in "assets build pages report_site run_index setup_page templates".split()]
SITE_MODULES += ["papa.book.sphinx_titles", "papa.cli", "papa.pipeline.report", "papa.pipeline.runner"]


@pytest.mark.parametrize("notebook", sorted(p.name for p in (ROOT / "notebooks").glob("*.md")))
def test_a_wording_change_in_the_site_code_restales_no_run(notebook):
    """No notebook (run or chapter) executes the site's modules, so editing them changes no run's key."""
    import jupytext

    assert all(sources.module_file(name) is not None for name in SITE_MODULES)  # each still exists
    executed = papa_modules(sources.notebook_code_tree(jupytext.read(ROOT / "notebooks" / notebook)))
    assert "papa.book.load" in executed or "papa.pipeline.notebook" in executed  # the walk found its imports
    assert sorted(set(SITE_MODULES) & set(executed)) == []
