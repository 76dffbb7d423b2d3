"""Schema of L2 change points: one row per breakpoint in a kernel's per-launch metric series."""

from __future__ import annotations

import pyarrow as pa

from veotrace.schemas.base import DICT_STR, tagged

L2_BREAKPOINTS = tagged(
    "l2_breakpoints/1",
    [
        pa.field("kernel", DICT_STR, nullable=False),
        pa.field("metric", DICT_STR, nullable=False),
        # 0-based position, within the kernel's series, of the first launch of the new regime.
        pa.field("launch_index", pa.int64(), nullable=False),
        pa.field("id", pa.int64(), nullable=False),  # that launch's ncu ID
        pa.field("mean_before", pa.float64(), nullable=False),
        pa.field("mean_after", pa.float64(), nullable=False),
        pa.field("jump", pa.float64(), nullable=False),
        # |jump| / (sigma * sqrt(1/n_before + 1/n_after)), sigma the noise estimated from the series.
        pa.field("z_score", pa.float64(), nullable=True),
        pa.field("rules", pa.string(), nullable=True),  # names of presets that fired, ";"-joined
    ],
)
