"""Exact path of the alloc-log reader: one physical line per row, every field validated, line numbers.

``alloc_log`` falls back here from the first block its fast readers cannot convert (the columns and
their types both read are in ``alloc_common``: this module never imports ``alloc_log``). Each line is
one row (a log never has a field spanning lines), so a stray quote, a NUL or an undecodable byte is
that line's error, and ``--skip-bad-rows`` skips exactly that line.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from veotrace.errors import TraceFormatError
from veotrace.sources.base import TIME_UNIT_NS, ReadOptions, ReadReport, open_decompressed
from veotrace.sources.base import detail as _detail
from veotrace.sources.limits import max_line_bytes, too_long_line
from veotrace.sources.logs.alloc_common import LOG_COLUMNS as _LOG_COLUMNS
from veotrace.sources.logs.alloc_common import REQUIRED, SLOW_BATCH_ROWS, log_types


def _raw_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes without the line end) of every line, each at most ``max_line_bytes()``."""
    limit = max_line_bytes()
    stream, _ = open_decompressed(path)
    lineno = 0
    carry = b""
    try:
        while True:
            data = stream.read(1 << 20)
            if not data:
                break
            parts = (carry + bytes(data)).split(b"\n")
            carry = parts.pop()
            for part in parts:
                lineno += 1
                yield lineno, part.removesuffix(b"\r")
            if len(carry) > limit:
                raise too_long_line(path, lineno + 1)
        if carry:
            yield lineno + 1, carry.removesuffix(b"\r")
    finally:
        stream.close()


#: Exclusive bounds of the integer columns (ALLOC_EVENTS: int64 times and sizes, int32 devices).
_BOUNDS = {"timestamp": (-(1 << 63), 1 << 63), "size_bytes": (0, 1 << 63), "stream": (-(1 << 63), 1 << 63),
           "device": (-(1 << 31), 1 << 31)}


#: Columns whose plain digits of fewer than N characters are in range without further checks.
_PLAIN_DIGITS = {"timestamp": 19, "size_bytes": 19, "stream": 19, "device": 10}


def _parse_value(col: str, text, options: ReadOptions):
    """Parse one field of the exact path; ValueError with what was expected on failure.

    A JSON number is held to what its CSV text would be: a float (12345.9, 4096.0) or a bool where
    an integer belongs is refused, not truncated to 12345 or read as 1.
    """
    if type(text) is str and col in _PLAIN_DIGITS:  # the common case: a short run of ASCII digits
        t = text.strip()
        if t.isascii() and t.isdigit() and len(t) < _PLAIN_DIGITS[col] and (col != "timestamp" or options.time_unit == "ns"):
            return int(t)
    if isinstance(text, bool) or (isinstance(text, float) and not (col == "timestamp" and options.time_unit != "ns")):
        raise ValueError(f"expected an integer, got {json.dumps(text)}")
    if isinstance(text, (dict, list)):
        raise ValueError(f"expected a number, got a JSON {'object' if isinstance(text, dict) else 'array'}")
    if isinstance(text, str):
        text = text.strip()
        if col != "op_type" and not text.isascii():  # int() takes other scripts' digits: ١٢ -> 12
            raise ValueError(f"expected a number in ASCII digits, got {_clip(text)}")
    value = _parse_text(col, text, options)
    if col in _BOUNDS and isinstance(value, int):
        lo, hi = _BOUNDS[col]
        if not lo <= value < hi:
            raise ValueError(f"{_clip(text)} is outside the 64-bit range of this column" if col != "device"
                             else f"device {_clip(text)} is outside the 32-bit range")
    if col == "timestamp" and isinstance(value, float):
        ns = value * TIME_UNIT_NS[options.time_unit]
        if not abs(ns) < 2.0**63:  # also NaN/inf
            raise ValueError(f"timestamp {_clip(text)} {options.time_unit} is not a finite time within the 64-bit ns range")
    return value


def _clip(text) -> str:
    t = str(text)
    return repr(t) if len(t) <= 40 else repr(t[:37] + "...")


def _parse_text(col: str, text, options: ReadOptions):
    if col == "op_type":
        if text in (None, ""):
            raise ValueError("expected an op name (alloc, free, defrag, ...), got an empty value")
        return str(text)
    if text is None or text == "":
        if col in REQUIRED:
            raise ValueError("expected a value, got an empty field")
        return None
    if col == "timestamp":
        try:
            return int(text) if options.time_unit == "ns" else float(text)
        except (TypeError, ValueError):
            unit = "integer nanoseconds" if options.time_unit == "ns" else f"a number in {options.time_unit}"
            raise ValueError(f"expected {unit} (see --time-unit), got {_clip(text)}") from None
    if col == "size_bytes":
        try:
            value = int(text)
        except (TypeError, ValueError):
            raise ValueError(f"expected a non-negative integer byte count, got {_clip(text)}") from None
        if value < 0:
            raise ValueError(f"expected a non-negative integer byte count, got {_clip(text)}")
        return value
    if col == "address":
        try:
            value = int(text, 16) if isinstance(text, str) and text[:2].lower() == "0x" else int(text)
        except (TypeError, ValueError):
            raise ValueError(f"expected a decimal or 0x-hex address, got {_clip(text)}") from None
        if not 0 <= value < 2**64:
            raise ValueError(f"expected an address in 0..2**64-1, got {_clip(text)}")
        return str(value)
    try:
        return int(text)
    except (TypeError, ValueError):
        raise ValueError(f"expected an integer, got {_clip(text)}") from None


def exact_rows(path, is_jsonl, present, read_cols, options, report: ReadReport, *, skip: int):
    """Re-read ``path`` line by line after the first ``skip`` good rows, validating every field.

    Each physical line is one row (a log never has a field spanning lines), so a stray quote, a NUL
    or an undecodable byte is that line's error, and ``--skip-bad-rows`` skips exactly that line:
    rows read + rows skipped = non-blank lines after the header.
    """
    rows: dict[str, list] = {c: [] for c in read_cols}
    seen = 0
    index: dict[str, int] | None = None
    width = 0
    csv.field_size_limit(max(csv.field_size_limit(), max_line_bytes()))  # a line is bounded already
    for lineno, raw in _raw_lines(path):
        if lineno == 1:
            raw = raw.removeprefix(b"\xef\xbb\xbf")
        if not raw.strip():
            continue
        if not is_jsonl and index is None:
            header = next(csv.reader([raw.decode("utf-8", errors="replace")]))
            index = {h.strip().strip('"').lower(): j for j, h in enumerate(header)}
            width = len(header)
            continue
        seen += 1
        if seen <= skip:
            continue
        getter = _json_getter if is_jsonl else (lambda text, index=index, width=width: _csv_getter(text, index, width))
        parsed = parse_row(raw, lineno, path, read_cols, options, report, getter)
        if parsed is None:
            continue
        for c in read_cols:
            rows[c].append(parsed[c])
        if len(rows[read_cols[0]]) >= SLOW_BATCH_ROWS:
            yield _rows_batch(rows, options)
            rows = {c: [] for c in read_cols}
    if rows[read_cols[0]]:
        yield _rows_batch(rows, options)


def parse_row(raw: bytes, lineno: int, path, read_cols, options: ReadOptions, report: ReadReport,
              getter) -> dict | None:
    """The values of one physical line by the exact field rules, or None when --skip-bad-rows skipped it.

    Args:
        getter: ``getter(text)`` returns a ``get(column)`` for the line (CSV fields or a JSON object).

    Raises:
        TraceFormatError: a bad line (without --skip-bad-rows), naming the line and field.
    """
    try:
        if b"\x00" in raw:
            raise _FieldError(None, "the line holds a NUL byte (binary data or a corrupt copy?)")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _FieldError(None, f"not UTF-8 text (byte {exc.start} of the line)") from None
        get = getter(text)
        parsed = {}
        for c in read_cols:
            try:
                parsed[c] = _parse_value(c, get(c), options) if c in _LOG_COLUMNS else _extra_text(get(c))
            except ValueError as exc:
                raise _FieldError(c, str(exc)) from None
        return parsed
    except _FieldError as bad:
        if not options.skip_bad_rows:
            raise TraceFormatError(bad.message, path=path, line=lineno, field=bad.field,
                                   hint="Fix the row, or pass --skip-bad-rows to skip and count bad rows") from None
        report.skip_row(path, lineno, f"{bad.field + ': ' if bad.field else ''}{bad.message}")
        return None


def _extra_text(value) -> str | None:
    """An extra column's value as text (typed later, see ``veotrace.sources.logs.extra``); JSON values as JSON."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value)


def _json_getter(text: str):
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _FieldError(None, f"not valid JSON ({exc.msg})") from None
    except RecursionError:
        raise _FieldError(None, "JSON nested too deeply") from None
    if not isinstance(obj, dict):
        raise _FieldError(None, "expected a JSON object per line")
    return {str(k).lower(): v for k, v in obj.items()}.get


def _csv_getter(text: str, index: dict[str, int], width: int):
    try:
        fields = next(csv.reader([text], strict=True))
    except csv.Error as exc:
        raise _FieldError(None, f"malformed CSV, a stray quote? ({_detail(exc)})") from None
    if len(fields) != width:
        raise _FieldError(None, f"expected {width} fields, got {len(fields)}")
    return lambda c: fields[index[c]]


class _FieldError(Exception):
    def __init__(self, field: str | None, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def _rows_batch(rows: dict[str, list], options: ReadOptions) -> pa.RecordBatch:
    types = log_types(options, op_type=pa.string())
    return pa.RecordBatch.from_pydict({c: pa.array(v, type=types.get(c, pa.string())) for c, v in rows.items()})
