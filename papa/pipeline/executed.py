"""Executed notebooks: a run's title from its parameters, volatile metadata stripped (:func:`clean_executed`), and
the one escaping of user-supplied text that the titles and the book's generated pages share (:func:`myst_text`,
:func:`code_span`, :func:`model_markdown`). The chapters' kernels import it: editing its code re-runs them.
"""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path, PurePath

from papa.core.names import name_parts, parse_run_id, slug
from papa.core.tasks import task_name

_VOLATILE_NB = ("start_time", "end_time", "duration", "input_path", "output_path", "environment_variables")

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
    "colamore": "CoLA with 8,000 training examples",
    "lrnext": "the runner-up learning rate (2e-4) of mpnet-base CoLA",
    "mpnetmore": "mpnet-base with 2,000 training examples, as the MiniLMs",
    "fulldatafloor": "the whole training split, attention-free floor",
    "paper": "the paper's literal setting (learning rate 2e-5, 15 epochs, final epoch)",
    "literal": "the paper's literal setting (learning rate 2e-5, 15 epochs, final epoch)",
    "literalmpnet": "the paper's literal setting on mpnet-base, one seed",
    "deviation": "the deviation ordering",
    "random": "seeded random orderings",
}


#: Characters backslash-escaped wherever they stand (they open MyST syntax); ``_`` only where it is not inside a word.
_BACKSLASHED = frozenset("\\`*[]{}#|~$")
_OPENING_UNDERSCORE = re.compile(r"(?<![^\W_])_|_(?![^\W_])")
#: HTML's special characters as entities: text in Markdown and in raw HTML alike (``<`` never opens a tag).
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}
#: What starts a block at the start of a line (a list item, a rule, a fence, a comment): escaped at the text's start.
_BLOCK_START = re.compile(r"^(?:[-+=:](?=[-+=:\s]|$)|[%(])")
_NAMED_CONTROLS = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
#: An embedded model name or a hub id, shown as it is (any other model: a short name, its full path in a code span).
_PLAIN_MODEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


def visible(text: object) -> str:
    """``text`` with every control or format character (newlines, tabs, bidi overrides, line separators) written
    as its escape (``\\n``, ``\\x1b``, ``\\u202e``): one line, and nothing invisible."""

    def shown(char: str) -> str:
        if char in _NAMED_CONTROLS:
            return _NAMED_CONTROLS[char]
        if unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"):
            return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"
        return char

    return "".join(shown(char) for char in str(text))


def myst_text(text: object) -> str:
    """User-supplied ``text`` as MyST Markdown that renders as exactly that text and holds no HTML tag (control
    characters shown escaped, HTML's special characters as entities, MyST syntax backslash-escaped)."""
    out = "".join(_ENTITIES.get(c) or (f"\\{c}" if c in _BACKSLASHED else c) for c in visible(text))
    out = _OPENING_UNDERSCORE.sub(r"\\_", out)
    out = re.sub(r"^(\d+)([.)])(?=\s|$)", r"\1\\\2", out)  # not an ordered list
    out = _BLOCK_START.sub(lambda m: "\\" + m.group(), out)
    return re.sub(r"^ +", lambda m: "&#32;" * len(m.group()), out)  # not an indented code block


def code_span(text: object, table: bool = False) -> str:
    """``text`` as one Markdown code span, whatever backticks it holds (``table``: ``|`` escaped, for a table cell)."""
    body = visible(text) or " "
    fence = "`" * (1 + max((len(run) for run in re.findall(r"`+", body)), default=0))
    pad = " " if body[0] == "`" or body[-1] == "`" or (body[0] == " " and body[-1] == " " and body.strip()) else ""
    body = body.replace("|", "\\|") if table else body
    return f"{fence}{pad}{body}{pad}{fence}"


def model_display(model: str) -> str:
    """A model's short display name: an embedded name or hub id as it is, else its folder's name made safe
    (:func:`papa.core.names.slug`: letters, digits, ``.``, ``-``)."""
    model = str(model)
    return model if _PLAIN_MODEL.match(model) else slug(PurePath(model).name or model)


def model_markdown(model: str, code: bool = False, table: bool = False) -> str:
    """A model as MyST Markdown: an embedded name or hub id as it is (``code``: in a code span); any other (a folder)
    by its short display name and its full path in a code span (``table``: for a table cell)."""
    display = model_display(model)
    if display == str(model):
        return code_span(model, table) if code else myst_text(model)
    return f"{myst_text(display)} ({code_span(model, table)})"


def study_words(name: str) -> str:
    """A study's name as words (``"moredata8k"`` → ``"8,000 training examples"``)."""
    return STUDY_WORDS.get(name, name)


def _total_heads(params: dict, root: Path) -> int | None:
    """The model's number of heads: from the run's first result file, else the model's config."""
    try:
        result = json.loads((root / str(params["out"]).format(seed=params["seeds"][0])).read_text(encoding="utf-8"))
        return int(result["config"]["total_heads"])
    except (OSError, KeyError, IndexError, ValueError, TypeError):
        pass
    from papa.pipeline.plan import head_count  # the grid's planner, only for a run without a result yet

    model = params.get("model")
    return head_count(str(model))[0] if model else None  # an unreachable model: the title says k alone


def run_kind(params: dict) -> str | None:
    """The kind of run papermill's ``params`` describe (None: a chapter or no known kind)."""
    if "grid_config" in params or "model" not in params or "task" not in params:
        return None
    if "method" in params:
        return "rank"
    if "lrs" in params:
        return "select_lr"
    if "k" in params:
        return "probe"
    if "max_examples" in params:
        return "estimate"
    return None


def run_title(params: dict, root: Path | None = None) -> str | None:
    """The MyST heading that names a run from its parameters (``Ranking — minilm-l6 · SST-2 (gates)``; a study's
    probe ends with the study in words), or None for a chapter."""
    kind = run_kind(params)
    if kind is None:
        return None
    head = f"{model_markdown(str(params['model']))} · {myst_text(task_name(str(params['task'])))}"
    if kind == "rank":
        return f"Ranking — {head} ({myst_text(params['method'])})"
    if kind == "select_lr":
        return f"Learning rate — {head} · chosen among {', '.join(f'{float(lr):g}' for lr in params['lrs'])}"
    if kind == "estimate":
        examples = params.get("max_examples")
        size = f" · {int(examples):,} training examples" if isinstance(examples, int) else ""
        return f"Constants — {head}{size}"
    k = int(params["k"])
    parts = [f"Probe — {head}"]
    if params.get("probe_input", "all") != "all":
        parts.append("attention-free floor (embedding layer only)")
    else:
        total = _total_heads(params, root or Path.cwd()) if k else None
        ranking = name_parts(Path(str(params.get("ranking") or "")).stem)[-1] if params.get("ranking") else ""
        if k == 0:
            parts.append("no head constant")
        elif total is not None and k >= total:
            parts.append(f"all {total} heads constant")
        else:
            parts += [myst_text(ranking)] if ranking else []
            parts.append(f"{k} of {total} heads constant" if total else f"{k} heads constant")
    if params.get("mode", "cached") != "cached":
        parts.append(f"{myst_text(params['mode'])} mode")
    if params.get("seeds"):
        seeds = list(params["seeds"])
        parts.append(("seed " if len(seeds) == 1 else "seeds ") + ", ".join(str(s) for s in seeds))
    title = " · ".join(parts)
    run = parse_run_id(Path(str(params.get("out", ""))).name)
    if run.kind == "probe" and run.extra:
        study = [f for f in run.extra if f != params.get("probe_input")]
        if study:
            title += f" · {myst_text(study_words('__'.join(study)))}"
    return title


def _first_markdown(nb: dict) -> dict | None:
    return next((cell for cell in nb.get("cells", []) if cell.get("cell_type") == "markdown"), None)


def heading(nb: dict) -> str | None:
    """The ``# ...`` heading of a notebook's first markdown cell, or None."""
    lines = "".join((_first_markdown(nb) or {}).get("source", "")).splitlines()
    return lines[0][2:] if lines and lines[0].startswith("# ") else None


def title_is_stale(notebook: Path, params: dict, root: Path) -> bool:
    """Whether an executed run notebook's heading differs from the title its parameters give today."""
    title = run_title(params, root)
    if title is None:
        return False
    try:
        nb = json.loads(notebook.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(nb, dict) and heading(nb) != title


def _retitle(nb: dict, title: str) -> None:
    """Make ``title`` the first markdown cell's heading (replacing its ``# ...`` line), in place."""
    cell = _first_markdown(nb)
    if cell is None:
        nb.setdefault("cells", []).insert(0, {"cell_type": "markdown", "metadata": {}, "source": f"# {title}"})
        return
    lines = "".join(cell.get("source", "")).splitlines()
    cell["source"] = "\n".join([f"# {title}", *lines[1:]] if heading(nb) is not None else [f"# {title}", "", *lines])


def clean_executed(nb: dict, root: Path) -> dict:
    """Strip volatile metadata from an executed notebook, title it and hide its parameters cell, in place."""
    paper = nb.get("metadata", {}).get("papermill", {})
    for key in _VOLATILE_NB:
        paper.pop(key, None)
    title = run_title(paper.get("parameters") or {}, root)
    if title:
        _retitle(nb, title)
    roots = sorted({str(root.resolve()), str(Path.home())}, key=len, reverse=True)
    tags_of = lambda cell: cell.get("metadata", {}).get("tags", [])
    hidden = not title and any("remove-cell" in tags_of(c) and "parameters" in tags_of(c) for c in nb.get("cells", []))
    for cell in nb.get("cells", []):
        tags = tags_of(cell)
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
