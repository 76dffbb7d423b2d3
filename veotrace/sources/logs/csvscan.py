"""Arrow batches from the C line scanner (``_csvscan``) for plain canonical CSV logs.

The scanner reads timestamp, op_type, size_bytes, address, stream and device of the plain shape
loggers write (see ``_csvscan.c``), and extra columns as text; for any other buffer it declines and
the caller parses that buffer with pyarrow.
It is an optional build: where it is absent, ``scanner_for`` returns None and pyarrow reads all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pyarrow as pa

try:
    from veotrace.sources.logs import _csvscan
except ImportError:  # built without a C compiler
    _csvscan = None

#: Op names in the scanner's code order (its OP_NAMES).
OPS = ("alloc", "free", "defrag")
#: Canonical log column -> (the scanner's kind code for it, the Arrow type it writes). op_type: codes
#: into OPS; address and the ids are nullable (empty cells), with a validity bitmap.
_KINDS = {"timestamp": (1, pa.int64()), "op_type": (2, pa.int32()), "size_bytes": (3, pa.int64()),
          "address": (4, pa.uint64()), "stream": (5, pa.int64()), "device": (5, pa.int64())}
#: Canonical log columns the scanner can read; any other column it reads as text (extra columns).
SCANNED = tuple(_KINDS)
_TEXT = (6, pa.string())
_NULLABLE = ("address", "stream", "device")
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

    Applies to nanosecond timestamps (other units are read as floats by pyarrow). Columns other than
    the canonical ones (extra columns, ``ReadOptions.extra_columns``) come as text, blanks trimmed,
    empty cells null.
    """
    if _csvscan is None or time_unit != "ns" or not read_cols:
        return None
    names = list(header)
    if len(names) > 64:
        return None
    try:
        index = {c: names.index(present[c]) for c in read_cols}
    except ValueError:
        return None
    kind_of = {c: _KINDS.get(c, _TEXT) for c in read_cols}
    kinds = bytearray(len(names))
    for c, i in index.items():
        kinds[i] = kind_of[c][0]
    kinds = bytes(kinds)
    order = sorted(read_cols, key=index.__getitem__)

    # Rows per byte of the chunks scanned so far, to size the outputs without counting the lines
    # first (a memchr over every chunk); a chunk of shorter lines is counted and scanned again.
    seen = {"rows": 0, "bytes": 0}

    def scan_into(chunk: pa.Buffer, cap: int) -> tuple[int, list, list, list]:
        outs: list = [None] * len(names)
        valids: list = [None] * len(names)
        texts: list = [None] * len(names)
        for c in order:
            i = index[c]
            if kind_of[c] is _TEXT:
                outs[i] = pa.allocate_buffer((cap + 1) * 4)
                texts[i] = pa.allocate_buffer(chunk.size)
            else:
                outs[i] = pa.allocate_buffer(cap * kind_of[c][1].bit_width // 8)
            if c in _NULLABLE or kind_of[c] is _TEXT:
                valids[i] = pa.allocate_buffer((cap + 7) // 8)
        return _csvscan.scan(chunk, kinds, outs, valids, texts), outs, valids, texts

    def scan(chunk: pa.Buffer) -> pa.RecordBatch | None:
        if chunk.size >= 1 << 31 and any(k is _TEXT for k in kind_of.values()):
            return None  # text offsets are int32
        rows_seen, bytes_seen = seen["rows"], seen["bytes"]
        if rows_seen >= 1000:
            rows, outs, valids, texts = scan_into(chunk, chunk.size * rows_seen // bytes_seen * 9 // 8 + 1024)
        else:
            rows = -2
        if rows == -2:
            rows, outs, valids, texts = scan_into(chunk, _csvscan.count_lines(chunk) + 1)
        if rows < 0:
            return None
        seen["rows"], seen["bytes"] = rows_seen + rows, bytes_seen + chunk.size
        arrays = []
        for c in read_cols:
            i = index[c]
            t = kind_of[c][1]
            bufs = [outs[i], texts[i]] if texts[i] is not None else [outs[i]]
            arr = pa.Array.from_buffers(t, rows, [valids[i], *bufs])
            if valids[i] is not None and arr.null_count == 0:
                arr = pa.Array.from_buffers(t, rows, [None, *bufs], null_count=0)
            if c == "op_type":
                arr = pa.DictionaryArray.from_arrays(arr, _OPS_ARRAY)
            arrays.append(arr)
        return pa.RecordBatch.from_arrays(arrays, names=list(read_cols))

    return scan
