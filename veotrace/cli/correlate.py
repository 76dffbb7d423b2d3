"""`veotrace correlate`: do frame-tensor address jumps go with optical-flow error?"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from veotrace import defaults as d
from veotrace.cli.app import app
from veotrace.cli.common import (
    FormatOpt,
    OutputFormat,
    OutputOpt,
    PlotOpt,
    PlotSizeOpt,
    RowsOpt,
    local_output,
    show,
    user_errors,
)


@app.command("correlate")
def correlate_command(
    addrs: Annotated[Path, typer.Argument(help="GPU address of each frame's tensor(s): (n,) or (n, k); .npy/.npz/CSV/Parquet.")],
    epe: Annotated[Path, typer.Argument(help="End-point error (px): (n-1,) per transition, (n,) per frame, or (m, H, W) maps; .npy/.npz/CSV/Parquet.")],
    addrs_name: Annotated[str | None, typer.Option("--addrs-name", help="Array (.npz) or column(s) 'a,b' (CSV/Parquet) of ADDRS.")] = None,
    epe_name: Annotated[str | None, typer.Option("--epe-name", help="Array (.npz) or column (CSV/Parquet) of EPE.")] = None,
    align: Annotated[str, typer.Option("--align", help="Per-frame EPE: 'into' pairs EPE[i+1] with jump i -> i+1, 'from' pairs EPE[i].")] = d.CORRELATE_ALIGN,
    reduce: Annotated[str, typer.Option("--reduce", help=f"Reduce (m, H, W) EPE maps per frame: {', '.join(d.CORRELATE_REDUCES)}.")] = d.CORRELATE_REDUCE,
    tensors: Annotated[str, typer.Option("--tensors", help=f"With k tensors per frame, the jump is their {' or '.join(d.CORRELATE_TENSOR_REDUCES)}.")] = d.CORRELATE_TENSORS,
    resamples: Annotated[int, typer.Option("--resamples", help="Bootstrap resamples and permutations.")] = d.CORRELATE_RESAMPLES,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the bootstrap and permutations.")] = d.CORRELATE_SEED,
    block_len: Annotated[int, typer.Option("--block-len", help="Block length for resampling (0 = about n^(1/3)).")] = d.CORRELATE_BLOCK_LEN,
    max_lag: Annotated[int, typer.Option("--max-lag", help="Also correlate at lags -K..K (EPE K frames later).")] = d.CORRELATE_MAX_LAG,
    baseline: Annotated[tuple[Path, Path] | None, typer.Option("--baseline", help="ADDRS0 EPE0 of a baseline run to compare means with.")] = None,
    drop_nonfinite: Annotated[bool, typer.Option("--drop-nonfinite", help="Drop pairs with NaN/inf (counted) instead of refusing.")] = False,
    pairs_out: Annotated[Path | None, typer.Option("--pairs-out", help="Write the aligned pairs as CSV here.", dir_okay=False, callback=local_output)] = None,
    fmt: FormatOpt = OutputFormat.table,
    output: OutputOpt = None,
    rows: RowsOpt = 40,
    plot: PlotOpt = None,
    plot_size: PlotSizeOpt = None,
) -> None:
    """Do a frame tensor's GPU address jumps go with optical-flow error? Pearson and Spearman with CIs, block bootstrap and permutation.

    ADDRS holds one GPU address per frame (or k per frame); EPE the optical-flow end-point error.
    Arrays are never unpickled.
    """
    with user_errors():
        from veotrace.runs.correlate import correlate

        result = correlate(addrs, epe, addrs_name=addrs_name, epe_name=epe_name, align=align, reduce=reduce,
                           tensors=tensors, resamples=resamples, seed=seed, block_len=block_len, max_lag=max_lag,
                           baseline=baseline, drop_nonfinite=drop_nonfinite, pairs_out=pairs_out)
        show(result, fmt, output, rows=rows, plot=plot, plot_size=plot_size)
