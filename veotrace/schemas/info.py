"""Schema of `veotrace info` as a table: one row per file."""

from __future__ import annotations

import pyarrow as pa

from veotrace.schemas.base import tagged

INFO_FILES = tagged(
    "info_files/3",
    [
        pa.field("path", pa.string(), nullable=False),
        pa.field("format", pa.string(), nullable=True),  # null: none of the supported formats
        pa.field("version", pa.string(), nullable=True),  # JSON object of version details
        pa.field("alloc_events", pa.int64(), nullable=True),  # rows per table; null: not provided/unreadable
        pa.field("segments", pa.int64(), nullable=True),
        pa.field("blocks", pa.int64(), nullable=True),
        pa.field("gpu_activity", pa.int64(), nullable=True),
        pa.field("ncu_metrics", pa.int64(), nullable=True),
        pa.field("arrays", pa.int64(), nullable=True),  # elements
        pa.field("frames", pa.int64(), nullable=True),  # rows of a per-frame metrics table (added in /2)
        pa.field("profiler_memory", pa.int64(), nullable=True),  # a profiler trace's [memory] events (added in /3)
        pa.field("memory_timeline", pa.int64(), nullable=True),  # export_memory_timeline rows (added in /3)
        pa.field("first_ns", pa.int64(), nullable=True),
        pa.field("last_ns", pa.int64(), nullable=True),
        pa.field("devices", pa.string(), nullable=True),  # "0,1"
        pa.field("streams", pa.string(), nullable=True),
        pa.field("supports", pa.string(), nullable=True),  # "entropy; bursts; convert"
        pa.field("problems", pa.string(), nullable=True),
        pa.field("error", pa.string(), nullable=True),
    ],
)
