"""`veotrace entropy`: sliding-window entropy of allocation size classes and its trend."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from veotrace.defaults import ENTROPY_MAX_CLASS as _MAX_CLASS
from veotrace.defaults import ENTROPY_MIN_CLASS as _MIN_CLASS
from veotrace.defaults import ENTROPY_OPS as _OPS
from veotrace.defaults import ENTROPY_WINDOW_S as _WINDOW_S
from veotrace.cli.app import app
from veotrace.cli.series_opts import ByOpt, DeviceOpt, grouping, print_notes
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
    local_output,
    parse_ops,
    print_report,
    progress,
    read_setup,
    user_errors,
    write_plot,
)


@app.command("entropy")
def entropy_command(
    paths: PathsArg,
    window: Annotated[str | None, typer.Option("--window", help=f"Window length W: 300s, 5m, 1h, 20ms (a bare number is seconds) [default: {_WINDOW_S:g}s, or one chosen from the data when that gives under 20 windows].", show_default=False)] = None,
    step: Annotated[str | None, typer.Option("--step", help="Step S between window starts, same units (default: W).")] = None,
    window_events: Annotated[int | None, typer.Option("--window-events", help="Windows of N consecutive counted events instead of time windows.")] = None,
    ops: Annotated[str, typer.Option("--ops", help="Comma-separated ops to count.")] = ",".join(_OPS),
    min_class: Annotated[int, typer.Option("--min-class", help="Smallest class: 2 = 4 KiB (ceil(log2(size/1KiB))).")] = _MIN_CLASS,
    max_class: Annotated[int, typer.Option("--max-class", help="Largest class: 12 = 4 MiB.")] = _MAX_CLASS,
    segments: Annotated[str, typer.Option("--segments", help="Split the trend at these times since the first window: 48,120 (bare numbers are hours), or 1s,2s.")] = "",
    by: ByOpt = None,
    device: DeviceOpt = None,
    time_unit: TimeUnitOpt = TimeUnit.ns,
    skip_bad_rows: SkipBadRowsOpt = False,
    format_hint: FormatHintOpt = None,
    fmt: FormatOpt = OutputFormat.table,
    output: OutputOpt = None,
    save_baseline: Annotated[Path | None, typer.Option("--save-baseline", help="Also write the baseline that 'veotrace gate' compares runs with.", dir_okay=False, callback=local_output)] = None,
    rows: RowsOpt = 40,
    no_progress: NoProgressOpt = False,
    engine: EngineOpt = Engine.local,
    jobs: JobsOpt = 1,
    scheduler: SchedulerOpt = None,
    workers: WorkersOpt = None,
    plot: PlotOpt = None,
    plot_size: PlotSizeOpt = None,
) -> None:
    """Entropy of allocation size classes per window, its trend (slope, Theil-Sen, Kendall) and segments."""
    with user_errors():
        from veotrace.analysis.entropy.entropy import COLUMNS, compute_entropy
        from veotrace.analysis.groups import columns_for
        from veotrace.sources import iter_alloc_events

        options, report = read_setup(time_unit, skip_bad_rows, format_hint)
        config = engine_config(engine, jobs, scheduler, workers)
        if window_events is not None and (window is not None or step is not None):
            from veotrace.errors import UsageError

            raise UsageError("--window-events counts events, not time: leave out --window and --step")
        params = dict(window_s=_duration(window, "--window"), step_s=_duration(step, "--step"),
                      window_events=window_events, ops=parse_ops(ops, _OPS), min_class=min_class,
                      max_class=max_class, **grouping(by, device))
        columns = COLUMNS + columns_for(params.get("by"), device)
        with progress("reading", enabled=not no_progress) as bar:
            if config.parallel:  # pieces of the inputs as tasks; the same partials, merged
                from veotrace.engine import run_entropy

                result = run_entropy(paths, config, options=options, report=report, segments=_hours(segments),
                                     columns=columns, on_progress=bar, **params)
            else:
                batches = iter_alloc_events(paths, options=options, report=report, on_progress=bar, columns=columns)
                result = compute_entropy(batches, **params, segments=_hours(segments))
        print_report(report)
        print_notes(result.summary["notes"])
        result.summary["read"] = report.to_dict()
        if save_baseline is not None:
            from veotrace.gate.baseline import save_entropy_baseline

            save_entropy_baseline(save_baseline, result, paths=paths, time_unit=time_unit.value)
        write_plot(plot, "entropy", result, plot_size)
        emit(fmt, output, as_json=result.to_dict, as_table=result.export_table,
             render_terminal=lambda con: _render(con, result, rows))


def _render(con, result, rows: int) -> None:
    from veotrace.render.entropy import render_entropy  # rich: imported only for the terminal view

    render_entropy(con, result, max_rows=rows)


def _hours(text: str) -> list[float]:
    from veotrace.cli.units import parse_hours_list

    return parse_hours_list(text)


def _duration(text: str | None, option: str) -> float | None:
    from veotrace.cli.units import parse_duration

    return None if text is None else parse_duration(text, option=option, bare_unit="s")

