"""Schema of Nsight Compute metrics, long form: one row per (launch, metric)."""

from __future__ import annotations

import pyarrow as pa

from veotrace.schemas.base import DICT_STR, tagged

NCU_METRICS = tagged(
    "ncu_metrics/1",
    [
        pa.field("launch_id", pa.int64(), nullable=False),  # ncu's "ID" column
        pa.field("kernel", DICT_STR, nullable=False),
        # Canonical ncu metric name when known (e.g. "lts__t_sector_hit_rate.pct"), else the label.
        pa.field("metric", DICT_STR, nullable=False),
        pa.field("label", DICT_STR, nullable=True),  # display name, e.g. "L2 Hit Rate"
        pa.field("section", DICT_STR, nullable=True),
        pa.field("unit", DICT_STR, nullable=True),  # normalised unit: "ns", "byte", "%", ...
        pa.field("value", pa.float64(), nullable=True),  # in ``unit``; null for n/a
        pa.field("device", pa.int32(), nullable=True),
        pa.field("stream", pa.int64(), nullable=True),
        pa.field("block_size", DICT_STR, nullable=True),  # "(256, 1, 1)"
        pa.field("grid_size", DICT_STR, nullable=True),
        pa.field("cc", DICT_STR, nullable=True),  # compute capability, "7.0"
        pa.field("source_file", DICT_STR, nullable=False),
    ],
)
