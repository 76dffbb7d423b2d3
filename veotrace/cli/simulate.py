"""`veotrace simulate`: replay a recorded alloc/free sequence through allocator models and compare them."""

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
    show,
    user_errors,
)
from veotrace.cli.engine_opts import Engine, EngineOpt, JobsOpt, SchedulerOpt, WorkersOpt
from veotrace.cli.series_opts import BySite, SiteDepthOpt, SiteFilterOpt
from veotrace.defaults import SIMULATE_MAX_UNKNOWN_FREES as _MAX_UNKNOWN_FREES
from veotrace.defaults import SITES_DEPTH
from veotrace.errors import EXIT_CHECK_FAILED


def _policy_help() -> str:
    from veotrace.allocators.policies import POLICIES  # names only: imports no model

    return f"Policy to replay (repeatable): {', '.join(POLICIES)} [default: all]."


_POLICY_HELP = _policy_help()


class Table(str, enum.Enum):
    windows = "windows"
    by_key = "by_key"


@app.command("simulate")
def simulate_command(
    paths: PathsArg,
    policy: Annotated[list[str] | None, typer.Option("--policy", "-p", help=_POLICY_HELP)] = None,
    conf: Annotated[str | None, typer.Option("--conf", help="PYTORCH_CUDA_ALLOC_CONF for the torch policy, e.g. 'expandable_segments:True' [default: the snapshot's allocator_settings].")] = None,
    capacity: Annotated[str | None, typer.Option("--capacity", help="The device's memory per GPU, e.g. 80GiB: allocations past it are OOMs (torch frees cached blocks and retries first, as PyTorch does).")] = None,
    fraction: ro.FractionOpt = None,
    torch_version: ro.TorchVersionOpt = None,
    tiers: Annotated[str | None, typer.Option("--tiers", help="tiered pools as LIFETIME:GRANULARITY, lifetimes as durations (a bare number is seconds) [default: 10ms:4MiB,100ms:64MiB,inf:512MiB].")] = None,
    window: Annotated[str | None, typer.Option("--window", help="Window length: 1s, 500ms (a bare number is seconds) [default: 5 min, or one that fits a shorter trace, said on stderr].")] = None,
    window_requests: Annotated[int | None, typer.Option("--window-requests", min=1, help="Windows of N requests (traces without timestamps).")] = None,
    max_unknown_frees: ro.MaxUnknownFreesOpt = _MAX_UNKNOWN_FREES,
    no_recorded_releases: ro.NoRecordedReleasesOpt = False,
    id_col: ro.IdColOpt = None,
    torch_core: ro.TorchCoreOpt = "auto",
    by: Annotated[BySite | None, typer.Option("--by", help="site (or phase): which policy helps which site: each policy's live and stranded bytes by allocation site (or record_function phase) at its peak reserved and at the end (a PyTorch snapshot, its conversion, or logs with a site/phase column).")] = None,
    site_filter: SiteFilterOpt = None,
    site_depth: SiteDepthOpt = SITES_DEPTH,
    table: Annotated[Table, typer.Option("--table", help="Which table --format csv/parquet writes: windows, or by_key (with --by: each policy's bytes held and stranded by site or phase, at its peak, at the first policy's peak and at the end).")] = Table.windows,
    fail_on_oom: Annotated[bool, typer.Option("--fail-on-oom", help=f"Exit {EXIT_CHECK_FAILED} when a policy's allocation does not fit --capacity.")] = False,
    time_unit: TimeUnitOpt = TimeUnit.ns,
    skip_bad_rows: SkipBadRowsOpt = False,
    format_hint: FormatHintOpt = None,
    fmt: FormatOpt = OutputFormat.table,
    output: OutputOpt = None,
    rows: RowsOpt = 40,
    plot: PlotOpt = None,
    plot_size: PlotSizeOpt = None,
    no_progress: NoProgressOpt = False,
    engine: EngineOpt = Engine.local,
    jobs: JobsOpt = 1,
    scheduler: SchedulerOpt = None,
    workers: WorkersOpt = None,
) -> None:
    """What-if: replay alloc/free events through allocator policies (recorded addresses ignored) and rank them."""
    with user_errors():
        from veotrace.runs.simulate import simulate

        result = simulate(paths, policy=policy, conf=conf, capacity=capacity, tiers=tiers, window=window,
                          window_requests=window_requests, max_unknown_frees=max_unknown_frees,
                          no_recorded_releases=no_recorded_releases, id_col=id_col, torch_core=torch_core,
                          fail_on_oom=fail_on_oom, time_unit=time_unit, skip_bad_rows=skip_bad_rows,
                          format_hint=format_hint, by=by, site_filter=site_filter, site_depth=site_depth,
                          fraction=fraction, torch_version=torch_version,
                          engine=engine, jobs=jobs, scheduler=scheduler, workers=workers)
        show(result, fmt, output, rows=rows, plot=plot, plot_size=plot_size, table=table.value)
