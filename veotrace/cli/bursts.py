"""`veotrace bursts`: bursts of alloc events or kernel launches, per burst and summarised."""

from __future__ import annotations

import enum
from typing import Annotated

import typer

from veotrace.cli import follow_opts as fo
from veotrace.cli.app import app
from veotrace.cli.common import (
    FormatHintOpt,
    NoProgressOpt,
    OutputOpt,
    PathsArg,
    PlotOpt,
    PlotSizeOpt,
    RowsOpt,
    SkipBadRowsOpt,
    TimeUnit,
    TimeUnitOpt,
    err,
    progress,
    show,
    user_errors,
)
from veotrace.cli.engine_opts import Engine, EngineOpt, JobsOpt, SchedulerOpt, WorkersOpt
from veotrace.cli.series_opts import ByOpt, DeviceOpt, SiteDepthOpt, SiteFilterOpt
from veotrace.defaults import BURSTS_GAP_MS as _GAP_MS
from veotrace.defaults import BURSTS_MIN_EVENTS as _MIN_EVENTS
from veotrace.defaults import BURSTS_OPS as _OPS
from veotrace.defaults import SITES_DEPTH


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
    site_filter: SiteFilterOpt = None,
    site_depth: SiteDepthOpt = SITES_DEPTH,
    time_unit: TimeUnitOpt = TimeUnit.ns,
    skip_bad_rows: SkipBadRowsOpt = False,
    format_hint: FormatHintOpt = None,
    fmt: fo.FollowFormatOpt = fo.FollowFormat.table,
    output: OutputOpt = None,
    rows: RowsOpt = 40,
    no_progress: NoProgressOpt = False,
    engine: EngineOpt = Engine.local,
    jobs: JobsOpt = 1,
    scheduler: SchedulerOpt = None,
    workers: WorkersOpt = None,
    plot: PlotOpt = None,
    plot_size: PlotSizeOpt = None,
    follow: fo.FollowOpt = False,
    until: fo.UntilOpt = None,
    idle_timeout: fo.IdleTimeoutOpt = None,
    poll: fo.PollOpt = fo.POLL_DEFAULT,
    state: fo.StateOpt = None,
) -> None:
    """Burst windows: maximal runs of events closer than --gap; sizes, durations, gaps and rates."""
    with user_errors():
        from veotrace.runs.bursts import bursts

        fo.check_follow(follow, paths, until=until, idle_timeout=idle_timeout, poll=poll, state=state,
                     **{"--events kernels": events is EventKind.kernels, "--by": by is not None,
                        "--device": device is not None, "--output": output is not None, "--plot": plot is not None,
                        "--jobs/--engine": jobs != 1 or engine is not Engine.local})
        if follow:
            from veotrace.runs.follow import follow_bursts

            follow_bursts(paths[0], emit=fo.writer(fmt), note=err, gap=gap, ops=ops, min_events=min_events,
                          time_unit=time_unit, skip_bad_rows=skip_bad_rows, until=until, idle_timeout=idle_timeout,
                          poll=poll, state=state)
            return
        fmt = fo.offline_format(fmt, follow)

        with progress("reading", enabled=not no_progress and events is EventKind.alloc) as bar:
            result = bursts(paths, gap=gap, events=events, ops=ops, min_events=min_events, by=by, device=device, site_filter=site_filter, site_depth=site_depth,
                            time_unit=time_unit, skip_bad_rows=skip_bad_rows, format_hint=format_hint,
                            engine=engine, jobs=jobs, scheduler=scheduler, workers=workers, on_progress=bar)
        show(result, fmt, output, rows=rows, plot=plot, plot_size=plot_size)
