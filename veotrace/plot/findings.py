"""Plot layer: the findings on one timeline, one lane per source and analysis: the analysis' own series
drawn faintly in its lane (``findings.lanes``: entropy, fragmentation, bursts), each finding marked on
its analysis' lane where it starts (a bar to where it ends), coloured by severity and numbered by rank."""

from __future__ import annotations

from typing import Any

import numpy as np

from veotrace.plot.base import ALERT, MUTED, TREND, new_figure
from veotrace.plot.common import empty, time_unit

_COLOUR = {"high": ALERT, "medium": TREND, "low": MUTED, "note": MUTED}


def _label(source: str, analysis: str) -> str:
    name = source if len(source) <= 32 else "..." + source[-29:]
    return f"{name} · {analysis}"


def plot_findings(result: Any, *, size: tuple[int, int]):
    """Figure of a DiagnoseResult: the findings on the common time axis (those on a launch or frame axis,
    or of the whole run, are listed in the table, not drawn), over each timed analysis' series."""
    fig, ax = new_figure(size)
    timed = [(i + 1, f) for i, f in enumerate(result.findings) if f.axis == "time" and f.start is not None]
    lanes = list(getattr(result, "lanes", []) or [])
    if not timed and not lanes:
        empty(ax, "no finding on the time axis")
        return fig
    keys = [(lane["source"], lane["command"]) for lane in lanes]
    names = [_label(lane["source"], lane["analysis"]) for lane in lanes]
    for _, f in timed:  # a finding of an analysis without a series gets a lane of its own
        if (f.source, f.command) not in keys:
            keys.append((f.source, f.command))
            names.append(_label(f.source, f.command.split()[1] if len(f.command.split()) > 1 else f.kind))
    ends = [max(f.start, f.end or f.start) for _, f in timed] + [max(lane["t_s"]) for lane in lanes]
    scale, unit = time_unit(max(ends) or 1.0)
    for y, lane in enumerate(lanes):  # the series, scaled into its lane's band
        t, v = np.asarray(lane["t_s"], float) / scale, np.asarray(lane["value"], float)
        lo, hi = float(v.min()), float(v.max())
        band = (v - lo) / (hi - lo) if hi > lo else np.full(v.size, 0.5)
        style = {"lw": 0, "marker": "|", "ms": 6} if lane["analysis"] == "bursts" else {"lw": 1}
        ax.plot(t, y + 0.35 - 0.7 * band, color=MUTED, alpha=0.6, **style)  # the axis runs downwards
        ax.annotate(f"{lane['label']}: {lo:.3g}..{hi:.3g}", (0.005, y - 0.4), xycoords=("axes fraction", "data"),
                    fontsize=6, color=MUTED, va="bottom")
    for n, f in timed:
        y = keys.index((f.source, f.command))
        x0 = f.start / scale
        if f.end is not None and f.end > f.start:
            ax.plot([x0, f.end / scale], [y, y], color=_COLOUR[f.severity], lw=6, alpha=0.35, solid_capstyle="butt")
        ax.scatter([x0], [y], s=60, color=_COLOUR[f.severity], zorder=3)
        ax.annotate(str(n), (x0, y), xytext=(4, 6), textcoords="offset points", fontsize=8)
    ax.set_yticks(range(len(names)), names)
    ax.set_ylim(len(names) - 0.4, -0.6)  # the first lane on top
    ax.set_xlabel(f"time since the earliest input's first event ({unit})")
    ax.set_title("findings by time, a lane per input and analysis (number: rank; red high, orange medium, grey low)")
    return fig
