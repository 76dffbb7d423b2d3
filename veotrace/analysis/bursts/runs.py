"""Mergeable partial behind burst detection: the maximal runs of events closer than a gap.

A run is a maximal set of events whose consecutive gaps (in time order) are all < gap; an isolated
event is a run of one. Per run we keep start, end, event count and bytes, and that is everything
burst detection needs to know about the events: the runs of A u B are the runs of A and of B merged
as intervals (sorted by start, a run joins the group before it when it starts less than ``gap``
after the largest end so far; a gap >= ``gap`` between two events can only lie outside every run).

So partials merge *exactly* whatever the order or overlap of the chunks they came from (batches,
rotated files, unsorted logs, processes, cluster workers), and :func:`merge` is associative and
commutative: a Dask reduction is ``chunk=BurstRuns.from_events, aggregate=merge_all``.

Size: one run per burst in bursty logs; one run (32 bytes) per isolated event in the worst case,
which is twice the raw (timestamp, size) pair, never more.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from veotrace.errors import AnalysisError

_EMPTY = np.zeros(0, np.int64)


def _check_span(first: int, last: int) -> None:
    """Refuse times more than 2**63 ns apart: their int64 differences (gaps, durations) would wrap."""
    if last - first >= 1 << 63:
        raise AnalysisError(f"timestamps span {first} .. {last} ns, more than 2**63 ns (292 years); "
                            "gaps and durations would not fit in 64 bits",
                            hint="Check --time-unit and the timestamp column for an outlier row")


@dataclass(frozen=True)
class BurstRuns:
    """The runs of a set of events, sorted by start and separated by gaps >= ``gap_ns``.

    Attributes:
        gap_ns: the gap that ends a run (consecutive events closer than this share a run).
        start, end: int64 timestamps of each run's first and last event.
        count: int64 events per run.
        nbytes: int64 bytes per run, or None for events without sizes (kernel launches).
    """

    gap_ns: int
    start: np.ndarray
    end: np.ndarray
    count: np.ndarray
    nbytes: np.ndarray | None

    @classmethod
    def empty(cls, gap_ns: int, *, has_bytes: bool = True) -> BurstRuns:
        return cls(gap_ns, _EMPTY, _EMPTY, _EMPTY, _EMPTY if has_bytes else None)

    @classmethod
    def from_events(cls, ts: np.ndarray, nbytes: np.ndarray | None = None, *, gap_ns: int) -> BurstRuns:
        """Runs of events at timestamps ``ts`` (int64, any order) with sizes ``nbytes`` (or None)."""
        ts = np.asarray(ts, dtype=np.int64)
        nb = None if nbytes is None else np.asarray(nbytes, dtype=np.int64)
        if ts.size == 0:
            return cls.empty(gap_ns, has_bytes=nb is not None)
        if ts.size > 1 and (np.diff(ts) < 0).any():
            order = np.argsort(ts, kind="stable")
            ts = ts[order]
            nb = None if nb is None else nb[order]
        _check_span(int(ts[0]), int(ts[-1]))
        breaks = np.flatnonzero(np.diff(ts) >= gap_ns) + 1
        first = np.concatenate(([0], breaks))
        last = np.concatenate((breaks - 1, [ts.size - 1]))
        return cls(gap_ns, ts[first], ts[last], last - first + 1,
                   None if nb is None else np.add.reduceat(nb, first))

    @property
    def has_bytes(self) -> bool:
        return self.nbytes is not None

    @property
    def n_runs(self) -> int:
        return int(self.start.size)

    @property
    def n_events(self) -> int:
        return int(self.count.sum())

    @property
    def first_ns(self) -> int | None:
        return int(self.start[0]) if self.start.size else None

    @property
    def last_ns(self) -> int | None:
        return int(self.end.max()) if self.end.size else None


def merge(a: BurstRuns, b: BurstRuns) -> BurstRuns:
    """The runs of the events of ``a`` and ``b`` together (exact, associative, commutative)."""
    return merge_all([a, b])


def merge_all(parts: Sequence[BurstRuns]) -> BurstRuns:
    """The runs of the events of every partial in ``parts`` together, in one sort and one sweep.

    Raises:
        ValueError: partials made with different gaps, or with and without bytes (a caller bug).
    """
    if not parts:
        raise ValueError("merge_all needs at least one partial")
    gap, has_bytes = parts[0].gap_ns, parts[0].has_bytes
    if any(p.gap_ns != gap or p.has_bytes != has_bytes for p in parts):
        raise ValueError("cannot merge burst runs made with different gaps, or with and without bytes")
    live = [p for p in parts if p.n_runs]
    if len(live) <= 1:
        return live[0] if live else parts[0]
    start = np.concatenate([p.start for p in live])
    end = np.concatenate([p.end for p in live])
    count = np.concatenate([p.count for p in live])
    nbytes = np.concatenate([p.nbytes for p in live]) if has_bytes else None
    if (np.diff(start) < 0).any():
        order = np.argsort(start, kind="stable")
        start, end, count = start[order], end[order], count[order]
        nbytes = None if nbytes is None else nbytes[order]
    reach = np.maximum.accumulate(end)
    _check_span(int(start[0]), int(reach[-1]))
    first = np.concatenate(([0], np.flatnonzero(start[1:] - reach[:-1] >= gap) + 1))
    return BurstRuns(gap, start[first], np.maximum.reduceat(end, first), np.add.reduceat(count, first),
                     None if nbytes is None else np.add.reduceat(nbytes, first))


class RunsAccumulator:
    """Fold partials as they stream in, compacting geometrically so the work stays O(R log R).

    Pending partials are merged once their runs outnumber those already compacted (and at least
    ``min_pending``), so each run is re-merged O(log R) times however many batches arrive.
    """

    def __init__(self, gap_ns: int, *, has_bytes: bool = True, min_pending: int = 1 << 20) -> None:
        self._done = BurstRuns.empty(gap_ns, has_bytes=has_bytes)
        self._pending: list[BurstRuns] = []
        self._pending_runs = 0
        self._min_pending = min_pending

    def add(self, part: BurstRuns) -> None:
        self._pending.append(part)
        self._pending_runs += part.n_runs
        if self._pending_runs >= max(self._min_pending, self._done.n_runs):
            self._compact()

    def _compact(self) -> None:
        self._done = merge_all([self._done, *self._pending])
        self._pending, self._pending_runs = [], 0

    def result(self) -> BurstRuns:
        """All runs seen so far."""
        self._compact()
        return self._done
