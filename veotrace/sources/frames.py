"""Readers layer: per-frame metrics tables (CSV, Parquet, JSON Lines, a generation service's JSON) for `coherence`.

Formats are told apart by content: Parquet by its magic bytes; JSON by its first character, where a
single object with a ``"frames"`` list is a service response and anything else one object per line
(JSON Lines); everything else is CSV. Tables of frames are small, so JSON is parsed with ``json`` to
name the exact line of a bad value.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from veotrace.errors import TraceFormatError, VeotraceError
from veotrace.sources.arrays import PARQUET_MAGIC
from veotrace.sources.base import read_head

#: Metric columns `coherence` reads, by their default names.
METRICS = ("id_match_rate", "flow_l2_px", "clip_entropy_bits", "coherence_score")
DEFAULT_FRAME_COLUMN = "frame"
ROW_ORDER = "row order (0-based)"


@dataclass
class FrameMetrics:
    """Per-frame metrics in frame order; a metric absent from the file is missing from ``metrics``.

    Attributes:
        frame: int64 frame numbers, strictly increasing.
        metrics: canonical metric name -> float64 values, NaN where the cell was empty/null.
        frame_source: where frame numbers came from: "column 'frame'" or "row order (0-based)".
        columns: every column the file has (for messages).
        kind: "csv", "parquet", "jsonl" or "service-json".
    """

    frame: np.ndarray
    metrics: dict[str, np.ndarray]
    frame_source: str
    columns: list[str] = field(default_factory=list)
    kind: str = "csv"


def read_frame_metrics(
    path: Path, *, frame_column: str | None = None, names: dict[str, str] | None = None
) -> FrameMetrics:
    """Read a per-frame metrics table.

    Args:
        frame_column: the frame-number column; None uses ``frame`` when present, else row order.
        names: canonical metric name (see METRICS) -> column name in the file, for renamed columns.
            A renamed column must exist; default-named metrics are optional.

    Raises:
        TraceFormatError: unreadable file, a named column that does not exist or no metric column at
            all (the message lists the columns found), non-numeric values (row and column), missing,
            fractional, duplicate or decreasing frame numbers.
    """
    from veotrace.sources.base import call_guarded

    return call_guarded(path, _read_frame_metrics, path, frame_column, names)


def frames_or_none(path: Path) -> FrameMetrics | None:
    """The file read as a per-frame metrics table (what ``coherence`` reads), or None when it is not one.

    ``info`` and the report try files no other reader detects this way.
    """
    try:
        return read_frame_metrics(path)
    except (VeotraceError, OSError, UnicodeDecodeError, ValueError):
        return None


def _read_frame_metrics(path: Path, frame_column: str | None, names: dict[str, str] | None) -> FrameMetrics:
    names = dict(names or {})
    kind, rows_or_table = _load(path)
    columns = _column_names(kind, rows_or_table)
    wanted = {m: names.get(m, m) for m in METRICS}
    for requested in [frame_column, *names.values()]:
        if requested is not None and requested not in columns:
            raise _missing(path, f"no column named {requested!r}", columns, field=requested)
    present = {m: col for m, col in wanted.items() if col in columns}
    if not present:
        raise _missing(path, f"none of the metric columns {', '.join(wanted.values())} is present", columns)
    lines = _lines(kind, rows_or_table)
    metrics = {m: _numeric(path, kind, rows_or_table, col, lines) for m, col in present.items()}
    n = len(next(iter(metrics.values())))
    if n == 0:
        raise TraceFormatError("the table has no rows", path=path, hint="Expected one row per frame")
    frame_col = frame_column
    if frame_col is None and DEFAULT_FRAME_COLUMN in columns:
        frame_col = DEFAULT_FRAME_COLUMN
    if frame_col is None:
        frame, source = np.arange(n, dtype=np.int64), ROW_ORDER
    else:
        frame = _frames(path, _numeric(path, kind, rows_or_table, frame_col, lines), frame_col, lines)
        source = f"column '{frame_col}'"
    return FrameMetrics(frame, metrics, source, columns, kind)


def _load(path: Path):
    if path.stat().st_size == 0:
        raise TraceFormatError("the file is empty", path=path, hint="Expected one row per frame")
    head = read_head(path)
    if head.startswith(PARQUET_MAGIC):
        return "parquet", _read_arrow(path, "parquet")
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff").lstrip()
    if text[:1] in ("{", "["):
        return _load_json(path)
    _refuse_other_formats(path, head)
    return "csv", _read_arrow(path, "csv")


def _refuse_other_formats(path: Path, head: bytes) -> None:
    """A trace of another kind, or binary data, is named as such instead of failing as a bad CSV."""
    from veotrace.sources.detect import sniff_head

    fmt = sniff_head(head)
    what = f"format {fmt.name} ({fmt.description})" if fmt is not None else (
        "binary data" if b"\x00" in head else None)
    if what is not None:
        raise TraceFormatError(
            f"detected {what}, not a per-frame metrics table", path=path,
            hint='coherence reads CSV, Parquet, JSON Lines or {"frames": [...]} JSON with one row per frame')


def _read_arrow(path: Path, kind: str):
    from veotrace.sources.arrays import read_column_table

    return read_column_table(path, kind)


def _read_text(path: Path) -> str:
    """The whole file as text (gzip/zstd decompressed), bounded by ``limits.max_file_bytes()``."""
    from veotrace.sources.base import open_decompressed
    from veotrace.sources.limits import read_bounded, text_head

    stream, _raw = open_decompressed(path)
    try:
        data = read_bounded(path, stream, head_check=text_head(path))
    finally:
        stream.close()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise TraceFormatError(f"not UTF-8 text (byte {exc.start} cannot be decoded)", path=path, line=line,
                               hint="Save the table as UTF-8") from None


def _parse_json(text: str, path: Path, line: int | None = None):
    try:
        return json.loads(text)
    except RecursionError:
        raise TraceFormatError("JSON nested too deeply to be a table of frames", path=path, line=line) from None


def _load_json(path: Path) -> tuple[str, list[dict]]:
    text = _read_text(path)
    try:
        doc = _parse_json(text, path)
    except json.JSONDecodeError:
        doc = None
    if isinstance(doc, dict) and "frames" in doc:
        frames = doc["frames"]
        if not isinstance(frames, list) or not all(isinstance(f, dict) for f in frames):
            raise TraceFormatError("'frames' must be a list of objects, one per frame", path=path, field="frames")
        return "service-json", frames
    if isinstance(doc, list) and all(isinstance(f, dict) for f in doc):
        return "service-json", doc
    rows = []
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            rows.append(None)  # keeps row i at line i; dropped below
            continue
        try:
            obj = _parse_json(line, path, i)
        except json.JSONDecodeError as exc:
            raise TraceFormatError(f"not JSON ({exc.msg})", path=path, line=i,
                                   hint='Expected JSON Lines (one object per frame) or {"frames": [...]}') from None
        if not isinstance(obj, dict):
            raise TraceFormatError("expected one JSON object per line", path=path, line=i)
        obj["\0line"] = i
        rows.append(obj)
    return "jsonl", [r for r in rows if r is not None]


def _column_names(kind: str, data) -> list[str]:
    if kind in ("csv", "parquet"):
        return list(data.column_names)
    seen: dict[str, None] = {}
    for row in data:
        seen.update(dict.fromkeys(k for k in row if k != "\0line"))
    return list(seen)


def _missing(path: Path, message: str, columns: list[str], *, field: str | None = None) -> TraceFormatError:
    found = ", ".join(columns) if columns else "none"
    return TraceFormatError(message, path=path, field=field,
                            hint=f"Columns found: {found}; name yours with --frame-col/--id-col/--flow-col/--entropy-col/--score-col")


def _lines(kind: str, data) -> list[int] | None:
    """The file line (CSV, JSON Lines) or 1-based row (Parquet) of each row; None for a service's JSON."""
    if kind == "service-json":
        return None
    if kind == "jsonl":
        return [row["\0line"] for row in data]
    return list(range(2 if kind == "csv" else 1, data.num_rows + (2 if kind == "csv" else 1)))


def _at(lines: list[int] | None, i: int) -> tuple[dict, str]:
    """(line= keyword for the error, text suffix) locating row ``i``."""
    return ({"line": lines[i]}, "") if lines is not None else ({}, f" in frames[{i}]")


def _numeric(path: Path, kind: str, data, column: str, lines: list[int] | None) -> np.ndarray:
    """float64 values of ``column`` (NaN for empty/null cells)."""
    if kind in ("csv", "parquet"):
        import pyarrow as pa

        from veotrace.sources.arrays import non_numeric_error

        col = data.column(column)
        if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type) or pa.types.is_null(col.type)):
            raise non_numeric_error(path, column, col, header_rows=1 if kind == "csv" else 0)
        return col.cast(pa.float64()).fill_null(math.nan).to_numpy()
    out = np.empty(len(data), dtype=np.float64)
    for i, row in enumerate(data):
        value = row.get(column)
        if value is None:
            out[i] = math.nan
        elif isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**1023):
            out[i] = value
        else:
            where, suffix = _at(lines, i)
            raise TraceFormatError(f"non-numeric value {value!r}{suffix}", path=path, field=column,
                                   hint="Every metric must be a JSON number (or null)", **where)
    return out


def _frames(path: Path, values: np.ndarray, column: str, lines: list[int] | None) -> np.ndarray:
    """Frame numbers as int64, checked to be present, whole and strictly increasing."""
    hint = "One row per frame, sorted by frame number"
    missing = ~np.isfinite(values)
    fractional = ~missing & (values != np.floor(np.where(missing, 0, values)))
    if missing.any() or fractional.any():
        i = int(np.flatnonzero(missing | fractional)[0])
        where, suffix = _at(lines, i)
        what = "missing frame number" if missing[i] else f"frame number must be a whole number, found {values[i]!r}"
        raise TraceFormatError(what + suffix, path=path, field=column, hint=hint, **where)
    huge = np.abs(values) >= 2.0**63
    if huge.any():
        i = int(np.flatnonzero(huge)[0])
        where, suffix = _at(lines, i)
        raise TraceFormatError(f"frame number {values[i]:g}{suffix} is outside the 64-bit integer range",
                               path=path, field=column, hint=hint, **where)
    frame = values.astype(np.int64)
    step = np.diff(frame)
    if (step <= 0).any():
        i = int(np.flatnonzero(step <= 0)[0]) + 1
        where, suffix = _at(lines, i)
        if step[i - 1] == 0:
            msg = f"duplicate frame {frame[i]}{suffix} (also the row before)"
        else:
            msg = f"frame numbers must increase: frame {frame[i]}{suffix} follows frame {frame[i - 1]}"
        raise TraceFormatError(msg, path=path, field=column, hint=hint, **where)
    return frame
