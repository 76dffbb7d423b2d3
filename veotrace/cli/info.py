"""`veotrace info`: what each file is and holds, before any analysis."""

from __future__ import annotations

from typing import Annotated

import typer

from veotrace.cli.app import app
from veotrace.cli.common import (
    FormatHintOpt,
    FormatOpt,
    OutputFormat,
    OutputOpt,
    SkipBadRowsOpt,
    TimeUnit,
    TimeUnitOpt,
    path_or_url,
    show,
    user_errors,
)


@app.command("info")
def info_command(
    paths: Annotated[list[object], typer.Argument(help="Any files veotrace reads (alloc logs, snapshots, nsys/ncu exports, arrays, per-frame metric tables, Parquet) or folders of them; or URLs fsspec reads (veotrace[remote]).", parser=path_or_url)],
    time_unit: TimeUnitOpt = TimeUnit.ns,
    skip_bad_rows: SkipBadRowsOpt = False,
    format_hint: FormatHintOpt = None,
    fmt: FormatOpt = OutputFormat.table,
    output: OutputOpt = None,
) -> None:
    """What each file is: format and version, tables and rows, time span, devices, streams, ops, sizes, kernels, and the commands that will run on it."""
    with user_errors():
        from veotrace.runs.info import info

        show(info(paths, time_unit=time_unit, skip_bad_rows=skip_bad_rows, format_hint=format_hint), fmt, output)
