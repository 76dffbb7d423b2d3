"""Plot layer: an L2 metric per launch for each kernel, breakpoints marked, each regime's mean drawn."""

from __future__ import annotations

from typing import Any

import numpy as np

from veotrace.plot.base import ALERT, DATA, TREND, new_figure
from veotrace.plot.common import empty, fmt
from veotrace.plot.reduce import minmax_indices, pixel_columns

#: Kernels drawn at most (those with breakpoints first, then by number of launches).
MAX_PANELS = 6
NAME_CHARS = 70


def plot_l2(result: Any, *, size: tuple[int, int], series: dict | None = None, table: Any = None):
    """Figure of an L2Result: one panel per kernel (up to MAX_PANELS).

    Args:
        series: kernel -> ``analysis.l2.Series`` of the metric (the values the analysis saw); when
            absent it is taken from ``table`` (the NCU_METRICS input) with ``l2.metric_series``.
    """
    if series is None:
        from veotrace.analysis.l2.l2 import metric_series

        series = metric_series(table, result.params["metric"]) if table is not None else {}
    by_kernel: dict[str, list[dict]] = {}
    for row in result.breakpoints.to_pylist():
        by_kernel.setdefault(row["kernel"], []).append(row)
    kernels = sorted((k for k in result.kernels if k["kernel"] in series),
                     key=lambda k: (-len(by_kernel.get(k["kernel"], ())), -k["launches"]))
    shown = kernels[:MAX_PANELS]
    fig, axes = new_figure(size, nrows=max(len(shown), 1), sharex=False)
    axes = np.atleast_1d(axes)
    metric = result.params["metric"]
    hidden = len(kernels) - len(shown)
    fig.suptitle(f"{metric} per launch: {result.breakpoints.num_rows} breakpoint(s) in {len(kernels)} kernel(s)"
                 + (f"; {hidden} more kernel(s) not drawn" if hidden else ""), fontsize=10)
    if not shown:
        empty(axes[0], "no kernel series")
        return fig
    for ax, info in zip(axes, shown):
        _panel(ax, info, series[info["kernel"]].values, sorted(by_kernel.get(info["kernel"], ()),
                                                               key=lambda r: r["launch_index"]), size)
    axes[-1].set_xlabel("launch (position among the kernel's launches)")
    return fig


def _panel(ax, info: dict, values: np.ndarray, breaks: list[dict], size) -> None:
    x = np.arange(values.size, dtype=np.float64)
    idx = minmax_indices(x, values, pixel_columns(size))
    ax.plot(x[idx], values[idx], color=DATA, lw=0.8, marker="." if values.size <= 400 else None, ms=3)
    name = info["kernel"] if len(info["kernel"]) <= NAME_CHARS else info["kernel"][: NAME_CHARS - 1] + "…"
    note = "" if info.get("analysed", True) else f" ({info.get('note', 'not analysed')})"
    ax.set_title(f"{name}: {info['launches']:,} launches, {len(breaks)} breakpoint(s){note}", loc="left", fontsize=9)
    edges = [0] + [r["launch_index"] for r in breaks] + [values.size]
    for i, r in enumerate(breaks):
        ax.axvline(r["launch_index"] - 0.5, color=ALERT, lw=1.2, ls="--")
        ax.annotate(f"{fmt(r['mean_before'])} → {fmt(r['mean_after'])} (z {fmt(r['z_score'], 2)})",
                    (r["launch_index"] - 0.5, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -10),
                    textcoords="offset points", color=ALERT, fontsize=7)
        ax.hlines(r["mean_before"], edges[i] - 0.5, edges[i + 1] - 0.5, color=TREND, lw=2)
        if i == len(breaks) - 1:
            ax.hlines(r["mean_after"], edges[i + 1] - 0.5, edges[i + 2] - 0.5, color=TREND, lw=2)
    if not breaks and info.get("mean") is not None:
        ax.hlines(info["mean"], -0.5, values.size - 0.5, color=TREND, lw=2)
