"""Run `bursts`: alloc/free events (one process, ``--jobs`` or Dask) or an Nsight export's kernel launches -> bursts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from veotrace.defaults import BURSTS_GAP_MS, BURSTS_MIN_EVENTS, BURSTS_OPS, SITES_DEPTH
from veotrace.runs import common
from veotrace.runs.result import RunResult


@dataclass
class BurstsRun(RunResult):
    """``bursts``' result: ``value`` is the analysis' ``BurstResult``."""

    command = "bursts"

    def tables(self) -> dict[str, Any]:
        return {"bursts": self.value.export_table()}

    def headline(self) -> list[tuple[str, Any]]:
        s = self.value.summary
        share = s["share_in_bursts"]
        return [("bursts", s["bursts"]), ("events counted", s["events_counted"]),
                ("share in bursts", None if share is None else f"{100 * share:.1f}%"),
                ("bytes in bursts", s["bytes_in_bursts"])]

    def render(self, console, *, max_rows: int = 40) -> None:
        from veotrace.render.bursts import render_bursts

        render_bursts(console, self.value, max_rows=max_rows)


def bursts(paths, *, gap: str | float = f"{BURSTS_GAP_MS:g}ms", events: str = "alloc", ops: str | list[str] | None = None,
           min_events: int = BURSTS_MIN_EVENTS, by: str | None = None, device: int | None = None,
           time_unit: str = "ns", skip_bad_rows: bool = False, format_hint: str | None = None,
           site_filter: str | None = None, site_depth: int = SITES_DEPTH,
           engine: str = "local", jobs: int = 1, scheduler: str | None = None, workers: int | None = None,
           on_progress: common.Progress = None, events_table=None) -> BurstsRun:
    """Burst windows: maximal runs of events closer than ``gap``; sizes, durations, gaps and rates.

    Args:
        gap: ``"5ms"``, ``"200us"``, or milliseconds as a number.
        events: ``"alloc"`` (alloc/free events) or ``"kernels"`` (kernel launches of an Nsight Systems export).
        ops: the ops counted with ``events="alloc"``.
        min_events: fewest events in a burst.
        by, device, site_filter, site_depth, engine, jobs, scheduler, workers, events_table: as for :func:`veotrace.entropy`.
    """
    from veotrace.analysis.bursts import bursts as analysis
    from veotrace.analysis.groups import columns_for
    from veotrace.analysis.ops import OpsMissing
    from veotrace.errors import UsageError
    from veotrace.sources import read_table

    paths = common.as_paths(paths)
    kind = getattr(events, "value", events)
    if kind not in ("alloc", "kernels"):
        raise UsageError(f"--events must be alloc or kernels, got {kind!r}")
    options, report = common.reading(time_unit, skip_bad_rows, format_hint)
    gap_ms = common.seconds(gap, "--gap", bare_unit="ms") * 1e3  # ms, the analysis' unit
    analysis.check_params(gap_ms, min_events)
    grouped = common.grouping(by, device)
    config = common.engine(engine, jobs, scheduler, workers)
    notes = []
    if kind == "kernels":
        if ops is not None:
            raise UsageError("--ops applies to --events alloc only")
        if config.parallel:
            notes.append("note: --events kernels reads the Nsight export on one process (--jobs and --engine split "
                         "alloc/free logs)")
        result = analysis.compute_kernel_bursts(read_table(paths, "gpu_activity", options=options, report=report),
                                                gap_ms=gap_ms, min_events=min_events, **grouped)
    else:
        columns = analysis.COLUMNS + columns_for(grouped.get("by"), device)
        try:
            if common.keyed(grouped.get("by")):  # rows keyed by site or phase (a snapshot, its Parquet file, tagged logs)
                batches, names = common.keyed_read(paths, grouped["by"], options=options, report=report,
                                                   columns=columns, on_progress=on_progress,
                                                   rule=common.site_rule(site_filter, site_depth))
                result = analysis.compute_bursts(batches, gap_ms=gap_ms, min_events=min_events,
                                                 ops=common.ops_list(ops, BURSTS_OPS), **grouped)
                common.name_groups(result.groups, names)
            elif config.parallel and events_table is None:  # pieces of the inputs as tasks; the same runs, merged
                from veotrace.engine import run_bursts

                result = run_bursts(paths, config, options=options, report=report, gap_ms=gap_ms,
                                    min_events=min_events, ops=common.ops_list(ops, BURSTS_OPS),
                                    on_progress=on_progress, columns=columns, **grouped)
            else:
                batches = common.event_batches(paths, options=options, report=report, on_progress=on_progress,
                                               columns=columns, events=events_table)
                result = analysis.compute_bursts(batches, gap_ms=gap_ms, min_events=min_events,
                                                 ops=common.ops_list(ops, BURSTS_OPS), **grouped)
        except OpsMissing as exc:  # the default ops, which the user never named
            raise exc if ops is not None else exc.as_default("bursts") from None
    if kind == "alloc":
        notes += common.small_input_note(paths, config)
    run = BurstsRun(result, [*notes, *report.messages()], common.input_files(paths))
    result.summary["read"] = report.to_dict()
    return run
