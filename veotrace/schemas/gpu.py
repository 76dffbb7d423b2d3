"""Schemas of GPU activity (kernels, memcpy, memset) and of allocator segment/block state."""

from __future__ import annotations

import pyarrow as pa

from veotrace.schemas.base import DICT_STR, tagged

#: One row per GPU activity record: kernel launch, memcpy or memset (Nsight Systems).
GPU_ACTIVITY = tagged(
    "gpu_activity/1",
    [
        pa.field("kind", DICT_STR, nullable=False),  # "kernel" | "memcpy" | "memset"
        pa.field("name", DICT_STR, nullable=False),  # kernel name, or e.g. "[CUDA memcpy HtoD]"
        pa.field("start_ns", pa.int64(), nullable=False),
        pa.field("end_ns", pa.int64(), nullable=False),
        pa.field("device", pa.int32(), nullable=True),
        pa.field("stream", pa.int64(), nullable=True),
        pa.field("correlation_id", pa.int64(), nullable=True),
        pa.field("bytes", pa.int64(), nullable=True),  # memcpy / memset only
        pa.field("copy_kind", DICT_STR, nullable=True),  # "HtoD", "DtoH", ... (memcpy only)
        pa.field("grid_x", pa.int32(), nullable=True),
        pa.field("grid_y", pa.int32(), nullable=True),
        pa.field("grid_z", pa.int32(), nullable=True),
        pa.field("block_x", pa.int32(), nullable=True),
        pa.field("block_y", pa.int32(), nullable=True),
        pa.field("block_z", pa.int32(), nullable=True),
        pa.field("source_file", DICT_STR, nullable=False),
    ],
)

#: One row per allocator segment (a cudaMalloc'd region) at snapshot time.
SEGMENTS = tagged(
    "segments/1",
    [
        pa.field("device", pa.int32(), nullable=True),
        pa.field("address", pa.uint64(), nullable=False),
        pa.field("total_size_bytes", pa.int64(), nullable=False),
        pa.field("allocated_size_bytes", pa.int64(), nullable=True),
        pa.field("active_size_bytes", pa.int64(), nullable=True),
        pa.field("requested_size_bytes", pa.int64(), nullable=True),
        pa.field("stream", pa.int64(), nullable=True),
        pa.field("segment_type", DICT_STR, nullable=True),  # "large" | "small"
        pa.field("pool", DICT_STR, nullable=True),  # e.g. "0,0" for the default pool
        pa.field("is_expandable", pa.bool_(), nullable=True),
        pa.field("source_file", DICT_STR, nullable=False),
    ],
)

#: One row per block inside a segment. Legacy snapshots have no block address: it is derived
#: as the segment address plus the sizes of the preceding blocks (what the C++ does).
BLOCKS = tagged(
    "blocks/1",
    [
        pa.field("device", pa.int32(), nullable=True),
        pa.field("segment_address", pa.uint64(), nullable=False),
        pa.field("address", pa.uint64(), nullable=False),
        pa.field("size_bytes", pa.int64(), nullable=False),
        pa.field("requested_size_bytes", pa.int64(), nullable=True),
        # "active_allocated" | "active_pending_free" | "inactive" (both pending spellings -> the first)
        pa.field("state", DICT_STR, nullable=False),
        pa.field("source_file", DICT_STR, nullable=False),
    ],
)
