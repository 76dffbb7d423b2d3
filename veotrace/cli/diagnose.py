"""`veotrace diagnose`: one timeline of every input's analyses, as ranked findings."""

from __future__ import annotations

from typing import Annotated

import typer

from veotrace.cli.app import app
from veotrace.cli.common import (
    FormatHintOpt,
    NoProgressOpt,
    OutputOpt,
    PathsArg,
    PlotOpt,
    PlotSizeOpt,
    ReportFormat,
    RowsOpt,
    SkipBadRowsOpt,
    TimeUnit,
    TimeUnitOpt,
    progress,
    show,
    user_errors,
)
from veotrace.errors import EXIT_CHECK_FAILED

_TABLE = ReportFormat("table")


@app.command("diagnose")
def diagnose_command(
    paths: PathsArg,
    fail_on: Annotated[str | None, typer.Option("--fail-on", help=f"Exit {EXIT_CHECK_FAILED} when a finding of this severity or above exists: high, medium or low.")] = None,
    align: Annotated[list[str] | None, typer.Option("--align", help="SOURCE=OFFSET: shift that input's clock on the common axis (a frame table: where its frame 0 sits), e.g. frames.csv=12.5s; SOURCE=auto: align it on the allocations it shares with the other inputs (done unasked for an input on a clock of its own) (repeatable).")] = None,
    frame_period: Annotated[str | None, typer.Option("--frame-period", help="A frame table's frame period (41.7ms): its onset in time, with --align.")] = None,
    time_unit: TimeUnitOpt = TimeUnit.ns,
    skip_bad_rows: SkipBadRowsOpt = False,
    format_hint: FormatHintOpt = None,
    fmt: Annotated[ReportFormat, typer.Option("--format", "-f", help="table (default), json (findings/1), csv/parquet (the findings), markdown (a pull-request comment).")] = _TABLE,
    output: OutputOpt = None,
    rows: RowsOpt = 40,
    plot: PlotOpt = None,
    plot_size: PlotSizeOpt = None,
    no_progress: NoProgressOpt = False,
) -> None:
    """What went wrong, when, in what order: every analysis that applies, as ranked findings on one time axis."""
    with user_errors():
        from veotrace.reporting.diagnose import diagnose

        with progress("analyses", enabled=not no_progress) as on_progress:
            result = diagnose(paths, fail_on=fail_on, align=align, frame_period=frame_period,
                              time_unit=time_unit.value, skip_bad_rows=skip_bad_rows, format_hint=format_hint,
                              on_progress=on_progress)
        show(result, fmt, output, rows=rows, plot=plot, plot_size=plot_size)
