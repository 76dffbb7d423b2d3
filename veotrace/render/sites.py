"""Terminal view of a sites result: per device, who holds the peaks and the end, who strands free bytes; the phases."""

from __future__ import annotations

from rich.console import Console

from veotrace.defaults import SITES_TOP
from veotrace.render.console import fmt_bytes, rows_table, summary_table


def _short(site: str, width: int = 70) -> str:
    """A site's last path components when it is long, cut at a separator (the JSON keeps the full path)."""
    from veotrace.attribution.stacks import short_site

    return short_site(site, width)


def render_sites(console: Console, result, *, max_rows: int) -> None:
    """Draw ``result`` (a SitesResult) on ``console``."""
    s = result.summary
    a = s["annotations"]
    console.print(summary_table("Allocation sites", [
        ("trace entries (with stacks)", f"{s['entries']:,} ({s['entries_with_frames']:,})"),
        ("distinct stacks / sites", f"{s['stacks']:,} / {s['sites']:,}"),
        ("devices", ", ".join(map(str, s["devices"])) or "-"),
        ("annotations (matched, unmatched START/END)",
         f"{a['given']:,} ({a['matched']:,}, {a['unmatched_start']:,}/{a['unmatched_end']:,})")]))
    top = min(SITES_TOP, max_rows) if max_rows > 0 else 0
    for d, v in result.devices.items():
        shown: dict[int, list[str]] = {}  # peaks reached at the same entry share one table
        for kind, peak in v["peaks"].items():
            shown.setdefault(peak["at_entry"], []).append(kind)
        for kinds in shown.values():
            peak = v["peaks"][kinds[0]]
            when = f" at {peak['t_s']:.4g} s" if peak.get("t_s") is not None else ""
            cached = (f", {fmt_bytes(peak['cached_free_bytes'])} cached but free"
                      if peak.get("cached_free_bytes") is not None else "")
            sizes = ", ".join(f"{k} {fmt_bytes(v['peaks'][k]['bytes'])}" for k in kinds)
            _table(console, f"Device {d}: live blocks at peak {' and '.join(kinds)} ({sizes}{when}{cached})",
                   peak["sites"], top)
            own = _own_peaks(v["peaks"], kinds)
            if own:
                console.print(own, highlight=False)
        _table(console, f"Device {d}: live blocks at the end ({fmt_bytes(v['end']['allocated_bytes'])})",
               v["end"]["sites"], top)
        pin = v["pinning"]
        rows = [dict(r, site=_short(r["site"]), age=_age(r)) for r in pin["sites"]]
        table, footer = rows_table(
            f"Device {d}: free bytes stranded in segments by their live blocks ({fmt_bytes(pin['stranded_bytes'])} "
            f"in {pin['segments']} segments)", rows,
            [("site", "site"), ("stranded_bytes", "strands"), ("sole_bytes", "alone"), ("segments", "segments"),
             ("blocks", "blocks"), ("block_bytes", "block bytes"), ("age", "age at end")],
            max_rows=top, formatters={"stranded_bytes": fmt_bytes, "sole_bytes": fmt_bytes, "block_bytes": fmt_bytes})
        console.print(table)
        if footer:
            console.print(footer)
        if v.get("stranded_windows"):
            render_stranded(console, d, v["stranded_windows"], result.params["window_s"], top)
        at = v.get("pinning_at")
        if at and "sites" in at:
            rows = [dict(r, site=_short(r["site"])) for r in at["sites"]]
            table, footer = rows_table(
                f"Device {d}: free bytes stranded at {at['at_s']:g} s ({fmt_bytes(at['stranded_bytes'])} in "
                f"{at['segments']} segments)", rows,
                [("site", "site"), ("stranded_bytes", "strands"), ("sole_bytes", "alone"), ("segments", "segments"),
                 ("blocks", "blocks"), ("block_bytes", "block bytes")],
                max_rows=top, formatters={"stranded_bytes": fmt_bytes, "sole_bytes": fmt_bytes, "block_bytes": fmt_bytes})
            console.print(table)
            if footer:
                console.print(footer)
        elif at:
            console.print(f"[dim]--at:[/] {at['note']}")
    if result.phases:
        render_phases(console, result.phases, max_rows)


def _own_peaks(peaks: dict, kinds: list[str]) -> str | None:
    """The trace's own peaks (its allocations alone, from 0) beside the peaks above, which count the
    blocks live before the trace from its start; None when no block was."""
    parts = [f"{k} {peaks[k]['trace_own']['bytes']:,} B" for k in kinds
             if peaks[k].get("before_trace_bytes") and peaks[k].get("trace_own")]
    if not parts:
        return None
    before = ", ".join(f"{k} {peaks[k]['before_trace_bytes']:,} B" for k in kinds if peaks[k].get("before_trace_bytes"))
    return (f"  the peaks above count the blocks live before the trace from its start ({before}); the trace's "
            f"own peak (its allocations alone, from 0): {', '.join(parts)}")


def render_phases(console: Console, phases: list[dict], max_rows: int) -> None:
    """The record_function phases, by the free bytes each strands from its entry to its exit."""
    table, footer = rows_table("Phases (record_function annotations), by the free bytes they strand",
                               sorted(phases, key=lambda r: -(r.get("stranded_bytes_added") or 0)),
                               [("device", "dev"), ("phase", "phase"), ("allocations", "allocs"),
                                ("allocated_bytes", "allocated"), ("frees", "frees"),
                                ("peak_live_bytes", "peak live"), ("intervals", "ranges"),
                                ("stranded_bytes_added", "strands (exit - entry)"),
                                ("external_frag_at_exit", "ext. frag at exit")],
                               max_rows=max_rows, formatters={"allocated_bytes": fmt_bytes,
                                                              "peak_live_bytes": fmt_bytes,
                                                              "stranded_bytes_added": fmt_bytes})
    console.print(table)
    if footer:
        console.print(footer)


def render_stranded(console: Console, d: str, series: list[dict], window_s: float | None, top: int, *,
                    window_events: int | None = None) -> None:
    """The windows whose end strands the most free bytes on device ``d``, with the site that strands most
    (windows of ``window_s`` seconds, or of ``window_events`` trace entries for a snapshot without times)."""
    rows = [{"end": w["end_s"] if "end_s" in w else w["end_entry"], "stranded": w["stranded_bytes"], "segments": w["segments"],
             "top": _short(w["sites"][0]["site"], 50) if w["sites"] else "-",
             "top_bytes": w["sites"][0]["stranded_bytes"] if w["sites"] else None}
            for w in series if w["stranded_bytes"]]
    rows.sort(key=lambda r: -r["stranded"])  # the windows that strand the most first (JSON: in time order)
    size = f"{window_s:g} s" if window_s else f"{window_events:,} trace entries"
    title = f"Device {d}: the windows whose end strands the most free bytes ({len(series)} windows of {size})"
    table, footer = rows_table(title, rows, [("end", "end (s)" if window_s else "end (entry)"), ("stranded", "stranded"), ("segments", "segments"),
                                             ("top", "top site"), ("top_bytes", "it strands")],
                               max_rows=top, formatters={"stranded": fmt_bytes, "top_bytes": fmt_bytes})
    console.print(table)
    if footer:
        console.print(footer)


def _table(console: Console, title: str, sites: list[dict], top: int) -> None:
    rows = [dict(r, site=_short(r["site"])) for r in sites]
    table, footer = rows_table(title, rows, [("site", "site"), ("bytes", "bytes"), ("blocks", "blocks"),
                                             ("share", "share")],
                               max_rows=top, formatters={"bytes": fmt_bytes,
                                                         "share": lambda v: "-" if v is None else f"{v:.1%}"})
    console.print(table)
    if footer:
        console.print(footer)


def _age(r: dict) -> str:
    a = r.get("age_s")
    parts = [] if a is None else [f"{a['min']:.3g}-{a['max']:.3g} s"]
    if r.get("allocated_before_trace"):
        parts.append(f"{r['allocated_before_trace']} from before the trace")
    return ", ".join(parts) or "-"
