"""Plot layer: the view's lanes as a still picture (each lane's coarsest summary level, stacked by group)."""

from __future__ import annotations

from typing import Any

import numpy as np

from veotrace.plot.base import new_figure
from veotrace.plot.common import binary_bytes, empty

#: Lanes drawn; the page holds every one.
MAX_PANELS = 4


def plot_view(result: Any, *, size: tuple[int, int]):
    """Figure of a ViewResult: per lane (at most MAX_PANELS) the live bytes stacked by its groups at the
    states of its coarsest level, the reserved bytes over them, and the peaks marked."""
    lanes = [lane for lane in result.lanes if lane.x.size > 1][:MAX_PANELS]
    fig, axes = new_figure(size, nrows=max(1, len(lanes)), ncols=1)
    axes = np.atleast_1d(axes)
    if not lanes:
        empty(axes[0], "no trace entries: nothing over time")
        return fig
    for ax, lane in zip(axes, lanes):
        keep = lane.level == 0
        x = lane.x[keep]
        ys = lane.bytes[:, keep].astype(float)
        top = float(max(ys.sum(axis=0).max(), lane.reserved[keep].max() if lane.reserved is not None else 0))
        div, unit = binary_bytes(top)
        names = [g.get("label") or g["name"] for g in lane.groups]  # file.py:line function first
        labels = [n if len(n) <= 60 else n[:57] + "..." for n in names]
        ax.stackplot(x, *(ys / div), labels=labels, alpha=0.85, rasterized=True)
        if lane.reserved is not None:
            ax.plot(x, lane.reserved[keep] / div, color="black", lw=1, ls="--", label="reserved")
        for p in lane.peaks:
            ax.axvline(p["x"], color="black", lw=0.8)
        ax.set_ylabel(f"live bytes ({unit})")
        ax.set_xlabel("seconds since the first event" if lane.x_unit == "s" else "trace entry")
        ax.set_title(lane.title, fontsize=10)
        ax.legend(loc="upper left", fontsize=7)
    return fig
