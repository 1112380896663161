"""A Sphinx extension of the book: page titles as text.

sphinx-book-theme puts each page's title into the page as plain text (``context["pagetitle"] = title.astext()``,
printed unescaped in the print-only heading; the root title likewise in the sidebar), so a title that shows a ``<``
(a model folder named with markup, escaped in the Markdown) would become markup there. This escapes both after the
theme has set them: the one place where the theme's text meets the HTML."""

from __future__ import annotations

from html import escape


def _escape_titles(app, pagename: str, templatename: str, context: dict, doctree) -> None:
    for key in ("pagetitle", "root_title"):
        if isinstance(context.get(key), str):
            context[key] = escape(context[key], quote=True)


def setup(app) -> dict:
    app.connect("html-page-context", _escape_titles, priority=900)  # after the theme's handlers (priority 500)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
