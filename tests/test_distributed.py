"""The grid on Dask: ``--scheduler`` parsing, cluster settings, the preflight, and a LocalCluster of
two worker processes running a fake ``execute`` (no notebooks): dependency order, a failure blocking
its dependants, a worker killed mid-run re-run elsewhere and recorded once, GPU slots as Dask
resources, nothing left in scratch. One data test compares the smoke grid on ``local:2`` with the
sequential runner."""

from __future__ import annotations

import io
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
from papa.pipeline import clusters, distributed
from papa.pipeline.clusters import SchedulerSpec, parse_scheduler
from papa.pipeline.distributed import make_executor
from papa.pipeline.executors import SequentialExecutor
from papa.pipeline.plan import ROOT, Run, load_config, runs_dir
from papa.pipeline.runner import _drive, run_grid
from papa.pipeline.stamps import GridLock, Manifest


@pytest.mark.parametrize(
    "text, spec",
    [
        ("sequential", SchedulerSpec("sequential")),
        ("local:1", SchedulerSpec("local", 1)),
        ("slurm", SchedulerSpec("slurm", 1)),
        ("slurm:12", SchedulerSpec("slurm", 12)),
        ("tcp://10.0.0.5:8786", SchedulerSpec("address", address="tcp://10.0.0.5:8786")),
        ("tcp://node-7.cluster:8786", SchedulerSpec("address", address="tcp://node-7.cluster:8786")),
    ],
)
def test_scheduler_strings(text, spec):
    assert parse_scheduler(text) == spec


@pytest.mark.parametrize(
    "text, message",
    [
        ("local:0", "--scheduler local:0: '0' is not a positive whole number. Use sequential, local:N"),
        ("local:two", "--scheduler local:two: 'two' is not a positive whole number"),
        ("slurm:-1", "--scheduler slurm:-1: '-1' is not a positive whole number"),
        (
            "local",
            "Unknown --scheduler 'local'. Use sequential, local:N (N worker processes here), tcp://HOST:PORT (a "
            "running Dask scheduler) or slurm[:JOBS].",
        ),
        (
            "tcp://host",
            "--scheduler tcp://host: not a scheduler address. Write it as tcp://HOST:PORT, e.g. tcp://10.0.0.5:8786.",
        ),
        ("tcp://host:99999", "--scheduler tcp://host:99999: not a scheduler address"),
    ],
)
def test_bad_scheduler_strings(text, message):
    with pytest.raises(PapaError) as err:
        parse_scheduler(text)
    assert str(err.value).startswith(message)


def test_option_errors():
    with pytest.raises(PapaError, match=r"^--gpus-per-run needs a Dask scheduler\. Use --scheduler local:N"):
        make_executor("sequential", lambda run: 0.0, gpus_per_run=1)
    with pytest.raises(PapaError, match=r"^--gpus-per-run 0 / --threads-per-run 0: out of range"):
        make_executor("local:1", lambda run: 0.0, threads_per_run=0)


def test_no_scheduler_at_the_address(monkeypatch):
    monkeypatch.setattr(clusters, "CONNECT_TIMEOUT", "1s")
    with pytest.raises(
        PapaError,
        match=(
            r"^No Dask scheduler answers at tcp://127\.0\.0\.1:9 \(.*\)\. "
            r"Start one \(dask scheduler\) or check the address and port\.$"
        ),
    ):
        make_executor("tcp://127.0.0.1:9", lambda run: 0.0)


def test_sequential_never_imports_dask():
    code = (
        "import sys, papa.cli, papa.pipeline.runner as r\n"
        "from papa.pipeline.distributed import make_executor\n"
        "from papa.pipeline.executors import SequentialExecutor\n"
        "assert isinstance(make_executor('sequential', r.execute), SequentialExecutor)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed', 'dask_jobqueue')))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_keys_are_hashed_and_leftovers_are_this_runs_only(tmp_path):
    run = Run("probe__a__sst2__all__k6__cached", "probe", {}, grid="g")
    # sha256("probe__a__sst2__all__k6__cached") begins e5d4e84d6e32c6df (computed once, by hand, with sha256sum)
    assert distributed.dask_key(run.run_id, 2) == "papa-run-e5d4e84d6e32c6df-2"
    assert distributed.dask_key(run.run_id, 3) == "papa-run-e5d4e84d6e32c6df-3"  # one key per attempt, never the run id
    assert distributed.dask_key("probe__a__sst2__all__k6__cachee", 2) != distributed.dask_key(run.run_id, 2)
    scratch = tmp_path / "book" / "runs" / "g" / ".executing"
    assert distributed.attempt_leftovers(run, tmp_path) == []
    for name in (
        f"{run.run_id}.1",
        f"{run.run_id}.12",
        f"{run.run_id}.ipynb",
        f"{run.run_id}.source.ipynb",
        f"{run.run_id}__x.1",
        f"{run.run_id}.1x",
        "other.1",
    ):
        (scratch / name).mkdir(parents=True)
    leftovers = sorted(p.name for p in distributed.attempt_leftovers(run, tmp_path))
    assert leftovers == sorted(
        [f"{run.run_id}.1", f"{run.run_id}.12", f"{run.run_id}.ipynb", f"{run.run_id}.source.ipynb"]
    )


def test_local_workers_get_their_own_devices_and_threads(monkeypatch):
    monkeypatch.setenv("PAPA_MEMORY_BUDGET_GB", "5")  # set: each run keeps it
    assert clusters.local_worker_options(2, 1, 3, ["4", "7"]) == [
        {
            "nthreads": 1,
            "env": {
                "OMP_NUM_THREADS": "3",
                "MKL_NUM_THREADS": "3",
                "OPENBLAS_NUM_THREADS": "3",
                "CUDA_VISIBLE_DEVICES": "4",
            },
            "resources": {"GPU": 1},
        },
        {
            "nthreads": 1,
            "env": {
                "OMP_NUM_THREADS": "3",
                "MKL_NUM_THREADS": "3",
                "OPENBLAS_NUM_THREADS": "3",
                "CUDA_VISIBLE_DEVICES": "7",
            },
            "resources": {"GPU": 1},
        },
    ]
    assert clusters.local_worker_options(1, 0, None, []) == [{"nthreads": 1, "env": {}}]
    monkeypatch.delenv("PAPA_MEMORY_BUDGET_GB")  # unset: N runs share the default budget, 60% of the memory
    monkeypatch.setattr("papa.probing.features.physical_memory_bytes", lambda: 10_000_000_000)
    shared = {
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "PAPA_MEMORY_BUDGET_GB": "3.00",
    }
    assert clusters.local_worker_options(2, 0, 1, []) == [{"nthreads": 1, "env": shared}] * 2
    with pytest.raises(
        PapaError, match=r"^local:2 with --gpus-per-run 2 needs 4 CUDA devices, 3 visible\. Use fewer workers"
    ):
        clusters.local_worker_options(2, 2, 1, ["0", "1", "2"])


def test_slurm_cluster_settings_and_walltime():
    env = {
        "PAPA_SLURM_QUEUE": "gpu",
        "PAPA_SLURM_ACCOUNT": "nlp",
        "PAPA_SLURM_WALLTIME": "1-00:00:00",
        "PAPA_SLURM_PROLOGUE": "module load cuda; source .venv/bin/activate",
        "PAPA_SLURM_PYTHON": "python3",
    }
    assert clusters.slurm_cluster_kwargs(env, 1, 8) == dict(
        cores=1,
        processes=1,
        job_cpu=8,
        memory="16GB",
        walltime="1-00:00:00",
        python="python3",
        job_extra_directives=["--gres=gpu:1"],
        job_script_prologue=[
            "export OMP_NUM_THREADS=8",
            "export MKL_NUM_THREADS=8",
            "export OPENBLAS_NUM_THREADS=8",
            "module load cuda",
            "source .venv/bin/activate",
        ],
        worker_extra_args=["--resources", "GPU=1"],
        queue="gpu",
        account="nlp",
    )
    defaults = clusters.slurm_cluster_kwargs({}, 0, None)
    assert (
        defaults["job_cpu"],
        defaults["walltime"],
        defaults["worker_extra_args"],
        defaults["job_extra_directives"],
    ) == (4, "04:00:00", [], [])
    assert "queue" not in defaults and "account" not in defaults
    assert [clusters.walltime_seconds(t) for t in ("1-02:03:04", "02:03:04", "03:04", "30")] == [93784, 7384, 184, 1800]
    # SLURM: after a day count the fields are hours[:minutes[:seconds]], never minutes
    assert [clusters.walltime_seconds(t) for t in ("1-04", "1-04:30", "0-02")] == [100800, 102600, 7200]
    assert clusters.walltime_warning("04:00:00", ("probe__x", 3 * 3600)) is None
    assert clusters.walltime_warning("04:00:00", ("probe__x", 5 * 3600)).startswith(
        "warning: the worker walltime 04:00:00 is shorter than the longest run (probe__x, about 5.0 h)"
    )
    with pytest.raises(PapaError, match=r"^PAPA_SLURM_WALLTIME='4h' is not a SLURM time"):
        clusters.walltime_seconds("4h")


def test_preflight_names_the_worker_that_differs():
    mine = distributed.fingerprint(str(ROOT))
    assert (
        mine["root_visible"]
        and len(mine["sources"]) == 64
        and set(mine["versions"]) == set(distributed.FINGERPRINT_PACKAGES)
    )
    assert distributed.fingerprint_problem("tcp://a:1", mine, dict(mine)) is None
    other = dict(mine, versions=dict(mine["versions"], torch="0.0.1"))
    assert str(distributed.fingerprint_problem("tcp://a:1", mine, other)).startswith(
        "Worker tcp://a:1 has different package versions: torch 0.0.1 "
        f"(driver {mine['versions']['torch']}). Start the workers"
    )
    assert str(distributed.fingerprint_problem("tcp://a:1", mine, dict(mine, sources="0" * 64))) == (
        "Worker tcp://a:1 runs different papa sources than the driver. Point the workers at the driver's checkout "
        "(same commit, same edits) and restart them."
    )
    assert str(distributed.fingerprint_problem("tcp://a:1", mine, dict(mine, root_visible=False))).startswith(
        f"Worker tcp://a:1 cannot see the repository at {ROOT}. Workers need a shared filesystem"
    )


def test_a_kernel_that_never_started_is_tried_once_more(tmp_path, monkeypatch):
    for name in clusters.thread_environment(1):
        monkeypatch.setenv(name, "1")  # restored afterwards: run_attempt sets them in this process
    calls = []

    def flaky(kernel_failures, notebook_fails=False):
        def execute(run, root):
            calls.append(run.run_id)
            if len(calls) <= kernel_failures:
                raise PapaError(
                    f"Run {run.run_id} failed (RuntimeError: Kernel died before replying to kernel_info)", "Read x"
                )
            if notebook_fails:
                raise PapaError(f"Run {run.run_id} failed (ValueError: bad)", "Read x")
            return 1.5

        return execute

    run = Run("r", "probe", {})
    assert distributed.run_attempt(flaky(1), run, str(tmp_path), 2) == ("ok", 1.5, "")
    assert calls == ["r", "r"] and os.environ["OMP_NUM_THREADS"] == "2"
    calls.clear()
    assert distributed.run_attempt(flaky(2), run, str(tmp_path), None)[:2] == ("failed", 0.0)
    assert calls == ["r", "r"]  # tried once more, not twice
    calls.clear()
    assert distributed.run_attempt(flaky(0, notebook_fails=True), run, str(tmp_path), None) == (
        "failed",
        0.0,
        "Run r failed (ValueError: bad). Read x",
    )
    assert calls == ["r"]  # a notebook failure is a result, never retried


# --- a LocalCluster of two worker processes, a fake execute -----------------------------------


def fake_execute(run: Run, root: Path) -> float:
    """Stands in for :func:`papa.pipeline.runner.execute` on a worker: checks its dependencies are in
    place, works in its own scratch folder ``.executing/<run_id>.<n>/`` (removed when it returns, left
    behind when its worker is killed), then writes its notebook (JSON with what it saw)."""
    from distributed import get_worker

    folder = root / "book" / "runs" / run.grid
    missing = [d for d in run.deps if not (folder / f"{d}.ipynb").is_file()]
    if missing:
        raise PapaError(f"Run {run.run_id} started before {missing[0]} finished")
    scratch = folder / ".executing" / f"{run.run_id}.{os.getpid()}"
    scratch.mkdir(parents=True)
    try:
        (scratch / "executed.ipynb").write_text("half")
        marker = root / "killed-once"
        if run.params.get("behaviour") == "kill" and not marker.exists():
            marker.write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)  # no finally runs: the scratch folder stays behind
        time.sleep(0.3)
        if run.params.get("behaviour") == "fail":
            raise PapaError(f"Run {run.run_id} failed (ValueError: broken on purpose)", "Read it")
        seen = {
            "pid": os.getpid(),
            "gpu_free": get_worker().state.available_resources.get("GPU"),
            "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "omp": os.environ.get("OMP_NUM_THREADS"),
        }
        (folder / f"{run.run_id}.ipynb").write_text(json.dumps(seen))
    finally:
        shutil.rmtree(scratch)
    with open(root / "completions.log", "a") as log:
        log.write(run.run_id + "\n")
    return 0.3


@pytest.mark.slow
def test_local_cluster_order_failures_killed_worker_and_gpu_slots(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")  # bookkeeping only: no device is touched
    runs = [
        Run("a", "probe", {}, grid="g"),
        Run("b", "probe", {"behaviour": "kill"}, deps=["a"], grid="g"),
        Run("c", "probe", {"behaviour": "fail"}, deps=["a"], grid="g"),
        Run("d", "probe", {}, deps=["c"], grid="g"),
        Run("e", "probe", {}, grid="g"),
        Run("results", "results", {}, deps=["a", "b", "c", "d", "e"], grid="g"),
        Run("controls", "controls", {}, deps=["a"], grid="g"),
        Run("f", "probe", {}, deps=["b"], grid="g"),
    ]
    keys = {r.run_id: (f"key-{r.run_id}", None) for r in runs}
    manifest = Manifest(tmp_path / "manifest.json")
    failed: dict[str, str] = {}
    out = io.StringIO()
    executor = make_executor("local:2", fake_execute, gpus_per_run=1, threads_per_run=1, root=tmp_path, out=out)
    try:
        assert executor.slots == 2
        _drive(executor, runs, keys, manifest, failed, time.perf_counter(), out)
    finally:
        executor.close()
    entries = Manifest(tmp_path / "manifest.json").entries
    assert {r: e["status"] for r, e in entries.items()} == {
        "a": "ok",
        "b": "ok",
        "c": "failed",
        "e": "ok",
        "f": "ok",
        "controls": "ok",
    }
    assert failed == {
        "c": "Run c failed (ValueError: broken on purpose). Read it",
        "d": "not run: depends on failed c",
        "results": "not run: depends on failed c",
    }
    assert out.getvalue().count("lost b (its worker died: KilledWorker") == 1
    assert sorted((tmp_path / "completions.log").read_text().split()) == [
        "a",
        "b",
        "controls",
        "e",
        "f",
    ]  # b recorded once
    folder = tmp_path / "book" / "runs" / "g"
    seen = {r: json.loads((folder / f"{r}.ipynb").read_text()) for r in "abef"}
    chapter = json.loads((folder / "controls.ipynb").read_text())
    assert seen["b"]["pid"] != int((tmp_path / "killed-once").read_text())  # re-run on a live worker
    assert {s["cuda"] for s in seen.values()} <= {"0", "1"} and {s["omp"] for s in seen.values()} == {"1"}
    assert {s["gpu_free"] for s in seen.values()} == {0}  # each probe held its worker's one GPU slot
    assert chapter["gpu_free"] == 1  # a chapter needs no GPU
    assert not [p for p in (folder / ".executing").rglob("*")]  # nothing left in scratch


# --- the real grid ----------------------------------------------------------------------------


@pytest.fixture
def grids():
    names = [f"test-dask-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    yield names
    for name in names:
        shutil.rmtree(ROOT / "book" / "runs" / name, ignore_errors=True)


def _smoke(tmp_path: Path, name: str) -> Path:
    config = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text())
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(dict(config, name=name)))
    return path


@pytest.mark.data
def test_a_second_driver_is_refused_before_any_cluster_starts(tmp_path, grids, data_dir):
    config_path = _smoke(tmp_path, grids[0])
    with GridLock(runs_dir(load_config(config_path))):
        with pytest.raises(PapaError, match="^Another papa runner .* is working on"):
            run_grid(config_path, scheduler="local:2")


def _scores(name: str) -> dict:
    results = ROOT / "book" / "runs" / name / "artifacts" / "results"
    return {
        p.name: (lambda d: (d["score"], d["metrics"]))(json.loads(p.read_text()))
        for p in sorted(results.glob("*.json"))
    }


def _kill_the_worker_running(run_id: str, grid: str, killed: list) -> None:
    """From a thread of the driver: once ``run_id``'s first attempt has started its notebook, SIGKILL
    the worker process that executes it (found through the driver's Dask client)."""
    from distributed import default_client

    key = distributed.dask_key(run_id, 1)
    deadline = time.time() + 900
    while time.time() < deadline and not distributed.attempt_leftovers(Run(run_id, "probe", {}, grid=grid), ROOT):
        time.sleep(0.2)
    time.sleep(3.0)  # mid-run: the kernel is loading the model or training
    client = default_client()
    worker = next(w for w, keys in client.processing().items() if key in keys)
    pid = client.run(os.getpid, workers=[worker])[worker]
    os.kill(pid, signal.SIGKILL)
    killed.append(pid)


@pytest.mark.data
@pytest.mark.slow
def test_smoke_grid_on_two_local_workers_equals_sequential(tmp_path, grids, data_dir):
    """``local:2`` gives the runs and scores of ``sequential``, even when the worker running a probe
    is killed mid-run: the probe runs again on a live worker and is recorded once."""
    import threading

    sequential, dask = (_smoke(tmp_path, name) for name in grids)
    assert run_grid(sequential) == 0
    out, killed = io.StringIO(), []
    probe = "probe__minilm-l6__sst2__all__k72__cached"
    killer = threading.Thread(target=_kill_the_worker_running, args=(probe, grids[1], killed), daemon=True)
    killer.start()
    assert run_grid(dask, scheduler="local:2", threads_per_run=1, out=out) == 0, out.getvalue()
    killer.join(timeout=1)
    assert killed and out.getvalue().count(f"lost {probe} (its worker died: KilledWorker") == 1, out.getvalue()
    first, second = (Manifest(runs_dir(load_config(c)) / "manifest.json").entries for c in (sequential, dask))
    assert sorted(first) == sorted(second) and all(e["status"] == "ok" for e in second.values())
    assert _scores(grids[0]) and _scores(grids[0]) == _scores(grids[1])
    assert not list((ROOT / "book" / "runs" / grids[1] / ".executing").rglob("*"))


def test_sequential_executor_is_unchanged():
    executor = SequentialExecutor(lambda run: 2.0)
    executor.submit(Run("a", "probe", {}))
    assert [(o.run.run_id, o.status, o.seconds) for o in executor.wait()] == [("a", "ok", 2.0)]


def test_threads_per_run_reach_a_sequential_runs_kernel_and_are_restored(monkeypatch):
    """--threads-per-run with the default scheduler: the kernel a run starts inherits OMP_NUM_THREADS etc.
    while it executes (it used to be dropped), and the driver's own environment comes back after."""
    import os

    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    seen = {}

    def execute(run):
        seen.update(
            {name: os.environ.get(name) for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
        )
        if run.run_id == "bad":
            raise PapaError("it failed", "nothing to do")
        return 1.0

    executor = make_executor("sequential", execute, threads_per_run=3)
    for rid in ("ok", "bad"):
        executor.submit(Run(rid, "probe", {}))
        executor.wait()
        assert seen == {"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "3", "OPENBLAS_NUM_THREADS": "3"}
        assert os.environ["OMP_NUM_THREADS"] == "7" and "MKL_NUM_THREADS" not in os.environ
