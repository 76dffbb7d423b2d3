"""Reader of canonical alloc/free logs (CSV or JSON Lines, plain, gzip or zstd) into ALLOC_EVENTS batches.

Fast path: line-aligned CSV chunks read by the C scanner (``csvscan``, the plain shape of the
timestamp/op/size columns) or else pyarrow's CSV reader, and pyarrow's streaming JSON reader, with
typed columns. When a block does not convert (a bad value), the rest of the file is re-read by the
exact path (``alloc_exact``: one physical line per row) that knows line numbers: it stops with the file,
line and column, or, with ``--skip-bad-rows``, skips and counts the bad rows. Rows already yielded
are never re-yielded. The log's columns and their read types, which both paths use, are in
``alloc_common``.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from pathlib import Path

import numpy as np
import pyarrow as pa

from veotrace.errors import TraceFormatError
from veotrace.schemas import ALLOC_EVENTS, repeated
from veotrace.schemas.events import alloc_events_schema
from veotrace.sources.base import (
    TIME_UNIT_NS,
    ReadOptions,
    ReadReport,
    open_decompressed,
    read_head,
)
from veotrace.sources.base import detail as _detail
from veotrace.sources.limits import max_line_bytes, too_long_line
from veotrace.sources.logs import extra
from veotrace.sources.logs.alloc_common import (  # noqa: F401 - SLOW_BATCH_ROWS: sources.split reads it from here
    LOG_COLUMNS,
    OP_TYPE_DICT,
    REQUIRED,
    SLOW_BATCH_ROWS,
    log_types,
)
from veotrace.sources.logs.mapped import mappable, mapped_chunks
from veotrace.sources.logs.numparse import parse_uint64
from veotrace.sources.logs.pipeline import read_ahead

#: Threads scanning CSV chunks at once (the caller's analysis runs beside them).
PARSE_WORKERS = max(2, min(os.cpu_count() or 2, 8))
#: First read for the header line (doubled until a line end is found, up to the block size).
_HEADER_PROBE = 1 << 16


class _BadBlock(Exception):
    """The fast reader met a value it cannot convert; fall back to the exact path."""


def _header(path: Path, is_jsonl: bool) -> list[str]:
    head = read_head(path, 1 << 16).decode("utf-8", errors="replace").lstrip("\ufeff")
    lines = [ln for ln in head.splitlines() if ln.strip()]
    if not lines:
        raise TraceFormatError("the file is empty", path=path)
    if is_jsonl:
        keys: set[str] = set()
        for ln in lines[:50]:
            try:
                keys |= set(json.loads(ln))
            except (json.JSONDecodeError, TypeError):
                break
        return sorted(keys)
    return header_names(lines[0], path)


def header_names(line: str, path) -> list[str]:
    """A CSV log's column names from its first line, for the whole read and a follower alike: cut where
    ``str.splitlines`` cuts it (a bare CR ends it too), refused as one error when it is not CSV."""
    line = (line.splitlines() or [""])[0]
    try:
        return [c.strip().strip('"') for c in next(csv.reader([line]), [])]
    except csv.Error as exc:
        raise TraceFormatError(f"the header line is not CSV ({exc})", path=path, line=1,
                               hint="An alloc/free log starts with a header: timestamp,op_type,size_bytes") from None


def _check_columns(path: Path, names: list[str]) -> dict[str, str]:
    """Map lower-cased canonical names to the file's spelling; refuse a missing required column."""
    found = {n.lower(): n for n in names}
    lowered = [n.lower() for n in names]
    for col in LOG_COLUMNS:
        if lowered.count(col) > 1:
            raise TraceFormatError(f"column '{col}' appears {lowered.count(col)} times in the header", path=path,
                                   line=1, hint="Name each column once")
    for req in REQUIRED:
        if req not in found:
            raise TraceFormatError(
                f"missing required column '{req}' (found: {', '.join(names) or 'none'})",
                path=path, line=1,
                hint="An alloc/free log needs columns timestamp, op_type, size_bytes",
            )
    return {k: v for k, v in found.items() if k in LOG_COLUMNS}


def _wanted(columns: Sequence[str] | None, present: dict[str, str]) -> list[str]:
    """Canonical log columns to read for the requested ALLOC_EVENTS columns."""
    want = set(ALLOC_EVENTS.names if columns is None else columns)
    return [log for log, ev in LOG_COLUMNS.items() if ev in want and log in present]


def iter_alloc_events(
    path: Path,
    *,
    options: ReadOptions,
    report: ReadReport,
    columns: Sequence[str] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Stream ``path`` (CSV or JSONL log) as ALLOC_EVENTS batches restricted to ``columns``.

    Raises:
        TraceFormatError: missing column, header only, bad value (without skip_bad_rows), corrupt stream.
    """
    head = read_head(path, 4096).lstrip(b"\xef\xbb\xbf").lstrip()
    is_jsonl = head.startswith(b"{")
    names = _header(path, is_jsonl)
    present = _check_columns(path, names)
    read_cols = _wanted(columns, present)
    if options.extra_columns:  # read as text under their lower-cased names, typed in conform_log_batch
        extras = extra.match(path, options.extra_columns, names)
        present = {**present, **extras}
        read_cols = read_cols + list(extras)
    out_schema = alloc_events_schema(columns)
    state = {"rows": 0}
    try:
        yield from _read(path, is_jsonl, present, read_cols, options, report, on_progress, out_schema, state)
    except (OSError, EOFError) as exc:
        raise _corrupt(path, exc) from None
    if state["rows"] == 0 and report.skipped_rows == 0:
        raise TraceFormatError("the log has a header but no rows", path=path,
                               hint="Check that the logger flushed the file")


def _read(path, is_jsonl, present, read_cols, options, report, on_progress, out_schema, state):
    try:
        for raw in _fast_batches(path, is_jsonl, present, read_cols, options, on_progress):
            yield conform_log_batch(raw, path=path, options=options, seq_start=state["rows"], schema=out_schema,
                                    report=report)
            state["rows"] += raw.num_rows
    except _BadBlock:
        from veotrace.sources.logs.alloc_exact import exact_rows

        for raw in exact_rows(path, is_jsonl, present, read_cols, options, report, skip=state["rows"]):
            yield conform_log_batch(raw, path=path, options=options, seq_start=state["rows"], schema=out_schema,
                                    report=report)
            state["rows"] += raw.num_rows


def _corrupt(path: Path, exc: BaseException) -> TraceFormatError:
    return TraceFormatError(f"the compressed stream is truncated or corrupt ({_detail(exc)})", path=path,
                            hint="Re-copy the file, or decompress what remains and read that")


def _types(present: dict[str, str], read_cols: list[str], options: ReadOptions) -> dict[str, pa.DataType]:
    types = log_types(options)
    return {present[c]: types.get(c, pa.string()) for c in read_cols}  # extra columns: text


def _fast_batches(path, is_jsonl, present, read_cols, options, on_progress) -> Iterator[pa.RecordBatch]:
    stream, raw = open_decompressed(path)
    try:
        yield from _fast_loop(stream, raw, is_jsonl, present, read_cols, options, on_progress, path)
    except pa.ArrowInvalid as exc:
        if "ompress" in str(exc) or "runcated" in str(exc):
            raise OSError(str(exc)) from None
        raise _BadBlock from None
    finally:
        stream.close()


def _fast_loop(stream, raw, is_jsonl, present, read_cols, options, on_progress, path) -> Iterator[pa.RecordBatch]:
    if is_jsonl:
        import pyarrow.json as pj

        types = _types(present, read_cols, options)
        types = {k: (pa.string() if v == OP_TYPE_DICT else v) for k, v in types.items()}
        if "address" in read_cols:
            types.pop(present["address"])  # may be int or "0x.." string: inferred, parsed later
        for c in read_cols:
            if c not in LOG_COLUMNS:
                types.pop(present[c])  # extra columns: numbers or text, inferred, typed in conform
        reader = pj.open_json(stream, read_options=pj.ReadOptions(block_size=options.block_bytes),
                              parse_options=pj.ParseOptions(explicit_schema=pa.schema(types),
                                                            unexpected_field_behavior="infer"))
    else:
        yield from _csv_batches(stream, raw, present, read_cols, options, on_progress, path)
        return
    keep = [present[c] for c in read_cols]
    for batch in reader:
        batch = batch.select([k for k in keep if k in batch.schema.names])
        if not _valid_text(batch):  # pyarrow's JSON reader keeps bytes that are not UTF-8 in its strings
            raise _BadBlock
        batch = _checked(_rename(batch, present), options)
        if batch is None:
            raise _BadBlock
        if on_progress is not None:
            on_progress(raw.tell())
        yield batch


def _csv_batches(stream, raw, present, read_cols, options, on_progress, path) -> Iterator[pa.RecordBatch]:
    """CSV chunks cut at line ends, each read by the C scanner or else pyarrow's ``read_csv``.

    The scanner (``csvscan``) reads the plain shape of the timestamp, op and size columns, one
    chunk per core; a chunk it declines goes to pyarrow's multithreaded ``read_csv``, and a chunk
    pyarrow cannot convert to the exact path. Memory stays bounded by the chunk size whatever the
    length of the log.
    """
    import pyarrow.csv as pcsv

    from veotrace.sources.logs.csvscan import scanner_for

    header, chunks = _line_chunks(stream, raw, options.block_bytes, path)
    names = _split_header(header)
    scanner = scanner_for(names, present, read_cols, options.time_unit)
    read_options = pcsv.ReadOptions(column_names=names, use_threads=True,
                                    block_size=max(options.block_bytes // 16, 1 << 16))
    convert_options = pcsv.ConvertOptions(
        column_types=_types(present, read_cols, options),
        include_columns=[present[c] for c in read_cols],
        strings_can_be_null=True,
        quoted_strings_can_be_null=True,
    )

    def parse(chunk: pa.Buffer) -> pa.RecordBatch | None:
        if scanner is not None:
            batch = scanner(chunk)
            if batch is not None:
                return batch if batch.num_rows else None
        table = pcsv.read_csv(pa.BufferReader(chunk), read_options=read_options, convert_options=convert_options)
        if table.num_rows != _line_count(chunk):
            # A stray quote makes pyarrow join lines up to the next quote (rows lost without an error),
            # blank lines are skipped: the exact path reads such a chunk line by line and names the line.
            return _BAD
        if table.num_rows == 0:
            return None
        return _checked(_rename(table.unify_dictionaries().combine_chunks().to_batches()[0], present), options) or _BAD

    # The next chunks are read and parsed (GIL released) while the caller analyses this one: one
    # chunk per core with the scanner, one ahead with pyarrow (which uses every core by itself).
    with closing(read_ahead(chunks, parse, workers=PARSE_WORKERS if scanner is not None else 1)) as parsed:
        for batch in parsed:
            if batch is _BAD:
                raise _BadBlock
            if batch is not None:
                if on_progress is not None:
                    on_progress(raw.tell())
                yield batch


_BAD = object()  # a chunk with a value the exact path must report


def _line_count(chunk: pa.Buffer) -> int:
    from veotrace.sources.logs.csvscan import count_lines

    n = count_lines(chunk)
    return n + 1 if chunk.size and chunk[chunk.size - 1] != 10 else n


def _split_header(line: bytes) -> list[str]:
    text = line.decode("utf-8", errors="replace").lstrip("\ufeff").strip()
    return [c.strip().strip('"') for c in next(csv.reader([text]))]


def _line_chunks(stream, raw, size: int, path: Path) -> tuple[bytes, Iterator[pa.Buffer]]:
    """The header line, and buffers of about ``size`` bytes holding whole lines only.

    A plain file not written lately is memory-mapped (``sources.mapped``: the buffers are views, no
    copy), another plain file re-positioned at each cut; a decompressing stream carries the partial
    last line over into the next buffer.
    """
    seekable = stream is raw
    # The header is read in growing probes, not a whole block: a 16 MiB read and copy on the main
    # thread, before any scanning starts, was ~7% of a 10M-event entropy run.
    first, start, end, probe = b"", 0, 0, _HEADER_PROBE
    while True:  # the header is the first non-blank line, as in _header
        end = first.find(b"\n", start)
        if end >= 0 and first[start : end + 1].strip():
            end += 1
            break
        if end >= 0:
            start = end + 1
            continue
        more = stream.read_buffer(min(probe, size - len(first))).to_pybytes() if len(first) < size else b""
        if not more:
            end = len(first)
            break
        first, probe = first + more, probe * 2
    header = first[start:end]
    if seekable:
        stream.seek(end)
    if b"\n" not in first and b"\r" in first.strip():
        raise TraceFormatError("the lines end in CR only (classic Mac line ends), which veotrace does not read",
                               path=path, hint="Convert them first: tr '\\r' '\\n' < in.csv > out.csv")
    if b"\n" not in first and len(first) >= size:
        raise too_long_line(path, 1)
    if seekable and mappable(path):
        return header, mapped_chunks(path, end, size)
    return header, _chunks(stream, size, seekable, carry=b"" if seekable else first[end:], offset=end, path=path,
                           line=first.count(b"\n", 0, end) + 1)


def _chunks(stream, size: int, seekable: bool, *, carry: bytes, offset: int, path: Path,
            line: int | None = None) -> Iterator[pa.Buffer]:
    """Buffers ending at a line end; ``carry`` is text read but not yet yielded, ``offset`` its position.

    ``line``: the number of the line at ``offset``, to name a line too long before the first buffer.
    """
    while True:
        data = stream.read_buffer(size)
        if data.size == 0:
            if carry:
                yield pa.py_buffer(carry)
            return
        buf = carry + data.to_pybytes() if carry else data
        view = memoryview(buf)
        cut = bytes(view[-min(len(view), 1 << 16):]).rfind(b"\n")
        if cut < 0:  # no line end in the last 64 KiB: keep accumulating, up to the longest line allowed
            if len(view) > max_line_bytes() and b"\n" not in view:
                raise too_long_line(path, line)
            carry = bytes(view)
            continue
        line = None  # past the first buffer: lines are not counted
        cut += len(view) - min(len(view), 1 << 16) + 1
        if seekable:
            offset += cut
            stream.seek(offset)
            carry = b""
        else:
            carry = bytes(view[cut:])
        yield pa.py_buffer(view[:cut])


def _rename(batch: pa.RecordBatch, present: dict[str, str]) -> pa.RecordBatch:
    back = {v: k for k, v in present.items()}
    return batch.rename_columns([back.get(n, n) for n in batch.schema.names])


def _valid_text(batch: pa.RecordBatch) -> bool:
    """Whether every string column of ``batch`` is valid UTF-8 (the exact path names the line that is not)."""
    for col in batch.columns:
        values = col.dictionary if pa.types.is_dictionary(col.type) else col
        if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
            try:
                values.validate(full=True)
            except pa.ArrowInvalid:
                return False
    return True


def _checked(batch: pa.RecordBatch, options: ReadOptions) -> pa.RecordBatch | None:
    """The batch with addresses parsed to uint64, or None when a value needs the exact path.

    The fast path checks what pyarrow's typed conversion does not: required values present, sizes
    non-negative, ops non-empty, addresses parseable (parsed here once, not again in conform).
    """
    import pyarrow.compute as pc  # the pyarrow path only (30 ms to import)

    names = batch.schema.names
    for col in ("timestamp", "size_bytes", "op_type"):
        if col in names and batch.column(col).null_count:
            return None
    if "timestamp" in names and pa.types.is_floating(batch.column("timestamp").type) and len(batch):
        ns = np.abs(batch.column("timestamp").to_numpy(zero_copy_only=False)) * TIME_UNIT_NS[options.time_unit]
        if not (ns < 2.0**63).all():  # inf, NaN or past the int64 ns range: the exact path names the line
            return None
    if "size_bytes" in names and len(batch) and pc.min(batch.column("size_bytes")).as_py() < 0:
        return None
    if "op_type" in names and len(batch):
        ops = batch.column("op_type")
        ops = ops.dictionary if pa.types.is_dictionary(ops.type) else ops
        if pc.any(pc.equal(ops, "")).as_py() or pc.any(pc.match_substring(ops, "\x00")).as_py():
            return None
    if "address" in names:
        parsed, bad = parse_uint64(batch.column("address"))
        if bad.any():
            return None
        batch = batch.set_column(names.index("address"), "address", parsed)
    return batch


def conform_log_batch(raw: pa.RecordBatch | pa.Table, *, path: Path, options: ReadOptions,
                      seq_start: int, schema: pa.Schema, report: ReadReport | None = None) -> pa.RecordBatch:
    """Canonical log columns (timestamp, op_type, ...) -> an ALLOC_EVENTS batch with ``schema``'s columns,
    then the extra columns of ``options`` (under their lower-cased names in ``raw``; their types are
    kept in ``report``, which must be given when there are extra columns)."""
    n = raw.num_rows
    names = raw.schema.names
    out: dict[str, pa.Array] = {}
    for field in schema:
        name = field.name
        if name == "seq":
            arr = pa.array(np.arange(seq_start, seq_start + n, dtype=np.int64))
        elif name == "source_file":
            arr = repeated(str(path), n)
        elif name == "ts_ns" and "timestamp" in names:
            arr = _to_ns(_col(raw, "timestamp"), options.time_unit)
        elif name == "op" and "op_type" in names:
            arr = _col(raw, "op_type")
            arr = arr if pa.types.is_dictionary(arr.type) else arr.cast(pa.string()).dictionary_encode()
        elif name == "address" and "address" in names:
            arr, _ = parse_uint64(_col(raw, "address"))
        elif name in names:
            arr = _col(raw, name)
        else:
            arr = pa.nulls(n, field.type)
        if arr.type != field.type:
            arr = arr.cast(field.type)
        out[name] = arr
    batch = pa.RecordBatch.from_arrays(list(out.values()), schema=schema)
    if options.extra_columns:
        batch = extra.append(batch, raw, options.extra_columns, report.column_types, path)
    return batch


def _col(raw, name: str) -> pa.Array:
    col = raw.column(name)
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _to_ns(arr: pa.Array, unit: str) -> pa.Array:
    factor = TIME_UNIT_NS[unit]
    if factor == 1 and pa.types.is_integer(arr.type):
        return arr if arr.type == pa.int64() else arr.cast(pa.int64())
    values = np.asarray(arr.cast(pa.float64()).to_numpy(zero_copy_only=False)) * factor
    if not (np.abs(values) < 2.0**63).all():  # a Parquet column; CSV/JSONL batches are checked before
        raise TraceFormatError(f"timestamps in {unit} that are not finite or past the 64-bit ns range",
                               field="timestamp", hint="Check --time-unit and the timestamp column")
    return pa.array(np.round(values).astype(np.int64))
