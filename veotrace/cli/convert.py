"""`veotrace convert`: write alloc/free events once as Parquet (alloc_events/1) for fast re-analysis;
snapshots also give their segments and blocks tables, written beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from veotrace.cli.app import app
from veotrace.cli.common import (
    FormatHintOpt,
    NoProgressOpt,
    PathsArg,
    SkipBadRowsOpt,
    TimeUnit,
    TimeUnitOpt,
    err,
    local_output,
    progress,
    user_errors,
)
from veotrace.cli.engine_opts import Engine, EngineOpt, JobsOpt, SchedulerOpt, WorkersOpt


@app.command("convert")
def convert_command(
    paths: PathsArg,
    output: Annotated[Path, typer.Option("--output", "-o", help="Parquet file to write (snapshots: also "
                                         "OUT.segments.parquet, OUT.blocks.parquet and OUT.keys.parquet (sites and phases)).", dir_okay=False,
                                         callback=local_output)],
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
        from veotrace.runs.convert import convert

        with progress("converting", enabled=not no_progress) as bar:
            result = convert(paths, output, time_unit=time_unit, skip_bad_rows=skip_bad_rows, format_hint=format_hint,
                             engine=engine, jobs=jobs, scheduler=scheduler, workers=workers, on_progress=bar)
        for line in [*result.messages, *result.closing]:
            err(line)
