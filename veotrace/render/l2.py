"""Terminal view of an L2 breakpoint result: parameters, per-kernel L2 picture, rule status, breakpoints."""

from __future__ import annotations

from rich.console import Console

from veotrace.render.console import fmt_value, rows_table, summary_table

#: Short rule names for the breakpoint table (the Rules table gives the full ones).
SHORT = {"l2_throughput_low": "thr<65%", "bytes_per_request_drop": "B/req↓", "read_sector_slope_rise": "rd-slope↑"}


def _fixed(digits: int):
    return lambda value: "-" if value is None else f"{value:,.{digits}f}"


def _changepoints(k: dict) -> str:
    cp = k.get("changepoints", {})
    if cp.get("status") == "analysed":
        return f"{cp['breakpoints']} break" + ("" if cp["breakpoints"] == 1 else "s")
    return f"need {cp.get('launches_needed')} launches"


def _jump(params: dict) -> str:
    unit = params["min_jump_unit"]
    if params["min_jump"] == 1 and unit == "percentage points":
        unit = "percentage point"
    return f"{fmt_value(params['min_jump'])}{'' if unit.startswith('%') else ' '}{unit}"


def render_l2(console: Console, result, *, max_rows: int) -> None:
    """Draw ``result`` (an L2Result) on ``console``."""
    p = result.params
    bps = result.breakpoints.to_pylist()
    metric = p["metric"] + (f" ({p['metric_label']})" if p.get("metric_label") else "")
    console.print(summary_table("L2 breakpoints", [
        ("metric", metric), ("kernels", len(result.kernels)),
        ("with change points", f"{sum(k['analysed'] for k in result.kernels)} (need {2 * p['min_size']} launches each)"),
        ("min size", p["min_size"]), ("penalty scale", p["penalty_scale"]),
        ("min jump", _jump(p)), ("breakpoints", len(bps))]))
    number = {k["kernel"]: i for i, k in enumerate(result.kernels)}
    kernels = [{**k, **k["l2"], "k": i, "cp": _changepoints(k),
                "flags": " ".join(SHORT.get(n, n) for n, v in k["rules_on_values"].items() if v)}
               for i, k in enumerate(result.kernels)]
    table, footer = rows_table("Kernels", kernels, [
        ("k", "#"), ("kernel", "kernel"), ("launches", "launches"), ("missing_values", "n/a"),
        ("cp", "change points")], max_rows=max_rows)
    console.print(table)
    if footer:
        console.print(footer)
    table, footer = rows_table("L2 picture (medians over each kernel's launches)", kernels, [
        ("k", "#"), ("median", "metric"), ("hit_rate_pct", "hit %"), ("l2_throughput_pct", "L2 thr %"),
        ("bytes_per_request", "B/req"), ("sectors", "sectors"), ("requests", "requests"),
        ("flags", "informational flags")],
        max_rows=max_rows, formatters={"hit_rate_pct": _fixed(1), "l2_throughput_pct": _fixed(1),
                                       "bytes_per_request": _fixed(0), "sectors": _fixed(0), "requests": _fixed(0)})
    console.print(table)
    if footer:
        console.print(footer)
    if result.rules:
        rules = [{**r, "short": SHORT.get(r["name"], r["name"]),
                  "what": r["description"] + (f"; on values: {r['on_values']}" if r["on_values"] else "")}
                 for r in result.rules]
        table, _ = rows_table("Rules (fired at breaks; kernels whose values are flagged, for information: "
                              "most kernels run below 65% of L2 peak)", rules, [
            ("short", "rule"), ("status", "status"), ("fired", "breaks"), ("kernels_flagged", "kernels"),
            ("what", "what")], max_rows=0)
        console.print(table)
    if not any(k["analysed"] for k in result.kernels):
        console.print("No kernel has enough launches for change points (see the note on stderr).")
        return
    rows = [{**b, "k": number[b["kernel"]], "rules": " ".join(SHORT.get(r, r) for r in (b["rules"] or "").split(";") if r)} for b in bps]
    table, footer = rows_table("Breakpoints (kernel # as above; launch index: position in its launches)", rows, [
        ("k", "kernel #"), ("launch_index", "launch index"), ("id", "ncu ID"), ("mean_before", "before"),
        ("mean_after", "after"), ("jump", "jump"), ("z_score", "z"), ("rules", "rules")], max_rows=max_rows)
    console.print(table)
    if footer:
        console.print(footer)
