"""Comparison layer: the run of `diff` (registered as such): two runs (files, folders of rotated logs, Parquet from ``convert``) -> their deltas, sites and aligned series.

The diff composes the single-run commands' runs, so its own run lives here, above them (as the report's does), rather than in ``veotrace.runs``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from veotrace.defaults import DIFF_ALIGN
from veotrace.runs import common
from veotrace.runs.result import RunResult


@dataclass
class DiffRun(RunResult):
    """``diff``'s result: ``value`` is the ``comparison.diff.DiffResult`` (``diff/1``)."""

    command = "diff"

    def tables(self) -> dict[str, Any]:
        import pyarrow as pa

        from veotrace.schemas.diff import DIFF_DELTAS

        rows = [{**{k: d[k] for k in ("name", "device", "unit", "relative", "significant")},
                 **{k: None if d[k] is None else float(d[k]) for k in ("before", "after", "change")},
                 **{k: (d["test"] or {}).get(k) for k in ("ci_low", "ci_high", "p_value")}} for d in self.value.deltas]
        return {"deltas": pa.Table.from_pylist(rows, schema=DIFF_DELTAS), "series": self.value.series}

    def headline(self) -> list[tuple[str, Any]]:
        from veotrace.render.diff import delta_cells

        if self.value.same:
            return [("difference", "none: every delta is zero")]
        changed = [d for d in self.value.deltas if d["change"]]
        return [(f"{d['label']}" + ("" if d["device"] is None else f" (device {d['device']})"),
                 " -> ".join(delta_cells(d)[:2]) + f" ({delta_cells(d)[2]})") for d in changed[:8]]

    def render(self, console, *, max_rows: int = 40) -> None:
        from veotrace.render.diff import render_diff

        render_diff(console, self.value, max_rows=max_rows)

    def markdown(self) -> str:
        """The result as markdown for a pull-request comment (``--format markdown``)."""
        from veotrace.render.diff import markdown

        return markdown(self.value)


def diff(before, after, *, align: str = DIFF_ALIGN, fail_on: str | list[str] | None = None, time_unit: str = "ns",
         skip_bad_rows: bool = False, format_hint: str | None = None) -> DiffRun:
    """Two runs side by side: headline deltas (entropy mean and slope, fragmentation at the peak and at the
    end, peak reserved and allocated per device, device allocations, recorded OOMs, bursts, the size-class
    distribution, allocator settings) with run-to-run noise tests where windows stand behind them, the sites
    whose bytes at the peak changed, and both runs' series on one axis.

    Args:
        before, after: each a file, a folder of rotated logs or a Parquet file from ``convert``: the same
            kind on both sides, or a PyTorch snapshot against a log.
        align: the series' axis: ``"time"`` since each run's first event, ``"step"`` (record_function
            steps of a snapshot), ``"events"`` (untimed traces).
        fail_on: conditions that make the run exit 3: ``"peak_reserved>+5%"``, ``"entropy_mean>0.1"``.

    Raises:
        UsageError: a condition that does not parse, an alignment the sides cannot give.
        VeotraceError: a side missing, unreadable, or of a kind the other does not compare with.
    """
    from veotrace.comparison import conditions
    from veotrace.comparison.diff import compare

    checks = conditions.parse(fail_on)  # before any work
    (b,), (a,) = common.as_paths(before), common.as_paths(after)
    result = compare(b, a, align=align, conditions=checks, time_unit=time_unit, skip_bad_rows=skip_bad_rows,
                     format_hint=format_hint)
    messages = [*(f"BEFORE: {m}" for m in result.before.side.report.messages()),
                *(f"AFTER: {m}" for m in result.after.side.report.messages()), *result.notes]
    closing = [("No difference: every delta is zero" + (", on two different devices (see the note above)"
                                                          if result.devices.get("hardware_differs") else ""))
               if result.same else ""]
    failed = [f for f in result.fail_on if f["failed"]]
    closing += [f"--fail-on {f['condition']}: failed ({', '.join(f['deltas'])})" for f in failed]
    closing += [f"--fail-on {f['condition']}: not evaluated, neither side has that number"
                for f in result.fail_on if not f["evaluated"]]
    return DiffRun(result, messages, common.input_files([b, a]), exit_code=3 if failed else 0,
                   closing=[c for c in closing if c])
