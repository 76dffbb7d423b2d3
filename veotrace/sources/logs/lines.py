"""Parse a buffer of whole lines of an alloc/free log (new text of a file being followed) into ALLOC_EVENTS.

The same rules as reading the whole file (``alloc_log``): the C scanner, else pyarrow's CSV/JSON reader,
and for a buffer either declines, the exact path (``alloc_exact.parse_row``), which names the file,
line and field of a bad value or, with ``--skip-bad-rows``, skips and counts that line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from veotrace.schemas.events import alloc_events_schema
from veotrace.sources.base import ReadOptions, ReadReport
from veotrace.sources.logs import alloc_exact, alloc_log
from veotrace.sources.logs.alloc_common import REQUIRED, log_types


@dataclass
class LogShape:
    """What a log's first line says about the rest: JSON Lines or CSV, and the CSV header's columns.

    Attributes:
        is_jsonl: one JSON object per line (no header).
        header: the CSV header line as written (None for JSON Lines).
        names: the CSV columns as written; present: canonical column -> the file's spelling.
    """

    is_jsonl: bool
    header: bytes | None = None
    names: list[str] = field(default_factory=list)
    present: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, first_line: bytes, path: Path | str) -> LogShape:
        """The shape from the first non-blank line of a log.

        Raises:
            TraceFormatError: a CSV header without a required column.
        """
        text = first_line.removeprefix(b"\xef\xbb\xbf").strip()
        if text.startswith(b"{"):
            return cls(True)
        names = alloc_log.header_names(text.decode("utf-8", errors="replace"), path)
        return cls(False, text, names, alloc_log._check_columns(Path(path), names))

    def is_header(self, line: bytes) -> bool:
        """Whether ``line`` is this CSV log's header again (written anew after a copytruncate)."""
        return not self.is_jsonl and line.removeprefix(b"\xef\xbb\xbf").strip() == self.header


def parse_lines(data: bytes, *, shape: LogShape, path: Path | str, first_line: int, seq_start: int,
                options: ReadOptions, report: ReadReport, columns=None) -> pa.RecordBatch | None:
    """ALLOC_EVENTS rows of ``data`` (whole lines of ``path`` from line ``first_line``), None when it holds none.

    Raises:
        TraceFormatError: a bad value (without ``options.skip_bad_rows``), naming the file, line and field.
    """
    schema = alloc_events_schema(columns)
    want = set(schema.names)
    read_cols = [c for c, ev in alloc_log.LOG_COLUMNS.items() if ev in want and (shape.is_jsonl or c in shape.present)]
    if not shape.is_jsonl:
        read_cols = [c for c in read_cols if c in shape.present]
    for c in REQUIRED:
        if c not in read_cols:
            read_cols.append(c)
    raw = _fast(data, shape, read_cols, options)
    if raw is None:
        raw = _exact(data, shape, path, first_line, read_cols, options, report)
    if raw is None or raw.num_rows == 0:
        return None
    return alloc_log.conform_log_batch(raw, path=Path(path), options=options, seq_start=seq_start, schema=schema,
                                       report=report)


def _fast(data: bytes, shape: LogShape, read_cols: list[str], options: ReadOptions) -> pa.RecordBatch | None:
    """The batch by the CSV scanner or pyarrow's CSV reader; None when the exact path must read ``data``."""
    if shape.is_jsonl or not data.strip():
        return None
    from veotrace.sources.logs.csvscan import scanner_for

    buf = pa.py_buffer(data)
    scanner = scanner_for(shape.names, shape.present, read_cols, options.time_unit)
    batch = scanner(buf) if scanner is not None else None
    if batch is None:
        import pyarrow.csv as pcsv

        types = alloc_log._types(shape.present, read_cols, options)
        try:
            table = pcsv.read_csv(pa.BufferReader(buf), read_options=pcsv.ReadOptions(column_names=shape.names),
                                  convert_options=pcsv.ConvertOptions(column_types=types, strings_can_be_null=True,
                                                                      include_columns=[shape.present[c] for c in read_cols]))
        except pa.ArrowInvalid:
            return None
        if table.num_rows != data.count(b"\n") + (0 if data.endswith(b"\n") else 1):
            return None  # a blank line, a header again or a stray quote: the exact path counts lines
        if table.num_rows == 0:
            return None
        batch = alloc_log._rename(table.unify_dictionaries().combine_chunks().to_batches()[0], shape.present)
    return alloc_log._checked(batch, options)


def _exact(data: bytes, shape: LogShape, path, first_line: int, read_cols: list[str], options: ReadOptions,
           report: ReadReport) -> pa.RecordBatch | None:
    rows: dict[str, list] = {c: [] for c in read_cols}
    if shape.is_jsonl:
        getter = alloc_exact._json_getter
    else:
        index = {n.lower(): j for j, n in enumerate(shape.names)}
        width = len(shape.names)

        def getter(text: str):
            return alloc_exact._csv_getter(text, index, width)

    for i, line in enumerate(data.split(b"\n")):
        line = line.removesuffix(b"\r")
        if not line.strip() or shape.is_header(line):
            continue
        parsed = alloc_exact.parse_row(line, first_line + i, path, read_cols, options, report, getter)
        if parsed is not None:
            for c in read_cols:
                rows[c].append(parsed[c])
    if not rows[read_cols[0]]:
        return None
    types = log_types(options, op_type=pa.string())
    return pa.RecordBatch.from_pydict({c: pa.array(v, type=types.get(c, pa.string())) for c, v in rows.items()})


__all__ = ["LogShape", "parse_lines"]
