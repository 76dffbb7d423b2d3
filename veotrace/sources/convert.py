"""Writer of the conformed alloc/free table as Parquet (the input every command reads fastest)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from veotrace.schemas import ALLOC_EVENTS


def write_parquet(batches: Iterable[pa.RecordBatch], output: Path) -> int:
    """Stream ALLOC_EVENTS batches into ``output`` (zstd, dictionary columns kept); returns rows written.

    Writes to a temporary name first so a failed read never leaves a half-written file behind.
    """
    tmp = output.with_name(output.name + ".partial")
    rows = 0
    try:
        with pq.ParquetWriter(tmp, ALLOC_EVENTS, compression="zstd") as writer:
            for batch in batches:
                writer.write_batch(pa.RecordBatch.from_arrays(batch.columns, schema=ALLOC_EVENTS))
                rows += batch.num_rows
        tmp.replace(output)
    finally:
        tmp.unlink(missing_ok=True)
    return rows
