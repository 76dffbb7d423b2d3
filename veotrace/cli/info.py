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
    emit,
    err,
    path_or_url,
    print_report,
    read_setup,
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
        from veotrace.analysis import info as analysis
        from veotrace.render.info import render_info
        from veotrace.sources.frames import frames_or_none
        from veotrace.sources.probe import probe_paths

        options, _ = read_setup(time_unit, skip_bad_rows, format_hint)
        probes, skipped = probe_paths(paths, options)
        infos, skipped = analysis.describe_all(probes, skipped, frames_or_none)
        for p in probes:
            p.report.warnings.clear()  # reader notes (e.g. "no time_us") are part of the description
            print_report(p.report)
        if skipped:
            err(f"Warning: skipped {len(skipped)} file{'' if len(skipped) == 1 else 's'} that {'is' if len(skipped) == 1 else 'are'} not a trace: {', '.join(skipped[:5])}")
        emit(fmt, output, as_json=lambda: {"files": [i.to_dict() for i in infos], "skipped_files": skipped},
             as_table=lambda: analysis.info_table(infos), render_terminal=lambda con: render_info(con, infos))
        for bad in (i for i in infos if i.error):
            err(f"Error: {bad.path}: {bad.error}")
        if any(i.error for i in infos):
            raise typer.Exit(1)
