"""A Sphinx extension of the book: page titles as text. sphinx-book-theme prints each page's title and the root title
unescaped (``title.astext()``), so a title showing a ``<`` would become markup; this escapes both after the theme has
set them."""

from __future__ import annotations

from html import escape


def _escape_titles(app, pagename: str, templatename: str, context: dict, doctree) -> None:
    for key in ("pagetitle", "root_title"):
        if isinstance(context.get(key), str):
            context[key] = escape(context[key], quote=True)


def setup(app) -> dict:
    app.connect("html-page-context", _escape_titles, priority=900)  # after the theme's handlers (priority 500)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
