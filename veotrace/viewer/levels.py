"""The multi-resolution summary of one lane's levels: which of its states the page keeps, and at what zoom.

A lane is a run of states (the live bytes after each trace entry, and before the first). Level 0
cuts the lane's x span into ``BASE_BUCKETS`` equal buckets, each next level into 4 times as many; in
each bucket the state of the highest total and the state of the lowest (the first of each) are kept,
so a level drawn at one bucket per pixel column shows the true envelope, and every point drawn is a
real state whose parts (the bytes of each site) add up to its total. A coarser level's picks are
among the finer one's (the maximum of a bucket is the maximum of its sub-buckets' maxima), so each
state is stored once with the coarsest level that keeps it; the states around each peak and OOM are
kept at one more level (``detail``: every state), exact however far one zooms.
"""

from __future__ import annotations

import numpy as np

#: Buckets of the coarsest level; each level has LEVEL_FACTOR times more.
BASE_BUCKETS = 1024
LEVEL_FACTOR = 4


def level_buckets(points_budget: int) -> list[int]:
    """Buckets per level: BASE_BUCKETS, then x LEVEL_FACTOR while the finest level's two states per
    bucket fit in ``points_budget`` (at least the one level)."""
    out = [BASE_BUCKETS]
    while 2 * out[-1] * LEVEL_FACTOR <= points_budget:
        out.append(out[-1] * LEVEL_FACTOR)
    return out


def _first_extremes(values: np.ndarray, bucket: np.ndarray, index: np.ndarray, fn) -> np.ndarray:
    """Per run of equal ``bucket`` (non-decreasing), the ``index`` of the first value equal to ``fn`` of the run."""
    starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
    best = fn.reduceat(values, starts)
    run = np.repeat(np.arange(starts.size), np.diff(np.r_[starts, bucket.size]))
    hit = np.flatnonzero(values == best[run])
    _, first = np.unique(run[hit], return_index=True)
    return index[hit[first]]


def summary_levels(x: np.ndarray, total: np.ndarray, buckets: list[int], detail: list[int] = (),
                   detail_radius: int = 1000) -> tuple[np.ndarray, np.ndarray]:
    """The states kept and the coarsest level keeping each.

    Args:
        x: each state's x (non-decreasing: seconds, or the entry number).
        total: each state's total (bytes).
        buckets: buckets per level (``level_buckets``), coarsest first.
        detail: indices of states whose neighbourhood is kept whole (peaks, OOMs).
        detail_radius: states kept on each side of a detail index.

    Returns:
        (indices of the kept states, ascending; their level, uint8: 0 coarsest, len(buckets) = detail).
    """
    n = total.size
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.uint8)
    x = np.maximum.accumulate(np.asarray(x, np.float64))
    span = x[-1] - x[0]
    finest = buckets[-1]
    frac = (x - x[0]) / span if span > 0 else np.zeros(n)
    bucket = np.minimum((frac * finest).astype(np.int64), finest - 1)
    index = np.arange(n, dtype=np.int64)
    level = np.full(n, 255, np.uint8)
    picks = np.union1d(_first_extremes(total, bucket, index, np.maximum),
                       _first_extremes(total, bucket, index, np.minimum))
    level[picks] = len(buckets) - 1
    for k in range(len(buckets) - 2, -1, -1):  # coarser levels from the finer level's picks
        coarse = bucket[picks] // (finest // buckets[k])
        picks = np.union1d(_first_extremes(total[picks], coarse, picks, np.maximum),
                           _first_extremes(total[picks], coarse, picks, np.minimum))
        level[picks] = k
    level[[0, n - 1]] = 0  # the ends are always drawn
    for d in detail:
        lo, hi = max(0, d - detail_radius), min(n, d + detail_radius + 1)
        seg = level[lo:hi]
        seg[seg == 255] = len(buckets)
    kept = np.flatnonzero(level != 255)
    return kept, level[kept]
