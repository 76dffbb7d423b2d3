"""`veotrace convert`: write alloc/free events once as Parquet (alloc_events/1) for fast re-analysis."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from veotrace.cli.app import app
from veotrace.cli.engine_opts import Engine, EngineOpt, JobsOpt, SchedulerOpt, WorkersOpt, engine_config
from veotrace.cli.common import (
    FormatHintOpt,
    NoProgressOpt,
    PathsArg,
    SkipBadRowsOpt,
    TimeUnit,
    TimeUnitOpt,
    err,
    print_report,
    progress,
    read_setup,
    user_errors,
)


@app.command("convert")
def convert_command(
    paths: PathsArg,
    output: Annotated[Path, typer.Option("--output", "-o", help="Parquet file to write.", dir_okay=False)],
    time_unit: TimeUnitOpt = TimeUnit.ns,
    skip_bad_rows: SkipBadRowsOpt = False,
    format_hint: FormatHintOpt = None,
    no_progress: NoProgressOpt = False,
    engine: EngineOpt = Engine.local,
    jobs: JobsOpt = 1,
    scheduler: SchedulerOpt = None,
    workers: WorkersOpt = None,
) -> None:
    """Convert logs, snapshots or exports to one Parquet table that every command accepts."""
    with user_errors():
        from veotrace.sources import iter_alloc_events
        from veotrace.sources.convert import write_parquet

        options, report = read_setup(time_unit, skip_bad_rows, format_hint)
        config = engine_config(engine, jobs, scheduler, workers)
        with progress("converting", enabled=not no_progress) as bar:
            if config.parallel:  # each file converted by a task into a part, the parts then joined in order
                from veotrace.engine import run_convert

                rows = run_convert(paths, output, config, options=options, report=report, on_progress=bar)
            else:
                rows = write_parquet(iter_alloc_events(paths, options=options, report=report, on_progress=bar), output)
        print_report(report)
        err(f"wrote {rows:,} events to {output}")
