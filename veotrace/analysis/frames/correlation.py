"""Analysis layer: align per-frame address jumps with optical-flow error and correlate them, autocorrelation-aware."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# The statistics (and the checks on the aligned series) live in correlation_stats, which never imports
# this module; they are re-exported here, beside align_pairs.
from veotrace.analysis.frames.correlation_stats import (  # noqa: F401 - check_not_constant, effective_n, lag1
    CorrelationResult,
    GroupComparison,
    check_not_constant,
    compare_groups,
    correlate,
    effective_n,
    lag1,
)
from veotrace.defaults import CORRELATE_ALIGN as DEFAULT_ALIGN
from veotrace.defaults import CORRELATE_ALIGNS as ALIGNS
from veotrace.defaults import CORRELATE_REDUCE as DEFAULT_REDUCE
from veotrace.defaults import CORRELATE_REDUCES as REDUCES
from veotrace.defaults import CORRELATE_TENSOR_REDUCES as TENSOR_REDUCES
from veotrace.defaults import CORRELATE_TENSORS as DEFAULT_TENSORS
from veotrace.errors import AnalysisError, UsageError

MIN_PAIRS = 3  # a correlation of two points is always +-1


@dataclass
class Pairs:
    """Aligned (jump, EPE) pairs, one per kept transition, and what was dropped."""

    transition: np.ndarray
    jump_bytes: np.ndarray
    epe_px: np.ndarray
    dropped_nonfinite: int = 0
    notes: list[str] = field(default_factory=list)

    def to_table(self):
        import pyarrow as pa

        from veotrace.schemas.frames import FRAME_PAIRS

        return pa.table(
            {"transition": self.transition, "jump_bytes": self.jump_bytes, "epe_px": self.epe_px}, schema=FRAME_PAIRS
        )


def _reduce_maps(epe: np.ndarray, how: str) -> np.ndarray:
    flat = epe.reshape(epe.shape[0], -1)
    if how == "mean":
        return flat.mean(axis=1)
    if how == "median":
        return np.median(flat, axis=1)
    return np.percentile(flat, 95, axis=1)


def align_pairs(
    addresses: np.ndarray,
    valid: np.ndarray,
    epe: np.ndarray,
    *,
    align: str = DEFAULT_ALIGN,
    reduce: str = DEFAULT_REDUCE,
    tensors: str = DEFAULT_TENSORS,
    drop_nonfinite: bool = False,
) -> Pairs:
    """Pair the address jump of each transition i -> i+1 with its end-point error.

    Args:
        addresses: uint64, shape (n,) or (n, k) (k tensors per frame), in frame order.
        valid: same shape, False where the address was NaN/inf in the input.
        epe: shape (n-1,) per transition, (n,) per frame (``align``), or (m, H, W) maps (``reduce``).
        align: for per-frame EPE, "into" pairs EPE[i+1] with transition i, "from" pairs EPE[i].
        tensors: "mean" or "max" of the k jumps of a transition.
        drop_nonfinite: drop pairs with NaN/inf (counted) instead of refusing them.

    Raises:
        UsageError: unknown option values. AnalysisError: shapes that do not align, NaN/inf without
        ``drop_nonfinite``, fewer than 3 pairs.
    """
    for value, allowed, opt in ((align, ALIGNS, "--align"), (reduce, REDUCES, "--reduce"), (tensors, TENSOR_REDUCES, "--tensors")):
        if value not in allowed:
            raise UsageError(f"{opt} must be one of {', '.join(allowed)}, got {value!r}")
    if addresses.ndim not in (1, 2) or addresses.shape[0] < 2:
        raise AnalysisError(
            f"addresses must have shape (n,) or (n, k) with n >= 2 frames, found {addresses.shape}",
            hint="One address per frame (or k per frame), in frame order",
        )
    n = addresses.shape[0]
    a2 = addresses.reshape(n, -1)
    v2 = valid.reshape(n, -1)
    # Differences in uint64 without wrap-around: subtract the smaller from the larger.
    hi, lo = np.maximum(a2[1:], a2[:-1]), np.minimum(a2[1:], a2[:-1])
    jumps = (hi - lo).astype(np.float64)
    jumps[~(v2[1:] & v2[:-1])] = np.nan
    jump = jumps.mean(axis=1) if tensors == "mean" else jumps.max(axis=1)
    notes = []
    if epe.ndim == 3:
        epe = _reduce_maps(epe.astype(np.float64), reduce)
        notes.append(f"EPE maps reduced per frame by {reduce}")
    if epe.ndim != 1 or epe.shape[0] not in (n - 1, n):
        raise AnalysisError(
            f"cannot align addresses of shape {addresses.shape} ({n} frames, {n - 1} transitions) "
            f"with EPE of shape {epe.shape}",
            hint=f"EPE needs shape ({n - 1},) per transition, ({n},) per frame (--align into|from), "
            f"or ({n - 1} or {n}, H, W) maps (--reduce)",
        )
    epe = epe.astype(np.float64)
    if epe.shape[0] == n:
        epe = epe[1:] if align == "into" else epe[:-1]
        notes.append(f"per-frame EPE aligned '{align}' the transition")
    transition = np.arange(n - 1, dtype=np.int64)
    finite = np.isfinite(jump) & np.isfinite(epe)
    dropped = int((~finite).sum())
    if dropped and not drop_nonfinite:
        first = int(transition[~finite][0])
        raise AnalysisError(
            f"{dropped} transition{'' if dropped == 1 else 's'} ha{'s' if dropped == 1 else 've'} NaN or inf (first: transition {first})",
            hint="Fix the inputs, or pass --drop-nonfinite to drop those pairs (they are counted)",
        )
    pairs = Pairs(transition[finite], jump[finite], epe[finite], dropped, notes)
    if pairs.transition.size < MIN_PAIRS:
        raise AnalysisError(
            f"only {pairs.transition.size} pair{'' if pairs.transition.size == 1 else 's'} to correlate, at least {MIN_PAIRS} are needed",
            hint="Record more frames",
        )
    return pairs


__all__ = ["CorrelationResult", "GroupComparison", "Pairs", "align_pairs", "compare_groups", "correlate"]
