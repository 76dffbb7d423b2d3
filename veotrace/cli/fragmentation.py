"""`veotrace fragmentation`: rebuild allocator state from a trace and measure fragmentation per window."""

from __future__ import annotations

import enum
from typing import Annotated

import typer

from veotrace import defaults as _D
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
from veotrace.cli.series_opts import BySite, SiteDepthOpt, SiteFilterOpt
from veotrace.runs.fragmentation import DEFAULT_BINS_TEXT, size_text

_DEFAULTS = {"threshold": _D.FRAGMENTATION_THRESHOLD, "max_gap": size_text(_D.FRAGMENTATION_MAX_GAP_BYTES),
             "zone_bytes": size_text(_D.FRAGMENTATION_ZONE_BYTES), "bins": DEFAULT_BINS_TEXT}


class Table(str, enum.Enum):
    windows = "windows"
    bins = "bins"
    zones = "zones"
    state = "state"


@app.command("fragmentation")
def fragmentation_command(
    paths: PathsArg,
    window: Annotated[str | None, typer.Option("--window", help="Window length: 300s, 5m, 1h (a bare number is seconds) [default: 300s, or 1000 events without timestamps].")] = None,
    window_events: Annotated[int | None, typer.Option("--window-events", help="Windows of N consecutive events instead (for sources without timestamps).")] = None,
    threshold: Annotated[float, typer.Option("--threshold", help="A window is fragmented when its largest free block is under this share of the free bytes, i.e. when its external fragmentation (1 - largest free / free bytes) is above 1 - THRESHOLD (TF BFC / XProf): 0.65 flags external fragmentation above 0.35.")] = _DEFAULTS["threshold"],
    max_gap: Annotated[str, typer.Option("--max-gap", help="Without segments: gaps between live blocks under this size are free space in one range.")] = _DEFAULTS["max_gap"],
    bins: Annotated[str, typer.Option("--bins", help="Free-block size bins LO-HI (inclusive; 'LO-' = no upper bound), comma-separated.")] = _DEFAULTS["bins"],
    zone_bytes: Annotated[str, typer.Option("--zone-bytes", help="Width of the address zones ranked by alloc/free activity, or 'segment': one zone per segment (else per address range joined under --max-gap).")] = _DEFAULTS["zone_bytes"],
    latency_col: Annotated[str | None, typer.Option("--latency-col", help="Column of the log holding each event's latency in microseconds (e.g. latency_us): P50/P99 per hot zone and per request-size bin.")] = None,
    at: Annotated[str | None, typer.Option("--at", help="Full state (segments, blocks, free blocks) at 'end' or at a time after the first event: 90s, 2h (a bare number is seconds).")] = None,
    by: Annotated[BySite | None, typer.Option("--by", help="site: also the free bytes stranded at each window's end by allocation site; phase: each record_function phase's stranded bytes and fragmentation at its entry and exit (a PyTorch snapshot).")] = None,
    site_filter: SiteFilterOpt = None,
    site_depth: SiteDepthOpt = _D.SITES_DEPTH,
    table: Annotated[Table, typer.Option("--table", help="Which table --format csv/parquet writes: windows, bins, zones, or state (at --at, else at the end).")] = Table.windows,
    engine: EngineOpt = Engine.local,
    jobs: JobsOpt = 1,
    scheduler: SchedulerOpt = None,
    workers: WorkersOpt = None,
    time_unit: TimeUnitOpt = TimeUnit.ns,
    skip_bad_rows: SkipBadRowsOpt = False,
    format_hint: FormatHintOpt = None,
    fmt: fo.FollowFormatOpt = fo.FollowFormat.table,
    output: OutputOpt = None,
    rows: RowsOpt = 40,
    no_progress: NoProgressOpt = False,
    plot: PlotOpt = None,
    plot_size: PlotSizeOpt = None,
    follow: fo.FollowOpt = False,
    until: fo.UntilOpt = None,
    idle_timeout: fo.IdleTimeoutOpt = None,
    poll: fo.PollOpt = fo.POLL_DEFAULT,
    state: fo.StateOpt = None,
) -> None:
    """Fragmentation over time: live/reserved bytes, free blocks, TF BFC, GMLake and _memory_viz definitions."""
    with user_errors():
        from veotrace.runs.fragmentation import fragmentation

        fo.check_follow(follow, paths, until=until, idle_timeout=idle_timeout, poll=poll, state=state,
                        **{"--window-events": window_events is not None, "--latency-col": latency_col is not None,
                           "--at": at is not None, "--by": by is not None, "--output": output is not None,
                           "--plot": plot is not None, "--jobs/--engine": jobs != 1 or engine is not Engine.local})
        if follow:
            from veotrace.runs.follow import follow_fragmentation

            follow_fragmentation(paths[0], emit=fo.writer(fmt), note=err, window=window, threshold=threshold,
                                 max_gap=max_gap, bins=bins, zone_bytes=zone_bytes, time_unit=time_unit,
                                 skip_bad_rows=skip_bad_rows, until=until, idle_timeout=idle_timeout, poll=poll,
                                 state=state)
            return
        fmt = fo.offline_format(fmt, follow)

        with progress("replaying", enabled=not no_progress) as bar:
            result = fragmentation(paths, window=window, window_events=window_events, threshold=threshold,
                                   max_gap=max_gap, bins=bins, zone_bytes=zone_bytes, latency_col=latency_col, at=at,
                                   time_unit=time_unit, skip_bad_rows=skip_bad_rows, format_hint=format_hint,
                                   engine=engine, jobs=jobs, scheduler=scheduler, workers=workers,
                                   by=None if by is None else by.value, site_filter=site_filter,
                                   site_depth=site_depth, on_progress=bar)
        show(result, fmt, output, rows=rows, plot=plot, plot_size=plot_size, table=table.value)
