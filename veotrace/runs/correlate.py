"""Run `correlate`: per-frame GPU addresses and optical-flow error -> aligned pairs -> autocorrelation-aware correlation."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veotrace import defaults as d
from veotrace.runs import common
from veotrace.runs.result import RunResult


@dataclass
class CorrelateRun(RunResult):
    """``correlate``'s result: ``value`` is the ``CorrelationResult``; ``pairs`` the aligned pairs; ``comparison``
    the group difference against ``baseline`` (None without one)."""

    command = "correlate"
    pairs: Any = field(default=None, repr=False)
    comparison: dict | None = None

    def to_dict(self) -> dict:
        return {**self.value.to_dict(), "dropped_nonfinite": self.pairs.dropped_nonfinite, "baseline": self.comparison}

    def tables(self) -> dict[str, Any]:
        return {"pairs": self.pairs.to_table()}

    def headline(self) -> list[tuple[str, Any]]:
        res = self.value
        return [("result", res.headline()), ("Spearman rho", res.spearman.r), ("n_eff", res.n_eff),
                ("block-permutation p", res.pearson.perm_p)]

    def render(self, console, *, max_rows: int = 40) -> None:
        from veotrace.render.correlate import render_correlate

        render_correlate(console, self.value, pairs=self.pairs, comparison=self.comparison, max_rows=max_rows)

    def plot_data(self) -> dict:
        return {"pairs": self.pairs}


def aligned_pairs(addrs, epe, *, addrs_name: str | None = None, epe_name: str | None = None, **opts):
    """The aligned (jump, EPE) pairs of an ADDRS and an EPE file (``opts``: align, reduce, tensors, drop_nonfinite)."""
    from veotrace.analysis.frames.correlation import align_pairs
    from veotrace.sources.arrays import read_array, to_addresses

    values, valid = to_addresses(read_array(addrs, name=addrs_name), path=addrs)
    return align_pairs(values, valid, read_array(epe, name=epe_name), **opts)


def correlate(addrs, epe, *, addrs_name: str | None = None, epe_name: str | None = None, align: str = d.CORRELATE_ALIGN,
              reduce: str = d.CORRELATE_REDUCE, tensors: str = d.CORRELATE_TENSORS,
              resamples: int = d.CORRELATE_RESAMPLES, seed: int = d.CORRELATE_SEED, block_len: int = d.CORRELATE_BLOCK_LEN,
              max_lag: int = d.CORRELATE_MAX_LAG, baseline: tuple | None = None, drop_nonfinite: bool = False,
              pairs_out=None) -> CorrelateRun:
    """Do a frame tensor's GPU address jumps go with optical-flow error? Pearson and Spearman with CIs,
    block bootstrap and permutation.

    Args:
        addrs: GPU address of each frame's tensor(s), (n,) or (n, k); .npy/.npz/CSV/Parquet.
        epe: end-point error (px): (n-1,) per transition, (n,) per frame, or (m, H, W) maps.
        addrs_name, epe_name: the array (.npz) or column(s) to read.
        align, reduce, tensors: how per-frame EPE, EPE maps and k tensors per frame are paired.
        resamples, seed, block_len: the bootstrap and permutations.
        max_lag: also correlate at lags -K..K.
        baseline: (ADDRS0, EPE0) of a baseline run to compare means with.
        drop_nonfinite: drop pairs with NaN/inf (counted) instead of refusing.
        pairs_out: also write the aligned pairs as CSV to this file.
    """
    from veotrace.analysis.frames.correlation import compare_groups
    from veotrace.analysis.frames.correlation import correlate as run_correlation

    addrs, epe = Path(addrs), Path(epe)
    names = {"addrs_name": addrs_name, "epe_name": epe_name}
    opts = {"align": align, "reduce": reduce, "tensors": tensors, "drop_nonfinite": drop_nonfinite}
    pairs = aligned_pairs(addrs, epe, **names, **opts)
    messages = []
    if pairs.dropped_nonfinite:
        n = pairs.dropped_nonfinite
        messages.append(f"Warning: dropped {n} pair{'' if n == 1 else 's'} with NaN/inf (--drop-nonfinite)")
    result = run_correlation(pairs.jump_bytes, pairs.epe_px, resamples=resamples, seed=seed, block_len=block_len,
                             max_lag=max_lag)
    inputs = common.input_files([addrs, epe, *(Path(p) for p in baseline or ())])
    comparison = compare_groups(pairs, aligned_pairs(*baseline, **names, **opts)) if baseline else None
    run = CorrelateRun(result, messages, inputs, pairs=pairs, comparison=comparison)
    if pairs_out is not None:
        from veotrace.render import export

        export.write_table(pairs.to_table(), "csv", Path(pairs_out), inputs=inputs)
    return run
