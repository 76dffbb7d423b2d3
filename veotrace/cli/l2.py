"""`veotrace l2-breakpoints`: launches where a kernel's L2 behaviour changes (Nsight Compute metrics)."""

from __future__ import annotations

from typing import Annotated

import typer

from veotrace.analysis.defaults import CHANGEPOINT_MIN_SIZE as _MIN_SIZE
from veotrace.analysis.defaults import CHANGEPOINT_PENALTY_SCALE as _PENALTY_SCALE
from veotrace.analysis.defaults import L2_METRIC as _METRIC
from veotrace.analysis.defaults import L2_RULES as _RULES
from veotrace.cli.app import app
from veotrace.cli.common import (
    FormatHintOpt,
    FormatOpt,
    OutputFormat,
    OutputOpt,
    PathsArg,
    RowsOpt,
    SkipBadRowsOpt,
    TimeUnit,
    emit,
    print_report,
    read_setup,
    user_errors,
)


@app.command("l2-breakpoints")
def l2_command(
    paths: PathsArg,
    metric: Annotated[str, typer.Option("--metric", help="Metric name or ncu label, e.g. 'L2 Hit Rate', lts__throughput.avg.pct_of_peak_sustained_elapsed; l2_miss_rate.pct = 100 - L2 hit rate.")] = _METRIC,
    kernel: Annotated[str | None, typer.Option("--kernel", help="Only kernels whose name matches this regular expression.")] = None,
    min_size: Annotated[int, typer.Option("--min-size", help="Fewest launches in a regime (a kernel needs twice this).")] = _MIN_SIZE,
    penalty_scale: Annotated[float, typer.Option("--penalty-scale", help="Multiplier of the BIC penalty 2*sigma^2*ln(n) (1 = BIC, 1.5 = modified BIC); higher = fewer, surer breaks.")] = _PENALTY_SCALE,
    rules: Annotated[str, typer.Option("--rules", help="Comma-separated rule presets to annotate breaks with, 'all' or 'none'.")] = ",".join(_RULES),
    skip_bad_rows: SkipBadRowsOpt = False,
    format_hint: FormatHintOpt = None,
    fmt: FormatOpt = OutputFormat.table,
    output: OutputOpt = None,
    rows: RowsOpt = 40,
) -> None:
    """Change points of an L2 metric across each kernel's launches (ncu --csv details or raw page, .ncu-rep)."""
    with user_errors():
        from veotrace.analysis.l2 import find_breakpoints
        from veotrace.render.l2 import render_l2
        from veotrace.sources import read_table

        options, report = read_setup(TimeUnit.ns, skip_bad_rows, format_hint)
        table = read_table(paths, "ncu_metrics", options=options, report=report)
        result = find_breakpoints(table, metric=metric, kernel=kernel, min_size=min_size,
                                  penalty_scale=penalty_scale, rules=rules.split(","))
        print_report(report)
        result.params["read"] = report.to_dict()
        emit(fmt, output, as_json=result.to_dict, as_table=lambda: result.breakpoints,
             render_terminal=lambda con: render_l2(con, result, max_rows=rows))
