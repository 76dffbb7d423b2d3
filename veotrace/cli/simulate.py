"""`veotrace simulate`: replay a recorded alloc/free sequence through allocator models and compare them."""

from __future__ import annotations

from typing import Annotated

import typer

from veotrace.defaults import SIMULATE_MAX_UNKNOWN_FREES as _MAX_UNKNOWN_FREES
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
    emit,
    err,
    print_report,
    read_setup,
    user_errors,
    write_plot,
)
from veotrace.errors import EXIT_CHECK_FAILED

_POLICY_HELP = "Policy to replay (repeatable): torch, tiered, tiered-oracle, reuse, bestfit, firstfit, ideal [default: all]."


def parse_tiers(text: str | None):
    """``"10ms:4MiB,100ms:64MiB,inf:512MiB"`` -> ((0.01, 4194304), ...); None -> the defaults."""
    from veotrace.cli.units import parse_bytes, parse_duration
    from veotrace.errors import UsageError

    if text is None:
        return None
    tiers = []
    for part in text.split(","):
        bound, _, gran = part.strip().partition(":")
        if not gran:
            raise UsageError(f"--tiers expects LIFETIME:GRANULARITY pairs such as 10ms:4MiB,inf:512MiB, got {part!r}")
        life = float("inf") if bound.strip() == "inf" else parse_duration(bound.strip(), option="--tiers", bare_unit="s")
        tiers.append((life, parse_bytes(gran.strip(), option="--tiers")))
    if [b for b, _ in tiers] != sorted(b for b, _ in tiers) or tiers[-1][0] != float("inf"):
        raise UsageError("--tiers bounds must increase and the last must be 'inf'", hint="e.g. 10ms:4MiB,100ms:64MiB,inf:512MiB")
    return tuple(tiers)


@app.command("simulate")
def simulate_command(
    paths: PathsArg,
    policy: Annotated[list[str] | None, typer.Option("--policy", "-p", help=_POLICY_HELP)] = None,
    conf: Annotated[str | None, typer.Option("--conf", help="PYTORCH_CUDA_ALLOC_CONF for the torch policy, e.g. 'expandable_segments:True' [default: the snapshot's allocator_settings].")] = None,
    capacity: Annotated[str | None, typer.Option("--capacity", help="Device memory per GPU, e.g. 80GiB: allocations past it are reported (and make torch free cached blocks).")] = None,
    tiers: Annotated[str | None, typer.Option("--tiers", help="tiered pools as LIFETIME:GRANULARITY [default: 10ms:4MiB,100ms:64MiB,inf:512MiB].")] = None,
    window: Annotated[str | None, typer.Option("--window", help="Window length, e.g. 1s [default: the trace in ~50 windows].")] = None,
    window_requests: Annotated[int | None, typer.Option("--window-requests", min=1, help="Windows of N requests (traces without timestamps).")] = None,
    max_unknown_frees: Annotated[float, typer.Option("--max-unknown-frees", min=0.0, max=1.0, help="Largest share of frees naming no live allocation (ignored, counted) before refusing the input.")] = _MAX_UNKNOWN_FREES,
    no_recorded_releases: Annotated[bool, typer.Option("--no-recorded-releases", help="Do not follow the trace's segment_free/segment_unmap (empty_cache, OOM retries); rely on --capacity.")] = False,
    id_col: Annotated[str | None, typer.Option("--id-col", help="Pair allocs and frees by this column of the log (an allocation id) instead of the address.")] = None,
    torch_core: Annotated[str, typer.Option("--torch-core", help="Core of the torch policy: auto (compiled where it covers the run), c, or python (the reference model); params.torch_core says which ran.")] = "auto",
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
) -> None:
    """What-if: replay alloc/free events through allocator policies (recorded addresses ignored) and rank them."""
    with user_errors():
        import dataclasses

        from veotrace.allocators.load import load_trace
        from veotrace.allocators.stream import open_requests
        from veotrace.allocators import simulate as sim
        from veotrace.allocators.validation import validate
        from veotrace.cli.units import parse_bytes, parse_duration
        from veotrace.render.simulate import render_simulate

        names = sim.check_policies(policy or [])
        sim.check_core(torch_core)
        cap = parse_bytes(capacity, option="--capacity") if capacity is not None else None
        window_s = parse_duration(window, option="--window") if window is not None else None
        tier_spec = parse_tiers(tiers)
        options, report = read_setup(time_unit, skip_bad_rows, format_hint)
        if id_col is not None:  # the readers append the column after the ALLOC_EVENTS ones
            options = dataclasses.replace(options, extra_columns=(id_col,))
        key = id_col or "address"
        table, torch_conf, snap_conf, seed = load_trace(paths, options, report, conf, whole=False)
        req = open_requests(table, names, seed, max_unknown_frees=max_unknown_frees,
                            use_releases=not no_recorded_releases, key=key)
        result = sim.simulate(req, policies=names, conf=torch_conf, capacity=cap, seed=seed, tiers=tier_spec,
                              window_s=window_s, window_requests=window_requests, torch_core=torch_core)
        if seed is not None and "torch" in names:
            result.validation = validate(table, seed, snap_conf, capacity=cap, max_unknown_frees=max_unknown_frees,
                                         torch_core=torch_core)
        print_report(report)
        result.params["read"] = report.to_dict()
        result.params["pair_by"] = key
        write_plot(plot, "simulate", result, plot_size)
        emit(fmt, output, as_json=result.to_dict, as_table=lambda: result.windows,
             render_terminal=lambda con: render_simulate(con, result, max_rows=rows))
    oom = result.first_oom
    if oom is not None:
        err(f"Warning: {oom['policy']}: an allocation did not fit --capacity {capacity}: request {oom['request']:,} "
            f"({oom['size_bytes']:,} bytes)" + (f"; exit {EXIT_CHECK_FAILED} because of --fail-on-oom" if fail_on_oom else ""))
        if fail_on_oom:
            raise typer.Exit(EXIT_CHECK_FAILED)
