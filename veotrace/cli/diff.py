"""`veotrace diff BEFORE AFTER`: two runs side by side, their deltas beyond run-to-run noise, sites and series."""

from __future__ import annotations

import enum
from typing import Annotated

import typer

from veotrace.cli.app import app
from veotrace.cli.common import (
    FormatHintOpt,
    OutputOpt,
    PlotOpt,
    PlotSizeOpt,
    ReportFormat,
    RowsOpt,
    SkipBadRowsOpt,
    TimeUnit,
    TimeUnitOpt,
    path_or_url,
    show,
    user_errors,
)
from veotrace.defaults import DIFF_ALIGN, DIFF_ALIGNS

Align = enum.Enum("Align", {a: a for a in DIFF_ALIGNS}, type=str)
_TABLE, _ALIGN = ReportFormat("table"), Align(DIFF_ALIGN)


_SIDE = "a file, a folder of rotated logs, or a Parquet file from 'veotrace convert'"


@app.command("diff")
def diff_command(
    before: Annotated[object, typer.Argument(help=f"The earlier run: {_SIDE}.", parser=path_or_url, metavar="BEFORE")],
    after: Annotated[object, typer.Argument(help=f"The later run, of the same kind (or a snapshot against a log): {_SIDE}.", parser=path_or_url, metavar="AFTER")],
    align: Annotated[Align, typer.Option("--align", help="The series' axis: time since each run's first event, step (record_function steps of a snapshot), events (untimed traces).")] = _ALIGN,
    fail_on: Annotated[list[str] | None, typer.Option("--fail-on", help="Exit 3 when a change meets this condition: 'peak_reserved>+5%', 'entropy_mean>0.1', 'ooms>0' (repeat, or comma-separate).")] = None,
    time_unit: TimeUnitOpt = TimeUnit.ns,
    skip_bad_rows: SkipBadRowsOpt = False,
    format_hint: FormatHintOpt = None,
    fmt: Annotated[ReportFormat, typer.Option("--format", "-f", help="table (default), json (diff/1), csv/parquet (the deltas), markdown (a pull-request comment).")] = _TABLE,
    output: OutputOpt = None,
    rows: RowsOpt = 40,
    plot: PlotOpt = None,
    plot_size: PlotSizeOpt = None,
) -> None:
    """Two runs side by side: headline deltas with run-to-run noise, size classes, settings, sites, series on one axis."""
    with user_errors():
        from veotrace.comparison.run import diff

        result = diff(before, after, align=align.value, fail_on=fail_on, time_unit=time_unit.value,
                      skip_bad_rows=skip_bad_rows, format_hint=format_hint)
        show(result, fmt, output, rows=rows, plot=plot, plot_size=plot_size)
