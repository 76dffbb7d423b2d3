"""What a trace file holds, before any analysis: tables and rows, time span, devices, ops, sizes, commands.

``describe(probe)`` summarises each table a file provides (alloc/free events are streamed, never held
whole). A table whose reader refuses the file, or does not exist yet, becomes a problem line with the
reason instead of an error, so one call describes every file it is given.
"""

from __future__ import annotations

import copy
import dataclasses
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from veotrace.analysis.defaults import CHANGEPOINT_MIN_SIZE
from veotrace.errors import VeotraceError

NS_PER_S = 1e9


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
    info.problems = [f"{', '.join(k for k in what if k != 'version') or 'version'}: {reason}"
                     for reason, what in failed.items()]
    info.span = span_of(info)
    info.devices, info.streams = devices_and_streams(info)
    info.supports = supported_commands(info)
    return info


def without_path(exc: VeotraceError) -> str:
    """The error's text with line, column and hint but not the path (the file is named already)."""
    bare = copy.copy(exc)
    bare.path = None
    return str(bare)


def _span(lo: int | None, hi: int | None) -> dict:
    return {"first_ns": lo, "last_ns": hi, "duration_s": None if lo is None else (hi - lo) / NS_PER_S}


def _values(arrays: Iterable[pa.Array]) -> list:
    seen: set = set()
    for arr in arrays:
        seen.update(v for v in pc.unique(arr).to_pylist() if v is not None)
    return sorted(seen)


def _counts(arr: pa.Array | pa.ChunkedArray) -> Counter:
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    vc = pc.value_counts(arr)
    return Counter(dict(zip(vc.field("values").to_pylist(), vc.field("counts").to_pylist())))


def _minmax(arr) -> tuple[int | None, int | None]:
    if len(arr) == 0 or arr.null_count == len(arr):
        return None, None
    mm = pc.min_max(arr)
    return mm["min"].as_py(), mm["max"].as_py()


def _widen(cur: tuple, new: tuple) -> tuple:
    lo = min(v for v in (cur[0], new[0]) if v is not None) if cur[0] is not None or new[0] is not None else None
    hi = max(v for v in (cur[1], new[1]) if v is not None) if cur[1] is not None or new[1] is not None else None
    return lo, hi


#: Frees checked against earlier alloc addresses for ``frees_paired``: the batches up to the one reaching this
#: many (a bounded sample at the start; about 0.3 s per file past 100k frees, nothing more on longer logs).
PAIRING_SAMPLE = 100_000
_FREE_OPS = ("free", "free_requested", "free_completed")


class _Pairing:
    """Counts, over the first PAIRING_SAMPLE frees, those naming an address allocated before on their device."""

    def __init__(self) -> None:
        self.live: set = set()
        self.checked: Counter = Counter()  # free op -> frees checked
        self.paired: Counter = Counter()
        self.addressed_allocs = 0

    def add(self, b: pa.RecordBatch, ops: pa.Array) -> None:
        if "address" not in b.schema.names:
            return
        addr = b.column("address")
        has = pc.is_valid(addr)
        self.addressed_allocs += pc.sum(pc.and_(has, pc.equal(ops, "alloc"))).as_py() or 0
        if sum(self.checked.values()) >= PAIRING_SAMPLE:
            return
        keep = pc.and_(has, pc.is_in(ops, pa.array(("alloc",) + _FREE_OPS)))
        dev = b.column("device") if "device" in b.schema.names else pa.nulls(b.num_rows, pa.int64())
        for op, a, d in zip(ops.filter(keep).to_pylist(), addr.filter(keep).to_pylist(), dev.filter(keep).to_pylist()):
            if op == "alloc":
                self.live.add((d, a))
            else:
                self.checked[op] += 1
                self.paired[op] += (d, a) in self.live

    def summary(self) -> dict:
        """{addressed_allocs, frees_checked, frees_paired} (frees: free_completed when logged, as simulate pairs)."""
        op = "free_completed" if self.checked.get("free_completed") else "free_requested"
        checked = self.checked["free"] + self.checked[op]
        return {"addressed_allocs": self.addressed_allocs, "frees_checked": checked,
                "frees_paired": self.paired["free"] + self.paired[op]}


def alloc_summary(batches: Iterable[pa.RecordBatch]) -> dict:
    """Rows, time span, devices, streams, op counts and size ranges of ALLOC_EVENTS batches (streamed).

    ``addresses`` says how many allocs carry an address and, of the first PAIRING_SAMPLE frees, how many
    free an address allocated earlier on their device (what fragmentation and simulate pair by).
    """
    rows, untimed, ops, kinds = 0, 0, Counter(), Counter()
    span, sizes, alloc_sizes = (None, None), (None, None), (None, None)
    devices, streams = set(), set()
    pairing = _Pairing()
    for b in batches:
        rows += b.num_rows
        ts = b.column("ts_ns")
        untimed += ts.null_count
        span = _widen(span, _minmax(ts))
        ops += _counts(b.column("op"))
        kinds += _counts(b.column("mem_kind"))
        devices.update(_values([b.column("device")]))
        streams.update(_values([b.column("stream")]))
        size = b.column("size_bytes")
        sizes = _widen(sizes, _minmax(size))
        op_text = b.column("op").cast(pa.string())
        is_alloc = pc.equal(op_text, "alloc")
        alloc_sizes = _widen(alloc_sizes, _minmax(size.filter(is_alloc)))
        pairing.add(b, op_text)
    kinds.pop(None, None)
    return {"rows": rows, **_span(*span), "events_without_time": untimed, "devices": sorted(devices),
            "streams": sorted(streams), "ops": dict(ops.most_common()), "mem_kinds": dict(kinds.most_common()),
            "alloc_size_bytes": {"min": alloc_sizes[0], "max": alloc_sizes[1]},
            "size_bytes": {"min": sizes[0], "max": sizes[1]}, "addresses": pairing.summary()}


#: Kernels listed per file, most launched first (``kernel_names`` counts them all).
MAX_KERNELS = 20


def _kernel_launches(names: pa.Array | pa.ChunkedArray) -> list[dict]:
    """[{name, launches}] most launched first (ties by name), at most MAX_KERNELS."""
    counts = _counts(names)
    counts.pop(None, None)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [{"name": k, "launches": int(v)} for k, v in ranked[:MAX_KERNELS]]


def gpu_summary(table: pa.Table) -> dict:
    """Rows, activity kinds, span, devices, streams and kernel names with launch counts of a GPU_ACTIVITY table."""
    kernels = table.filter(pc.equal(table.column("kind").cast(pa.string()), "kernel"))
    lo, _ = _minmax(table.column("start_ns"))
    _, hi = _minmax(table.column("end_ns"))
    names = kernels.column("name").cast(pa.string())
    return {"rows": table.num_rows, "kinds": dict(_counts(table.column("kind")).most_common()), **_span(lo, hi),
            "devices": _values([table.column("device")]), "streams": _values([table.column("stream")]),
            "kernel_names": len(_values([names])), "kernels": _kernel_launches(names)}


def segments_summary(table: pa.Table) -> dict:
    """Rows, reserved bytes, devices, streams and segment types of a SEGMENTS table."""
    return {"rows": table.num_rows, "reserved_bytes": pc.sum(table.column("total_size_bytes")).as_py() or 0,
            "devices": _values([table.column("device")]), "streams": _values([table.column("stream")]),
            "segment_types": dict(_counts(table.column("segment_type")).most_common()),
            "pools": _values([table.column("pool").cast(pa.string())])}


def blocks_summary(table: pa.Table) -> dict:
    """Rows, states and block size range of a BLOCKS table."""
    lo, hi = _minmax(table.column("size_bytes"))
    return {"rows": table.num_rows, "states": dict(_counts(table.column("state")).most_common()),
            "size_bytes": {"min": lo, "max": hi}}


def metrics_summary(table: pa.Table) -> dict:
    """Rows, launches, kernels with their launch counts, metric names, devices and streams of an NCU_METRICS table."""
    from veotrace.schemas.ncu_names import L2_HIT_RATE, L2_THROUGHPUT

    metrics = _values([table.column("metric").cast(pa.string())])
    launches = table.select(["launch_id", "kernel"]).cast(pa.schema([("launch_id", pa.int64()), ("kernel", pa.string())]))
    launches = launches.group_by(["launch_id", "kernel"]).aggregate([])  # one row per launch
    kernels = _kernel_launches(launches.column("kernel"))
    return {"rows": table.num_rows, "launches": len(_values([table.column("launch_id")])),
            "kernels": kernels, "kernel_names": len(_values([launches.column("kernel")])),
            "max_launches_per_kernel": kernels[0]["launches"] if kernels else 0, "metrics": len(metrics),
            "has_l2_hit_rate": L2_HIT_RATE in metrics, "has_l2_throughput": L2_THROUGHPUT in metrics,
            "devices": _values([table.column("device")]), "streams": _values([table.column("stream")])}


def arrays_summary(arrays: dict[str, np.ndarray]) -> dict:
    """Per array: shape, dtype and finite value range; rows = total elements."""
    out, rows = {}, 0
    for name, arr in arrays.items():
        finite = arr[np.isfinite(arr)] if arr.dtype.kind == "f" else arr.ravel()
        out[name] = {"shape": list(arr.shape), "dtype": arr.dtype.str,
                     "min": finite.min().item() if finite.size else None,
                     "max": finite.max().item() if finite.size else None,
                     "nonfinite": int(arr.size - finite.size)}
        rows += int(arr.size)
    return {"rows": rows, "arrays": out}


def frames_summary(frames: Any) -> dict:
    """Rows, frame range, frame source and the metric columns of a per-frame metrics table (FrameMetrics)."""
    n = int(frames.frame.size)
    return {"rows": n, "first_frame": int(frames.frame[0]) if n else None,
            "last_frame": int(frames.frame[-1]) if n else None, "frame_source": frames.frame_source,
            "metrics": list(frames.metrics), "columns": list(frames.columns)}


def describe_frames(path: str, frames: Any) -> FileInfo:
    """Describe a per-frame metrics table (``sources.frames.FrameMetrics``), which only `coherence` reads."""
    info = FileInfo(path, "frames", "per-frame metrics table (CSV, Parquet, JSON Lines or a service's JSON)",
                    version={"container": frames.kind, "frame_source": frames.frame_source})
    summary = frames_summary(frames)
    info.tables["frames"] = summary.pop("rows")
    info.details["frames"] = summary
    info.span = _span(None, None)
    info.supports = supported_commands(info)
    return info


SUMMARISERS = {"alloc_events": alloc_summary, "gpu_activity": gpu_summary, "segments": segments_summary,
               "blocks": blocks_summary, "ncu_metrics": metrics_summary, "arrays": arrays_summary}


def supported_commands(info: FileInfo) -> list[str]:
    """The veotrace commands that will run on this file with their defaults, given what was read from it.

    entropy and bursts count alloc events by default: a snapshot whose trace holds none (only a
    ``snapshot`` entry, or segments without a trace) feeds neither. l2-breakpoints finds change points
    from ``2 * CHANGEPOINT_MIN_SIZE`` launches of a kernel; with fewer it shows the per-kernel picture only.
    """
    out = []
    alloc = info.details.get("alloc_events")
    if alloc is not None and info.tables.get("alloc_events"):
        counted = bool(alloc["ops"].get("alloc"))
        timed = alloc["events_without_time"] < info.tables["alloc_events"]
        if counted:
            out.append("entropy" if timed else "entropy --window-events N")
        out.append("convert")
        if counted and timed:
            out.append("bursts")
    out.extend(_replay_commands(info))
    gpu = info.details.get("gpu_activity")
    if gpu is not None and gpu["kinds"].get("kernel"):
        out.append("bursts --events kernels")
    ncu = info.details.get("ncu_metrics")
    if ncu is not None and info.tables.get("ncu_metrics"):
        flag = "" if ncu["has_l2_hit_rate"] or ncu["has_l2_throughput"] else " --metric NAME"
        enough = ncu["max_launches_per_kernel"] >= 2 * CHANGEPOINT_MIN_SIZE
        out.append(f"l2-breakpoints{flag}" + ("" if enough else " (per-kernel picture only)"))
    if info.tables.get("arrays"):
        out.append("correlate")
    if info.tables.get("frames"):
        out.append("coherence")
    return out


#: Share of checked frees that must pair with an earlier alloc for ``fragmentation`` to be listed (below it
#: the addresses are not the allocator's, e.g. logged per tensor view, and every free would be "unknown").
FRAGMENTATION_MIN_PAIRED = 0.5


def _replay_commands(info: FileInfo) -> list[str]:
    """fragmentation and simulate, when the file feeds them (both pair frees with allocs by address).

    fragmentation: allocs with addresses whose frees mostly pair (or no frees), a PyTorch snapshot's
    segments and blocks (its state alone, without a trace), or one array of non-negative integer addresses
    (a stride summary). simulate: allocs with a size and frees of which at most
    SIMULATE_MAX_UNKNOWN_FREES name no earlier alloc (checked on the first PAIRING_SAMPLE frees; a
    snapshot's frees of blocks live before its trace count as unknown here, so this errs on refusing).
    """
    from veotrace.analysis.defaults import SIMULATE_MAX_UNKNOWN_FREES

    out = []
    alloc = info.details.get("alloc_events") if info.tables.get("alloc_events") else None
    addr = (alloc or {}).get("addresses") or {}
    checked, paired = addr.get("frees_checked", 0), addr.get("frees_paired", 0)
    placed = addr.get("addressed_allocs", 0) > 0 and (checked == 0 or paired >= FRAGMENTATION_MIN_PAIRED * checked)
    snapshot = bool(info.tables.get("segments")) and "blocks" in info.tables
    arrays = (info.details.get("arrays") or {}).get("arrays", {})
    strides = len(arrays) == 1 and all(a["dtype"][1] == "u" or (a["dtype"][1] == "i" and (a["min"] is None or a["min"] >= 0))
                                       for a in arrays.values())
    if placed or snapshot or strides:
        out.append("fragmentation (address strides)" if strides and not (placed or snapshot) else "fragmentation")
    sized = alloc is not None and (alloc["alloc_size_bytes"]["max"] or 0) > 0
    if sized and checked and checked - paired <= SIMULATE_MAX_UNKNOWN_FREES * checked:
        out.append("simulate")
    return out


TABLE_KINDS = ("alloc_events", "segments", "blocks", "gpu_activity", "ncu_metrics", "arrays", "frames")


def span_of(info: FileInfo) -> dict:
    """The time span of the first timed table (alloc events, then GPU activity), or all None."""
    for kind in ("alloc_events", "gpu_activity"):
        d = info.details.get(kind)
        if d is not None and d.get("first_ns") is not None:
            return {k: d[k] for k in ("first_ns", "last_ns", "duration_s")}
    return _span(None, None)


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
        span, devices, streams = i.span or _span(None, None), i.devices, i.streams
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
