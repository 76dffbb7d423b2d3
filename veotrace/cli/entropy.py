"""`veotrace entropy`: sliding-window entropy of allocation size classes and its trend."""

from __future__ import annotations

from pathlib import Path
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
    local_output,
    progress,
    show,
    user_errors,
)
from veotrace.cli.engine_opts import Engine, EngineOpt, JobsOpt, SchedulerOpt, WorkersOpt
from veotrace.cli.series_opts import ByOpt, DeviceOpt, SiteDepthOpt, SiteFilterOpt
from veotrace.defaults import ENTROPY_MAX_CLASS as _MAX_CLASS
from veotrace.defaults import ENTROPY_MIN_CLASS as _MIN_CLASS
from veotrace.defaults import ENTROPY_OPS as _OPS
from veotrace.defaults import ENTROPY_WINDOW_S as _WINDOW_S
from veotrace.defaults import SITES_DEPTH


@app.command("entropy")
def entropy_command(
    paths: PathsArg,
    window: Annotated[str | None, typer.Option("--window", help=f"Window length W: 300s, 5m, 1h, 20ms (a bare number is seconds) [default: {_WINDOW_S:g}s, or one chosen from the data when that gives under 20 windows].", show_default=False)] = None,
    step: Annotated[str | None, typer.Option("--step", help="Step S between window starts: 60s, 1m (a bare number is seconds) [default: W].")] = None,
    window_events: Annotated[int | None, typer.Option("--window-events", help="Windows of N consecutive counted events instead of time windows.")] = None,
    ops: Annotated[str | None, typer.Option("--ops", help=f"Comma-separated ops to count [default: {','.join(_OPS)}].", show_default=False)] = None,
    min_class: Annotated[int, typer.Option("--min-class", help="Bottom class: 2 = sizes ≤ 4 KiB (class = ceil(log2(size/1KiB)); every smaller size falls in it).")] = _MIN_CLASS,
    max_class: Annotated[int, typer.Option("--max-class", help="Top class: 12 = sizes > 2 MiB (every larger size falls in it; 20 = > 512 MiB).")] = _MAX_CLASS,
    auto_classes: Annotated[bool, typer.Option("--auto-classes", help="Classes from the data instead of --min-class/--max-class: every size in a class of its own, none clamped (the same classes for any two runs, e.g. a gate and its baseline).")] = False,
    segments: Annotated[str, typer.Option("--segments", help="Split the trend at these times since the first window: 48,120 (a bare number is hours), or 1s,2s.")] = "",
    by: ByOpt = None,
    device: DeviceOpt = None,
    site_filter: SiteFilterOpt = None,
    site_depth: SiteDepthOpt = SITES_DEPTH,
    time_unit: TimeUnitOpt = TimeUnit.ns,
    skip_bad_rows: SkipBadRowsOpt = False,
    format_hint: FormatHintOpt = None,
    fmt: fo.FollowFormatOpt = fo.FollowFormat.table,
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
    follow: fo.FollowOpt = False,
    until: fo.UntilOpt = None,
    idle_timeout: fo.IdleTimeoutOpt = None,
    poll: fo.PollOpt = fo.POLL_DEFAULT,
    state: fo.StateOpt = None,
) -> None:
    """Entropy of allocation size classes per window, its trend (slope, Theil-Sen, Kendall) and segments."""
    with user_errors():
        from veotrace.runs.entropy import entropy

        fo.check_follow(follow, paths, until=until, idle_timeout=idle_timeout, poll=poll, state=state,
                     **{"--window-events": window_events is not None, "--segments": bool(segments), "--by": by is not None,
                        "--save-baseline": save_baseline is not None, "--output": output is not None,
                        "--plot": plot is not None, "--jobs/--engine": jobs != 1 or engine is not Engine.local,
                        "--auto-classes": auto_classes})
        if follow:
            from veotrace.runs.follow import follow_entropy

            follow_entropy(paths[0], emit=fo.writer(fmt), note=err, window=window, step=step, ops=ops, min_class=min_class,
                           max_class=max_class, device=device, time_unit=time_unit, skip_bad_rows=skip_bad_rows,
                           until=until, idle_timeout=idle_timeout, poll=poll, state=state)
            return
        fmt = fo.offline_format(fmt, follow)

        with progress("reading", enabled=not no_progress) as bar:
            result = entropy(paths, window=window, step=step, window_events=window_events, ops=ops,
                             min_class=min_class, max_class=max_class, auto_classes=auto_classes, segments=segments, by=by, device=device, site_filter=site_filter, site_depth=site_depth,
                             time_unit=time_unit, skip_bad_rows=skip_bad_rows, format_hint=format_hint,
                             save_baseline=save_baseline, engine=engine, jobs=jobs, scheduler=scheduler,
                             workers=workers, on_progress=bar)
        show(result, fmt, output, rows=rows, plot=plot, plot_size=plot_size)
