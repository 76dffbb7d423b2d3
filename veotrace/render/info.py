"""Terminal view of `veotrace info`: one key/value block per file."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from veotrace.render.console import fmt_bytes, fmt_value, summary_table

_KIND_TEXT = {"alloc_events": "alloc/free events", "segments": "segments", "blocks": "blocks",
              "gpu_activity": "GPU activity rows", "ncu_metrics": "ncu metric rows", "arrays": "array elements",
              "frames": "frames", "profiler_memory": "memory events (all devices)", "memory_timeline": "memory timeline rows"}
#: Most ops/kinds listed per file in the terminal (JSON has them all).
MAX_LISTED = 6


def _listed(counts: dict) -> str:
    items = [f"{k} {fmt_value(v)}" for k, v in list(counts.items())[:MAX_LISTED]]
    more = len(counts) - MAX_LISTED
    return ", ".join(items) + (f", ... ({more} more)" if more > 0 else "") if items else "-"


def _ids(values: list) -> str:
    return ", ".join(map(str, values[:16])) + (" ..." if len(values) > 16 else "") if values else "-"


def _short(name: str, width: int = 60) -> str:
    """A kernel name cut to ``width`` characters (C++ template names run to thousands; JSON has them whole)."""
    return name if len(name) <= width else name[:width - 1] + "…"


def _kernels(kernels: list[dict], total: int) -> str:
    items = [f"{_short(k['name'])} ({k['launches']:,} launch{'' if k['launches'] == 1 else 'es'})"
             for k in kernels[:MAX_LISTED]]
    more = total - len(items)
    return ", ".join(items) + (f", ... ({more} more)" if more > 0 else "")


def _version(version: dict) -> str:
    shown = {k: v for k, v in version.items() if not isinstance(v, (dict, list))}
    return "; ".join(f"{k}={'none' if v is None else fmt_value(v)}" for k, v in shown.items()) or "-"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds / 3600:.2f} h" if seconds >= 3600 else f"{seconds:.3f} s"


def file_items(info) -> list[tuple[str, object]]:
    """The key/value rows shown for one file (a FileInfo)."""
    span = info.span
    items: list[tuple[str, object]] = [("format", f"{info.format}: {info.description}"),
                                       ("version", _version(info.version))]
    rows = info.version.get("source_rows")
    if rows:
        items.append(("source tables", _listed(rows)))
    for report_key in ("reports", "empty_reports"):
        if info.version.get(report_key):
            items.append((report_key.replace("_", " "), ", ".join(info.version[report_key])))
    for kind, n in info.tables.items():
        items.append((_KIND_TEXT[kind], n))
    if span.get("first_ns") is not None:
        items.append(("time span (ns)", f"{span['first_ns']:,} .. {span['last_ns']:,} ({_duration(span['duration_s'])})"))
    alloc = info.details.get("alloc_events")
    if alloc is not None and alloc["events_without_time"]:
        items.append(("events without time", alloc["events_without_time"]))
    items += [("devices", _ids(info.devices)), ("streams", _ids(info.streams))]
    if alloc is not None and info.tables.get("alloc_events"):
        items.append(("ops", _listed(alloc["ops"])))
        sizes = alloc["alloc_size_bytes"]  # allocations only: a snapshot's one "snapshot" entry is no alloc size
        items.append(("alloc sizes", "none (no alloc events)" if sizes["min"] is None
                      else f"{fmt_bytes(sizes['min'])} .. {fmt_bytes(sizes['max'])}"))
    if alloc is not None:
        from veotrace.analysis.ooms import oom_text

        items += [("recorded OOM", oom_text(o)) for o in alloc.get("recorded_ooms") or ()]
    seg, blk = info.details.get("segments"), info.details.get("blocks")
    if seg is not None:  # a snapshot's state: the first numbers an engineer asks for
        items.append(("reserved", fmt_bytes(seg["reserved_bytes"])))
    if blk is not None:
        free = fmt_bytes(blk["free_bytes"])
        if blk.get("unlisted_bytes"):  # the segments hold more than their listed blocks
            free += (f" in inactive blocks; {fmt_bytes(blk['unlisted_bytes'])} of the segments is in no listed block "
                     "(the snapshot lists only part of their blocks)")
        items += [("allocated", fmt_bytes(blk["allocated_bytes"])), ("free in segments", free),
                  ("largest free block", fmt_bytes(blk["largest_free_bytes"]) if blk["largest_free_bytes"] else "-")]
    for kind, key in (("gpu_activity", "kinds"), ("blocks", "states")):
        if kind in info.details:
            items.append((f"{kind.replace('_', ' ')} {key}", _listed(info.details[kind][key])))
    metrics = info.details.get("ncu_metrics")
    if metrics is not None:
        items.append(("launches / metrics", f"{metrics['launches']} / {metrics['metrics']}"))
    for kind in ("gpu_activity", "ncu_metrics"):
        d = info.details.get(kind)
        if d is not None and d.get("kernels"):
            items.append(("kernels", _kernels(d["kernels"], d["kernel_names"])))
    frames = info.details.get("frames")
    if frames is not None:
        items.append(("frame numbers", f"{frames['first_frame']:,} .. {frames['last_frame']:,} ({frames['frame_source']})"))
        items.append(("metrics", ", ".join(frames["metrics"])))
    items += profiler_items(info.details.get("profiler_memory"), info.details.get("memory_timeline"))
    for name, arr in info.details.get("arrays", {}).get("arrays", {}).items():
        values = f"{fmt_value(arr['min'])} .. {fmt_value(arr['max'])}"
        items.append((f"array {name}", f"{arr['dtype']} shape {tuple(arr['shape'])}, {values}"))
    items.append(("supports", ", ".join(info.supports) or "none of the analyses"))
    items += [("problem", p) for p in info.problems]
    return items


def profiler_items(prof: dict | None, timeline: dict | None) -> list[tuple[str, object]]:
    """A profiler trace's rows: per device its events, live before profiling, peaks and rises; CPU apart; lacks."""
    items: list[tuple[str, object]] = []
    if prof is not None:
        if prof.get("ranks"):
            items.append(("ranks", _ids(prof["ranks"])))
        for name, d in prof.get("lanes", {}).items():
            if d.get("peak_reserved_bytes") is not None or d.get("peak_allocated_bytes") is not None:
                text = (f"{d['events']:,} events; live before profiling {fmt_bytes(d['live_before_bytes'])}; peak allocated "
                        f"{fmt_bytes(d['peak_allocated_bytes'])}, peak reserved {fmt_bytes(d['peak_reserved_bytes'])}, "
                        f"{d['reserved_rises']:,} rises of reserved")
            else:
                text = (f"{d['events']:,} events; peak of the running sum of Bytes {fmt_bytes(d['running_sum_peak_bytes'])} "
                        "(plus the unknown bytes live before profiling)")
            if d.get("peak_reserved_share") is not None:  # deviceProperties' totalGlobalMem
                text += (f"; {d['peak_reserved_share']:.1%} of the {d.get('device_name') or 'device'}'s "
                         f"{fmt_bytes(d['capacity_bytes'])} reserved at the peak ({fmt_bytes(d['headroom_bytes'])} "
                         "from full)")
            if d.get("mismatches"):
                text += f"; {d['mismatches']:,} events off the running sum"
            pair = d.get("pairing") or {}
            if pair.get("frees_of_unknown"):
                text += f"; {pair['frees_of_unknown']:,} frees of blocks from before profiling"
            if pair.get("size_mismatches") or pair.get("allocs_at_live_address"):
                text += (f"; {pair['size_mismatches']:,} frees of the wrong size, {pair['allocs_at_live_address']:,} "
                         "allocations at a live address")
            items.append((name + (" (kept apart)" if d.get("kind") == "cpu" and prof.get("gpu_events") else ""), text))
        for f in prof.get("files", []):
            if f.get("cut"):
                c = f["cut"]
                items.append(("cut", f"{c['reason']} at byte {c['at_byte']:,}: read up to byte {c['read_to_byte']:,}"))
        items += [("lacks", text) for text in prof.get("lacks", [])]
    if timeline is not None:
        if timeline.get("form"):
            items.append(("timeline form", timeline["form"]))
        items.append(("peak of the categories' sum", f"{fmt_bytes(timeline['peak_bytes'])}; live before profiling "
                      f"{fmt_bytes(timeline['before_profiling_bytes'])}; over time: veotrace categories FILE"))
        items.append(("bytes by category at the peak", _listed({k: fmt_bytes(v) for k, v in timeline["at_peak"].items()})))
        items.append(("bytes by category at the end", _listed({k: fmt_bytes(v) for k, v in timeline["end"].items()})))
    return items


def render_info(console: Console, infos: list) -> None:
    """Draw each file's description (FileInfo objects).

    Files that are no supported format are left out: the CLI reports them as ``Error:`` lines on stderr.
    """
    for info in infos:
        if info.error:
            continue
        # Paths, kernel names and hints hold brackets ("[CUDA memcpy HtoD]", "veotrace[ncu]"): not markup.
        items = [(k, escape(v) if isinstance(v, str) else v) for k, v in file_items(info)]
        console.print(summary_table(escape(info.path), items))
        console.print()
