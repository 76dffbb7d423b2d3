"""Parameter checks, and the replay's rows and states turned into the Arrow tables and dicts of a result.

:class:`FragmentationResult` is defined here, beside :func:`build_result` that makes it; the package
``veotrace.frag`` imports and re-exports it (this module never imports the package).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from veotrace.errors import UsageError
from veotrace.frag import metrics as M
from veotrace.frag.state import DeviceState, ReplayCounters
from veotrace.schemas.fragmentation import (
    FRAGMENTATION_BINS,
    FRAGMENTATION_STATE,
    FRAGMENTATION_WINDOWS,
    FRAGMENTATION_ZONES,
)


@dataclass
class FragmentationResult:
    """Per-window series, bins, zones, the state at the end (and at ``at``), and what the replay met.

    Attributes:
        windows: ``FRAGMENTATION_WINDOWS`` (one row per window and device).
        bins: ``FRAGMENTATION_BINS`` (free blocks per size bin at each window's end).
        zones: ``FRAGMENTATION_ZONES`` (address zones ranked by alloc/free events).
        end: state at the end of the trace: ``{"total": {...}, "devices": {device: {...}}}`` (see
            ``metrics.state_metrics`` for the keys).
        at: the same for the moment asked for (None unless ``at_ns`` was given); ``at_state`` holds
            its segments, blocks and free blocks (``FRAGMENTATION_STATE``).
        counters: warnings counted during the replay (``state.ReplayCounters``), summed over devices.
        layout: alignment shares and the stride summary.
        final_states: the per-device ``DeviceState`` at the end (for callers that go on replaying).
    """

    windows: pa.Table
    bins: pa.Table
    zones: pa.Table
    end: dict
    counters: dict
    layout: dict
    params: dict
    summary: dict = field(default_factory=dict)
    at: dict | None = None
    at_state: pa.Table | None = None
    end_state: pa.Table | None = None
    final_states: dict = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict:
        return {"params": self.params, "summary": self.summary, "counters": self.counters, "end": self.end,
                "at": self.at, "layout": self.layout, "windows": self.windows.to_pylist(),
                "bins": self.bins.to_pylist(), "zones": self.zones.to_pylist()}


def check_params(window_s, window_events, threshold, max_gap, bins, round_bytes, zone_bytes) -> None:
    """Refuse impossible parameters before any work.

    Raises:
        UsageError: naming the option.
    """
    if window_s is not None and window_events is not None:
        raise UsageError("--window and --window-events exclude each other")
    if window_s is not None and not window_s > 0:
        raise UsageError("--window must be positive")
    if window_events is not None and window_events < 1:
        raise UsageError("--window-events must be at least 1")
    if not 0 < threshold <= 1:
        raise UsageError(f"--threshold must be in (0, 1], got {threshold}")
    if max_gap < 1 or round_bytes < 1 or (zone_bytes != "segment" and zone_bytes < 1):
        raise UsageError("--max-gap, the rounding and --zone-bytes must be positive sizes")
    for lo, hi in bins:
        if lo < 0 or (hi is not None and hi < lo):
            raise UsageError(f"--bins: bin {lo}-{hi} is empty")


def state_table(states: dict[int, DeviceState], *, max_gap: int) -> pa.Table:
    """Segments, live blocks and free blocks of every device, one row each (``FRAGMENTATION_STATE``)."""
    dev, kind, addr, size, req, state = [], [], [], [], [], []
    for d, st in sorted(states.items()):
        for s in st.segments:
            dev.append(d), kind.append("segment"), addr.append(s.start), size.append(s.end - s.start)
            req.append(None), state.append("expandable" if s.expandable else "reserved")
        pend = st.pending
        for a, s, r in zip(st.addr.tolist(), st.size.tolist(), st.req.tolist()):
            dev.append(d), kind.append("block"), addr.append(a), size.append(s), req.append(r)
            state.append("active_pending_free" if a in pend else "active_allocated")
        fb = M.free_blocks(st, max_gap=max_gap)
        for a, s in zip(fb.address.tolist(), fb.size.tolist()):
            dev.append(d), kind.append("free"), addr.append(a), size.append(s), req.append(None), state.append("free")
    return pa.table({
        "device": pa.array(dev, pa.int32()), "kind": pa.array(kind, pa.string()).dictionary_encode(),
        "address": pa.array(addr, pa.uint64()), "size_bytes": pa.array(size, pa.int64()),
        "requested_bytes": pa.array(req, pa.int64()), "state": pa.array(state, pa.string()).dictionary_encode(),
    }, schema=FRAGMENTATION_STATE)


def free_histogram(states: dict[int, DeviceState], *, max_gap: int) -> list[dict]:
    """Free blocks by power-of-two size: bin b holds sizes in (2**(b-1), 2**b]."""
    sizes = np.concatenate([M.free_blocks(st, max_gap=max_gap).size for st in states.values()] or [np.zeros(0, np.int64)])
    if sizes.size == 0:
        return []
    b = np.ceil(np.log2(np.maximum(sizes, 1))).astype(np.int64)
    out = []
    for v in np.unique(b).tolist():
        m = b == v
        out.append({"log2_bytes": v, "upto_bytes": 1 << v, "free_blocks": int(m.sum()), "free_bytes": int(sizes[m].sum())})
    return out


def describe(states: dict[int, DeviceState], *, max_gap: int, threshold: float) -> dict:
    per = {d: M.state_metrics(st, max_gap=max_gap, threshold=threshold) for d, st in sorted(states.items())}
    return {"total": M.combine(per, threshold=threshold), "devices": {str(d): m for d, m in per.items()}}


def _disagreement(outside: int, rows: list[dict]) -> dict | None:
    """Allocations outside every known segment: which figures hold and which do not (None when none)."""
    if not outside:
        return None
    return {"allocations_outside": outside,
            "live_peak_bytes": max((r["live_bytes_peak"] or 0 for r in rows), default=0),
            "reserved_peak_bytes": max((r["reserved_bytes"] or 0 for r in rows), default=0),
            "hold": ["live bytes over time (from the trace alone)", "the end state (from the segments)"],
            "do_not_hold": ["reserved, free and fragmentation over time (they count the known segments only)"]}


def build_result(replay, params: dict, *, top_zones: int | None) -> FragmentationResult:
    params = {**params, "fragmented_when": M.fragmented_when(params["threshold"])}
    rows = sorted(replay.rows, key=lambda r: (r["window"], r["device"]))
    windows = pa.Table.from_pylist(rows, schema=FRAGMENTATION_WINDOWS) if rows else FRAGMENTATION_WINDOWS.empty_table()
    bins = (pa.Table.from_pylist(sorted(replay.bin_rows, key=lambda r: (r["window"], r["device"])), schema=FRAGMENTATION_BINS)
            if replay.bin_rows else FRAGMENTATION_BINS.empty_table())
    zz = replay.layout.zones
    zone_rows = (zz.table_rows(top_zones) if replay.layout.by_segment
                 else zz.table_rows(top_zones, latency=replay.layout.zone_latency))
    zones = pa.Table.from_pylist(zone_rows, schema=FRAGMENTATION_ZONES) if zone_rows else FRAGMENTATION_ZONES.empty_table()
    counters = ReplayCounters()
    for st in replay.states.values():
        counters.merge(st.counters)
    kw = {"max_gap": params["max_gap_bytes"]}
    end = describe(replay.states, threshold=params["threshold"], **kw)
    end["free_histogram"] = free_histogram(replay.states, **kw)
    at = at_state = None
    if replay.at_states is not None:
        at = describe(replay.at_states, threshold=params["threshold"], **kw)
        at["free_histogram"] = free_histogram(replay.at_states, **kw)
        at_state = state_table(replay.at_states, **kw)
    flagged = sum(1 for r in rows if r["fragmented"])
    summary = {"events_read": replay.n_read, "windows": windows.num_rows, "fragmented_windows": flagged,
               "devices": sorted(replay.states), "has_time": replay.has_time and replay.window_events is None,
               "segments_disagree": _disagreement(counters.allocs_outside_segments, rows)}
    layout = {"alignment": replay.layout.alignment(), "strides": replay.layout.strides.summary(),
              "latency_by_size_bin": replay.layout.latency_by_bin(),
              "zones_touched": zz.touched(), "zone_kinds": sorted({r["zone_kind"] for r in zone_rows})}
    return FragmentationResult(windows, bins, zones, end, counters.to_dict(), layout, params, summary,
                               at=at, at_state=at_state, end_state=None, final_states=replay.states)
