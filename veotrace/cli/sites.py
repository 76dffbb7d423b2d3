"""`veotrace sites`: who holds each device's peaks, the end state and stranded free space, by site and phase."""

from __future__ import annotations

from typing import Annotated

import typer

from veotrace.cli.app import app
from veotrace.cli.common import (
    FormatOpt,
    OutputFormat,
    OutputOpt,
    PlotOpt,
    PlotSizeOpt,
    RowsOpt,
    path_or_url,
    show,
    user_errors,
)
from veotrace.cli.engine_opts import Engine, EngineOpt, JobsOpt, SchedulerOpt, WorkersOpt
from veotrace.defaults import SITES_DEPTH


@app.command("sites")
def sites_command(
    paths: Annotated[list[object], typer.Argument(help="One PyTorch memory snapshot (_dump_snapshot), recorded with stacks; or a URL fsspec reads (veotrace[remote]).", parser=path_or_url)],
    site_filter: Annotated[str | None, typer.Option("--site-filter", help="Regex on a frame's file marking it internal [default: PyTorch, the standard library, C/C++ frames].")] = None,
    site_depth: Annotated[int, typer.Option("--site-depth", help="User frames that name a site (2: a.py:10 f < b.py:20 g).")] = SITES_DEPTH,
    window: Annotated[str | None, typer.Option("--window", help="Stranded bytes at the end of each window of this length: 100ms, 5m (a bare number is seconds) [default: 5 min, or one that fits a shorter trace].")] = None,
    at: Annotated[str | None, typer.Option("--at", help="Also the free bytes stranded at this time after the first event: 1.5s, 200ms (a bare number is seconds).")] = None,
    by: Annotated[str | None, typer.Option("--by", help="A PyTorch profiler trace: group allocations by the op, frame, module or kernel enclosing them [default: op].")] = None,
    fmt: FormatOpt = OutputFormat.table,
    output: OutputOpt = None,
    rows: RowsOpt = 40,
    plot: PlotOpt = None,
    plot_size: PlotSizeOpt = None,
    engine: EngineOpt = Engine.local,
    jobs: JobsOpt = 1,
    scheduler: SchedulerOpt = None,
    workers: WorkersOpt = None,
) -> None:
    """Who allocated what: live bytes by site at each device's peaks and at the end, free bytes stranded by live blocks, phases."""
    with user_errors():
        from veotrace.runs.sites import sites as run_sites

        show(run_sites(paths, site_filter=site_filter, site_depth=site_depth, at=at, window=window, by=by,
                       engine=engine, jobs=jobs, scheduler=scheduler, workers=workers), fmt, output, rows=rows, plot=plot,
             plot_size=plot_size)
