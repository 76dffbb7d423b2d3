"""Render layer: the gate's verdict as a terminal table and as markdown (pull-request comment, step summary)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

_STYLE = {"pass": "green", "fail": "bold red", "skipped": "dim"}


def _n(value: float | None, digits: int = 4) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}g}"


def _change(c) -> str:
    return "-" if c.change is None else f"{c.change:+.{4}g}"


def _p(c) -> str:
    return "-" if c.p_value is None else (f"{c.p_value:.3g}" if c.p_value >= 0.001 else "<0.001")


def _explained(result) -> list:
    """The checks whose message is shown: every one not passed, passes above tolerance but not significant,
    and a slope whose tolerance the run's short span raised."""
    return [c for c in result.checks
            if c.verdict != "pass" or "not significant" in c.message or "tolerance raised" in c.message]


def render_gate(console: Console, result) -> None:
    """Draw a GateResult: one row per check, notes, the method and the verdict line."""
    table = Table(title="Entropy gate", title_justify="left")
    for header, justify in (("check", "left"), ("unit", "left"), ("value", "right"), ("baseline", "right"),
                            ("change", "right"), ("tol.", "right"), ("p", "right"), ("verdict", "left")):
        table.add_column(header, justify=justify)
    for c in result.checks:
        table.add_row(c.name, c.unit.replace("/hour", "/h"), _n(c.value), _n(c.baseline), _change(c), _n(c.tolerance), _p(c),
                      f"[{_STYLE[c.verdict]}]{c.verdict}[/]")
    console.print(table)
    for c in _explained(result):
        console.print(f"  {c.name}: {c.message}", highlight=False)
    for note in result.notes:
        console.print(f"  note: {note}", highlight=False)
    b = result.baseline
    console.print(f"  baseline: {b.get('path')} (recorded {b.get('recorded_at') or '?'}, veotrace "
                  f"{b.get('veotrace_version')}); test: {result.method_text()}", highlight=False)
    style = "bold red" if result.verdict == "fail" else "bold green"
    console.print(f"[{style}]{result.headline()}[/]", highlight=False)


def gate_markdown(result) -> str:
    """Markdown for a pull-request comment or ``$GITHUB_STEP_SUMMARY``."""
    icon = {"pass": "pass", "fail": "**FAIL**", "skipped": "skipped"}
    lines = [f"### veotrace gate: {'❌' if result.verdict == 'fail' else '✅'} {result.headline()}", "",
             "| check | unit | value | baseline | change | tolerance | p | verdict |",
             "|---|---|--:|--:|--:|--:|--:|---|"]
    for c in result.checks:
        lines.append(f"| {c.name} | {c.unit} | {_n(c.value)} | {_n(c.baseline)} | {_change(c)} | {_n(c.tolerance)} "
                     f"| {_p(c)} | {icon[c.verdict]} |")
    lines.append("")
    lines += [f"- **{c.name}**: {c.message}" for c in _explained(result)]
    for note in result.notes:
        lines.append(f"- {note}")
    b = result.baseline
    lines.append(f"- baseline `{b.get('path')}` recorded {b.get('recorded_at') or '?'} (veotrace "
                 f"{b.get('veotrace_version')}); test: {result.method_text()}")
    return "\n".join(lines) + "\n"
