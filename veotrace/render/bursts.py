"""Terminal view of a burst result: headline numbers, distributions and a capped burst table.

Times show in ms (and burst starts in seconds after the first counted event) so that columns fit;
the JSON/CSV/Parquet outputs keep integer nanoseconds.
"""

from __future__ import annotations

from rich.console import Console

from veotrace.render.console import fmt_bytes, fmt_value, rows_table, summary_table

NS_PER_MS = 1e6
_DISTRIBUTIONS = [("burst_events", "size (events)", 1.0), ("burst_duration_ns", "duration (ms)", NS_PER_MS),
                  ("inter_burst_gap_ns", "gap between (ms)", NS_PER_MS), ("burst_bytes", "bytes", 1.0)]
_STATS = ("min", "median", "p95", "p99", "max")


def _scaled(value, scale: float):
    return None if value is None else value / scale


def render_bursts(console: Console, result, *, max_rows: int) -> None:
    """Draw ``result`` (a BurstResult) on ``console``."""
    s, p = result.summary, result.params
    has_bytes = s["bytes_in_bursts"] is not None
    counted = "kernel launches" if p["events"] == "kernels" else f"events ({', '.join(p['ops'])})"
    items = [("events read", s["events_read"]), (f"{counted} counted", s["events_counted"]),
             ("gap (ms)", p["gap_ms"]), ("min events", p["min_events"]), ("bursts", s["bursts"]),
             ("events in bursts", s["events_in_bursts"]), ("share in bursts", s["share_in_bursts"])]
    if has_bytes:
        items.append(("bytes in bursts", fmt_bytes(s["bytes_in_bursts"])))
    console.print(summary_table("Bursts", items))
    dist_rows = [{"what": label, **{k: _scaled(s[key][k], scale) for k in _STATS}}
                 for key, label, scale in _DISTRIBUTIONS if s.get(key) is not None]
    table, _ = rows_table("Distributions", dist_rows, [("what", ""), *[(k, k) for k in _STATS]], max_rows=0)
    console.print(table)
    first = s["first_ns"] or 0
    rows = [{"burst": r["burst"], "start_s": (r["start_ns"] - first) / 1e9, "duration_ms": r["duration_ns"] / NS_PER_MS,
             "events": r["events"], "bytes": r["bytes"], "events_per_s": r["events_per_s"],
             "gap_ms": _scaled(r["gap_before_ns"], NS_PER_MS)} for r in result.bursts.to_pylist()]
    columns = [("burst", "#"), ("start_s", "start (s)"), ("duration_ms", "duration (ms)"), ("events", "events"),
               ("bytes", "bytes"), ("events_per_s", "events/s"), ("gap_ms", "gap before (ms)")]
    if not has_bytes:
        columns.remove(("bytes", "bytes"))
    table, footer = rows_table("Bursts (start: seconds after the first event)", rows, columns, max_rows=max_rows,
                               formatters={"bytes": fmt_bytes, "start_s": fmt_value})
    console.print(table)
    if footer:
        console.print(footer)
