"""Run `view`: inputs -> the interactive memory timeline (``veotrace.viewer``), one lane per input and device,
written as one self-contained HTML file.

Each input (a snapshot, a log file, or a folder of rotated logs) is read as ``fragmentation`` reads it,
so what ``fragmentation`` (and for a snapshot, ``sites``) refuses, ``view`` refuses with the same line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from veotrace.defaults import SITES_DEPTH
from veotrace.runs import common
from veotrace.runs.result import RunResult

#: Evenly spaced instants with a segment map, per lane.
KEYFRAMES = 16


@dataclass
class ViewRun(RunResult):
    """``view``'s result: ``value`` is the ``ViewResult`` (``view/1``); ``html()`` the page, which
    ``_repr_html_`` shows inside a notebook."""

    command = "view"

    def headline(self) -> list[tuple[str, Any]]:
        out = []
        for lane in self.value.lanes:
            p = lane.peaks[0] if lane.peaks else None
            if p is not None:
                top = lane.groups[max(range(len(p["by_group"])), key=p["by_group"].__getitem__)]["name"] if p["by_group"] else "-"
                out.append((f"{lane.title}: peak", f"{p['bytes']:,} B, most by {top}"))
        return out

    def render(self, console, *, max_rows: int = 40) -> None:
        for k, v in self.headline():
            console.print(f"{k}: {v}")

    def html(self) -> str:
        """The whole page (what ``veotrace view -o`` writes)."""
        from veotrace.viewer.page import document

        return document(self.value.page_data(), title=", ".join(str(p) for p in self.value.params["inputs"]))

    def _repr_html_(self) -> str:
        """The page inside an iframe: a notebook runs its scripts apart from the notebook's own."""
        import html

        return (f'<iframe style="width:100%;height:900px;border:0" sandbox="allow-scripts" '
                f'srcdoc="{html.escape(self.html(), quote=True)}"></iframe>')


def view(paths, output=None, *, site_filter: str | None = None, site_depth: int = SITES_DEPTH, time_unit: str = "ns",
         skip_bad_rows: bool = False, format_hint: str | None = None, step_from: float | None = None,
         step_to: float | None = None) -> ViewRun:
    """The interactive memory timeline: per input and device, live bytes over time stacked by site (a
    PyTorch snapshot with stacks) or by size class and stream (logs), the reserved bytes over them, the
    external fragmentation per window beneath, the peaks, OOMs and phases marked, and the segment and
    block map at each peak, OOM, phase boundary, keyframe and the end; one offline HTML file.

    Args:
        paths: inputs, each its own lane(s): PyTorch snapshots, alloc/free logs, folders of rotated logs.
        output: the HTML file to write (None: only the result, e.g. for a notebook).
        site_filter, site_depth: the site rule, as ``sites``.
        step_from, step_to: seconds after the first event: the map can be stepped at every entry between (a
            snapshot; up to ``viewer.steps.MAX_STEP_EVENTS`` entries), instead of near the peak and OOMs.

    Raises:
        UsageError: bad options, or an output that is an input or a folder. VeotraceError: an input
        ``fragmentation`` (or for a snapshot, ``sites``) refuses, or an output that cannot be written.
    """
    from veotrace.outputs import check_output
    from veotrace.viewer.budget import MAP_ROWS_BUDGET, PAGE_BYTES, POINTS_BUDGET  # the page's one budget

    if (step_from is None) != (step_to is None) or (step_from is not None and not 0 <= step_from < step_to):
        from veotrace.errors import UsageError

        raise UsageError("--from and --to go together, 0 <= FROM < TO (seconds after the first event)",
                         hint="e.g. veotrace view run.pickle --from 1.9 --to 2.1 -o view.html")
    step_range = None if step_from is None else (step_from, step_to)
    paths = common.as_paths(paths)
    inputs = common.input_files(paths)
    if output is not None:
        output = Path(output)
        _check_target(output)
        check_output(output, inputs)
    rule = common.site_rule(site_filter, site_depth)
    options, report = common.reading(time_unit, skip_bad_rows, format_hint)
    per_input = POINTS_BUDGET // max(1, len(paths))
    lanes, notes = [], []
    for given in paths:
        lanes += _lanes_of(given, rule, options, report, per_input, step_range, notes)
    from veotrace.errors import printable
    from veotrace.viewer.budget import fit
    from veotrace.viewer.model import ViewResult
    from veotrace.viewer.page import data_json

    result = ViewResult(lanes, {"inputs": [printable(p) for p in paths], "site_filter": rule.internal,
                                "site_depth": rule.depth, "points_budget": POINTS_BUDGET,
                                "map_rows_budget": MAP_ROWS_BUDGET, "page_bytes": PAGE_BYTES,
                                "step_from": step_from, "step_to": step_to}, notes)
    fit(result, lambda r: len(data_json(r.page_data())))
    run = ViewRun(result, report.messages(), inputs)
    if output is not None:
        from veotrace.outputs import write_bytes

        data = run.html().encode("utf-8")
        write_bytes(data, output, inputs=inputs)
        run.closing.append(f"Wrote {output} ({len(data) / 2**20:.2f} MiB, {len(lanes)} lane{'s' * (len(lanes) != 1)})")
    return run


def _check_target(output: Path) -> None:
    from veotrace.plot.base import check_writable

    check_writable(output, "view", "a file name such as view.html")


def _lanes_of(given, rule, options, report, budget: int, step_range=None, notes: list | None = None) -> list:
    """The lanes of one input: a snapshot's devices (``view.snapshot``), or a log's (``view.logs``)."""
    from veotrace.sources import resolve_inputs

    found = resolve_inputs([given], "alloc_events", options=options, report=report)
    snaps = [p for p, fmt in found if fmt.name == "torch-snapshot"]
    from veotrace.errors import printable

    name = printable(Path(str(given)).name)  # a name that is not UTF-8 or holds control characters, escaped
    if snaps:
        if len(found) != 1:
            from veotrace.errors import UsageError

            raise UsageError(f"{given}: give one PyTorch snapshot per input (each is its own lane)",
                             hint="Name each snapshot on the command line")
        from veotrace.viewer.snapshot import snapshot_lanes

        return snapshot_lanes(snaps[0], rule, title=name, points_budget=budget, step_range=step_range)
    if step_range is not None:
        from veotrace.errors import UsageError

        raise UsageError(f"{given}: --from/--to step a PyTorch snapshot's entries; a log's map is fragmentation's at "
                         "its instants", hint="Drop --from/--to, or give a snapshot")
    return _log_lanes(given, name, options, report, budget, found, [] if notes is None else notes)


def _log_lanes(given, name: str, options, report, budget: int, found=(), notes: list | None = None) -> list:
    """A log's lanes: the bands from its events, then ``fragmentation``'s own replay of it for the maps
    at the lanes' instants and the fragmentation beneath (so each is ``fragmentation --at`` there).

    A profiler trace (or a folder of ranks) is read once per file, with its spans (``viewer.profiler``): the
    lanes (one per rank and GPU, then each rank's CPU apart), the replay and the ops on hover all take that one
    read. Events without addresses (a 2021 profiler trace, a log without an address column) are drawn as the
    running sum of their sizes, without maps; one line in ``notes`` (the page) and on stderr says so."""
    from veotrace.sources.base import ReadReport
    from veotrace.viewer import logs
    from veotrace.viewer import profiler as prof

    profiler = bool(found) and all(fmt.name == "kineto" for _, fmt in found)
    got = prof.read(found, options, report) if profiler else None
    devices = logs.replay_log(common.event_batches([given], options=options, report=ReadReport(), columns=logs.COLUMNS,
                                                   events=None if got is None else got.events))
    cpu = logs.replay_log(got.cpu) if got is not None else {}
    reserved = prof.with_totals({**devices, **cpu}, got.lanes) if got is not None else {}
    everyone = {**devices, **cpu}
    t0 = min((int(dv.entries.t[dv.entries.t >= 0].min()) for dv in everyone.values() if (dv.entries.t >= 0).any()),
             default=None)
    lanes, instants = {}, {}
    share = budget // max(1, len(everyone))
    for d, dv in everyone.items():
        facts = got.lanes.get(d) if got is not None else None
        lane, _ = logs.log_lane(dv, title=f"{name}, {facts.text if facts else f'device {d}'}", t0_ns=t0,
                                points_budget=share, what="a profiler trace's [memory] event" if profiler else
                                "an alloc/free log")
        lanes[d] = lane
        if d in reserved:
            if d not in cpu:  # the CPU's Total Reserved: nothing a caching allocator holds
                lane.reserved = np.r_[reserved[d][:1], reserved[d]][lane.state]
            lane.notes.append(prof.totals_note(got.lanes[d].live_before, gpu=d not in cpu,
                                               mismatches=got.lanes[d].mismatches))
        if d in cpu:
            lane.notes.append("the CPU's memory events (Device Type 0), kept apart from every GPU's numbers: no segment "
                              "map (the replay and fragmentation are the GPUs')")
        elif dv.addressed:
            for t, label in logs.instants_ns(lane, dv.entries, KEYFRAMES).items():
                instants.setdefault(t, {})[d] = (label, dv.entries)
    placed = {d for d, dv in devices.items() if dv.addressed}
    if placed:
        _add_maps(given, lanes, placed, instants, t0, options, report, None if got is None else got.events)
    if len(placed) < len(devices):
        line = (f"{name}: its events have no addresses: the lanes show the live bytes over time (the running sum of "
                f"their {'Bytes' if profiler else 'sizes'}); the memory map (blocks, segments, fragmentation) needs "
                "addresses, which this input lacks")
        notes.append(line)
        report.warnings.append(f"Note: {line}")
    if got is not None and not devices and cpu:
        line = f"{name}: the trace holds no GPU memory events: its lanes are the CPU's (Device Type 0), with no map"
        notes.append(line)
        report.warnings.append(f"Note: {line}")
    if got is not None:
        prof.add_ops(lanes, t0, got.ops)
    return [lanes[d] for d in sorted(devices)] + [lanes[d] for d in sorted(cpu, reverse=True)]


def _add_maps(given, lanes: dict, placed: set, instants: dict, t0, options, report, events) -> None:
    """The maps at the lanes' instants and the fragmentation beneath, from ``fragmentation``'s own replay (the
    devices whose events have addresses, ``placed``)."""
    from veotrace.runs.fragmentation import read_and_replay
    from veotrace.viewer import logs
    from veotrace.viewer.maps import replay_map

    kw = {"max_gap": None}

    def on_at(at_ns: int, d: int, state) -> None:
        got = instants.get(at_ns, {}).get(d)
        if got is None or d not in lanes:
            return
        label, e = got
        state = state.copy()  # the replay goes on: this instant's own copy, made into rows once the budget is known
        lanes[d].maps.append({"label": label, "x": (at_ns - t0) / 1e9, "state": int((e.t <= at_ns).sum()),
                              "fragmentation_at": f"{(at_ns - t0) / 1e9:.9f}s",
                              "make": lambda rows, st=state: replay_map(st, max_gap=kw["max_gap"], threshold=kw["threshold"],
                                                                       max_rows=rows)})

    from veotrace.frag.metrics import DEFAULT_MAX_GAP, DEFAULT_THRESHOLD

    kw.update(max_gap=DEFAULT_MAX_GAP, threshold=DEFAULT_THRESHOLD)
    result = read_and_replay([given], options=options, report=report, at_each=sorted(instants), on_at=on_at,
                             events=events)
    for d, lane in lanes.items():
        if d not in placed:
            continue
        logs.add_windows(lane, result.windows, d, t0)
        st = result.final_states.get(d)
        if st is not None:
            n = lane.entries
            lane.maps.append({"label": "end", "x": float(lane.x[-1]) if lane.x.size else 0.0, "state": n,
                              "fragmentation_at": "end",
                              "make": lambda rows, st=st: replay_map(st, max_gap=kw["max_gap"], threshold=kw["threshold"],
                                                                     max_rows=rows)})
        lane.maps.sort(key=lambda m: m["state"])
