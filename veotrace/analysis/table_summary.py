"""Summaries of each table kind for ``veotrace info``: rows, time span, devices, streams, ops, sizes, kernels.

One function per table kind (``SUMMARISERS``); alloc/free events are summarised batch by batch, never
held whole, and the first ``PAIRING_SAMPLE`` frees are checked against earlier allocations (what
``fragmentation`` and ``simulate`` pair by). :mod:`veotrace.analysis.info` turns them into a file's
description and the commands that will run on it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

NS_PER_S = 1e9


def time_span(lo: int | None, hi: int | None) -> dict:
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
    from veotrace.analysis.ooms import OomTap

    ooms = OomTap()
    for b in batches:
        ooms.see(b)
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
    return {"rows": rows, **time_span(*span), "events_without_time": untimed, "devices": sorted(devices),
            "streams": sorted(streams), "ops": dict(ops.most_common()), "mem_kinds": dict(kinds.most_common()),
            "alloc_size_bytes": {"min": alloc_sizes[0], "max": alloc_sizes[1]},
            "size_bytes": {"min": sizes[0], "max": sizes[1]}, "addresses": pairing.summary(),
            "recorded_ooms": ooms.ooms()}


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
    return {"rows": table.num_rows, "kinds": dict(_counts(table.column("kind")).most_common()), **time_span(lo, hi),
            "devices": _values([table.column("device")]), "streams": _values([table.column("stream")]),
            "kernel_names": len(_values([names])), "kernels": _kernel_launches(names)}


def segments_summary(table: pa.Table) -> dict:
    """Rows, reserved bytes, devices, streams and segment types of a SEGMENTS table."""
    return {"rows": table.num_rows, "reserved_bytes": pc.sum(table.column("total_size_bytes")).as_py() or 0,
            "devices": _values([table.column("device")]), "streams": _values([table.column("stream")]),
            "segment_types": dict(_counts(table.column("segment_type")).most_common()),
            "pools": _values([table.column("pool").cast(pa.string())])}


def blocks_summary(table: pa.Table) -> dict:
    """Rows, states and block size range of a BLOCKS table; bytes allocated (active_allocated blocks) and
    free in segments (inactive blocks), and the largest free block: the snapshot's state at a glance."""
    lo, hi = _minmax(table.column("size_bytes"))
    state = table.column("state").cast(pa.string())
    size = table.column("size_bytes")
    allocated = pc.filter(size, pc.equal(state, "active_allocated"))
    free = pc.filter(size, pc.equal(state, "inactive"))
    return {"rows": table.num_rows, "states": dict(_counts(table.column("state")).most_common()),
            "size_bytes": {"min": lo, "max": hi}, "listed_bytes": pc.sum(size).as_py() or 0,
            "allocated_bytes": pc.sum(allocated).as_py() or 0,
            "free_bytes": pc.sum(free).as_py() or 0, "largest_free_bytes": pc.max(free).as_py()}


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


def profiler_memory_summary(table: pa.Table) -> dict:
    """A profiler trace's [memory] events: devices, ranks, peaks, rises, checks, what it lacks (analysis.profiler)."""
    from veotrace.analysis.profiler import profiler_summary
    from veotrace.sources.kineto.trace import read_meta

    return profiler_summary(table, read_meta(table))


def memory_timeline_summary(table: pa.Table) -> dict:
    """export_memory_timeline's rows: bytes per category at the end and at the peak."""
    from veotrace.sources.kineto.timeline import categories

    return categories(table)


SUMMARISERS = {"alloc_events": alloc_summary, "gpu_activity": gpu_summary, "segments": segments_summary,
               "blocks": blocks_summary, "ncu_metrics": metrics_summary, "arrays": arrays_summary,
               "profiler_memory": profiler_memory_summary, "memory_timeline": memory_timeline_summary}
