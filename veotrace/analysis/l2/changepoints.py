"""Analysis: change points in the mean of a 1-D series by seeded binary segmentation, (modified) BIC penalty.

Method: seeded binary segmentation (Kovacs, Li, Buhlmann & Munk 2020) on the least-squares (l2)
cost. The best split (CUSUM) of every interval of lengths n, n/2, n/4, ... 2 * min_size, laid over
the series with half overlaps, is computed at once per length from cumulative sums (O(n log n) in
all); splits whose cost reduction exceeds half the penalty are selected narrowest interval first,
skipping intervals that hold a selected break (narrowest over threshold). Unlike plain binary
segmentation, this finds a short regime between two opposite jumps, whose single split in the long
segment is weak. The candidates are then merged back, weakest first, while a break's gain given its
neighbours is below the penalty (or its regime is shorter than min_size), and any regime whose own
best split still exceeds the penalty is split further (plain binary segmentation). The penalty is
``scale * 2 * sigma^2 * ln(n)``: scale 1 is the BIC / Schwarz criterion for a Gaussian mean shift;
the default scale 1.5 gives ``3 * sigma^2 * ln(n)``, the per-break term of the modified BIC of
Zhang & Siegmund (2007), which plain BIC undercuts on short series; sigma is
estimated robustly from the data as ``1.4826 * MAD(diff(x)) / sqrt(2)`` (insensitive to the jumps
themselves). Each break is then refined once to its best position between its neighbours, and
breaks whose gain given their final neighbours no longer exceeds the penalty are removed (weakest
first, refining after each removal).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections.abc import Callable

import numpy as np

from veotrace.defaults import CHANGEPOINT_MIN_SIZE as DEFAULT_MIN_SIZE
from veotrace.defaults import (
    CHANGEPOINT_PENALTY_SCALE as DEFAULT_PENALTY_SCALE,
)
from veotrace.errors import UsageError


def noise_sigma(x: np.ndarray) -> float:
    """Robust noise standard deviation of a piecewise-constant series (MAD of first differences)."""
    if x.size < 3:
        return 0.0
    d = np.diff(x)
    return float(1.4826 * np.median(np.abs(d - np.median(d))) / math.sqrt(2.0))


def bic_penalty(x: np.ndarray, sigma: float | None = None, *, scale: float = DEFAULT_PENALTY_SCALE) -> float:
    """The BIC penalty per break, ``scale * 2 * sigma^2 * ln(n)``, on the l2 cost."""
    s = noise_sigma(x) if sigma is None else sigma
    return scale * 2.0 * s * s * math.log(max(x.size, 2))


def _best_split(cs: np.ndarray, a: int, b: int, min_size: int) -> tuple[float, int]:
    """(gain, t) of the best split of x[a:b] at t, a + min_size <= t <= b - min_size."""
    if b - a < 2 * min_size:
        return -1.0, -1
    t = np.arange(a + min_size, b - min_size + 1)
    n1 = (t - a).astype(float)
    n2 = (b - t).astype(float)
    s1 = cs[t] - cs[a]
    s2 = cs[b] - cs[t]
    diff = s1 / n1 - s2 / n2
    gain = n1 * n2 / (b - a) * diff * diff
    i = int(np.argmax(gain))
    return float(gain[i]), int(t[i])


def detect(
    x: np.ndarray,
    *,
    min_size: int = DEFAULT_MIN_SIZE,
    penalty: float | None = None,
    penalty_scale: float = DEFAULT_PENALTY_SCALE,
    on_progress: Callable[[int, int], None] | None = None,
) -> list[int]:
    """Change points of the mean of ``x``: sorted indices of the first point of each new regime.

    Args:
        min_size: fewest points per regime (>= 1).
        penalty: cost reduction a break must exceed; default the BIC penalty (see module docstring).
        penalty_scale: multiplier of the default penalty (ignored when ``penalty`` is given).

    Raises:
        UsageError: min_size < 1, or a negative penalty.
    """
    if min_size < 1:
        raise UsageError(f"min_size must be >= 1, got {min_size}", field="--min-size")
    if penalty is not None and penalty < 0:
        raise UsageError(f"penalty must be >= 0, got {penalty}", field="--penalty")
    x = np.asarray(x, dtype=float)
    n = x.size
    if n < 2 * min_size:
        return []
    pen = bic_penalty(x, scale=penalty_scale) if penalty is None else penalty
    # On noise-free data sigma is 0: keep only splits that remove a cost well above rounding.
    floor = 1e-9 * max(float(np.var(x)) * n, 1e-300)
    pen = max(pen, floor)
    cs = np.concatenate(([0.0], np.cumsum(x - x.mean())))
    found = _seeded_candidates(cs, n, min_size, pen * OVERSPLIT)
    found = _merge_weakest(cs, found, n, pen, min_size)
    found = _split_further(cs, found, n, min_size, pen)
    found = _prune(cs, _refine(cs, found, n, min_size), n, min_size, pen)
    if on_progress is not None:
        on_progress(len(found), len(found))
    return found


def _split_further(cs: np.ndarray, bkps: list[int], n: int, min_size: int, pen: float) -> list[int]:
    """Binary segmentation started from ``bkps``: split any regime whose best split gains more than pen.

    Catches a break the seeded intervals missed because every interval around it also held another.
    """
    edges = [0, *bkps, n]
    heap: list[tuple[float, int, int, int]] = []
    for a, b in itertools.pairwise(edges):
        gain, t = _best_split(cs, a, b, min_size)
        if gain > pen:
            heap.append((-gain, t, a, b))
    heapq.heapify(heap)
    out = list(bkps)
    while heap:
        _g, t, a, b = heapq.heappop(heap)
        out.append(t)
        for lo, hi in ((a, t), (t, b)):
            gain, tt = _best_split(cs, lo, hi, min_size)
            if gain > pen:
                heapq.heappush(heap, (-gain, tt, lo, hi))
    return sorted(out)


#: Ratio of successive seeded interval lengths.
SEED_DECAY = 2.0


def _seeded_candidates(cs: np.ndarray, n: int, min_size: int, threshold: float) -> list[int]:
    """Breaks from seeded binary segmentation (Kovacs et al. 2020) with narrowest-over-threshold selection.

    Intervals of lengths n, n/2, n/4, ... down to 2 * min_size, each length laid over the series
    with half-overlapping shifts; every interval's best split is computed at once per length from the
    cumulative sums. Of the splits whose gain exceeds ``threshold``, the narrowest intervals' are kept
    first, skipping an interval that contains a kept break. Short regimes in long ones (a bump between
    two opposite jumps) are found here, where a single split of the long segment is weak.
    """
    cands: list[tuple[int, int, int]] = []  # (length, a, t)
    length = float(n)
    while int(length) >= 2 * min_size:
        ln = int(length)
        m = 2 * math.ceil(n / ln) - 1
        starts = np.unique(np.round(np.linspace(0, n - ln, m)).astype(np.int64))
        offs = np.arange(min_size, ln - min_size + 1)
        t = starts[:, None] + offs[None, :]
        a, b = starts[:, None], starts[:, None] + ln
        n1, n2 = offs[None, :].astype(float), (ln - offs)[None, :].astype(float)
        d = (cs[t] - cs[a]) / n1 - (cs[b] - cs[t]) / n2
        gain = n1 * n2 / ln * d * d
        best = np.argmax(gain, axis=1)
        g = gain[np.arange(starts.size), best]
        # A best split pinned at min_size from an inner interval edge means the change lies nearer to
        # the edge than a regime may be: a neighbouring interval sees it whole.
        pinned = ((best == 0) & (starts > 0)) | ((best == offs.size - 1) & (starts + ln < n))
        keep = np.flatnonzero((g > threshold) & ~pinned)
        cands.extend(zip([ln] * keep.size, starts[keep].tolist(), (starts[keep] + offs[best[keep]]).tolist()))
        length /= SEED_DECAY
    cands.sort()
    kept: list[int] = []
    for ln, a, t in cands:
        i = bisect.bisect_right(kept, a)
        if i < len(kept) and kept[i] < a + ln:
            continue
        bisect.insort(kept, t)
    return kept


#: Candidates are taken down to this fraction of the penalty, then merged back while below it.
OVERSPLIT = 0.5


def _merge_weakest(cs: np.ndarray, bkps: list[int], n: int, pen: float, min_size: int = 1) -> list[int]:
    """Remove breaks, weakest first, while the weakest gain (given its current neighbours) <= pen.

    A break closer than ``min_size`` to a neighbour goes first (the weaker of such a pair)."""
    if not bkps:
        return bkps
    edges = [0, *bkps, n]
    left = list(range(-1, len(edges) - 1))
    right = list(range(1, len(edges) + 1))
    alive = [True] * len(edges)
    def key_at(i: int) -> tuple[int, float]:
        a, t, b = edges[left[i]], edges[i], edges[right[i]]
        n1, n2 = t - a, b - t
        d = (cs[t] - cs[a]) / n1 - (cs[b] - cs[t]) / n2
        return (1 if min(n1, n2) >= min_size else 0), n1 * n2 / (b - a) * d * d

    current = {i: key_at(i) for i in range(1, len(edges) - 1)}
    heap = [(k, i) for i, k in current.items()]
    heapq.heapify(heap)
    while heap:
        g, i = heapq.heappop(heap)
        if not alive[i] or current.get(i) != g:
            continue
        if g[0] == 1 and g[1] > pen:
            break
        alive[i] = False
        lo, hi = left[i], right[i]
        right[lo], left[hi] = hi, lo
        for j in (lo, hi):
            if 0 < j < len(edges) - 1:
                current[j] = key_at(j)
                heapq.heappush(heap, (current[j], j))
    return [edges[i] for i in range(1, len(edges) - 1) if alive[i]]


def _split_gains(cs: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Cost reduction of each inner edge given its neighbouring edges."""
    a, t, b = edges[:-2], edges[1:-1], edges[2:]
    n1, n2 = (t - a).astype(float), (b - t).astype(float)
    diff = (cs[t] - cs[a]) / n1 - (cs[b] - cs[t]) / n2
    return n1 * n2 / (b - a) * diff * diff


def _prune(cs: np.ndarray, bkps: list[int], n: int, min_size: int, pen: float) -> list[int]:
    """Backward elimination: drop the weakest break while its gain, given its neighbours, is below the
    penalty (top-down splits made before later breaks were known can be superfluous), then refine."""
    out = list(bkps)
    changed = True
    while changed and out:
        changed = False
        gains = _split_gains(cs, np.array([0, *out, n]))
        i = int(np.argmin(gains))
        if gains[i] <= pen:
            del out[i]
            changed = True
            out = _refine(cs, out, n, min_size)
    return out


def _refine(cs: np.ndarray, bkps: list[int], n: int, min_size: int) -> list[int]:
    """Move each break to its best position between its neighbours (one pass, left to right)."""
    out = list(bkps)
    for i in range(len(out)):
        a = out[i - 1] if i > 0 else 0
        b = out[i + 1] if i + 1 < len(out) else n
        _gain, t = _best_split(cs, a, b, min_size)
        if t >= 0:
            out[i] = t
    return out


def segment_stats(x: np.ndarray, bkps: list[int], sigma: float | None = None) -> list[dict[str, float]]:
    """Per break: mean before/after (over the neighbouring regimes), jump and z-score.

    The z-score is ``|jump| / (sigma * sqrt(1/n_before + 1/n_after))``, None when sigma is 0.
    """
    x = np.asarray(x, dtype=float)
    s = noise_sigma(x) if sigma is None else sigma
    edges = [0, *bkps, x.size]
    out = []
    for i, t in enumerate(bkps):
        before, after = x[edges[i]:t], x[t:edges[i + 2]]
        mb, ma = float(before.mean()), float(after.mean())
        se = s * math.sqrt(1.0 / before.size + 1.0 / after.size)
        out.append({"mean_before": mb, "mean_after": ma, "jump": ma - mb,
                    "z_score": abs(ma - mb) / se if se > 0 else None,
                    "start_before": edges[i], "end_after": edges[i + 2]})
    return out


def match_f1(found: list[int], truth: list[int], tolerance: int) -> tuple[float, float, float]:
    """(precision, recall, F1) of ``found`` against ``truth``, one-to-one within ``tolerance``."""
    used: set[int] = set()
    hits = 0
    for f in found:
        best = min((abs(f - t), t) for t in truth if t not in used) if len(used) < len(truth) else None
        if best is not None and best[0] <= tolerance:
            used.add(best[1])
            hits += 1
    p = hits / len(found) if found else (1.0 if not truth else 0.0)
    r = hits / len(truth) if truth else 1.0
    f1 = 2 * p * r / (p + r) if p + r > 0 else 0.0
    return p, r, f1
