"""A verification record is bound to the outputs it compared: the page counts it only while they are the
run's current outputs, and says how many it set aside and why; a killed verification's scratch folder goes on the
next verify or run; nbval's colour codes never reach a record."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from papa.core.io import atomic_write_json, sha256_file
from papa.pipeline import verify
from papa.pipeline.plan import ROOT, expand, load_config
from papa.pipeline.stamps import SCRATCH_PREFIX, remove_dead_scratch, stamp_path, verification_path
from papa.pipeline.verify import VERIFIABLE, bound_records, plain

CONFIG = load_config(ROOT / "configs" / "default.yaml")


def _runs_folder(root: Path):
    """The default grid's plan with a stamp and distinct committed outputs per run under ``root``."""
    folder = root / "book" / "runs" / CONFIG["name"]
    plan = [run for run in expand(CONFIG) if run.kind in VERIFIABLE]
    for number, run in enumerate(plan):
        for rel in run.outputs:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(f'{{"run": "{run.run_id}", "file": "{rel}"}}')
        outputs = {rel: sha256_file(root / rel) for rel in run.outputs}
        stamp = {"run_id": run.run_id, "key": f"k{number}", "outputs": outputs, "components": {"params": run.params}}
        atomic_write_json(stamp_path(folder, run.run_id), stamp)
    return folder, plan


def _record(run, key: str, root: Path) -> dict:
    """What ``papa grid verify`` writes for a run that matched (the fields the page reads)."""
    return {
        "run_id": run.run_id,
        "key": key,
        "kind": run.kind,
        "verified_at": "2026-12-04T17:35:25+00:00",
        "machine": "AMD EPYC, 2 cores",
        "device": "cpu:x86_64x2",
        "python": "3.11.7",
        "packages": {"torch": "2.13.0+cpu"},
        "papa": {"version": "0.1.0", "commit": "7a8912112a76"},
        "tolerance": 0.0,
        "matched": True,
        "largest_difference": 0.0,
        "outputs": {rel: sha256_file(root / rel) for rel in run.outputs},
        "fields": [],
        "nbval": {"passed": True, "checked_cells": 2, "failed_cells": []},
        "causes": [],
    }


def _section(folder: Path, plan, root: Path) -> str:
    from papa.book.pages import _verified_section

    return "\n".join(_verified_section(CONFIG, folder, [r.run_id for r in plan], root))


def test_fifty_copied_records_leave_the_count_unchanged_and_an_edit_removes_a_run(tmp_path):
    folder, plan = _runs_folder(tmp_path)
    keys = {run.run_id: f"k{number}" for number, run in enumerate(plan)}
    verified = plan[:2]
    for run in verified:
        atomic_write_json(verification_path(folder, run.run_id), _record(run, keys[run.run_id], tmp_path))
    assert sorted(bound_records(folder, plan, tmp_path)[0]) == sorted(r.run_id for r in verified)
    before = _section(folder, plan, tmp_path)
    assert f"re-executed 2 of the book's {len(plan)} estimate" in before and "set aside" not in before

    genuine = _record(verified[0], keys[verified[0].run_id], tmp_path)
    targets = plan[2:52]
    assert len(targets) == 50
    for run in targets:  # the genuine record under each unverified run's id and current key, resealed
        atomic_write_json(verification_path(folder, run.run_id), dict(genuine, run_id=run.run_id, key=keys[run.run_id]))
    counted, aside = bound_records(folder, plan, tmp_path)
    assert sorted(counted) == sorted(r.run_id for r in verified)
    assert aside == {"outdated": 0, "unbound": 0, "changed": 50}
    after = _section(folder, plan, tmp_path)
    assert f"re-executed 2 of the book's {len(plan)} estimate" in after
    assert (
        "50 records are set aside: the outputs they compared are not the run's current outputs (changed since, or "
        "the record was copied from another run)." in after
    )

    edited = verified[1].outputs[0]
    (tmp_path / edited).write_text('{"score": 0.99}')  # a verified run's output changes after its verification
    counted, aside = bound_records(folder, plan, tmp_path)
    assert sorted(counted) == [verified[0].run_id] and aside["changed"] == 51
    assert f"re-executed 1 of the book's {len(plan)} estimate" in _section(folder, plan, tmp_path)


def test_records_without_output_checksums_are_set_aside_and_the_page_says_why(tmp_path):
    """The committed records made before records stored checksums: none counts until a fresh verify re-makes it."""
    folder, plan = _runs_folder(tmp_path)
    for number, run in enumerate(plan[:3]):
        record = _record(run, f"k{number}", tmp_path)
        del record["outputs"]
        atomic_write_json(verification_path(folder, run.run_id), record)
    atomic_write_json(verification_path(folder, plan[3].run_id), _record(plan[3], "an older key", tmp_path))
    counted, aside = bound_records(folder, plan, tmp_path)
    assert counted == {} and aside == {"outdated": 1, "unbound": 3, "changed": 0}
    text = _section(folder, plan, tmp_path)
    assert "No committed run has been re-executed and compared yet" in text
    assert (
        "3 records are set aside: they store no checksums of the outputs they compared (they were made before "
        "records stored them), so nothing ties them to the outputs this book shows; a fresh `papa grid verify` "
        "re-makes them." in text
    )
    assert "1 older records are not counted: their runs have executed again since." in text


def test_the_scratch_of_a_killed_verification_is_removed_and_a_live_ones_kept(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = tmp_path / f"{SCRATCH_PREFIX}{gone.pid}-abc123"
    live = tmp_path / f"{SCRATCH_PREFIX}{os.getpid()}-def456"
    other = tmp_path / "papa-something-else"
    for path in (dead, live, other):
        (path / "cache").mkdir(parents=True)
    assert remove_dead_scratch(tmp_path) == [dead]
    assert not dead.exists() and live.is_dir() and other.is_dir()


def test_every_grid_run_and_verify_removes_dead_scratch():
    import inspect

    from papa.pipeline import stamps

    assert "remove_dead_scratch()" in inspect.getsource(stamps.clean_leftovers)  # run_grid cleans under its lock
    assert "remove_dead_scratch()" in inspect.getsource(verify.verify_grid)
    assert verify.scratch_folder is stamps.scratch_folder


def test_nbval_colour_codes_never_reach_the_failure_text(tmp_path, monkeypatch):
    assert plain("\x1b[91mCell 3: Cell outputs differ\x1b[0m #x1B[94mleft#x1B[0m") == "Cell 3: Cell outputs differ left"
    report = (
        '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite><testcase name="Cell 3">'
        '<failure message="x">#x1B[91mCell 3: Cell outputs differ#x1B[0m\nTraceback:\n#x1B[94mscore 0.5#x1B[0m'
        "</failure></testcase></testsuite></testsuites>"
    )

    def fake_pytest(command, cwd, **kwargs):
        (Path(cwd) / "nbval.xml").write_text(report)
        return subprocess.CompletedProcess(command, 1, "\x1b[91m1 failed\x1b[0m", "")

    monkeypatch.setattr(verify.subprocess, "run", fake_pytest)
    passed, failed, tail = verify._nbval(tmp_path / "run.ipynb", tmp_path)
    assert not passed and failed == ["Cell 3: Cell outputs differ (score 0.5)"] and tail == "1 failed"
