"""Schema of `veotrace simulate` per-window series: one row per (policy, window, device).

The columns are those of ``fragmentation_windows/1`` (same definitions, computed by
:mod:`veotrace.frag` from each policy's own event stream) plus the policy name. Without
timestamps, window k covers requests [k*N, (k+1)*N) and ``start_ns``/``end_ns`` are null.
"""

from __future__ import annotations

import pyarrow as pa

from veotrace.schemas.base import DICT_STR, tagged

#: Columns taken from fragmentation_windows/1, in this order.
WINDOW_COLUMNS = ["window", "device", "start_ns", "end_ns", "allocs", "frees", "device_allocs", "device_frees",
                  "allocated_bytes", "live_bytes_peak", "reserved_bytes", "reserved_bytes_peak", "inactive_bytes",
                  "largest_free_bytes", "external_frag", "fragmented", "gmlake_frag"]

SIMULATE_WINDOWS = tagged(
    "simulate_windows/1",
    [
        pa.field("window", pa.int64(), nullable=False),
        pa.field("device", pa.int32(), nullable=False),
        pa.field("start_ns", pa.int64(), nullable=True),
        pa.field("end_ns", pa.int64(), nullable=True),
        pa.field("allocs", pa.int64(), nullable=False),
        pa.field("frees", pa.int64(), nullable=False),
        pa.field("device_allocs", pa.int64(), nullable=False),  # segment_alloc / segment_map by the policy
        pa.field("device_frees", pa.int64(), nullable=False),  # segment_free / segment_unmap
        pa.field("allocated_bytes", pa.int64(), nullable=False),  # at the window's end (block sizes)
        pa.field("live_bytes_peak", pa.int64(), nullable=False),
        pa.field("reserved_bytes", pa.int64(), nullable=True),  # at the window's end
        pa.field("reserved_bytes_peak", pa.int64(), nullable=True),
        pa.field("inactive_bytes", pa.int64(), nullable=True),  # reserved - allocated
        pa.field("largest_free_bytes", pa.int64(), nullable=False),
        pa.field("external_frag", pa.float64(), nullable=True),  # 1 - largest free / free (TF BFC / XProf)
        pa.field("fragmented", pa.bool_(), nullable=True),
        pa.field("gmlake_frag", pa.float64(), nullable=True),  # 1 - peak active / peak reserved (GMLake)
        pa.field("policy", DICT_STR, nullable=False),
    ],
)

#: ``simulate --by site|phase``: one row per (policy, device, state, key): the live blocks a key holds and
#: the free bytes they strand at the policy's peak reserved on that device (``at`` = "peak") and at the
#: end of the replay ("end"). ``key`` is the site or the phase; ``stranded_bytes`` counts a range's free
#: bytes for every key whose blocks pin it (``sole_bytes``: ranges only this key pins).
SIMULATE_BY_KEY = tagged(
    "simulate_by_key/1",
    [
        pa.field("policy", DICT_STR, nullable=False),
        pa.field("device", pa.int32(), nullable=False),
        pa.field("at", DICT_STR, nullable=False),
        pa.field("key", DICT_STR, nullable=False),
        pa.field("blocks", pa.int64(), nullable=False),
        pa.field("block_bytes", pa.int64(), nullable=False),
        pa.field("requested_bytes", pa.int64(), nullable=False),
        pa.field("stranded_bytes", pa.int64(), nullable=False),
        pa.field("sole_bytes", pa.int64(), nullable=False),
        pa.field("segments", pa.int64(), nullable=False),
    ],
)
