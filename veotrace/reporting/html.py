"""Report layer: the HTML page: no outside resource, light and dark colour schemes, print styles; script only
for an interactive view (``veotrace view``'s), whose still figure stands in without JavaScript."""

from __future__ import annotations

import html
import math
import re
from typing import Any

CSS = """
:root { color-scheme: light dark; --fg: #1c2024; --bg: #ffffff; --muted: #5c6670; --line: #d8dde2;
  --panel: #f5f7f9; --accent: #1f6feb; --bad: #b42318; }
@media (prefers-color-scheme: dark) {
  :root { --fg: #e4e7eb; --bg: #15181c; --muted: #9aa4ae; --line: #343b43; --panel: #1d2228;
    --accent: #6ea8fe; --bad: #f97066; }
  figure svg { filter: invert(0.88) hue-rotate(180deg); }
}
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1180px; padding: 24px; font: 15px/1.5 system-ui, -apple-system, "Segoe UI",
  Roboto, "DejaVu Sans", sans-serif; color: var(--fg); background: var(--bg); }
h1 { font-size: 1.6em; margin: 0 0 4px; } h2 { font-size: 1.25em; margin: 0 0 6px; }
h2 small, nav small { font-weight: normal; color: var(--muted); font-size: 0.8em; }
h3 { font-size: 1em; margin: 14px 0 4px; color: var(--muted); }
a { color: var(--accent); }
code { font: 0.9em ui-monospace, "DejaVu Sans Mono", monospace; background: var(--panel); padding: 1px 4px;
  border-radius: 3px; overflow-wrap: anywhere; }
.sub { color: var(--muted); margin: 0 0 18px; }
section { border-top: 1px solid var(--line); padding: 18px 0 8px; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 10px 0; padding: 0; list-style: none; }
.cards li { background: var(--panel); border: 1px solid var(--line); border-radius: 6px; padding: 6px 12px; }
.cards b { display: block; font-size: 1.15em; }
.cards span { color: var(--muted); font-size: 0.85em; }
figure { margin: 10px 0; }
figure svg { display: block; width: 100%; height: auto; background: #fff; border-radius: 4px; }
table { border-collapse: collapse; margin: 6px 0 10px; font-size: 0.9em; }
th, td { border-bottom: 1px solid var(--line); padding: 3px 10px 3px 0; text-align: left; vertical-align: top; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.wide { overflow-x: auto; }
.error { color: var(--bad); font-weight: 600; }
.note { color: var(--muted); font-size: 0.85em; }
nav ol { columns: 2; margin: 6px 0 0; }
footer { border-top: 1px solid var(--line); margin-top: 18px; padding-top: 8px; color: var(--muted); font-size: 0.85em; }
@media print {
  :root { --fg: #000; --bg: #fff; --muted: #444; --line: #bbb; --panel: #fff; }
  body { max-width: none; padding: 0; font-size: 10pt; }
  figure svg { filter: none; }
  nav { display: none; }
  section { break-inside: avoid-page; }
  figure, table { break-inside: avoid; }
}
"""


def esc(value: Any) -> str:
    """A value as escaped HTML text (numbers with 4 significant digits, thousands separators); control characters
    and lone surrogates (a file name that is not UTF-8) as backslash escapes (``errors.printable``)."""
    from veotrace.errors import printable

    return html.escape(printable(fmt(value)), quote=True)


def fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "–"
        if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
            return f"{value:.4g}"
        return f"{value:,.4g}" if abs(value) >= 1e4 else f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(fmt(v) for v in value)
    if isinstance(value, dict):
        return "; ".join(f"{k}: {fmt(v)}" for k, v in value.items())
    return str(value)


def inline_svg(svg: bytes, *, prefix: str) -> str:
    """A matplotlib SVG ready to sit inside HTML: no XML prolog or metadata, ids made unique per figure,
    sized by the page (the viewBox keeps the drawing's proportions)."""
    text = svg.decode("utf-8")
    text = text[text.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, count=1, flags=re.S)
    text = re.sub(r'(\bid="|href="#|url\(#)([A-Za-z_][\w.-]*)', lambda m: f"{m.group(1)}{prefix}-{m.group(2)}", text)
    return re.sub(r'<svg([^>]*?) width="[\d.]+(?:px|pt)" height="[\d.]+(?:px|pt)"', r'<svg\1 role="img"', text, count=1)


#: Findings listed on the report's first page (diagnose's JSON keeps every one).
MAX_FINDINGS = 15


def _cards(items: list[tuple[str, Any]]) -> str:
    return '<ul class="cards">' + "".join(f"<li><b>{esc(v)}</b><span>{esc(k)}</span></li>" for k, v in items) + "</ul>"


def _table(columns: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f'<td{" class=n" if isinstance(v, (int, float)) and not isinstance(v, bool) else ""}>'
                                    f"{esc(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f'<div class="wide"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def _inputs(report) -> str:
    rows = []
    for i in report.inputs:
        tables = ", ".join(f"{k} {v:,}" for k, v in i.tables.items())
        span = i.span.get("duration_s") if i.span else None
        rows.append([i.path, i.format or "not a trace", tables or (i.error or "-"),
                     None if span is None else _duration(span), ", ".join(i.supports) or "-"])
    n = len(report.skipped)
    what = "1 file in the folders is not a trace and was left out" if n == 1 else \
        f"{n} files in the folders are not traces and were left out"
    note = f'<p class="note">{what}.</p>' if n else ""
    return _table(["file", "format", "tables (rows)", "time span", "feeds"], rows) + note


def _duration(seconds: float) -> str:
    for unit, secs in (("h", 3600.0), ("min", 60.0), ("s", 1.0)):
        if seconds >= 2 * secs or unit == "s":
            return f"{seconds / secs:,.4g} {unit}"
    return f"{seconds:g} s"


def _section(s) -> str:
    parts = [f'<section id="{s.id}"><h2>{esc(s.title)} <small>{esc(s.inputs)}</small></h2>'
             f"<p><code>{esc(s.command)}</code></p>"]
    if s.error:
        parts.append(f'<p class="error">Not available: {esc(s.error)}</p></section>')
        return "".join(parts)
    parts.append(_cards(s.headline))
    if s.view_html:
        parts.append(s.view_html)
        if s.figure_svg:
            parts.append(f'<noscript><figure aria-label="{esc(s.title)}">{s.figure_svg}</figure></noscript>')
    elif s.figure_svg:
        parts.append(f'<figure aria-label="{esc(s.title)}">{s.figure_svg}</figure>')
    if s.columns:
        parts.append(f"<h3>{esc(s.table_title)}</h3>" + _table(s.columns, s.rows))
        if s.table_note:
            parts.append(f'<p class="note">{esc(s.table_note)}</p>')
    if s.params:
        parts.append("<h3>Parameters</h3>" + _table(["parameter", "value"], [[k, v] for k, v in s.params.items()]))
    parts.append("</section>")
    return "".join(parts)


def _summary(report) -> list[tuple[str, Any]]:
    rows: dict[str, int] = {}
    for i in report.inputs:
        for k, v in i.tables.items():
            rows[k] = rows.get(k, 0) + v
    spans = [i.span.get("duration_s") for i in report.inputs if i.span and i.span.get("duration_s") is not None]
    done = [s for s in report.sections if not s.error]
    items: list[tuple[str, Any]] = [("files", len(report.inputs)), ("analyses", f"{len(done)} of {len(report.sections)}")]
    items += [(f"{k.replace('_', ' ')} rows", v) for k, v in rows.items()]
    if spans:
        items.append(("longest time span", _duration(max(spans))))
    return items


def _findings(report) -> str:
    """The first page: the ranked findings (as ``veotrace diagnose`` gives them) and their timeline."""
    from veotrace.findings.model import fmt_at

    found = report.findings.findings if report.findings is not None else []
    if not found:
        return '<section id="findings"><h2>Findings</h2><p>No finding in the analyses below.</p></section>'
    rows = [[i + 1, f.severity, fmt_at(f.axis, f.start), f.title, f.source, f.suggestion or "-"]
            for i, f in enumerate(found[:MAX_FINDINGS])]
    more = (f'<p class="note">first {MAX_FINDINGS} of {len(found)}; veotrace diagnose lists them all.</p>'
            if len(found) > MAX_FINDINGS else "")
    figure = f'<figure aria-label="Findings by time">{report.findings_svg}</figure>' if report.findings_svg else ""
    links = "".join(f"<li>{esc(f.title)}: {esc('; '.join(f.links))}</li>" for f in found[:5] if f.links)
    return (f'<section id="findings"><h2>Findings</h2><p>Ranked by impact x confidence; linked by time order '
            f"only, never as causes.</p>{figure}"
            + _table(["#", "severity", "at", "finding", "source", "what to try"], rows) + more
            + (f"<ul>{links}</ul>" if links else "") + "</section>")


def render_html(report) -> str:
    """The whole page as one string (UTF-8, every figure inline)."""
    views = any(s.view_html for s in report.sections)
    if views:
        from veotrace.viewer.page import CSP, scripts, styles
    toc = "".join(f'<li><a href="#{s.id}">{esc(s.title)}</a> <small>{esc(s.inputs)}</small>'
                  f'{" (not available)" if s.error else ""}</li>' for s in report.sections)
    return "".join([
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">' if views else "",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<meta name="color-scheme" content="light dark">',
        f"<title>veotrace report</title><style>{CSS}{styles() if views else ''}</style></head><body>",
        f'<header><h1>veotrace report</h1><p class="sub">veotrace {esc(report.version)}; '
        f"{len(report.inputs)} input file{'' if len(report.inputs) == 1 else 's'}; every analysis with its defaults (commands shown to rerun them).</p>",
        _cards(_summary(report)), "</header>",
        f'<nav aria-label="Analyses"><h3>Analyses</h3><ol><li><a href="#findings">Findings</a></li>{toc}</ol></nav>',
        _findings(report),
        f'<section id="inputs"><h2>Inputs</h2>{_inputs(report)}</section>',
        *(_section(s) for s in report.sections),
        f"<footer>Made by veotrace {esc(report.version)}. This file needs no network: figures are inline SVG"
        + ("; the interactive timeline's script and data are inline too (without JavaScript its still figure shows)."
           if views else ", and it needs no script.") + "</footer>",
        scripts() if views else "", "</body></html>\n",
    ])
