"""Issue 35, schedulers and sizes: a ``--scheduler`` that cannot work is refused in seconds, before any runs
folder is written, and a dry run costs a size beyond its split at the split's row count.

* ``local:N`` with more workers than this machine has cores is refused, naming the maximum;
* a ``tcp://HOST:PORT`` address is checked first: a port in 1–65535, a hostname or an IP address;
* a scheduler that refuses the connection fails in seconds (it waited out a 30 s connect timeout);
* ``slurm`` without dask-jobqueue fails at once (it planned the whole grid first);
* none of these, nor a scheduler that fails to start later, leaves a new ``book/runs/<grid>/`` behind;
* ``max_train_examples``, ``pool_examples``, ``max_eval_examples`` past the split are costed as the split.

Nothing here starts a cluster or executes a notebook.
"""

from __future__ import annotations

import ast
import io
import os
import shutil
import sys
import time
import uuid

import pytest
import yaml

from papa.cli import main
from papa.core.errors import PapaError
from papa.pipeline import runner
from papa.pipeline.clusters import SchedulerSpec, parse_scheduler
from papa.pipeline.estimate import _split_size
from papa.pipeline.plan import ROOT
from papa.pipeline.runner import run_grid

SMOKE = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text(encoding="utf-8"))


@pytest.fixture
def grid(tmp_path):
    """``(config path, runs folder)``: the smoke grid under a new name, with no runs folder (removed after)."""
    name = f"test-reliability-{uuid.uuid4().hex[:8]}"
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(dict(SMOKE, name=name)))
    folder = ROOT / "book" / "runs" / name
    try:
        yield path, folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_local_with_more_workers_than_cores_is_refused_naming_the_maximum(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    assert parse_scheduler("local:4") == SchedulerSpec("local", 4)
    with pytest.raises(PapaError) as err:
        parse_scheduler("local:5")
    message = "--scheduler local:5: this machine has 4 cores, so at most local:4. Use local:1 to local:4"
    assert str(err.value).startswith(message)


def test_the_command_line_refuses_more_local_workers_than_cores(grid, capsys):
    path, folder = grid
    cores = os.cpu_count() or 1
    with pytest.raises(SystemExit) as exit_:
        main(["grid", "run", str(path), "--scheduler", f"local:{cores + 1}"])
    assert exit_.value.code == 2
    assert f"this machine has {cores} cores, so at most local:{cores}" in capsys.readouterr().err
    assert not folder.exists()


@pytest.mark.parametrize(
    "address",
    ["tcp://10.0.0.5:8786", "tcp://node-7.cluster:1", "tcp://localhost:65535", "tcp://[::1]:8786", "tcp://a.b.:1"],
)
def test_good_addresses(address):
    assert parse_scheduler(address) == SchedulerSpec("address", address=address)


@pytest.mark.parametrize(
    "address, why",
    [
        ("tcp://256.1.1.1:1", "256.1.1.1 is not a hostname or IP address"),
        ("tcp://1.2.3:8786", "1.2.3 is not a hostname or IP address"),
        ("tcp://-node.cluster:8786", "-node.cluster is not a hostname or IP address"),
        ("tcp://node..cluster:8786", "node..cluster is not a hostname or IP address"),
        ("tcp://no_underscores:8786", "no_underscores is not a hostname or IP address"),
        ("tcp://[1.2.3.4]:8786", "[1.2.3.4] is not a hostname or IP address"),
        ("tcp://:8786", "an empty host is not a hostname or IP address"),
        ("tcp://host:0", "port 0 is outside 1-65535"),
        ("tcp://host:65536", "port 65536 is outside 1-65535"),
    ],
)
def test_bad_addresses_are_refused_before_anything(address, why):
    with pytest.raises(PapaError) as err:
        parse_scheduler(address)
    hint = "Write it as tcp://HOST:PORT, e.g. tcp://10.0.0.5:8786."
    assert str(err.value) == f"--scheduler {address}: not a scheduler address ({why}). {hint}"


def _fails_fast(path, scheduler: str, message: str) -> float:
    started = time.perf_counter()
    with pytest.raises(PapaError, match=message):
        run_grid(path, scheduler=scheduler, out=io.StringIO())
    return time.perf_counter() - started


def test_a_refused_connection_fails_in_seconds_and_writes_no_runs_folder(grid):
    path, folder = grid
    refused = r"^No Dask scheduler answers at tcp://127\.0\.0\.1:1 \(Connection refused\)\. Start one"
    seconds = _fails_fast(path, "tcp://127.0.0.1:1", refused)
    assert seconds < 5, f"{seconds:.1f} s"  # it waited out the 30 s connect timeout
    assert not folder.exists()


def test_an_invalid_address_given_to_run_grid_writes_no_runs_folder(grid):
    path, folder = grid
    assert _fails_fast(path, "tcp://256.1.1.1:1", r"^--scheduler tcp://256\.1\.1\.1:1: not a scheduler address") < 5
    assert not folder.exists()


def test_slurm_without_dask_jobqueue_fails_at_once_and_writes_no_runs_folder(grid, monkeypatch):
    path, folder = grid
    monkeypatch.setitem(sys.modules, "dask_jobqueue", None)  # as if it were not installed
    missing = r"^--scheduler slurm needs dask-jobqueue, which is not installed\. pip install 'papa\[slurm\]'\.$"
    seconds = _fails_fast(path, "slurm:2", missing)
    assert seconds < 5, f"{seconds:.1f} s"
    assert not folder.exists()


def test_a_scheduler_that_fails_to_start_leaves_no_new_runs_folder_but_keeps_an_old_one(grid, tmp_path, monkeypatch):
    """Past the checks that take seconds (no worker joins, a worker with other sources): the runs folder the
    grid run made for its lock, owner and manifest goes again; one that was there before stays."""
    path, folder = grid
    monkeypatch.setenv("PAPA_DATA_DIR", str(tmp_path))  # a data folder: the runs are runnable
    monkeypatch.setenv("PAPA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(runner, "preflight", lambda spec: None)  # the name run_grid calls

    def no_workers(*args, **kwargs):
        raise PapaError("No worker joined local:2 within 300 s", "Start workers.")

    monkeypatch.setattr(runner, "make_executor", no_workers)
    with pytest.raises(PapaError, match="^No worker joined"):
        run_grid(path, scheduler="local:1", out=io.StringIO())
    assert not folder.exists()
    folder.mkdir(parents=True)
    with pytest.raises(PapaError, match="^No worker joined"):
        run_grid(path, scheduler="local:1", out=io.StringIO())
    assert folder.is_dir() and (folder / "grid.json").is_file()


def _dry_run_total(path) -> str:
    out = io.StringIO()
    assert run_grid(path, dry_run=True, out=out) == 0
    return out.getvalue()


def test_sizes_beyond_the_split_are_costed_as_the_split(grid, tmp_path):
    """``max_train_examples: 10000000000000`` was costed at face value ("estimated 2000000h02m")."""
    path, folder = grid
    huge, exact = dict(SMOKE["probe"]), dict(SMOKE["probe"])
    for key in ("max_train_examples", "pool_examples", "max_eval_examples"):
        huge[key] = 10**13
    train, dev = _split_size("sst2", "train"), _split_size("sst2", "validation")
    exact.update(max_train_examples=train, pool_examples=train, max_eval_examples=dev)
    reports = []
    for probe in (huge, exact):
        config = tmp_path / f"{uuid.uuid4().hex[:6]}.yaml"
        config.write_text(yaml.safe_dump(dict(SMOKE, name=folder.name, probe=probe)))
        reports.append(_dry_run_total(config))
    assert "10,000,000,000,000" not in reports[0]
    assert f"{train + dev:,} examples" in reports[0]  # a probe: its pool and the dev split
    assert f"{train:,} examples" in reports[0]  # the lr selection: its pool
    assert reports[0] == reports[1]
    assert not folder.exists()


def test_executors_never_import_distributed():
    """The circle distributed <-> executors is cut (imports inside functions count)."""
    tree = ast.parse((ROOT / "papa" / "pipeline" / "executors.py").read_text(encoding="utf-8"))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert not {m for m in imported if m and m.startswith("papa.pipeline.distributed")}
    assert not any(isinstance(node, ast.ImportFrom) and node.module == "papa.pipeline" for node in ast.walk(tree))
