"""Plot layer: address jump vs EPE scatter with the least-squares line and its 95% band; r per lag."""

from __future__ import annotations

from typing import Any

import numpy as np

from veotrace.plot.base import ALERT, DATA, MUTED, TREND, new_figure
from veotrace.plot.common import binary_bytes, fmt

#: Above this many pairs the scatter is rasterised inside SVGs (keeps reports small).
RASTER_POINTS = 3000


def plot_correlate(result: Any, *, size: tuple[int, int], pairs: Any):
    """Figure of a CorrelationResult over its aligned ``pairs`` (``analysis.correlation.Pairs``).

    The line is the least-squares fit of EPE on the jump and the band its 95% confidence band
    (Student t, n - 2 degrees of freedom), drawn for reading the scatter; the numbers in the title are
    the analysis' own. With lags (``--max-lag``) a second panel shows Pearson r per lag with Fisher 95% CIs.
    """
    lags = [g for g in result.lags if g.get("r") is not None]
    fig, axes = new_figure(size, ncols=2 if result.lags else 1, **({"width_ratios": [3, 2]} if result.lags else {}))
    ax = axes[0] if result.lags else axes
    x, y = np.asarray(pairs.jump_bytes, float), np.asarray(pairs.epe_px, float)
    div, unit = binary_bytes(float(np.abs(x).max()) if x.size else 0.0)
    xs = x / div
    ax.scatter(xs, y, s=9, color=DATA, alpha=0.6, lw=0, rasterized=x.size > RASTER_POINTS, label=f"{x.size:,} transitions")
    _fit_band(ax, xs, y, unit)
    sp = result.spearman
    ax.set_title(f"{result.headline()}; Spearman ρ {fmt(sp.r)}; block-bootstrap CI "
                 f"[{fmt(result.pearson.boot_ci_low)}, {fmt(result.pearson.boot_ci_high)}], n_eff {fmt(result.n_eff)}",
                 fontsize=9)
    ax.set_xlabel(f"address jump ({unit})")
    ax.set_ylabel("end-point error (px)")
    ax.legend(loc="upper left")
    if result.lags:
        _lags(axes[1], lags)
    return fig


def _fit_band(ax, x: np.ndarray, y: np.ndarray, unit: str) -> None:
    n = x.size
    if n < 3 or np.ptp(x) == 0:
        return
    from scipy.stats import t as student_t

    slope, intercept = np.polyfit(x, y, 1)
    grid = np.linspace(x.min(), x.max(), 200)
    resid = y - (intercept + slope * x)
    s = np.sqrt((resid @ resid) / (n - 2))
    sxx = ((x - x.mean()) ** 2).sum()
    half = student_t.ppf(0.975, n - 2) * s * np.sqrt(1 / n + (grid - x.mean()) ** 2 / sxx)
    line = intercept + slope * grid
    ax.plot(grid, line, color=TREND, lw=1.6, label=f"least squares: {slope:+.3g} px per {unit}")
    ax.fill_between(grid, line - half, line + half, color=TREND, alpha=0.2, lw=0, label="95% CI of the line")


def _lags(ax, lags: list[dict]) -> None:
    """Pearson r per lag (EPE `lag` frames after the jump) with Fisher-z 95% intervals."""
    ax.axhline(0, color=MUTED, lw=0.8)
    if not lags:
        ax.set_title("r per lag: undefined (constant series)", fontsize=9)
        return
    lag = np.array([g["lag"] for g in lags], float)
    r = np.array([g["r"] for g in lags], float)
    n = np.array([g["n"] for g in lags], float)
    se = 1 / np.sqrt(np.maximum(n - 3, 1))
    z = np.arctanh(np.clip(r, -0.999999, 0.999999))
    lo, hi = np.tanh(z - 1.96 * se), np.tanh(z + 1.96 * se)
    colours = [ALERT if g["lag"] == 0 else DATA for g in lags]
    ax.bar(lag, r, color=colours, alpha=0.8, width=0.7)
    ax.errorbar(lag, r, yerr=[r - lo, hi - r], fmt="none", ecolor="#333333", lw=0.8, capsize=2)
    ax.set_xlabel("lag (EPE this many frames after the jump)")
    ax.set_ylabel("Pearson r")
    ax.set_ylim(-1.05, 1.05)
    ax.set_title("r per lag (95% Fisher CI)", fontsize=9)
