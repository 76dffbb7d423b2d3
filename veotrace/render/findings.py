"""Terminal and markdown views of a diagnose result: the ranked findings, one line each with its time."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape as e

from veotrace.findings.model import SEVERITY_NAMES, fmt_at
from veotrace.render.console import fmt_bytes, rows_table

_STYLE = {"high": "bold red", "medium": "yellow", "low": "dim", "note": "dim"}


def severity_counts(findings: list) -> str:
    """``1 high, 0 medium, 2 low, 1 note``: the findings by severity (notes counted only when there are some)."""
    return ", ".join(f"{n} {s}" + ("s" if s == "note" and n != 1 else "")
                     for s in SEVERITY_NAMES if (n := sum(x.severity == s for x in findings)) or s != "note")


def render_findings(console: Console, result, *, max_rows: int) -> None:
    """Draw ``result`` (a DiagnoseResult) on ``console``."""
    f = result.findings
    counts = severity_counts(f)
    console.print(f"[bold]Findings[/] ({counts}; ranked by impact x confidence)", highlight=False)
    rows = [{"n": i + 1, "sev": x.severity, "at": fmt_at(x.axis, x.start), "title": x.title, "score": f"{x.score:.2f}",
             "bytes": fmt_bytes(x.bytes_at_stake) if x.bytes_at_stake is not None else "-", "src": x.source}
            for i, x in enumerate(f)]
    table, footer = rows_table("", rows, [("n", "#"), ("sev", "severity"), ("at", "at"), ("title", "finding"),
                                          ("bytes", "bytes at stake"), ("score", "score"), ("src", "source")],
                               max_rows=max_rows, how_to_get_all="use --rows 0, or --format json")
    console.print(table)
    if footer:
        console.print(footer)
    shown: set[str] = set()  # a note said once, under the first finding it goes with
    for x in f[: min(5, len(f))]:
        if x.links:
            console.print(f"[dim]{e(x.title)}:[/] " + e("; ".join(x.links)), highlight=False)
        if x.note:
            console.print(f"  [dim]a note, not ranked as a problem:[/] {e(x.note)}", highlight=False)
        if x.suggestion:
            console.print(f"  [dim]what to try:[/] {e(x.suggestion)}  [dim]({e(x.command)})[/]", highlight=False)
        for note in x.notes:
            if note not in shown:
                shown.add(note)
                console.print(f"  [dim]note:[/] {e(note)}", highlight=False)
    for s in result.sources:
        if s.get("mapping") != "the shared clock":
            console.print(f"[dim]clock:[/] {e(str(s['name']))}: {e(str(s.get('mapping')))}", highlight=False)
    for a in result.analyses:
        if a["status"] != "ran":
            console.print(f"[yellow]not run:[/] {e(a['command'])}: {e(a['why'])}", highlight=False)
    for note in result.notes:
        console.print(f"[dim]note:[/] {e(note)}", highlight=False)


def findings_markdown(result) -> str:
    """The findings as a pull-request comment: a table of the ranked findings, then what to try."""
    lines = ["### veotrace diagnose", ""]
    if not result.findings:
        lines.append("No findings.")
        return "\n".join(lines) + "\n"
    lines += ["| # | severity | at | finding | source |", "|---|---|---|---|---|"]
    for i, x in enumerate(result.findings, 1):
        title = x.title.replace("|", "\\|")
        lines.append(f"| {i} | {x.severity} | {fmt_at(x.axis, x.start)} | {title} | `{x.source}` |")
    lines.append("")
    for x in result.findings:
        if x.suggestion and x.severity not in ("low", "note"):  # low ones are in the table; their advice would drown the rest
            lines.append(f"- **{x.title}**: {x.suggestion} (`{x.command}`)")
            lines += [f"  - note: {n}" for n in x.notes]
    for x in result.findings:
        if x.note:  # why it is a note, not a problem of the run
            lines.append(f"- *note*, not ranked as a problem: {x.title}: {x.note}")
    return "\n".join(lines) + "\n"
