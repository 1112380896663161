"""Offline rendering of Altair charts: no CDN, no URL.

Altair's default HTML loads vega from a CDN, which shows nothing offline. :func:`write_vega_bundle` writes one
self-contained script defining the global ``vegaEmbed``, which the book loads on every page;
:func:`enable_offline_renderer` shows each chart as Vega-Lite JSON (for JupyterLab) plus HTML calling that global.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import altair as alt

from papa.core.io import atomic_write_text

#: The file :func:`write_vega_bundle` writes (load it with ``html_js_files`` in the book's config).
VEGA_BUNDLE_NAME = "papa-vega.js"
#: The mimetype JupyterLab's built-in Vega-Lite renderer handles.
VEGALITE_MIMETYPE = "application/vnd.vegalite.v5+json"
RENDERER_NAME = "papa"


def write_vega_bundle(static_dir: str | Path, vl_version: str | None = None) -> Path:
    """Write :data:`VEGA_BUNDLE_NAME` (vega, vega-lite, vega-embed from ``vl_convert.javascript_bundle``, no network)
    into ``static_dir``, for the book's ``html_js_files``. It sets ``window.vegaEmbed`` and ``window.vega``, wrapped
    in a function so its minified names do not leak. ``vl_version`` defaults to the installed Altair's Vega-Lite
    (major.minor) when vl_convert ships it."""
    import vl_convert

    if vl_version is None:
        wanted = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
        vl_version = wanted if wanted in vl_convert.get_vegalite_versions() else None
    code = vl_convert.javascript_bundle("window.vegaEmbed = vegaEmbed; window.vega = vega;", vl_version=vl_version)
    header = (
        f"/* papa offline Vega bundle: vega {vl_convert.get_vega_version()}, vega-lite {vl_version or 'latest'}, "
        f"vega-embed {vl_convert.get_vega_embed_version()}; written by papa.analysis.figures.write_vega_bundle. */\n"
    )
    return atomic_write_text(Path(static_dir) / VEGA_BUNDLE_NAME, header + "(function () {\n" + code + "\n})();\n")


_seen_ids: dict[str, int] = {}


def chart_id(spec: dict) -> str:
    """A deterministic element id: a hash of the spec, plus ``-N`` when the same spec is shown again."""
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode("utf-8")).hexdigest()[:12]
    count = _seen_ids.get(digest, 0)
    _seen_ids[digest] = count + 1
    return f"papa-vl-{digest}" + (f"-{count}" if count else "")


def offline_html(spec: dict, element_id: str | None = None) -> str:
    """A ``<div>`` plus a ``<script>`` rendering ``spec`` (``$schema`` dropped) with the global ``vegaEmbed``, no URLs;
    it waits for the page's ``load`` event if the bundle is not loaded yet (if never, the div says so)."""
    element_id = element_id or chart_id(spec)
    body = {key: value for key, value in spec.items() if key != "$schema"}
    spec_json = json.dumps(body, sort_keys=True).replace("</", "<\\/")
    return (
        f'<div id="{element_id}"></div>\n'
        '<script type="text/javascript">\n'
        "(function () {\n"
        f"  var spec = {spec_json};\n"
        f'  var target = document.getElementById("{element_id}");\n'
        "  function show() {\n"
        '    if (typeof window.vegaEmbed !== "function") {\n'
        f'      target.textContent = "Chart not shown: the page does not load _static/{VEGA_BUNDLE_NAME}.";\n'
        "      return;\n"
        "    }\n"
        f'    vegaEmbed("#{element_id}", spec, {{"actions": false, "mode": "vega-lite"}})'
        '.catch(function (err) { target.textContent = "Chart error: " + err; });\n'
        "  }\n"
        '  if (typeof window.vegaEmbed === "function" || document.readyState === "complete") { show(); }\n'
        '  else { window.addEventListener("load", show); }\n'
        "})();\n"
        "</script>"
    )


def offline_renderer(spec: dict, **metadata: Any) -> dict[str, Any]:
    """Altair renderer: Vega-Lite JSON for JupyterLab plus offline HTML for the book."""
    return {VEGALITE_MIMETYPE: spec, "text/html": offline_html(spec), "text/plain": "<papa Vega-Lite chart>"}


def enable_offline_renderer() -> None:
    """Register and enable the Altair renderer ``"papa"`` (:func:`offline_renderer`); returns nothing (no output)."""
    alt.renderers.register(RENDERER_NAME, offline_renderer)
    alt.renderers.enable(RENDERER_NAME)


__all__ = [
    "RENDERER_NAME",
    "VEGALITE_MIMETYPE",
    "VEGA_BUNDLE_NAME",
    "chart_id",
    "enable_offline_renderer",
    "offline_html",
    "offline_renderer",
    "write_vega_bundle",
]
