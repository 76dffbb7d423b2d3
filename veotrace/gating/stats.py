"""Gate layer: one-sided tests that respect autocorrelation between consecutive windows.

Entropy windows of one run are autocorrelated (the allocator's size mix drifts slowly), so an iid
test would call noise significant. Every test here is a **circular block bootstrap** (Politis &
Romano 1992; the moving-block bootstrap of Kunsch 1989 with blocks that wrap around the end, so the
resampled mean is centred on the sample mean): a run is resampled as randomly placed blocks of
``b`` consecutive windows, which keeps the dependence inside each block.

``b`` is **twice** the length given by the rule of Politis & White (2004, with the correction of
Patton, Politis & White 2009). That rule minimises the error of the bootstrap variance, whose bias
is downward and falls as 1/b; a test needs the variance not underestimated. On 200 same-process
pairs of 240-window seeded logs (veotrace.synth.gate), the plain rule called 10% significant at a
nominal 5%, twice the length 7% (6% on 200 other pairs); an iid z-test calls about 20%.
``block`` given explicitly is used as it is.

Resampled means and least-squares slopes are computed from prefix sums of each block (x, y, x^2,
xy), not from an (R, n) index matrix as ``correlate`` does: the same resampling at a cost of
R * n / b instead of R * n, and without importing scipy.stats (about a second per run).

p-values are for H0: "no increase" against H1: "the run is higher", from the bootstrap distribution
of the statistic shifted to zero: p = (1 + #{T* - T >= T}) / (1 + R).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: Resamples handled at once (bounds memory to a few MB whatever R and n are).
_CHUNK = 256


def block_length(y: np.ndarray) -> int:
    """Automatic moving-block length of a series (Politis & White 2004; Patton et al. 2009).

    The lag window is the flat-top one, its bandwidth twice the first lag after which
    ``K_N = max(5, sqrt(log10 n))`` autocorrelations in a row are below ``2 sqrt(log10 n / n)``.
    Returns at least 1 and at most ``min(3 sqrt(n), n / 3)``.
    """
    y = np.asarray(y, dtype=np.float64)
    n = y.size
    if n < 8:
        return 1
    yc = y - y.mean()
    kn = max(5, math.ceil(math.sqrt(math.log10(n))))
    max_lag = min(n - 1, math.ceil(math.sqrt(n)) + kn)
    acov = np.array([yc[: n - k] @ yc[k:] / n for k in range(max_lag + 1)])
    if acov[0] <= 0:
        return 1
    small = np.abs(acov[1:] / acov[0]) < 2 * math.sqrt(math.log10(n) / n)
    m_hat = next((m for m in range(max_lag - kn + 1) if small[m : m + kn].all()), max_lag)
    bw = min(2 * max(m_hat, 1), max_lag)
    lags = np.arange(-bw, bw + 1)
    t = np.abs(lags) / bw
    lam = np.where(t <= 0.5, 1.0, 2.0 * (1.0 - t))
    r = acov[np.abs(lags)]
    g = float((lam * np.abs(lags) * r).sum())
    d = 4.0 / 3.0 * float((lam * r).sum()) ** 2  # moving- and circular-block bootstrap constant
    b = (2.0 * g * g / d) ** (1 / 3) * n ** (1 / 3) if d > 0 else 1.0
    return int(min(max(1, round(b)), max(1, math.ceil(min(3 * math.sqrt(n), n / 3)))))


class _Blocks:
    """Circular block resampling of columns that share one set of random block starts per resample."""

    def __init__(self, n: int, block: int) -> None:
        self.n, self.block = n, max(1, min(block, n))
        self.nblocks = -(-n // self.block)
        self.last = n - (self.nblocks - 1) * self.block  # the last block is cut to fill exactly n

    def sums(self, starts: np.ndarray, col: np.ndarray) -> np.ndarray:
        """Sum of ``col`` over each resample of ``starts`` (R, nblocks); blocks wrap around the end."""
        cs = np.concatenate(([0.0], np.cumsum(np.concatenate((col, col)))))
        full = cs[starts[:, :-1] + self.block] - cs[starts[:, :-1]]
        tail = cs[starts[:, -1] + self.last] - cs[starts[:, -1]]
        return full.sum(axis=1) + tail

    def starts(self, rng: np.random.Generator, r: int) -> np.ndarray:
        return rng.integers(0, self.n, size=(r, self.nblocks))


def boot_means(y: np.ndarray, *, block: int, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Circular block bootstrap replicates of the mean of ``y``."""
    b = _Blocks(y.size, block)
    out = [b.sums(b.starts(rng, min(_CHUNK, resamples - i)), y) / y.size for i in range(0, resamples, _CHUNK)]
    return np.concatenate(out)


def boot_slopes(x: np.ndarray, y: np.ndarray, *, block: int, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Circular block bootstrap replicates of the least-squares slope of y on x (pairs resampled in blocks)."""
    b, n = _Blocks(y.size, block), y.size
    out = []
    for i in range(0, resamples, _CHUNK):
        s = b.starts(rng, min(_CHUNK, resamples - i))
        sx, sy, sxx, sxy = (b.sums(s, c) for c in (x, y, x * x, x * y))
        with np.errstate(invalid="ignore", divide="ignore"):
            out.append((sxy - sx * sy / n) / (sxx - sx * sx / n))
    return np.concatenate(out)


def slope(x: np.ndarray, y: np.ndarray) -> float:
    """Least-squares slope of y on x."""
    xc = x - x.mean()
    return float(xc @ (y - y.mean()) / (xc @ xc))


@dataclass
class Test:
    """An observed increase, its one-sided bootstrap p-value and a two-sided 95% percentile interval."""

    change: float
    p_value: float
    ci_low: float
    ci_high: float
    block: int

    @classmethod
    def from_replicates(cls, change: float, reps: np.ndarray, block: int) -> Test:
        reps = reps[np.isfinite(reps)]
        if reps.size == 0:
            return cls(change, math.nan, math.nan, math.nan, block)
        p = (1 + int((reps - change >= change - 1e-15).sum())) / (1 + reps.size)
        lo, hi = np.quantile(reps, [0.025, 0.975])
        return cls(change, min(1.0, p), float(lo), float(hi), block)


def _block(series: list[np.ndarray], block: int) -> int:
    """``block``, or twice the largest automatic length of the series (see the module docstring)."""
    if block > 0:
        return block
    return max(min(2 * block_length(s), max(1, s.size // 3)) for s in series)


def mean_increase(run: np.ndarray, base: np.ndarray, *, block: int, resamples: int, seed: int) -> Test:
    """Is mean(run) above mean(base)? Two independent runs, each resampled in blocks."""
    b = _block([run, base], block)
    rng = np.random.default_rng(seed)
    reps = boot_means(run, block=b, resamples=resamples, rng=rng) - boot_means(base, block=b, resamples=resamples, rng=rng)
    return Test.from_replicates(float(run.mean() - base.mean()), reps, b)


def paired_increase(diff: np.ndarray, *, block: int, resamples: int, seed: int) -> Test:
    """Is the mean of window-by-window differences (run - baseline at the same hour) above 0?"""
    b = _block([diff], block)
    reps = boot_means(diff, block=b, resamples=resamples, rng=np.random.default_rng(seed))
    return Test.from_replicates(float(diff.mean()), reps, b)


def slope_increase(xr: np.ndarray, yr: np.ndarray, xb: np.ndarray, yb: np.ndarray, *, block: int,
                   resamples: int, seed: int) -> Test:
    """Is the run's least-squares slope above the baseline's? (x, y) pairs resampled in blocks."""
    b = _block([yr, yb], block)
    rng = np.random.default_rng(seed)
    reps = (boot_slopes(xr, yr, block=b, resamples=resamples, rng=rng)
            - boot_slopes(xb, yb, block=b, resamples=resamples, rng=rng))
    return Test.from_replicates(slope(xr, yr) - slope(xb, yb), reps, b)
