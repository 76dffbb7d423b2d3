"""Named extra columns of alloc/free logs (``ReadOptions.extra_columns``): matching, typing, errors.

An analysis may want a column the ALLOC_EVENTS schema does not have (a ``latency_us`` per event, an
``id`` pairing frees with allocations). The alloc-log readers (CSV, JSONL, Parquet, whole files or
the engine's pieces) read such columns as they are and append them after the ALLOC_EVENTS columns,
under the names asked for (matched to the file's header without regard to case).

Type rule, one type per column for the whole read (every batch and every file of one
``sources.iter_alloc_events`` call, or of one engine piece): the column's first non-empty values
(those of the first batch that has any) fix it as

- ``int64`` when they are all integers within the int64 range,
- else ``float64`` when they are all numbers (decimals, exponents, ``nan``/``inf``, integers past int64),
- else ``string``;
- ``float64`` when the first batch holds no value at all (the usual extra column is a measurement).

Later batches are converted to that type: integers fit a float64 column, and any value fits a
string column (as its text); a value that does not fit (a decimal in an int64 column, text in a
numeric one) is one ``Error:`` naming the file, the column and the value. Empty cells, JSON nulls
and absent JSON keys are null. The decision is kept in ``ReadReport.column_types``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa

from veotrace.errors import TraceFormatError

#: Formats whose files can hold extra columns (detect.FORMATS names).
EXTRA_FORMATS = ("alloc-csv", "alloc-jsonl", "parquet")


def check_source(path: Path, fmt_name: str, extra: Sequence[str]) -> None:
    """Refuse extra columns for a source that cannot have them (snapshots, nsys, ...)."""
    if extra and fmt_name not in EXTRA_FORMATS:
        raise TraceFormatError(
            f"extra columns ({', '.join(extra)}) come only from alloc logs (CSV, JSON Lines or Parquet), "
            f"and this is a {fmt_name} file",
            path=path, hint="Drop the option that asks for the column, or read an alloc/free log")


def match(path: Path, extra: Sequence[str], names: Sequence[str]) -> dict[str, str]:
    """``{extra.lower(): the file's spelling}`` for each extra column.

    Raises:
        TraceFormatError: a named column is not in the file (naming the columns it has).
    """
    found = {n.lower(): n for n in names}
    for name in extra:
        if name.lower() not in found:
            raise TraceFormatError(f"no column '{name}' (asked for as an extra column); the file has: "
                                   f"{', '.join(names) or 'no columns'}", path=path,
                                   hint="Check the column name, or leave that file out")
    return {name.lower(): found[name.lower()] for name in extra}


def append(batch: pa.RecordBatch, raw, extra: Sequence[str], types: dict[str, pa.DataType],
           path: Path) -> pa.RecordBatch:
    """``batch`` (ALLOC_EVENTS columns) with the extra columns of ``raw`` appended, typed by ``types``
    (the read's decisions, updated on a column's first values). A column ``raw`` lacks is null."""
    if not extra:
        return batch
    arrays, fields = list(batch.columns), list(batch.schema)
    names = raw.schema.names
    for name in extra:
        key = name.lower()
        if key in names:
            col = raw.column(key)
            col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        else:
            col = pa.nulls(batch.num_rows)
        arr = convert(col, name, types, path)
        arrays.append(arr)
        fields.append(pa.field(name, arr.type, nullable=True))
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields, metadata=batch.schema.metadata))


def _text(arr: pa.Array) -> pa.Array:
    """Trimmed text with empty cells as null (a string column), or the array as it is."""
    import pyarrow.compute as pc

    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if pa.types.is_large_string(arr.type):
        arr = arr.cast(pa.string())
    if not pa.types.is_string(arr.type):
        return arr
    s = pc.utf8_trim_whitespace(arr)
    return pc.if_else(pc.equal(s, ""), pa.scalar(None, pa.string()), s)


def _try_cast(arr: pa.Array, to: pa.DataType) -> pa.Array | None:
    try:
        return arr.cast(to)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def _natural(arr: pa.Array) -> pa.Array:
    """The array as int64, float64 or string by the module's rule (null-typed when all empty)."""
    if arr.null_count == len(arr):
        return pa.nulls(len(arr))
    t = arr.type
    if pa.types.is_integer(t):
        return _try_cast(arr, pa.int64()) or arr.cast(pa.float64())  # uint64 past int64
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        return arr.cast(pa.float64())
    if pa.types.is_string(t):
        # float64 first: a failed cast costs ~1 us a value (its error), int64 is tried only when every
        # value is a whole number (and so fails only on text such as 12.0 or 1e3).
        floats = _try_cast(arr, pa.float64())
        if floats is None:
            return arr
        import numpy as np

        v = floats.drop_null().to_numpy(zero_copy_only=False)
        if not (np.isfinite(v).all() and (np.abs(v) <= 2.0**63).all() and (v == np.floor(v)).all()):
            return floats
        return _try_cast(arr, pa.int64()) or floats
    return arr.cast(pa.string())  # booleans, timestamps, nested JSON values: their text


def convert(col: pa.Array, name: str, types: dict[str, pa.DataType], path: Path) -> pa.Array:
    """One extra column of one batch in the read's type for it (decided here on its first values)."""
    arr = _text(col)
    decided = types.get(name)
    if decided is None:
        natural = _natural(arr)
        if pa.types.is_null(natural.type):
            types[name] = pa.float64()
            return pa.nulls(len(arr), pa.float64())
        types[name] = natural.type
        return natural
    if pa.types.is_string(decided):
        return arr if pa.types.is_string(arr.type) else arr.cast(pa.string())
    if pa.types.is_null(arr.type):
        return pa.nulls(len(arr), decided)
    if pa.types.is_string(arr.type):  # the usual case: text cast straight to the read's type
        out = _try_cast(arr, decided)
        if out is not None:
            return out
    natural = _natural(arr)
    if natural.type == decided or (decided == pa.float64() and natural.type == pa.int64()):
        return natural.cast(decided)
    raise _misfit(arr, natural, name, decided, path)


def _misfit(arr: pa.Array, natural: pa.Array, name: str, decided: pa.DataType, path: Path) -> TraceFormatError:
    want_int = decided == pa.int64()
    bad = None
    for v in arr.to_pylist():
        if v is None:
            continue
        try:
            int(v) if want_int and not isinstance(v, float) else float(v)
            if want_int and isinstance(v, float):
                raise ValueError
        except (TypeError, ValueError):
            bad = v
            break
    what = "integers" if want_int else "numbers"
    hint = ("Write the column's values with a decimal point (12.0) from the first row on if it holds decimals"
            if want_int and pa.types.is_floating(natural.type) else
            "Make every value of the column a number (or empty), or start the file with its text values")
    return TraceFormatError(f"extra column '{name}' holds {bad!r}, but its first values in this read were {what}, "
                            f"so it is read as {decided} (the first values of an extra column fix its type)",
                            path=path, hint=hint)
