"""Run `l2-breakpoints`: Nsight Compute metrics -> the per-kernel L2 picture and the launches where L2 changes regime."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from veotrace.defaults import CHANGEPOINT_MIN_SIZE, CHANGEPOINT_PENALTY_SCALE, L2_RULES
from veotrace.runs import common
from veotrace.runs.result import RunResult

_RULES_TEXT = ",".join(L2_RULES)


@dataclass
class L2Run(RunResult):
    """``l2-breakpoints``' result: ``value`` is the ``L2Result``; ``table`` the metrics read (for the picture)."""

    command = "l2-breakpoints"
    table: Any = field(default=None, repr=False)

    def tables(self) -> dict[str, Any]:
        return {"breakpoints": self.value.breakpoints}

    def headline(self) -> list[tuple[str, Any]]:
        res = self.value
        return [("metric", res.params["metric"]), ("kernels", len(res.kernels)),
                ("analysed", sum(bool(k["analysed"]) for k in res.kernels)), ("breakpoints", res.breakpoints.num_rows)]

    def render(self, console, *, max_rows: int = 40) -> None:
        from veotrace.render.l2 import render_l2

        render_l2(console, self.value, max_rows=max_rows)

    def plot_data(self) -> dict:
        return {"table": self.table}


def l2_breakpoints(paths, *, metric: str | None = None, kernel: str | None = None, min_size: int = CHANGEPOINT_MIN_SIZE,
                   penalty_scale: float = CHANGEPOINT_PENALTY_SCALE, min_jump: str | float | None = None,
                   rules: str | list[str] = _RULES_TEXT, skip_bad_rows: bool = False,
                   format_hint: str | None = None) -> L2Run:
    """Per-kernel L2 picture and the launches where an L2 metric changes regime (Nsight Compute CSV or .ncu-rep).

    Args:
        metric: metric name or ncu label (default: L2 hit rate, else L2 throughput).
        kernel: only kernels whose name matches this regular expression.
        min_size: fewest launches in a regime.
        penalty_scale: multiplier of the BIC penalty.
        min_jump: smallest jump kept: a number in the metric's unit, or ``"10%"`` of the level before.
        rules: rule presets to annotate breaks with (``"all"``, ``"none"``, or names).
    """
    from veotrace.analysis.l2.l2 import find_breakpoints
    from veotrace.sources import read_table

    paths = common.as_paths(paths)
    jump, relative = parse_min_jump(min_jump)
    options, report = common.reading("ns", skip_bad_rows, format_hint)
    table = read_table(paths, "ncu_metrics", options=options, report=report)
    result = find_breakpoints(table, metric=metric, kernel=kernel, min_size=min_size, penalty_scale=penalty_scale,
                              min_jump=jump, min_jump_relative=relative,
                              rules=rules.split(",") if isinstance(rules, str) else list(rules))
    run = L2Run(result, [*report.messages(), *(f"Note: {n}" for n in result.notes)], common.input_files(paths),
                table=table)
    result.params["read"] = report.to_dict()
    return run


def parse_min_jump(text: str | float | None) -> tuple[float | None, bool]:
    """(value, relative) of a --min-jump value: '1.5' in the metric's unit, '10%' relative."""
    from veotrace.errors import UsageError

    if text is None:
        return None, False
    if not isinstance(text, str):
        return float(text), False
    raw = text.strip()
    relative = raw.endswith("%")
    try:
        value = float(raw.rstrip("%").strip())
    except ValueError:
        raise UsageError(f"--min-jump {text!r} is not a number", hint="e.g. --min-jump 2 (metric unit) or --min-jump 10%") from None
    return value, relative
