"""Helpers for the parameterised notebooks: strict parameters and clean executed notebooks.

papermill only *warns* about a parameter the notebook does not declare and injects it anyway.
Each notebook's ``parameters`` cell holds annotated literals (``task: str = "sst2"  # ...``), so
the kernel's ``__annotations__`` lists exactly the declared names; :func:`parameters` (called in
the next cell) turns an undeclared or mistyped injected parameter into an error.
"""

from __future__ import annotations

import json
import re
import types
from pathlib import Path
from typing import Any

from papa.core.errors import PapaError

_KERNEL_NAMES = {"In", "Out", "get_ipython", "exit", "quit", "open"}
_TYPES = {"str": str, "int": int, "float": (int, float), "bool": bool, "list": list, "dict": dict}


def parameters(namespace: dict[str, Any]) -> dict[str, Any]:
    """The declared parameters and their values; raises :class:`PapaError` for unknown or mistyped ones."""
    annotations = namespace.get("__annotations__", {})
    declared = {name: annotations[name] for name in annotations}
    unknown = sorted(
        name
        for name, value in namespace.items()
        if not name.startswith("_") and name not in declared and name not in _KERNEL_NAMES and not isinstance(value, (types.ModuleType, types.FunctionType, type))
    )
    if unknown:
        raise PapaError(
            f"Unknown notebook parameter(s): {', '.join(unknown)}",
            f"This notebook declares: {', '.join(declared)} (papermill --help-notebook lists them).",
        )
    values = {}
    for name, annotation in declared.items():
        value = namespace.get(name)
        type_name = getattr(annotation, "__name__", str(annotation)).split("[")[0].split("|")[0].strip()
        expected = _TYPES.get(type_name)
        optional = "None" in str(annotation)
        if expected and not (isinstance(value, expected) or (optional and value is None)) or (expected is int and isinstance(value, bool)):
            raise PapaError(f"Notebook parameter {name}={value!r} is not of type {annotation}", "Pass a value of the declared type.")
        values[name] = value
    return values


def notebook_parameters(path: str | Path) -> dict[str, dict]:
    """Declared parameters of a notebook: ``{name: {"type", "default", "help"}}`` from its ``parameters`` cell."""
    nb = read_source(path)
    for cell in nb.cells:
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            out = {}
            for line in "".join(cell["source"]).splitlines():
                match = re.match(r"^(\w+)\s*:\s*([^=]+?)\s*=\s*(.+?)\s*(?:#\s*(.*))?$", line)
                if match:
                    name, annotation, default, help_text = match.groups()
                    out[name] = {"type": annotation, "default": default, "help": help_text or ""}
            return out
    raise PapaError(f"Notebook {path} has no cell tagged 'parameters'", "Tag the parameters cell.")


def read_source(path: str | Path):
    """A source notebook of ``notebooks/`` (MyST Markdown paired by jupytext, or ``.ipynb``) as an
    :class:`nbformat.NotebookNode`, cell ids included."""
    import jupytext

    path = Path(path)
    if not path.is_file():
        raise PapaError(f"Notebook {path} does not exist", "Use one of notebooks/*.md.")
    nb = jupytext.read(path)
    for number, cell in enumerate(nb.cells):
        cell.setdefault("id", f"cell-{number}")
    return nb


_VOLATILE_NB = ("start_time", "end_time", "duration", "input_path", "output_path", "environment_variables")


def clean_executed(nb: dict, root: Path) -> dict:
    """Strip volatile metadata (times, durations, machine paths) from an executed notebook, in place."""
    paper = nb.get("metadata", {}).get("papermill", {})
    for key in _VOLATILE_NB:
        paper.pop(key, None)
    roots = sorted({str(root.resolve()), str(Path.home())}, key=len, reverse=True)
    hidden = any("remove-cell" in c.get("metadata", {}).get("tags", []) and "parameters" in c.get("metadata", {}).get("tags", []) for c in nb.get("cells", []))
    for cell in nb.get("cells", []):
        tags = cell.get("metadata", {}).get("tags", [])
        if hidden and "injected-parameters" in tags and "remove-cell" not in tags:
            tags.append("remove-cell")  # a chapter hides its parameters, injected ones too
        meta = cell.get("metadata", {})
        meta.pop("execution", None)
        for key in ("start_time", "end_time", "duration"):
            meta.get("papermill", {}).pop(key, None)
        kept = []
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and output.get("name") == "stderr":
                continue  # progress bars and library warnings: volatile, and they carry machine paths
            text = json.dumps(output)
            for path in roots:
                text = text.replace(path, ".")
            kept.append(json.loads(text))
        if "outputs" in cell:
            cell["outputs"] = kept
    return nb
