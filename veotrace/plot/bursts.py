"""Plot layer: bursts on a timeline (events per burst, extremes kept) and the distribution of burst sizes."""

from __future__ import annotations

from typing import Any

import numpy as np

from veotrace.plot.base import ALERT, DATA, MUTED, TREND, new_figure
from veotrace.plot.common import NS_PER_S, empty, fmt, log_axis, time_unit
from veotrace.plot.reduce import minmax_indices, pixel_columns


def plot_bursts(result: Any, *, size: tuple[int, int]):
    """Figure of a BurstResult: a timeline of bursts (height = events) over a histogram of burst sizes."""
    fig, (top, bottom) = new_figure(size, nrows=2, height_ratios=[3, 2])
    s, p = result.summary, result.params
    what = "kernel launches" if p.get("events") == "kernels" else "events"
    share = s.get("share_in_bursts")
    fig.suptitle(f"{s['bursts']:,} bursts; {fmt(100 * share if share is not None else None)}% of counted {what} in bursts "
                 f"(gap < {p['gap_ms']:g} ms, at least {p['min_events']} {what})", fontsize=10)
    b = result.bursts
    if b.num_rows == 0:
        empty(top, "no bursts")
        empty(bottom, "no bursts")
        return fig
    start = b.column("start_ns").to_numpy().astype(np.float64)
    count = b.column("events").to_numpy().astype(np.float64)
    t0 = float(s["first_ns"]) if s.get("first_ns") is not None else start.min()
    scale, unit = time_unit((max(start.max(), float(s.get("last_ns") or 0)) - t0) / NS_PER_S)
    x = (start - t0) / NS_PER_S / scale
    idx = minmax_indices(x, count, pixel_columns(size))
    top.vlines(x[idx], 0, count[idx], color=DATA, lw=0.8)
    top.set_xlabel(f"{unit} since the first event")
    top.set_ylabel(f"{what} per burst")
    if count.max() >= 20 * max(count.min(), 1):
        top.set_yscale("log")
        log_axis(top.yaxis)
        top.set_ylim(bottom=max(count.min(), 1) * 0.8)
    else:
        top.set_ylim(bottom=0)
    _sizes(bottom, count, s.get("burst_events") or {}, what)
    return fig


def _sizes(ax, count: np.ndarray, dist: dict, what: str) -> None:
    lo, hi = count.min(), count.max()
    if hi >= 20 * max(lo, 1):
        ax.hist(count, bins=np.unique(np.round(np.geomspace(lo, hi + 1, 40))), color=DATA, alpha=0.8)
        ax.set_xscale("log")
        log_axis(ax.xaxis)
    else:
        ax.hist(count, bins=np.arange(lo, hi + 2) - 0.5 if hi - lo < 60 else 40, color=DATA, alpha=0.8)
    heights = np.histogram(count, bins=40)[0]
    if heights.max() >= 50:
        ax.set_yscale("log")
        log_axis(ax.yaxis)
    ax.set_xlabel(f"{what} per burst")
    ax.set_ylabel("bursts")
    for key, colour in (("median", MUTED), ("p95", TREND), ("p99", ALERT)):
        v = dist.get(key)
        if v is not None:
            ax.axvline(v, color=colour, lw=1.2, ls="--", label=f"{key} {fmt(v)}")
    ax.legend(loc="upper left")
