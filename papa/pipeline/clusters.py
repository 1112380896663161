"""Where the workers come from: ``--scheduler`` parsed, ``local:N`` and SLURM settings (:data:`SLURM_SETTINGS`,
book/scale-out.md), the walltime check and the cluster's start; the environment a kernel runs in (threads, forced
vector kernels: :func:`run_environment`) and the machine in words (:func:`machine_words`). Nothing here imports
Dask at module level."""

from __future__ import annotations

import contextlib
import importlib.util
import ipaddress
import os
import platform
import re
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from papa.core.errors import PapaError

_SCHEDULER_HINT = "Use sequential, local:N (N worker processes here), tcp://HOST:PORT (a running Dask scheduler)"
_SCHEDULER_HINT += " or slurm[:JOBS]."


@dataclass(frozen=True)
class SchedulerSpec:
    """A parsed ``--scheduler``: ``kind`` (``sequential``, ``local``, ``address``, ``slurm``), N or JOBS, address."""

    kind: str
    workers: int = 0
    address: str = ""


def _count(text: str, what: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise PapaError(f"--scheduler {what}:{text}: {text!r} is not a positive whole number", _SCHEDULER_HINT)
    return int(text)


def parse_scheduler(text: str) -> SchedulerSpec:
    """``"local:2"`` -> ``SchedulerSpec("local", 2)`` etc.; anything else is a :class:`PapaError`."""
    text = (text or "sequential").strip()
    if text == "sequential":
        return SchedulerSpec("sequential")
    if text.startswith("local:"):
        workers, cores = _count(text[len("local:") :], "local"), os.cpu_count() or 1
        if workers > cores:
            hint = f"Use local:1 to local:{cores} (one run per worker process), or a cluster (tcp://HOST:PORT, slurm)."
            raise PapaError(f"--scheduler {text}: this machine has {cores} cores, so at most local:{cores}", hint)
        return SchedulerSpec("local", workers)
    if text == "slurm":
        return SchedulerSpec("slurm", 1)
    if text.startswith("slurm:"):
        return SchedulerSpec("slurm", _count(text[len("slurm:") :], "slurm"))
    if text.startswith("tcp://"):
        _host_and_port(text)
        return SchedulerSpec("address", address=text)
    raise PapaError(f"Unknown --scheduler {text!r}", _SCHEDULER_HINT)


_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def _valid_host(host: str) -> bool:
    """A hostname (RFC 1123 labels), an IPv4 address or a bracketed IPv6 address."""
    bracketed = host.startswith("[") and host.endswith("]")
    if bracketed or re.fullmatch(r"[0-9.]+", host):  # all digits and dots: an IPv4 address or nothing (256.1.1.1)
        try:
            return ipaddress.ip_address(host[1:-1] if bracketed else host).version == (6 if bracketed else 4)
        except ValueError:
            return False
    name = host[:-1] if host.endswith(".") else host
    return 0 < len(name) <= 253 and all(_LABEL.fullmatch(label) for label in name.split("."))


def _host_and_port(address: str) -> tuple[str, int]:
    """``tcp://HOST:PORT`` checked: a valid host and a port in 1–65535 (IPv6 hosts bracketed)."""
    match = re.fullmatch(r"tcp://(\[[^\]]*\]|[^:/\[\]]*):(\d+)", address)
    why = None if match else ""
    if match and not 1 <= int(match.group(2)) <= 65535:
        why = f" (port {int(match.group(2))} is outside 1-65535)"
    elif match and not _valid_host(match.group(1)):
        why = f" ({match.group(1) or 'an empty host'} is not a hostname or IP address)"
    if why is not None:
        hint = "Write it as tcp://HOST:PORT, e.g. tcp://10.0.0.5:8786."
        raise PapaError(f"--scheduler {address}: not a scheduler address{why}", hint)
    return match.group(1).strip("[]"), int(match.group(2))


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _no_scheduler(address: str, why: str) -> PapaError:
    hint = "Start one (dask scheduler) or check the address and port."
    return PapaError(f"No Dask scheduler answers at {address} ({why})", hint)


#: Seconds to wait for a scheduler's port to accept a connection (a refused one fails at once).
PROBE_TIMEOUT = 3.0


def preflight(spec: SchedulerSpec) -> None:
    """Check, before anything is written, the packages a Dask scheduler needs and that its port answers."""
    if spec.kind == "sequential":
        return
    if not _installed("distributed"):
        problem = "--scheduler local, tcp:// and slurm need Dask distributed, which is not installed"
        raise PapaError(problem, "pip install 'papa[dask]' (and 'papa[slurm]' for SLURM).")
    if spec.kind == "slurm" and not _installed("dask_jobqueue"):
        raise PapaError("--scheduler slurm needs dask-jobqueue, which is not installed", "pip install 'papa[slurm]'.")
    if spec.kind == "address":
        host, port = _host_and_port(spec.address)
        try:
            socket.create_connection((host, port), timeout=PROBE_TIMEOUT).close()
        except OSError as err:
            raise _no_scheduler(spec.address, err.strerror or str(err) or type(err).__name__) from None


def thread_environment(threads_per_run: int | None) -> dict[str, str]:
    """The variables that set a kernel's thread pools (empty when ``threads_per_run`` is None)."""
    if not threads_per_run:
        return {}
    value = str(int(threads_per_run))
    return {name: value for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}


#: The environment that makes torch (ATen), MKL and oneDNN use one instruction set's kernels, by ``--kernels`` name.
KERNEL_ENV = {
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
}


def run_environment(threads_per_run: int | None, kernels: str | None = None) -> dict[str, str]:
    """:func:`thread_environment` with the vector kernels ``kernels`` (a :data:`KERNEL_ENV` name) forced."""
    return {**KERNEL_ENV.get(kernels or "", {}), **thread_environment(threads_per_run)}


def threads_said(device: str, threads: int | None) -> str:
    """``device`` (as this process describes it) with the thread count the re-execution's kernel used."""
    return re.sub(r"x\d+$", f"x{threads}", device) if threads and device.startswith("cpu:") else device


def machine_words(kernels: str | None = None) -> str:
    """The CPU model, its core count and the vector kernels torch picks on it (``AMD EPYC, 2 cores, AVX512``)."""
    from papa.core.provenance import cpu_kernels

    model = platform.machine()
    with contextlib.suppress(OSError):
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
        model = names[0] if names else model
    picked = f"{kernels.upper()} (forced)" if kernels else cpu_kernels()
    return f"{model}, {os.cpu_count()} cores, {picked}"


def visible_devices() -> list[str]:
    """The CUDA devices the driver may hand out: ``CUDA_VISIBLE_DEVICES`` if set, else all of torch's."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d for d in listed.split(",") if d.strip()]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


def local_worker_options(
    workers: int, gpus_per_run: int, threads_per_run: int | None, devices: list[str]
) -> list[dict]:
    """Nanny options for ``local:N``: one thread each, the thread variables, with G GPUs per run its own G, and
    unless ``PAPA_MEMORY_BUDGET_GB`` is set, each run 1/N of the default feature budget (N runs share the RAM; above
    it features stream to disk, same scores)."""
    if gpus_per_run and len(devices) < workers * gpus_per_run:
        needs = f"needs {workers * gpus_per_run} CUDA devices, {len(devices)} visible"
        problem = f"local:{workers} with --gpus-per-run {gpus_per_run} {needs}"
        raise PapaError(problem, "Use fewer workers (local:N) or fewer GPUs per run.")
    options = []
    for i in range(workers):
        env = thread_environment(threads_per_run)
        if "PAPA_MEMORY_BUDGET_GB" not in os.environ:
            from papa.probing.features import memory_budget_bytes

            env["PAPA_MEMORY_BUDGET_GB"] = f"{memory_budget_bytes() / workers / 1e9:.2f}"
        option: dict = {"nthreads": 1, "env": env}
        if gpus_per_run:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(devices[i * gpus_per_run : (i + 1) * gpus_per_run])
            option["resources"] = {"GPU": gpus_per_run}
        options.append(option)
    return options


#: Environment variables read by ``slurm[:JOBS]`` and their defaults (documented in book/scale-out.md).
SLURM_SETTINGS = {
    "PAPA_SLURM_QUEUE": None,  # --partition
    "PAPA_SLURM_ACCOUNT": None,  # --account
    "PAPA_SLURM_MEMORY": "16GB",  # memory per job
    "PAPA_SLURM_WALLTIME": "04:00:00",  # per worker job; longer than the longest run
    "PAPA_SLURM_PYTHON": None,  # the venv's python on the nodes (default: the driver's)
    "PAPA_SLURM_PROLOGUE": "",  # shell lines before the worker starts, separated by ';'
    "PAPA_SLURM_DIRECTIVES": "",  # extra #SBATCH lines, separated by ';' (e.g. --constraint=a100)
    "PAPA_SLURM_LOCAL_DIRECTORY": None,  # node-local scratch for Dask's spill files
}


def slurm_cluster_kwargs(env: Mapping[str, str], gpus_per_run: int, threads_per_run: int | None) -> dict:
    """``dask_jobqueue.SLURMCluster`` keyword arguments: one single-threaded worker per job, GPUs as resources."""
    get = lambda name: env.get(name) or SLURM_SETTINGS[name]
    split = lambda name: [s.strip() for s in (env.get(name) or "").split(";") if s.strip()]
    cpus = int(threads_per_run or 4)
    directives = split("PAPA_SLURM_DIRECTIVES")
    worker_args = []
    if gpus_per_run:
        directives.append(f"--gres=gpu:{gpus_per_run}")
        worker_args += ["--resources", f"GPU={gpus_per_run}"]
    prologue = [f"export {k}={v}" for k, v in thread_environment(cpus).items()] + split("PAPA_SLURM_PROLOGUE")
    kwargs = dict(cores=1, processes=1, job_cpu=cpus, memory=get("PAPA_SLURM_MEMORY"))
    kwargs |= dict(walltime=get("PAPA_SLURM_WALLTIME"), python=get("PAPA_SLURM_PYTHON") or sys.executable)
    kwargs |= dict(job_extra_directives=directives, job_script_prologue=prologue, worker_extra_args=worker_args)
    for key in ("queue", "account", "local_directory"):  # PAPA_SLURM_QUEUE, PAPA_SLURM_ACCOUNT, ...
        if get(f"PAPA_SLURM_{key.upper()}"):
            kwargs[key] = get(f"PAPA_SLURM_{key.upper()}")
    return kwargs


def walltime_seconds(text: str) -> int:
    """SLURM time in seconds: ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM`` or ``D-HH:MM:SS``."""
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text.strip())
    if not match:
        raise PapaError(f"PAPA_SLURM_WALLTIME={text!r} is not a SLURM time", "Write it as HH:MM:SS or D-HH:MM:SS.")
    days, *fields = match.groups()
    parts = [int(g) for g in fields if g]
    if days is not None or len(parts) == 3:  # after a day count, the fields are hours[:minutes[:seconds]]
        hours, minutes, seconds = (*parts, 0, 0)[:3]
    else:  # MM or MM:SS
        hours, minutes, seconds = (0, *parts, 0)[:3]
    return ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds


def walltime_warning(walltime: str, longest: tuple[str, float] | None) -> str | None:
    """A warning when the longest run (``(run_id, seconds)``) would not finish inside a worker job."""
    if longest is None or longest[1] < walltime_seconds(walltime):
        return None
    run = f"{longest[0]}, about {longest[1] / 3600:.1f} h"
    return (
        f"warning: the worker walltime {walltime} is shorter than the longest run ({run}): "
        "its worker would be killed and the run lost after every attempt. Raise PAPA_SLURM_WALLTIME."
    )


def default_threads(spec: SchedulerSpec, threads_per_run: int | None) -> int | None:
    """``--threads-per-run``, else for ``local:N`` this machine's cores divided by N (else None)."""
    if threads_per_run or spec.kind != "local":
        return threads_per_run
    return max(1, (os.cpu_count() or 1) // spec.workers)


#: How long to wait for a scheduler's answer, and for the first workers (local or at an address).
CONNECT_TIMEOUT = "30s"
WORKERS_TIMEOUT = 300


def close(client, cluster=None) -> None:
    """Close a Dask client and its cluster (when papa started one)."""
    client.close()
    if cluster is not None:
        cluster.close()


def _wait_for_workers(client, count: int, where: str, cluster=None) -> None:
    try:
        client.wait_for_workers(count, timeout=WORKERS_TIMEOUT)
    except TimeoutError:
        close(client, cluster)
        hint = "Start workers (dask worker ADDRESS --nthreads 1) or check their logs."
        raise PapaError(f"No worker joined {where} within {WORKERS_TIMEOUT} s", hint) from None


def start_cluster(spec: SchedulerSpec, gpus_per_run: int = 0, threads_per_run: int | None = None):
    """``(client, cluster or None)`` for a parsed ``--scheduler`` that passed :func:`preflight`."""
    from distributed import Client, Nanny, Scheduler, SpecCluster

    if spec.kind == "address":
        try:
            client = Client(spec.address, timeout=CONNECT_TIMEOUT)
        except OSError as err:
            raise _no_scheduler(spec.address, str(err)[:200]) from None
        except Exception as err:  # noqa: BLE001 - e.g. a web server's reply read as a Dask frame length (MemoryError)
            problem = f"What answers at {spec.address} is not a Dask scheduler ({type(err).__name__}: {str(err)[:200]})"
            raise PapaError(problem, "Check the address and port.") from None
        _wait_for_workers(client, 1, f"the scheduler at {spec.address}")
        return client, None
    if spec.kind == "local":
        threads, devices = default_threads(spec, threads_per_run), visible_devices() if gpus_per_run else []
        options = local_worker_options(spec.workers, gpus_per_run, threads, devices)
        workers = {f"papa-{i}": {"cls": Nanny, "options": dict(o, host="127.0.0.1")} for i, o in enumerate(options)}
        # allowed_failures=0: a dead worker fails the task at once, and the executor resubmits it with
        # a new attempt number (its own key and scratch folder).
        options = {"host": "127.0.0.1", "dashboard": False, "dashboard_address": None, "allowed_failures": 0}
        scheduler = {"cls": Scheduler, "options": options}
        cluster = SpecCluster(workers=workers, scheduler=scheduler, silence_logs=40, name="papa-local")
        client = Client(cluster)
        _wait_for_workers(client, spec.workers, f"local:{spec.workers}", cluster)
        return client, cluster
    from dask_jobqueue import SLURMCluster

    cluster = SLURMCluster(**slurm_cluster_kwargs(os.environ, gpus_per_run, threads_per_run))
    cluster.scale(jobs=spec.workers)
    client = Client(cluster)
    client.wait_for_workers(1)  # SLURM may queue the jobs for a while
    return client, cluster
