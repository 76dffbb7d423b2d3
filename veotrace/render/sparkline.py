"""Render layer: one-line sparklines of a series for terminal summaries (the entropy trend at a glance)."""

from __future__ import annotations

from typing import Any

import numpy as np
from rich.console import Console
from rich.text import Text

#: Eight block heights, lowest first.
BLOCKS = "▁▂▃▄▅▆▇█"
#: Characters of the entropy sparkline (each is the mean of its share of the windows).
WIDTH = 60


def spark(values: Any, width: int = WIDTH) -> str:
    """The series as ``width`` block characters (fewer for shorter series), each the mean of an equal
    share of the points, scaled from the lowest to the highest of those means; a share with no finite
    value is a space."""
    return spark_range(values, width)[0]


def spark_range(values: Any, width: int = WIDTH) -> tuple[str, float | None, float | None]:
    """The sparkline of ``values`` and the means its lowest and highest blocks stand for."""
    y = np.asarray(values, dtype=np.float64)
    if y.size == 0:
        return "", None, None
    edges = np.linspace(0, y.size, min(width, y.size) + 1).round().astype(np.int64)
    means = np.full(edges.size - 1, np.nan)
    for i in range(means.size):
        part = y[edges[i]:edges[i + 1]]
        part = part[np.isfinite(part)]
        if part.size:
            means[i] = part.mean()
    ok = np.isfinite(means)
    if not ok.any():
        return " " * means.size, None, None
    lo, hi = means[ok].min(), means[ok].max()
    level = np.zeros(means.size, dtype=np.int64) if hi == lo else \
        np.round((np.where(ok, means, lo) - lo) / (hi - lo) * (len(BLOCKS) - 1)).astype(np.int64)
    return "".join(BLOCKS[k] if good else " " for k, good in zip(level, ok)), float(lo), float(hi)


def entropy_sparkline(result: Any, width: int = WIDTH) -> Text | None:
    """``H over time ▁▂▄▆█ 0.91..1.93 bits, 0-237 h`` for an EntropyResult; None below 2 windows.

    Each block is the mean H of an equal share of the windows; the range is that of the means.
    """
    w = result.windows
    if w.num_rows < 2:
        return None
    h = np.array([np.nan if v is None else v for v in w.column("entropy_bits").to_pylist()], dtype=np.float64)
    line, lo, hi = spark_range(h, width)
    if lo is None:
        return None
    last = w.column("hours")[-1].as_py()
    span = (f"{w.num_rows:,} windows" if last is None else f"0-{last:.4g} h" if last >= 1
            else f"0-{last * 3600:.4g} s")
    text = Text("H over time  ", style="bold")
    text.append(line, style="cyan")
    text.append(f"  {lo:.3g}..{hi:.3g} bits, {span}")
    return text


def print_entropy_sparkline(console: Console, result: Any) -> None:
    """Print the entropy sparkline, narrowed to fit the console on one line (nothing below 2 windows)."""
    text = entropy_sparkline(result)
    if text is not None and len(text) > console.width:
        text = entropy_sparkline(result, max(8, WIDTH - (len(text) - console.width)))
    if text is not None:
        console.print(text)
