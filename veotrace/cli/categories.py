"""`veotrace categories`: export_memory_timeline's memory categories (parameter, activation, gradient, ...) over time."""

from __future__ import annotations

from typing import Annotated

import typer

from veotrace.cli.app import app
from veotrace.cli.common import (
    FormatHintOpt,
    FormatOpt,
    OutputFormat,
    OutputOpt,
    RowsOpt,
    SkipBadRowsOpt,
    path_or_url,
    show,
    user_errors,
)
from veotrace.defaults import CATEGORIES_WINDOW_S as _WINDOW_S

TimelineArg = Annotated[
    object,  # Path or UrlPath from path_or_url
    typer.Argument(help="One export_memory_timeline file (one device): the raw form (*.raw.json.gz) or the .json / "
                   ".json.gz points; or a URL fsspec reads.", parser=path_or_url, metavar="TIMELINE"),
]


@app.command("categories")
def categories_command(
    paths: TimelineArg,
    window: Annotated[str | None, typer.Option("--window", help=f"Window length W: 10ms, 1s, 5m (a bare number is seconds) [default: {_WINDOW_S:g}s, or one chosen from the data when that gives under 20 windows].", show_default=False)] = None,
    window_events: Annotated[int | None, typer.Option("--window-events", help="Windows of N consecutive points instead of time windows (a point: the state after every row at one time).")] = None,
    skip_bad_rows: SkipBadRowsOpt = False,
    format_hint: FormatHintOpt = None,
    fmt: FormatOpt = OutputFormat.table,
    output: OutputOpt = None,
    rows: RowsOpt = 40,
) -> None:
    """Bytes per memory category (parameter, optimizer state, input, temporary, activation, gradient, autograd detail, unknown) over time: the peak and what dominates it, what grew, what existed before profiling."""
    with user_errors():
        from veotrace.runs.categories import categories

        show(categories(paths, window=window, window_events=window_events, skip_bad_rows=skip_bad_rows,
                        format_hint=format_hint), fmt, output, rows=rows)
