"""Schema of burst windows: one row per burst (a maximal run of events closer than the gap)."""

from __future__ import annotations

import pyarrow as pa

from veotrace.schemas.base import tagged

BURSTS = tagged(
    "bursts/1",
    [
        pa.field("burst", pa.int64(), nullable=False),  # 0-based, in time order
        pa.field("start_ns", pa.int64(), nullable=False),  # first event's timestamp
        pa.field("end_ns", pa.int64(), nullable=False),  # last event's timestamp
        pa.field("duration_ns", pa.int64(), nullable=False),  # end_ns - start_ns (0 when all at one instant)
        pa.field("events", pa.int64(), nullable=False),
        pa.field("bytes", pa.int64(), nullable=True),  # sum of size_bytes; null for kernel launches
        pa.field("events_per_s", pa.float64(), nullable=True),  # events / duration; null when duration is 0
        pa.field("bytes_per_s", pa.float64(), nullable=True),  # bytes / duration; null for kernels or duration 0
        pa.field("gap_before_ns", pa.int64(), nullable=True),  # start - previous burst's end; null for the first
        # kernel bursts: the most launched kernels in the burst, "name (launches), ..."; null for alloc events
        pa.field("top_kernels", pa.string(), nullable=True),
    ],
)

#: The bursts of every series of a grouped run (--by device|stream), the pooled one first.
BURSTS_BY_GROUP = tagged(
    "bursts_by_group/1",
    [
        pa.field("by", pa.string(), nullable=False),  # "device" or "stream"
        pa.field("group", pa.string(), nullable=False),  # "all" (pooled), a device/stream number, or "none"
        *BURSTS,
    ],
)
