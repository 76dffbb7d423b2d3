"""Analysis: change points in the mean of a 1-D series by binary segmentation with a BIC penalty.

Method: binary segmentation on the least-squares (l2) cost, the CUSUM split, evaluated for every
candidate at once from cumulative sums (O(n) per split, so O(n log k) for k breaks). A split is kept
while its cost reduction exceeds the penalty. The default penalty is the BIC / Schwarz criterion
for a Gaussian mean shift, ``2 * sigma^2 * ln(n)`` (one mean and one location per break), with sigma
estimated robustly from the data as ``1.4826 * MAD(diff(x)) / sqrt(2)`` (insensitive to the jumps
themselves). Each break is then refined once to its best position between its neighbours.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable

import numpy as np

from veotrace.errors import UsageError

#: Fewest points in a regime (and so between two breaks).
DEFAULT_MIN_SIZE = 5
#: Multiplier of the BIC penalty 2 * sigma^2 * ln(n); raise it for fewer, surer breaks.
DEFAULT_PENALTY_SCALE = 1.0


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
    found: list[int] = []
    heap: list[tuple[float, int, int, int]] = []
    gain, t = _best_split(cs, 0, n, min_size)
    if gain > pen:
        heap.append((-gain, t, 0, n))
    while heap:
        _, t, a, b = heapq.heappop(heap)
        found.append(t)
        if on_progress is not None:
            on_progress(len(found), len(found) + len(heap))
        for lo, hi in ((a, t), (t, b)):
            gain, tt = _best_split(cs, lo, hi, min_size)
            if gain > pen:
                heapq.heappush(heap, (-gain, tt, lo, hi))
    found.sort()
    return _refine(cs, found, n, min_size)


def _refine(cs: np.ndarray, bkps: list[int], n: int, min_size: int) -> list[int]:
    """Move each break to its best position between its neighbours (one pass, left to right)."""
    out = list(bkps)
    for i in range(len(out)):
        a = out[i - 1] if i > 0 else 0
        b = out[i + 1] if i + 1 < len(out) else n
        _, t = _best_split(cs, a, b, min_size)
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
