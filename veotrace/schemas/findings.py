"""Schema of the ``diagnose`` table: one row per finding, ranked (``findings/1``)."""

from __future__ import annotations

import json

import pyarrow as pa

from veotrace.schemas.base import tagged

FINDINGS = tagged(
    "findings/1",
    [
        pa.field("rank", pa.int64(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),  # entropy_trend, fragmentation_crossing, l2_break, ...
        pa.field("severity", pa.string(), nullable=False),  # high, medium, low (by score); note (why: evidence "note")
        pa.field("score", pa.float64(), nullable=False),  # impact x confidence
        pa.field("impact", pa.float64(), nullable=False),
        pa.field("confidence", pa.float64(), nullable=False),
        pa.field("bytes_at_stake", pa.int64(), nullable=True),  # the bytes a memory finding is about
        pa.field("title", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("axis", pa.string(), nullable=False),  # time (seconds on the common axis), launch, frame, event (a trace without times), none
        pa.field("start", pa.float64(), nullable=True),
        pa.field("end", pa.float64(), nullable=True),
        pa.field("command", pa.string(), nullable=False),  # the veotrace command that shows it
        pa.field("suggestion", pa.string(), nullable=True),
        pa.field("evidence_json", pa.string(), nullable=False),
    ],
)


def findings_table(findings: list) -> pa.Table:
    """The ranked findings (``findings.model.Finding``) as ``findings/1`` rows."""
    rows = [{**{k: v for k, v in f.to_dict().items() if k in FINDINGS.names}, "rank": i + 1,
             "evidence_json": json.dumps(f.evidence, default=str)} for i, f in enumerate(findings)]
    return pa.Table.from_pylist(rows, schema=FINDINGS) if rows else FINDINGS.empty_table()
