"""Reader of ``export_memory_timeline``'s ``.json`` / ``.json.gz`` form: ``[times, sizes]``, the plot's points.

PyTorch writes it from ``MemoryProfileTimeline._coalesce_timeline`` (``torch/profiler/_memory_profiler.py``):
``times`` are whole microseconds (``int(t / 1000)`` of the raw rows' nanoseconds), one per distinct time, and
``sizes[i]`` the bytes live per category after every raw row at ``times[i]``: ``len(TIMELINE_CATEGORIES) + 1``
integers, the first always 0 (the stacking base of the HTML plot), then the categories in
``_CATEGORY_TO_INDEX`` order (``schemas.kineto.TIMELINE_CATEGORIES``). The point of the tensors that existed
before profiling (raw ``ts`` -1) is given the first real time, so that a file whose first two times are equal
starts with that point: it is read with a null ``ts_ns`` (the bytes that existed before profiling).

Detected by content (``detect._is_memory_timeline_points``); read as ``KINETO_TIMELINE_POINTS``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from veotrace.errors import TraceFormatError
from veotrace.schemas.kineto import KINETO_TIMELINE_POINTS, TIMELINE_CATEGORIES
from veotrace.sources.base import ReadOptions, ReadReport
from veotrace.sources.kineto.timeline import RAW_HINT, int_matrix, load_export

#: A point's sizes: the plot's leading 0, then one per category.
WIDTH = len(TIMELINE_CATEGORIES) + 1
#: Microseconds whose nanoseconds still fit an int64.
_MAX_US = ((1 << 63) - 1) // 1000
_SHAPE = "an export_memory_timeline JSON file is [times, sizes]: a list of times and a list of as many sizes"


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _bad_point(i: int, t, size) -> str | None:
    """Why point ``i`` is not one PyTorch writes, or None."""
    if not _int(t) or not (t == -1 or 0 <= t <= _MAX_US):
        return f"time {str(t)[:30]} is not whole microseconds (an integer from 0 to {_MAX_US}, or -1)"
    if not isinstance(size, list) or len(size) != WIDTH:
        return f"sizes {str(size)[:60]} are not a list of {WIDTH} integers (0, then one per category)"
    for k, v in enumerate(size):
        if not _int(v) or not -(1 << 63) < v < (1 << 63):
            what = "the leading 0" if k == 0 else TIMELINE_CATEGORIES[k - 1]
            return f"sizes[{k}] ({what}) = {str(v)[:30]} is not a 64-bit integer of bytes"
    if size[0] != 0:
        return f"sizes[0] = {size[0]}: PyTorch writes 0 there (the plot's base), then one size per category"
    return None


def read_points(path: Path, *, options: ReadOptions = ReadOptions(), report: ReadReport | None = None) -> pa.Table:
    """The points as ``KINETO_TIMELINE_POINTS`` (a bounded read: the export is one JSON document).

    Raises:
        TraceFormatError: not valid JSON (a cut file), not ``[times, sizes]`` of equal lengths, a bad point
            (unless ``options.skip_bad_rows``: skipped and counted), or times that go back.
    """
    report = report if report is not None else ReadReport()
    doc, plain = load_export(path, "memory timeline JSON")
    if not (isinstance(doc, list) and len(doc) == 2 and all(isinstance(x, list) for x in doc)):
        raise TraceFormatError(_SHAPE, path=path, hint=RAW_HINT)
    times, sizes = doc
    if len(times) != len(sizes):
        raise TraceFormatError(f"{len(times):,} times but {len(sizes):,} sizes: {_SHAPE}", path=path,
                               hint="Re-export it: both lists come from one call")
    # PyTorch gives the point at raw ts -1 the first real time: two equal first times (or a lone -1) say so
    before = bool(times) and (times[0] == -1 or (len(times) > 1 and _int(times[0]) and times[0] == times[1]))
    fast = _whole(times, sizes) if plain else None
    if fast is not None:  # every point as PyTorch writes them: no check point by point
        t, m = fast
        null = t == -1
        if before:
            null[0] = True
        return _table(path, t * 1000, null, np.arange(len(t), dtype=np.int64), m[:, 1:])
    keep_t: list[int] = []
    keep_s: list[list[int]] = []
    index: list[int] = []
    last = None
    for i, (t, size) in enumerate(zip(times, sizes)):
        why = _bad_point(i, t, size)
        if why is None and last is not None and t < last and not (t == -1 and not keep_t):
            why = f"time {t} comes before the previous point's {last}: PyTorch writes the points in time order"
        if why is not None:
            if options.skip_bad_rows:
                report.skip_row(path, None, f"point {i + 1}: {why}")
                continue
            raise TraceFormatError(f"point {i + 1} (times[{i}], sizes[{i}]): {why}", path=path,
                                   hint="Fix or remove that point, or pass --skip-bad-rows")
        keep_t.append(t)
        keep_s.append(size[1:])
        index.append(i)
        if t != -1:
            last = t
    n = len(keep_t)
    null = np.array([t == -1 for t in keep_t], bool)
    if before and index and index[0] == 0:
        null[0] = True
    return _table(path, np.array(keep_t, np.int64) * 1000, null, np.array(index, np.int64),
                  np.array(keep_s, np.int64).reshape(n, WIDTH - 1))


def _whole(times: list, sizes: list) -> tuple[np.ndarray, np.ndarray] | None:
    """(times, sizes) as int64 arrays when every point is one PyTorch writes, else None (then each point is
    checked on its own, and the bad one named)."""
    m = int_matrix(sizes, WIDTH)
    if m is None or not all(type(v) is int for v in times) or any(v < -1 or v > _MAX_US for v in times):
        return None
    t = np.array(times, dtype=np.int64)
    if not t.size:
        return t, m
    timed = t != -1
    start = int(np.argmax(timed)) if timed.any() else t.size  # the -1 points come first, the rest in time order
    ordered = bool(timed[start:].all()) and bool((np.diff(t[start:]) >= 0).all())
    return (t, m) if ordered and bool((m[:, 0] == 0).all()) else None


def _table(path: Path, ts: np.ndarray, null: np.ndarray, index: np.ndarray, states: np.ndarray) -> pa.Table:
    from veotrace.schemas.base import repeated

    n = len(ts)
    return pa.Table.from_arrays([pa.array(ts, pa.int64(), mask=null), pa.array(index),
                                 *(pa.array(np.ascontiguousarray(states[:, k])) for k in range(WIDTH - 1)),
                                 repeated(str(path), n)], schema=KINETO_TIMELINE_POINTS)


def read_memory_timeline(path: Path, *, options: ReadOptions, report: ReadReport) -> pa.Table:
    """The ``memory_timeline`` table kind of this form (``veotrace.sources`` dispatches here)."""
    return read_points(path, options=options, report=report)
