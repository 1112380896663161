"""The batch runner on a tiny real grid: up-to-date runs are not re-executed, a touched parameter
re-runs only its dependants, a failing run leaves the others done, a killed runner loses nothing,
and a second runner is refused."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from papa.core.errors import PapaError
from papa.pipeline import runner
from papa.pipeline.plan import ROOT, expand, load_config, runs_dir
from papa.pipeline.runner import run_grid, stale_runs
from papa.pipeline.stamps import GridLock, Manifest

pytestmark = [pytest.mark.data, pytest.mark.slow]

TINY = {
    "models": ["minilm-l6"],
    "tasks": ["sst2"],
    "max_length": 32,
    "estimate": {"max_examples": 16},
    "rank": {"methods": ["deviation"]},
    "probe": {"fractions": [0, 1], "seeds": [1], "epochs": 1, "max_train_examples": 16, "max_eval_examples": 16},
    "floors": {"attention_free": False},
}


def write_config(tmp_path: Path, name: str, **changes) -> Path:
    config = json.loads(json.dumps(TINY))
    for section, values in changes.items():
        config[section].update(values)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(dict(config, name=name)))
    return path


@pytest.fixture
def grid(tmp_path):
    name = f"test-{uuid.uuid4().hex[:8]}"
    yield name
    shutil.rmtree(ROOT / "book" / "runs" / name, ignore_errors=True)


def notebook_mtimes(name: str) -> dict[str, float]:
    return {p.name: p.stat().st_mtime for p in (ROOT / "book" / "runs" / name).glob("*.ipynb")}


def test_runs_once_then_only_dependants_then_failures(tmp_path, grid, capsys, data_dir, monkeypatch):
    config_path = write_config(tmp_path, grid)
    assert run_grid(config_path) == 0
    first = notebook_mtimes(grid)
    assert {"results.ipynb", "controls.ipynb", "estimate__minilm-l6__sst2.ipynb"} <= set(first)
    assert all(json.loads((ROOT / "book" / "runs" / grid / n).read_text())["cells"] for n in first)

    capsys.readouterr()
    assert run_grid(config_path) == 0  # nothing is stale: nothing runs
    assert "0 to execute" in capsys.readouterr().out
    assert notebook_mtimes(grid) == first

    # Without the data (a fresh clone), the recorded data fingerprint is trusted: nothing is stale ...
    monkeypatch.delenv("PAPA_DATA_DIR")
    assert stale_runs(load_config(config_path))[1] == []
    # ... but changed data makes every run that reads it stale.
    changed = tmp_path / "data"
    shutil.copytree(data_dir, changed, ignore=shutil.ignore_patterns("*.jsonl"))
    (changed / "SHA256SUMS").chmod(0o644)
    (changed / "SHA256SUMS").write_text((data_dir / "SHA256SUMS").read_text().replace("sst2/", "sst2/x"))
    monkeypatch.setenv("PAPA_DATA_DIR", str(changed))
    # (the chapters too: the probes they read re-run)
    assert {r.kind for r in stale_runs(load_config(config_path))[1]} == {
        "estimate",
        "rank",
        "probe",
        "results",
        "controls",
    }
    monkeypatch.setenv("PAPA_DATA_DIR", str(data_dir))

    touched = write_config(tmp_path, grid, probe={"epochs": 2})
    _, stale, _, _ = stale_runs(load_config(touched))
    expected = {r.run_id for r in expand(load_config(touched)) if r.kind in ("probe", "results", "controls")}
    assert {r.run_id for r in stale} == expected  # the estimate and the ranking stay up to date

    # Inject a failure: the k = all probe reads a constants file that does not exist (a corrupt one
    # would be re-estimated: tests/test_runner_faults.py). The k = 0 probe still runs.
    real_execute = runner.execute

    def failing_k_all(run, root=ROOT):
        if run.run_id.startswith("probe__minilm-l6__sst2__all"):
            run = dataclasses.replace(run, params=dict(run.params, constants="book/runs/missing.safetensors"))
        return real_execute(run, root)

    monkeypatch.setattr(runner, "execute", failing_k_all)
    assert run_grid(touched) == 1
    out = capsys.readouterr().out
    # what must fail: the k = all probe, and every stale run that depends on it, directly or through another run
    plan = {r.run_id: r for r in expand(load_config(touched))}
    must_fail = {r for r in expected if r.startswith("probe__minilm-l6__sst2__all")}
    while grown := {r for r in expected - must_fail if set(plan[r].deps) & must_fail}:
        must_fail |= grown
    assert len(must_fail) >= 2 and "results" in must_fail  # the chapter reads the failed probe
    assert f": {len(expected) - len(must_fail)} ok, {len(must_fail)} failed" in out, out[-2000:]
    summary = out[out.index(" failed\n") :]  # then one "  <run id>: <reason>" line per failed run
    assert {r for r in expected if f"\n  {r}: " in summary} == must_fail
    manifest = Manifest(runs_dir(load_config(touched)) / "manifest.json").entries
    assert manifest["probe__minilm-l6__sst2__none__k0__cached"]["status"] == "ok"
    failed = [r for r, e in manifest.items() if e["status"] == "failed"]
    assert failed and all(r.startswith("probe__minilm-l6__sst2__all") for r in failed)
    assert list((ROOT / "book" / "runs" / grid).glob("*.failed.ipynb"))


def test_second_runner_is_refused(tmp_path, grid, data_dir):
    config_path = write_config(tmp_path, grid)
    with GridLock(runs_dir(load_config(config_path))):
        with pytest.raises(PapaError, match="Another papa runner"):
            run_grid(config_path)


def test_sigkill_loses_only_the_run_in_progress(tmp_path, grid, data_dir):
    config_path = write_config(tmp_path, grid)
    folder = runs_dir(load_config(config_path))
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    completed: list[set[str]] = []
    for target in (1, 3):  # kill once after the first finished run, once after the third
        process = subprocess.Popen(
            [sys.executable, "-m", "papa.cli", "grid", "run", str(config_path)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.time() + 300
        done: set[str] = set()
        while time.time() < deadline and process.poll() is None:
            try:
                done = {r for r, e in Manifest(folder / "manifest.json").entries.items() if e["status"] == "ok"}
            except Exception as err:  # a reader must never see a half-written manifest
                pytest.fail(f"manifest unreadable mid-run: {err}")
            if len(done) >= target:
                break
            time.sleep(0.2)
        time.sleep(1.0)  # let the next run start, so the kill lands inside it
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        for path in folder.glob("*.ipynb"):  # every notebook on disk is complete JSON
            json.loads(path.read_text())
        completed.append({r for r, e in Manifest(folder / "manifest.json").entries.items() if e["status"] == "ok"})
        assert completed[-1] >= done
    before = notebook_mtimes(grid)
    assert run_grid(config_path) == 0
    after = notebook_mtimes(grid)
    kept = {f"{r}.ipynb" for r in completed[-1]}
    assert all(after[n] == before[n] for n in kept)  # finished runs are not recomputed
    assert set(after) >= {f"{r.run_id}.ipynb" for r in expand(load_config(config_path))}


def test_config_validation_names_the_problem(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(dict(TINY, name="bad", colour="blue")))
    with pytest.raises(PapaError, match="Unknown config key.*colour"):
        load_config(bad)
    bad.write_text(yaml.safe_dump(dict(TINY, name="bad", tasks=["sst3"])))
    with pytest.raises(PapaError, match="Unknown task 'sst3'"):
        load_config(bad)
