"""Run `categories`: one export_memory_timeline file (either form) -> its categories over time (``analysis.categories``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from veotrace.runs import common
from veotrace.runs.result import RunResult


@dataclass
class CategoriesRun(RunResult):
    """``categories``' result: ``value`` is the analysis' ``CategoriesResult``."""

    command = "categories"

    def to_dict(self) -> dict:
        return self.value.to_dict()

    def tables(self) -> dict[str, Any]:
        return {"windows": self.value.export_table()}

    def headline(self) -> list[tuple[str, Any]]:
        return self.value.headline()

    def render(self, console, *, max_rows: int = 40) -> None:
        from veotrace.render.categories import render_categories

        render_categories(console, self.value, max_rows=max_rows)


def categories(paths, *, window: str | float | None = None, window_events: int | None = None,
               skip_bad_rows: bool = False, format_hint: str | None = None) -> CategoriesRun:
    """The bytes of each of the profiler's memory categories over time, from one ``export_memory_timeline`` file.

    Args:
        paths: one timeline (one device): the raw form (``*.raw.json.gz``) or the ``.json`` / ``.json.gz``
            points; a file or a URL.
        window: window length (``"10ms"``, ``"1s"``, or seconds; default: 300 s, or one chosen from the data
            when that gives under 20 windows).
        window_events: windows of N consecutive points (a point: the state after every row at one time).

    Raises:
        UsageError: impossible options, or more than one timeline. VeotraceError: unreadable input.
    """
    from veotrace.analysis.categories import categories_over_time
    from veotrace.errors import AnalysisError, UsageError
    from veotrace.sources import read_table, resolve_inputs
    from veotrace.sources.base import ReadReport
    from veotrace.sources.kineto.timeline import series

    paths = common.as_paths(paths)
    options, report = common.reading(skip_bad_rows=skip_bad_rows, format_hint=format_hint)
    if window_events is not None and window is not None:
        raise UsageError("--window-events counts points, not time: leave out --window")
    inputs = resolve_inputs(paths, "memory_timeline", options=options, report=ReadReport())  # the read reports
    if len(inputs) != 1:
        raise UsageError(f"categories reads one memory timeline (one device) at a time; got {len(inputs)}",
                         hint="Name one export_memory_timeline file")
    table = read_table([inputs[0][0]], "memory_timeline", options=options, report=report)
    try:
        result = categories_over_time(series(table), window_s=common.seconds(window, "--window"),
                                      window_events=common.count(window_events, "--window-events"))
    except AnalysisError as exc:  # about the file's times: name it
        exc.path = exc.path or str(inputs[0][0])
        raise
    result.summary["read"] = report.to_dict()
    result.summary["file"] = str(inputs[0][0])
    return CategoriesRun(result, [*report.messages(), *result.notes], common.input_files(paths))

