"""The view's page: one HTML document (or a fragment the report embeds) holding its data, uPlot and the
viewer's script inline, so that it opens from disk with no server and asks for nothing from outside.

The data is JSON inside ``<script type="application/json">`` with ``<``, ``>`` and ``&`` written as
``\\u003c`` escapes, so no input string can close the element or open another; the viewer sets every
string with ``textContent``; and the page's Content-Security-Policy allows only its own inline
scripts and styles and ``data:`` images (no request can leave the page, whatever an input holds).
"""

from __future__ import annotations

import html
import json
from functools import cache
from importlib import resources

#: The vendored uPlot's version (tools/refresh_uplot.py fetches it from the npm registry).
UPLOT_VERSION = "1.6.32"
#: The policy of a page holding a view: nothing from outside, only its own inline scripts and styles.
CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:"


@cache
def asset(name: str) -> str:
    """A file of ``veotrace/viewer/assets`` (the vendored uPlot, its licence, the viewer's script and style)."""
    return resources.files("veotrace.viewer").joinpath("assets", name).read_text(encoding="utf-8")


def data_json(data: dict) -> str:
    """``data`` as JSON safe inside a script element: no ``<``, ``>`` or ``&`` (nor U+2028/9) left as such."""
    text = json.dumps(data, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def styles() -> str:
    """The CSS a page holding views needs once."""
    return asset("uPlot.min.css") + "\n" + asset("view.css")


def scripts() -> str:
    """The scripts a page holding views needs once, after every view's data (uPlot, with its licence, then the viewer)."""
    licence = asset("uPlot.LICENSE").replace("*/", "* /")
    return (f"<script>/* uPlot {UPLOT_VERSION}, vendored from the npm registry (tools/refresh_uplot.py).\n{licence}*/\n"
            f"{asset('uPlot.iife.min.js')}</script>\n<script>{asset('view.js')}</script>")


def fragment(data: dict, element_id: str) -> str:
    """One view's element and its data (the page adds ``styles()`` and ``scripts()`` once)."""
    return (f'<div class="vt-view" id="{html.escape(element_id)}"><noscript>The interactive view needs JavaScript '
            "(veotrace.view(...).to_dict() has its numbers).</noscript></div>\n"
            f'<script type="application/json" class="vt-data" data-target="{html.escape(element_id)}">'
            f"{data_json(data)}</script>")


def document(data: dict, *, title: str) -> str:
    """The whole page of one view."""
    return "".join([
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<meta name="color-scheme" content="light dark">',
        f"<title>{html.escape(title)}</title><style>",
        "body { margin: 0 auto; max-width: 1400px; padding: 16px 24px; }",
        "@media (prefers-color-scheme: dark) { body { background: #15181c; color: #e4e7eb; } }",
        styles(), "</style></head><body>",
        f'<header class="vt-view"><h1>veotrace view</h1><p class="vt-note">{html.escape(title)}</p></header>',
        fragment(data, "vt-view-0"), scripts(), "</body></html>\n"])
