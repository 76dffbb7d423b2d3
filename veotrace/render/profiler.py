"""Terminal views of a profiler trace's own results: ``sites`` by op/frame/module/kernel with the ops that grew
reserved memory, and the recorded totals ``fragmentation`` shows beside its replay. Names from the trace are
text (escaped), never markup."""

from __future__ import annotations

from rich.markup import escape

from veotrace.render.console import fmt_bytes, fmt_value, rows_table


def _name(text) -> str:
    text = "-" if text is None else str(text)
    return escape(text if len(text) <= 80 else text[:79] + "…")


def render_profiler_sites(console, value: dict, *, max_rows: int = 40) -> None:
    by = value["by"]
    for dev, v in value["devices"].items():
        for where, title in (("at_peak", f"{dev}: live bytes at the peak ({fmt_bytes(v['peak_bytes'])} {v['peak_is']}) by {by}"),
                             ("at_end", f"{dev}: live bytes at the end of the trace by {by}")):
            table, footer = rows_table(escape(title), v[where], [("name", by), ("bytes", "bytes"), ("blocks", "blocks"),
                                                                 ("share", "share")],
                                       max_rows=max_rows, formatters={"name": _name, "bytes": fmt_bytes})
            console.print(table)
            if footer:
                console.print(footer)
    for dev, g in value["reserved_growth"].items():
        rows = [{**r, "kernel": next(iter(r["kernels"]), None)} for r in g["by_op"]]
        table, footer = rows_table(escape(f"{dev}: ops during which Total Reserved rose ({g['rises']:,} rises, "
                                          f"{fmt_bytes(g['rise_bytes'])})"), rows,
                                   [("op", "op"), ("bytes", "reserved grew by"), ("rises", "rises"),
                                    ("kernel", "GPU running then")],
                                   max_rows=max_rows, formatters={"op": _name, "kernel": _name, "bytes": fmt_bytes})
        console.print(table)
        if footer:
            console.print(footer)
        table, footer = rows_table(escape(f"{dev}: ops after which memory stayed cached but free longest"),
                                   g["cached_free_after"], [("op", "op"), ("byte_seconds", "cached-free byte-seconds")],
                                   max_rows=min(max_rows, 10) if max_rows > 0 else 0,
                                   formatters={"op": _name, "byte_seconds": lambda x: fmt_value(round(x))})
        console.print(table)
    if value.get("finding"):
        console.print(escape(value["finding"]["text"]))


def render_recorded_totals(console, recorded: dict) -> None:
    """Each device's recorded peaks (Total Allocated / Total Reserved) and the note, once."""
    rows = [{"device": d, "peak_allocated": v["peak_allocated_bytes"], "peak_reserved": v["peak_reserved_bytes"],
             "peak_cached_free": v["peak_cached_free_bytes"], "end_reserved": v["end_reserved_bytes"],
             "end_allocated": v["end_allocated_bytes"]} for d, v in recorded["devices"].items()]
    if not rows:
        return
    table, _ = rows_table("Recorded by the profiler (Total Allocated / Total Reserved)", rows,
                          [("device", "device"), ("peak_allocated", "peak allocated"), ("peak_reserved", "peak reserved"),
                           ("peak_cached_free", "peak cached free"), ("end_allocated", "allocated at end"),
                           ("end_reserved", "reserved at end")], max_rows=0,
                          formatters={k: fmt_bytes for k in ("peak_allocated", "peak_reserved", "peak_cached_free",
                                                             "end_allocated", "end_reserved")})
    console.print(table)
    console.print(escape(f"note: {recorded['note']}"))
    if recorded.get("columns"):
        console.print(escape(f"note: {recorded['columns']}"))
