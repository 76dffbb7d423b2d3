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


def read_timeline(path: Path, *, options: ReadOptions = ReadOptions(), report: ReadReport | None = None) -> pa.Table:
    """The rows as ``KINETO_TIMELINE`` (a bounded read: the raw export is one JSON list)."""
    import json

    from veotrace.sources.limits import read_bounded

    report = report if report is not None else ReadReport()
    fh, _ = open_decompressed(path)
    with fh:
        data = read_bounded(path, fh)
    try:
        rows = json.loads(data)
    except ValueError as exc:
        raise TraceFormatError(f"not a valid memory timeline ({str(exc)[:80]})", path=path,
                               hint="Re-export it; a cut export cannot be read") from None
    if not isinstance(rows, list):
        raise TraceFormatError("a memory timeline is a list of [ts, action, bytes, category] rows", path=path)
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
    n = len(ts)
    tsa = np.array(ts, np.int64)
    from veotrace.schemas.base import repeated

    actions = pa.array([TIMELINE_ACTIONS[k] for k in sorted(TIMELINE_ACTIONS)], pa.string())
    cats = pa.array(list(TIMELINE_CATEGORIES), pa.string())
    return pa.Table.from_arrays([
        pa.array(tsa, pa.int64(), mask=tsa < 0),
        pa.array(np.arange(n, dtype=np.int64)),
        pa.DictionaryArray.from_arrays(pa.array(np.array(act, np.int32) - 1), actions),
        pa.array(np.array(nbytes, np.int64)),
        pa.DictionaryArray.from_arrays(pa.array(np.array(cat, np.int32)), cats),
        repeated(str(path), n)], schema=KINETO_TIMELINE)


def categories(table: pa.Table) -> dict:
    """Bytes live per category at the end and at the peak of their sum, and the peak's time."""
    nbytes = table.column("bytes").to_numpy()
    cat = table.column("category").combine_chunks()
    names = cat.dictionary.to_pylist()
    idx = cat.indices.to_numpy()
    total = np.cumsum(nbytes)
    if not nbytes.size:
        return {"rows": 0, "end": {}, "peak_bytes": 0, "peak_at_ns": None, "at_peak": {}, "before_profiling_bytes": 0}
    peak = int(np.argmax(total))
    per = np.zeros((len(names), nbytes.size), np.int64)
    for k in range(len(names)):
        per[k] = np.cumsum(np.where(idx == k, nbytes, 0))
    ts = table.column("ts_ns")
    return {"rows": int(nbytes.size), "end": {names[k]: int(per[k, -1]) for k in range(len(names)) if per[k, -1]},
            "peak_bytes": int(total[peak]), "peak_at_ns": ts[peak].as_py(),
            "at_peak": {names[k]: int(per[k, peak]) for k in range(len(names)) if per[k, peak]},
            "before_profiling_bytes": int(nbytes[ts.is_null().to_numpy(zero_copy_only=False)].sum())}


def read_memory_timeline(path: Path, *, options: ReadOptions, report: ReadReport) -> pa.Table:
    """The ``memory_timeline`` table kind (``veotrace.sources`` dispatches here)."""
    return read_timeline(path, options=options, report=report)
