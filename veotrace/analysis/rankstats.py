"""Trend statistics in numpy: least squares, Theil-Sen and Kendall's tau-b with its p-value.

They compute what ``scipy.stats.linregress``, ``theilslopes`` and ``kendalltau`` compute (same
formulas, checked against scipy in the tests) without importing ``scipy.stats``, which costs about
1.4 s per process: more than the whole entropy analysis of a 10-million-event log. Series longer
than ``KENDALL_MAX_POINTS`` go to scipy's O(n log n) Kendall, imported only then.
"""

from __future__ import annotations

import bisect
import math
from statistics import NormalDist

import numpy as np

#: Up to this many points Kendall's statistic is computed from all pairs here (blocked, exact ints).
KENDALL_MAX_POINTS = 6000
#: Rows per block of the pairwise computations (bounds memory to ~BLOCK * n values).
_BLOCK = 512
#: From this many values order_statistics selects inside a sampled bracket, from a sample this big.
_SAMPLED_SELECT_MIN = 200_000
_SAMPLE = 50_000


def linregress(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """(slope, intercept, r) of the least-squares line, as ``scipy.stats.linregress``."""
    xmean, ymean = np.mean(x), np.mean(y)
    ssxm, ssxym, _, ssym = np.cov(x, y, bias=1).flat
    if ssxm == 0.0 or ssym == 0.0:
        r = 0.0
    else:
        r = float(np.clip(ssxym / np.sqrt(ssxm * ssym), -1.0, 1.0))
    slope = ssxym / ssxm
    return float(slope), float(ymean - slope * xmean), r


def _pairs(n: int):
    """Blocks of index pairs i < j: rows ``i`` (column vector) against columns ``j`` > the block start."""
    for a in range(0, n - 1, _BLOCK):
        b = min(a + _BLOCK, n - 1)
        i = np.arange(a, b)[:, None]
        j = np.arange(a + 1, n)[None, :]
        yield i, j, j > i


def _tie_counts(v: np.ndarray) -> np.ndarray:
    """Sizes of the groups of equal values that have more than one member."""
    _, counts = np.unique(v, return_counts=True)
    return counts[counts > 1]


def theil_sen(x: np.ndarray, y: np.ndarray, confidence: float = 0.95) -> tuple[float, float, float]:
    """(median slope, low, high) over all pairs with distinct x, with Sen's (1968) interval."""
    order = np.argsort(x, kind="stable")
    xs, ys = x[order], y[order]
    # After sorting, every pair i < j has x_j >= x_i; (y_j - y_i) / (x_j - x_i) is the same number
    # as for the unsorted pair (negating both is exact in IEEE). Pairs with equal x are left out.
    slopes = _pair_slopes(xs, ys)
    if slopes.size == 0:
        return math.nan, math.nan, math.nan
    alpha = 1.0 - confidence if confidence > 0.5 else confidence
    z = NormalDist().inv_cdf(alpha / 2.0)
    ny, nt = y.size, slopes.size
    rep = sum(int(k * (k - 1) * (2 * k + 5)) for v in (x, y) for k in _tie_counts(v))
    # Ties in x and in y both lower the variance; with (nearly) every value tied the sum passes the
    # untied term and the variance is 0 (a series of 2-3 distinct points), not negative.
    sigma = math.sqrt(max(ny * (ny - 1) * (2 * ny + 5) - rep, 0) / 18.0)
    hi_i = min(int(np.round((nt - z * sigma) / 2.0)), nt - 1)
    lo_i = max(int(np.round((nt + z * sigma) / 2.0)) - 1, 0)
    mid = [(nt - 1) // 2, nt // 2]
    at = order_statistics(slopes, sorted({lo_i, hi_i, *mid}))
    med = at[mid[0]] if mid[0] == mid[1] else (at[mid[0]] + at[mid[1]]) / 2.0
    return med, at[lo_i], at[hi_i]


def _pair_slopes(xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """(ys[j] - ys[i]) / (xs[j] - xs[i]) for all i < j with xs[j] > xs[i] (xs sorted), row i after row.

    Written into one array in place, a row at a time: ~n^2/2 values, where a second array of the
    same size for the x differences cost more in fresh pages than the arithmetic.
    """
    n = xs.size
    out = np.empty(n * (n - 1) // 2)
    ties = n > 1 and bool(np.any(xs[1:] == xs[:-1]))
    at = 0
    for i in range(n - 1):
        dx = xs[i + 1 :] - xs[i]
        dy = ys[i + 1 :]
        if ties:
            keep = dx > 0
            dx, dy = dx[keep], dy[keep]
        row = out[at : at + dx.size]
        np.subtract(dy, ys[i], out=row)
        np.divide(row, dx, out=row)
        at += dx.size
    return out[:at]


def order_statistics(v: np.ndarray, ranks: list[int]) -> dict[int, float]:
    """The values of rank ``ranks`` (0-based, ascending; NaN last) of ``v``, exactly. ``v`` is reordered.

    Theil-Sen needs a few ranks close together among ~n^2/2 slopes, where one selection pass over
    all of them (np.partition) costs more than making them. A fixed sample brackets those ranks
    between two values; the values inside the bracket are counted and selected exactly, and when
    the bracket misses (the counts say so) the whole array is partitioned. Same answer either way.
    """
    lo_k, hi_k = min(ranks), max(ranks)
    if v.size >= _SAMPLED_SELECT_MIN:
        n, m = v.size, _SAMPLE
        # Spread over the array by a multiplicative hash (numpy.random costs 10 ms to import).
        sample = np.sort(v[np.arange(m, dtype=np.int64) * 2654435761 % n])
        margin = 3 * math.isqrt(m)  # six standard deviations of a sample rank (<= sqrt(m) / 2)
        a = sample[max(lo_k * m // n - margin, 0)]
        b = sample[min(hi_k * m // n + margin, m - 1)]
        below = int(np.count_nonzero(v < a))
        inside = np.compress((v >= a) & (v <= b), v)
        if below <= lo_k and below + inside.size > hi_k:  # all the ranks asked for are inside
            inside.partition([k - below for k in ranks])
            return {k: float(inside[k - below]) for k in ranks}
    v.partition(ranks)
    return {k: float(v[k]) for k in ranks}


def kendall_tau(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(tau-b, two-sided p-value), as ``scipy.stats.kendalltau`` with ``method='auto'``."""
    n = x.size
    if n > KENDALL_MAX_POINTS:
        from scipy import stats

        res = stats.kendalltau(x, y)
        return float(res.statistic), float(res.pvalue)
    s = _concordance(x, y)  # concordant minus discordant pairs
    tx, ty = _tie_counts(x), _tie_counts(y)
    _, joint = np.unique(np.stack([x, y]), axis=1, return_counts=True)
    xtie, ytie = int((tx * (tx - 1) // 2).sum()), int((ty * (ty - 1) // 2).sum())
    ntie = int((joint * (joint - 1) // 2).sum())
    tot = n * (n - 1) // 2
    if xtie == tot or ytie == tot:
        return math.nan, math.nan
    tau = min(1.0, max(-1.0, s / math.sqrt(tot - xtie) / math.sqrt(tot - ytie)))
    dis = (tot - xtie - ytie + ntie - s) // 2
    if xtie == 0 and ytie == 0 and (n <= 33 or min(dis, tot - dis) <= 1):
        return tau, _kendall_p_exact(n, tot - dis)
    m = n * (n - 1.0)
    x0 = float((tx * (tx - 1.0) * (tx - 2)).sum())
    y0 = float((ty * (ty - 1.0) * (ty - 2)).sum())
    x1 = float((tx * (tx - 1.0) * (2 * tx + 5)).sum())
    y1 = float((ty * (ty - 1.0) * (2 * ty + 5)).sum())
    var = (m * (2 * n + 5) - x1 - y1) / 18 + (2 * xtie * ytie) / m + x0 * y0 / (9 * m * (n - 2))
    z = s / math.sqrt(var)
    return tau, min(1.0, math.erfc(abs(z) / math.sqrt(2.0)))


def _concordance(x: np.ndarray, y: np.ndarray) -> int:
    """Concordant minus discordant pairs, exactly.

    With x untied (a trend against time: the usual case) and y finite, walking the points in x
    order and counting, for each, the earlier y below and above it in a sorted list is a few ms
    for thousands of points; otherwise every pair is compared, in blocks.
    """
    order = np.argsort(x, kind="stable")
    xs = x[order]
    if not np.any(xs[1:] == xs[:-1]) and np.isfinite(y).all():
        seen: list[float] = []
        s = 0
        for j, v in enumerate(y[order].tolist()):
            below = bisect.bisect_left(seen, v)
            s += below - (j - bisect.bisect_right(seen, v, lo=below))
            seen.insert(below, v)
        return s
    s = 0
    for i, j, upper in _pairs(x.size):
        sx = np.sign(x[j] - x[i]).astype(np.int8)
        sy = np.sign(y[j] - y[i]).astype(np.int8)
        s += int(np.sum((sx * sy)[upper], dtype=np.int64))
    return s


def _kendall_p_exact(n: int, c: int) -> float:
    """Two-sided exact p-value of c concordant pairs among n untied points (Kendall 1970)."""
    c = min(c, n * (n - 1) // 2 - c)
    if n <= 2:
        return 1.0
    if c == 0:
        return 2.0 / math.factorial(n) if n < 171 else 0.0
    if c == 1:
        return 2.0 / math.factorial(n - 1) if n < 172 else 0.0
    if 4 * c == n * (n - 1):
        return 1.0
    new = np.zeros(c + 1)
    new[0:2] = 1.0
    for j in range(3, n + 1):
        new = np.cumsum(new) if n < 171 else np.cumsum(new) / j
        if j <= c:
            new[j:] -= new[: c + 1 - j]
    prob = 2.0 * np.sum(new) / math.factorial(n) if n < 171 else float(np.sum(new))
    return float(np.clip(prob, 0.0, 1.0))
