"""What both halves of the alloc-log reader share: the log's columns and the Arrow type each is read as.

``alloc_log`` (the fast path) and ``alloc_exact`` (the exact path it falls back to) both import this
module; ``alloc_log`` imports ``alloc_exact``, never the other way round.
"""

from __future__ import annotations

import pyarrow as pa

from veotrace.sources.base import ReadOptions

#: Log column -> ALLOC_EVENTS column.
LOG_COLUMNS = {"timestamp": "ts_ns", "op_type": "op", "size_bytes": "size_bytes",
               "address": "address", "stream": "stream", "device": "device"}
REQUIRED = ("timestamp", "op_type", "size_bytes")
#: Rows per batch on the exact (slow) path.
SLOW_BATCH_ROWS = 65536
#: The type ``op_type`` is read as on the fast path (repeated strings, dictionary-encoded).
OP_TYPE_DICT = pa.dictionary(pa.int32(), pa.string())


def _time_type(options: ReadOptions) -> pa.DataType:
    return pa.int64() if options.time_unit == "ns" else pa.float64()


def log_types(options: ReadOptions, op_type: pa.DataType = OP_TYPE_DICT) -> dict[str, pa.DataType]:
    """Arrow type of each canonical log column as read (addresses stay text until parsed)."""
    return {"timestamp": _time_type(options), "op_type": op_type, "size_bytes": pa.int64(),
            "address": pa.string(), "stream": pa.int64(), "device": pa.int64()}
