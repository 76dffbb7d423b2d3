"""The window counts behind ``compute_entropy``: one series pooled and one per device/stream group.

Counts stream in batch by batch (time windows: a WindowCounts per series; event windows: the
counted events, kept). While the default window might still be replaced (the span so far gives
fewer than MIN_WINDOWS windows), the counted events are also kept, so that a window chosen from
the data at the end can be counted exactly; on long logs that buffer is dropped after the first
batch, and nothing else changes on the streaming path.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from veotrace.analysis import timescale
from veotrace.analysis.entropy.windows import WindowCounts
from veotrace.analysis.groups import split
from veotrace.analysis.ops import OpsSeen
from veotrace.errors import AnalysisError

try:  # the one-pass class x window count; without it (no C compiler at install) numpy does the same
    from veotrace.analysis.entropy import _wincount
except ImportError:
    _wincount = None


@dataclass
class SeriesCounts:
    """Counts of one series, finished: window index (0 = first), start/end ns (or None), counts."""

    idx: np.ndarray
    start: np.ndarray | None
    end: np.ndarray | None
    counts: np.ndarray
    left_out: int = 0  # counted events after the last complete event window


@dataclass
class EntropyPartial:
    """Streaming state of every series of one entropy run: partial -> merge -> finish.

    Attributes:
        window_ns, step_ns: the time windows (ignored in event mode).
        window_events: N of event windows, or None for time windows.
        auto: the window is the default and may be replaced by one chosen from the data.
        origin_ns: the start of window 0: the run's first event (:func:`origin_of`; given by the engines,
            which find it before the pieces run so that they all agree).
        grouped: a group key array comes with every batch.
        params: the keyword parameters of the run (ops, classes, by, device), for finish_entropy.
        n_read, n_selected: rows read, and rows left after the --device filter.
    """

    window_ns: int
    step_ns: int
    n_classes: int
    window_events: int | None
    auto: bool
    grouped: bool
    origin_ns: int | None = None
    pooled: WindowCounts = field(init=False)
    groups: dict[int, WindowCounts] = field(default_factory=dict)
    events: list[tuple[np.ndarray, np.ndarray, np.ndarray | None]] = field(default_factory=list)
    buffering: bool = field(init=False)
    has_null_ts: bool = False
    n_counted: int = 0
    choice: dict | None = None
    params: dict = field(default_factory=dict)
    n_read: int = 0
    n_selected: int = 0
    seen: OpsSeen = field(default_factory=OpsSeen)
    notes: list[str] = field(default_factory=list)
    rows_in_file: dict = field(default_factory=dict)
    group_counted: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.pooled = self._counts(self.window_ns, self.step_ns)
        self.buffering = self.auto or self.window_events is not None

    def _counts(self, window_ns: int, step_ns: int) -> WindowCounts:
        return WindowCounts(window_ns, step_ns, self.n_classes, self.origin_ns or 0)

    def with_origin(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """``batches`` unchanged, after setting the origin from their first rows when none is given."""
        if self.origin_ns is not None:
            yield from batches
            return
        it = iter(batches)
        head = list(_head(it))
        self.origin_ns = origin_of(head)
        self.pooled.origin_ns = self.origin_ns or 0
        yield from head
        yield from it

    @property
    def event_mode(self) -> bool:
        return self.window_events is not None

    def add(self, ts_arr, mask: np.ndarray, cls: np.ndarray, gkeys: np.ndarray | None,
            span: tuple[int, int] | None = None) -> None:
        """Count one batch: its ts column (Arrow), the counted-row mask, their classes and group keys.

        ``span``: the batch's (min, max) timestamp when already known (check_span), to skip a pass.
        """
        self.n_counted += int(cls.size)
        gk = None if gkeys is None else np.compress(mask, gkeys)
        if gk is not None:
            for key, n in zip(*np.unique(gk, return_counts=True)):
                self.group_counted[int(key)] = self.group_counted.get(int(key), 0) + int(n)
        if ts_arr.null_count and not self.has_null_ts:
            self.has_null_ts = True
            if not self.event_mode:
                if not (self.auto and self.buffering):
                    raise AnalysisError(
                        "events have no timestamps (e.g. a PyTorch snapshot recorded without time_us)",
                        hint="Use --window-events N to count windows of N consecutive events")
                self.window_events = -1  # chosen in finish() from the number of counted events
        if self.event_mode:
            if not self.has_null_ts:
                self.pooled.observe_span(np.asarray(ts_arr))
            self.events.append((np.compress(mask, ts_arr.fill_null(0)), cls, gk))
            return
        ts = np.asarray(ts_arr)
        self.pooled.observe_span(ts if span is None else np.array(span, np.int64))
        cts = np.compress(mask, ts)
        self._count(cts, cls, gk)
        if self.buffering:
            self.events.append((cts, cls, gk))
            p = self.pooled
            if p.first_ns is not None and timescale.windows_spanned(
                    p.first_ns, p.last_ns, self.window_ns, self.step_ns, p.origin_ns) >= timescale.MIN_WINDOWS:
                self.buffering, self.events = False, []  # the default window gives a usable series

    def add_sized(self, ts_arr: pa.Array, size_arr: pa.Array, mask: np.ndarray, span: tuple[int, int] | None,
                  classes: tuple[int, int, int]) -> bool:
        """Count one batch from its sizes in one pass (the C kernel); False where it does not apply.

        It applies to the pooled series of time windows once the window is settled (not buffering),
        on timestamps and sizes without nulls; the caller then takes ``add`` (classes from numpy).
        ``classes``: (min_class, max_class, cap), the class rule of ``entropy.size_classes``.
        """
        if (_wincount is None or span is None or self.grouped or self.buffering or self.event_mode
                or ts_arr.null_count or size_arr.null_count or size_arr.type != pa.int64()):
            return False
        self.pooled.observe_span(np.array(span, np.int64))
        k0, counts = self.pooled.reserve(*span)
        self.n_counted += _wincount.count(np.asarray(ts_arr), np.asarray(size_arr), mask, counts, k0,
                                          self.step_ns, self.window_ns, *classes, self.pooled.origin_ns)
        return True

    def merge(self, other: EntropyPartial) -> EntropyPartial:
        """Combine with the partial of other rows of the same run (in place; returns self).

        Order matters only for event windows over events without timestamps (read order): merge
        partials in input order.
        """
        if (other.window_ns, other.step_ns, other.n_classes) != (self.window_ns, self.step_ns, self.n_classes):
            raise ValueError("cannot merge entropy partials with different windows")
        if self.origin_ns is None and other.origin_ns is not None:  # nothing counted here yet
            self.origin_ns = self.pooled.origin_ns = other.origin_ns
        elif other.origin_ns is None:  # nothing counted there
            other.pooled.origin_ns = self.pooled.origin_ns
        if other.has_null_ts and not self.has_null_ts:
            if not self.event_mode and not (self.auto and self.buffering):
                raise AnalysisError("some events have no timestamps (e.g. a PyTorch snapshot recorded without time_us)",
                                    hint="Use --window-events N to count windows of N consecutive events")
            self.has_null_ts = True
            if not self.event_mode:
                self.window_events = other.window_events if other.event_mode else -1
        elif self.has_null_ts and not other.event_mode and not (other.auto and other.buffering):
            raise AnalysisError("some events have no timestamps (e.g. a PyTorch snapshot recorded without time_us)",
                                hint="Use --window-events N to count windows of N consecutive events")
        _merged_span(self, other)
        self.pooled.merge(other.pooled)
        for key, acc in other.groups.items():
            if key in self.groups:
                self.groups[key].merge(acc)
            else:
                self.groups[key] = acc
        keep = self.buffering and other.buffering
        if keep and not self.event_mode and self.pooled.first_ns is not None:
            p = self.pooled
            keep = timescale.windows_spanned(p.first_ns, p.last_ns, self.window_ns, self.step_ns,
                                             p.origin_ns) < timescale.MIN_WINDOWS
        self.events = self.events + other.events if keep or self.event_mode else []
        self.buffering = keep or self.event_mode
        self.n_counted += other.n_counted
        for key, n in other.group_counted.items():
            self.group_counted[key] = self.group_counted.get(key, 0) + n
        self.n_read += other.n_read
        self.n_selected += other.n_selected
        self.seen.merge(other.seen)
        self.notes += [n for n in other.notes if n not in self.notes]
        return self

    def _count(self, cts: np.ndarray, cls: np.ndarray, gk: np.ndarray | None) -> None:
        self.pooled.add(cts, cls)
        if gk is None:
            return
        for key, sel in split(gk):
            acc = self.groups.get(key)
            if acc is None:
                acc = self.groups[key] = self._counts(self.window_ns, self.step_ns)
            acc.add(cts[sel], cls[sel])

    def choose(self, default_s: float) -> None:
        """Replace the default window by one from the data when it gives too few windows."""
        if not self.auto or not self.buffering or self.n_counted == 0:
            return
        n, p = self.n_counted, self.pooled
        if self.has_null_ts:
            self.window_events = timescale.auto_window_events(n)
            self.choice = {"mode": "events", "window_events": self.window_events,
                           "reason": "the events have no timestamps"}
            return
        w, why = timescale.fit_window(p.first_ns, p.last_ns, default_s,
                                      lambda: np.concatenate([e[0] for e in self.events]), n, p.origin_ns)
        if why is None:  # the default window fits after all
            return
        if w is None:
            self.window_events = timescale.auto_window_events(n)
            self.choice = {"mode": "events", "window_events": self.window_events,
                           "reason": why + ", and the events fall at too few distinct times for time windows"}
            return
        first, last = p.first_ns, p.last_ns
        self.window_ns = self.step_ns = w
        self.pooled = self._counts(w, w)
        self.pooled.observe_span(np.array([first, last], np.int64))
        self.groups = {}
        for cts, cls, gk in self.events:
            self._count(cts, cls, gk)
        self.events = []
        self.choice = {"mode": "time", "window_s": w / timescale.NS_PER_S, "reason": why}

    def finish(self) -> tuple[SeriesCounts, dict[int, SeriesCounts]]:
        """Counts of the pooled series and of each group (groups share the pooled time span)."""
        if self.event_mode:
            ts = [e[0] for e in self.events]
            cls = [e[1] for e in self.events]
            pooled = _event_windows(ts, cls, self.window_events, self.n_classes, self.has_null_ts)
            groups = {}
            if self.grouped and self.events:
                gk = np.concatenate([e[2] for e in self.events])
                all_ts, all_cls = np.concatenate(ts), np.concatenate(cls)
                for key, sel in split(gk):
                    groups[key] = _event_windows([all_ts[sel]], [all_cls[sel]], self.window_events,
                                                 self.n_classes, self.has_null_ts)
            return pooled, groups
        ks, counts = self.pooled.finish()
        k0, o = int(ks[0]), self.pooled.origin_ns
        pooled = SeriesCounts(ks - k0, o + ks * self.step_ns, o + ks * self.step_ns + self.window_ns, counts)
        groups = {}
        for key, acc in sorted(self.groups.items()):
            acc.first_ns, acc.last_ns = self.pooled.first_ns, self.pooled.last_ns
            gks, gcounts = acc.finish()
            groups[key] = SeriesCounts(gks - k0, o + gks * self.step_ns, o + gks * self.step_ns + self.window_ns, gcounts)
        return pooled, groups


#: The origin of the windows is the earliest of the first ORIGIN_ROWS timestamps in input order: the
#: first event of a log written in time order, and the same on every route (one process reads them in
#: its first batch, the engines before their pieces run) whatever the batch sizes. Rows out of order
#: past these fall in windows before window 0 (negative k), counted like any other.
ORIGIN_ROWS = 1024


def _head(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The first batches of ``batches`` until they hold ORIGIN_ROWS timestamps (or the input ends)."""
    n = 0
    for batch in batches:
        yield batch
        ts = batch.column("ts_ns")
        n += len(ts) - ts.null_count
        if n >= ORIGIN_ROWS:
            return


def origin_of(batches: Iterable[pa.RecordBatch]) -> int | None:
    """The earliest of the first ORIGIN_ROWS timestamps of ``batches`` (None when they hold none)."""
    lows, n = [], 0
    for batch in batches:
        ts = batch.column("ts_ns")
        if ts.null_count:
            ts = ts.drop_null()
        ts = np.asarray(ts)[: ORIGIN_ROWS - n]
        if ts.size:
            lows.append(int(ts.min()))
        n += ts.size
        if n >= ORIGIN_ROWS:
            break
    return min(lows) if lows else None


def _event_windows(ev_ts, ev_cls, n, n_cls, has_null_ts) -> SeriesCounts:
    ts = np.concatenate(ev_ts) if ev_ts else np.zeros(0, np.int64)
    cls = np.concatenate(ev_cls) if ev_cls else np.zeros(0, np.int64)
    if not has_null_ts:
        order = np.argsort(ts, kind="stable")
        ts, cls = ts[order], cls[order]
    n_win = ts.size // n  # complete windows only; the remainder is counted in left_out
    left_out = int(ts.size - n_win * n)
    ts, cls = ts[: n_win * n], cls[: n_win * n]
    w = np.repeat(np.arange(n_win), n)
    counts = np.bincount(w * n_cls + cls, minlength=n_win * n_cls).reshape(n_win, n_cls)
    if has_null_ts or n_win == 0:
        return SeriesCounts(np.arange(n_win), None, None, counts, left_out)
    return SeriesCounts(np.arange(n_win), ts[::n], ts[n - 1 :: n], counts, left_out)


def check_span(part: EntropyPartial, ts: np.ndarray, batch: pa.RecordBatch) -> tuple[int, int]:
    """Refuse (or warn about) a span implausible for the rows read, before windows are allocated for it.

    Returns:
        The batch's (min, max) timestamp.
    """
    stream, n_read, rows_in_file = part, part.n_read, part.rows_in_file
    p = stream.pooled
    lo, hi = int(ts.min()), int(ts.max())
    first = lo if p.first_ns is None else min(lo, p.first_ns)
    last = hi if p.last_ns is None else max(hi, p.last_ns)
    name = _source_name(batch)
    base = rows_in_file.get(name, 0)
    rows_in_file[name] = base + batch.num_rows
    n_win = timescale.windows_spanned(first, last, stream.window_ns, stream.step_ns, p.origin_ns)
    if not timescale.implausible_span(n_win, n_read):
        return lo, hi
    i = timescale.find_outlier(ts, p.first_ns, p.last_ns)
    span = timescale.fmt_duration((last - first) / 1e9)
    if i is not None:
        others = np.delete(ts, i)
        rest = [int(v) for v in (others.min(), others.max())] if others.size else [p.first_ns, p.last_ns]
        if p.first_ns is not None:
            rest = [min(rest[0], p.first_ns), max(rest[1], p.last_ns)]
        raise AnalysisError(
            f"row {base + i + 1} has timestamp {int(ts[i]):,} ns, far outside the other rows "
            f"({rest[0]:,} .. {rest[1]:,} ns); with it the run would span {span}, "
            f"{timescale.plural(n_win, 'window')} for {timescale.plural(n_read, 'row')}",
            path=name, hint="Fix or remove that row (a timestamp in another unit?), or check --time-unit")
    _refuse_span(stream.window_ns, n_win, n_read, span, name)
    return lo, hi  # the warning of an implausible span is the run's, said once it is read (span_warning)


def _refuse_span(window_ns: int, n_win: int, n_read: int, span: str, name: str | None) -> None:
    if n_win > timescale.REFUSE_MIN_WINDOWS and n_win > timescale.REFUSE_WINDOWS_PER_ROW * max(n_read, 1):
        w = timescale.fmt_duration(window_ns / timescale.NS_PER_S)
        raise AnalysisError(f"the run spans {span}: {timescale.plural(n_win, 'window')} of {w} for "
                            f"{timescale.plural(n_read, 'row')} read, nearly all empty", path=name,
                            hint="Check --time-unit (the timestamps may not be nanoseconds), or give a longer --window")


def _merged_span(a: EntropyPartial, b: EntropyPartial) -> None:
    """Refuse before merging two partials whose spans together are what ``check_span`` refuses in one read
    of the run (pieces of a log far apart in time each pass alone): the same verdict for every --jobs."""
    p, q = a.pooled, b.pooled
    if a.event_mode or p.first_ns is None or q.first_ns is None:
        return
    first, last = min(p.first_ns, q.first_ns), max(p.last_ns, q.last_ns)
    n_win = timescale.windows_spanned(first, last, a.window_ns, a.step_ns, p.origin_ns)
    n_read = a.n_read + b.n_read
    name = next(iter(a.rows_in_file), None) or next(iter(b.rows_in_file), None)
    _refuse_span(a.window_ns, n_win, n_read, timescale.fmt_duration((last - first) / 1e9), name)


def span_warning(part: EntropyPartial) -> str | None:
    """The warning of a run whose span is implausible for its rows (a unit mistake, rows far apart), from the
    whole run read: the same words whichever pieces it was read in (``--jobs``), said once."""
    p = part.pooled
    if part.event_mode or p.first_ns is None:
        return None
    n_win = timescale.windows_spanned(p.first_ns, p.last_ns, part.window_ns, part.step_ns, p.origin_ns)
    if not timescale.implausible_span(n_win, part.n_read):
        return None
    return (f"Warning: the run spans {timescale.fmt_duration((p.last_ns - p.first_ns) / 1e9)} "
            f"({timescale.plural(n_win, 'window')} for {timescale.plural(part.n_read, 'row')} read); check "
            "--time-unit or use a longer --window")


def _source_name(batch: pa.RecordBatch) -> str | None:
    if "source_file" not in batch.schema.names or batch.num_rows == 0:
        return None
    col = batch.column("source_file")
    return col.dictionary[col.indices[0].as_py()].as_py() if pa.types.is_dictionary(col.type) else col[0].as_py()
