"""Sliding-window Shannon entropy of allocation size classes, and its trend over the run.

Definition (fixed so results can be checked): counted events are ``op in ops`` (default alloc);
class = ceil(log2(size_bytes / 1024)) clamped to [min_class, max_class] (4 KiB ... 4 MiB: 11 classes);
window k covers [k*S, k*S + W); H = -sum p_i log2 p_i over classes present; empty windows have
H = null and are left out of fits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from veotrace.analysis.defaults import ENTROPY_MAX_CLASS as DEFAULT_MAX_CLASS
from veotrace.analysis.defaults import ENTROPY_MIN_CLASS as DEFAULT_MIN_CLASS
from veotrace.analysis.defaults import ENTROPY_OPS as DEFAULT_OPS
from veotrace.analysis.defaults import ENTROPY_WINDOW_S as DEFAULT_WINDOW_S
from veotrace.analysis.ops import op_mask
from veotrace.analysis.trend import fit_trend, segment_trends
from veotrace.analysis.windows import WindowCounts
from veotrace.errors import AnalysisError, UsageError
from veotrace.schemas.entropy import ENTROPY_WINDOWS

NS_PER_HOUR = 3_600_000_000_000
#: Highest --max-class (2**42 KiB = 4 PiB): size classes are exact up to it.
MAX_CLASS_LIMIT = 42
#: ALLOC_EVENTS columns the analysis reads (the reader skips the others).
COLUMNS = ("ts_ns", "op", "size_bytes")


def size_classes(size_bytes: np.ndarray, min_class: int = DEFAULT_MIN_CLASS, max_class: int = DEFAULT_MAX_CLASS) -> np.ndarray:
    """ceil(log2(size / 1024)) clamped to [min_class, max_class], exactly, as int64.

    ceil(log2(n)) is the bit length of n - 1, read from the exponent field of n - 1 as a float64:
    exact because n - 1 is first capped at 2**(max_class + 11) <= 2**53 (see MAX_CLASS_LIMIT), so
    powers of two never round wrong. Sizes 0 and 1 fall to the bottom class.
    """
    x = np.asarray(size_bytes, dtype=np.int64) - 1
    np.minimum(x, 1 << (min(max_class, MAX_CLASS_LIMIT) + 11), out=x)
    np.maximum(x, 0, out=x)
    bits = (x.astype(np.float64).view(np.int64) >> 52) - 1022  # bit length for x >= 1; x = 0 gives -1022
    np.maximum(bits, 0, out=bits)
    return np.clip(bits - 10, min_class, max_class)


def entropy_bits(counts: np.ndarray) -> np.ndarray:
    """Shannon entropy (bits) of each row of a counts matrix; NaN for empty rows."""
    counts = np.asarray(counts, dtype=np.float64)
    n = counts.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = counts / n
        terms = np.where(counts > 0, p * np.log2(np.where(p > 0, p, 1.0)), 0.0)
    h = -terms.sum(axis=1)
    h[n[:, 0] == 0] = np.nan
    return np.maximum(h, 0.0)


@dataclass
class EntropyResult:
    """Windows (ENTROPY_WINDOWS), trend over hours, per-segment fits and counts of what was read."""

    windows: pa.Table
    trend: dict
    segments: list[dict]
    params: dict
    summary: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"params": self.params, "summary": self.summary, "trend": self.trend,
                "segments": self.segments, "windows": self.windows.to_pylist()}


def _check(window_s, step_s, min_class, max_class, window_events, segments):
    if window_events is not None:
        if window_events < 1:
            raise UsageError("--window-events must be at least 1")
    elif window_s <= 0 or (step_s is not None and step_s <= 0):
        raise UsageError("--window and --step must be positive")
    if max_class > MAX_CLASS_LIMIT:
        raise UsageError(f"--max-class {max_class} is above {MAX_CLASS_LIMIT} (2**{MAX_CLASS_LIMIT} KiB = 4 PiB)")
    if min_class > max_class:
        raise UsageError(f"--min-class {min_class} is above --max-class {max_class}")
    if list(segments) != sorted(segments) or any(b <= 0 for b in segments):
        raise UsageError("--segments must be increasing positive hours, e.g. 48,120")


@dataclass
class EntropyPartial:
    """The mergeable partial of compute_entropy: what it keeps of the batches it has seen.

    Built per batch stream (a file, a byte range of a file, a Parquet row group, on any process or
    cluster worker) by :func:`entropy_partial`; partials of the same parameters merge exactly and
    :func:`finish_entropy` turns the merged one into the result. With ``window_events`` the partial
    keeps the counted (timestamp, class) pairs themselves, in read order.
    """

    counts: WindowCounts
    params: dict
    events_read: int = 0
    events_counted: int = 0
    has_null_ts: bool = False
    events: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)

    def merge(self, other: EntropyPartial) -> EntropyPartial:
        """Add ``other`` (events read after this partial's) in place; returns self."""
        if other.params != self.params:
            raise ValueError("cannot merge entropy partials with different parameters")
        self.counts.merge(other.counts)
        self.events_read += other.events_read
        self.events_counted += other.events_counted
        self.has_null_ts |= other.has_null_ts
        self.events.extend(other.events)
        return self


def compute_entropy(
    batches: Iterable[pa.RecordBatch],
    *,
    window_s: float = DEFAULT_WINDOW_S,
    step_s: float | None = None,
    ops: Sequence[str] = DEFAULT_OPS,
    min_class: int = DEFAULT_MIN_CLASS,
    max_class: int = DEFAULT_MAX_CLASS,
    window_events: int | None = None,
    segments: Sequence[float] = (),
    on_progress: Callable[[], None] | None = None,
) -> EntropyResult:
    """Entropy of size classes per window over ALLOC_EVENTS batches (any order, any number of files).

    Args:
        window_s, step_s: W and S in seconds of the log's time base (S defaults to W).
        window_events: instead of time windows, windows of N consecutive counted events
            (timestamp order when every event has one, else read order).
        segments: hours since the first window at which to split the per-segment fits.

    Raises:
        UsageError: impossible parameters. AnalysisError: nothing to count, or no timestamps.
    """
    _check(window_s, step_s, min_class, max_class, window_events, segments)
    part = entropy_partial(batches, window_s=window_s, step_s=step_s, ops=ops, min_class=min_class,
                           max_class=max_class, window_events=window_events, on_progress=on_progress)
    return finish_entropy(part, segments=segments)


def entropy_partial(
    batches: Iterable[pa.RecordBatch],
    *,
    window_s: float = DEFAULT_WINDOW_S,
    step_s: float | None = None,
    ops: Sequence[str] = DEFAULT_OPS,
    min_class: int = DEFAULT_MIN_CLASS,
    max_class: int = DEFAULT_MAX_CLASS,
    window_events: int | None = None,
    on_progress: Callable[[], None] | None = None,
) -> EntropyPartial:
    """The partial of compute_entropy over ``batches`` (a pure function of them and the parameters).

    Raises:
        UsageError: impossible parameters. AnalysisError: time windows over events without timestamps.
    """
    _check(window_s, step_s, min_class, max_class, window_events, ())
    n_cls = max_class - min_class + 1
    window_ns = round(window_s * 1e9)
    step_ns = round((step_s if step_s is not None else window_s) * 1e9)
    params = {"window_s": window_s if window_events is None else None,
              "step_s": (step_ns / 1e9) if window_events is None else None,
              "window_events": window_events, "ops": list(ops), "min_class": min_class,
              "max_class": max_class, "classes": n_cls}
    part = EntropyPartial(WindowCounts(window_ns, step_ns, n_cls), params)
    acc = part.counts
    for batch in batches:
        part.events_read += batch.num_rows
        ts_arr = batch.column("ts_ns")
        if ts_arr.null_count:
            part.has_null_ts = True
        mask = op_mask(batch.column("op"), ops)
        # np.compress, not boolean indexing: several times faster on a mask that flips row to row.
        cls = size_classes(np.compress(mask, batch.column("size_bytes")), min_class, max_class) - min_class
        part.events_counted += int(cls.size)
        if window_events is None:
            if part.has_null_ts:
                raise AnalysisError(
                    "events have no timestamps (e.g. a PyTorch snapshot recorded without time_us)",
                    hint="Use --window-events N to count windows of N consecutive events")
            ts = np.asarray(ts_arr)
            acc.observe_span(ts)
            acc.add(np.compress(mask, ts), cls)
        else:
            part.events.append((np.compress(mask, ts_arr.fill_null(0)), cls))
        if on_progress is not None:
            on_progress()
    return part


def finish_entropy(part: EntropyPartial, *, segments: Sequence[float] = ()) -> EntropyResult:
    """The result from the merged partial of every batch.

    Raises:
        AnalysisError: nothing to count, or no timestamps.
    """
    acc, window_events, n_cls, has_null_ts = part.counts, part.params["window_events"], part.params["classes"], part.has_null_ts
    ops = part.params["ops"]
    window_ns, step_ns = acc.window_ns, acc.step_ns
    if part.events_counted == 0 and window_events is not None:
        raise AnalysisError(f"no events with op {', '.join(ops)} were read", hint="Check --ops")
    if window_events is None:
        ks, counts = acc.finish()
        start = ks * step_ns
        end = start + window_ns
        windows_idx = ks
    else:
        ev_ts = [t for t, _ in part.events]
        ev_cls = [c for _, c in part.events]
        windows_idx, start, end, counts = _event_windows(ev_ts, ev_cls, window_events, n_cls, has_null_ts)
    h = entropy_bits(counts)
    hours = (start - start[0]) / NS_PER_HOUR if start is not None and len(start) else None
    table = _windows_table(windows_idx, start, end, hours, counts, h, n_cls)
    x = hours if hours is not None else windows_idx.astype(np.float64)
    trend = fit_trend(x, h)
    trend["x"] = "hours" if not has_null_ts else "window"
    segs = segment_trends(x, h, segments) if segments else []
    params = {**part.params, "segments_hours": list(segments)}
    summary = {"events_read": part.events_read, "events_counted": part.events_counted, "windows": table.num_rows,
               "empty_windows": int((counts.sum(axis=1) == 0).sum()),
               "first_ns": acc.first_ns, "last_ns": acc.last_ns,
               "mean_entropy_bits": float(np.nanmean(h)) if np.isfinite(h).any() else None}
    return EntropyResult(table, trend, segs, params, summary)


def _event_windows(ev_ts, ev_cls, n, n_cls, has_null_ts):
    ts = np.concatenate(ev_ts) if ev_ts else np.zeros(0, np.int64)
    cls = np.concatenate(ev_cls) if ev_cls else np.zeros(0, np.int64)
    if not has_null_ts:
        order = np.argsort(ts, kind="stable")
        ts, cls = ts[order], cls[order]
    n_win = ts.size // n  # only complete windows; the remainder is reported in events_counted
    ts, cls = ts[: n_win * n], cls[: n_win * n]
    w = np.repeat(np.arange(n_win), n)
    counts = np.bincount(w * n_cls + cls, minlength=n_win * n_cls).reshape(n_win, n_cls)
    if has_null_ts or n_win == 0:
        return np.arange(n_win), None, None, counts
    return np.arange(n_win), ts[::n], ts[n - 1 :: n], counts


def _windows_table(idx, start, end, hours, counts, h, n_cls) -> pa.Table:
    n = counts.sum(axis=1)
    nulls = pa.nulls(len(idx), pa.int64())
    return pa.Table.from_arrays(
        [
            pa.array(idx, pa.int64()),
            pa.array(start, pa.int64()) if start is not None else nulls,
            pa.array(end, pa.int64()) if end is not None else nulls,
            pa.array(hours, pa.float64()) if hours is not None else pa.nulls(len(idx), pa.float64()),
            pa.array(n, pa.int64()),
            pa.array((counts > 0).sum(axis=1), pa.int32()),
            pa.array(h, pa.float64(), from_pandas=True),
            pa.array(h / np.log2(n_cls) if n_cls > 1 else np.where(n > 0, 0.0, np.nan), pa.float64(), from_pandas=True),
        ],
        schema=ENTROPY_WINDOWS,
    )
