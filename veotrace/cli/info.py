"""`veotrace info`: what each file is and holds, before any analysis."""

from __future__ import annotations

import typer

from veotrace.cli.app import app
from veotrace.cli.common import (
    FormatHintOpt,
    FormatOpt,
    OutputFormat,
    OutputOpt,
    PathsArg,
    SkipBadRowsOpt,
    TimeUnit,
    TimeUnitOpt,
    emit,
    err,
    print_report,
    read_setup,
    user_errors,
)


@app.command("info")
def info_command(
    paths: PathsArg,
    time_unit: TimeUnitOpt = TimeUnit.ns,
    skip_bad_rows: SkipBadRowsOpt = False,
    format_hint: FormatHintOpt = None,
    fmt: FormatOpt = OutputFormat.table,
    output: OutputOpt = None,
) -> None:
    """Format and version, tables and rows, time span, devices, streams, ops, sizes, and the commands each file feeds."""
    with user_errors():
        from veotrace.analysis import info as analysis
        from veotrace.render.info import render_info
        from veotrace.sources.probe import probe_paths

        options, _ = read_setup(time_unit, skip_bad_rows, format_hint)
        probes, skipped = probe_paths(paths, options)
        infos = [analysis.describe(p) for p in probes]
        for p in probes:
            p.report.warnings.clear()  # reader notes (e.g. "no time_us") are part of the description
            print_report(p.report)
        if skipped:
            err(f"Warning: skipped {len(skipped)} file(s) that are not traces: {', '.join(skipped[:5])}")
        emit(fmt, output, as_json=lambda: {"files": [i.to_dict() for i in infos], "skipped_files": skipped},
             as_table=lambda: analysis.info_table(infos), render_terminal=lambda con: render_info(con, infos))
        for bad in (i for i in infos if i.error):
            err(f"Error: {bad.path}: {bad.error}")
        if any(i.error for i in infos):
            raise typer.Exit(1)
