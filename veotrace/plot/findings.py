"""Plot layer: the findings on one timeline, one lane per input, each finding marked where it starts
(a bar to where it ends), coloured by severity and numbered by rank."""

from __future__ import annotations

from typing import Any

from veotrace.plot.base import ALERT, MUTED, TREND, new_figure
from veotrace.plot.common import empty, time_unit

_COLOUR = {"high": ALERT, "medium": TREND, "low": MUTED}


def plot_findings(result: Any, *, size: tuple[int, int]):
    """Figure of a DiagnoseResult: the findings on the common time axis (those on a launch or frame axis,
    or of the whole run, are listed in the table, not drawn)."""
    fig, ax = new_figure(size)
    timed = [(i + 1, f) for i, f in enumerate(result.findings) if f.axis == "time" and f.start is not None]
    if not timed:
        empty(ax, "no finding on the time axis")
        return fig
    lanes = list(dict.fromkeys(f.source for _, f in timed))
    span = max(max(f.start, f.end or f.start) for _, f in timed) or 1.0
    scale, unit = time_unit(span)
    for n, f in timed:
        y = lanes.index(f.source)
        x0 = f.start / scale
        if f.end is not None and f.end > f.start:
            ax.plot([x0, f.end / scale], [y, y], color=_COLOUR[f.severity], lw=6, alpha=0.35, solid_capstyle="butt")
        ax.scatter([x0], [y], s=60, color=_COLOUR[f.severity], zorder=3)
        ax.annotate(str(n), (x0, y), xytext=(4, 6), textcoords="offset points", fontsize=8)
    ax.set_yticks(range(len(lanes)), [lane if len(lane) <= 40 else "..." + lane[-37:] for lane in lanes])
    ax.set_ylim(-0.6, len(lanes) - 0.4)
    ax.set_xlabel(f"time since the earliest input's first event ({unit})")
    ax.set_title("findings by time (number: rank; red high, orange medium, grey low)")
    return fig
