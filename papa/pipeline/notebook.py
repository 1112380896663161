"""What a notebook's kernel needs: strict parameters (and reading a notebook's source).

papermill only *warns* about an undeclared parameter and injects it anyway; :func:`parameters`, called after the
``parameters`` cell of annotated literals (``task: str = "sst2"  # ...``), turns an undeclared or mistyped one into an
error. Every run notebook imports this module, so a run's key follows it (:mod:`papa.pipeline.sources`): keep it
small. What happens *after* a run is :mod:`papa.pipeline.executed`.
"""

from __future__ import annotations

import re
import types
from pathlib import Path
from typing import Any

from papa.core.errors import PapaError

_KERNEL_NAMES = {"In", "Out", "get_ipython", "exit", "quit", "open"}
_TYPES = {"str": str, "int": int, "float": (int, float), "bool": bool, "list": list, "dict": dict}


def parameters(namespace: dict[str, Any], kind: str | None = None) -> dict[str, Any]:
    """The declared parameters (the kernel's ``__annotations__``) and their values; a :class:`PapaError` for unknown
    or mistyped ones. With ``kind`` (``"estimate"``, ``"rank"``, ``"select_lr"``, ``"probe"``, ...) they are checked
    against its params model in :mod:`papa.core.schema`, so a notebook accepts exactly what a grid may pass.
    ``"Optional[int]"`` (quoted: never evaluated) declares a parameter that may be None."""
    annotations = namespace.get("__annotations__", {})
    declared = {name: annotations[name] for name in annotations}
    unknown = sorted(
        name
        for name, value in namespace.items()
        if not name.startswith("_")
        and name not in declared
        and name not in _KERNEL_NAMES
        and not isinstance(value, (types.ModuleType, types.FunctionType, type))
    )
    if unknown:
        raise PapaError(
            f"Unknown notebook parameter(s): {', '.join(unknown)}",
            f"This notebook declares: {', '.join(declared)} (papermill --help-notebook lists them).",
        )
    values = {name: namespace.get(name) for name in declared}
    if kind is not None:
        from papa.core.config_files import validate
        from papa.core.schema import RUN_PARAMS

        validate(RUN_PARAMS[kind], values, "Notebook parameters", style="notebook")
        return values
    for name, annotation in declared.items():
        value = values[name]
        text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
        optional = "None" in str(annotation) or text.startswith("Optional[")
        type_name = text.removeprefix("Optional[").split("[")[0].split("|")[0].strip(" ]")
        expected = _TYPES.get(type_name)
        if (
            expected
            and not (isinstance(value, expected) or (optional and value is None))
            or (expected is int and isinstance(value, bool))
        ):
            raise PapaError(
                f"Notebook parameter {name}={value!r} is not of type {annotation}", "Pass a value of the declared type."
            )
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
    """A source notebook (MyST Markdown paired by jupytext, or ``.ipynb``) as a ``NotebookNode``, with cell ids."""
    import jupytext

    path = Path(path)
    if not path.is_file():
        raise PapaError(f"Notebook {path} does not exist", "Use one of notebooks/*.md.")
    nb = jupytext.read(path)
    for number, cell in enumerate(nb.cells):
        cell.setdefault("id", f"cell-{number}")
    return nb
