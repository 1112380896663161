"""Provenance of a run: papa version and git commit, package versions, device and the CPU's vector kernels, seed,
duration."""

from __future__ import annotations

import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


PACKAGES = ("torch", "transformers", "datasets", "evaluate", "safetensors", "numpy")


def git_commit(root: Path | None = None) -> str:
    """The repository's HEAD commit (with ``-dirty`` if modified), or ``"unknown"``."""
    root = root or Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5
        )
        if commit.returncode != 0:
            return "unknown"
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "papa"], cwd=root, capture_output=True, text=True, timeout=5
        )
        return commit.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    """Installed versions of ``names`` (``"absent"`` for a missing package)."""
    out = {}
    for name in names:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "absent"
    return out


def device_description(device: torch.device | str) -> str:
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    return f"cpu:{platform.machine()}x{torch.get_num_threads()}"


def cpu_kernels() -> str:
    """The vector kernels torch's CPU operators use here (``AVX512``, ``AVX2``, ...; ``ATEN_CPU_CAPABILITY`` forces
    lower ones): float results can differ at rounding between kernels, so a run records which it used."""
    import torch

    return torch.backends.cpu.get_cpu_capability()


def provenance(device: torch.device | str = "cpu", seed: int | None = None, seconds: float | None = None) -> dict:
    from papa.core.version import __version__

    return {
        "papa_version": __version__,
        "git_commit": git_commit(),
        "python": platform.python_version(),
        "packages": package_versions(),
        "device": device_description(device),
        "cpu_kernels": cpu_kernels(),
        "seed": seed,
        "seconds": None if seconds is None else round(seconds, 3),
    }
