"""`veotrace bursts`: bursts of alloc events or kernel launches, per burst and summarised."""

from __future__ import annotations

import enum
from typing import Annotated

import typer

from veotrace.defaults import BURSTS_GAP_MS as _GAP_MS
from veotrace.defaults import BURSTS_MIN_EVENTS as _MIN_EVENTS
from veotrace.defaults import BURSTS_OPS as _OPS
from veotrace.cli.app import app
from veotrace.cli.series_opts import ByOpt, DeviceOpt, grouping
from veotrace.cli.engine_opts import Engine, EngineOpt, JobsOpt, SchedulerOpt, WorkersOpt, engine_config
from veotrace.cli.common import (
    FormatHintOpt,
    FormatOpt,
    NoProgressOpt,
    OutputFormat,
    OutputOpt,
    PathsArg,
    PlotOpt,
    PlotSizeOpt,
    RowsOpt,
    SkipBadRowsOpt,
    TimeUnit,
    TimeUnitOpt,
    emit,
    err,
    parse_ops,
    print_report,
    progress,
    read_setup,
    user_errors,
    write_plot,
)


class EventKind(str, enum.Enum):
    alloc = "alloc"
    kernels = "kernels"


@app.command("bursts")
def bursts_command(
    paths: PathsArg,
    gap: Annotated[str, typer.Option("--gap", help="A burst continues while events are closer than this: 5ms, 200us, 1s (a bare number is ms).")] = f"{_GAP_MS:g}ms",
    events: Annotated[EventKind, typer.Option("--events", help="alloc: alloc/free events; kernels: kernel launches (Nsight Systems).")] = EventKind.alloc,
    ops: Annotated[str | None, typer.Option("--ops", help=f"Comma-separated ops counted with --events alloc [default: {','.join(_OPS)}].")] = None,
    min_events: Annotated[int, typer.Option("--min-events", help="Fewest events in a burst (singletons never are).")] = _MIN_EVENTS,
    by: ByOpt = None,
    device: DeviceOpt = None,
    time_unit: TimeUnitOpt = TimeUnit.ns,
    skip_bad_rows: SkipBadRowsOpt = False,
    format_hint: FormatHintOpt = None,
    fmt: FormatOpt = OutputFormat.table,
    output: OutputOpt = None,
    rows: RowsOpt = 40,
    no_progress: NoProgressOpt = False,
    engine: EngineOpt = Engine.local,
    jobs: JobsOpt = 1,
    scheduler: SchedulerOpt = None,
    workers: WorkersOpt = None,
    plot: PlotOpt = None,
    plot_size: PlotSizeOpt = None,
) -> None:
    """Burst windows: maximal runs of events closer than --gap; sizes, durations, gaps and rates."""
    with user_errors():
        from veotrace.analysis.bursts import bursts as analysis
        from veotrace.errors import UsageError
        from veotrace.render.bursts import render_bursts
        from veotrace.sources import iter_alloc_events, read_table

        from veotrace.analysis.groups import columns_for
        from veotrace.cli.units import parse_duration

        options, report = read_setup(time_unit, skip_bad_rows, format_hint)
        gap = parse_duration(gap, option="--gap", bare_unit="ms") * 1e3  # ms, the analysis' unit
        analysis.check_params(gap, min_events)
        grouped = grouping(by, device)
        config = engine_config(engine, jobs, scheduler, workers)
        if events is EventKind.kernels:
            if ops is not None:
                raise UsageError("--ops applies to --events alloc only")
            if config.parallel:
                err("note: --events kernels reads the Nsight export on one process (--jobs and --engine split "
                    "alloc/free logs)")
            result = analysis.compute_kernel_bursts(read_table(paths, "gpu_activity", options=options, report=report),
                                                    gap_ms=gap, min_events=min_events, **grouped)
        else:
            columns = analysis.COLUMNS + columns_for(grouped.get("by"), device)
            with progress("reading", enabled=not no_progress) as bar:
                if config.parallel:  # pieces of the inputs as tasks; the same runs, merged
                    from veotrace.engine import run_bursts

                    result = run_bursts(paths, config, options=options, report=report, gap_ms=gap,
                                        min_events=min_events, ops=parse_ops(ops, _OPS), on_progress=bar,
                                        columns=columns, **grouped)
                else:
                    batches = iter_alloc_events(paths, options=options, report=report, on_progress=bar,
                                                columns=columns)
                    result = analysis.compute_bursts(batches, gap_ms=gap, min_events=min_events,
                                                     ops=parse_ops(ops, _OPS), **grouped)
        print_report(report)
        result.summary["read"] = report.to_dict()
        write_plot(plot, "bursts", result, plot_size)
        emit(fmt, output, as_json=result.to_dict, as_table=result.export_table,
             render_terminal=lambda con: render_bursts(con, result, max_rows=rows))

