"""Issue 35: a user-supplied name is text wherever the book renders it, and a failed build leaves the pages as
they were.

A model folder named with HTML, a MyST directive and a newline goes through every generated page and the run title;
each page must parse to the same Markdown structure as with a plain name (no tag, role, directive or block comes
from the name), and, in a small strict Jupyter Book build read by headless Chromium, no element or script either.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from markdown_it.renderer import RendererHTML
from myst_parser.config.main import MdParserConfig
from myst_parser.parsers.mdit import create_md_parser

from papa.book import assets, run_index
from papa.book.pages import write_pages
from papa.book.setup_page import setup_page
from papa.book.templates import fill
from papa.core.errors import PapaError
from papa.core.grid_schema import ModelSettings
from papa.pipeline.executed import code_span, model_display, myst_text, run_title
from papa.pipeline.plan import ROOT, Run, grid_model, load_config

EVIL = '<img src=x onerror="window.PWNED=1">"><script>window.PWNED=2</script>\n```{literalinclude} /.git/config\n```'
PLAIN = "/opt/models/plainmodel"  # a folder too: shown by its display name and its path
MD = create_md_parser(
    MdParserConfig(enable_extensions={"dollarmath", "amsmath", "colon_fence", "deflist"}), RendererHTML
)


def _structure(markdown: str) -> list[str]:
    """The Markdown's block and inline token types (not their text): what a name must never change."""
    out = []
    for token in MD.parse(markdown):
        out.append(token.type)
        out += [child.type for child in token.children or []]
    return out


def _pages(model: str, folder: Path) -> dict[str, str]:
    """The generated pages and run titles that show a model, for a grid of that one model."""
    config = load_config(ROOT / "configs" / "smoke.yaml")
    config = {
        **config,
        "models": [model],
        "studies": [],
        "probe": {**config["probe"], "per_model": {model: {"epochs": 3}}},
    }
    params = dict(
        model=model, task="sst2", k=2, mode="cached", seeds=[42], probe_input="all", ranking="r/x__gates.json"
    )
    run_id = f"probe__{model_display(model)}__sst2__gates__k2__cached"
    runs = [Run(run_id, "probe", params | {"out": f"results/{run_id}__s{{seed}}.json"})]
    rows = run_index.appendix_rows(config, runs, {}, folder)
    written = run_index.run_index_pages(config, rows, [run_id], folder).items()
    pages = {re.sub(r"probes-.*\.md$", "probes.md", str(path.relative_to(folder))): text for path, text in written}
    grid = grid_model(load_config(ROOT / "configs" / "smoke.yaml"))  # the model's folder need not exist: not validated
    probe = grid.probe.model_copy(update={"per_model": {model: ModelSettings(epochs=3)}})
    pages["setup.md"] = setup_page(grid.model_copy(update={"models": [model], "studies": [], "probe": probe}))
    pages["run.md"] = f"# {run_title(params, folder)}\n\nText.\n"
    for kind, extra in (
        ("rank", {"method": "gates"}),
        ("estimate", {"max_examples": 10}),
        ("select_lr", {"lrs": [0.1]}),
    ):
        pages[f"{kind}.md"] = f"# {run_title({'model': model, 'task': 'sst2', **extra}, folder)}\n"
    return pages


def test_escaping_keeps_text_and_opens_nothing():
    for text in (EVIL, "a*b_c_ [x](y) {doc}`z` $m$ | ~~s~~ #", "1. x", "- y", "::: note", "% c", "(t)=", "  four"):
        html = MD.render(f"# {myst_text(text)}\n\n| a |\n|---|\n| {myst_text(text)} |\n\n{myst_text(text)}\n")
        assert "<img" not in html and "<script" not in html and "<a " not in html and "<em>" not in html, html
        assert _structure(f"x {myst_text(text)} y\n") == ["paragraph_open", "inline", "text", "paragraph_close"]
    assert myst_text("minilm-l6 · SST-2 (gates), the paper's 2e-05") == "minilm-l6 · SST-2 (gates), the paper's 2e-05"
    assert myst_text("a\nb\tc\u202e") == "a\\\\nb\\\\tc\\\\u202e"  # shown escaped: \n, \t, \u202e
    for text in ("a`b", "``x", "y`", " z ", "p|q"):
        span = code_span(text, table=True)
        assert _structure(f"{span}\n")[:3] == ["paragraph_open", "inline", "code_inline"]
        cell = [token for token in MD.parse(f"| h |\n|---|\n| {span} |\n") if token.type == "inline"][-1]
        assert cell.children[0].content == text  # the table cell holds the text itself


def test_a_model_folder_holding_markup_is_text_on_every_page(tmp_path):
    evil, plain = _pages(EVIL, tmp_path), _pages(PLAIN, tmp_path)
    assert evil.keys() == plain.keys()
    for name, text in evil.items():
        if name.endswith(".md"):
            assert _structure(text) == _structure(plain[name]), name  # the name changed no block, role or tag
            html = MD.render(text)
            assert (
                "<img" not in html
                and "<script" not in html
                and "literalinclude" not in "".join(t.info for t in MD.parse(text) if t.type == "fence")
            ), name
        assert not re.search(r"^\s*```\{literalinclude", text, re.MULTILINE), name  # only ever inside a code span
    assert "PWNED" in evil["run.md"] and model_display(EVIL) in evil["run.md"]  # the name is shown, as text
    assert fill("setup", "model-other", model=EVIL).count("\n") == 0


def test_a_missing_asset_stops_the_build_before_any_page_is_written(tmp_path, monkeypatch):
    from papa.book.build import build_book

    watched = [ROOT / "_toc.yml", ROOT / "book" / "index.md", *sorted((ROOT / "book" / "appendix").glob("*.md"))]
    before = {path: (path.read_bytes(), path.stat().st_mtime_ns) for path in watched}
    monkeypatch.setattr(assets, "MATHJAX", tmp_path / "no-mathjax")
    with pytest.raises(PapaError, match=r"The book's assets are missing: MathJax"):
        build_book("configs/smoke.yaml", as_is=True)
    with pytest.raises(PapaError, match="MathJax"):
        write_pages(load_config(ROOT / "configs" / "smoke.yaml"), [], ["results", "controls"], root=tmp_path)
    assert {path: (path.read_bytes(), path.stat().st_mtime_ns) for path in watched} == before
    assert not (tmp_path / "_toc.yml").exists()


def test_a_page_that_cannot_be_rendered_leaves_the_others_as_they_were(tmp_path, monkeypatch):
    from papa.book import pages

    (tmp_path / "book" / "appendix").mkdir(parents=True)
    for name in ("_toc.yml", "book/index.md", "book/appendix/constants.md", "book/setup.md"):
        (tmp_path / name).write_text(f"old {name}\n")

    def broken(config):
        raise RuntimeError("the setup page failed")

    monkeypatch.setattr(pages, "setup_page", broken)
    with pytest.raises(RuntimeError):
        write_pages(load_config(ROOT / "configs" / "smoke.yaml"), [], ["results", "controls"], root=tmp_path)
    for name in ("_toc.yml", "book/index.md", "book/appendix/constants.md", "book/setup.md"):
        assert (tmp_path / name).read_text() == f"old {name}\n"


@pytest.mark.book
@pytest.mark.slow
def test_no_element_or_script_comes_from_the_name_in_chromium(tmp_path):
    """A strict Jupyter Book build of the pages above (the sidebar shows every run title), read by headless Chromium."""
    from headless import DevTools

    pages = _pages(EVIL, tmp_path / "src")
    book = tmp_path / "book"
    names = ["setup", "run", "rank", "estimate", "select_lr", "appendix"]
    for name in names:
        source = pages["book/appendix.md" if name == "appendix" else f"{name}.md"]
        (book / f"{name}.md").parent.mkdir(parents=True, exist_ok=True)
        (book / f"{name}.md").write_text(re.sub(r"\{doc\}`[^`]*`", "a link", source))  # pages this book lacks
    (book / "index.md").write_text("# Index\n\nText.\n")
    (book / "_toc.yml").write_text(
        "format: jb-book\nroot: index\nchapters:\n" + "".join(f"  - file: {n}\n" for n in names)
    )
    book_sphinx = "sphinx:\n  extra_extensions: [papa.book.sphinx_titles]\n"  # as the book's _config.yml
    (book / "_config.yml").write_text(
        'title: escaping\nexecute:\n  execute_notebooks: "off"\nparse:\n  myst_enable_extensions: [dollarmath, '
        "colon_fence, deflist]\n" + book_sphinx
    )
    command = [str(Path(sys.executable).parent / "jupyter-book"), "build", str(book), "-W", "-n", "--keep-going"]
    build = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    browser = DevTools(tmp_path / "profile")
    try:
        for name in names:
            browser.send("Page.navigate", url=(book / "_build" / "html" / f"{name}.html").as_uri())
            browser.wait_for("document.readyState === 'complete'", 60)
            found = browser.evaluate(
                "({pwned: window.PWNED || 0, imgs: document.querySelectorAll('img[src=\"x\"]').length,"
                " scripts: [...document.scripts].filter(s => s.text.includes('PWNED')).length,"
                " shown: document.body.innerText.includes('window.PWNED'), config: "
                "document.body.innerText.includes('[core]')})"
            )
            assert found == {"pwned": 0, "imgs": 0, "scripts": 0, "shown": True, "config": False}, (name, found)
    finally:
        browser.close()
