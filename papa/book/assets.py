"""The book's static assets, staged into a ``_static`` folder by ``papa book build`` and ``papa study --site``:
MathJax (installed from npm by ``make install``), itables' offline DataTables bundle and the offline Vega bundle. The
page loads each from the site itself, never from a CDN. :func:`check_assets` says what is missing before anything is
written, so a build that cannot finish leaves the committed pages as they were."""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path

from papa.core.errors import PapaError
from papa.core.io import atomic_write_text
from papa.pipeline.plan import ROOT

MATHJAX = ROOT / ".venv" / "mathjax" / "node_modules" / "mathjax" / "es5"
INSTALL = "Run `make install` (it installs mathjax@3 with npm)."


def stage_mathjax(static: Path) -> None:
    """Copy MathJax (installed from npm by `make install`) into the book's static files."""
    import shutil

    if not (MATHJAX / "tex-mml-chtml.js").is_file():
        raise PapaError(f"MathJax is not installed at {MATHJAX.relative_to(ROOT)}", INSTALL)
    target = static / "mathjax"
    if (target / "tex-mml-chtml.js").is_file():
        return
    fonts = Path("output") / "chtml" / "fonts" / "woff-v2"
    (target / fonts).mkdir(parents=True, exist_ok=True)
    shutil.copy2(MATHJAX / "tex-mml-chtml.js", target / "tex-mml-chtml.js")
    for font in (MATHJAX / fonts).glob("*.woff"):
        shutil.copy2(font, target / fonts / font.name)


ITABLES_SCRIPT = "papa-itables.js"


def stage_itables(static: Path) -> Path:
    """Write ``papa-itables.js``: itables' offline DataTables bundle in a script that makes every ``table#runs-index``
    or ``table.papa-itable`` sortable and searchable, loaded as a blob module (it also works from ``file://``)."""
    import json
    from importlib.resources import files

    import itables

    bundle = files("itables") / "html"
    css, js = ((bundle / f"dt_bundle.{kind}").read_text(encoding="utf-8") for kind in ("css", "js"))
    script = (
        f"/* itables {itables.__version__} offline DataTables bundle, written by `papa book build`: no CDN. */\n"
        "(function () {\n"
        f"  const css = {json.dumps(css)};\n"
        f"  const src = {json.dumps(js)};\n"
        "  const style = document.createElement('style');\n"
        "  style.textContent = css;\n"
        "  document.head.appendChild(style);\n"
        "  const url = URL.createObjectURL(new Blob([src], { type: 'application/javascript' }));\n"
        "  import(url).then(({ ITable }) => {\n"
        "    URL.revokeObjectURL(url);\n"
        "    document.querySelectorAll('table#runs-index, table.papa-itable').forEach((table) => {\n"
        "      new ITable(table, { pageLength: 50, lengthMenu: [25, 50, 100, 500], order: [], autoWidth: false });\n"
        "    });\n"
        "  });\n"
        "})();\n"
    )
    target = static / ITABLES_SCRIPT
    atomic_write_text(target, script)
    return target


def check_assets() -> None:
    """Raise :class:`~papa.core.errors.PapaError` naming every asset the staging needs and this machine lacks; call it
    before writing any page."""
    missing = []
    if not (MATHJAX / "tex-mml-chtml.js").is_file():
        where = MATHJAX.relative_to(ROOT) if MATHJAX.is_relative_to(ROOT) else MATHJAX
        missing.append(f"MathJax (at {where})")
    wanted = {"itables": "itables (its DataTables bundle)", "vl_convert": "vl-convert-python (the Vega bundle)"}
    missing += [what for module, what in wanted.items() if find_spec(module) is None]
    if missing:
        raise PapaError(f"The book's assets are missing: {', '.join(missing)}", INSTALL)


def stage_assets(static: Path) -> None:
    """Stage every asset into ``static`` (the Vega bundle, itables' script, MathJax)."""
    from papa.analysis.offline import write_vega_bundle

    static.mkdir(parents=True, exist_ok=True)
    write_vega_bundle(static)
    stage_itables(static)
    stage_mathjax(static)
