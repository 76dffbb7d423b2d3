"""Reader of Parquet alloc/free tables: ALLOC_EVENTS written by 'veotrace convert', or canonical log columns."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from veotrace.errors import TraceFormatError
from veotrace.schemas import ALLOC_EVENTS, schema_tag
from veotrace.schemas.events import alloc_events_schema
from veotrace.sources.base import ReadOptions, ReadReport
from veotrace.sources.base import detail as _detail
from veotrace.sources.logs import extra
from veotrace.sources.logs.pipeline import read_ahead

#: Rows per batch when streaming a Parquet file.
BATCH_ROWS = 1 << 18


def iter_alloc_events(
    path: Path,
    *,
    options: ReadOptions,
    report: ReadReport,
    columns: Sequence[str] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Stream ALLOC_EVENTS batches (only ``columns``) from a Parquet file.

    Raises:
        TraceFormatError: not readable Parquet, or neither alloc_events/1 nor canonical log columns.
    """
    try:
        from veotrace.sources.remote import arrow_source

        pf = pq.ParquetFile(arrow_source(path))
    except (pa.ArrowInvalid, OSError) as exc:
        raise TraceFormatError(f"not a readable Parquet file ({_detail(exc)})", path=path) from None
    schema = pf.schema_arrow
    if pf.metadata.num_rows == 0 and isinstance(path, Path):  # a snapshot's conversion: its own error
        from veotrace.sources.snapshots.converted import converted_snapshot

        converted = converted_snapshot(path)
        if converted is not None:
            raise converted.no_trace_events()
    out_schema = alloc_events_schema(columns)
    wanted = out_schema.names
    size = path.stat().st_size
    groups = max(pf.num_row_groups, 1)
    extras = extra.match(path, options.extra_columns, schema.names)
    if schema_tag(schema) == schema_tag(ALLOC_EVENTS):
        _check_tagged(schema, out_schema, path)
        # Whole row groups, the next decoded (columns in parallel) while the caller analyses this
        # one; memory stays bounded by the row-group size 'veotrace convert' writes. One worker:
        # a ParquetFile must not be read from two threads at once (that corrupts the heap).
        def group(i: int) -> pa.Table:
            table = pf.read_row_group(i, columns=wanted + list(extras.values()), use_threads=True)
            return table.rename_columns(wanted + list(extras))

        for i, table in enumerate(read_ahead(iter(range(pf.num_row_groups)), group, workers=1)):
            if "size_bytes" in wanted:
                _check_sizes(table, path)
            for batch in table.to_batches():
                out = pa.RecordBatch.from_arrays(batch.columns[:len(wanted)], schema=out_schema)
                yield extra.append(out, batch, options.extra_columns, report.column_types, path)
            if on_progress is not None:
                on_progress(size * (i + 1) // groups)
        return
    from veotrace.sources.logs.alloc_log import LOG_COLUMNS, REQUIRED, conform_log_batch

    names = {n.lower(): n for n in schema.names}
    missing = [c for c in REQUIRED if c not in names]
    if missing:
        raise TraceFormatError(
            f"Parquet file has neither the veotrace alloc_events schema nor the log column(s) {', '.join(missing)}",
            path=path, hint="Write it with 'veotrace convert', or name columns timestamp, op_type, size_bytes")
    read = [names[c] for c in LOG_COLUMNS if c in names] + list(extras.values())
    seq = 0
    for i, batch in enumerate(pf.iter_batches(batch_size=BATCH_ROWS, columns=read)):
        batch = batch.rename_columns([n.lower() for n in batch.schema.names])
        _check_foreign(batch, path, seq)
        yield conform_log_batch(batch, path=path, options=options, seq_start=seq, schema=out_schema, report=report)
        seq += batch.num_rows
        if on_progress is not None:
            on_progress(size * (i + 1) // groups)


def _check_tagged(schema: pa.Schema, wanted: pa.Schema, path: Path) -> None:
    """A file tagged alloc_events/1 must have its columns with their types (a damaged or hand-made
    file may carry the tag without them)."""
    for field in wanted:
        i = schema.get_field_index(field.name)
        if i < 0 or schema.field(i).type != field.type:
            found = "missing" if i < 0 else f"of type {schema.field(i).type}"
            raise TraceFormatError(f"tagged alloc_events/1 but column '{field.name}' is {found}", path=path,
                                   field=field.name, hint="Write it again with 'veotrace convert'")


def _check_sizes(table: pa.Table, path: Path) -> None:
    """Negative sizes are refused here as in every reader (numpy: pyarrow.compute costs 30 ms to import)."""
    for chunk in table.column("size_bytes").chunks:
        if len(chunk) and chunk.null_count == 0 and chunk.to_numpy().min() < 0:
            raise TraceFormatError("negative size in the alloc_events table", path=path, field="size_bytes",
                                   hint="Sizes are byte counts (>= 0); re-convert the source")


def _check_foreign(batch: pa.RecordBatch, path: Path, seq: int) -> None:
    import pyarrow.compute as pc

    for col in ("timestamp", "size_bytes", "op_type"):
        arr = batch.column(col)
        if arr.null_count:
            row = seq + int(pc.index(pc.is_null(arr), True).as_py())
            raise TraceFormatError("missing value", path=path, line=row + 1, field=col,
                                   hint="Row numbers count from 1 over the Parquet file")
    if not pa.types.is_integer(batch.column("size_bytes").type) or (
        len(batch) and pc.min(batch.column("size_bytes")).as_py() < 0
    ):
        raise TraceFormatError("expected non-negative integer sizes", path=path, field="size_bytes")
