"""Plot layer: each finished candidate's peak reserved against its device allocations, the Pareto front
joined, the recommendation and the baselines marked."""

from __future__ import annotations

from typing import Any

from veotrace.plot.base import ALERT, DATA, MUTED, TREND, new_figure
from veotrace.plot.common import binary_bytes, empty


def plot_tune(result: Any, *, size: tuple[int, int]):
    """Figure of a TuneResult (finished candidates only: a pruned one stopped before its peak)."""
    fig, ax = new_figure(size)
    done = [r for r in result.candidates if r["status"] == "finished"]
    if not done:
        empty(ax, "no candidate ran to the end")
        return fig
    scale, unit = binary_bytes(max(r["peak_reserved_bytes"] for r in done))
    x = [r["device_allocs"] for r in done]
    y = [r["peak_reserved_bytes"] / scale for r in done]
    ax.scatter(x, y, s=18, color=MUTED, label="candidates")
    bad = [r for r in done if r.get("misbehaves")]
    if bad:
        ax.scatter([r["device_allocs"] for r in bad], [r["peak_reserved_bytes"] / scale for r in bad], s=30,
                   marker="x", color=ALERT, label="known to misbehave")
    by_id = {r["id"]: r for r in done}
    front = sorted((by_id[i] for i in result.pareto if i in by_id), key=lambda r: r["device_allocs"])
    ax.plot([r["device_allocs"] for r in front], [r["peak_reserved_bytes"] / scale for r in front], "-o", color=DATA,
            ms=5, label="Pareto front")
    for label, i in result.params.get("baselines", {}).items():
        if i in by_id:
            ax.scatter([by_id[i]["device_allocs"]], [by_id[i]["peak_reserved_bytes"] / scale], s=70, marker="s",
                       facecolors="none", edgecolors=MUTED)
            ax.annotate(label, (by_id[i]["device_allocs"], by_id[i]["peak_reserved_bytes"] / scale), fontsize=8,
                        xytext=(6, -10), textcoords="offset points")
    rec = result.recommendation
    if rec.get("id") in by_id:
        r = by_id[rec["id"]]
        ax.scatter([r["device_allocs"]], [r["peak_reserved_bytes"] / scale], s=140, marker="*", color=TREND,
                   label=("kept (in use): " if rec.get("in_use") or rec.get("keep") else "recommended: ") + (rec["conf"] or "PyTorch defaults"),
                   zorder=5)
    ax.set_xlabel("device allocations (cudaMalloc / map)")
    ax.set_ylabel(f"peak reserved ({unit})")
    ax.set_title("tune: candidates by peak reserved and device allocations")
    ax.legend(loc="best", fontsize=8)
    return fig
