"""Schema of the ``sites`` table: live bytes by allocation site, per device and view."""

from __future__ import annotations

import pyarrow as pa

from veotrace.schemas.base import tagged

SITES = tagged(
    "sites/1",
    [
        pa.field("device", pa.int32(), nullable=False),
        # "peak_allocated", "peak_requested", "peak_reserved" (live blocks at that peak), "end", "pinning"
        pa.field("view", pa.string(), nullable=False),
        pa.field("site", pa.string(), nullable=False),  # "file:line function" of the first user frame
        pa.field("bytes", pa.int64(), nullable=False),  # live block bytes (pinning: of the pinning blocks)
        pa.field("blocks", pa.int64(), nullable=False),
        pa.field("share", pa.float64(), nullable=True),  # of the view's live bytes; null for pinning
        pa.field("stranded_bytes", pa.int64(), nullable=True),  # pinning: free bytes of the segments it pins
    ],
)
