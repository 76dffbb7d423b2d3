"""Terminal view of an entropy result: headline, trend, segments and a capped window table."""

from __future__ import annotations

from rich.console import Console

from veotrace.analysis.timescale import duration_unit, fmt_duration, plural
from veotrace.render.console import fmt_value, rows_table, summary_table
from veotrace.render.sparkline import print_entropy_sparkline

COLUMNS = [("window", "k"), ("start", "start"), ("events", "events"),
           ("entropy_bits", "H (bits)"), ("normalized_entropy", "H / Hmax")]
# Time windows are the same for every group (they share the pooled span), so the count of empty ones is
# shown; event windows differ per group, so their count is. Theil-Sen per group stays in the JSON.
_GROUP_COLUMNS = [("group", ""), ("events", "events"), ("empty", "empty windows"),
                  ("mean", "mean H"), ("slope", "slope"), ("tau", "Kendall tau"), ("p", "p")]


def _classes_line(p: dict) -> str:
    """The classes counted, bottom and top named for what they hold (``≤ 4 KiB``, ``> 2 MiB``)."""
    from veotrace.analysis.entropy.entropy_notes import class_label

    if p.get("auto_classes") and p.get("classes_seen"):
        lo, hi = p["classes_seen"]
        return (f"from the data (--auto-classes): {class_label(lo, p['min_class'], p['max_class'])} .. "
                f"{class_label(hi, p['min_class'], p['max_class'])}, {hi - lo + 1} classes")
    labels = p.get("class_labels") or {}
    return (f"{labels.get('bottom')} .. {labels.get('top')}, {p.get('classes')} classes "
            f"(--min-class {p.get('min_class')}, --max-class {p.get('max_class')})")


def render_entropy(console: Console, result, *, max_rows: int) -> None:
    """Draw ``result`` (an EntropyResult) on ``console``."""
    t, s = result.trend, result.summary
    d = result.slope_display()
    unit = d["unit"]
    items = [("events read", s["events_read"]), ("events counted", s["events_counted"]),
             ("windows", _windows_line(result)), ("empty windows", s["empty_windows"]),
             ("mean H (bits)", s["mean_entropy_bits"]),
             (f"slope ({unit})", d["slope"]), ("R^2", t["r_squared"]),
             (f"Theil-Sen slope ({unit})", d["theil_sen_slope"]),
             ("Kendall tau", t["kendall"]["tau"]), ("Kendall p", t["kendall"]["p_value"])]
    if s.get("span_s") is not None:
        items.insert(2, ("span", fmt_duration(s["span_s"])))
    items.insert(2, ("size classes", _classes_line(result.params)))
    if s.get("events_left_out"):
        items.insert(-5, ("events left out", s["events_left_out"]))
    console.print(summary_table("Size-class entropy", items))
    print_entropy_sparkline(console, result)
    if result.segments:
        per = d.get("per_unit", 1.0)
        seg_rows = [dict(seg, span=seg.get("label") or f"{fmt_value(seg['start_hours'])}-{fmt_value(seg['end_hours'])} h",
                         slope=None if seg["slope_bits_per_hour"] is None else seg["slope_bits_per_hour"] * per)
                    for seg in result.segments]
        table, _ = rows_table("Segments", seg_rows, [("span", "segment"), ("windows", "windows"),
                              ("mean_bits", "mean H"), ("slope", f"slope ({unit})"),
                              ("r_squared", "R^2")], max_rows=0)
        console.print(table)
    if s.get("phases"):
        name, scale = duration_unit(s["span_s"])
        rows = [dict(ph, span=f"{ph['start_s'] / scale:.4g}-{ph['end_s'] / scale:.4g} {name}",
                     p=ph["kendall"]["p_value"]) for ph in s["phases"]]
        table, _ = rows_table("Phases of activity (between idle gaps)", rows,
                              [("span", "phase"), ("windows", "windows"), ("events", "events"),
                               ("mean_entropy_bits", "mean H"), ("slope", f"slope ({unit})"), ("p", "Kendall p")],
                              max_rows=0)
        console.print(table)
    if getattr(result, "groups", None):
        console.print(_groups_table(result, unit))
    rows = result.windows.to_pylist()
    columns = list(COLUMNS)
    span = s.get("span_s")
    if span is not None and rows and rows[0].get("start_s") is not None:
        name, scale = duration_unit(span)
        for r in rows:
            r["start"] = r["start_s"] / scale
        columns[1] = ("start", f"start ({name} since the first event)")
    else:
        columns.remove(("start", "start"))
    table, footer = rows_table("Windows", rows, columns, max_rows=max_rows)
    console.print(table)
    if footer:
        console.print(footer)


def _windows_line(result) -> str:
    """"275 windows of 10 ms (chosen from the data)", "100 windows of 35 events", "1 window of 5 min"."""
    p, n = result.params, result.summary["windows"]
    size = fmt_duration(p["window_s"]) if p.get("window_s") else plural(p.get("window_events") or 0, "event")
    step = p.get("step_s")
    text = f"{plural(n, 'window')} of {size}"
    if step and p.get("window_s") and step != p["window_s"]:
        text += f", every {fmt_duration(step)}"
    if (p.get("window_choice") or {}).get("auto"):
        text += " (chosen from the data)"
    return text


def _groups_table(result, unit: str):
    """One row per series: the pooled one, then each device/stream."""
    series = [("all", result.summary, result.trend)] + [(g["group"], g["summary"], g["trend"]) for g in result.groups]
    rows = []
    for name, s, t in series:
        d = t.get("display") or {}
        rows.append({"group": name, "events": s["events_counted"], "windows": s["windows"],
                     "empty": s["empty_windows"], "mean": s["mean_entropy_bits"], "slope": d.get("slope"),
                     "ts": d.get("theil_sen_slope"), "tau": t["kendall"]["tau"], "p": t["kendall"]["p_value"]})
    by = result.params.get("by") or "group"
    columns = list(_GROUP_COLUMNS)
    if result.params.get("window_events"):
        columns[2] = ("windows", "windows")
    table, _ = rows_table(f"Per {by} (slopes in {unit})", rows, columns, max_rows=0)
    return table
