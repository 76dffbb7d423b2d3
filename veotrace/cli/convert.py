"""`veotrace convert`: write alloc/free events once as Parquet (alloc_events/1) for fast re-analysis;
snapshots also give their segments and blocks tables, written beside it."""

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
    local_output,
    print_report,
    progress,
    read_setup,
    user_errors,
)


def table_path(output: Path, kind: str) -> Path:
    """Where the ``kind`` table goes beside ``output``: out.parquet -> out.segments.parquet."""
    stem = output.name[: -len(".parquet")] if output.name.endswith(".parquet") else output.name
    return output.with_name(f"{stem}.{kind}.parquet")


@app.command("convert")
def convert_command(
    paths: PathsArg,
    output: Annotated[Path, typer.Option("--output", "-o", help="Parquet file to write (snapshots: also "
                                         "OUT.segments.parquet and OUT.blocks.parquet).", dir_okay=False,
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
        from veotrace.render.export import output_file, write_table
        from veotrace.sources import read_table, resolve_inputs
        from veotrace.sources.convert import write_parquet

        options, report = read_setup(time_unit, skip_bad_rows, format_hint)
        config = engine_config(engine, jobs, scheduler, workers)
        if config.parallel:  # each file converted by a task into a part, the parts then joined in order
            from veotrace.engine import run_convert

            with progress("converting", enabled=not no_progress) as bar:
                rows = run_convert(paths, output, config, options=options, report=report, on_progress=bar)
            print_report(report)
            err(f"wrote {rows:,} events to {output}")
            return
        inputs = resolve_inputs(paths, "alloc_events", options=options, report=report)
        notes: list[str] = []
        with progress("converting", enabled=not no_progress) as bar, output_file(output, "wb") as sink:
            rows = write_parquet(_events(inputs, options, report, notes, bar), sink)
        print_report(report)
        written = [f"{rows:,} events to {output}"]
        snapshots = [path for path, fmt in inputs if "segments" in fmt.provides]
        for kind in ("segments", "blocks") if snapshots else ():
            table = read_table(snapshots, kind, options=options, report=report)
            write_table(table, "parquet", table_path(output, kind))
            written.append(f"{table.num_rows:,} {kind} to {table_path(output, kind)}")
        for note in notes:
            err(f"Note: {note}")
        err("wrote " + ", ".join(written))


def _events(inputs, options, report, notes, bar):
    """Events of every input in order; a snapshot without trace entries adds a note instead."""
    from veotrace.sources import iter_alloc_events
    from veotrace.sources.snapshots.torch_snapshot import NoTraceEvents

    for path, _fmt in inputs:
        try:
            yield from iter_alloc_events([path], options=options, report=report, on_progress=bar)
        except NoTraceEvents as exc:
            notes.append(f"{exc.path}: {exc.message}")
