"""`veotrace l2-breakpoints`: launches where a kernel's L2 behaviour changes (Nsight Compute metrics)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from veotrace.cli.app import app
from veotrace.cli.common import (
    FormatHintOpt,
    FormatOpt,
    OutputFormat,
    OutputOpt,
    PlotOpt,
    PlotSizeOpt,
    RowsOpt,
    SkipBadRowsOpt,
    show,
    user_errors,
)
from veotrace.defaults import CHANGEPOINT_MIN_SIZE as _MIN_SIZE
from veotrace.defaults import CHANGEPOINT_PENALTY_SCALE as _PENALTY_SCALE
from veotrace.defaults import L2_METRIC as _METRIC
from veotrace.defaults import L2_MIN_JUMP_POINTS as _POINTS
from veotrace.defaults import L2_MIN_JUMP_RELATIVE_PCT as _RELATIVE
from veotrace.defaults import L2_RULES as _RULES


@app.command("l2-breakpoints")
def l2_command(
    paths: Annotated[list[Path], typer.Argument(help="Nsight Compute exports: 'ncu --csv' output (details or --page raw) or .ncu-rep reports; several files form one launch series per kernel, in the order given.")],
    metric: Annotated[str | None, typer.Option("--metric", help=f"Metric name or ncu label, e.g. 'L2 Hit Rate', 'SOL L2', lts__throughput.avg.pct_of_peak_sustained_elapsed [default: {_METRIC} (100 - L2 hit rate), else L2 throughput when the file has no hit rate].")] = None,
    kernel: Annotated[str | None, typer.Option("--kernel", help="Only kernels whose name matches this regular expression.")] = None,
    min_size: Annotated[int, typer.Option("--min-size", help="Fewest launches in a regime (change points need twice this per kernel).")] = _MIN_SIZE,
    penalty_scale: Annotated[float, typer.Option("--penalty-scale", help="Multiplier of the BIC penalty 2*sigma^2*ln(n) (1 = BIC, 1.5 = modified BIC); higher = fewer, surer breaks.")] = _PENALTY_SCALE,
    min_jump: Annotated[str | None, typer.Option("--min-jump", help=f"Smallest jump kept as a breakpoint: a number in the metric's unit (points for % metrics), or N% of the level before [default: {_POINTS:g} for % metrics, else {_RELATIVE:g}%; 0 = off].")] = None,
    rules: Annotated[str, typer.Option("--rules", help="Comma-separated rule presets to annotate breaks with, 'all' or 'none'.")] = ",".join(_RULES),
    skip_bad_rows: SkipBadRowsOpt = False,
    format_hint: FormatHintOpt = None,
    fmt: FormatOpt = OutputFormat.table,
    output: OutputOpt = None,
    rows: RowsOpt = 40,
    plot: PlotOpt = None,
    plot_size: PlotSizeOpt = None,
) -> None:
    """Per-kernel L2 picture and the launches where an L2 metric changes regime (Nsight Compute CSV or .ncu-rep).

    Every kernel gets its hit rate, throughput, bytes per request and sectors; change points need
    2 x --min-size launches of a kernel (record them with ncu --launch-skip/--launch-count).
    """
    with user_errors():
        from veotrace.runs.l2 import l2_breakpoints

        result = l2_breakpoints(paths, metric=metric, kernel=kernel, min_size=min_size, penalty_scale=penalty_scale,
                                min_jump=min_jump, rules=rules, skip_bad_rows=skip_bad_rows, format_hint=format_hint)
        show(result, fmt, output, rows=rows, plot=plot, plot_size=plot_size)
