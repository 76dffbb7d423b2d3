"""Terminal view of a burst result: headline numbers, distributions and a capped burst table.

Times show in ms (and burst starts in seconds after the first counted event) so that columns fit;
the JSON/CSV/Parquet outputs keep integer nanoseconds.
"""

from __future__ import annotations

from rich.console import Console

from veotrace.analysis.timescale import plural
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
    console.print(_headline(result))
    dist_rows = [{"what": label, **{k: _scaled(s[key][k], scale) for k in _STATS}}
                 for key, label, scale in _DISTRIBUTIONS if s.get(key) is not None]
    # bytes in one style (KiB/MiB/GiB) wherever they show; the other rows are plain numbers
    fmt_row = {k: (lambda v, _k=k: v) for k in _STATS}
    for row in dist_rows:
        conv = fmt_bytes if row["what"] == "bytes" else fmt_value
        for k in _STATS:
            row[k] = conv(row[k])
    table, _ = rows_table("Distributions", dist_rows, [("what", ""), *[(k, k) for k in _STATS]], max_rows=0,
                          formatters=fmt_row)
    for col in table.columns[1:]:
        col.justify = "right"
    console.print(table)
    if getattr(result, "groups", None):
        console.print(_groups_table(result))
    if s.get("top_kernels"):
        top = [dict(k, name=short_kernel_name(k["name"], 70)) for k in s["top_kernels"]]
        if len({k["name"] for k in top}) < len(top):  # instantiations of one template: show their arguments
            top = [dict(k, name=_middle(k["name"].removeprefix("void "), 70)) for k in s["top_kernels"]]
        table, _ = rows_table(f"Top kernels ({plural(s.get('kernels', len(top)), 'kernel')} launched)", top,
                              [("name", "kernel"), ("launches", "launches"), ("launches_in_bursts", "in bursts"),
                               ("bursts", "bursts")], max_rows=0)
        console.print(table)
    first = s["first_ns"] or 0
    rows = [{"burst": r["burst"], "start_s": (r["start_ns"] - first) / 1e9, "duration_ms": r["duration_ns"] / NS_PER_MS,
             "events": r["events"], "bytes": r["bytes"], "events_per_s": r["events_per_s"],
             "gap_ms": _scaled(r["gap_before_ns"], NS_PER_MS), "top": _top(result, r["burst"])}
            for r in result.bursts.to_pylist()]
    columns = [("burst", "#"), ("start_s", "start (s)"), ("duration_ms", "duration (ms)"), ("events", "events"),
               ("bytes", "bytes"), ("events_per_s", "events/s"), ("gap_ms", "gap before (ms)")]
    if not has_bytes:
        columns.remove(("bytes", "bytes"))
    if p["events"] == "kernels":
        columns.append(("top", "top kernel"))
    table, footer = rows_table("Bursts (start: seconds after the first event)", rows, columns, max_rows=max_rows,
                               formatters={"bytes": fmt_bytes, "start_s": fmt_value})
    console.print(table)
    if footer:
        console.print(footer)


def short_kernel_name(name: str, width: int = 40) -> str:
    """A kernel name that fits a cell: no return type, no parameter list, template arguments as <…>.

    ``void Eigen::internal::EigenMetaKernel<Eigen::TensorEvaluator<...>, long>(...)`` becomes
    ``Eigen::internal::EigenMetaKernel<…>``; the JSON keeps the full name.
    """
    out, depth = [], 0
    text = name[5:] if name.startswith("void ") else name
    for ch in text:
        if ch == "<":
            if depth == 0:
                out.append("<…>")
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif ch == "(" and depth == 0:
            break
        elif depth == 0:
            out.append(ch)
    short = "".join(out).strip() or name
    return short if len(short) <= width else short[: width - 1] + "…"


def _middle(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width // 2 - 1] + "…" + text[-(width // 2):]


def _top(result, burst: int) -> str | None:
    """The most launched kernel of one burst, short: "gemm<…> (12)" (the JSON has the top 3, full names)."""
    kernels = result.burst_kernels[burst] if result.burst_kernels is not None else None
    if not kernels:
        return None
    top = kernels[0]
    return f"{short_kernel_name(top['name'], 32)} ({top['launches']:,})"


def _headline(result) -> str:
    """"45 bursts hold 3,013 of 3,025 events (99.6%)", with correct plurals."""
    s, p = result.summary, result.params
    what = "kernel launch" if p["events"] == "kernels" else "event"
    many = "kernel launches" if p["events"] == "kernels" else "events"
    share = s["share_in_bursts"]
    verb = "holds" if s["bursts"] == 1 else "hold"
    text = (f"{plural(s['bursts'], 'burst')} {verb} {s['events_in_bursts']:,} of "
            f"{plural(s['events_counted'], what, many)}")
    return text + (f" ({share:.1%})" if share is not None else "")


def _groups_table(result):
    """One row per series: the pooled one, then each device/stream."""
    series = [("all", result.summary)] + [(g["group"], g["summary"]) for g in result.groups]
    rows = [{"group": name, "counted": s["events_counted"], "bursts": s["bursts"], "in": s["events_in_bursts"],
             "share": s["share_in_bursts"], "bytes": s.get("bytes_in_bursts"),
             "median_ms": _scaled(s["burst_duration_ns"]["median"], NS_PER_MS)} for name, s in series]
    columns = [("group", ""), ("counted", "events"), ("bursts", "bursts"), ("in", "in bursts"),
               ("share", "share"), ("bytes", "bytes in bursts"), ("median_ms", "median duration (ms)")]
    if result.summary["bytes_in_bursts"] is None:
        columns.remove(("bytes", "bytes in bursts"))
    table, _ = rows_table(f"Per {result.params.get('by') or 'group'}", rows, columns, max_rows=0,
                          formatters={"bytes": fmt_bytes})
    return table
