"""Terminal view of an entropy result: headline, trend, segments and a capped window table."""

from __future__ import annotations

from rich.console import Console

from veotrace.render.console import fmt_value, rows_table, summary_table
from veotrace.render.sparkline import print_entropy_sparkline

COLUMNS = [("window", "k"), ("start_ns", "start (ns)"), ("hours", "hours"), ("events", "events"),
           ("entropy_bits", "H (bits)"), ("normalized_entropy", "H / Hmax")]


def render_entropy(console: Console, result, *, max_rows: int) -> None:
    """Draw ``result`` (an EntropyResult) on ``console``."""
    t, s = result.trend, result.summary
    unit = "bits/hour" if t.get("x") == "hours" else "bits/window"
    items = [("events read", s["events_read"]), ("events counted", s["events_counted"]),
             ("windows", s["windows"]), ("empty windows", s["empty_windows"]),
             ("mean H (bits)", s["mean_entropy_bits"]),
             (f"slope ({unit})", t["slope"]), ("R^2", t["r_squared"]),
             (f"Theil-Sen slope ({unit})", t["theil_sen"]["slope"]),
             ("Kendall tau", t["kendall"]["tau"]), ("Kendall p", t["kendall"]["p_value"])]
    console.print(summary_table("Size-class entropy", items))
    print_entropy_sparkline(console, result)
    if result.segments:
        seg_rows = [dict(seg, span=f"{fmt_value(seg['start_hours'])}-{fmt_value(seg['end_hours'])} h")
                    for seg in result.segments]
        table, _ = rows_table("Segments", seg_rows, [("span", "hours"), ("windows", "windows"),
                              ("mean_bits", "mean H"), ("slope_bits_per_hour", "slope"), ("r_squared", "R^2")],
                              max_rows=0)
        console.print(table)
    table, footer = rows_table("Windows", result.windows.to_pylist(), COLUMNS, max_rows=max_rows)
    console.print(table)
    if footer:
        console.print(footer)
