"""Run `entropy`: read alloc/free events (one process, ``--jobs`` or Dask) -> size-class entropy per window and its trend."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from veotrace.defaults import ENTROPY_MAX_CLASS, ENTROPY_MIN_CLASS, ENTROPY_OPS, SITES_DEPTH
from veotrace.runs import common
from veotrace.runs.result import RunResult


@dataclass
class EntropyRun(RunResult):
    """``entropy``'s result: ``value`` is the analysis' ``EntropyResult``."""

    command = "entropy"

    def tables(self) -> dict[str, Any]:
        return {"windows": self.value.export_table()}

    def headline(self) -> list[tuple[str, Any]]:
        return self.value.headline()

    def render(self, console, *, max_rows: int = 40) -> None:
        from veotrace.render.entropy import render_entropy

        render_entropy(console, self.value, max_rows=max_rows)


def entropy(paths, *, window: str | float | None = None, step: str | float | None = None,
            window_events: int | None = None, ops: str | list[str] | None = None,
            min_class: int = ENTROPY_MIN_CLASS, max_class: int = ENTROPY_MAX_CLASS, auto_classes: bool = False,
            segments: str | list[float] | None = None, by: str | None = None, device: int | None = None,
            time_unit: str = "ns", skip_bad_rows: bool = False, format_hint: str | None = None,
            site_filter: str | None = None, site_depth: int = SITES_DEPTH, save_baseline=None, engine: str = "local", jobs: int = 1, scheduler: str | None = None,
            workers: int | None = None, on_progress: common.Progress = None, events_table=None) -> EntropyRun:
    """Entropy of allocation size classes per window, its trend (slope, Theil-Sen, Kendall) and segments.

    Args:
        paths: files, folders of rotated logs, Parquet from ``convert``, or URLs.
        window, step: window length and step: ``"5m"``, ``"300s"``, or seconds (default: 300 s, or one
            chosen from the data when that gives under 20 windows; step = window).
        window_events: windows of N consecutive counted events instead of time windows.
        ops: the ops counted (``"alloc"`` or ``["alloc", "free"]``).
        min_class, max_class: the size classes counted (sizes past them fall in the bottom or top class);
            ``auto_classes``: classes from the data instead, none clamped (the same for any two runs).
        segments: split the trend at these times since the first window (``"48,120"`` hours, or a list).
        by, device: also one series per ``"device"``, ``"stream"``, ``"site"`` or ``"phase"`` (a snapshot's
            allocation sites or record_function phases); only this device.
        site_filter, site_depth: the site rule of ``by="site"`` (as :func:`veotrace.sites` takes it).
        save_baseline: also write the baseline ``gate`` compares with to this file.
        engine, jobs, scheduler, workers: where to run (``jobs > 1`` or ``engine="dask"`` splits the inputs).
        events_table: the ``ALLOC_EVENTS`` table of ``paths`` when it was read already (one process; ``diff``).

    Raises:
        UsageError: impossible options. VeotraceError: unreadable input.
    """
    from veotrace.analysis.entropy.entropy import COLUMNS, compute_entropy
    from veotrace.analysis.groups import columns_for
    from veotrace.analysis.ops import OpsMissing
    from veotrace.errors import UsageError

    paths = common.as_paths(paths)
    options, report = common.reading(time_unit, skip_bad_rows, format_hint)
    config = common.engine(engine, jobs, scheduler, workers)
    if window_events is not None and (window is not None or step is not None):
        raise UsageError("--window-events counts events, not time: leave out --window and --step")
    params = dict(window_s=common.seconds(window, "--window"), step_s=common.seconds(step, "--step"),
                  window_events=common.count(window_events, "--window-events"), ops=common.ops_list(ops, ENTROPY_OPS), min_class=min_class,
                  max_class=max_class, auto_classes=auto_classes, **common.grouping(by, device))
    hours = common.hours_list(segments)
    columns = COLUMNS + columns_for(params.get("by"), device)
    names = None
    try:
        if common.keyed(params.get("by")):  # rows keyed by site or phase (a snapshot, its Parquet file, tagged logs), one process
            batches, names = common.keyed_read(paths, params["by"], options=options, report=report, columns=columns,
                                               on_progress=on_progress, rule=common.site_rule(site_filter, site_depth))
            result = compute_entropy(batches, **params, segments=hours)
            common.name_groups(result.groups, names)
        elif config.parallel and events_table is None:  # pieces of the inputs as tasks; the same partials, merged
            from veotrace.engine import run_entropy

            result = run_entropy(paths, config, options=options, report=report, segments=hours, columns=columns,
                                 on_progress=on_progress, **params)
        else:
            batches = common.event_batches(paths, options=options, report=report, on_progress=on_progress,
                                           columns=columns, events=events_table)
            result = compute_entropy(batches, **params, segments=hours)
    except OpsMissing as exc:  # the default ops, which the user never named
        raise exc if ops is not None else exc.as_default("entropy") from None
    run = EntropyRun(result, [*common.small_input_note(paths, config), *report.messages(), *result.summary["notes"]],
                     common.input_files(paths))
    result.summary["read"] = report.to_dict()
    if save_baseline is not None:
        from veotrace.gating.baseline import save_entropy_baseline

        save_entropy_baseline(save_baseline, result, paths=paths, time_unit=getattr(time_unit, "value", time_unit),
                              inputs=run.inputs)
    return run
