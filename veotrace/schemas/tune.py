"""Schema of the ``tune`` table: one row per candidate setting, with the numbers ``simulate --policy torch
--conf CONF`` gives for it (summed over devices), its status and whether it is on the Pareto front."""

from __future__ import annotations

import pyarrow as pa

from veotrace.schemas.base import tagged

TUNE_CANDIDATES = tagged(
    "tune_candidates/1",
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("conf", pa.string(), nullable=False),  # PYTORCH_CUDA_ALLOC_CONF text ("" = PyTorch defaults)
        pa.field("status", pa.string(), nullable=False),  # "finished" or "pruned" (stopped: it could not win)
        pa.field("pareto", pa.bool_(), nullable=False),  # peak reserved vs device allocations, finished ones
        pa.field("misbehaves", pa.string(), nullable=True),  # a known-bad combination: reason (source)
        pa.field("peak_reserved_bytes", pa.int64(), nullable=False),  # pruned: when it stopped
        pa.field("peak_allocated_bytes", pa.int64(), nullable=False),
        pa.field("device_allocs", pa.int64(), nullable=False),
        pa.field("device_frees", pa.int64(), nullable=False),
        pa.field("flushes", pa.int64(), nullable=False),
        pa.field("alloc_retries", pa.int64(), nullable=False),
        pa.field("ooms", pa.int64(), nullable=False),
        pa.field("gmlake_frag", pa.float64(), nullable=True),  # 1 - peak allocated / peak reserved (GMLake)
        pa.field("pruned_at", pa.int64(), nullable=True),  # the request it stopped after
        # device allocations the recording never made (cudaMalloc or an expandable reservation: an address assumed by the driver's rule learned from the
        # trace), and the best-fit ties such an address decided: the prediction depends on them when not 0
        pa.field("assumed_addresses", pa.int64(), nullable=True),
        pa.field("assumed_ties", pa.int64(), nullable=True),
    ],
)


def candidates_table(rows: list[dict], front: list[int]) -> pa.Table:
    """The candidates as ``tune_candidates/1`` rows."""
    on = set(front)
    flat = [{**r, "pareto": r["id"] in on,
             "misbehaves": f"{r['misbehaves']['reason']} ({r['misbehaves']['source']})" if r.get("misbehaves") else None}
            for r in rows]
    return pa.Table.from_pylist(flat, schema=TUNE_CANDIDATES) if flat else TUNE_CANDIDATES.empty_table()
