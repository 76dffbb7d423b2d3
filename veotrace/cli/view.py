"""`veotrace view`: the interactive memory timeline, one self-contained offline HTML file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from veotrace.cli.app import app
from veotrace.cli.common import FormatHintOpt, PathsArg, SkipBadRowsOpt, TimeUnit, TimeUnitOpt, err, local_output, user_errors
from veotrace.defaults import SITES_DEPTH


@app.command("view")
def view_command(
    paths: PathsArg,
    output: Annotated[Path, typer.Option("--output", "-o", help="The HTML file to write, e.g. view.html.",
                                         callback=local_output)],
    site_filter: Annotated[str | None, typer.Option("--site-filter", help="Regex on a frame's file marking it internal [default: PyTorch, the standard library, C/C++ frames].")] = None,
    site_depth: Annotated[int, typer.Option("--site-depth", help="User frames that name a site (2: a.py:10 f < b.py:20 g).")] = SITES_DEPTH,
    step_from: Annotated[float | None, typer.Option("--from", help="With --to: seconds after the first event from which every trace entry can be stepped in the map (a snapshot).", min=0)] = None,
    step_to: Annotated[float | None, typer.Option("--to", help="With --from: seconds after the first event up to which every entry can be stepped.", min=0)] = None,
    time_unit: TimeUnitOpt = TimeUnit.ns,
    skip_bad_rows: SkipBadRowsOpt = False,
    format_hint: FormatHintOpt = None,
) -> None:
    """The memory timeline in your browser: live bytes stacked by site (or size class), reserved, fragmentation, peaks, OOMs, segment maps."""
    with user_errors():
        from veotrace.runs.view import view

        result = view(paths, output, site_filter=site_filter, site_depth=site_depth, time_unit=time_unit,
                      skip_bad_rows=skip_bad_rows, format_hint=format_hint, step_from=step_from, step_to=step_to)
        for line in [*result.messages, *result.closing]:
            err(line)
