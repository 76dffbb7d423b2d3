"""Plot layer: small helpers shared by the figure modules (Arrow columns to floats, number labels, empty panels)."""

from __future__ import annotations

from typing import Any

import numpy as np

NS_PER_S = 1e9
#: (span from which the unit is used, seconds per unit, name), largest first: hours up to a month (jobs are
#: read in hours), then the largest unit that gives at least 2 of them.
TIME_UNITS = ((86400.0 * 30, 86400.0, "days"), (7200.0, 3600.0, "hours"), (120.0, 60.0, "minutes"),
              (2.0, 1.0, "seconds"))


def floats(table: Any, column: str) -> np.ndarray:
    """An Arrow column as float64 with nulls as NaN."""
    col = table.column(column)
    return np.array([np.nan if v is None else float(v) for v in col.to_pylist()], dtype=np.float64) \
        if col.null_count else np.asarray(col.to_numpy(), dtype=np.float64)


def time_unit(span_s: float) -> tuple[float, str]:
    """(seconds per unit, unit name) for a time axis spanning ``span_s`` seconds."""
    for start, secs, name in TIME_UNITS:
        if span_s >= start:
            return secs, name
    return 1e-3, "ms"


def fmt(value: Any, digits: int = 3) -> str:
    """A number for a label: None as 'n/a', otherwise ``digits`` significant digits."""
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return "n/a"
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    return f"{value:.{digits}g}"


def binary_bytes(max_value: float) -> tuple[float, str]:
    """(divisor, unit) for showing byte values up to ``max_value`` (B, KiB, MiB, GiB, TiB)."""
    for power, unit in ((4, "TiB"), (3, "GiB"), (2, "MiB"), (1, "KiB")):
        if max_value >= 1024**power:
            return float(1024**power), unit
    return 1.0, "B"


def empty(ax: Any, message: str) -> None:
    """Write ``message`` in the middle of an empty panel."""
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="#7f7f7f")
    ax.set_xticks([])
    ax.set_yticks([])


def log_axis(axis: Any) -> None:
    """Plain number labels on a log-scaled axis (matplotlib's 10^k labels go through mathtext: slow, heavy SVG)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def largest_groups(keys: np.ndarray, weight: np.ndarray, limit: int) -> tuple[list[tuple[Any, np.ndarray]], int]:
    """The rows of each distinct key (key order; rows in table order), grouped by one stable sort, keeping
    the ``limit`` keys whose largest ``weight`` is largest (NaN counts as smallest); and how many keys
    were left out. A figure draws a line per device: past a few, the legend alone outweighs the data."""
    order = np.argsort(keys, kind="stable")
    ks = keys[order]
    starts = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]]) if ks.size else np.zeros(0, np.int64)
    ends = np.r_[starts[1:], ks.size].astype(np.int64)
    groups = [(ks[a].item(), order[a:b]) for a, b in zip(starts.tolist(), ends.tolist())]
    if len(groups) <= limit:
        return groups, 0
    w = np.where(np.isnan(weight), -np.inf, weight)
    peaks = np.maximum.reduceat(w[order], starts)
    keep = np.sort(np.argsort(-peaks, kind="stable")[:limit])
    return [groups[i] for i in keep.tolist()], len(groups) - limit
