"""The prose of the generated pages, kept as Markdown templates in ``book/templates/``: Python computes only the values.

A template file holds named pieces: the text before the first ``% piece: <name>`` line (a MyST comment) is the piece
``page``; each such line starts the piece ``<name>`` (its last newline dropped). A piece names its values as
``${name}``, nothing else is special. :func:`fill` escapes plain values (:func:`papa.pipeline.executed.myst_text`)
and puts :class:`Markdown` values in as they are; a missing or unused value is an error."""

from __future__ import annotations

import re
import string
from collections.abc import Iterable
from functools import cache
from pathlib import Path

from papa.pipeline.executed import code_span, model_markdown, myst_text
from papa.pipeline.plan import ROOT

#: Where the templates are (``book/templates/<file>.md``; not in ``_toc.yml``, so never a page of the book).
TEMPLATES = ROOT / "book" / "templates"
_PIECE = re.compile(r"^% piece: ([a-z0-9-]+)[ \t]*$", re.MULTILINE)


class Markdown(str):
    """Text that is already MyST Markdown, every user-supplied part of it escaped: :func:`fill` places it as it is."""


class _Template(string.Template):
    """``${name}`` only: a bare ``$`` (math) and ``$$`` (display math) are text."""

    pattern = r"\$(?:(?P<escaped>(?!))|(?P<named>(?!))|\{(?P<braced>[a-z][a-z0-9_]*)\}|(?P<invalid>(?!)))"


@cache
def _read(path: Path) -> dict[str, str]:
    source = path.read_text(encoding="utf-8")
    names, bodies = ["page", *_PIECE.findall(source)], _PIECE.split(source)[::2]
    found = {name: body.removeprefix("\n").removesuffix("\n") for name, body in zip(names, bodies)}
    found["page"] = bodies[0]
    if len(found) != len(names):
        raise ValueError(f"{path}: a piece is named twice")
    return found


def pieces(file: str) -> dict[str, str]:
    """The pieces of ``book/templates/<file>.md`` by name (``page``: the text before the first piece)."""
    return _read(TEMPLATES / f"{file}.md")


def fill(file: str, piece: str = "page", **values: object) -> Markdown:
    """Piece ``piece`` of ``book/templates/<file>.md`` with its ``${name}`` values put in (plain values escaped by
    :func:`~papa.pipeline.executed.myst_text`, :class:`Markdown` values as they are)."""
    template = pieces(file)[piece]
    wanted = {match.group("braced") for match in _Template.pattern.finditer(template) if match.group("braced")}
    if wanted != set(values):
        missing, unused = sorted(wanted - set(values)), sorted(set(values) - wanted)
        raise KeyError(f"template {file}:{piece}: missing values {missing}, unused values {unused}")
    return Markdown(_Template(template).substitute({name: _markdown(value) for name, value in values.items()}))


def _markdown(value: object) -> str:
    return value if isinstance(value, Markdown) else myst_text(value)


def join(parts: Iterable[object], separator: str = "") -> Markdown:
    """Parts joined (plain ones escaped) as Markdown."""
    return Markdown(separator.join(_markdown(part) for part in parts))


def code(value: object) -> Markdown:
    """A value in a code span (:func:`~papa.pipeline.executed.code_span`)."""
    return Markdown(code_span(value))


def model(name: str) -> Markdown:
    """A model in a code span, a folder by its display name with its full path in one
    (:func:`~papa.pipeline.executed.model_markdown`)."""
    return Markdown(model_markdown(name, code=True))
