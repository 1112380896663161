"""Field by field: how a re-made output of a run differs from the committed one (``papa grid verify``).

Every field is compared (numbers within ``tolerance``, absolute, 0 asking for equality; everything else exactly)
except those describing the execution itself (:data:`VOLATILE`, and the provenance but for its results).
:func:`diff_values` compares two JSON values, :func:`diff_files` two output files; each returns the
:class:`Difference` objects and the largest numeric difference seen, also among those within tolerance.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Keys whose values describe an execution rather than its result: never compared.
VOLATILE = frozenset({"timings", "seconds", "feature_cache_hits", "sha256", "device"})
#: The provenance's keys that are results (the seed, the weights' fingerprint); the rest describes the execution.
PROVENANCE_RESULTS = frozenset({"seed", "weights_fingerprint"})


@dataclass(frozen=True)
class Difference:
    """One field that differs: its path, the committed and the re-made value, and ``size`` (|Δ|, numbers only)."""

    field: str
    committed: Any
    remade: Any
    size: float | None = None

    def as_record(self) -> dict:
        return dict(field=self.field, committed=short(self.committed), remade=short(self.remade), size=self.size)


def short(value: Any, width: int = 80) -> str:
    """``value`` as text (JSON unless a string), cut to ``width`` characters."""
    text = json.dumps(value, default=str) if not isinstance(value, str) else value
    return text if len(text) <= width else text[: width - 3] + "..."


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _whole(value: list) -> bool:
    """A list compared item by item as whole values: no dict and no float inside (a ranking's ``[layer, head]``
    pairs, labels); a list with floats or dicts is compared element by element instead."""
    return all(not isinstance(item, (dict, float)) and (not isinstance(item, list) or _whole(item)) for item in value)


def diff_values(committed: Any, remade: Any, tolerance: float = 0.0, field: str = "") -> tuple[list[Difference], float]:
    """The differences between two JSON values (``committed`` first), and the largest numeric |Δ| of them all."""
    name = field or "(value)"
    if _is_number(committed) and _is_number(remade):
        if math.isnan(committed) or math.isnan(remade):
            same = math.isnan(committed) and math.isnan(remade)
            return ([] if same else [Difference(name, committed, remade, math.inf)]), (0.0 if same else math.inf)
        size = abs(float(committed) - float(remade))
        return ([Difference(name, committed, remade, size)] if size > tolerance else []), size
    if isinstance(committed, dict) and isinstance(remade, dict):
        found, largest = [], 0.0
        for key in sorted(set(committed) | set(remade), key=str):
            if key in VOLATILE:
                continue
            path = f"{field}.{key}" if field else str(key)
            if key not in committed or key not in remade:
                found.append(Difference(path, committed.get(key, "(absent)"), remade.get(key, "(absent)")))
                continue
            left, right = committed[key], remade[key]
            if key == "provenance" and isinstance(left, dict) and isinstance(right, dict):
                left, right = ({k: v for k, v in side.items() if k in PROVENANCE_RESULTS} for side in (left, right))
            more, size = diff_values(left, right, tolerance, path)
            found += more
            largest = max(largest, size)
        return found, largest
    if isinstance(committed, list) and isinstance(remade, list) and not (_whole(committed) and _whole(remade)):
        if len(committed) != len(remade):
            return [Difference(f"{name} (length)", len(committed), len(remade))], 0.0
        found, largest = [], 0.0
        for index, (left, right) in enumerate(zip(committed, remade)):
            more, size = diff_values(left, right, tolerance, f"{field}[{index}]")
            found += more
            largest = max(largest, size)
        return found, largest
    if isinstance(committed, list) and isinstance(remade, list) and len(committed) == len(remade):
        return [Difference(f"{field}[{i}]", a, b) for i, (a, b) in enumerate(zip(committed, remade)) if a != b], 0.0
    return ([] if committed == remade else [Difference(name, committed, remade)]), 0.0


def _constants(path: Path) -> tuple[dict, dict]:
    """A constants file's tensors (as float64 numpy arrays) and its ``meta``."""
    from safetensors import safe_open

    with safe_open(str(path), "np") as handle:
        tensors = {name: handle.get_tensor(name).astype("float64") for name in handle.keys()}
        meta = json.loads((handle.metadata() or {}).get("meta", "{}"))
    return tensors, meta


def _diff_constants(committed: Path, remade: Path, tolerance: float) -> tuple[list[Difference], float]:
    """Constants files: every tensor by its max |Δ| (a shape change is a difference), then their ``meta``."""
    import numpy as np

    (old, old_meta), (new, new_meta) = _constants(committed), _constants(remade)
    found, largest = diff_values(old_meta, new_meta, tolerance, "meta")
    for name in sorted(set(old) | set(new)):
        if name not in old or name not in new:
            found.append(Difference(name, *("(absent)" if name not in side else "present" for side in (old, new))))
        elif old[name].shape != new[name].shape:
            found.append(Difference(f"{name} (shape)", list(old[name].shape), list(new[name].shape)))
        else:
            size = float(np.max(np.abs(old[name] - new[name]))) if old[name].size else 0.0
            largest = max(largest, size)
            if size > tolerance or np.isnan(size):
                where = np.unravel_index(int(np.argmax(np.abs(old[name] - new[name]))), old[name].shape)
                at = f"{name}{list(map(int, where))} (max |Δ|)"
                found.append(Difference(at, float(old[name][where]), float(new[name][where]), size))
    return found, largest


def diff_files(committed: Path, remade: Path, tolerance: float = 0.0) -> tuple[list[Difference], float]:
    """Two output files of one run (constants or JSON); a missing or unreadable re-made file differs."""
    if not remade.is_file():
        return [Difference("(file)", "present", "missing: the re-execution did not write it")], 0.0
    if committed.suffix == ".safetensors":
        return _diff_constants(committed, remade, tolerance)
    try:
        old, new = (json.loads(path.read_text(encoding="utf-8")) for path in (committed, remade))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        return [Difference("(file)", "JSON", f"unreadable ({type(err).__name__})")], 0.0
    return diff_values(old, new, tolerance)
