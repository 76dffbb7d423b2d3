"""`veotrace tune`: which PYTORCH_CUDA_ALLOC_CONF, recommended from the trace and checked by replaying it."""

from __future__ import annotations

import enum
from typing import Annotated

import typer

from veotrace.cli import replay_opts as ro
from veotrace.cli.app import app
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
    progress,
    show,
    user_errors,
)
from veotrace.cli.engine_opts import Engine, EngineOpt, JobsOpt, SchedulerOpt, WorkersOpt
from veotrace.defaults import SIMULATE_MAX_UNKNOWN_FREES as _MAX_UNKNOWN_FREES


class Objective(str, enum.Enum):
    peak_reserved = "peak-reserved"
    device_allocs = "device-allocs"
    flushes = "flushes"


@app.command("tune")
def tune_command(
    paths: PathsArg,
    capacity: Annotated[str | None, typer.Option("--capacity", help="The device's memory per GPU, e.g. 80GiB: a setting must fit it (no allocation over it) [default: a recorded OOM's budget, else none].")] = None,
    fraction: ro.FractionOpt = None,
    torch_version: ro.TorchVersionOpt = None,
    objective: Annotated[Objective, typer.Option("--objective", help="What the recommendation minimises (summed over devices); ties by fewest device allocations.")] = Objective.peak_reserved,
    tries: Annotated[list[str] | None, typer.Option("--try", help="KEY=V1,V2 replacing one knob's values in the grid, e.g. max_split_size_mb=unset,64,256 (repeatable).")] = None,
    space: Annotated[str | None, typer.Option("--space", help="A TOML file whose [space] table of lists replaces the grid.")] = None,
    exhaustive: Annotated[bool, typer.Option("--exhaustive", help="Run every candidate to the end (no pruning): slower, and the Pareto front covers them all.")] = False,
    torch_core: ro.TorchCoreOpt = "auto",
    max_unknown_frees: ro.MaxUnknownFreesOpt = _MAX_UNKNOWN_FREES,
    no_recorded_releases: ro.NoRecordedReleasesOpt = False,
    id_col: ro.IdColOpt = None,
    engine: EngineOpt = Engine.local,
    jobs: JobsOpt = 1,
    scheduler: SchedulerOpt = None,
    workers: WorkersOpt = None,
    time_unit: TimeUnitOpt = TimeUnit.ns,
    skip_bad_rows: SkipBadRowsOpt = False,
    format_hint: FormatHintOpt = None,
    fmt: FormatOpt = OutputFormat.table,
    output: OutputOpt = None,
    rows: RowsOpt = 40,
    plot: PlotOpt = None,
    plot_size: PlotSizeOpt = None,
    no_progress: NoProgressOpt = False,
) -> None:
    """Which PYTORCH_CUDA_ALLOC_CONF: settings replayed through the torch model, the Pareto front, one recommendation."""
    with user_errors():
        from veotrace.runs.tune import tune

        with progress("candidates", enabled=not no_progress) as on_progress:
            result = tune(paths, capacity=capacity, fraction=fraction, torch_version=torch_version,
                          objective=objective.value, tries=tries, space=space,
                          exhaustive=exhaustive, torch_core=torch_core, max_unknown_frees=max_unknown_frees,
                          no_recorded_releases=no_recorded_releases, id_col=id_col, engine=engine.value, jobs=jobs,
                          scheduler=scheduler, workers=workers, time_unit=time_unit, skip_bad_rows=skip_bad_rows,
                          format_hint=format_hint, on_progress=on_progress)
        show(result, fmt, output, rows=rows, plot=plot, plot_size=plot_size)
