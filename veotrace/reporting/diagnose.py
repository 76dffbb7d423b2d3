"""Run ``veotrace diagnose``: every analysis that applies to the inputs (as the report plans them), their
results turned into findings (``veotrace.findings``) on one time axis, ranked and linked by time order.

Composes the runs, so it lives beside the report, above ``veotrace.runs``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veotrace import registry
from veotrace.errors import EXIT_CHECK_FAILED, UsageError, VeotraceError
from veotrace.findings.model import SEVERITIES, Finding, fmt_at, link, rank, severity_at_least
from veotrace.findings.rules import RULES, Context
from veotrace.runs import common
from veotrace.runs.result import RunResult

#: Inputs whose first events lie further apart than this are on different clocks (seconds: a week).
CLOCK_SLACK_S = 7 * 86400
#: Analyses whose results sit on a clock of their own (launch order, frame index, no time at all).
UNTIMED = ("l2-breakpoints", "coherence", "correlate")


@dataclass
class DiagnoseResult:
    """``findings/1``: the sources and their clocks, the analyses run, the findings ranked."""

    params: dict
    sources: list[dict]
    analyses: list[dict]
    findings: list[Finding]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"schema": "findings/1", "params": self.params, "sources": self.sources, "analyses": self.analyses,
                "findings": [f.to_dict() for f in self.findings], "notes": self.notes}


@dataclass
class DiagnoseRun(RunResult):
    """``diagnose``'s result: ``value`` is the ``DiagnoseResult``."""

    command = "diagnose"

    def tables(self) -> dict[str, Any]:
        from veotrace.schemas.findings import findings_table

        return {"findings": findings_table(self.value.findings)}

    def headline(self) -> list[tuple[str, Any]]:
        out = [("findings", ", ".join(f"{sum(f.severity == s for f in self.value.findings)} {s}"
                                      for s, _ in SEVERITIES))]
        for f in self.value.findings[:3]:
            out.append((f"{f.severity}: {fmt_at(f.axis, f.start)}", f.title))
        return out

    def render(self, console, *, max_rows: int = 40) -> None:
        from veotrace.render.findings import render_findings

        render_findings(console, self.value, max_rows=max_rows)

    def markdown(self) -> str:
        from veotrace.render.findings import findings_markdown

        return findings_markdown(self.value)


def diagnose(paths, *, fail_on: str | None = None, align: list[str] | None = None, frame_period: str | None = None,
             time_unit: str = "ns", skip_bad_rows: bool = False, format_hint: str | None = None,
             on_progress: common.Progress = None) -> DiagnoseRun:
    """Ranked findings over every input: what went wrong, when, in what order, and what to change.

    Args:
        fail_on: ``high``, ``medium`` or ``low``: exit code 3 when a finding of that severity or above exists.
        align: ``SOURCE=OFFSET`` (a file or folder name, a duration): that source's clock shifted by
            OFFSET on the common axis; for a frame table, where its frame 0 sits.
        frame_period: a frame table's frame period (``41.7ms``): its onset on the time axis (with --align).

    Raises:
        UsageError: an unknown severity or a bad --align. VeotraceError: no input feeds an analysis.
    """
    from veotrace.reporting.run import planned

    if fail_on is not None and fail_on not in [s for s, _ in SEVERITIES]:
        raise UsageError(f"--fail-on must be one of {', '.join(s for s, _ in SEVERITIES)}, got {fail_on!r}")
    paths = common.as_paths(paths)
    offsets = _offsets(align or [])
    period = common.seconds(frame_period, "--frame-period")
    options, report = common.reading(time_unit, skip_bad_rows, format_hint)
    infos, _, jobs = planned(paths, options)
    runnable = [j for j in jobs if j.note is None and j.command in RULES]
    _aligned_sources(runnable, infos, offsets)  # an --align naming no input: refused before any run
    reading = {"time_unit": time_unit, "skip_bad_rows": skip_bad_rows, "format_hint": format_hint}
    results = []
    for n, job in enumerate(runnable):
        if on_progress is not None:
            on_progress(n, len(runnable))
        try:
            results.append((job, *_run(registry.entry(job.command), job, reading)))
        except VeotraceError as exc:
            results.append((job, str(exc), job.cli))
    value = collect(infos, jobs, results, offsets=offsets, period=period)
    value.params["fail_on"] = fail_on
    findings = value.findings
    run = DiagnoseRun(value, [*report.messages()], common.input_files(paths))
    if fail_on is not None and severity_at_least(findings, fail_on):
        hits = severity_at_least(findings, fail_on)
        run.exit_code = EXIT_CHECK_FAILED
        run.closing.append(f"diagnose: {len(hits)} finding{'s' if len(hits) != 1 else ''} at or above {fail_on}; "
                           f"exit {EXIT_CHECK_FAILED} because of --fail-on")
    return run


def collect(infos: list, jobs: list, results: list[tuple], *, offsets: dict | None = None,
            period: float | None = None) -> DiagnoseResult:
    """The findings of runs already made: ``results`` holds (job, RunResult or the error text of a run that
    refused its input, the command line that ran it) for the jobs that have a rule; ``infos`` (their files' FileInfos) give each
    source's first event. The report's first page and ``diagnose`` both end here.

    Raises:
        UsageError: an --align naming no input.
    """
    offsets = offsets or {}
    sources = _aligned_sources([j for j, _, _ in results], infos, offsets)
    t0 = _map_clocks(sources)
    findings: list[Finding] = []
    analyses = []
    for job, result, command in results:
        if isinstance(result, str):
            analyses.append({"command": command, "status": "refused", "why": result})
            continue
        src = sources[_key(job)]
        off = round(src["offset_s"] * 1e9)
        if job.command == "coherence" and src["matched"]:  # frame 0 at the offset, frames a period apart
            ctx = Context(src["name"], command, t0_ns=-off, first_ns=0)
        elif src["axis"] == "time":
            ctx = Context(src["name"], command, t0_ns=src["zero_ns"] - off, first_ns=src["first_ns"])
        else:
            ctx = Context(src["name"], command, t0_ns=None)
        rule = RULES[job.command]
        found = rule(result.to_dict(), ctx, period) if job.command == "coherence" else rule(result.to_dict(), ctx)
        for f in found:
            f.clock = str(src.get("zero_ns"))
        analyses.append({"command": command, "status": "ran", "findings": len(found)})
        findings.extend(found)
    findings = rank(findings)
    link(findings)
    notes = [f"{j.paths[0]}: {j.note}" for j in jobs if j.note]
    params = {"fail_on": None, "align": dict(offsets), "frame_period_s": period, "axis_zero_ns": t0,
              "severities": {s: floor for s, floor in SEVERITIES}}
    return DiagnoseResult(params, list(sources.values()), analyses, findings, notes)


def _key(job) -> str:
    return ", ".join(job.shown or dict.fromkeys(str(p) for p in job.paths))


def _aligned_sources(jobs, infos, offsets: dict) -> dict[str, dict]:
    """The jobs' sources (``_sources``), every --align name matched to one.

    Raises:
        UsageError: an --align naming no input.
    """
    sources = _sources(jobs, {str(i.path): (i.span or {}).get("first_ns") for i in infos}, offsets)
    unused = set(offsets) - {s["matched"] for s in sources.values() if s["matched"]}
    if unused:
        raise UsageError(f"--align names {sorted(unused)[0]!r}, which is not one of the inputs",
                         hint="Name a file or folder as given, e.g. --align frames.csv=12.5s")
    return sources


def _sources(jobs, first: dict, offsets: dict) -> dict[str, dict]:
    """Each source (the files a job reads): its name, its first event's time (ns on its own clock), its
    axis (``time`` when it has a clock, else its own: ``launch``, ``frame``, ``none``) and its --align
    offset (seconds)."""
    out = {}
    for job in jobs:
        key = _key(job)
        if key in out:
            continue
        names = {str(p) for p in job.paths} | {p.name for p in job.paths}
        names |= {n for s in job.shown or [] for n in (s, s.rstrip("/"), Path(s.rstrip("/")).name)}
        matched = next((n for n in sorted(names) if n in offsets), None)
        stamps = [first[str(p)] for p in job.paths if first.get(str(p)) is not None]
        timed = bool(stamps) and job.command not in UNTIMED
        out[key] = {"name": key, "first_ns": min(stamps) if stamps else None, "matched": matched,
                    "offset_s": offsets[matched] if matched else 0.0,
                    "axis": "time" if timed else {"l2-breakpoints": "launch", "coherence": "frame"}.get(job.command, "none")}
    return out


def _map_clocks(sources: dict) -> int | None:
    """Put every timed source on the common axis (``zero_ns``: its clock's reading at the axis' zero) and
    say how (``mapping``). Sources whose first events lie within CLOCK_SLACK_S of the earliest share its
    clock (a log and an nsys export of one machine); a source further off is on another clock (relative
    times against epoch ones): its first event is put at zero, and the mapping says so (--align moves it)."""
    timed = [s for s in sources.values() if s["axis"] == "time"]
    if not timed:
        return None
    t0 = min(s["first_ns"] for s in timed)
    for s in sources.values():
        if s["axis"] == "frame" and s["matched"]:  # placed on the shared clock by --align
            s["zero_ns"] = t0
            s["mapping"] = f"frame 0 at {s['offset_s']:g} s on the shared clock (--align), frames --frame-period apart"
            continue
        if s["axis"] != "time":
            s["mapping"] = {"launch": "its own axis: launch order", "frame": "its own axis: frame index (give "
                            "--align and --frame-period to place it in time)"}.get(s["axis"], "no time axis: a whole-run statistic")
            continue
        shared = s["first_ns"] - t0 <= CLOCK_SLACK_S * 1e9
        s["zero_ns"] = t0 if shared else s["first_ns"]
        s["mapping"] = ("the shared clock" if shared else
                        f"its own clock, first event at 0 (it starts {(s['first_ns'] - t0) / 86400e9:,.0f} days after the "
                        "earliest input: not one machine's clock)")
        if s["offset_s"]:
            s["mapping"] += f", shifted {s['offset_s']:+g} s by --align"
    return t0


def _offsets(align: list[str]) -> dict[str, float]:
    out = {}
    for a in align:
        name, sep, value = a.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise UsageError(f"--align {a!r}: expected SOURCE=OFFSET, e.g. frames.csv=12.5s")
        out[name.strip()] = common.seconds(value.strip(), "--align")
    return out


def _run(entry, job, reading: dict) -> tuple[RunResult, str]:
    """The job's analysis run as the report runs it (its section's function, without the figure), and
    the command line that gives the same (the section's: simulate's policies, ...)."""
    from veotrace.reporting.run import Section

    section = Section(id="", title="", command=job.cli)
    run = registry.resolve(entry.section)(job, section, reading, None)
    return run, section.command
