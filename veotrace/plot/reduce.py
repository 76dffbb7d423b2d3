"""Plot layer: reduce a long series for drawing while keeping its extremes (min and max per pixel column)."""

from __future__ import annotations

import numpy as np


def minmax_indices(x: np.ndarray, y: np.ndarray, columns: int) -> np.ndarray:
    """Sorted indices of the points worth drawing of a series with increasing ``x``.

    The x range is cut into ``columns`` equal bins (one per pixel column); each bin keeps the point
    of its lowest and of its highest finite ``y``, and its first NaN (so a gap still breaks the line),
    plus the first and last points. A line through the kept points covers the same pixels' vertical
    extent as one through all of them. Series of at most ``2 * columns`` points are returned whole.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = x.size
    if n <= 2 * max(columns, 1):
        return np.arange(n)
    lo, hi = np.nanmin(x), np.nanmax(x)
    span = hi - lo
    if not np.isfinite(span) or span <= 0:
        bins = np.zeros(n, dtype=np.int64)
    else:
        bins = np.minimum(((np.nan_to_num(x, nan=lo) - lo) / span * columns).astype(np.int64), columns - 1)
    finite = np.flatnonzero(np.isfinite(y))
    order = finite[np.lexsort((y[finite], bins[finite]))]
    b = bins[order]
    first = np.flatnonzero(np.concatenate(([True], b[1:] != b[:-1]))) if b.size else np.zeros(0, np.int64)
    last = np.concatenate((first[1:], [b.size])) - 1 if b.size else first
    nan = np.flatnonzero(~np.isfinite(y))
    _, first_nan = np.unique(bins[nan], return_index=True)
    keep = np.concatenate((order[first], order[last], nan[first_nan], [0, n - 1]))
    return np.unique(keep)


def pixel_columns(size: tuple[int, int], share: float = 1.0) -> int:
    """Pixel columns of a plot area taking ``share`` of the figure width (at least 100)."""
    return max(100, int(size[0] * share))
