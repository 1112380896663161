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


def parameters(namespace: dict[str, Any], kind: str | None = None) -> dict[str, Any]:
    """The declared parameters and their values; raises :class:`PapaError` for unknown or mistyped ones.

    With ``kind`` (``"estimate"``, ``"rank"``, ``"select_lr"``, ``"probe"``, ``"results"``, ``"controls"``)
    the values are checked against that kind's params model of :mod:`papa.core.schema` (types, ranges,
    names), so a notebook accepts exactly what a grid may pass it. The cell's annotations are for
    papermill and for people: ``"Optional[int]"`` (quoted, so the kernel never evaluates it) declares a
    parameter that may be None."""
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
        if expected and not (isinstance(value, expected) or (optional and value is None)) or (expected is int and isinstance(value, bool)):
            raise PapaError(f"Notebook parameter {name}={value!r} is not of type {annotation}", "Pass a value of the declared type.")
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

#: Display names of the tasks, as the papers and data cards write them.
TASK_NAMES = {"cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "mnli": "MNLI", "ner": "CoNLL-2003 NER", "pos": "CoNLL-2003 POS"}

#: The studies of the grid configs in words (a study's run ids end in ``__<name>``); a study not
#: listed here is described by its settings.
STUDY_WORDS = {
    "faithful": "faithful execution (the encoder live, in train mode, every batch)",
    "cachedsmall": "cached, small (the faithful check's counterpart)",
    "lr1e3": "learning rate 1e-3",
    "tuned": "a better-trained probe (learning rate 2e-4, 40 epochs, epoch chosen on held-out training data)",
    "moredata": "1,200 training examples",
    "moredata8k": "8,000 training examples",
    "fulldata": "the whole training split",
    "fulldatafloor": "the whole training split, attention-free floor",
    "paper": "the paper's literal setting (learning rate 2e-5, 15 epochs, final epoch)",
    "literal": "the paper's literal setting (learning rate 2e-5, 15 epochs, final epoch)",
    "literalmpnet": "the paper's literal setting on mpnet-base, one seed",
    "deviation": "the deviation ordering",
    "random": "seeded random orderings",
}


def task_name(task: str) -> str:
    """``"sst2"`` → ``"SST-2"`` (an unknown task keeps its name)."""
    return TASK_NAMES.get(task, task)


def study_words(name: str) -> str:
    """A study's name as words (``"moredata8k"`` → ``"8,000 training examples"``)."""
    return STUDY_WORDS.get(name, name)


def _count(n: int) -> str:
    return f"{n:,}"


def _seeds(seeds: list) -> str:
    return ("seed " if len(seeds) == 1 else "seeds ") + ", ".join(str(s) for s in seeds)


def _total_heads(params: dict, root: Path) -> int | None:
    """The model's number of heads: from the run's first result file, else the model's config."""
    try:
        result = json.loads((root / str(params["out"]).format(seed=params["seeds"][0])).read_text(encoding="utf-8"))
        return int(result["config"]["total_heads"])
    except (OSError, KeyError, IndexError, ValueError, TypeError):
        pass
    try:
        from papa.pipeline.plan import _heads_for

        return _heads_for(str(params["model"]))
    except Exception:  # an unreachable model: the title says k alone
        return None


def run_title(params: dict, root: Path | None = None) -> str | None:
    """The heading that names a run from its parameters, or None for a chapter.

    ``Constants — minilm-l6 · SST-2 · 1,000 training examples``, ``Ranking — minilm-l6 · SST-2 (gates)``,
    ``Probe — minilm-l6 · SST-2 · gates · 36 of 72 heads constant · seeds 42, 43, 44``; a probe of a study
    (its ``out`` file named ``..._<study>__s{seed}.json``) ends with the study in words.
    """
    if "grid_config" in params or "model" not in params or "task" not in params:
        return None
    head = f"{params['model']} · {task_name(str(params['task']))}"
    if "method" in params:
        return f"Ranking — {head} ({params['method']})"
    if "k" not in params:
        examples = params.get("max_examples")
        return f"Constants — {head}" + (f" · {_count(int(examples))} training examples" if isinstance(examples, int) else "")
    k = int(params["k"])
    parts = [f"Probe — {head}"]
    if params.get("probe_input", "all") != "all":
        parts.append("attention-free floor (embedding layer only)")
    else:
        total = _total_heads(params, root or Path.cwd()) if k else None
        ranking = Path(str(params.get("ranking") or "")).stem.split("__")[-1] if params.get("ranking") else ""
        if k == 0:
            parts.append("no head constant")
        elif total is not None and k >= total:
            parts.append(f"all {total} heads constant")
        else:
            parts += [ranking] if ranking else []
            parts.append(f"{k} of {total} heads constant" if total else f"{k} heads constant")
    if params.get("mode", "cached") != "cached":
        parts.append(f"{params['mode']} mode")
    if params.get("seeds"):
        parts.append(_seeds(list(params["seeds"])))
    title = " · ".join(parts)
    run_id = Path(str(params.get("out", ""))).name.rsplit("__s", 1)[0]
    fields = run_id.split("__")
    if len(fields) > 6 and fields[0] == "probe":
        study = [f for f in fields[6:] if f != params.get("probe_input")]
        if study:
            title += f" · {study_words('__'.join(study))}"
    return title


def _retitle(nb: dict, title: str) -> None:
    """Make ``title`` the first markdown cell's heading (replacing its ``# ...`` line), in place."""
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "markdown":
            continue
        source = "".join(cell.get("source", ""))
        lines = source.splitlines()
        if lines and lines[0].startswith("# "):
            lines[0] = f"# {title}"
        else:
            lines = [f"# {title}", "", *lines]
        cell["source"] = "\n".join(lines)
        return
    nb.setdefault("cells", []).insert(0, {"cell_type": "markdown", "metadata": {}, "source": f"# {title}"})


def clean_executed(nb: dict, root: Path) -> dict:
    """Strip volatile metadata (times, durations, machine paths) from an executed notebook, in place.

    A run notebook (estimate, rank, probe) is titled after its run (:func:`run_title`, from the
    parameters papermill injected), and its default ``parameters`` cell is hidden in the book
    (``remove-cell``), so the injected parameters are the first code a reader sees. A chapter hides
    both its parameters cells.
    """
    paper = nb.get("metadata", {}).get("papermill", {})
    for key in _VOLATILE_NB:
        paper.pop(key, None)
    title = run_title(paper.get("parameters") or {}, root)
    if title:
        _retitle(nb, title)
    roots = sorted({str(root.resolve()), str(Path.home())}, key=len, reverse=True)
    hidden = not title and any("remove-cell" in c.get("metadata", {}).get("tags", []) and "parameters" in c.get("metadata", {}).get("tags", []) for c in nb.get("cells", []))
    for cell in nb.get("cells", []):
        tags = cell.get("metadata", {}).get("tags", [])
        if hidden and "injected-parameters" in tags and "remove-cell" not in tags:
            tags.append("remove-cell")  # a chapter hides its parameters, injected ones too
        if title and "parameters" in tags and "remove-cell" not in tags:
            cell["metadata"]["tags"] = tags = [*tags, "remove-cell"]  # the defaults: the injected cell says what ran
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
