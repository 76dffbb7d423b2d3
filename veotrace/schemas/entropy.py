"""Schema of sliding-window entropy results: one row per window."""

from __future__ import annotations

import pyarrow as pa

from veotrace.schemas.base import tagged

ENTROPY_WINDOWS = tagged(
    "entropy_windows/1",
    [
        pa.field("window", pa.int64(), nullable=False),  # 0 = the first window (time or event windows)
        pa.field("start_ns", pa.int64(), nullable=True),  # k*S, or first event's timestamp (event windows)
        pa.field("end_ns", pa.int64(), nullable=True),  # k*S + W, or last event's timestamp
        pa.field("hours", pa.float64(), nullable=True),  # hours since the first window's start
        pa.field("events", pa.int64(), nullable=False),
        pa.field("classes_present", pa.int32(), nullable=False),
        pa.field("entropy_bits", pa.float64(), nullable=True),  # null for an empty window
        pa.field("normalized_entropy", pa.float64(), nullable=True),  # H / log2(number of classes)
        # window start minus the first event's timestamp (s); the first time window starts at or before it
        pa.field("start_s", pa.float64(), nullable=True),
    ],
)

#: The windows of every series of a grouped run (--by device|stream), the pooled one first.
ENTROPY_GROUP_WINDOWS = tagged(
    "entropy_group_windows/1",
    [
        pa.field("by", pa.string(), nullable=False),  # "device" or "stream"
        pa.field("group", pa.string(), nullable=False),  # "all" (pooled), a device/stream number, or "none"
        *ENTROPY_WINDOWS,
    ],
)
