"""Writer of the conformed alloc/free table as Parquet (the input every command reads fastest)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from veotrace.schemas import ALLOC_EVENTS


def write_parquet(batches: Iterable[pa.RecordBatch], sink: Any, *, metadata: dict[bytes, bytes] | None = None) -> int:
    """Stream ALLOC_EVENTS batches into ``sink`` (a path or a binary file; zstd, dictionary columns
    kept); returns rows written. The CLI passes a temporary file that replaces the output only when
    the whole read succeeded (``veotrace.outputs.output_file``). ``metadata`` is added to the file's
    schema metadata (a converted snapshot's, ``sources.snapshots.converted``)."""
    rows = 0
    schema = ALLOC_EVENTS.with_metadata({**(ALLOC_EVENTS.metadata or {}), **metadata}) if metadata else ALLOC_EVENTS
    with pq.ParquetWriter(sink, schema, compression="zstd") as writer:
        for batch in batches:
            writer.write_batch(pa.RecordBatch.from_arrays(batch.columns, schema=schema))
            rows += batch.num_rows
    return rows


def write_part(batches: Iterable[pa.RecordBatch], *, parts: str, index: int) -> list[tuple[str, int]]:
    """The engines' convert task: write one piece as ``parts/part-NNNNNN.parquet``; [(path, rows)]."""
    from pathlib import Path

    part = Path(parts) / f"part-{index:06d}.parquet"
    return [(str(part), write_parquet(batches, part))]
