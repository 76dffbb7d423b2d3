"""`veotrace fragmentation`: rebuild allocator state from a trace and measure fragmentation per window."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated

import typer

from veotrace.cli.app import app
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
    print_report,
    progress,
    read_setup,
    user_errors,
    write_plot,
)

from veotrace import defaults as _D


def _size_text(n: int | None) -> str:
    """Exact option text of a default size: 2097152 -> '2MiB' (None -> '')."""
    if n is None:
        return ""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


_DEFAULTS = {"threshold": _D.FRAGMENTATION_THRESHOLD, "max_gap": _size_text(_D.FRAGMENTATION_MAX_GAP_BYTES),
             "zone_bytes": _size_text(_D.FRAGMENTATION_ZONE_BYTES),
             "bins": ",".join(f"{_size_text(lo)}-{_size_text(hi)}" for lo, hi in _D.FRAGMENTATION_BINS)}


class Table(str, enum.Enum):
    windows = "windows"
    bins = "bins"
    zones = "zones"
    state = "state"


@app.command("fragmentation")
def fragmentation_command(
    paths: PathsArg,
    window: Annotated[str | None, typer.Option("--window", help="Window length (300s, 5m, 1h; bare number = seconds) [default: 300s, or 1000 events without timestamps].")] = None,
    window_events: Annotated[int | None, typer.Option("--window-events", help="Windows of N consecutive events instead (for sources without timestamps).")] = None,
    threshold: Annotated[float, typer.Option("--threshold", help="Flag a window as fragmented when its largest free block is under this share of free bytes (TF BFC / XProf).")] = _DEFAULTS["threshold"],
    max_gap: Annotated[str, typer.Option("--max-gap", help="Without segments: gaps between live blocks under this size are free space in one range.")] = _DEFAULTS["max_gap"],
    bins: Annotated[str, typer.Option("--bins", help="Free-block size bins LO-HI (inclusive; 'LO-' = no upper bound), comma-separated.")] = _DEFAULTS["bins"],
    zone_bytes: Annotated[str, typer.Option("--zone-bytes", help="Width of the address zones ranked by alloc/free activity, or 'segment': one zone per segment (else per address range joined under --max-gap).")] = _DEFAULTS["zone_bytes"],
    latency_col: Annotated[str | None, typer.Option("--latency-col", help="Column of the log holding each event's latency in microseconds (e.g. latency_us): P50/P99 per hot zone and per request-size bin.")] = None,
    at: Annotated[str | None, typer.Option("--at", help="Full state (segments, blocks, free blocks) at 'end' or at a time after the first event (e.g. 90s, 2h).")] = None,
    table: Annotated[Table, typer.Option("--table", help="Which table --format csv/parquet writes: windows, bins, zones, or state (at --at, else at the end).")] = Table.windows,
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
    no_progress: NoProgressOpt = False,
    plot: PlotOpt = None,
    plot_size: PlotSizeOpt = None,
) -> None:
    """Fragmentation over time: live/reserved bytes, free blocks, TF BFC, GMLake and _memory_viz definitions."""
    with user_errors():
        from veotrace.fragmentation.load import read_and_replay
        from veotrace.cli.units import parse_bytes, parse_duration
        from veotrace.render.fragmentation import render_fragmentation, render_strides, warning_lines

        options, report = read_setup(time_unit, skip_bad_rows, format_hint)
        if latency_col is not None:
            import dataclasses

            options = dataclasses.replace(options, extra_columns=(latency_col,))
        kw = {"latency_col": latency_col, "window_s": None if window is None else parse_duration(window, option="--window"),
              "window_events": window_events, "threshold": threshold,
              "max_gap": parse_bytes(max_gap, option="--max-gap"), "bins": parse_bins(bins),
              "zone_bytes": "segment" if zone_bytes.strip().lower() == "segment" else parse_bytes(zone_bytes, option="--zone-bytes"),
              "at_offset_s": None if at in (None, "end") else parse_duration(at, option="--at")}
        strides = _array_strides(paths)
        if strides is not None:
            emit(fmt, output, as_json=lambda: {"strides": strides}, as_table=None,
                 render_terminal=lambda con: render_strides(con, strides))
            return
        notes: list[str] = []
        config = engine_config(engine, jobs, scheduler, workers)
        with progress("replaying", enabled=not no_progress) as bar:
            result = read_and_replay(paths, options=options, report=report, on_progress=bar, config=config,
                                     notes=notes, **kw)
        print_report(report)
        for line in notes:
            err(line)
        for line in warning_lines(result.counters, result.end["total"]):
            err(line)
        result.summary["read"] = report.to_dict()
        write_plot(plot, "fragmentation", result, plot_size)
        emit(fmt, output, as_json=lambda: _json(result, at), as_table=lambda: _table(result, table),
             render_terminal=lambda con: render_fragmentation(con, result, max_rows=rows))


def parse_bins(text: str) -> list[tuple[int, int | None]]:
    """'8KiB-32KiB,256KiB-' -> [(8192, 32768), (262144, None)].

    Raises:
        UsageError: a bin that is not LO-HI or LO-.
    """
    from veotrace.cli.units import parse_bytes
    from veotrace.errors import UsageError

    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        lo, sep, hi = part.partition("-")
        if not sep or not lo.strip():
            raise UsageError(f"--bins expects LO-HI or LO- (e.g. 8KiB-32KiB,256KiB-), got {part!r}")
        out.append((parse_bytes(lo, option="--bins"), parse_bytes(hi, option="--bins") if hi.strip() else None))
    if not out:
        raise UsageError("--bins needs at least one bin, e.g. 8KiB-32KiB")
    return out


def _array_strides(paths: list[Path]) -> dict | None:
    """Stride summary when every input is an array file of addresses (a .npy as `correlate` reads)."""
    from veotrace.sources.detect import detect

    files = [p for p in paths if p.is_file()]
    if not files or len(files) != len(paths):
        return None
    fmts = [detect(p) for p in files]
    if not all("arrays" in f.provides for f in fmts):
        return None
    import numpy as np

    from veotrace.fragmentation.layout import stride_summary
    from veotrace.sources.arrays import read_array, to_addresses

    seqs = []
    for p in files:
        addr, finite = to_addresses(read_array(p), path=p)
        seqs.append(addr.reshape(addr.shape[0], -1)[:, 0][finite.reshape(finite.shape[0], -1)[:, 0]])
    return stride_summary(np.concatenate(seqs))


def _json(result, at: str | None) -> dict:
    from veotrace.fragmentation.result import state_table

    out = result.to_dict()
    if at == "end":
        out["at"] = dict(result.end, state=state_table(result.final_states, max_gap=result.params["max_gap_bytes"]).to_pylist())
    elif result.at is not None:
        out["at"] = dict(result.at, state=result.at_state.to_pylist())
    return out


def _table(result, table: Table):
    from veotrace.fragmentation.result import state_table

    if table is Table.state:
        if result.at_state is not None:
            return result.at_state
        return state_table(result.final_states, max_gap=result.params["max_gap_bytes"])
    return {"windows": result.windows, "bins": result.bins, "zones": result.zones}[table.value]
