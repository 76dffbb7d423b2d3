"""Schemas of PyTorch profiler traces (Kineto chrome traces, ``export_chrome_trace`` / ``tensorboard_trace_handler``).

The data contract of ``veotrace.sources.kineto``:

- ``KINETO_MEMORY`` (``kineto_memory/1``): one row per ``[memory]`` instant event, GPU and CPU alike, ordered
  by ``ts_ns`` then ``ev_idx`` (the profiler's own order; file order breaks the remaining ties). ``bytes`` is
  signed as the trace writes it (negative on a free). ``total_allocated_bytes`` / ``total_reserved_bytes`` are
  the allocator's running totals after the event (null in the 2021 format, which has neither, nor ``address``).
  ``device_type`` is c10's ``DeviceType`` (0 CPU, 1 CUDA, 6 HIP); ``device_id`` -1 for the CPU. ``rank`` comes
  from ``distributedInfo`` (null when the trace has none). ``op_id`` / ``frame_id`` / ``kernel_id`` are the
  ``id`` in ``KINETO_OPS`` of the innermost ``cpu_op`` and ``python_function`` span enclosing the event on its
  thread, and of the GPU kernel, memcpy/memset or collective running on its device at that time (null when
  none does; ``module_id`` the innermost ``nn.Module: ...`` frame), or when the read skipped the spans: the memory-only read of ``info`` and ``fragmentation``).
- ``KINETO_OPS`` (``kineto_ops/1``): the spans the memory events point at: ``kind`` is the trace's ``cat``
  (``cpu_op``, ``python_function``, ``user_annotation``, ``kernel``, ``gpu_memcpy``, ``gpu_memset``,
  ``gpu_user_annotation``), ``device``/``stream`` for GPU spans.
- ``KINETO_TIMELINE`` (``memory_timeline/1``): ``export_memory_timeline``'s raw rows
  ``[ts, action, bytes, category]``: ``ts_ns`` null for the rows at -1 (tensors that existed before
  profiling), ``action`` and ``category`` decoded to the profiler's names.
- ``KINETO_TIMELINE_POINTS`` (``memory_timeline_points/1``): ``export_memory_timeline``'s ``.json`` /
  ``.json.gz`` form ``[times, sizes]``, one row per point (the state after every row at one time): ``ts_ns``
  (the file's whole microseconds x 1000; null for the point of the tensors live before profiling) and the bytes
  live in each of ``TIMELINE_CATEGORIES`` (one int64 column each, named so; the file's leading 0 per point, the
  plot's stacking base, is dropped).

The CPU's events (``device_type`` 0) stay in ``KINETO_MEMORY`` but are never part of a GPU's numbers: the
common ``alloc_events/1`` stream holds the GPU events only (``sources.kineto.trace``).
"""

from __future__ import annotations

import pyarrow as pa

from veotrace.schemas.base import DICT_STR, tagged

#: c10::DeviceType values a profiler trace writes (c10/core/DeviceType.h), by name.
DEVICE_TYPES = {0: "cpu", 1: "cuda", 2: "mkldnn", 3: "opengl", 4: "opencl", 5: "ideep", 6: "hip", 7: "fpga",
                8: "maia", 9: "xla", 10: "vulkan", 11: "metal", 12: "xpu", 13: "mps", 14: "meta", 15: "hpu",
                16: "ve", 17: "lazy", 18: "ipu", 19: "mtia", 20: "privateuse1"}
CPU = 0

KINETO_MEMORY = tagged(
    "kineto_memory/1",
    [
        pa.field("ts_ns", pa.int64(), nullable=False),  # the trace's ts (microseconds, float) x 1000, rounded
        pa.field("ev_idx", pa.int64(), nullable=True),  # "Ev Idx" (absent in the 2021 format)
        pa.field("seq", pa.int64(), nullable=False),  # position among the file's [memory] events, file order
        pa.field("rank", pa.int32(), nullable=True),
        pa.field("device_type", pa.int8(), nullable=False),
        pa.field("device_id", pa.int32(), nullable=False),
        pa.field("address", pa.uint64(), nullable=True),
        pa.field("bytes", pa.int64(), nullable=False),  # signed: negative on a free
        pa.field("total_allocated_bytes", pa.int64(), nullable=True),
        pa.field("total_reserved_bytes", pa.int64(), nullable=True),
        pa.field("tid", pa.int64(), nullable=True),
        pa.field("op_id", pa.int64(), nullable=True),
        pa.field("frame_id", pa.int64(), nullable=True),
        pa.field("kernel_id", pa.int64(), nullable=True),
        pa.field("module_id", pa.int64(), nullable=True),  # innermost "nn.Module: ..." python_function (with_stack)
        pa.field("source_file", DICT_STR, nullable=False),
    ],
)

KINETO_OPS = tagged(
    "kineto_ops/1",
    [
        pa.field("id", pa.int64(), nullable=False),  # position in this table
        pa.field("kind", DICT_STR, nullable=False),  # the trace's cat
        pa.field("name", DICT_STR, nullable=False),  # each distinct name once
        pa.field("ts_ns", pa.int64(), nullable=False),
        pa.field("dur_ns", pa.int64(), nullable=False),
        pa.field("pid", pa.int64(), nullable=True),
        pa.field("tid", pa.int64(), nullable=True),
        pa.field("device", pa.int32(), nullable=True),  # GPU spans: args.device
        pa.field("stream", pa.int64(), nullable=True),
        pa.field("rank", pa.int32(), nullable=True),
        pa.field("source_file", DICT_STR, nullable=False),
    ],
)

#: export_memory_timeline's actions (torch/profiler/_memory_profiler.py Action, enum.auto from 1).
TIMELINE_ACTIONS = {1: "preexisting", 2: "create", 3: "increment_version", 4: "destroy"}
#: Its category index (_CATEGORY_TO_INDEX, the order of _CATEGORY_TO_COLORS; 7 is None: no category known).
TIMELINE_CATEGORIES = ("parameter", "optimizer_state", "input", "temporary", "activation", "gradient",
                       "autograd_detail", "unknown")

KINETO_TIMELINE = tagged(
    "memory_timeline/1",
    [
        pa.field("ts_ns", pa.int64(), nullable=True),  # null: -1 in the file, a tensor live before profiling
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("action", DICT_STR, nullable=False),
        pa.field("bytes", pa.int64(), nullable=False),  # signed as written (destroy and the old version: negative)
        pa.field("category", DICT_STR, nullable=False),
        pa.field("source_file", DICT_STR, nullable=False),
    ],
)

KINETO_TIMELINE_POINTS = tagged(
    "memory_timeline_points/1",
    [
        pa.field("ts_ns", pa.int64(), nullable=True),  # null: the point of the tensors live before profiling
        pa.field("point", pa.int64(), nullable=False),  # the point's index in the file
        *(pa.field(c, pa.int64(), nullable=False) for c in TIMELINE_CATEGORIES),
        pa.field("source_file", DICT_STR, nullable=False),
    ],
)


def device_name(device_type: int) -> str:
    """``cuda``, ``hip``, ``cpu``, ... or ``type N`` for a value c10 does not list."""
    return DEVICE_TYPES.get(int(device_type), f"type {int(device_type)}")
