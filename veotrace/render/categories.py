"""Terminal view of `veotrace categories`: the peak and what holds it, each category from before profiling to
the end, and the windows (the JSON's ``windows``; the per-window maxima per category are in the JSON and CSV)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from veotrace.analysis.timescale import duration_unit, fmt_duration, plural
from veotrace.render.console import fmt_bytes, rows_table, summary_table

_FORM = {"raw": "raw rows (ts, action, bytes, category)",
         "points": "JSON points (times, sizes by category; times in whole microseconds)"}


def _moved(d: dict | None) -> str:
    return "-" if not d else f"{d['category']} ({'+' if d['bytes'] > 0 else '-'}{fmt_bytes(abs(d['bytes']))})"


def _when(point: dict) -> str:
    if point.get("before_profiling"):
        return "before profiling"
    return "-" if point.get("at_s") is None else f"{fmt_duration(point['at_s'])} after the first point"


def _windows_line(result) -> str:
    p, n = result.params, result.summary["windows"]
    size = fmt_duration(p["window_s"]) if p.get("window_s") else plural(p.get("window_events") or 0, "point")
    text = f"{plural(n, 'window')} of {size}"
    return text + (" (chosen from the data)" if (p.get("window_choice") or {}).get("auto") else "")


def render_categories(console: Console, result, *, max_rows: int) -> None:
    """Draw ``result`` (a ``CategoriesResult``) on ``console``."""
    s, peak, growth = result.summary, result.peak, result.growth
    dom = peak.get("dominant")
    items = [("file", escape(str(s.get("file")))), ("form", _FORM.get(s["form"], s["form"])),
             ("rows read" if s["form"] == "raw" else "points read", s["rows"]), ("points", s["points"])]
    if s.get("span_s") is not None:
        items.append(("span", fmt_duration(s["span_s"])))
    items += [("windows", _windows_line(result)),
              ("bytes before profiling", fmt_bytes(result.before["total"])),
              ("peak", f"{fmt_bytes(peak['total'])} ({peak['total']:,} B), {_when(peak)}"),
              ("dominant at the peak", "-" if not dom else f"{dom['category']}: {fmt_bytes(dom['bytes'])} "
                                                             f"({dom['share']:.1%})"),
              ("grew most, start to peak", _moved(growth["start_to_peak"]["grew_most"])),
              ("grew most, peak to end", _moved(growth["peak_to_end"]["grew_most"])),
              ("shrank most, peak to end", _moved(growth["peak_to_end"]["shrank_most"])),
              ("end", f"{fmt_bytes(result.end['total'])} ({result.end['total']:,} B)")]
    console.print(summary_table("Memory categories over time (export_memory_timeline)", items))
    rows = []
    for c in result.categories:
        rows.append({"category": c, "before": result.before["by_category"][c], "peak": peak["by_category"][c],
                     "end": result.end["by_category"][c], "up": growth["start_to_peak"]["by_category"][c],
                     "down": growth["peak_to_end"]["by_category"][c]})
    signed = {k: (lambda v: ("+" if v > 0 else "-" if v < 0 else "") + fmt_bytes(abs(v))) for k in ("up", "down")}
    table, _ = rows_table("Bytes by category", rows,
                          [("category", "category"), ("before", "before profiling"), ("peak", "at the peak"),
                           ("end", "at the end"), ("up", "start -> peak"), ("down", "peak -> end")],
                          max_rows=0, formatters={"before": fmt_bytes, "peak": fmt_bytes, "end": fmt_bytes, **signed})
    console.print(table)
    if not result.windows:
        return
    shown = [c for c in result.categories if any(w[f"{c}_max_bytes"] for w in result.windows)]
    name, scale = duration_unit(s["span_s"] or 1.0)
    wrows = [dict(w, start=w["start_s"] / scale) for w in result.windows]
    cols = [("window", "k"), ("start", f"start ({name})"), ("points", "points"), ("total_bytes", "total at end"),
            ("max_total_bytes", "max total"), *((f"{c}_bytes", c) for c in shown)]
    fmts = {k: fmt_bytes for k, _ in cols if k.endswith("_bytes")}
    table, footer = rows_table("Windows (bytes at each window's end; per-category maxima in --format json/csv)",
                               wrows, cols, max_rows=max_rows, formatters=fmts)
    console.print(table)
    if footer:
        console.print(footer)
