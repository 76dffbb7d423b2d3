"""Arrow batches from the C line scanner (``_csvscan``) for plain canonical CSV logs.

The scanner reads timestamp, op_type and size_bytes of the plain shape loggers write (see
``_csvscan.c``); for any other buffer it declines and the caller parses that buffer with pyarrow.
It is an optional build: where it is absent, ``scanner_for`` returns None and pyarrow reads all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pyarrow as pa

try:
    from veotrace.sources import _csvscan
except ImportError:  # built without a C compiler
    _csvscan = None

#: Op names in the scanner's code order (its OP_NAMES).
OPS = ("alloc", "free", "defrag")
#: Canonical log columns the scanner can read.
SCANNED = ("timestamp", "op_type", "size_bytes")
#: What the scanner writes for each scanned column (op_type: codes into OPS).
_TYPES = (pa.int64(), pa.int32(), pa.int64())
_OPS_ARRAY = pa.array(OPS, pa.string())


def available() -> bool:
    return _csvscan is not None


def count_lines(chunk: pa.Buffer) -> int:
    """Line feeds in ``chunk`` (the C scanner's memchr count, or bytes.count without it)."""
    if _csvscan is not None:
        return _csvscan.count_lines(chunk)
    return chunk.to_pybytes().count(b"\n")


def scanner_for(header: Sequence[str], present: dict[str, str], read_cols: Sequence[str],
                time_unit: str) -> Callable[[pa.Buffer], pa.RecordBatch | None] | None:
    """A function buffer -> batch of ``read_cols`` (None when it declines), or None when not applicable.

    Applies to nanosecond timestamps (other units are read as floats by pyarrow) and to reads of
    scanned columns only.
    """
    if _csvscan is None or time_unit != "ns" or not set(read_cols) <= set(SCANNED) or not read_cols:
        return None
    names = list(header)
    try:
        index = {c: names.index(present[c]) for c in read_cols}
    except ValueError:
        return None
    ncols = len(names)
    cols = [index.get(c, -1) for c in SCANNED]

    def scan(chunk: pa.Buffer) -> pa.RecordBatch | None:
        cap = _csvscan.count_lines(chunk) + 1
        bufs = [pa.allocate_buffer(cap * t.bit_width // 8) if col >= 0 else None
                for col, t in zip(cols, _TYPES, strict=True)]
        rows = _csvscan.scan(chunk, ncols, *cols, *bufs)
        if rows < 0:
            return None
        arrays = {c: pa.Array.from_buffers(t, rows, [None, buf])
                  for c, t, buf in zip(SCANNED, _TYPES, bufs, strict=True) if buf is not None}
        if "op_type" in arrays:
            arrays["op_type"] = pa.DictionaryArray.from_arrays(arrays["op_type"], _OPS_ARRAY)
        return pa.RecordBatch.from_arrays([arrays[c] for c in read_cols], names=list(read_cols))

    return scan
