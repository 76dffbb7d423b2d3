"""Schema of alloc/free events: one row per allocator event, from any source.

Sources map into it as follows:
- canonical CSV/JSONL logs: ``timestamp`` -> ``ts_ns``, ``op_type`` -> ``op``, ``size_bytes``,
  ``address``, ``stream``, ``device``;
- PyTorch snapshots: each ``device_traces[d][i]`` entry; ``action`` -> ``op`` (kept verbatim, see
  :class:`Op`), ``time_us * 1000`` -> ``ts_ns`` (null when the snapshot has no ``time_us``),
  ``addr`` -> ``address``, ``d`` -> ``device``;
- Nsight Systems ``CUDA_GPU_MEMORY_USAGE_EVENTS``: memoryOperationType 0/1 -> ``alloc``/``free``,
  ``start`` -> ``ts_ns``, ``bytes`` -> ``size_bytes``, memKind decoded -> ``mem_kind``.
"""

from __future__ import annotations

import pyarrow as pa

from veotrace.schemas.base import DICT_STR, tagged


class Op:
    """Op names. Unknown op names from a source are kept as they are, never mapped or dropped."""

    ALLOC = "alloc"
    FREE = "free"
    DEFRAG = "defrag"
    # PyTorch caching-allocator trace actions (FORMATS.md C.4), kept distinct.
    FREE_REQUESTED = "free_requested"
    FREE_COMPLETED = "free_completed"
    SEGMENT_ALLOC = "segment_alloc"
    SEGMENT_FREE = "segment_free"
    SEGMENT_MAP = "segment_map"
    SEGMENT_UNMAP = "segment_unmap"
    OOM = "oom"
    SNAPSHOT = "snapshot"


#: Ops that take device memory (cudaMalloc, cuMemMap) and that give it back (cudaFree, cuMemUnmap).
DEVICE_OPS = (Op.SEGMENT_ALLOC, Op.SEGMENT_MAP)
RELEASE_OPS = (Op.SEGMENT_FREE, Op.SEGMENT_UNMAP)


ALLOC_EVENTS = tagged(
    "alloc_events/1",
    [
        # Nanoseconds in the log's own time base (epoch or since start). Null when the source
        # has no clock (torch snapshots before ~2.2); such events keep their order in ``seq``.
        pa.field("ts_ns", pa.int64(), nullable=True),
        # 0-based position of the event within its source file, in file order.
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("op", DICT_STR, nullable=False),
        pa.field("size_bytes", pa.int64(), nullable=False),
        pa.field("address", pa.uint64(), nullable=True),
        pa.field("stream", pa.int64(), nullable=True),
        pa.field("device", pa.int32(), nullable=True),
        # nsys memKind ("device", "pinned", "managed", ...), torch segment type; null in plain logs.
        pa.field("mem_kind", DICT_STR, nullable=True),
        pa.field("source_file", DICT_STR, nullable=False),
    ],
)


def alloc_events_schema(columns=None) -> pa.Schema:
    """ALLOC_EVENTS restricted to ``columns`` (all when None), in schema order, tag kept."""
    return pa.schema([f for f in ALLOC_EVENTS if columns is None or f.name in columns],
                     metadata=ALLOC_EVENTS.metadata)
