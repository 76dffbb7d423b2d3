"""Schemas of `veotrace fragmentation` results: per-window series, free-fragment bins, hot zones, state.

Byte columns are totals over the device at the end of the window unless named ``_peak``/``_mean``.
Null means "not known from this source" (e.g. ``reserved_bytes`` for a log without segments), never 0.
"""

from __future__ import annotations

import pyarrow as pa

from veotrace.schemas.base import DICT_STR, tagged

#: One row per (window, device). See veotrace/frag/metrics.py for each definition.
FRAGMENTATION_WINDOWS = tagged(
    "fragmentation_windows/1",
    [
        pa.field("window", pa.int64(), nullable=False),  # k: [k*W, (k+1)*W) or events [k*N, (k+1)*N)
        pa.field("device", pa.int32(), nullable=False),
        pa.field("start_ns", pa.int64(), nullable=True),  # k*W (null for event windows without time)
        pa.field("end_ns", pa.int64(), nullable=True),
        pa.field("events", pa.int64(), nullable=False),
        pa.field("allocs", pa.int64(), nullable=False),
        pa.field("frees", pa.int64(), nullable=False),
        pa.field("device_allocs", pa.int64(), nullable=False),  # segment_alloc / segment_map (cudaMalloc, cuMemMap)
        pa.field("device_frees", pa.int64(), nullable=False),  # segment_free / segment_unmap
        pa.field("live_bytes_mean", pa.float64(), nullable=False),  # time-weighted (event-weighted for event windows)
        pa.field("live_bytes_peak", pa.int64(), nullable=False),
        pa.field("live_bytes", pa.int64(), nullable=False),  # at the window's end, active blocks incl. pending frees
        pa.field("live_blocks", pa.int64(), nullable=False),
        pa.field("allocated_bytes", pa.int64(), nullable=False),  # active_allocated only
        pa.field("requested_bytes", pa.int64(), nullable=False),
        pa.field("internal_bytes", pa.int64(), nullable=False),  # block - requested (rounding)
        pa.field("reserved_bytes", pa.int64(), nullable=True),  # sum of segments; null without segments
        pa.field("reserved_bytes_peak", pa.int64(), nullable=True),
        pa.field("inactive_bytes", pa.int64(), nullable=True),  # reserved - allocated
        pa.field("free_bytes", pa.int64(), nullable=False),  # free blocks found (segments or --max-gap ranges)
        pa.field("free_blocks", pa.int64(), nullable=False),
        pa.field("largest_free_bytes", pa.int64(), nullable=False),
        pa.field("external_frag", pa.float64(), nullable=True),  # 1 - largest free / free (TF BFC / XProf)
        pa.field("fragmented", pa.bool_(), nullable=True),  # largest free < threshold * free
        pa.field("gmlake_frag", pa.float64(), nullable=True),  # 1 - peak active / peak reserved (GMLake)
        pa.field("overlaps", pa.int64(), nullable=False),  # overlapping live blocks at the window's end
    ],
)

#: Free blocks per size bin at the end of each window.
FRAGMENTATION_BINS = tagged(
    "fragmentation_bins/1",
    [
        pa.field("window", pa.int64(), nullable=False),
        pa.field("device", pa.int32(), nullable=False),
        pa.field("bin", pa.string(), nullable=False),  # e.g. "8KiB-32KiB", ">=256KiB"
        pa.field("lo_bytes", pa.int64(), nullable=False),
        pa.field("hi_bytes", pa.int64(), nullable=True),  # inclusive; null = no upper bound
        pa.field("free_blocks", pa.int64(), nullable=False),
        pa.field("free_bytes", pa.int64(), nullable=False),
    ],
)

#: Address zones ranked by alloc+free events: ``zone_bytes`` wide ("fixed", ``--zone-bytes SIZE``), or
#: with ``--zone-bytes segment`` one per segment holding the address at the event's time ("segment"),
#: else one per range of touched address space whose gaps are under ``--max-gap`` ("range").
FRAGMENTATION_ZONES = tagged(
    "fragmentation_zones/2",
    [
        pa.field("rank", pa.int64(), nullable=False),
        pa.field("device", pa.int32(), nullable=False),
        pa.field("zone_start", pa.uint64(), nullable=False),
        pa.field("zone_bytes", pa.int64(), nullable=False),  # segment: its size when last touched
        pa.field("zone_kind", pa.string(), nullable=False),  # "fixed" | "segment" | "range"
        pa.field("events", pa.int64(), nullable=False),
        pa.field("allocs", pa.int64(), nullable=False),
        pa.field("frees", pa.int64(), nullable=False),
        pa.field("bytes", pa.int64(), nullable=False),  # bytes allocated + freed in the zone
        pa.field("event_share", pa.float64(), nullable=False),
        pa.field("byte_share", pa.float64(), nullable=True),
        # with a latency column (``latency_col``): events with a latency, and P50/P99 (log-histogram bin edges)
        pa.field("latency_events", pa.int64(), nullable=True),
        pa.field("latency_p50_us", pa.float64(), nullable=True),
        pa.field("latency_p99_us", pa.float64(), nullable=True),
    ],
)

#: The full state at one moment: segments, live blocks and free blocks, one row each.
FRAGMENTATION_STATE = tagged(
    "fragmentation_state/1",
    [
        pa.field("device", pa.int32(), nullable=False),
        pa.field("kind", DICT_STR, nullable=False),  # "segment" | "block" | "free"
        pa.field("address", pa.uint64(), nullable=False),
        pa.field("size_bytes", pa.int64(), nullable=False),
        pa.field("requested_bytes", pa.int64(), nullable=True),  # blocks only
        # blocks: "active_allocated" | "active_pending_free"; segments: "reserved" | "expandable"; free: "free"
        pa.field("state", DICT_STR, nullable=False),
    ],
)
