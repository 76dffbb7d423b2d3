"""Trend of a series over time: least squares, Theil-Sen, Kendall's tau (Mann-Kendall), per-segment fits.

The statistics come from ``rankstats`` (numpy, same formulas as scipy.stats, no 1.4 s import).
Kendall's tau ranks y rounded to RANK_DECIMALS decimals: equal entropies computed from permuted
counts differ in their last bits, and unrounded they would break ties that are really there.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from veotrace.analysis.rankstats import kendall_tau, linregress, theil_sen
from veotrace.analysis.timescale import duration_unit

#: Above this many points Theil-Sen (O(n^2) pairs) is computed on a seeded sample of pairs.
THEIL_SEN_MAX_POINTS = 4000
_THEIL_SEN_PAIRS = 4_000_000
#: Kendall's tau ranks y rounded to this many decimals (1e-12: far below any real entropy difference,
#: far above the last-bit noise of float sums taken in different orders).
RANK_DECIMALS = 12


def _finite(x: float | None) -> float | None:
    return None if x is None or not np.isfinite(x) else float(x)


def fit_trend(x: np.ndarray, y: np.ndarray) -> dict:
    """Linear trend of ``y`` against ``x`` (y null/NaN points left out).

    Returns:
        ``{"n", "slope", "intercept", "r_squared", "theil_sen": {"slope", "low", "high", "approximate"},
        "kendall": {"tau", "p_value"}}``; statistics that need 3+ points (or a varying x/y) are None.
        Kendall's tau and its p-value are those of y rounded to RANK_DECIMALS decimals (ties kept).
    """
    ok = np.isfinite(y) & np.isfinite(x)
    x, y = x[ok], y[ok]
    out: dict = {"n": int(x.size), "slope": None, "intercept": None, "r_squared": None,
                 "theil_sen": {"slope": None, "low": None, "high": None, "approximate": False},
                 "kendall": {"tau": None, "p_value": None}}
    if x.size < 3 or np.ptp(x) == 0:
        return out
    slope, intercept, r = linregress(x, y)
    out["slope"], out["intercept"] = _finite(slope), _finite(intercept)
    out["r_squared"] = _finite(r**2) if np.ptp(y) > 0 else None
    out["theil_sen"] = _theil_sen(x, y)
    y_ranked = np.round(y, RANK_DECIMALS)
    if np.ptp(y_ranked) > 0:
        tau, p = kendall_tau(x, y_ranked)
        out["kendall"] = {"tau": _finite(tau), "p_value": _finite(p)}
    return out


def _theil_sen(x: np.ndarray, y: np.ndarray) -> dict:
    if x.size <= THEIL_SEN_MAX_POINTS:
        slope, low, high = theil_sen(x, y)
        return {"slope": _finite(slope), "low": _finite(low), "high": _finite(high), "approximate": False}
    # Median of slopes over a seeded random sample of pairs: same estimator, bounded cost.
    rng = np.random.default_rng(0)
    i = rng.integers(0, x.size, _THEIL_SEN_PAIRS)
    j = rng.integers(0, x.size, _THEIL_SEN_PAIRS)
    keep = x[i] != x[j]
    slopes = (y[j][keep] - y[i][keep]) / (x[j][keep] - x[i][keep])
    lo, med, hi = np.percentile(slopes, [2.5, 50, 97.5])
    return {"slope": float(med), "low": float(lo), "high": float(hi), "approximate": True}


def segment_trends(x: np.ndarray, y: np.ndarray, boundaries: Sequence[float], *, x_unit: str = "hours") -> list[dict]:
    """Per-segment mean, slope and R^2 of ``y`` split at ``boundaries`` of ``x`` (e.g. hours 48, 120).

    Segment i covers [b_i, b_{i+1}) with b_0 = min(x) and the last one closed at max(x). Its
    ``label`` comes from the requested bounds ("0-48 h", "48-120 h", "120 h-end"); a segment that
    starts beyond max(x) holds no windows.
    """
    if x.size == 0:
        return []
    bounds = [float(b) for b in boundaries]
    xmin, xmax = float(np.nanmin(x)), float(np.nanmax(x))
    edges = [xmin] + bounds + [max(xmax, bounds[-1]) if bounds else xmax]
    labels = segment_labels(bounds) if x_unit == "hours" else segment_labels(bounds, unit=x_unit)
    out = []
    for i in range(len(edges) - 1):
        lo, hi = edges[i], edges[i + 1]
        sel = (x >= lo) & ((x < hi) if i < len(edges) - 2 else (x <= hi))
        ys = y[sel]
        fin = np.isfinite(ys)
        fit = fit_trend(x[sel], ys)
        out.append({"label": labels[i], "start_hours": lo, "end_hours": hi, "windows": int(sel.sum()),
                    "mean_bits": float(ys[fin].mean()) if fin.any() else None,
                    "slope_bits_per_hour": fit["slope"], "r_squared": fit["r_squared"]})
    return out


def segment_labels(bounds_hours: Sequence[float], *, unit: str | None = None) -> list[str]:
    """Labels of the segments split at ``bounds_hours``, in one unit that fits the largest bound.

    ``unit`` other than None labels plain x values in that unit instead (``"window"``: window numbers).
    """
    if not bounds_hours:
        return ["all"]
    if unit is not None:
        edges = [0.0, *bounds_hours]
        name = f" {unit}s"
        return [f"{edges[i]:g}-{edges[i + 1]:g}{name}" for i in range(len(edges) - 1)] + [f"{edges[-1]:g}{name}-end"]
    unit, scale = duration_unit(max(bounds_hours) * 3600)

    def num(h: float) -> str:
        return f"{h * 3600 / scale:g}"

    edges = [0.0, *bounds_hours]
    labels = [f"{num(edges[i])}-{num(edges[i + 1])} {unit}" for i in range(len(edges) - 1)]
    return labels + [f"{num(edges[-1])} {unit}-end"]
