"""Reader of ``export_memory_timeline``'s raw export: a JSON list (plain or gzip) of ``[ts, action, bytes,
category]`` rows, one device's tensors as the profiler's memory profiler categorised them.

``ts`` is nanoseconds (-1 for the tensors that existed before profiling), ``action`` 1-4 (preexisting,
create, increment_version, destroy), ``bytes`` signed, ``category`` an index of
``schemas.kineto.TIMELINE_CATEGORIES``. The rows are tensors, not allocator blocks: no address, no reserved
bytes, so this format gives the categories over time (``read_timeline``) and nothing to replay. Its
``.html`` form is a picture only: refused with one line that says to export the raw form.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from veotrace.errors import TraceFormatError
from veotrace.schemas.kineto import KINETO_TIMELINE, TIMELINE_ACTIONS, TIMELINE_CATEGORIES
from veotrace.sources.base import ReadOptions, ReadReport, open_decompressed

RAW_HINT = ("Export the raw form instead: prof.export_memory_timeline('timeline.raw.json.gz', device='cuda:0'), "
            "or better the trace itself: prof.export_chrome_trace('trace.json') with profile_memory=True")


def load_export(path: Path, what: str):
    """An ``export_memory_timeline`` file (either form: one JSON document, plain or gzip) read within the size
    bound and parsed: ``(document, plain)`` as :func:`loads_ints` gives them.

    Raises:
        TraceFormatError: not valid JSON (a cut export cannot be read), naming ``what`` it should have been.
    """
    from veotrace.sources.limits import read_bounded

    fh, _ = open_decompressed(path)
    with fh:
        data = read_bounded(path, fh)
    try:
        return loads_ints(data)
    except ValueError as exc:
        raise TraceFormatError(f"not a valid {what} ({str(exc)[:80]})", path=path,
                               hint="Re-export it; a cut export cannot be read") from None


def read_timeline(path: Path, *, options: ReadOptions = ReadOptions(), report: ReadReport | None = None) -> pa.Table:
    """The rows as ``KINETO_TIMELINE`` (a bounded read: the raw export is one JSON list)."""
    report = report if report is not None else ReadReport()
    rows, plain = load_export(path, "memory timeline")
    if not isinstance(rows, list):
        raise TraceFormatError("a memory timeline is a list of [ts, action, bytes, category] rows", path=path)
    whole = int_matrix(rows, 4) if plain else None
    if whole is not None and _rows_ok(whole):  # every row as PyTorch writes them: no check row by row
        return _table(path, whole[:, 0], whole[:, 1], whole[:, 2], whole[:, 3])
    ts, act, nbytes, cat = [], [], [], []
    for i, row in enumerate(rows):
        ok = (isinstance(row, list) and len(row) == 4 and all(isinstance(v, int) and not isinstance(v, bool) for v in row)
              and row[1] in TIMELINE_ACTIONS and 0 <= row[3] < len(TIMELINE_CATEGORIES)
              and -(1 << 63) < row[0] < (1 << 63) and -(1 << 63) < row[2] < (1 << 63))
        if not ok:
            if options.skip_bad_rows:
                report.skip_row(path, None, f"row {i + 1}: {str(row)[:60]}")
                continue
            raise TraceFormatError(f"row {i + 1} is not [ts, action 1-4, bytes, category 0-7]: {str(row)[:60]}",
                                   path=path, hint="Fix or remove that row, or pass --skip-bad-rows")
        ts.append(row[0])
        act.append(row[1])
        nbytes.append(row[2])
        cat.append(row[3])
    return _table(path, np.array(ts, np.int64), np.array(act, np.int64), np.array(nbytes, np.int64),
                  np.array(cat, np.int64))


#: The bytes of a JSON document of integers and lists only.
_INT_BYTES = b"0123456789-,[] \t\r\n"


def loads_ints(data: bytes):
    """The parsed document, and whether it holds integers and lists only (no float, NaN, string, ``true``: numpy
    would read ``"12"`` and ``true`` as numbers), judged from its bytes. Such a document is parsed by orjson
    (the reader's dependency, about twice as fast), any other, or one past its 64-bit integers, by json.

    Raises:
        ValueError: not JSON.
    """
    import json

    plain = not data.translate(None, _INT_BYTES)
    if plain:
        try:
            from orjson import loads

            return loads(data), True
        except ImportError:  # pragma: no cover - an install without orjson reads the same, slower
            pass
        except ValueError:  # an integer past 64 bits, or not JSON: json parses it, or says where it fails
            pass
    return json.loads(data), plain


def int_matrix(rows: list, width: int) -> np.ndarray | None:
    """``rows`` as an n x ``width`` int64 matrix, or None when they are not lists of ``width`` int64 integers
    (then the caller checks them one by one and names the bad one). Only for a document ``loads_ints`` found
    plain; int64's least value is refused as well, as the row-by-row checks refuse it."""
    if not rows:
        return np.zeros((0, width), np.int64)
    try:
        out = np.array(rows, dtype=np.int64)
    except (ValueError, TypeError, OverflowError):
        return None
    if out.ndim != 2 or out.shape[1] != width or (out == np.iinfo(np.int64).min).any():
        return None
    return out


def _rows_ok(m: np.ndarray) -> bool:
    return bool(((m[:, 1] >= 1) & (m[:, 1] <= 4) & (m[:, 3] >= 0) & (m[:, 3] < len(TIMELINE_CATEGORIES))).all())


def _table(path: Path, tsa: np.ndarray, act: np.ndarray, nbytes: np.ndarray, cat: np.ndarray) -> pa.Table:
    n = len(tsa)
    tsa = np.ascontiguousarray(tsa, np.int64)
    from veotrace.schemas.base import repeated

    actions = pa.array([TIMELINE_ACTIONS[k] for k in sorted(TIMELINE_ACTIONS)], pa.string())
    cats = pa.array(list(TIMELINE_CATEGORIES), pa.string())
    return pa.Table.from_arrays([
        pa.array(tsa, pa.int64(), mask=tsa < 0),
        pa.array(np.arange(n, dtype=np.int64)),
        pa.DictionaryArray.from_arrays(pa.array(np.asarray(act, np.int32) - 1), actions),
        pa.array(np.ascontiguousarray(nbytes, np.int64)),
        pa.DictionaryArray.from_arrays(pa.array(np.asarray(cat, np.int32)), cats),
        repeated(str(path), n)], schema=KINETO_TIMELINE)


def series(table: pa.Table) -> dict:
    """Either form of the timeline as points: the bytes live per category after every row at one time.

    The raw rows (``KINETO_TIMELINE``) are summed per category and coalesced as PyTorch's own
    ``_coalesce_timeline`` does (a point per run of rows at one time; here at their nanosecond, not its whole
    microsecond); the JSON form's points (``KINETO_TIMELINE_POINTS``) are taken as written. Rows out of time
    order (PyTorch writes none) are put in order first: each is a change of bytes, so the end is the same.

    Returns:
        ``ts_ns`` (int64, the null points' entries 0), ``null`` (bool: the point of the tensors live before
        profiling), ``states`` (int64, points x categories), ``categories`` (their names), ``form`` ("raw" or
        "points"), ``rows`` (rows or points read), ``before`` (bytes per category live before profiling),
        ``out_of_order`` (rows put back in time order).
    """
    names = list(TIMELINE_CATEGORIES)
    ts_col = table.column("ts_ns")
    null_all = _nulls(ts_col)
    ts_all = np.where(null_all, 0, _values(ts_col))
    ncat = len(names)
    if "bytes" not in table.column_names:  # the JSON form: its points, as written
        states = np.stack([table.column(c).to_numpy() for c in names], axis=1) if table.num_rows else \
            np.zeros((0, ncat), np.int64)
        before = states[0] if table.num_rows and null_all[0] else np.zeros(ncat, np.int64)
        return {"ts_ns": ts_all, "null": null_all, "states": states.astype(np.int64, copy=False), "categories": names,
                "form": "points", "rows": table.num_rows, "before": before, "out_of_order": 0,
                "row": _values(table.column("point")) + 1}
    nbytes = table.column("bytes").to_numpy()
    cat = table.column("category").combine_chunks()
    # the dictionary is TIMELINE_CATEGORIES as read_timeline writes it; map by name all the same
    remap = np.array([names.index(v) for v in cat.dictionary.to_pylist()], np.int64)
    idx = remap[cat.indices.to_numpy()] if len(cat) else np.zeros(0, np.int64)
    key = np.where(null_all, np.iinfo(np.int64).min, ts_all)
    out_of_order = int(np.count_nonzero(key[1:] < key[:-1]))
    order = np.arange(key.size, dtype=np.int64)
    if out_of_order:
        order = np.argsort(key, kind="stable")
        key, nbytes, idx, null_all, ts_all = key[order], nbytes[order], idx[order], null_all[order], ts_all[order]
    n = nbytes.size
    last = np.ones(n, bool)
    last[:-1] = key[1:] != key[:-1]
    ends = np.flatnonzero(last)
    states = np.zeros((ends.size, ncat), np.int64)
    for k in range(ncat):  # one category's running sum at a time: n x 8 bytes at most, not n x 64
        states[:, k] = np.cumsum(np.where(idx == k, nbytes, 0))[ends]
    pts_null = null_all[ends]
    before = states[np.flatnonzero(pts_null)[-1]] if pts_null.any() else np.zeros(ncat, np.int64)
    return {"ts_ns": ts_all[ends], "null": pts_null, "states": states, "categories": names, "form": "raw",
            "rows": int(n), "before": before, "out_of_order": out_of_order, "row": order[ends] + 1}


def _nulls(column: pa.ChunkedArray) -> np.ndarray:
    """Which entries of a column are null, from the validity bitmaps (``is_null`` would load pyarrow.compute)."""
    parts = []
    for c in column.chunks:
        if c.null_count == 0 or c.buffers()[0] is None:
            parts.append(np.zeros(len(c), bool))
        else:
            bits = np.unpackbits(np.frombuffer(c.buffers()[0], np.uint8), bitorder="little")
            parts.append(bits[c.offset:c.offset + len(c)] == 0)
    return np.concatenate(parts) if parts else np.zeros(0, bool)


def _values(column: pa.ChunkedArray) -> np.ndarray:
    """An int64 column's values as numpy, whatever its nulls hold (the caller masks them; fill_null would load
    pyarrow.compute, and to_numpy on a column with nulls gives floats, which cannot hold epoch nanoseconds)."""
    parts = [np.frombuffer(c.buffers()[1], np.int64, count=c.offset + len(c))[c.offset:] for c in column.chunks
             if len(c)]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def categories(table: pa.Table) -> dict:
    """``info``'s summary of either form: bytes live per category at the end and at the peak of their sum (the
    point ``veotrace categories`` names too), the peak's time, and the bytes live before profiling."""
    s = series(table)
    names, states = s["categories"], s["states"]
    form = ("export_memory_timeline raw rows [ts, action, bytes, category]" if s["form"] == "raw" else
            "export_memory_timeline JSON points [times, sizes by category] (times in whole microseconds)")
    if not len(states):
        return {"rows": s["rows"], "form": form, "points": 0, "end": {}, "peak_bytes": 0, "peak_at_ns": None,
                "at_peak": {}, "before_profiling_bytes": 0}
    total = states.sum(axis=1)
    peak = int(np.argmax(total))
    return {"rows": s["rows"], "form": form, "points": int(len(states)),
            "end": {names[k]: int(states[-1, k]) for k in range(len(names)) if states[-1, k]},
            "peak_bytes": int(total[peak]), "peak_at_ns": None if s["null"][peak] else int(s["ts_ns"][peak]),
            "at_peak": {names[k]: int(states[peak, k]) for k in range(len(names)) if states[peak, k]},
            "before_profiling_bytes": int(s["before"].sum())}


def read_memory_timeline(path: Path, *, options: ReadOptions, report: ReadReport) -> pa.Table:
    """The ``memory_timeline`` table kind (``veotrace.sources`` dispatches here)."""
    return read_timeline(path, options=options, report=report)
