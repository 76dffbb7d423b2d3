"""Run `fragmentation`: read a trace (alloc/free logs, one PyTorch snapshot seeded from its final state, or a
folder of snapshot pieces of one run: ``frag.series``) and replay it.

The one path from files to ``fragmentation_series`` for the command, the report and the Python API:
on one process, or in two passes over pieces of the logs on the engines (``fragmentation.parallel``)
when the options allow an exact split. An array of addresses gets its stride summary instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veotrace import defaults as _D
from veotrace.runs import common
from veotrace.runs.result import RunResult


def size_text(n: int | None) -> str:
    """Exact option text of a default size: 2097152 -> '2MiB' (None -> '')."""
    if n is None:
        return ""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


DEFAULT_BINS_TEXT = ",".join(f"{size_text(lo)}-{size_text(hi)}" for lo, hi in _D.FRAGMENTATION_BINS)


@dataclass
class FragmentationRun(RunResult):
    """``fragmentation``'s result: ``value`` is a ``FragmentationResult`` (or, for an array of addresses, ``strides``)."""

    command = "fragmentation"
    at: str | None = None
    strides: dict | None = field(default=None)
    #: ``--by site``: per device, the free bytes stranded at each window's end by site; ``--by phase``: the
    #: phases' states at entry and exit (``attribution``).
    pinning: dict | None = field(default=None)
    #: A profiler trace's own totals per device (``runs.profiler.recorded_totals``), beside the replay.
    recorded: dict | None = field(default=None)

    def to_dict(self) -> dict:
        if self.strides is not None:
            return {"strides": self.strides}
        from veotrace.frag.result import state_table

        result = self.value
        out = result.to_dict()
        if self.at == "end":
            out["at"] = dict(result.end, state=state_table(result.final_states,
                                                           max_gap=result.params["max_gap_bytes"]).to_pylist())
        elif result.at is not None:
            out["at"] = dict(result.at, state=result.at_state.to_pylist())
        if self.pinning is not None:  # --by site: "pinning"; --by phase: "phases"
            out["phases" if self.pinning["by"] == "phase" else "pinning"] = (
                self.pinning["phases"] if self.pinning["by"] == "phase" else self.pinning)
        if self.recorded is not None:
            out["recorded_totals"] = self.recorded
        return out

    def tables(self) -> dict[str, Any]:
        """windows, bins, zones, and the full state (at ``at``, else at the end); none for strides."""
        if self.strides is not None:
            return {}
        from veotrace.frag.result import state_table

        r = self.value
        state = r.at_state if r.at_state is not None else state_table(r.final_states, max_gap=r.params["max_gap_bytes"])
        return {"windows": r.windows, "bins": r.bins, "zones": r.zones, "state": state}

    def headline(self) -> list[tuple[str, Any]]:
        if self.strides is not None:
            return list(self.strides.items())[:6]
        end, s = self.value.end, self.value.summary
        e, devices = end["total"], end.get("devices") or {}
        windows = ("fragmented windows", f"{s['fragmented_windows']} of {s['windows']}")
        if len(devices) > 1:  # nothing pooled that must not be: each device's own state
            from veotrace.render.console import fmt_bytes, fmt_value

            return [*((f"device {d}", f"{fmt_bytes(v.get('reserved_bytes'))} reserved, {fmt_bytes(v.get('allocated_bytes'))} "
                       f"allocated, largest free {fmt_bytes(v.get('largest_free_bytes'))}, external fragmentation "
                       f"{fmt_value(v.get('external_frag'))}")
                      for d, v in sorted(devices.items(), key=lambda kv: int(kv[0]))), windows]
        return [("reserved at end", e.get("reserved_bytes")), ("allocated at end", e.get("allocated_bytes")),
                ("largest free block", e.get("largest_free_bytes")), ("external fragmentation", e.get("external_frag")),
                windows]

    def render(self, console, *, max_rows: int = 40) -> None:
        from veotrace.render.fragmentation import render_fragmentation, render_strides

        if self.strides is not None:
            render_strides(console, self.strides)
        else:
            render_fragmentation(console, self.value, max_rows=max_rows, at=self.at)
        if self.recorded is not None:
            from veotrace.render.profiler import render_recorded_totals

            render_recorded_totals(console, self.recorded)
        if self.pinning is not None and self.pinning["by"] == "phase":
            from veotrace.render.sites import render_phases

            if self.pinning["phases"]:
                render_phases(console, self.pinning["phases"], max_rows)
            else:
                console.print("[dim]phases:[/] the snapshot records no record_function annotations")
        elif self.pinning is not None:
            from veotrace.defaults import SITES_TOP
            from veotrace.render.sites import render_stranded

            for d, series in self.pinning["devices"].items():
                render_stranded(console, d, series, self.pinning["window_s"], min(SITES_TOP, max_rows) if max_rows > 0 else 0,
                                window_events=self.pinning.get("window_events"))


def fragmentation(paths, *, window: str | float | None = None, window_events: int | None = None,
                  threshold: float = _D.FRAGMENTATION_THRESHOLD, max_gap: str | int = size_text(_D.FRAGMENTATION_MAX_GAP_BYTES),
                  bins: str | list = DEFAULT_BINS_TEXT, zone_bytes: str | int = size_text(_D.FRAGMENTATION_ZONE_BYTES),
                  latency_col: str | None = None, at: str | float | None = None, time_unit: str = "ns",
                  skip_bad_rows: bool = False, format_hint: str | None = None, engine: str = "local", jobs: int = 1,
                  scheduler: str | None = None, workers: int | None = None, by: str | None = None,
                  site_filter: str | None = None, site_depth: int = _D.SITES_DEPTH,
                  on_progress: common.Progress = None, events_table=None) -> FragmentationRun:
    """Fragmentation over time: live/reserved bytes, free blocks, TF BFC, GMLake and ``_memory_viz`` definitions.

    Args:
        window, window_events: window length (``"5m"``, seconds) or N events per window.
        threshold: a window is fragmented when its largest free block is under this share of the free bytes
            (its external fragmentation above 1 - threshold).
        max_gap: without segments, gaps between live blocks under this size are free space of one range.
        bins: free-block size bins ``"8KiB-32KiB,256KiB-"`` or ``[(lo, hi or None), ...]``.
        zone_bytes: width of the address zones ranked by activity, or ``"segment"``.
        latency_col: the log's column of per-event latencies (microseconds).
        at: the full state at ``"end"`` or at a time after the first event (``"90s"``).
        by: ``"site"``: also the free bytes stranded at each window's end by allocation site; ``"phase"``:
            each record_function phase's stranded bytes and fragmentation at its entry and exit (a PyTorch
            snapshot; ``veotrace sites`` has the rest); ``site_filter``, ``site_depth``: the site rule.
        events_table: the ``ALLOC_EVENTS`` table of ``paths`` when it was read already (one process; ``diff``).
    """
    from veotrace.analysis.ooms import OomTap, oom_lines, with_device_free
    from veotrace.errors import AnalysisError

    paths = common.as_paths(paths)
    options, report = common.reading(time_unit, skip_bad_rows, format_hint,
                                     extra_columns=(latency_col,) if latency_col is not None else (), option="--latency-col")
    zone = zone_option(zone_bytes)
    kw = {"latency_col": latency_col, "window_s": common.seconds(window, "--window"), "window_events": common.count(window_events, "--window-events"),
          "threshold": threshold, "max_gap": common.nbytes(max_gap, "--max-gap"), "bins": parse_bins(bins),
          "zone_bytes": zone, "at_offset_s": None if at in (None, "end") else common.seconds(at, "--at")}
    strides = array_strides(paths)
    inputs = common.input_files(paths)
    if strides is not None:
        return FragmentationRun(None, [], inputs, strides=strides)
    notes: list[str] = []
    config = common.engine(engine, jobs, scheduler, workers)
    config = config if events_table is None else common.engine()
    tap = OomTap()
    try:
        result = read_and_replay(paths, options=options, report=report, on_progress=on_progress, config=config,
                                 notes=notes, ooms=tap, events=events_table, **kw)
    except AnalysisError as exc:  # a profiler trace says why in its own words (the 2021 format)
        from veotrace.runs.profiler import no_addresses_error

        raise no_addresses_error(paths, options, report) or exc from None
    chosen = {} if result.summary.get("from_snapshot") else _log_window(paths, options, result, kw, notes, events_table)
    if chosen:  # a short log: replayed again in windows that fit it (the first read told its span)
        options, report = common.reading(time_unit, skip_bad_rows, format_hint,
                                         extra_columns=(latency_col,) if latency_col is not None else ())
        tap = OomTap()
        result = read_and_replay(paths, options=options, report=report, on_progress=on_progress, config=config,
                                 notes=[], ooms=tap, events=events_table, **{**kw, "window_s": chosen["window_s"]})
        result.summary["window_choice"] = chosen
    from veotrace.runs.profiler import recorded_totals

    recorded = recorded_totals(paths, options, report, config=config)
    if recorded is not None:  # a profiler trace: its recorded totals, not what addresses alone give
        from veotrace.analysis.profiler import with_recorded

        recorded, steps = recorded
        result.windows, result.end = with_recorded(result.windows, result.end, steps)
    from veotrace.render.fragmentation import warning_lines

    ooms = with_device_free(tap.ooms(), common.oom_free(paths)) if tap.rows else []
    messages = [*common.small_input_note(paths, config), *report.messages(), *notes,
                *warning_lines(result.counters, result.end["total"], result.summary.get("segments_disagree")),
                *oom_lines(ooms)]
    result.summary["recorded_ooms"] = ooms
    result.summary.setdefault("window_choice", None)  # set when a short span chose the window
    result.summary.setdefault("from_snapshot", False)
    result.summary["read"] = report.to_dict()
    pinning = (_pinning_by(by, paths, result, options, report, common.site_rule(site_filter, site_depth))
               if by is not None else None)
    return FragmentationRun(result, messages, inputs, at=None if at is None else str(at), pinning=pinning,
                            recorded=recorded)


def _pinning_by(by: str, paths, result, options, report, rule) -> dict:
    """``--by site``: per device, the free bytes stranded at the end of each of the replay's windows, by
    site; ``--by phase``: each record_function phase's stranded bytes and fragmentation at its entry
    and exit (``attribution``)."""
    from veotrace.attribution.attribute import attribute
    from veotrace.attribution.traces import traces_of
    from veotrace.errors import UsageError
    from veotrace.sources import resolve_inputs

    inputs = resolve_inputs(paths, "alloc_events", options=options, report=report)
    window_s = result.params.get("window_s") if result.summary.get("has_time") else None
    window_events = result.params.get("window_events")
    if len(inputs) != 1 or inputs[0][1].name != "torch-snapshot" or not (window_s or window_events):
        what = "its stacks say the sites" if by == "site" else "its record_function annotations say the phases"
        raise UsageError(f"--by {by} reads one PyTorch memory snapshot ({what})",
                         hint="'veotrace sites SNAPSHOT' shows a snapshot's sites and phases; logs carry neither")
    traces = traces_of(inputs[0][0])  # streamed when the reader streams the snapshot
    if by == "phase":
        return {"by": "phase", "phases": attribute(traces, rule).phases}
    if window_s:
        devices = attribute(traces, rule, window_s=window_s, aligned=True, only_windows=True).devices
    else:  # a snapshot without times: at the end of each window of N trace entries, as its event windows
        devices = attribute(traces, rule, window_events=window_events, only_windows=True).devices
    return {"by": "site", "window_s": window_s, "window_events": None if window_s else window_events,
            "devices": {d: v.get("stranded_windows", []) for d, v in devices.items()}}


def zone_option(zone_bytes: str | int) -> str | int:
    """--zone-bytes: bytes (``"64MiB"``) or ``"segment"``."""
    if isinstance(zone_bytes, int):
        return zone_bytes
    return "segment" if zone_bytes.strip().lower() == "segment" else common.nbytes(zone_bytes, "--zone-bytes")


def parse_bins(text: str | list) -> list[tuple[int, int | None]]:
    """'8KiB-32KiB,256KiB-' -> [(8192, 32768), (262144, None)] (a list of pairs passes through).

    Raises:
        UsageError: a bin that is not LO-HI or LO-.
    """
    from veotrace.errors import UsageError

    if not isinstance(text, str):
        return [(int(lo), None if hi is None else int(hi)) for lo, hi in text]
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        lo, sep, hi = part.partition("-")
        if not sep or not lo.strip():
            raise UsageError(f"--bins expects LO-HI or LO- (e.g. 8KiB-32KiB,256KiB-), got {part!r}")
        out.append((common.nbytes(lo, "--bins"), common.nbytes(hi, "--bins") if hi.strip() else None))
    if not out:
        raise UsageError("--bins needs at least one bin, e.g. 8KiB-32KiB")
    return out


def array_strides(paths: list) -> dict | None:
    """Stride summary when every input is an array file of addresses (a .npy as `correlate` reads)."""
    from veotrace.sources.detect import detect

    files = [p for p in paths if p.is_file()]
    if not files or len(files) != len(paths):
        return None
    fmts = [detect(p) for p in files]
    if not all("arrays" in f.provides for f in fmts):
        return None
    import numpy as np

    from veotrace.frag.layout import stride_summary
    from veotrace.sources.arrays import read_array, to_addresses

    seqs = []
    for p in files:
        addr, finite = to_addresses(read_array(p), path=p)
        seqs.append(addr.reshape(addr.shape[0], -1)[:, 0][finite.reshape(finite.shape[0], -1)[:, 0]])
    return stride_summary(np.concatenate(seqs))


def read_and_replay(paths: list[Path], *, options, report, on_progress=None, config=None, notes=None, ooms=None,
                    events=None, **kw):
    """Read ``paths`` and replay them: one snapshot (seeded from its final state), or alloc/free logs.

    Args:
        ooms: an ``analysis.ooms.OomTap`` that sees the events read (the OOMs the trace recorded).
        config: an ``engine.EngineConfig``; when parallel, alloc/free logs are replayed in pieces
            (``fragmentation.parallel``). What cannot be (a snapshot, ``--at TIME``, ...) is replayed
            here, with the reason appended to ``notes``.
        events: the ``ALLOC_EVENTS`` table of ``paths`` when it was read already (``diff``).
    """
    from veotrace.errors import UsageError
    from veotrace.frag import TORCH_ROUND_BYTES, fragmentation_series
    from veotrace.frag.decode import COLUMNS
    from veotrace.frag.series import SEEDING, load_piece, seeded
    from veotrace.sources import iter_alloc_events, resolve_inputs
    from veotrace.sources.base import ReadReport
    from veotrace.sources.snapshots.converted import converted_snapshot

    resolved = ReadReport()  # what resolving skipped: reported here, or by the engine's own planning
    inputs = resolve_inputs(paths, "alloc_events", options=options, report=resolved)
    snaps = [p for p, fmt in inputs if fmt.name == "torch-snapshot" or (fmt.name == "parquet" and converted_snapshot(p))]
    notes = [] if notes is None else notes
    if config is not None and config.parallel:
        from veotrace.frag.parallel import MIN_LOCAL_JOBS

        if snaps:
            notes.append("note: a PyTorch snapshot is replayed on one process (its final state seeds the replay)")
        elif kw.get("at_offset_s") is not None:
            notes.append("note: --at TIME is replayed on one process (use --at end with --jobs/--engine)")
        elif config.kind == "local" and config.jobs < MIN_LOCAL_JOBS:
            notes.append(f"note: --jobs {config.jobs}: replayed on one process, whose reader threads run beside the "
                         f"replay (the exact split reads every piece twice and pays from --jobs {MIN_LOCAL_JOBS})")
        else:
            from veotrace.engine import run_fragmentation

            args = {k: v for k, v in kw.items() if k != "at_offset_s"}
            result, why = run_fragmentation(paths, config, options=options, report=report, on_progress=on_progress,
                                            **args)
            if result is not None:
                if ooms is not None:  # the pieces ran elsewhere: the recorded OOMs in one light read here
                    for batch in iter_alloc_events(paths, options=options, report=ReadReport(),
                                                   columns=("ts_ns", "seq", "op", "size_bytes", "stream", "device")):
                        ooms.see(batch)
                return result
            notes.append(why)
    report.merge(resolved)
    if not snaps:
        batches = common.event_batches(paths, options=options, report=report, columns=COLUMNS,
                                       on_progress=on_progress, inputs=inputs, events=events)
        return fragmentation_series(ooms.tap(batches) if ooms is not None else batches, **kw)
    if len(inputs) > 1:
        if len(snaps) == len(inputs) and not any(converted_snapshot(p) for p in snaps):
            return _replay_series(snaps, options=options, report=report, ooms=ooms, notes=notes, kw=kw)
        raise UsageError("give one PyTorch snapshot at a time (its final state seeds the replay), or a folder of "
                         "snapshot pieces of one run (veotrace.live.torch_dump)")
    path = snaps[0]
    converted = converted_snapshot(path)  # a Parquet file from 'convert': the snapshot's tables are beside it
    if kw.get("latency_col"):
        from veotrace.sources.logs.extra import check_source

        check_source(path, "parquet" if converted else "torch-snapshot", (kw["latency_col"],))
    # Every event is held for the backward seeding, but only the columns it and the window choice read
    # (32 B an event); the replay then reads the events again (a streamed snapshot from its spill file, a
    # small one from the cache), each batch with its slice of the seeded block sizes.
    # events: read already (diff reads each side once): the seeding's columns of it
    piece = load_piece(path, options=options, report=report, events=None if events is None else events.select(list(SEEDING)))
    if not piece.events.num_rows:  # a snapshot with segments but no trace: its state alone, no windows
        report.warnings.append(f"Warning: {path}: no trace entries; only the state at the snapshot is reported")
    if ooms is not None:
        ooms.see(piece.events)
    chosen = _fitting_window(piece.events, kw, notes)
    window = {"window_s": chosen["window_s"]} if chosen else {}
    initial, data = seeded(piece, options=options, columns=COLUMNS)
    del piece
    result = fragmentation_series(data, initial=initial, round_bytes=TORCH_ROUND_BYTES, **{**kw, **window})
    result.summary["from_snapshot"] = True  # its final state seeded the replay (and chose its window)
    if chosen:
        result.summary["window_choice"] = chosen
    return result


def _replay_series(paths: list[Path], *, options, report, ooms, notes: list[str], kw: dict):
    """A folder of snapshot pieces (``live.torch_dump``) replayed as one run (``frag.series``): seeded from the
    first piece's state, each piece's entries in turn. The window, when not given, is chosen from every
    piece's timestamps (a first light read), as for the one snapshot holding them all."""
    import pyarrow as pa

    from veotrace.errors import UsageError
    from veotrace.frag import TORCH_ROUND_BYTES, fragmentation_series
    from veotrace.frag.decode import COLUMNS
    from veotrace.frag.series import series
    from veotrace.sources import iter_alloc_events
    from veotrace.sources.base import ReadReport

    if kw.get("latency_col"):
        raise UsageError("--latency-col reads a log's column; snapshot pieces have none")
    chosen = {}
    if kw.get("window_s") is None and kw.get("window_events") is None:
        ts = [b.column("ts_ns") for b in iter_alloc_events(paths, options=options, report=ReadReport(),
                                                           columns=("ts_ns",))]
        chosen = _fitting_window(pa.table({"ts_ns": pa.concat_arrays(ts) if ts else pa.array([], pa.int64())}), kw,
                                 notes)
    window = {"window_s": chosen["window_s"]} if chosen else {}
    initial, data = series(paths, options=options, report=report, columns=COLUMNS,
                           on_piece=None if ooms is None else (lambda piece: ooms.see(piece.events)))
    result = fragmentation_series(data, initial=initial, round_bytes=TORCH_ROUND_BYTES, **{**kw, **window})
    result.summary["from_snapshot"] = True
    if chosen:
        result.summary["window_choice"] = chosen
    return result


def _fitting_window(events, kw: dict, notes: list[str]) -> dict:
    """A snapshot's window when the default one does not fit its span (the one window rule,
    ``timescale.fit_window``): a 0.2-3 s trace in one 300 s window has no "over time". Only when no
    window was asked for; said in ``notes``."""
    import pyarrow.compute as pc

    if kw.get("window_s") is not None or kw.get("window_events") is not None or not events.num_rows:
        return {}
    ts = events.column("ts_ns").drop_null() if events.column("ts_ns").null_count else events.column("ts_ns")
    if len(ts) < events.num_rows or not len(ts):
        return {}  # untimed events: the replay's own rule (windows of events)
    return _chosen(pc.min(ts).as_py(), pc.max(ts).as_py(), lambda: ts.to_numpy(), events.num_rows, notes)


def _log_window(paths, options, result, kw: dict, notes: list[str], events=None) -> dict:
    """A log's window when the default one gave it under MIN_WINDOWS windows (the one window rule, as
    for snapshots): its timestamps read again (one column) to choose one; {} when it fits or was given."""
    import numpy as np

    from veotrace.analysis import timescale
    from veotrace.sources.base import ReadReport

    s = result.summary
    if (kw.get("window_s") is not None or kw.get("window_events") is not None or s.get("window_choice")
            or not s.get("has_time") or s["windows"] >= timescale.MIN_WINDOWS):
        return {}
    parts = [np.asarray(b.column("ts_ns").drop_null()) for b in
             common.event_batches(paths, options=options, report=ReadReport(), columns=("ts_ns",), events=events)]
    ts = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    if not ts.size:
        return {}
    return _chosen(int(ts.min()), int(ts.max()), lambda: ts, ts.size, notes)


def _chosen(first: int, last: int, timestamps, n: int, notes: list[str]) -> dict:
    from veotrace.analysis import timescale
    from veotrace.defaults import FRAGMENTATION_WINDOW_S

    w, why = timescale.fit_window(first, last, FRAGMENTATION_WINDOW_S, timestamps, n)
    if w is None:
        return {}
    notes.append(timescale.window_note(w / timescale.NS_PER_S, why, hint="give --window or --window-events to choose"))
    return {"window_s": w / timescale.NS_PER_S, "reason": why}
