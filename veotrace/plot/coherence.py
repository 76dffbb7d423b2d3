"""Plot layer: each per-frame metric against its threshold, frames where its sign fired, and the onset."""

from __future__ import annotations

from typing import Any

import numpy as np

from veotrace.plot.base import ALERT, DATA, MUTED, TREND, new_figure
from veotrace.plot.common import empty, floats
from veotrace.plot.reduce import minmax_indices, pixel_columns

LABELS = {"id_drift": "ID match rate", "flow_jump": "mean flow (px)", "entropy_jump": "CLIP entropy (bits)",
          "score_collapse": "coherence score"}


def plot_coherence(result: Any, *, size: tuple[int, int]):
    """Figure of a CoherenceResult: one panel per available sign, then the rule per frame; onset marked."""
    signs = [s for s, d in result.signs.items() if d.get("available")]
    fig, axes = new_figure(size, nrows=len(signs) + 1, sharex=True,
                           height_ratios=[3] * len(signs) + [1])
    axes = np.atleast_1d(axes)
    flags = result.flags
    frame = floats(flags, "frame")
    onset = result.onset_frame
    head = (f"collapse onset at frame {onset} ({', '.join(result.onset_signs)})" if onset is not None
            else "no collapse onset")
    fig.suptitle(f"{head}; rule {result.rule}, held {result.persist} frame(s); {result.n_frames:,} frames", fontsize=10)
    for ax, sign in zip(axes, signs):
        d = result.signs[sign]
        v = floats(flags, d["metric"])
        idx = minmax_indices(frame, v, pixel_columns(size))
        ax.plot(frame[idx], v[idx], color=DATA, lw=0.9, marker="." if frame.size <= 300 else None, ms=3)
        ax.axhline(d["threshold"], color=TREND, lw=1.2, ls="--",
                   label=f"fires {d['fires_when']} {d['threshold']:g}")
        fired = np.array([bool(b) for b in flags.column(sign).to_pylist()])
        if fired.any():
            _spans(ax, frame, fired, 0.0, 1.0, color=ALERT, alpha=0.15, label=f"{sign}: {d['count']} frame(s)")
        ax.set_ylabel(LABELS.get(sign, d["metric"]))
        ax.legend(loc="upper left")
    strip = axes[-1]
    holds = np.asarray(flags.column("rule_holds").to_numpy(zero_copy_only=False), dtype=bool)
    _spans(strip, frame, holds, 0.1, 0.8, color=MUTED, alpha=0.6)
    strip.set_yticks([])
    strip.set_ylabel("rule")
    strip.set_xlabel(f"frame ({result.frame_source})")
    if not signs:
        empty(axes[0], "no sign metric in the table")
    if onset is not None:
        for ax in axes:
            ax.axvline(onset, color=ALERT, lw=1.5)
        axes[0].annotate(f"onset {onset}", (onset, 1.0), xycoords=("data", "axes fraction"), xytext=(4, -12),
                         textcoords="offset points", color=ALERT, fontweight="bold")
    return fig


def _spans(ax, frame: np.ndarray, on: np.ndarray, y0: float, height: float, **kw) -> None:
    """Shade the frames where ``on`` holds, one bar per run of consecutive rows (half a frame each side)."""
    edges = np.diff(np.concatenate(([0], on.astype(np.int8), [0])))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1) - 1
    bars = [(frame[s] - 0.5, frame[e] - frame[s] + 1.0) for s, e in zip(starts, ends)]
    if bars:
        ax.broken_barh(bars, (y0, height), transform=ax.get_xaxis_transform(), lw=0, **kw)
