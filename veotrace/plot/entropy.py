"""Plot layer: entropy per window over time, with the trend line and each segment's own fit and slope."""

from __future__ import annotations

from typing import Any

import numpy as np

from veotrace.plot.base import DATA, MUTED, SEGMENT, TREND, new_figure
from veotrace.plot.common import empty, floats, fmt, time_unit
from veotrace.plot.reduce import minmax_indices, pixel_columns


def plot_entropy(result: Any, *, size: tuple[int, int]):
    """Figure of an EntropyResult: H per window (extremes kept), the trend, segment fits and slopes.

    The time axis uses the unit that fits the span (ms or seconds for a snapshot, hours or days for a
    long log); the slopes are in the one unit every entropy output uses (``slope_display``: bits/second
    on a snapshot, bits/hour on a long log), rescaled from the analysis' own numbers per hour.
    """
    fig, ax = new_figure(size)
    w = result.windows
    h = floats(w, "entropy_bits")
    timed = result.trend.get("x", "hours") == "hours" and w.num_rows and w.column("hours").null_count < w.num_rows
    hours = floats(w, "hours") if timed else floats(w, "window")
    secs, unit = time_unit(float(np.nanmax(hours)) * 3600) if timed and w.num_rows else (3600.0, "windows")
    to_x = 3600.0 / secs if timed else 1.0  # hours -> axis unit
    x = hours * to_x
    d = result.slope_display()
    per_hour = d.get("per_unit", 1.0)  # hours (or windows) per unit of the slope
    p = result.params
    window = f"{p['window_s']:g} s windows" if p.get("window_s") else f"windows of {p.get('window_events')} events"
    ax.set_title(f"Size-class entropy over time ({window}, {w.num_rows:,} windows)")
    ax.set_xlabel(f"{unit} since the first event" if timed else "window")
    ax.set_ylabel("entropy H (bits)")
    if not np.isfinite(h).any():
        empty(ax, "no window holds a counted event")
        return fig
    idx = minmax_indices(x, h, pixel_columns(size))
    ax.plot(x[idx], h[idx], color=DATA, lw=0.7, label="H per window" + (" (min/max per pixel)" if idx.size < x.size else ""))
    t = result.trend
    if t.get("slope") is not None:
        ends = np.array([np.nanmin(hours), np.nanmax(hours)])
        ax.plot(ends * to_x, t["intercept"] + t["slope"] * ends, color=TREND, lw=1.6, ls="--",
                label=f"trend {d['slope']:+.3g} {d['unit']} (R² {fmt(t.get('r_squared'))}, "
                      f"Kendall τ {fmt(t['kendall'].get('tau'))}, p {fmt(t['kendall'].get('p_value'), 2)})")
    _segments(ax, result.segments, x, h, d["unit"], per_hour, to_x)
    ax.legend(loc="upper left")
    return fig


def _segments(ax, segments: list[dict], x: np.ndarray, h: np.ndarray, unit: str, per_hour: float,
              to_x: float) -> None:
    """Each segment's least-squares line (through its mean point) and its slope in ``unit`` (``per_hour``
    hours per unit); boundaries dotted."""
    ok = np.isfinite(h) & np.isfinite(x)
    label = "segment fits"
    for i, seg in enumerate(segments):
        lo, hi = seg["start_hours"] * to_x, seg["end_hours"] * to_x
        if i:
            ax.axvline(lo, color=MUTED, lw=0.8, ls=":")
        last = i == len(segments) - 1
        sel = ok & (x >= lo) & ((x <= hi) if last else (x < hi))
        slope, mean = seg.get("slope_bits_per_hour"), seg.get("mean_bits")
        if slope is None or mean is None or not sel.any():
            continue
        shown = slope * per_hour
        slope = slope / to_x
        xm = float(x[sel].mean())
        xs = np.array([lo, hi])
        ax.plot(xs, mean + slope * (xs - xm), color=SEGMENT, lw=2.2, label=label)
        label = None
        ax.annotate(f"{shown:+.3g} {unit}", (float(xs.mean()), mean + slope * (float(xs.mean()) - xm)),
                    textcoords="offset points", xytext=(0, 10), ha="center", color=SEGMENT, fontsize=8,
                    fontweight="bold", bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": SEGMENT, "alpha": 0.85})
