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
        from veotrace.reporting.run import report

        result = report(paths, output, time_unit=time_unit, skip_bad_rows=skip_bad_rows, format_hint=format_hint,
                        on_section=lambda cmd: err(f"report: {cmd}"))
        for line in result.closing:
            err(line)
