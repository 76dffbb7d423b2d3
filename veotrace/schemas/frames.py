"""Schemas layer: per-transition (address jump, EPE) pairs for `correlate` and per-frame flags for `coherence`."""

from __future__ import annotations

import pyarrow as pa

from veotrace.schemas.base import tagged

#: One row per frame transition i -> i+1 kept for the correlation (after alignment and drops).
FRAME_PAIRS = tagged(
    "frame_pairs/1",
    [
        pa.field("transition", pa.int64(), nullable=False),  # i, for the transition frame i -> i+1
        # |addr[i+1] - addr[i]|; mean or max over tensors when there are several per frame.
        pa.field("jump_bytes", pa.float64(), nullable=False),
        pa.field("epe_px", pa.float64(), nullable=False),
    ],
)

#: The collapse signs `coherence` knows, in report order.
SIGNS = ("id_drift", "flow_jump", "entropy_jump", "score_collapse")

#: One row per frame of a per-frame metrics table; a sign is null when its metric is absent or null.
FRAME_FLAGS = tagged(
    "frame_flags/1",
    [
        pa.field("frame", pa.int64(), nullable=False),
        pa.field("id_match_rate", pa.float64(), nullable=True),
        pa.field("flow_l2_px", pa.float64(), nullable=True),
        pa.field("clip_entropy_bits", pa.float64(), nullable=True),
        pa.field("coherence_score", pa.float64(), nullable=True),
        *[pa.field(sign, pa.bool_(), nullable=True) for sign in SIGNS],
        pa.field("rule_holds", pa.bool_(), nullable=False),
        pa.field("collapsed", pa.bool_(), nullable=False),  # at or after the onset frame
    ],
)
