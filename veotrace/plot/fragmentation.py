"""Plot layer: fragmentation over time: live/reserved bytes, and each fragmentation definition per window."""

from __future__ import annotations

from typing import Any

import numpy as np

from veotrace.defaults import PLOT_MAX_DEVICES
from veotrace.frag.metrics import fragmented_when
from veotrace.plot.base import ALERT, MUTED, new_figure
from veotrace.plot.common import NS_PER_S, binary_bytes, empty, floats, largest_groups, time_unit
from veotrace.plot.reduce import minmax_indices, pixel_columns

#: Per-window fragmentation columns of FRAGMENTATION_WINDOWS and how the README names them.
DEFINITIONS = {"external_frag": "external: 1 - largest free / free (TF BFC)",
               "gmlake_frag": "1 - peak active / peak reserved (GMLake)"}


def plot_fragmentation(result: Any, *, size: tuple[int, int]):
    """Figure of a FragmentationResult: bytes per window on top, fragmentation per definition below,
    one line per device (the PLOT_MAX_DEVICES of largest peak); windows past the threshold shaded."""
    fig, (top, bottom) = new_figure(size, nrows=2, sharex=True)
    w = result.windows
    if w.num_rows == 0:
        empty(top, "no windows")
        empty(bottom, "no windows")
        return fig
    devices = w.column("device").to_numpy()
    timed = w.column("start_ns").null_count == 0
    if timed:
        start = floats(w, "start_ns")
        scale, unit = time_unit((start.max() - start.min()) / NS_PER_S)
        x_all = (start - start.min()) / NS_PER_S / scale
        bottom.set_xlabel(f"{unit} since the first window")
    else:
        x_all = floats(w, "window")
        bottom.set_xlabel("window")
    series = {c: floats(w, c) for c in ("live_bytes_peak", "reserved_bytes_peak", "internal_bytes", *DEFINITIONS)}
    peak = max(float(np.nanmax(series[c])) for c in ("live_bytes_peak", "reserved_bytes_peak")
               if w.column(c).null_count < w.num_rows)
    div, bunit = binary_bytes(peak)
    cols = pixel_columns(size)
    fragmented = np.array([bool(v) for v in w.column("fragmented").to_pylist()])
    weight = np.fmax(series["reserved_bytes_peak"], series["live_bytes_peak"])
    groups, left_out = largest_groups(devices, weight, PLOT_MAX_DEVICES)
    first = groups[0][0] if groups else None
    for dev, sel in groups:
        x = x_all[sel]
        tag = f" (device {dev})" if len(groups) + left_out > 1 else ""
        for col, label, style in (("live_bytes_peak", "live peak", "-"), ("reserved_bytes_peak", "reserved peak", "-"),
                                  ("internal_bytes", "internal (rounding)", ":")):
            y = series[col][sel] / div
            if np.isfinite(y).any():
                idx = minmax_indices(x, y, cols)
                top.plot(x[idx], y[idx], ls=style, lw=1.0, label=label + tag)
        for col, label in DEFINITIONS.items():
            y = series[col][sel]
            if np.isfinite(y).any():
                idx = minmax_indices(x, y, cols)
                bottom.plot(x[idx], y[idx], lw=1.0, label=label + tag)
        flagged = fragmented[sel]
        if flagged.any():
            bottom.scatter(x[flagged], np.ones(flagged.sum()) * 1.02, marker="|", color=ALERT, s=30,
                           label="fragmented window" if dev == first else None)
    top.set_ylabel(f"bytes ({bunit})")
    top.legend(loc="upper left", ncols=2)
    bottom.set_ylabel("fragmentation")
    bottom.set_ylim(-0.02, 1.08)
    th = result.params["threshold"]
    bottom.axhline(1 - th, color=MUTED, lw=0.8, ls="--", label=f"fragmented: {fragmented_when(th)} (--threshold {th:g})")
    bottom.legend(loc="lower left")
    end = result.end.get("total", {}) if isinstance(result.end, dict) else {}
    frag = end.get("external_frag")
    fig.suptitle("Fragmentation over time" + (f"; at the end: external {frag:.3g}" if isinstance(frag, float) else "")
                 + (f"; the {len(groups)} devices of largest peak drawn, {left_out:,} more in the data" if left_out else ""),
                 fontsize=10)
    return fig
