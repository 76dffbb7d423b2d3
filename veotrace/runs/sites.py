"""Run `sites`: a PyTorch snapshot -> who holds each device's peaks, the end state and stranded free space, by site and phase."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from veotrace.defaults import SITES_DEPTH
from veotrace.runs import common
from veotrace.runs.result import RunResult


@dataclass
class SitesRun(RunResult):
    """``sites``' result: ``value`` is the ``SitesResult`` (``sites/1``)."""

    command = "sites"

    def tables(self) -> dict[str, Any]:
        from veotrace.attribution.tables import sites_table

        return {"sites": sites_table(self.value)}

    def headline(self) -> list[tuple[str, Any]]:
        out = []
        for d, v in self.value.devices.items():
            peak = v["peaks"].get("allocated")
            if peak and peak["sites"]:
                top = peak["sites"][0]
                out.append((f"device {d}: top site at peak allocated",
                            f"{top['site']} ({100 * (top['share'] or 0):.0f}% of {peak['bytes']:,} B)"))
            pin = v["pinning"]["sites"]
            if pin:
                out.append((f"device {d}: strands most free bytes", f"{pin[0]['site']} ({pin[0]['stranded_bytes']:,} B)"))
        return out

    def render(self, console, *, max_rows: int = 40) -> None:
        from veotrace.render.sites import render_sites

        render_sites(console, self.value, max_rows=max_rows)


def sites(paths, *, site_filter: str | None = None, site_depth: int = SITES_DEPTH, at: str | float | None = None,
          window: str | float | None = None, format_hint: str | None = None, by: str | None = None,
          engine: str = "local", jobs: int = 1, scheduler: str | None = None, workers: int | None = None) -> SitesRun:
    """Who allocated what: each device's peaks (allocated, requested, reserved), the end state and the
    free bytes stranded in segments, by allocation site (first frame outside PyTorch and Python), and
    the phases from the snapshot's record_function annotations.

    Args:
        paths: one PyTorch memory snapshot (``_dump_snapshot``), with stacks for sites.
        site_filter: a regex on a frame's file marking it internal (default: PyTorch, the standard
            library, C/C++ frames).
        site_depth: user frames that name a site (2: ``a.py:10 f < b.py:20 g``).
        at: also the free bytes stranded at this time after the first event (``"1.5s"``, seconds).
        window: the stranded bytes at the end of each window of this length (default: the one window
            rule of every timed analysis, ``timescale.fit_window``).
        by: a PyTorch profiler trace (or a folder of one per rank): group by the ``op`` (default), Python
            ``frame``, ``module`` or GPU ``kernel`` enclosing each allocation (``runs.profiler``).
        engine, jobs, scheduler, workers: where a folder of profiler traces has its ranks read (the same answer).

    Raises:
        UsageError: bad options. VeotraceError: not a snapshot, or unreadable.
    """
    from veotrace.attribution.attribute import attribute
    from veotrace.attribution.traces import traces_of
    from veotrace.errors import AnalysisError, UsageError
    from veotrace.sources import resolve_inputs

    rule = common.site_rule(site_filter, site_depth)
    paths = common.as_paths(paths)
    options, report = common.reading("ns", False, format_hint)
    config = common.engine(engine, jobs, scheduler, workers)
    from veotrace.runs.profiler import kineto_inputs, profiler_sites

    profiled = kineto_inputs(paths, options, report)
    if profiled:
        return profiler_sites(paths, profiled, by=by or "op", options=options, report=report, config=config)
    if by is not None:
        raise UsageError("--by is for PyTorch profiler traces (op, frame, module, kernel)",
                         hint="A snapshot's sites come from its stacks: leave out --by")
    inputs = resolve_inputs(paths, "segments", options=options, report=report)
    snaps = [p for p, fmt in inputs if fmt.name == "torch-snapshot"]
    if len(snaps) != 1 or len(inputs) != 1:
        raise UsageError("sites reads one PyTorch memory snapshot (torch.cuda.memory._dump_snapshot())",
                         hint="Logs and Parquet files carry no stacks yet; give the snapshot itself")
    traces = traces_of(snaps[0])  # streamed when the reader streams the snapshot
    snap = traces.snap
    at_s = common.seconds(at, "--at")
    if at_s is not None and not snap.has_time:
        raise UsageError(f"--at needs times, and {snaps[0]} records no time_us",
                         hint="Leave out --at: the end state's stranded bytes are shown without it")
    window_s, why = common.seconds(window, "--window"), None
    if window_s is None and snap.has_time:
        window_s, why = _window(traces)
    try:
        result = attribute(traces, rule, at_s=at_s, window_s=window_s)
    except AnalysisError as exc:  # a bound of the replay (too many windows): the snapshot is the file concerned
        exc.path = exc.path or str(snaps[0])
        raise
    notes = [*report.messages(), *(f"Note: {n}" for n in result.summary["notes"])]
    if config.parallel:  # --jobs/--engine read a folder of profiler traces' ranks on the engine, not a snapshot
        notes.append("Note: a snapshot is read on one process (--jobs/--engine read the ranks of profiler traces)")
    if why is not None:
        from veotrace.analysis.timescale import window_note

        notes.append(window_note(window_s, why))
    result.params["window_choice"] = {"auto": why is not None, "reason": why}
    return SitesRun(result, notes, common.input_files(paths))


def _window(traces) -> tuple[float, str | None]:
    """The stranded-bytes windows of a timed snapshot: the one window rule over its trace's times."""
    from veotrace.analysis import timescale
    from veotrace.defaults import FRAGMENTATION_WINDOW_S

    ts = traces.times_us() * 1000
    if not ts.size:
        return FRAGMENTATION_WINDOW_S, None
    w, why = timescale.fit_window(int(ts.min()), int(ts.max()), FRAGMENTATION_WINDOW_S, lambda: ts, ts.size)
    return (w / timescale.NS_PER_S if w else FRAGMENTATION_WINDOW_S), why
