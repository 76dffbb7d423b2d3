"""What a trace file holds, before any analysis: tables and rows, time span, devices, ops, sizes, commands.

``describe(probe)`` summarises each table a file provides (alloc/free events are streamed, never held
whole). A table whose reader refuses the file, or does not exist yet, becomes a problem line with the
reason instead of an error, so one call describes every file it is given.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from veotrace.analysis.table_summary import SUMMARISERS, frames_summary, time_span
from veotrace.defaults import CHANGEPOINT_MIN_SIZE
from veotrace.errors import VeotraceError


@dataclass
class FileInfo:
    """The description of one file (see :func:`describe`)."""

    path: str
    format: str | None
    description: str | None
    version: dict = field(default_factory=dict)
    tables: dict[str, int] = field(default_factory=dict)  # kind -> rows
    details: dict[str, dict] = field(default_factory=dict)  # kind -> summary of that table
    span: dict = field(default_factory=dict)  # first_ns, last_ns, duration_s of the first timed table
    devices: list = field(default_factory=list)  # seen in any table
    streams: list = field(default_factory=list)
    supports: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    error: str | None = None  # the file is none of the supported formats (or empty)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def describe(probe: Any) -> FileInfo:
    """Describe a probed file (``veotrace.sources.probe.Probe``): every table it provides, summarised."""
    fmt = probe.fmt
    info = FileInfo(str(probe.path), fmt.name if fmt else None, fmt.description if fmt else None,
                    version=dict(probe.version), error=without_path(probe.error) if probe.error else None)
    failed: dict[str, list[str]] = {}  # reason -> what it stopped (one line per reason, not per table)
    if probe.version_error:
        failed[without_path(probe.version_error)] = ["version"]
    for kind in probe.kinds:
        try:
            summary = SUMMARISERS[kind](probe.load(kind))
        except VeotraceError as exc:
            failed.setdefault(without_path(exc), []).append(kind)
            continue
        info.tables[kind] = summary.pop("rows")
        info.details[kind] = summary
    if info.format == "parquet":
        _converted_traces(probe.path, info, failed)
    info.problems = [f"{', '.join(k for k in what if k != 'version') or 'version'}: {reason}"
                     for reason, what in failed.items()]
    seg, blk = info.details.get("segments"), info.details.get("blocks")
    if seg is not None and blk is not None:  # bytes of the segments in no listed block: free, but not listed as such
        blk["unlisted_bytes"] = max(0, seg["reserved_bytes"] - blk["listed_bytes"])
    info.span = span_of(info)
    info.devices, info.streams = devices_and_streams(info)
    info.supports = supported_commands(info)
    if _too_many_devices(info):
        from veotrace.defaults import MAX_DEVICES

        info.problems.append(f"{len(info.devices):,} devices, past the {MAX_DEVICES:,} that fragmentation and "
                             "simulate replay (each device on its own allocator state): they refuse this file")
    return info


def _converted_traces(path, info: FileInfo, failed: dict) -> None:
    """A Parquet file ``convert`` wrote from profiler traces: their own summary beside the events' (as ``info``
    gives the traces), read from the tables beside it (``sources.kineto.converted``)."""
    from pathlib import Path

    import pyarrow as pa

    from veotrace.sources.base import ReadOptions, ReadReport
    from veotrace.sources.kineto.converted import sides_of
    from veotrace.sources.kineto.trace import read_profiler_memory

    try:
        sides = sides_of(path if isinstance(path, Path) else Path(str(path)))
        if not sides:
            return
        tables = [read_profiler_memory(p, options=ReadOptions(), report=ReadReport()) for p in sides]
    except VeotraceError as exc:
        failed.setdefault(without_path(exc), []).append("profiler_memory")
        return
    table = tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="permissive")
    summary = SUMMARISERS["profiler_memory"](table)
    info.tables["profiler_memory"] = summary.pop("rows")
    info.details["profiler_memory"] = summary


def without_path(exc: VeotraceError) -> str:
    """The error's text with line, column and hint but not the path (the file is named already)."""
    bare = copy.copy(exc)
    bare.path = None
    return str(bare)


def describe_frames(path: str, frames: Any) -> FileInfo:
    """Describe a per-frame metrics table (``sources.frames.FrameMetrics``), which only `coherence` reads."""
    info = FileInfo(path, "frames", "per-frame metrics table (CSV, Parquet, JSON Lines or a service's JSON)",
                    version={"container": frames.kind, "frame_source": frames.frame_source})
    summary = frames_summary(frames)
    info.tables["frames"] = summary.pop("rows")
    info.details["frames"] = summary
    info.span = time_span(None, None)
    info.supports = supported_commands(info)
    return info


def supported_commands(info: FileInfo) -> list[str]:
    """The veotrace commands that will run on this file with their defaults, given what was read from it.

    One line per analysis of ``veotrace.registry`` whose ``supports`` check accepts the file, in the
    registry's order.
    """
    from veotrace import registry

    out = []
    for entry in registry.ENTRIES:
        line = registry.resolve(entry.supports)(info) if entry.supports else None
        if line:
            out.append(line)
    return out


def _alloc(info: FileInfo) -> tuple[dict | None, bool, bool]:
    """(alloc_events details or None, whether allocs are counted, whether events are timed)."""
    alloc = info.details.get("alloc_events")
    if alloc is None or not info.tables.get("alloc_events"):
        return None, False, False
    return alloc, bool(alloc["ops"].get("alloc")), alloc["events_without_time"] < info.tables["alloc_events"]


def supports_entropy(info: FileInfo) -> str | None:
    """entropy counts alloc events by default: a snapshot whose trace holds none (only a ``snapshot``
    entry, or segments without a trace) feeds it not; untimed events need ``--window-events``."""
    alloc, counted, timed = _alloc(info)
    if alloc is None or not counted:
        return None
    return "entropy" if timed else "entropy --window-events N"


def supports_sites(info: FileInfo) -> str | None:
    """sites attributes a PyTorch snapshot: its segments and blocks (the end state and stranded bytes),
    and its trace when it has one (the peaks and phases); a profiler trace's GPU events by the op around them."""
    if info.format in ("kineto", "parquet") and (info.details.get("profiler_memory") or {}).get("gpu_events"):
        return "sites --by op"  # a profiler trace: by the op, frame, module or kernel around each allocation
    return "sites" if info.format == "torch-snapshot" and info.tables.get("segments") else None


def supports_view(info: FileInfo) -> str | None:
    """view draws what fragmentation replays over time: a PyTorch snapshot, or alloc/free events with addresses
    (not an array of addresses, which has no time)."""
    if info.format == "torch-snapshot" and info.tables.get("segments"):
        return "view"
    arrays = (info.details.get("arrays") or {}).get("arrays")
    if arrays:
        return None
    if supports_fragmentation(info):
        return "view"
    # a profiler trace without addresses (the 2021 format) or of CPU events only: the lanes of live bytes over
    # time, without a map (viewer.profiler says so). A log without an address column draws so too, but is not
    # listed: the report would put that map-less page in place of its still pictures of the log
    return "view" if info.format == "kineto" and info.tables.get("profiler_memory") else None


def supports_diff(info: FileInfo) -> str | None:
    """diff compares two runs of alloc/free events (a snapshot's state alone too: its fragmentation and sites)."""
    if _alloc(info)[0] is None and info.format != "torch-snapshot":
        return None
    return "diff"


def supports_convert(info: FileInfo) -> str | None:
    """convert writes any file that holds alloc/free events."""
    return "convert" if _alloc(info)[0] is not None else None


def supports_bursts(info: FileInfo) -> str | None:
    """bursts needs counted alloc events with times."""
    _, counted, timed = _alloc(info)
    return "bursts" if counted and timed else None


def supports_kernel_bursts(info: FileInfo) -> str | None:
    """bursts --events kernels needs an Nsight export with kernel launches."""
    gpu = info.details.get("gpu_activity")
    return "bursts --events kernels" if gpu is not None and gpu["kinds"].get("kernel") else None


def supports_l2(info: FileInfo) -> str | None:
    """l2-breakpoints finds change points from ``2 * CHANGEPOINT_MIN_SIZE`` launches of a kernel; with
    fewer it shows the per-kernel picture only."""
    ncu = info.details.get("ncu_metrics")
    if ncu is None or not info.tables.get("ncu_metrics"):
        return None
    flag = "" if ncu["has_l2_hit_rate"] or ncu["has_l2_throughput"] else " --metric NAME"
    enough = ncu["max_launches_per_kernel"] >= 2 * CHANGEPOINT_MIN_SIZE
    return f"l2-breakpoints{flag}" + ("" if enough else " (per-kernel picture only)")


def supports_correlate(info: FileInfo) -> str | None:
    """correlate reads arrays of frames: an address jump per pair of consecutive frames, and at least
    MIN_PAIRS pairs (a correlation of two points is always +-1), so an array of MIN_PAIRS + 1 frames or more."""
    from veotrace.analysis.frames.correlation import MIN_PAIRS

    arrays = (info.details.get("arrays") or {}).get("arrays", {})
    frames = [a["shape"][0] for a in arrays.values() if a.get("shape")]
    return "correlate" if info.tables.get("arrays") and frames and max(frames) > MIN_PAIRS else None


def supports_coherence(info: FileInfo) -> str | None:
    """coherence reads per-frame metric tables."""
    return "coherence" if info.tables.get("frames") else None


#: Share of checked frees that must pair with an earlier alloc for ``fragmentation`` to be listed (below it
#: the addresses are not the allocator's, e.g. logged per tensor view, and every free would be "unknown").
FRAGMENTATION_MIN_PAIRED = 0.5


def _pairing(info: FileInfo) -> tuple[dict | None, int, int]:
    """(alloc_events details or None, frees checked, frees paired with an earlier alloc)."""
    alloc = info.details.get("alloc_events") if info.tables.get("alloc_events") else None
    addr = (alloc or {}).get("addresses") or {}
    return alloc, addr.get("frees_checked", 0), addr.get("frees_paired", 0)


def supports_fragmentation(info: FileInfo) -> str | None:
    """fragmentation pairs frees with allocs by address: allocs with addresses whose frees mostly pair
    (or no frees), a PyTorch snapshot's segments and blocks (its state alone, without a trace), or one
    array of non-negative integer addresses (a stride summary)."""
    alloc, checked, paired = _pairing(info)
    addr = (alloc or {}).get("addresses") or {}
    placed = addr.get("addressed_allocs", 0) > 0 and (checked == 0 or paired >= FRAGMENTATION_MIN_PAIRED * checked)
    snapshot = bool(info.tables.get("segments")) and "blocks" in info.tables
    arrays = (info.details.get("arrays") or {}).get("arrays", {})
    strides = len(arrays) == 1 and all(a["dtype"][1] == "u" or (a["dtype"][1] == "i" and (a["min"] is None or a["min"] >= 0))
                                       for a in arrays.values())
    if (placed or snapshot) and _too_many_devices(info):
        return None
    if placed or snapshot or strides:
        return "fragmentation (address strides)" if strides and not (placed or snapshot) else "fragmentation"
    return None


def _too_many_devices(info: FileInfo) -> bool:
    """More devices than the replays take (``defaults.MAX_DEVICES``): fragmentation and simulate refuse."""
    from veotrace.defaults import MAX_DEVICES

    return len(info.devices) > MAX_DEVICES


def supports_simulate(info: FileInfo) -> str | None:
    """simulate needs allocs with a size and frees of which at most SIMULATE_MAX_UNKNOWN_FREES name no
    earlier alloc (checked on the first table_summary.PAIRING_SAMPLE frees; a snapshot's frees of blocks
    live before its trace count as unknown here, so this errs on refusing)."""
    from veotrace.defaults import SIMULATE_MAX_UNKNOWN_FREES

    alloc, checked, paired = _pairing(info)
    sized = alloc is not None and (alloc["alloc_size_bytes"]["max"] or 0) > 0
    if sized and checked and checked - paired <= SIMULATE_MAX_UNKNOWN_FREES * checked and not _too_many_devices(info):
        return "simulate"
    return None


def supports_tune(info: FileInfo) -> str | None:
    """tune replays what simulate replays (the torch model, once per setting)."""
    return "tune" if supports_simulate(info) else None


TABLE_KINDS = ("alloc_events", "segments", "blocks", "gpu_activity", "ncu_metrics", "arrays", "frames",
               "profiler_memory", "memory_timeline")


def span_of(info: FileInfo) -> dict:
    """The time span of the first timed table (alloc events, then GPU activity), or all None."""
    for kind in ("alloc_events", "gpu_activity"):
        d = info.details.get(kind)
        if d is not None and d.get("first_ns") is not None:
            return {k: d[k] for k in ("first_ns", "last_ns", "duration_s")}
    return time_span(None, None)


def devices_and_streams(info: FileInfo) -> tuple[list, list]:
    """Devices and streams seen in any table of the file."""
    devices, streams = set(), set()
    for d in info.details.values():
        devices.update(d.get("devices", ()))
        streams.update(d.get("streams", ()))
    return sorted(devices), sorted(streams)


def info_table(infos: list[FileInfo]) -> pa.Table:
    """One INFO_FILES row per file (for --format csv/parquet)."""
    import json

    from veotrace.schemas.info import INFO_FILES

    rows = []
    for i in infos:
        span, devices, streams = i.span or time_span(None, None), i.devices, i.streams
        rows.append({"path": i.path, "format": i.format,
                     "version": json.dumps(i.version, default=str) if i.version else None,
                     **{k: i.tables.get(k) for k in TABLE_KINDS},
                     "first_ns": span["first_ns"], "last_ns": span["last_ns"],
                     "devices": ",".join(map(str, devices)) or None, "streams": ",".join(map(str, streams)) or None,
                     "supports": "; ".join(i.supports) or None, "problems": "; ".join(i.problems) or None,
                     "error": i.error})
    return pa.Table.from_pylist(rows, schema=INFO_FILES)


def describe_all(probes: list, skipped: list[str], read_frames: Any) -> tuple[list[FileInfo], list[str]]:
    """FileInfos of probed files, as ``veotrace info`` and the report show them.

    Files no reader detects (and folder files that were skipped) are tried as per-frame metric tables
    with ``read_frames(path) -> frames or None`` (the reader is passed in: analyses read no files).

    Returns:
        The FileInfos, and the skipped names that are not frame tables either.
    """
    from pathlib import Path

    infos = []
    for p in probes:
        frames = read_frames(p.path) if p.fmt is None and p.error is not None else None
        infos.append(describe_frames(str(p.path), frames) if frames else describe(p))
    kept = []
    for name in skipped:
        frames = read_frames(Path(name))
        if frames:
            infos.append(describe_frames(name, frames))
        else:
            kept.append(name)
    return infos, kept
