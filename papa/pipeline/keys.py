"""Run keys: a run is stale exactly when something that can change its outputs has changed.

A run's key hashes its components (:func:`run_components`): its notebook's code fingerprint, its parameters, the
fingerprints of the papa modules the notebook executes (:func:`papa.pipeline.sources.papa_modules`), the versions of
:data:`ENV_PACKAGES` and the keys of the runs it depends on. The task data is fingerprinted apart
(:func:`data_fingerprints`). The components are stored with each run, so :func:`what_changed` can say why it is stale.
"""

from __future__ import annotations

import json
from pathlib import Path

from papa.core.names import short_hash
from papa.core.provenance import package_versions
from papa.pipeline.output_diff import short
from papa.pipeline.plan import ROOT, Run
from papa.pipeline.sources import notebook_code_tree, notebook_fingerprints, papa_modules

#: Libraries whose version can change a run's numbers.
ENV_PACKAGES = ("torch", "transformers", "tokenizers", "datasets", "evaluate")


def environment() -> dict[str, str]:
    """Installed versions of :data:`ENV_PACKAGES` (``"absent"`` if missing) without a local label (``+cpu``)."""
    return {name: value.split("+", 1)[0] for name, value in package_versions(ENV_PACKAGES).items()}


def data_fingerprints(runs: list[Run]) -> dict[str, str | None]:
    """Per run, a fingerprint of its task's local data (``""``: no task; None, unchecked: no local data folder)."""
    from papa.core.tasks import get_task
    from papa.probing.data import resolve_data_dir

    root = resolve_data_dir()
    if root is None:
        return {run.run_id: None for run in runs}
    sums, found = root / "SHA256SUMS", {None: ""}
    for task in {run.params.get("task") for run in runs} - {None}:
        folder = get_task(task).local_folder
        if sums.is_file():
            text = "\n".join(sorted(line for line in sums.read_text().splitlines() if f"{folder}/" in line))
        else:
            text = "\n".join(f"{f.name}:{f.stat().st_size}" for f in sorted((root / folder).glob("*")))
        found[task] = short_hash(text, 64)
    return {run.run_id: found[run.params.get("task")] for run in runs}


# -- keys ----------------------------------------------------------------------------------------
def plan_facts(runs: list[Run], root: Path = ROOT) -> dict[str, dict]:
    """``{notebook: {"code", "display", "papa"}}`` of every source notebook the runs execute, each read once."""
    from papa.pipeline.notebook import read_source

    facts = {}
    for notebook in sorted({r.notebook for r in runs}):
        nb = read_source(root / notebook)
        code, display = notebook_fingerprints(nb)
        facts[notebook] = {"code": code, "display": display, "papa": papa_modules(notebook_code_tree(nb))}
    return facts


def run_components(runs: list[Run], root: Path = ROOT, facts: dict[str, dict] | None = None) -> dict[str, dict]:
    """Per run (in dependency order), the components its key covers (module docstring); ``facts``: the runs'
    :func:`plan_facts`, when the caller has read them already."""
    facts = facts or plan_facts(runs, root)
    env = environment()
    components: dict[str, dict] = {}
    keys: dict[str, str] = {}
    for run in runs:
        fact = facts[run.notebook]
        parts = {
            "notebook": fact["code"],
            "params": json.loads(json.dumps(run.params, default=str)),
            "papa": fact["papa"],
            "environment": env,
            "deps": {d: keys[d] for d in run.deps},
        }
        components[run.run_id] = parts
        keys[run.run_id] = key_of(parts)
    return components


def key_of(components: dict) -> str:
    """24 hex digits over a run's components."""
    return short_hash(json.dumps(components, sort_keys=True, default=str), 24)


def _changed_values(old: dict, new: dict) -> str:
    names = [n for n in sorted(set(old) | set(new), key=str) if old.get(n) != new.get(n)]
    return ", ".join(f"{n} {short(old.get(n, '(unset)'), 40)} -> {short(new.get(n, '(unset)'), 40)}" for n in names)


def upstream(names: list[str], what: str) -> str:
    """``upstream a, b and 5 more <what>`` (three or fewer runs are all named)."""
    shown = ", ".join(names[:2]) + f" and {len(names) - 2} more" if len(names) > 3 else ", ".join(names)
    return f"upstream {shown} {what}"


def what_changed(old: dict | None, new: dict) -> list[str]:
    """Why a run whose recorded components are ``old`` is stale under ``new`` (readable reasons)."""
    if not old:
        return ["no record"]
    reasons = []
    if old.get("params") != new["params"]:
        reasons.append(f"parameters changed ({_changed_values(old.get('params') or {}, new['params'])})")
    if old.get("notebook") != new["notebook"]:
        reasons.append("notebook code changed")
    old_papa, new_papa = old.get("papa") or {}, new["papa"]
    changed = [m for m in new_papa if m in old_papa and old_papa[m] != new_papa[m]]
    if changed:
        reasons.append(f"code of {', '.join(changed)} changed")
    added, dropped = [m for m in new_papa if m not in old_papa], [m for m in old_papa if m not in new_papa]
    if added:
        reasons.append(f"now executes {', '.join(added)}")
    if dropped:
        reasons.append(f"no longer executes {', '.join(dropped)}")
    if old.get("environment") != new["environment"]:
        reasons.append(f"environment changed ({_changed_values(old.get('environment') or {}, new['environment'])})")
    old_deps = old.get("deps") or {}
    deps = [dep for dep, key in new["deps"].items() if old_deps.get(dep) != key]
    if deps:
        reasons.append(upstream(deps, "changed"))
    if set(old_deps) - set(new["deps"]):
        reasons.append(f"no longer depends on {', '.join(sorted(set(old_deps) - set(new['deps'])))}")
    return reasons or ["key changed"]
