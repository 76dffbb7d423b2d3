"""Terminal view of a fragmentation result, its stride summary, and the warnings for counted problems."""

from __future__ import annotations

from rich.console import Console

from veotrace.render.console import fmt_bytes, fmt_value, rows_table, summary_table

#: Counter -> what it means, for the stderr warnings (counts of 0 are not shown).
WARNINGS = {
    "unknown_frees": "free(s) of blocks never seen allocated (the trace starts part-way, or frees are logged at other addresses)",
    "oversize_frees": "free(s) larger than the block they release",
    "double_allocs": "alloc(s) at an address that was still live (the older block was dropped)",
    "unknown_segment_frees": "segment free/unmap event(s) of ranges never reserved",
    "duplicate_segments": "segment alloc/map event(s) over ranges already reserved",
    "events_without_address": "alloc/free row(s) without an address (not placed)",
    "out_of_order": "event(s) older than one already replayed on their device (replayed at the later time)",
    "blocks_mismatch_segments": "snapshot segment(s) whose blocks do not add up to the segment size",
    "inconsistent_entries": "trace entries the final snapshot contradicts",
    "allocs_outside_segments": ("allocation(s) at addresses in no segment known by then: the trace and "
                                "the segments disagree (segments released before the snapshot, with no segment events "
                                "recorded)"),
}

#: The windows' state at their end (one kind per table: the peaks within each window are the next).
_WINDOW_COLUMNS = [("window", "k"), ("device", "dev"), ("events", "events"), ("live_bytes", "live"),
                   ("reserved_bytes", "reserved"), ("free_bytes", "free"), ("largest_free_bytes", "largest free"),
                   ("external_frag", "ext frag"), ("fragmented", "frag?")]
_PEAK_COLUMNS = [("window", "k"), ("device", "dev"), ("live_bytes_peak", "live peak"),
                 ("reserved_bytes_peak", "reserved peak"), ("gmlake_frag", "GMLake (1 - live peak / reserved peak)")]
_BYTES = {"live_peak", "live_bytes", "live_bytes_peak", "reserved_bytes", "reserved_bytes_peak", "free_bytes",
          "largest_free_bytes", "bytes"}


def _timed_rows(rows: list[dict], columns: list[tuple[str, str]]) -> tuple[list[dict], list[tuple[str, str]]]:
    """Window rows with their start as time since the first window, in a unit that fits the span (the
    absolute window numbers, e.g. 17,572,532,552, say nothing; they and absolute times stay in the JSON).
    Windows of events (no start time) keep their number."""
    from veotrace.analysis.timescale import NS_PER_S, duration_unit

    starts = [r["start_ns"] for r in rows if r.get("start_ns") is not None]
    if not starts or len(starts) < len(rows):
        return rows, columns
    t0, span = min(starts), (max(r["end_ns"] for r in rows) - min(starts)) / NS_PER_S
    unit, scale = duration_unit(span)
    out = [{**r, "since": round((r["start_ns"] - t0) / NS_PER_S / scale, 6)} for r in rows]
    return out, [("since", f"start ({unit})"), *columns[1:]]


def warning_lines(counters: dict, end: dict | None = None, disagree: dict | None = None) -> list[str]:
    """One ``Warning:`` line per non-zero problem counter, and for overlapping blocks at the end; with
    ``disagree`` (the summary's ``segments_disagree``), which figures still hold."""
    out = [f"Warning: {counters[k]:,} {text}" for k, text in WARNINGS.items() if counters.get(k)]
    if disagree:
        out.append(f"Warning: {' and '.join(disagree['hold'])} hold; {'; '.join(disagree['do_not_hold'])}: "
                   f"a reserved peak of {fmt_bytes(disagree['reserved_peak_bytes'])} under a live peak of "
                   f"{fmt_bytes(disagree['live_peak_bytes'])}")
    if end and end.get("overlaps"):
        out.append(f"Warning: {end['overlaps']:,} pair(s) of live blocks overlap at the end of the trace "
                   "(two allocations at overlapping addresses)")
    if end and end.get("blocks_outside_segments"):
        out.append(f"Warning: {end['blocks_outside_segments']:,} live block(s) lie outside every known segment")
    return out


def render_fragmentation(console: Console, result, *, max_rows: int, at: str | None = None) -> None:
    """Draw a FragmentationResult: the state asked for (``at``: the --at TIME given, whose state is
    ``result.at``; else the end), the windows, hot zones, alignment and strides."""
    asked = result.at is not None
    state = result.at if asked else result.end
    e, c = state["total"], result.counters
    devices = state.get("devices") or {}
    several = len(devices) > 1
    items = [("events read", result.summary["events_read"]), ("windows", result.summary["windows"]),
             ("fragmented windows" + (f" ({result.params['fragmented_when']})" if result.params.get("fragmented_when") else ""),
              result.summary["fragmented_windows"]),
             ("reserved", fmt_bytes(e.get("reserved_bytes"))), ("allocated", fmt_bytes(e.get("allocated_bytes"))),
             ("internal (rounding)", fmt_bytes(e.get("internal_bytes"))),
             ("inactive (reserved - allocated)", fmt_bytes(e.get("inactive_bytes"))),
             ("free blocks", e.get("free_blocks")), ("free bytes", fmt_bytes(e.get("free_bytes"))),
             ("largest free block" + (" (on one device)" if several else ""), fmt_bytes(e.get("largest_free_bytes"))),
             ("external frag (1 - largest/free)" + (" pooled" if several else ""), e.get("external_frag")),
             ("ranges from", e.get("range_method")),
             ("blocks before the trace", c["pre_existing_blocks"]), ("unknown frees", c["unknown_frees"])]
    title = f"Fragmentation at +{at} (--at)" if asked else "Fragmentation at the end of the trace"
    console.print(summary_table(title, items))
    if several:  # a free block never serves another device: each device's own numbers
        rows = [{"device": d, **v} for d, v in sorted(devices.items(), key=lambda kv: int(kv[0]))]
        per, more = rows_table("Per device (the totals above pool them)", rows, [
            ("device", "device"), ("reserved_bytes", "reserved"), ("allocated_bytes", "allocated"),
            ("free_bytes", "free"), ("largest_free_bytes", "largest free"), ("external_frag", "ext frag")],
            max_rows=max_rows, formatters={k: fmt_bytes for k in ("reserved_bytes", "allocated_bytes", "free_bytes",
                                                                  "largest_free_bytes")},
            how_to_get_all="use --rows 0, or --format json")
        console.print(per)
        if more:
            console.print(more)
    fmts = {k: fmt_bytes for k in _BYTES}
    every = result.windows.to_pylist()
    for title, cols in (("Windows: the state at each window's end", _WINDOW_COLUMNS),
                        ("Windows: the peaks within each window", _PEAK_COLUMNS)):
        rows, columns = _timed_rows(every, cols)
        table, footer = rows_table(title, rows, columns, max_rows=max_rows,
                                   formatters=fmts, how_to_get_all="use --rows 0, or --format csv")
        console.print(table)
        if footer:
            console.print(footer)
    zones, _ = rows_table("Hot zones", result.zones.to_pylist(),
                          [("rank", "#"), ("device", "dev"), ("zone_start", "zone"), ("zone_kind", "kind"),
                           ("zone_bytes", "size"), ("events", "events"),
                           ("event_share", "share of events"), ("bytes", "bytes"), ("byte_share", "share of bytes")],
                          max_rows=10, formatters={"zone_start": hex, "zone_bytes": fmt_bytes, "bytes": fmt_bytes})
    console.print(zones)
    al = ", ".join(f"{fmt_bytes(a['alignment_bytes'])}: {fmt_value(a['share'])}" for a in result.layout["alignment"])
    console.print(f"aligned allocation addresses: {al}")
    render_strides(console, result.layout["strides"])


def render_strides(console: Console, s: dict) -> None:
    """The dominant strides between consecutive addresses and how regular the sequence is."""
    console.print(f"strides: {s['strides']:,}, distinct {s['distinct']:,}, dominant "
                  f"{fmt_value(s['dominant_stride_bytes'])} B with share {fmt_value(s['dominant_share'])}")
    table, _ = rows_table("Top strides", s["top"], [("stride_bytes", "stride (B)"), ("count", "count"), ("share", "share")],
                          max_rows=10)
    console.print(table)
