"""Run keys: what a run depends on (its notebook, parameters, papa sources, environment, data and upstream runs)."""

from __future__ import annotations

import hashlib
import json

from papa.pipeline.plan import ROOT, Run

_CORE = ["architectures", "constants", "data", "errors", "io", "layout", "models", "model_packages", "patching"]
#: papa modules whose source each kind of run depends on (the staleness rule).
DEPENDS_ON = {
    "estimate": _CORE + ["experiment"],
    "rank": _CORE + ["experiment", "features", "heads", "metrics", "probe", "ranking"],
    "probe": _CORE + ["experiment", "features", "heads", "metrics", "probe"],
    "select_lr": _CORE + ["experiment", "features", "heads", "metrics", "probe", "protocol"],
    "results": ["book", "results", "figures", "io", "heads"],
    "controls": ["book", "results", "figures", "io", "heads"],
}
ENV_PACKAGES = ("torch", "transformers", "datasets", "evaluate")


# -- staleness -----------------------------------------------------------------------------------
def _sha(text: str | bytes) -> str:
    return hashlib.sha256(text if isinstance(text, bytes) else text.encode()).hexdigest()


def _data_fingerprint(task: str | None) -> str:
    if task is None:
        return ""
    from papa.probing.data import get_task, resolve_data_dir

    root = resolve_data_dir()
    if root is None:
        return "hub"
    folder = get_task(task).local_folder
    sums = root / "SHA256SUMS"
    if sums.is_file():
        lines = [line for line in sums.read_text().splitlines() if f"{folder}/" in line]
        return _sha("\n".join(sorted(lines)))
    files = sorted((root / folder).glob("*"))
    return _sha("\n".join(f"{f.name}:{f.stat().st_size}" for f in files))


def data_fingerprints(runs: list[Run]) -> dict[str, str | None]:
    """Per run, a fingerprint of its task's local data (``SHA256SUMS`` lines), or None when no local
    data folder is set: then the data cannot be checked, and the manifest's record is trusted (so a
    fresh clone renders its committed runs without the data)."""
    from papa.probing.data import resolve_data_dir

    if resolve_data_dir() is None:
        return {run.run_id: None for run in runs}
    return {run.run_id: _data_fingerprint(run.params.get("task")) for run in runs}


def run_keys(runs: list[Run]) -> dict[str, str]:
    """A key per run over its notebook, parameters, papa sources, environment and upstream keys
    (the task data is checked separately, :func:`data_fingerprints`)."""
    source = {
        m: _sha((ROOT / "papa" / f"{m}.py").read_bytes() if (ROOT / "papa" / f"{m}.py").is_file() else b"".join(p.read_bytes() for p in sorted((ROOT / "papa" / m).rglob("*.py"))))
        for kind in DEPENDS_ON.values()
        for m in kind
    }
    from papa.core.provenance import package_versions

    environment = package_versions(ENV_PACKAGES)
    keys: dict[str, str] = {}
    for run in runs:
        parts = {
            "notebook": _sha((ROOT / run.notebook).read_bytes()),
            "params": run.params,
            "papa": {m: source[m] for m in DEPENDS_ON[run.kind]},
            "environment": environment,
            "deps": {d: keys[d] for d in run.deps},
        }
        keys[run.run_id] = _sha(json.dumps(parts, sort_keys=True, default=str))[:24]
    return keys
