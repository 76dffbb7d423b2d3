"""Terminal view of an L2 breakpoint result: parameters, per-kernel series, rule status, breakpoints."""

from __future__ import annotations

from rich.console import Console

from veotrace.render.console import rows_table, summary_table

#: Short rule names for the breakpoint table (the Rules table gives the full ones).
SHORT = {"l2_throughput_low": "thr<65%", "bytes_per_request_drop": "B/req↓", "read_sector_slope_rise": "rd-slope↑"}


def render_l2(console: Console, result, *, max_rows: int) -> None:
    """Draw ``result`` (an L2Result) on ``console``."""
    p = result.params
    bps = result.breakpoints.to_pylist()
    console.print(summary_table("L2 breakpoints", [
        ("metric", p["metric"]), ("kernels", len(result.kernels)),
        ("kernels analysed", sum(k["analysed"] for k in result.kernels)), ("min size", p["min_size"]),
        ("penalty scale", p["penalty_scale"]), ("breakpoints", len(bps))]))
    number = {k["kernel"]: i for i, k in enumerate(result.kernels)}
    kernels = [{**k, "k": i, "note": k.get("note", "")} for i, k in enumerate(result.kernels)]
    table, footer = rows_table("Kernels", kernels, [
        ("k", "#"), ("kernel", "kernel"), ("launches", "launches"), ("missing_values", "n/a"), ("mean", "mean"),
        ("sigma", "noise sigma"), ("breakpoints", "breaks"), ("note", "note")], max_rows=max_rows)
    console.print(table)
    if footer:
        console.print(footer)
    if result.rules:
        rules = [{**r, "short": SHORT.get(r["name"], r["name"])} for r in result.rules]
        table, _ = rows_table("Rules", rules, [("short", "rule"), ("status", "status"), ("fired", "fired"),
                                               ("description", "what")], max_rows=0)
        console.print(table)
    rows = [{**b, "k": number[b["kernel"]], "rules": " ".join(SHORT.get(r, r) for r in (b["rules"] or "").split(";") if r)} for b in bps]
    table, footer = rows_table("Breakpoints (kernel # as above; launch index: position in its launches)", rows, [
        ("k", "kernel #"), ("launch_index", "launch index"), ("id", "ncu ID"), ("mean_before", "before"),
        ("mean_after", "after"), ("jump", "jump"), ("z_score", "z"), ("rules", "rules")], max_rows=max_rows)
    console.print(table)
    if footer:
        console.print(footer)
