"""Fault injection on a tiny real grid: the runner trusts an output only when its stamp
proves it was written under the expected key, and otherwise re-executes it; a deleted or corrupt
manifest is rebuilt, not re-run; a config that reuses another grid's name is refused before anything
is written; a full runs folder fails one run, not the grid; a killed runner's leftovers go away.

The grid is executed once (module fixture); each test damages files, checks what the runner concludes
(mostly with a dry run, which verifies every output) and restores them. One test re-executes a probe.
"""

from __future__ import annotations

import errno
import io
import json
import shutil
from pathlib import Path

import pytest
import yaml
from tiny import TINY_GRID, write_tiny_grid

from papa.core.errors import PapaError
from papa.core.io import _os_error, atomic_write_json
from papa.pipeline import stamps
from papa.pipeline.keys import key_of
from papa.pipeline.plan import ROOT, load_config
from papa.pipeline.runner import grid_status, run_grid

pytestmark = [pytest.mark.data, pytest.mark.slow]

ESTIMATE = "estimate__minilm-l6__sst2"
RANK = "rank__minilm-l6__sst2__deviation"
K0 = "probe__minilm-l6__sst2__none__k0__cached"
KALL = "probe__minilm-l6__sst2__all__k72__cached"


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """``(config path, config, runs folder)`` of a tiny grid executed once."""
    import os

    if not os.environ.get("PAPA_DATA_DIR", "").strip():
        pytest.skip("PAPA_DATA_DIR is not set")
    path, name = write_tiny_grid(tmp_path_factory.mktemp("faults"), "test-faults")
    folder = ROOT / "book" / "runs" / name
    try:
        assert run_grid(path, out=io.StringIO()) == 0
        yield path, load_config(path), folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _stale(config: dict) -> dict[str, list[str]]:
    status = grid_status(config)
    return {r.run_id: status.reasons[r.run_id] for r in status.stale}


def _dry_run(path: Path) -> str:
    out = io.StringIO()
    assert run_grid(path, dry_run=True, out=out) == 0
    return out.getvalue()


class _Saved:
    """Byte copies of files, put back on exit."""

    def __init__(self, *paths: Path):
        self.saved = {p: p.read_bytes() for p in paths}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for path, data in self.saved.items():
            path.write_bytes(data)


def test_the_grid_is_up_to_date_and_every_output_is_stamped(grid):
    path, config, folder = grid
    assert _stale(config) == {}
    assert "0 to execute" in _dry_run(path)
    stamp = stamps.read_stamp(stamps.stamp_path(folder, ESTIMATE))
    assert set(stamp["outputs"]) == {
        f"book/runs/{config['name']}/artifacts/constants/minilm-l6__sst2.safetensors",
        f"book/runs/{config['name']}/{ESTIMATE}.ipynb",
    }
    notebook = json.loads((folder / f"{ESTIMATE}.ipynb").read_text())
    assert notebook["metadata"]["papa"] == {"run_id": ESTIMATE, "key": stamp["key"]}
    assert json.loads((folder / "grid.json").read_text())["config"] == str(path.resolve())


def test_a_run_killed_between_its_artefact_and_its_stamp_is_re_executed_after_the_config_is_reverted(grid):
    """A copy with estimate.max_examples 64 replaced the constants and was killed before its stamp:
    back on the original config, the constants are not proven, so the estimate and all it feeds re-run."""
    path, config, folder = grid
    constants = folder / "artifacts" / "constants" / "minilm-l6__sst2.safetensors"
    with _Saved(constants):
        data = bytearray(constants.read_bytes())
        data[-10] ^= 0xFF  # the 64-example constants (any other bytes)
        constants.write_bytes(bytes(data))
        stale = _stale(config)
        assert stale[ESTIMATE] == [
            f"output not proven (book/runs/{config['name']}/artifacts/constants/minilm-l6__sst2.safetensors "
            "differs from what the run wrote)"
        ]
        assert stale[RANK] == [f"upstream {ESTIMATE} re-runs"] and stale[KALL] == [f"upstream {ESTIMATE} re-runs"]
        assert K0 not in stale  # the k = 0 probe reads no constants
        assert set(stale) == {ESTIMATE, RANK, KALL, "results", "controls"}
        assert f"would run {ESTIMATE}: output not proven" in _dry_run(path)


def test_a_finished_run_under_another_config_is_stale_with_its_reason(grid):
    """The copy's estimate finished (stamp with its key): back on the original, the parameters differ."""
    path, config, folder = grid
    stamp_file = stamps.stamp_path(folder, ESTIMATE)
    with _Saved(stamp_file):
        stamp = stamps.read_stamp(stamp_file)
        components = dict(stamp["components"], params=dict(stamp["components"]["params"], max_examples=64))
        atomic_write_json(stamp_file, dict(stamp, components=components, key=key_of(components)))
        assert _stale(config)[ESTIMATE] == ["parameters changed (max_examples 64 -> 16)"]
    with _Saved(stamp_file):
        stamp_file.unlink()  # an artefact with no stamp at all
        assert _stale(config)[ESTIMATE] == ["no record"]


@pytest.mark.parametrize(
    ("run_id", "damage"),
    [(K0, "emptied"), (K0, "edited"), (RANK, "truncated"), ("results", "truncated notebook"), (KALL, "deleted")],
)
def test_emptied_truncated_edited_or_deleted_outputs_are_re_executed(grid, run_id, damage):
    path, config, folder = grid
    stamp = stamps.read_stamp(stamps.stamp_path(folder, run_id))
    rel = next(o for o in stamp["outputs"] if o.endswith(".ipynb") == (damage == "truncated notebook"))
    target = ROOT / rel
    with _Saved(target):
        if damage == "emptied":
            target.write_text("{}")
        elif damage == "edited":  # a better score, with a checksum that matches the edit
            result = json.loads(target.read_text())
            result["score"] = 0.99
            atomic_write_json(target, result)
        elif damage == "deleted":
            target.unlink()
        else:
            target.write_bytes(target.read_bytes()[: len(target.read_bytes()) // 2])
        reasons = _stale(config)[run_id]
        edited = "its executed notebook was edited after it ran" if rel.endswith(".ipynb") else "output not proven"
        differs = f"{edited} ({rel} differs from what the run wrote)"
        expected = f"output missing ({rel})" if damage == "deleted" else differs
        assert reasons == [expected]


@pytest.mark.parametrize("damage", ["deleted", "corrupt", "wrong shape"])
def test_a_deleted_or_corrupt_manifest_is_rebuilt_without_re_running(grid, damage):
    path, config, folder = grid
    manifest = folder / "manifest.json"
    notebooks = {p.name: p.stat().st_mtime_ns for p in folder.glob("*.ipynb")}
    if damage == "deleted":
        manifest.unlink()
    else:
        manifest.write_text("{trunc" if damage == "corrupt" else '{"runs": []}')
    out = io.StringIO()
    assert run_grid(path, out=out) == 0
    assert "0 to execute" in out.getvalue() and "rebuilt from the runs' stamps" in out.getvalue()
    assert {p.name: p.stat().st_mtime_ns for p in folder.glob("*.ipynb")} == notebooks
    entries = stamps.Manifest(manifest).entries
    assert {r.run_id for r in grid_status(config).runs} <= {r for r, e in entries.items() if e["status"] == "ok"}


def test_a_config_reusing_the_grid_name_is_refused_before_anything_is_written(grid, tmp_path):
    path, config, folder = grid
    other = tmp_path / "mine.yaml"
    other.write_text(yaml.safe_dump(dict(TINY_GRID, name=config["name"], estimate={"max_examples": 64})))
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    for dry_run in (True, False):
        with pytest.raises(PapaError) as caught:
            run_grid(other, dry_run=dry_run, out=io.StringIO())
        assert (
            caught.value.problem
            == f"The runs folder book/runs/{config['name']} serves the config {config['_path']}, not {other.resolve()} "
            f"(both are named {config['name']!r})"
        )
        assert f"rename it (name: {config['name']}-2) or pass --replace" in caught.value.hint
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before
    assert run_grid(other, dry_run=True, out=io.StringIO(), replace=True) == 0  # the explicit take-over is allowed


def test_leftovers_of_a_killed_runner_are_removed_at_the_next_start(grid):
    path, config, folder = grid
    left = [
        folder / ".executing" / f"{K0}.1" / "executed.ipynb",
        folder / ".manifest.json.k1ll3d00.tmp",
        folder / "artifacts" / "results" / ".x.json.k1ll3d00.tmp",
        folder / f"{K0}.source.ipynb",
    ]
    for file in left:
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text("{}")
    assert run_grid(path, out=io.StringIO()) == 0
    assert not any(f.exists() for f in left) and not (folder / ".executing").exists()


def test_a_full_runs_folder_fails_one_run_and_the_grid_goes_on(grid, monkeypatch):
    """The k = 0 result was emptied, so the probe re-runs; writing its stamp hits a full disk: that run
    fails, its dependants are blocked, the manifest is saved and the summary printed (no traceback).
    The next run re-executes it: its new result is not proven by the old stamp."""
    path, config, folder = grid
    result = next(folder.glob(f"artifacts/results/{K0}__s*.json"))
    result.write_text("{}")
    real = stamps.atomic_write_json

    def full_for_k0(target, obj, checksum=True):
        if Path(target).name == f"{K0}.json" and Path(target).parent.name == "stamps":
            raise _os_error(Path(target), OSError(errno.ENOSPC, "No space left on device"))
        return real(target, obj, checksum)

    monkeypatch.setattr(stamps, "atomic_write_json", full_for_k0)
    out = io.StringIO()
    assert run_grid(path, out=out) == 1
    text = out.getvalue()
    assert f"FAILED: No space left to write {folder / 'stamps' / K0}.json" in text
    assert "0 ok, 3 failed" in text and "results: not run: depends on failed " + K0 in text
    entries = stamps.Manifest(folder / "manifest.json").entries
    assert entries[K0]["status"] == "failed" and entries[ESTIMATE]["status"] == "ok"
    assert not (folder / ".executing").exists() or not any((folder / ".executing").iterdir())
    monkeypatch.undo()
    stale = _stale(config)
    assert set(stale) == {K0, "results", "controls"}
    assert f"output not proven ({result.relative_to(ROOT)} differs from what the run wrote)" in stale[K0]
    assert run_grid(path, out=io.StringIO()) == 0  # the disk has room again: the run succeeds, its old error goes
    entry = stamps.Manifest(folder / "manifest.json").entries[K0]
    assert entry["status"] == "ok" and "error" not in entry


def test_only_refuses_a_run_whose_upstream_is_stale(grid):
    """The constants changed on disk: the estimate is stale, so `--only` on the all-heads probe alone would run
    it on unproven constants; the runner refuses, naming the estimate, and executes nothing."""
    path, config, folder = grid
    constants = folder / "artifacts" / "constants" / "minilm-l6__sst2.safetensors"
    with _Saved(constants, folder / "manifest.json"):
        constants.write_bytes(constants.read_bytes()[:-1] + b" ")
        before = {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}
        with pytest.raises(PapaError, match=f"--only '{KALL}' selects runs whose upstream runs are stale: {ESTIMATE}"):
            run_grid(path, only=KALL, out=io.StringIO())
        assert {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file() and p.name != ".lock.owner"} == {
            p: t for p, t in before.items() if p.name != ".lock.owner"
        }
    assert _stale(config) == {}


def test_a_model_that_cannot_be_sized_offline_stops_the_run_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))
    path, name = write_tiny_grid(tmp_path, "test-unsized", models=["someone/unknown-encoder"])
    with pytest.raises(PapaError, match="Cannot count the heads of someone/unknown-encoder offline"):
        run_grid(path, out=io.StringIO())
    assert not (ROOT / "book" / "runs" / name).exists()


def test_prune_removes_exactly_the_files_of_runs_the_narrowed_config_no_longer_has(grid):
    """The config trades the all-heads probe for a half-heads one: --dry-run names the all-heads probe's notebook,
    result, stamp and manifest entry as not in the plan; --prune removes exactly those, and every run the config
    still has stays proven (only the new probe and the chapters that read the probes are stale)."""
    path, config, folder = grid
    kall = [
        folder / f"{KALL}.ipynb",
        stamps.stamp_path(folder, KALL),
        *folder.glob(f"artifacts/results/{KALL}__s*.json"),
    ]
    with _Saved(path, folder / "manifest.json", folder / "grid.json", *kall):
        narrowed = yaml.safe_load(path.read_text())
        narrowed["probe"]["fractions"] = [0, "1/2"]
        path.write_text(yaml.safe_dump(narrowed))
        kept = {
            p: p.read_bytes()
            for p in folder.rglob("*")
            if p.is_file() and p not in kall and p.name not in ("manifest.json", "grid.json", ".lock", ".lock.owner")
        }
        report = _dry_run(path)
        assert f"not in the plan: {len(kall)} files and 1 manifest entries (--prune removes them)" in report
        assert {line.split(": ", 1)[1] for line in report.splitlines() if line.startswith("    not in the plan: ")} == {
            *(str(p.relative_to(folder)) for p in kall),
            f"manifest entry {KALL}",
        }
        out = io.StringIO()
        assert run_grid(path, only="no-such-run", prune=True, out=out) == 0
        assert f"removed, not in the plan: {len(kall)} files and 1 manifest entries" in out.getvalue()
        assert not any(p.exists() for p in kall)
        assert {p: p.read_bytes() for p in kept} == kept and all(p.is_file() for p in kept)
        narrowed_config = load_config(path)
        half = next(r.run_id for r in grid_status(narrowed_config).runs if r.kind == "probe" and r.params["k"] == 36)
        assert set(_stale(narrowed_config)) == {
            half,
            "results",
            "controls",
        }  # the new probe, and the chapters that read the probes
        assert KALL not in stamps.Manifest(folder / "manifest.json").entries
    assert _stale(config) == {}  # the original config, its files put back: up to date again
