"""Sliding-window Shannon entropy of allocation size classes, and its trend over the run.

Definition (fixed so results can be checked): counted events are ``op in ops`` (default alloc);
class = ceil(log2(size_bytes / 1024)) clamped to [min_class, max_class] (4 KiB ... 4 MiB: 11 classes);
window k covers [O + k*S, O + k*S + W), O the run's first event (the earliest of its first rows,
``entropy_series.origin_of``), so that window 0 starts at the first event;
H = -sum p_i log2 p_i over classes present; empty windows have H = null and are left out of fits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from veotrace.analysis.entropy.entropy_notes import class_label, display, edge_note, phase_note, series_summary
from veotrace.analysis.entropy.entropy_notes import notes as notes_of
from veotrace.analysis.entropy.entropy_notes import phases as phases_of
from veotrace.analysis.entropy.entropy_series import EntropyPartial, check_span, span_warning
from veotrace.analysis.groups import check_by, device_rows, require_counted, stack_groups
from veotrace.analysis.groups import keys as group_keys
from veotrace.analysis.groups import label as group_label
from veotrace.analysis.ops import op_mask
from veotrace.analysis.trend import fit_trend, segment_trends
from veotrace.defaults import ENTROPY_MAX_CLASS as DEFAULT_MAX_CLASS
from veotrace.defaults import ENTROPY_MIN_CLASS as DEFAULT_MIN_CLASS
from veotrace.defaults import ENTROPY_OPS as DEFAULT_OPS
from veotrace.defaults import ENTROPY_WINDOW_S as DEFAULT_WINDOW_S
from veotrace.errors import UsageError
from veotrace.schemas.entropy import ENTROPY_GROUP_WINDOWS, ENTROPY_WINDOWS

NS_PER_HOUR = 3_600_000_000_000
#: Highest --max-class (2**42 KiB = 4 PiB): size classes are exact up to it.
MAX_CLASS_LIMIT = 42
#: ALLOC_EVENTS columns the analysis reads (the reader skips the others); source_file names an outlier row.
COLUMNS = ("ts_ns", "op", "size_bytes", "source_file")


def size_classes(size_bytes: np.ndarray, min_class: int = DEFAULT_MIN_CLASS, max_class: int = DEFAULT_MAX_CLASS) -> np.ndarray:
    """ceil(log2(size / 1024)) clamped to [min_class, max_class], exactly, as int64.

    ceil(log2(n)) is the bit length of n - 1, read from the exponent field of n - 1 as a float64:
    exact because n - 1 is first capped at 2**(max_class + 11) <= 2**53 (see MAX_CLASS_LIMIT), so
    powers of two never round wrong. Sizes 0 and 1 fall to the bottom class.
    """
    x = np.asarray(size_bytes, dtype=np.int64) - 1
    np.minimum(x, class_cap(max_class), out=x)
    np.maximum(x, 0, out=x)
    bits = (x.astype(np.float64).view(np.int64) >> 52) - 1022  # bit length for x >= 1; x = 0 gives -1022
    np.maximum(bits, 0, out=bits)
    return np.clip(bits - 10, min_class, max_class)


def class_cap(max_class: int) -> int:
    """The cap on size - 1 that keeps size_classes exact: sizes past it are all in the top class."""
    return 1 << (min(max_class, MAX_CLASS_LIMIT) + 11)


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
    """Windows (ENTROPY_WINDOWS), trend over hours, per-segment fits and counts of what was read.

    ``groups`` holds one entry per device/stream with ``--by`` (each with its own windows, trend and
    summary); the pooled series stays in ``windows``/``trend``/``summary``.
    """

    windows: pa.Table
    trend: dict
    segments: list[dict]
    params: dict
    summary: dict = field(default_factory=dict)
    groups: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        out = {"params": self.params, "summary": self.summary, "trend": self.trend,
               "segments": self.segments, "windows": self.windows.to_pylist()}
        if self.groups:
            out["groups"] = [{**g, "windows": g["windows"].to_pylist()} for g in self.groups]
        return out

    def slope_display(self) -> dict:
        """The trend's slopes in the unit that fits the span (``trend["display"]``), else per hour or window."""
        t = self.trend
        return t.get("display") or {"unit": "bits/hour" if t.get("x") == "hours" else "bits/window", "per_unit": 1.0,
                                    "slope": t["slope"], "theil_sen_slope": t["theil_sen"]["slope"]}

    def headline(self) -> list[tuple[str, object]]:
        """The numbers an entropy run is summed up by (the report's and a notebook's first lines)."""
        t, s, d = self.trend, self.summary, self.slope_display()
        return [("events counted", s["events_counted"]), ("windows", s["windows"]),
                ("mean H (bits)", s["mean_entropy_bits"]), (f"slope ({d['unit']})", d["slope"]),
                ("Kendall tau", t["kendall"]["tau"]), ("Kendall p", t["kendall"]["p_value"])]

    def export_table(self) -> pa.Table:
        """The windows for CSV/Parquet: ENTROPY_WINDOWS, or ENTROPY_GROUP_WINDOWS (pooled first) with --by."""
        if not self.groups:
            return self.windows
        return stack_groups(self.windows, self.groups, "windows", self.params["by"], ENTROPY_GROUP_WINDOWS)


def _check(window_s, step_s, min_class, max_class, window_events, segments, by=None):
    check_by(by)
    if window_events is not None:
        if window_events < 1:
            raise UsageError("--window-events must be at least 1")
    elif (window_s is not None and window_s <= 0) or (step_s is not None and step_s <= 0):
        raise UsageError("--window and --step must be positive")
    if max_class > MAX_CLASS_LIMIT:
        raise UsageError(f"--max-class {max_class} is above {MAX_CLASS_LIMIT} (2**{MAX_CLASS_LIMIT} KiB = 4 PiB)")
    if min_class > max_class:
        raise UsageError(f"--min-class {min_class} is above --max-class {max_class}")
    if list(segments) != sorted(segments) or any(b <= 0 for b in segments):
        raise UsageError("--segments must be increasing positive hours, e.g. 48,120")


def compute_entropy(
    batches: Iterable[pa.RecordBatch],
    *,
    window_s: float | None = None,
    step_s: float | None = None,
    ops: Sequence[str] = DEFAULT_OPS,
    min_class: int = DEFAULT_MIN_CLASS,
    max_class: int = DEFAULT_MAX_CLASS,
    window_events: int | None = None,
    segments: Sequence[float] = (),
    by: str | None = None,
    device: int | None = None,
    auto_classes: bool = False,
    on_progress: Callable[[], None] | None = None,
) -> EntropyResult:
    """Entropy of size classes per window over ALLOC_EVENTS batches (any order, any number of files).

    Args:
        window_s, step_s: W and S in seconds of the log's time base (S defaults to W). Given, they are
            used exactly. Left out (None, with no window_events), W is DEFAULT_WINDOW_S unless the run
            spans fewer than ``timescale.MIN_WINDOWS`` (20) such windows; then the longest round window
            giving a usable series is chosen from the data (or, for events without timestamps or at
            too few distinct times, windows of consecutive events), and ``params["window_choice"]``
            and ``summary["notes"]`` say what was chosen and why.
        window_events: instead of time windows (window_s and step_s are then ignored), windows of N
            consecutive counted events (timestamp order when every event has one, else read order); a trailing partial
            window is left out and counted in ``summary["events_left_out"]``.
        segments: hours since the first window at which to split the per-segment fits.
        by: "device" or "stream": also one series per group (batches need that column).
        device: count only the rows of this device (batches need the ``device`` column).
        auto_classes: the classes from the data instead of [min_class, max_class]: every size in a class
            of its own, none clamped (counted over [0, MAX_CLASS_LIMIT], the range seen reported), so two
            runs counted so (a ``diff``, a ``gate`` and its baseline) share the same classes.

    Raises:
        UsageError: impossible parameters. AnalysisError: an op of ``ops`` never occurs, nothing to
        count, no timestamps (with an explicit time window), or an implausible span (an outlier row).
    """
    _check(window_s, step_s, min_class, max_class, window_events, segments, by)
    part = entropy_partial(batches, window_s=window_s, step_s=step_s, ops=ops, min_class=min_class,
                           max_class=max_class, window_events=window_events, by=by, device=device,
                           auto_classes=auto_classes, on_progress=on_progress)
    return finish_entropy(part, segments=segments)


def entropy_partial(
    batches: Iterable[pa.RecordBatch],
    *,
    window_s: float | None = None,
    step_s: float | None = None,
    ops: Sequence[str] = DEFAULT_OPS,
    min_class: int = DEFAULT_MIN_CLASS,
    max_class: int = DEFAULT_MAX_CLASS,
    window_events: int | None = None,
    by: str | None = None,
    device: int | None = None,
    origin_ns: int | None = None,
    auto_classes: bool = False,
    on_progress: Callable[[], None] | None = None,
) -> EntropyPartial:
    """The mergeable partial of ``compute_entropy`` over some batches (same keywords); see finish_entropy.

    ``origin_ns``: the start of window 0 when known (the engines give every piece the run's origin);
    by default ``origin_of`` these batches.
    """
    _check(window_s, step_s, min_class, max_class, window_events, (), by)
    if auto_classes:
        min_class, max_class = 0, MAX_CLASS_LIMIT
    auto = window_s is None and step_s is None and window_events is None
    win_s = DEFAULT_WINDOW_S if window_s is None else window_s
    n_cls = max_class - min_class + 1
    window_ns = round(win_s * 1e9)
    step_ns = round((step_s if step_s is not None else win_s) * 1e9)
    if window_ns < 1 or step_ns < 1:
        raise UsageError("--window and --step must be at least 1 ns", hint="Timestamps are integer nanoseconds")
    part = EntropyPartial(window_ns, step_ns, n_cls, window_events, auto, grouped=by is not None, origin_ns=origin_ns,
                          params={"ops": list(ops), "min_class": min_class, "max_class": max_class,
                                  "by": by, "device": device, "auto_classes": auto_classes})
    classes = (min_class, max_class, class_cap(max_class))
    for batch in part.with_origin(batches):  # window 0 starts at the run's first event, whatever its device
        part.n_read += batch.num_rows
        part.seen.add(batch.column("op"))  # before --device: an op elsewhere in the input is not a typo
        if device is not None:
            batch = batch.filter(pa.array(device_rows(batch.column("device"), device)))
        part.n_selected += batch.num_rows
        mask = op_mask(batch.column("op"), ops)
        ts_arr = batch.column("ts_ns")
        span = None
        if not part.event_mode and not ts_arr.null_count and batch.num_rows:
            span = check_span(part, np.asarray(ts_arr), batch)
        if not part.add_sized(ts_arr, batch.column("size_bytes"), mask, span, classes):
            # np.compress, not boolean indexing: several times faster on a mask that flips row to row.
            cls = size_classes(np.compress(mask, batch.column("size_bytes")), min_class, max_class) - min_class
            gkeys = group_keys(batch.column(by)) if by is not None else None
            part.add(ts_arr, mask, cls, gkeys, span=span)
        if on_progress is not None:
            on_progress()
    return part


def finish_entropy(part: EntropyPartial, *, segments: Sequence[float] = ()) -> EntropyResult:
    """The EntropyResult of a (merged) partial: window choice, tables, trends, segments and notes.

    Raises:
        AnalysisError: an op never occurs in the input, or no event was counted.
    """
    p = part.params
    ops, device, by, n_cls = p["ops"], p["device"], p["by"], part.n_classes
    part.seen.check(ops)
    require_counted(part.n_counted, ops, device)
    part.choose(DEFAULT_WINDOW_S)
    pooled, groups = part.finish()
    first_ns, last_ns = part.pooled.first_ns, part.pooled.last_ns
    totals = np.asarray(pooled.counts).sum(axis=0) if np.asarray(pooled.counts).size else np.zeros(n_cls, np.int64)
    seen = np.flatnonzero(totals)
    if p.get("auto_classes") and seen.size:  # H / Hmax over the classes the data spans, not the 43 counted
        n_cls = int(seen[-1] - seen[0] + 1)
    x_unit = "window" if part.has_null_ts else "hours"
    table, trend, h = _series(pooled, first_ns, n_cls, x_unit, last_ns)
    x = _x(table)
    segs = segment_trends(x, h, segments, x_unit="hours" if x_unit == "hours" else "window") if segments else []
    notes = part.notes + [w for w in [span_warning(part)] if w] + notes_of(part, pooled, segments, x, first_ns, last_ns)
    params = {"window_s": (part.window_ns / 1e9) if not part.event_mode else None,
              "step_s": (part.step_ns / 1e9) if not part.event_mode else None,
              "window_events": part.window_events if part.event_mode else None,
              "ops": list(ops), "min_class": p["min_class"], "max_class": p["max_class"], "classes": n_cls,
              "auto_classes": bool(p.get("auto_classes")),
              "classes_seen": [p["min_class"] + int(seen[0]), p["min_class"] + int(seen[-1])] if seen.size else None,
              "class_labels": {"bottom": class_label(p["min_class"], p["min_class"], p["max_class"]),
                               "top": class_label(p["max_class"], p["min_class"], p["max_class"])},
              "segments_hours": list(segments), "by": by, "device": device,
              "window_choice": {"auto": part.choice is not None, **(part.choice or {"mode": "given"})}}
    span_s = (last_ns - first_ns) / 1e9 if first_ns is not None and x_unit == "hours" else None
    ph = phases_of(table, h, span_s)
    if ph:
        notes.append(phase_note(ph, span_s))
    edge = edge_note(totals, p["min_class"], p["max_class"], auto=bool(p.get("auto_classes")))
    if edge:
        notes.append(edge)
    summary = {"events_read": part.n_read, "events_counted": part.n_counted, **series_summary(table, h),
               "first_ns": first_ns, "last_ns": last_ns,
               "span_s": (last_ns - first_ns) / 1e9 if first_ns is not None else None,
               "events_left_out": pooled.left_out, "phases": ph, "notes": notes}
    if device is not None:
        summary["events_on_device"] = part.n_selected
    out_groups = []
    for key, sc in groups.items():
        gtable, gtrend, gh = _series(sc, first_ns, n_cls, x_unit, last_ns)
        out_groups.append({"by": by, "group": group_label(key), "trend": gtrend, "windows": gtable,
                           "summary": {"events_counted": part.group_counted.get(key, 0),
                                       **series_summary(gtable, gh), "events_left_out": sc.left_out}})
    return EntropyResult(table, trend, segs, params, summary, out_groups)


def _series(sc, first_ns, n_cls, x_unit, last_ns):
    """Windows table, trend and entropies of one series."""
    h = entropy_bits(sc.counts)
    start = sc.start
    hours = (start - start[0]) / NS_PER_HOUR if start is not None and len(start) else None
    offset = (start - first_ns) / 1e9 if start is not None and first_ns is not None else None
    table = _windows_table(sc.idx, start, sc.end, hours, sc.counts, h, n_cls, offset)
    trend = fit_trend(_x(table), h)
    trend["x"] = x_unit
    span_s = (last_ns - first_ns) / 1e9 if first_ns is not None and x_unit == "hours" else None
    trend.update(display(trend, span_s))
    return table, trend, h


def _x(table: pa.Table) -> np.ndarray:
    hours = table.column("hours")
    if table.num_rows and hours.null_count == 0:
        return hours.to_numpy()
    return table.column("window").to_numpy().astype(np.float64)


def _windows_table(idx, start, end, hours, counts, h, n_cls, offset=None) -> pa.Table:
    n = counts.sum(axis=1)
    nulls = pa.nulls(len(idx), pa.int64())
    fnulls = pa.nulls(len(idx), pa.float64())
    return pa.Table.from_arrays(
        [
            pa.array(idx, pa.int64()),
            pa.array(start, pa.int64()) if start is not None else nulls,
            pa.array(end, pa.int64()) if end is not None else nulls,
            pa.array(hours, pa.float64()) if hours is not None else fnulls,
            pa.array(n, pa.int64()),
            pa.array((counts > 0).sum(axis=1), pa.int32()),
            pa.array(h, pa.float64(), from_pandas=True),
            pa.array(h / np.log2(n_cls) if n_cls > 1 else np.where(n > 0, 0.0, np.nan), pa.float64(), from_pandas=True),
            pa.array(offset, pa.float64()) if offset is not None else fnulls,
        ],
        schema=ENTROPY_WINDOWS,
    )
