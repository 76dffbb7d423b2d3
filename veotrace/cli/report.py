"""`veotrace report`: one self-contained offline HTML file of every analysis that applies to the inputs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from veotrace.cli.app import app
from veotrace.cli.common import (
    FormatHintOpt,
    PathsArg,
    SkipBadRowsOpt,
    TimeUnit,
    TimeUnitOpt,
    err,
    local_output,
    read_setup,
    user_errors,
)


@app.command("report")
def report_command(
    paths: PathsArg,
    output: Annotated[Path, typer.Option("--output", "-o", help="The HTML file to write, e.g. report.html.",
                                         dir_okay=False, callback=local_output)],
    time_unit: TimeUnitOpt = TimeUnit.ns,
    skip_bad_rows: SkipBadRowsOpt = False,
    format_hint: FormatHintOpt = None,
) -> None:
    """One HTML file: summary, and per analysis that applies (as 'info' decides) its figure, key table and parameters."""
    with user_errors():
        from veotrace.report import build_report, write_report
        from veotrace.report.run import check_output

        check_output(output)
        options, _ = read_setup(time_unit, skip_bad_rows, format_hint)
        report = build_report(paths, options=options, on_section=lambda cmd: err(f"report: {cmd}"))
        size = write_report(report, output)
        failed = [s for s in report.sections if s.error]
        for s in failed:
            err(f"Warning: {s.title} not available: {s.error}")
        err(f"Wrote {output} ({size / 1e6:.2f} MB, {len(report.sections) - len(failed)} of {len(report.sections)} analyses)")
