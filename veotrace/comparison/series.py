"""Comparison layer: the two runs' window series on one axis (``DIFF_SERIES``): time since each side's first
event, record_function steps, or events."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from veotrace.comparison.measure import Measures
from veotrace.defaults import DIFF_ALIGNS
from veotrace.errors import UsageError
from veotrace.schemas.diff import DIFF_SERIES

ALIGNS = DIFF_ALIGNS
X_UNIT = {"time": "s", "step": "steps", "events": "events"}
#: (metric, fragmentation window column) drawn per device.
FRAG_METRICS = (("live_bytes_peak", "live_bytes_peak"), ("reserved_bytes_peak", "reserved_bytes_peak"),
                ("external_frag", "external_frag"))


def check_align(align: str, before: Any, after: Any) -> str:
    """``align`` checked against what the sides hold (``before``/``after``: ``Side``).

    Raises:
        UsageError: an unknown alignment, or ``step`` on a side without record_function steps.
    """
    align = getattr(align, "value", align)
    if align not in ALIGNS:
        raise UsageError(f"--align must be one of {', '.join(ALIGNS)}, got {align!r}")
    if align == "step":
        for side in (before, after):
            if side.snapshot is None:
                raise UsageError(f"--align step needs record_function steps (a PyTorch snapshot's annotations), and "
                                 f"{side.describe()} has none", hint=_OTHER_ALIGN)
    return align


_OTHER_ALIGN = "Use --align time, or --align events for untimed traces"


def check_steps(align: str, before: Any, after: Any) -> None:
    """``--align step`` once the sides are read: each must hold two or more steps.

    Raises:
        UsageError: a side whose annotations name no step that starts twice.
    """
    for side in (before, after) if align == "step" else ():
        if not steps(side.annotations).size:
            raise UsageError(f"--align step needs record_function steps, and {side.describe()} records no "
                             "annotation that starts twice", hint=_OTHER_ALIGN)


def steps(annotations: list) -> np.ndarray:
    """The start times (ns) of the steps: the START marks of the annotation named most often (a trailing
    ``#N``, as in the profiler's ``ProfilerStep#12``, is not part of the name)."""
    import re

    starts: dict[str, list[int]] = {}
    for a in annotations:
        if a.get("stage") == "START" and isinstance(a.get("time_us"), int):
            starts.setdefault(re.sub(r"#\d+$", "", str(a.get("name"))), []).append(a["time_us"] * 1000)
    if not starts:
        return np.zeros(0, np.int64)
    name = max(sorted(starts), key=lambda k: len(starts[k]))
    return np.unique(np.asarray(starts[name], np.int64)) if len(starts[name]) >= 2 else np.zeros(0, np.int64)


def _to_steps(t_ns: np.ndarray, marks: np.ndarray) -> np.ndarray:
    """Times as steps: k + the fraction of step k elapsed (linear beyond the first and last marks)."""
    k = np.arange(marks.size, dtype=np.float64)
    x = np.interp(t_ns, marks, k)
    first, last = (marks[1] - marks[0]), (marks[-1] - marks[-2])
    x = np.where(t_ns < marks[0], (t_ns - marks[0]) / first, x)
    return np.where(t_ns > marks[-1], k[-1] + (t_ns - marks[-1]) / last, x)


def series(m: Measures, align: str, devices: list[int]) -> pa.Table:
    """One side's DIFF_SERIES rows: entropy per window and, per device compared, the fragmentation windows."""
    parts = []
    first = m.side.first_ns
    marks = steps(m.side.annotations) if align == "step" else None
    ent = m.value("entropy")
    if ent is not None and ent.windows.num_rows:
        w = ent.windows
        start = _col(w, "start_ns")
        x = _x(align, start, first, np.cumsum(_col(w, "events")), marks)
        parts.append(_rows("entropy_bits", None, m.side.name, _col(w, "window"), x, _col(w, "entropy_bits")))
    frag = m.value("fragmentation")
    if frag is not None and frag.windows.num_rows:
        w = frag.windows
        dev = _col(w, "device")
        for d in devices:
            keep = dev == d
            sub = {c: _col(w, c)[keep] for c in ("window", "start_ns", "events", *(c for _, c in FRAG_METRICS))}
            x = _x(align, sub["start_ns"], first, np.cumsum(sub["events"]), marks)
            for metric, column in FRAG_METRICS:
                parts.append(_rows(metric, d, m.side.name, sub["window"], x, sub[column]))
    return pa.concat_tables(parts) if parts else DIFF_SERIES.empty_table()


def _x(align: str, start_ns: np.ndarray, first: int | None, events: np.ndarray, marks) -> np.ndarray:
    if align == "events":
        return events.astype(np.float64)
    if first is None:
        return np.full(start_ns.size, np.nan)
    if align == "step":
        return _to_steps(start_ns, marks)
    return (start_ns - first) / 1e9


def _col(table: pa.Table, name: str) -> np.ndarray:
    return np.asarray(table.column(name).to_numpy(zero_copy_only=False), dtype=np.float64)


def _rows(metric: str, device: int | None, side: str, window, x, value) -> pa.Table:
    n = len(window)
    return pa.table({"metric": pa.array([metric] * n).dictionary_encode(),
                     "device": pa.array([device] * n, pa.int32()),
                     "side": pa.array([side] * n).dictionary_encode(),
                     "window": pa.array(np.asarray(window, np.int64)),
                     "x": pa.array(np.where(np.isfinite(x), x, np.nan), pa.float64(), from_pandas=True),
                     "value": pa.array(value, pa.float64(), from_pandas=True)}, schema=DIFF_SERIES)
