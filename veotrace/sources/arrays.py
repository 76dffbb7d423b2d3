"""Readers layer: numeric arrays from .npy, .npz, CSV and Parquet files, never unpickling anything.

``allow_pickle`` stays off everywhere: an object array (``dtype=object``) is refused with a message
saying how to save it as numbers instead. Formats are told apart by content, not by extension.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np

from veotrace.errors import TraceFormatError
from veotrace.sources.base import detail as _detail
from veotrace.sources.base import read_head

NPY_MAGIC = b"\x93NUMPY"
ZIP_MAGIC = b"PK\x03\x04"
PARQUET_MAGIC = b"PAR1"
#: What the readers accept, for messages.
ARRAY_FORMATS_TEXT = ".npy, .npz, CSV or Parquet"
_NUMERIC_KINDS = "iuf"


def array_kind(path: Path) -> str:
    """'npy', 'npz', 'parquet' or 'csv' from the first bytes of ``path``.

    Raises:
        TraceFormatError: empty, a pickle, JSON, or other binary content.
    """
    if path.stat().st_size == 0:
        raise TraceFormatError("the file is empty", path=path, hint=f"Expected a {ARRAY_FORMATS_TEXT} array file")
    head = read_head(path, 4096)
    if head.startswith(NPY_MAGIC):
        return "npy"
    if head.startswith(ZIP_MAGIC):
        return "npz"
    if head.startswith(PARQUET_MAGIC):
        return "parquet"
    if head[:1] == b"\x80":
        raise TraceFormatError(
            "this is a Python pickle, not an array file; veotrace never unpickles input",
            path=path,
            hint="Save the array with np.save(path, arr) as a numeric dtype",
        )
    try:
        text = head.decode("utf-8").lstrip("\ufeff").lstrip()
    except UnicodeDecodeError:
        text = None
    if text is None or "\x00" in text or text[:1] in ("{", "["):
        raise TraceFormatError(
            "not an array file", path=path, hint=f"Expected a {ARRAY_FORMATS_TEXT} file with numeric data"
        )
    return "csv"


def read_array(path: Path, *, name: str | None = None) -> np.ndarray:
    """Read a numeric array from ``path``.

    Args:
        name: the array in an .npz, or the column in a CSV/Parquet file; ``"a,b"`` stacks columns
            into an (n, 2) array. Not needed when the file holds exactly one array or column;
            ignored for .npy.

    Returns:
        The array, dtype integer or float (never object).

    Raises:
        TraceFormatError: not an array file, an object or non-numeric array, an unknown name.
    """
    from veotrace.sources.base import call_guarded

    return call_guarded(path, _read_array, path, name)


def _read_array(path: Path, name: str | None) -> np.ndarray:
    kind = array_kind(path)
    if kind == "npy":
        arr = _load_npy(path)
    elif kind == "npz":
        arr = _load_npz(path, name)
    else:
        arr = _load_columns(path, kind, name)
    if arr.dtype.kind not in _NUMERIC_KINDS:
        raise TraceFormatError(
            f"the array has dtype {arr.dtype.str!r}, not integers or floats",
            path=path,
            hint="Save it with a numeric dtype, e.g. arr.astype(np.float64)",
        )
    return arr


def _object_error(path: Path) -> TraceFormatError:
    return TraceFormatError(
        "the array holds Python objects (dtype object), which only load by unpickling; veotrace never unpickles input",
        path=path,
        hint="Save it as numbers: np.save(path, np.asarray(arr, dtype=np.uint64))",
    )


def _load_npy(path: Path) -> np.ndarray:
    with path.open("rb") as fh:
        return _read_npy(fh, path.stat().st_size, path, "the .npy file")


def _read_npy(fh, size: int, path: Path, what: str) -> np.ndarray:
    """One array from an open .npy stream of ``size`` bytes, its header checked before any allocation.

    The header's shape must fit in the bytes the file holds (a header declaring 10^12 elements is
    refused, not allocated), and in ``limits.max_file_bytes()``.
    """
    from numpy.lib import format as npformat

    from veotrace.sources.limits import max_file_bytes, too_big

    try:
        with warnings.catch_warnings():
            # Files written by Python 2 (shape "(2L,)") load fine but numpy warns; not the user's problem.
            warnings.simplefilter("ignore", UserWarning)
            version = npformat.read_magic(fh)
            read_header = npformat.read_array_header_1_0 if version == (1, 0) else npformat.read_array_header_2_0
            shape, fortran, dtype = read_header(fh)
    except Exception as exc:  # noqa: BLE001 - numpy parses the header with ast/tokenize: any error is a bad header
        detail = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        raise TraceFormatError(f"{what} has an unreadable header ({detail})", path=path,
                               hint="Re-save it with np.save") from None
    if dtype.hasobject:
        raise _object_error(path)
    if dtype.itemsize == 0:  # '0<u8' (a sub-array of no elements): numpy cannot read an array of it
        raise TraceFormatError(f"{what} declares elements of 0 bytes (dtype {dtype.str!r})", path=path,
                               hint="Re-save it with np.save")
    if any(dim < 0 for dim in shape):
        raise TraceFormatError(f"{what} has a negative dimension in its shape {shape}", path=path,
                               hint="Re-save it with np.save")
    count = math.prod(shape)
    nbytes = count * dtype.itemsize
    available = size - fh.tell()
    if nbytes > max_file_bytes():
        raise too_big(path, f"{what} (header declares {count:,} elements)")
    if nbytes > available:
        raise TraceFormatError(
            f"{what} is truncated: its header declares {count:,} elements ({nbytes:,} bytes) but "
            f"{max(available, 0):,} bytes follow", path=path, hint="Re-save it with np.save")
    try:
        data = fh.read(nbytes)
    except (OSError, EOFError) as exc:
        raise TraceFormatError(f"{what} cannot be read ({_detail(exc)})", path=path) from None
    if len(data) != nbytes:
        raise TraceFormatError(f"{what} is truncated ({len(data):,} of {nbytes:,} data bytes)", path=path,
                               hint="Re-save it with np.save")
    arr = np.frombuffer(data, dtype=dtype, count=count) if count else np.empty(0, dtype=dtype)
    try:
        return arr.reshape(shape, order="F" if fortran else "C")
    except ValueError as exc:  # a dimension numpy cannot hold, e.g. (10**30, 0)
        raise TraceFormatError(f"{what} has a shape numpy cannot hold ({_detail(exc)})", path=path,
                               hint="Re-save it with np.save") from None


def _load_npz(path: Path, name: str | None) -> np.ndarray:
    import zipfile
    import zlib

    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as exc:
        raise TraceFormatError(f"not a readable .npz archive ({_detail(exc)})", path=path, hint="Re-save it with np.savez") from None
    with archive:
        members = {info.filename[:-4]: info for info in archive.infolist() if info.filename.endswith(".npy")}
        names = list(members)
        if not names:
            raise TraceFormatError("the .npz archive holds no arrays (no .npy members)", path=path,
                                   hint="Save arrays with np.savez(path, name=array)")
        if name is None:
            if len(names) > 1:
                raise TraceFormatError(
                    f"the .npz archive holds {len(names)} arrays: {', '.join(names)}",
                    path=path,
                    hint="Pick one by name (e.g. --addrs-name / --epe-name)",
                )
            name = names[0]
        if name not in names:
            raise TraceFormatError(
                f"no array named {name!r}", path=path, hint=f"The archive holds: {', '.join(names)}"
            )
        info = members[name]
        if info.flag_bits & 0x1:  # zipfile would ask for a password (RuntimeError); np.savez never encrypts
            raise TraceFormatError(f"array {name!r} is encrypted in the archive", path=path,
                                   hint="Re-save it with np.savez")
        try:
            with archive.open(info) as fh:
                return _read_npy(fh, info.file_size, path, f"array {name!r}")
        except (zipfile.BadZipFile, zlib.error, OSError, EOFError, NotImplementedError, ValueError) as exc:
            raise TraceFormatError(f"array {name!r} cannot be read from the archive ({_detail(exc)})", path=path,
                                   hint="Re-save it with np.savez") from None


def _load_columns(path: Path, kind: str, name: str | None) -> np.ndarray:
    import pyarrow as pa

    table = read_column_table(path, kind)
    columns = table.column_names
    wanted = [c.strip() for c in name.split(",")] if name else columns
    if name is None and len(columns) > 1:
        raise TraceFormatError(
            f"the table has {len(columns)} columns: {', '.join(columns)}",
            path=path,
            hint="Pick one by name (e.g. --addrs-name / --epe-name); 'a,b' picks several",
        )
    missing = [c for c in wanted if c not in columns]
    if missing:
        raise TraceFormatError(
            f"no column named {missing[0]!r}", path=path, field=missing[0], hint=f"Columns: {', '.join(columns)}"
        )
    out = []
    for col_name in wanted:
        col = table.column(col_name)
        if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type) or pa.types.is_null(col.type)):
            raise non_numeric_error(path, col_name, col, header_rows=1 if kind == "csv" else 0)
        # Empty CSV cells become NaN, which the analysis refuses or drops (--drop-nonfinite) and counts.
        if col.null_count or pa.types.is_null(col.type):
            col = col.cast(pa.float64()).fill_null(float("nan"))
        out.append(col.to_numpy())
    if len(out) == 1:
        return out[0]
    return np.column_stack(out)


def read_column_table(path: Path, kind: str):
    """A CSV or Parquet file as an Arrow table (shared with the per-frame metrics reader)."""
    import pyarrow as pa

    from veotrace.sources.base import open_decompressed

    what = "Parquet" if kind == "parquet" else "CSV"
    try:
        if kind == "parquet":
            import pyarrow.parquet as pq

            return _unique_columns(pq.read_table(path), path)
        import pyarrow.csv as pacsv

        stream, _raw = open_decompressed(path)  # gzip/zstd by content, not by the file name
        with stream:
            table = pacsv.read_csv(stream)
        table.column_names  # noqa: B018 - header names are decoded here: non-UTF-8 fails now, not later
        return _unique_columns(table, path)
    except UnicodeDecodeError as exc:
        raise TraceFormatError(f"not a readable {what} table (not UTF-8 text: {exc.reason})", path=path) from None
    except (pa.ArrowException, OSError) as exc:
        raise TraceFormatError(f"not a readable {what} table ({_detail(exc)})", path=path) from None


def _unique_columns(table, path: Path):
    """The table, refused when a column name appears twice (which of the two would be read?)."""
    names = table.column_names
    for name in names:
        if names.count(name) > 1:
            raise TraceFormatError(f"column {name!r} appears {names.count(name)} times in the header", path=path,
                                   hint="Name each column once")
    return table


def non_numeric_error(path: Path, column: str, col, *, header_rows: int) -> TraceFormatError:
    for i, value in enumerate(col.to_pylist()):
        try:
            if value is not None:
                float(value)
        except (TypeError, ValueError):
            return TraceFormatError(
                f"non-numeric value {value!r}", path=path, line=i + 1 + header_rows, field=column,
                hint="Every value must be a number",
            )
    return TraceFormatError(f"the column has type {col.type}, not numbers", path=path, field=column)


def to_addresses(arr: np.ndarray, *, path: Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Addresses as uint64, plus a mask of the finite entries (False where a float array held NaN/inf).

    Signed and float arrays are accepted when every finite value is an exact non-negative integer.

    Raises:
        TraceFormatError: negative, fractional, or (for floats) beyond 2**64 values.
    """
    if arr.dtype.kind == "u":
        return arr.astype(np.uint64, copy=False), np.ones(arr.shape, dtype=bool)
    if arr.dtype.kind == "i":
        if arr.size and arr.min() < 0:
            raise TraceFormatError(
                f"addresses must be non-negative, found {int(arr.min())}", path=path,
                hint="Pass the raw unsigned addresses (e.g. tensor.data_ptr())",
            )
        return arr.astype(np.uint64), np.ones(arr.shape, dtype=bool)
    finite = np.isfinite(arr)
    vals = arr[finite]
    with np.errstate(over="ignore"):  # float16 cannot hold 2**64: the comparison is still right (inf)
        bad = (vals < 0) | (vals != np.floor(vals)) | (vals >= 2.0**64)
    if bad.any():
        raise TraceFormatError(
            f"addresses must be exact non-negative integers, found {float(vals[bad][0])!r}", path=path,
            hint="Save addresses as uint64 (floats above 2**53 lose bytes)",
        )
    out = np.zeros(arr.shape, dtype=np.uint64)
    out[finite] = vals.astype(np.uint64)
    return out, finite
