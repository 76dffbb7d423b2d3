"""Mergeable per-window class counts: the partial aggregate behind sliding-window entropy.

Window k covers [O + k*S, O + k*S + W), where the origin O is the run's first event (its first row with
a timestamp, in input order: every route finds the same one), so that window 0 starts at the first
event. An event at t falls in every k with O + k*S <= t < O + k*S + W. Counts are kept densely for the
k range seen so far; two partials (batches, files, processes, cluster workers) of one origin merge by
aligning their k ranges.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from veotrace.errors import AnalysisError

#: Refuse to materialise more windows than this (a unit mistake, e.g. ns logs read as seconds).
MAX_WINDOWS = 20_000_000


@dataclass
class WindowCounts:
    """Counts of events per (window, class), plus the time span of all events seen.

    Attributes:
        window_ns, step_ns: W and S.
        origin_ns: O, the start of window 0 (ns, the log's time base).
        n_classes: number of classes (columns of ``counts``).
        k0: window index of ``counts`` row 0 (None while empty).
        counts: int64 array (windows, classes).
        first_ns, last_ns: smallest and largest timestamp of any event seen (counted or not).
    """

    window_ns: int
    step_ns: int
    n_classes: int
    origin_ns: int = 0
    k0: int | None = None
    counts: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.int64))
    first_ns: int | None = None
    last_ns: int | None = None

    def observe_span(self, ts: np.ndarray) -> None:
        """Widen the time span with timestamps of events of any op."""
        if ts.size:
            lo, hi = int(ts.min()), int(ts.max())
            self.first_ns = lo if self.first_ns is None else min(self.first_ns, lo)
            self.last_ns = hi if self.last_ns is None else max(self.last_ns, hi)

    def add(self, ts: np.ndarray, cls: np.ndarray) -> None:
        """Count counted events with timestamps ``ts`` (int64 ns) and class indices ``cls`` (0-based)."""
        if ts.size == 0:
            return
        S, W, C = self.step_ns, self.window_ns, self.n_classes
        if self.origin_ns:
            ts = ts - self.origin_ns
        base = ts // S
        ks, cs = [], []
        for j in range(-(-W // S)):  # ceil(W / S) windows can hold one event
            k = base - j
            if j == 0 and W >= S:  # t < (t // S) * S + S <= k * S + W: every event is in its own window
                ks.append(k)
                cs.append(cls)
                continue
            keep = ts < k * S + W
            ks.append(k[keep])
            cs.append(cls[keep])
        k = ks[0] if len(ks) == 1 else np.concatenate(ks)
        c = (cs[0] if len(cs) == 1 else np.concatenate(cs)).astype(np.int64, copy=False)
        lo, hi = int(k.min()), int(k.max())
        self._ensure(lo, hi)
        flat = (k - self.k0) * C + c
        self.counts += np.bincount(flat, minlength=self.counts.size).reshape(self.counts.shape)

    def reserve(self, first_ts: int, last_ts: int) -> tuple[int, np.ndarray]:
        """Rows for every window an event in [first_ts, last_ts] can fall in; returns (k0, counts) to fill."""
        S, o = self.step_ns, self.origin_ns
        self._ensure((first_ts - o) // S - (-(-self.window_ns // S)) + 1, (last_ts - o) // S)
        return self.k0, self.counts

    def _ensure(self, lo: int, hi: int) -> None:
        if self.k0 is None:
            self._check_size(hi - lo + 1)
            self.k0 = lo
            self.counts = np.zeros((hi - lo + 1, self.n_classes), np.int64)
            return
        cur_hi = self.k0 + self.counts.shape[0] - 1
        new_lo, new_hi = min(lo, self.k0), max(hi, cur_hi)
        if (new_lo, new_hi) != (self.k0, cur_hi):
            self._check_size(new_hi - new_lo + 1)
            grown = np.zeros((new_hi - new_lo + 1, self.n_classes), np.int64)
            grown[self.k0 - new_lo : self.k0 - new_lo + self.counts.shape[0]] = self.counts
            self.k0, self.counts = new_lo, grown

    @staticmethod
    def _check_size(n: int) -> None:
        if n > MAX_WINDOWS:
            raise AnalysisError(
                f"the log spans {n:,} windows",
                hint="Check --time-unit (timestamps may not be nanoseconds) or use a longer --window",
            )

    def merge(self, other: WindowCounts) -> WindowCounts:
        """Combine with another partial of the same parameters (in place; returns self)."""
        if ((other.window_ns, other.step_ns, other.n_classes, other.origin_ns)
                != (self.window_ns, self.step_ns, self.n_classes, self.origin_ns)):
            raise ValueError("cannot merge window counts with different parameters")
        for ts in (other.first_ns, other.last_ns):
            if ts is not None:
                self.observe_span(np.array([ts], np.int64))
        if other.k0 is not None:
            self._ensure(other.k0, other.k0 + other.counts.shape[0] - 1)
            off = other.k0 - self.k0
            self.counts[off : off + other.counts.shape[0]] += other.counts
        return self

    def drop_before(self, k: int) -> None:
        """Forget the counts of windows before k (a follower has emitted them: memory bounded by the window)."""
        if self.k0 is not None and k > self.k0:
            n = min(k - self.k0, self.counts.shape[0])
            self.counts = self.counts[n:].copy()
            self.k0 += n

    def row(self, k: int) -> np.ndarray:
        """The counts of window k (zeros where nothing was counted)."""
        if self.k0 is not None and 0 <= k - self.k0 < self.counts.shape[0]:
            return self.counts[k - self.k0]
        return np.zeros(self.n_classes, np.int64)

    def finish(self) -> tuple[np.ndarray, np.ndarray]:
        """Window indices k and their counts for every k with O + k*S <= last and O + k*S + W > first.

        Raises:
            AnalysisError: no events were seen.
        """
        if self.first_ns is None:
            raise AnalysisError("no events with timestamps were read")
        S, W, o = self.step_ns, self.window_ns, self.origin_ns
        k_lo = (self.first_ns - o - W) // S + 1
        k_hi = (self.last_ns - o) // S
        self._check_size(k_hi - k_lo + 1)
        ks = np.arange(k_lo, k_hi + 1, dtype=np.int64)
        out = np.zeros((ks.size, self.n_classes), np.int64)
        if self.k0 is not None:
            src = np.arange(self.k0, self.k0 + self.counts.shape[0])
            sel = (src >= k_lo) & (src <= k_hi)
            out[src[sel] - k_lo] = self.counts[sel]
        return ks, out
