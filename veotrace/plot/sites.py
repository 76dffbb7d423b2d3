"""Plot layer: live bytes over the trace stacked by the top allocation sites, per device, phases as bands."""

from __future__ import annotations

from typing import Any

import numpy as np

from veotrace.plot.base import MUTED, new_figure
from veotrace.plot.common import binary_bytes, empty, time_unit

#: Devices drawn (the largest peaks); the JSON holds every one.
MAX_PANELS = 4


def plot_sites(result: Any, *, size: tuple[int, int]):
    """Figure of a SitesResult: per device (at most MAX_PANELS, largest peak first), live bytes stacked by
    the sites that hold the most at its peak (the rest as one band), and annotation ranges as bands."""
    devs = sorted(result.devices.items(), key=lambda kv: -kv[1]["peaks"]["allocated"]["bytes"])
    shown = [kv for kv in devs if kv[1]["timeline"]["x"]][:MAX_PANELS]
    fig, axes = new_figure(size, nrows=max(1, len(shown)), ncols=1)
    axes = np.atleast_1d(axes)
    if not shown:
        empty(axes[0], "the snapshot holds no trace: nothing over time (see the end state in the table)")
        return fig
    timed = all(dev["timeline"]["x_unit"] == "s" for _, dev in shown)
    span = max(max(dev["timeline"]["x"]) for _, dev in shown)
    scale, tname = time_unit(float(span)) if timed else (1.0, "entry")  # one time unit for every panel
    for ax, (d, dev) in zip(axes, shown):
        tl = dev["timeline"]
        x = np.asarray(tl["x"], dtype=float)
        ys = [np.asarray(v, dtype=float) for v in tl["sites"].values()]
        div, unit = binary_bytes(float(np.max(np.sum(ys, axis=0))) if ys else 0.0)
        labels = [_short(s) for s in tl["sites"]]
        ax.stackplot(x / scale, *[y / div for y in ys], labels=labels, alpha=0.85, step="post", rasterized=True)
        for r in dev.get("ranges") or []:
            ax.axvspan(r["start_s"] / scale, r["end_s"] / scale, color=MUTED, alpha=0.12, lw=0)
        ax.set_ylabel(f"live bytes ({unit})")
        ax.set_title(f"Device {d}: live bytes by allocation site" + ("; bands: record_function ranges" if dev.get("ranges") else ""),
                     fontsize=10)
        ax.set_xlabel(f"{tname} since the first event" if timed else "trace entry")
        ax.legend(loc="upper left", fontsize=7)
    if len(devs) > len(shown):
        fig.suptitle(f"{len(shown)} of {len(devs)} devices (largest peaks); the JSON holds every one", fontsize=9)
    return fig


def _short(site: str, width: int = 60) -> str:
    return site if len(site) <= width else "..." + site[-(width - 3):]
