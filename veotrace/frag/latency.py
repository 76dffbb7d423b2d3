"""Latency percentiles per key (address zone, request-size bin) from log-spaced histograms.

Memory is one fixed histogram per key, whatever the log length: 64 bins per decade from 1 ns to
10^6 s (in microseconds), so a percentile is reported as the upper edge of its bin, at most 3.7%
above the exact value. Values <= 1 ns fall in bin 0; NaN and negative values are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

BINS_PER_DECADE = 64
LO_US = 1e-3
DECADES = 12
N_BINS = BINS_PER_DECADE * DECADES + 1


def bin_of(lat_us: np.ndarray) -> np.ndarray:
    """Histogram bin of each latency (0 = at most LO_US)."""
    x = np.maximum(lat_us, LO_US) / LO_US
    return np.clip(np.ceil(np.log10(x) * BINS_PER_DECADE), 0, N_BINS - 1).astype(np.int64)


def upper_edge(b: int) -> float:
    return LO_US * 10 ** (b / BINS_PER_DECADE)


@dataclass
class LatencyHist:
    """Counts per (key, bin); keys are non-negative integers (zone keys, bin indices)."""

    counts: dict = field(default_factory=dict)

    def add(self, keys: np.ndarray, lat_us: np.ndarray) -> None:
        ok = np.isfinite(lat_us) & (lat_us >= 0)
        if not ok.any():
            return
        k, b = keys[ok].astype(np.uint64), bin_of(lat_us[ok])
        uk, inv = np.unique(k, return_inverse=True)
        flat = np.bincount(inv * N_BINS + b, minlength=uk.size * N_BINS).reshape(uk.size, N_BINS)
        for key, row in zip(uk.tolist(), flat):
            cur = self.counts.get(key)
            self.counts[key] = row if cur is None else cur + row

    def stats(self, key: int) -> dict:
        """n, p50_us and p99_us (bin upper edges) of one key; None percentiles when it has no values."""
        return stats_of_row(self.counts.get(key))

    def merge(self, other: LatencyHist) -> LatencyHist:
        for key, row in other.counts.items():
            cur = self.counts.get(key)
            self.counts[key] = row.copy() if cur is None else cur + row
        return self


def stats_of_row(row: np.ndarray | None) -> dict:
    """n, p50_us and p99_us (bin upper edges) of one histogram row; None percentiles when it is empty."""
    n = 0 if row is None else int(row.sum())
    if not n:
        return {"n": 0, "p50_us": None, "p99_us": None}
    cum = np.cumsum(row)
    pick = lambda q: upper_edge(int(np.searchsorted(cum, q * n)))  # noqa: E731
    return {"n": n, "p50_us": pick(0.5), "p99_us": pick(0.99)}
