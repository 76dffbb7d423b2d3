"""Plot layer: two runs on one axis, a panel per series of the diff (entropy, live and reserved peaks, fragmentation)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from veotrace.plot.base import DATA, TREND, new_figure
from veotrace.plot.common import binary_bytes, empty
from veotrace.plot.reduce import minmax_indices, pixel_columns

PANELS = (("entropy_bits", "H (bits)"), ("live_bytes_peak", "live peak"), ("reserved_bytes_peak", "reserved peak"),
          ("external_frag", "ext. frag"))
X_LABEL = {"time": "seconds since the run's first event", "step": "steps since the first step",
           "events": "events up to the window's end"}
COLOURS = {"before": DATA, "after": TREND}


def plot_diff(result: Any, *, size: tuple[int, int]):
    """Figure of a DiffResult: BEFORE and AFTER of each series on one axis (devices as line styles)."""
    rows = result.series.to_pylist()
    shown = [(m, label) for m, label in PANELS if any(r["metric"] == m for r in rows)] or [PANELS[0]]
    fig, axes = new_figure(size, nrows=len(shown), sharex=True)
    axes = np.atleast_1d(axes)
    names = [Path(str(m.side.paths[0])).name for m in (result.before, result.after)]
    fig.suptitle(f"BEFORE {names[0]} vs AFTER {names[1]}: entropy per window; per device the windows' live and "
                 "reserved peaks and external fragmentation", fontsize=10)
    styles = ("-", "--", ":", "-.")
    for ax, (metric, label) in zip(axes, shown):
        mine = [r for r in rows if r["metric"] == metric and r["x"] is not None and r["value"] is not None]
        if not mine:
            empty(ax, "neither run has this series")
            continue
        scale, unit = binary_bytes(max(r["value"] for r in mine)) if metric.endswith("bytes_peak") else (1.0, "")
        devices = sorted({r["device"] for r in mine}, key=lambda d: -1 if d is None else d)
        for i, device in enumerate(devices):
            for side in ("before", "after"):
                pts = sorted((r["x"], r["value"]) for r in mine if r["side"] == side and r["device"] == device)
                if not pts:
                    continue
                x, y = (np.array(v, np.float64) for v in zip(*pts))
                idx = minmax_indices(x, y, pixel_columns(size))
                ax.plot(x[idx], y[idx] / scale, color=COLOURS[side], ls=styles[i % len(styles)], lw=0.8,
                        label=side.upper() + ("" if device is None else f" device {device}"))
        ax.set_ylabel(label + (f" ({unit})" if unit else ""))
        ax.legend(loc="upper left")
    axes[-1].set_xlabel(X_LABEL[result.align])
    return fig
