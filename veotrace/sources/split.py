"""Readers of pieces of inputs: whole files, line-aligned byte ranges of plain CSV logs, Parquet row groups.

``plan_pieces`` cuts the inputs of a command into independent pieces; ``read_piece`` streams one
piece as ALLOC_EVENTS batches, on any process or cluster worker that sees the path. The readers of
``alloc_log`` and ``parquet`` are reused as they are: a byte range goes through the same C scanner
(or pyarrow) and the same conforming step as a whole file, so the events of the pieces of a file are
exactly the events of the file.

A byte range [a, b) owns the lines that *start* in it (a line starts at the first data byte or right
after a newline), so neighbouring ranges cut at any byte partition the lines without a shared
boundary. Byte ranges are used for uncompressed CSV only (gzip and zstd streams cannot be entered in
the middle) and not when the ``seq`` column (the row number in the file) is wanted.

A PyTorch snapshot pickle is one piece: its entries refer by memo index to strings and frame dicts
pickled once anywhere before them, so no piece after the first can be decoded without decoding all
that precedes it (the streaming reader, ``snapshots/stream.py``, reads it in flat memory on one process).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from veotrace.sources.base import ReadOptions, ReadReport, compression_of
from veotrace.sources.detect import BY_NAME


@dataclass(frozen=True)
class Piece:
    """One independent part of the inputs.

    Attributes:
        path: the file (read where the task runs).
        fmt: detected format name (``detect.FORMATS``).
        kind: "file", "range" (bytes [start, stop) of a plain CSV log) or "row_groups" ([start, stop)).
        nbytes: about how many file bytes the piece covers (for progress and balancing).
    """

    path: str
    fmt: str
    kind: str = "file"
    start: int = 0
    stop: int = 0
    nbytes: int = 0


def plan_pieces(paths: Sequence[Path], *, options: ReadOptions, report: ReadReport,
                split_bytes: int | None, columns: Sequence[str] | None = None) -> list[Piece]:
    """The pieces of ``paths`` in read order: large plain CSV logs by byte range, Parquet by row group.

    Args:
        split_bytes: target bytes per piece (None: one piece per file).
        columns: the ALLOC_EVENTS columns to be read; byte ranges are not used when ``seq`` is one.

    Raises:
        TraceFormatError: as ``resolve_inputs`` (unreadable or unsupported input).
    """
    from veotrace.sources import resolve_inputs

    pieces: list[Piece] = []
    for path, fmt in resolve_inputs(list(paths), "alloc_events", options=options, report=report):
        size = path.stat().st_size
        whole = Piece(str(path), fmt.name, nbytes=size)
        if split_bytes is None:
            pieces.append(whole)
        elif fmt.name == "alloc-csv" and (columns is not None and "seq" not in columns):
            pieces.extend(_csv_ranges(path, fmt.name, size, split_bytes) or [whole])
        elif fmt.name == "parquet":
            pieces.extend(_row_groups(path, size, split_bytes) or [whole])
        else:
            pieces.append(whole)
    return pieces


def _csv_ranges(path: Path, fmt: str, size: int, split: int) -> list[Piece]:
    with path.open("rb") as fh:
        head = fh.read(1 << 16)
    if compression_of(head) is not None or size <= split:
        return []
    start = _header_end(head)
    if start is None:
        return []
    n = max(1, round((size - start) / split))
    cuts = [start + (size - start) * i // n for i in range(n + 1)]
    return [Piece(str(path), fmt, "range", a, b, b - a) for a, b in zip(cuts, cuts[1:], strict=False)]


def _header_end(head: bytes) -> int | None:
    """Offset just past the header (the first non-blank line), as the whole-file reader finds it."""
    pos = 0
    while True:
        end = head.find(b"\n", pos)
        if end < 0:
            return None
        if head[pos:end].strip():
            return end + 1
        pos = end + 1


def _row_groups(path: Path, size: int, split_bytes: int) -> list[Piece]:
    import pyarrow.parquet as pq

    from veotrace.schemas import ALLOC_EVENTS, schema_tag
    from veotrace.sources.remote import arrow_source

    try:
        meta = pq.read_metadata(arrow_source(path))
        tagged = schema_tag(meta.schema.to_arrow_schema()) == schema_tag(ALLOC_EVENTS)
    except (pa.ArrowInvalid, OSError):
        return []  # the whole-file reader says what is wrong with it
    if not tagged or meta.num_row_groups < 2:
        return []
    out, first, acc = [], 0, 0
    for i in range(meta.num_row_groups):
        acc += meta.row_group(i).total_byte_size
        if acc >= split_bytes or i == meta.num_row_groups - 1:
            out.append((first, i + 1, acc))
            first, acc = i + 1, 0
    total = sum(b for _, _, b in out) or 1
    return [Piece(str(path), "parquet", "row_groups", a, b, size * nb // total) for a, b, nb in out]


def read_piece(piece: Piece, *, options: ReadOptions, report: ReadReport,
               columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
    """Stream the ALLOC_EVENTS batches (only ``columns``) of one piece.

    Raises:
        TraceFormatError: as the whole-file reader, with line numbers counted over the whole file.
    """
    from veotrace.sources.base import guarded  # data errors -> one TraceFormatError naming the file
    from veotrace.sources.limits import bounded_sizes  # sizes past 16 TiB, as the whole-file read
    from veotrace.sources.logs.extra import check_source
    from veotrace.sources.remote import as_path

    path = as_path(piece.path)  # a local Path, or a URL each worker opens itself
    check_source(path, piece.fmt, options.extra_columns)
    if piece.kind == "range":
        batches = _read_range(path, piece.start, piece.stop, options, report, columns)
    elif piece.kind == "row_groups":
        batches = _read_row_groups(path, piece.start, piece.stop, columns, options, report)
    else:
        module = importlib.import_module(f"veotrace.sources.{BY_NAME[piece.fmt].module}")
        batches = module.iter_alloc_events(path, options=options, report=report, columns=columns)
    yield from bounded_sizes(path, guarded(path, batches), skip_bad_rows=options.skip_bad_rows, report=report)


def _read_row_groups(path: Path, start: int, stop: int, columns, options: ReadOptions,
                     report: ReadReport) -> Iterator[pa.RecordBatch]:
    import pyarrow.parquet as pq

    from veotrace.schemas.events import alloc_events_schema
    from veotrace.sources.logs import extra
    from veotrace.sources.remote import arrow_source

    schema = alloc_events_schema(columns)
    pf = pq.ParquetFile(arrow_source(path))
    extras = extra.match(path, options.extra_columns, pf.schema_arrow.names)
    for i in range(start, stop):
        table = pf.read_row_group(i, columns=schema.names + list(extras.values()), use_threads=True)
        for batch in table.rename_columns(schema.names + list(extras)).to_batches():
            out = pa.RecordBatch.from_arrays(batch.columns[:len(schema)], schema=schema)
            yield extra.append(out, batch, options.extra_columns, report.column_types, path)


def _first_line_start(fh, offset: int, data_start: int) -> int:
    """The start of the first line starting at or after ``offset``."""
    if offset <= data_start:
        return data_start
    fh.seek(offset - 1)
    pos = offset - 1
    while True:
        block = fh.read(1 << 16)
        if not block:
            return pos
        nl = block.find(b"\n")
        if nl >= 0:
            return pos + nl + 1
        pos += len(block)


def _read_range(path: Path, start: int, stop: int, options: ReadOptions, report: ReadReport,
                columns) -> Iterator[pa.RecordBatch]:
    from veotrace.schemas.events import alloc_events_schema
    from veotrace.sources.logs import alloc_log as al
    from veotrace.sources.logs import extra
    from veotrace.sources.logs.csvscan import scanner_for
    from veotrace.sources.logs.pipeline import read_ahead

    header = al._header(path, False)
    present = al._check_columns(path, header)
    read_cols = al._wanted(columns, present)
    if options.extra_columns:  # as in alloc_log.iter_alloc_events
        extras = extra.match(path, options.extra_columns, header)
        present = {**present, **extras}
        read_cols = read_cols + list(extras)
    schema = alloc_events_schema(columns)
    with path.open("rb") as fh:
        head = fh.read(1 << 16)
        data_start = _header_end(head)
        names = al._split_header(head[:data_start])
        a = _first_line_start(fh, start, data_start)
        b = _first_line_start(fh, stop, data_start)
    parse = _chunk_parser(names, present, read_cols, options,
                          scanner_for(names, present, read_cols, options.time_unit))
    done = 0
    for raw in read_ahead(_range_chunks(path, a, b, options.block_bytes), parse, workers=1):
        if raw is _BAD:
            yield from _exact_range(path, a, b, names, read_cols, options, report, schema, skip=done)
            return
        if raw is not None:
            done += raw.num_rows
            yield al.conform_log_batch(raw, path=path, options=options, seq_start=0, schema=schema, report=report)


def _range_chunks(path: Path, a: int, b: int, size: int) -> Iterator[pa.Buffer]:
    """Buffers of about ``size`` bytes of [a, b) cut at line ends (b is a line start or the end)."""
    from veotrace.sources.remote import arrow_file

    with arrow_file(path) as fh:
        fh.seek(a)
        pos = a
        while pos < b:
            data = fh.read_buffer(min(size, b - pos))
            if data.size == 0:
                return
            if pos + data.size < b:
                cut = data.to_pybytes().rfind(b"\n") + 1  # a long block holds a line end (else take it whole)
                if cut > 0:
                    data = data.slice(0, cut)
                    fh.seek(pos + cut)
            pos += data.size
            yield data


_BAD = object()  # a chunk with a value the exact path must report


def _chunk_parser(names, present, read_cols, options, scanner):
    import pyarrow.csv as pcsv

    from veotrace.sources.logs import alloc_log as al

    read_options = pcsv.ReadOptions(column_names=names, use_threads=False,
                                    block_size=max(options.block_bytes // 16, 1 << 16))
    convert_options = pcsv.ConvertOptions(column_types=al._types(present, read_cols, options),
                                          include_columns=[present[c] for c in read_cols],
                                          strings_can_be_null=True, quoted_strings_can_be_null=True)

    def parse(chunk: pa.Buffer):
        if scanner is not None:
            batch = scanner(chunk)
            if batch is not None:
                return batch if batch.num_rows else None
        try:
            table = pcsv.read_csv(pa.BufferReader(chunk), read_options=read_options,
                                  convert_options=convert_options)
        except pa.ArrowInvalid:
            return _BAD
        if table.num_rows != al._line_count(chunk):
            # As in alloc_log: a stray quote makes pyarrow join lines without an error; the exact path
            # reads such a range line by line and names the line.
            return _BAD
        if table.num_rows == 0:
            return None
        return al._checked(al._rename(table.unify_dictionaries().combine_chunks().to_batches()[0], present),
                          options) or _BAD

    return parse


def _exact_range(path, a, b, header, read_cols, options, report, schema, *, skip: int) -> Iterator[pa.RecordBatch]:
    """The rows of [a, b) after the first ``skip`` (already yielded), parsed one physical line at a
    time by the exact path's own field rules (``alloc_exact``); line numbers count over the whole file.
    ``header``: the file's column names (as ``_read_range`` split them)."""
    from veotrace.sources.logs import alloc_exact as ex
    from veotrace.sources.logs import alloc_log as al

    index, width = {h.lower(): j for j, h in enumerate(header)}, len(header)
    rows: dict[str, list] = {c: [] for c in read_cols}
    seen = 0
    with path.open("rb") as fh:
        lineno = _count_lines(fh, a)
        for raw in _lines(fh, a, b):
            lineno += 1
            raw = raw.removesuffix(b"\n").removesuffix(b"\r")
            if not raw.strip():
                continue
            seen += 1
            if seen <= skip:
                continue
            parsed = ex.parse_row(raw, lineno, path, read_cols, options, report,
                                  lambda text: ex._csv_getter(text, index, width))
            if parsed is None:
                continue
            for c in read_cols:
                rows[c].append(parsed[c])
            if len(rows[read_cols[0]]) >= al.SLOW_BATCH_ROWS:
                yield al.conform_log_batch(ex._rows_batch(rows, options), path=path, options=options,
                                           seq_start=0, schema=schema, report=report)
                rows = {c: [] for c in read_cols}
    if rows[read_cols[0]]:
        yield al.conform_log_batch(ex._rows_batch(rows, options), path=path, options=options, seq_start=0,
                                   schema=schema, report=report)


def _count_lines(fh, end: int) -> int:
    fh.seek(0)
    n, remaining = 0, end
    while remaining:
        block = fh.read(min(1 << 20, remaining))
        if not block:
            break
        n += block.count(b"\n")
        remaining -= len(block)
    return n


def _lines(fh, a: int, b: int) -> Iterator[bytes]:
    """The physical lines (with their line ends) starting in [a, b)."""
    fh.seek(a)
    pos = a
    while pos < b:
        line = fh.readline()
        if not line:
            return
        pos += len(line)
        yield line
