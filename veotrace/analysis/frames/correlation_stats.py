"""Analysis layer: Pearson/Spearman with CIs, moving-block bootstrap, block permutation, lags, group difference.

scipy's tested statistics are used, but ``scipy.stats`` is imported inside the functions that compute
(about 1 s on a cold start), so an input error in `veotrace correlate` is reported without that cost.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from veotrace.defaults import (
    CORRELATE_BLOCK_LEN,
    CORRELATE_CONFIDENCE,
    CORRELATE_MAX_LAG,
    CORRELATE_RESAMPLES,
    CORRELATE_SEED,
    MAX_RESAMPLES,
)
from veotrace.errors import AnalysisError, UsageError


@dataclass
class Coefficient:
    """One correlation coefficient with its classic and autocorrelation-aware uncertainty."""

    r: float
    ci_low: float  # Fisher-z interval (Pearson: scipy; Spearman: Fieller-Hartley-Pearson 1.06/(n-3))
    ci_high: float
    p: float  # scipy's p-value, which assumes independent pairs
    boot_ci_low: float  # moving-block bootstrap percentile interval
    boot_ci_high: float
    perm_p: float  # block-permutation p-value, two-sided

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class CorrelationResult:
    """Correlation of address jumps with EPE over aligned pairs."""

    n: int
    n_eff: float
    pearson: Coefficient
    spearman: Coefficient
    resamples: int
    seed: int
    block_len: int
    lags: list[dict] = field(default_factory=list)  # [{lag, n, r, p}] for --max-lag
    mean_jump_bytes: float = 0.0
    mean_epe_px: float = 0.0

    def headline(self) -> str:
        """`r = 0.82 +- 0.07 (95% CI, n = 47)`, the half-width of the Fisher interval."""
        half = (self.pearson.ci_high - self.pearson.ci_low) / 2
        return f"r = {self.pearson.r:.2f} +- {half:.2f} (95% CI, n = {self.n})"

    def to_dict(self) -> dict:
        return {
            "headline": self.headline(), "n": self.n, "n_eff": self.n_eff,
            "pearson": self.pearson.to_dict(), "spearman": self.spearman.to_dict(),
            "resamples": self.resamples, "seed": self.seed, "block_len": self.block_len,
            "lags": self.lags, "mean_jump_bytes": self.mean_jump_bytes, "mean_epe_px": self.mean_epe_px,
        }


def check_not_constant(x: np.ndarray, what: str) -> None:
    """Raise AnalysisError when ``x`` is constant: a correlation with it is undefined."""
    if np.ptp(x) == 0:
        raise AnalysisError(
            f"the {what} are constant (all {x[0]:g}), so the correlation is undefined",
            hint="Nothing varies to correlate with; check that the right arrays were passed",
        )


def lag1(x: np.ndarray) -> float:
    """Lag-1 autocorrelation of ``x`` (0 for series too short to say)."""
    if x.size < 3 or np.ptp(x[1:]) == 0 or np.ptp(x[:-1]) == 0:
        return 0.0
    return float(np.corrcoef(x[:-1], x[1:])[0, 1])


def effective_n(x: np.ndarray, y: np.ndarray) -> float:
    """Effective sample size of a correlation of two AR(1)-like series (Bretherton et al. 1999).

    n_eff = n (1 - a_x a_y) / (1 + a_x a_y), with a the lag-1 autocorrelations; clipped to [2, n].
    """
    prod = lag1(x) * lag1(y)
    return float(np.clip(x.size * (1 - prod) / (1 + prod), 2.0, x.size))


def _rowwise_pearson(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson r of each row pair of two (R, n) arrays; NaN for constant rows."""
    xc = x - x.mean(axis=1, keepdims=True)
    yc = y - y.mean(axis=1, keepdims=True)
    den = np.sqrt((xc * xc).sum(axis=1) * (yc * yc).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return (xc * yc).sum(axis=1) / den


def _block_indices(rng: np.random.Generator, n: int, block: int, resamples: int) -> np.ndarray:
    """Moving-block bootstrap: concatenate random overlapping blocks of ``block`` pairs up to length n."""
    nblocks = -(-n // block)
    starts = rng.integers(0, n - block + 1, size=(resamples, nblocks))
    idx = (starts[:, :, None] + np.arange(block)[None, None, :]).reshape(resamples, -1)
    return idx[:, :n]


def _block_permutations(rng: np.random.Generator, n: int, block: int, resamples: int) -> np.ndarray:
    """Permutations that shuffle consecutive blocks of ``block`` pairs, keeping autocorrelation inside blocks."""
    edges = list(range(0, n, block))
    blocks = [np.arange(s, min(s + block, n)) for s in edges]
    return np.stack([np.concatenate([blocks[j] for j in rng.permutation(len(blocks))]) for _ in range(resamples)])


def _coefficient(x, y, kind, boot_idx, perm_idx, confidence) -> Coefficient:
    from scipy import stats

    n = x.size
    if kind == "pearson":
        res = stats.pearsonr(x, y)
        ci = res.confidence_interval(confidence)
        r, p, lo, hi = float(res.statistic), float(res.pvalue), float(ci.low), float(ci.high)
        bx, by = x[boot_idx], y[boot_idx]
    else:
        res = stats.spearmanr(x, y)
        r, p = float(res.statistic), float(res.pvalue)
        # Fisher z with the Fieller-Hartley-Pearson (1957) variance 1.06 / (n - 3).
        z, se = np.arctanh(np.clip(r, -1 + 1e-15, 1 - 1e-15)), np.sqrt(1.06 / max(n - 3, 1))
        q = stats.norm.ppf(0.5 + confidence / 2)
        lo, hi = float(np.tanh(z - q * se)), float(np.tanh(z + q * se))
        bx, by = stats.rankdata(x[boot_idx], axis=1), stats.rankdata(y[boot_idx], axis=1)
        x, y = stats.rankdata(x), stats.rankdata(y)
    boot = _rowwise_pearson(bx, by)
    boot = boot[np.isfinite(boot)]
    alpha = (1 - confidence) / 2
    blo, bhi = (np.quantile(boot, [alpha, 1 - alpha]) if boot.size else (np.nan, np.nan))
    perm = _rowwise_pearson(np.broadcast_to(x, perm_idx.shape), y[perm_idx])
    observed = float(_rowwise_pearson(x[None, :], y[None, :])[0])
    perm_p = (1 + int((np.abs(perm) >= abs(observed) - 1e-12).sum())) / (1 + perm_idx.shape[0])
    return Coefficient(r, lo, hi, p, float(blo), float(bhi), float(perm_p))


def correlate(
    jump: np.ndarray,
    epe: np.ndarray,
    *,
    resamples: int = CORRELATE_RESAMPLES,
    seed: int = CORRELATE_SEED,
    block_len: int = CORRELATE_BLOCK_LEN,
    max_lag: int = CORRELATE_MAX_LAG,
    confidence: float = CORRELATE_CONFIDENCE,
    on_progress: Callable[[int, int], None] | None = None,
) -> CorrelationResult:
    """Correlate address jumps with EPE: Pearson and Spearman, classic and block-resampled uncertainty.

    Args:
        jump, epe: aligned 1-D float arrays (see ``align_pairs``), at least 3 pairs, not constant.
        resamples: bootstrap resamples and permutations (seeded by ``seed``).
        block_len: block length for the bootstrap and permutation; 0 = round(n ** (1/3)).
        max_lag: also report Pearson r of jump[i] with epe[i + lag] for lag in -max_lag..max_lag.

    Raises:
        UsageError: resamples < 1, negative or too long blocks or lags.
        AnalysisError: a constant series.
    """
    n = int(jump.size)
    if not 1 <= resamples <= MAX_RESAMPLES:
        raise UsageError(f"--resamples must be between 1 and {MAX_RESAMPLES:,}, got {resamples}")
    if seed < 0:
        raise UsageError(f"--seed must not be negative, got {seed}")
    if block_len < 0 or block_len > n:
        raise UsageError(f"--block-len must be between 0 (auto) and the number of pairs ({n}), got {block_len}")
    if max_lag < 0 or n - max_lag < 3:
        raise UsageError(f"--max-lag must be between 0 and {n - 3} for {n} pairs, got {max_lag}")
    check_not_constant(jump, "address jumps")
    check_not_constant(epe, "EPE values")
    block = block_len or max(1, round(n ** (1 / 3)))
    rng = np.random.default_rng(seed)
    boot_idx = _block_indices(rng, n, block, resamples)
    perm_idx = _block_permutations(rng, n, block, resamples)
    coeffs = {}
    for i, kind in enumerate(("pearson", "spearman")):
        coeffs[kind] = _coefficient(jump, epe, kind, boot_idx, perm_idx, confidence)
        if on_progress is not None:
            on_progress(i + 1, 2)
    from scipy import stats

    lags = []
    for lag in range(-max_lag, max_lag + 1) if max_lag else ():
        x, y = (jump[: n - lag], epe[lag:]) if lag >= 0 else (jump[-lag:], epe[: n + lag])
        if np.ptp(x) == 0 or np.ptp(y) == 0:
            lags.append({"lag": lag, "n": int(x.size), "r": None, "p": None})
            continue
        res = stats.pearsonr(x, y)
        lags.append({"lag": lag, "n": int(x.size), "r": float(res.statistic), "p": float(res.pvalue)})
    return CorrelationResult(
        n, effective_n(jump, epe), coeffs["pearson"], coeffs["spearman"], resamples, seed, block, lags,
        float(jump.mean()), float(epe.mean()),
    )


@dataclass
class GroupComparison:
    """Mean jump and mean EPE of a run against a baseline run, with Welch 95% CIs of the differences."""

    run: dict
    baseline: dict
    diff_jump_bytes: dict
    diff_epe_px: dict

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _diff(a: np.ndarray, b: np.ndarray, confidence: float) -> dict:
    from scipy import stats

    res = stats.ttest_ind(a, b, equal_var=False)
    ci = res.confidence_interval(confidence)
    return {"diff": float(a.mean() - b.mean()), "ci_low": float(ci.low), "ci_high": float(ci.high), "p": float(res.pvalue)}


def compare_groups(run, baseline, *, confidence: float = CORRELATE_CONFIDENCE) -> GroupComparison:
    """Compare two runs' aligned pairs (``Pairs``): run minus baseline, Welch t intervals.

    The intervals assume independent transitions; with autocorrelated series read them as optimistic.
    """
    def summary(p) -> dict:
        return {"n": int(p.jump_bytes.size), "mean_jump_bytes": float(p.jump_bytes.mean()), "mean_epe_px": float(p.epe_px.mean())}

    return GroupComparison(
        summary(run), summary(baseline),
        _diff(run.jump_bytes, baseline.jump_bytes, confidence), _diff(run.epe_px, baseline.epe_px, confidence),
    )
