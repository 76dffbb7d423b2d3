"""Plot layer: reserved bytes over time for each simulated allocator policy, against the bytes allocated."""

from __future__ import annotations

from typing import Any

import numpy as np

from veotrace.defaults import PLOT_MAX_DEVICES
from veotrace.plot.base import ALERT, new_figure
from veotrace.plot.common import NS_PER_S, binary_bytes, empty, floats, largest_groups, time_unit
from veotrace.plot.reduce import minmax_indices, pixel_columns


def plot_simulate(result: Any, *, size: tuple[int, int]):
    """Figure of a SimulateResult: one reserved-bytes line per policy (all devices summed per window is
    not assumed: each device is its own line, for the PLOT_MAX_DEVICES of largest peak), the allocated bytes
    dashed, first OOM marked."""
    fig, ax = new_figure(size)
    w = result.windows
    if w.num_rows == 0:
        empty(ax, "no windows")
        return fig
    policy = np.array(w.column("policy").cast("string").to_pylist()) if hasattr(w.column("policy"), "cast") \
        else np.array(w.column("policy").to_pylist())
    device = w.column("device").to_numpy()
    timed = w.column("start_ns").null_count == 0
    start = floats(w, "start_ns") if timed else floats(w, "window")
    if timed:
        scale, unit = time_unit((start.max() - start.min()) / NS_PER_S)
        x_all = (start - start.min()) / NS_PER_S / scale
        ax.set_xlabel(f"{unit} since the first window")
    else:
        x_all, scale = start, 1.0
        ax.set_xlabel("window")
    reserved = floats(w, "reserved_bytes_peak")
    div, bunit = binary_bytes(float(np.nanmax(reserved)) if np.isfinite(reserved).any() else 0.0)
    cols = pixel_columns(size)
    groups, left_out = largest_groups(device, reserved, PLOT_MAX_DEVICES)
    multi = len(groups) + left_out > 1
    order = [p["policy"] for p in result.whatif] or list(dict.fromkeys(policy.tolist()))
    rank = {p["policy"]: p for p in result.whatif}
    for name in order:
        for dev, rows in groups:
            sel = rows[policy[rows] == name]
            if not sel.size:
                continue
            x, y = x_all[sel], reserved[sel] / div
            idx = minmax_indices(x, y, cols)
            r = rank.get(name, {})
            label = f"{name}" + (f" (x{r['vs_ideal']:.2f} of ideal)" if r.get("vs_ideal") else "") + (f", device {dev}" if multi else "")
            ax.plot(x[idx], y[idx], lw=1.8 if name == "ideal" else 1.0, ls="--" if name == "ideal" else "-", label=label)
    oom = result.first_oom
    if oom and timed and oom.get("ts_ns") is not None:
        ax.axvline((oom["ts_ns"] - start.min()) / NS_PER_S / scale, color=ALERT, lw=1.2)
    ax.set_ylabel(f"reserved bytes, peak per window ({bunit})")
    ax.set_title("Reserved memory per allocator policy (replayed)" + (f"; first OOM: {oom['policy']}" if oom else "")
                 + (f"; the {len(groups)} devices of largest peak drawn, {left_out:,} more in the data" if left_out else ""))
    ax.legend(loc="upper left", ncols=2)
    return fig
