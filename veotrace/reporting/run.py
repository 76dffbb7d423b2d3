"""Report layer: run each planned analysis (``veotrace.runs``) with its defaults, keep its key numbers,
table, parameters and figure; and ``report()``, the run of ``veotrace report`` (registered as such).

It never prints: an analysis that cannot run on its input becomes a section that says why. The
report composes the runs, so its own run lives here, above them, rather than in ``veotrace.runs``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veotrace import registry
from veotrace.errors import AnalysisError, VeotraceError
from veotrace.reporting.plan import Job, plan
from veotrace.runs import common
from veotrace.runs.result import RunResult

#: Figure size in the report (pixels; the page scales it to its width).
FIGURE_SIZE = (1100, 560)


@dataclass
class Section:
    """One analysis in the report."""

    id: str
    title: str
    command: str  # the equivalent veotrace command line
    inputs: str = ""  # what the section read, short (folder/ or file names)
    headline: list[tuple[str, Any]] = field(default_factory=list)
    table_title: str = ""
    columns: list[str] = field(default_factory=list)
    rows: list[list[Any]] = field(default_factory=list)
    table_note: str = ""
    params: dict = field(default_factory=dict)
    figure_svg: str | None = None
    #: an interactive view's page element (``veotrace.viewer.page.fragment``); its still figure is shown without script
    view_html: str | None = None
    error: str | None = None
    result: Any = field(default=None, repr=False)  # the analysis' RunResult, for the findings on the first page


@dataclass
class Report:
    """Everything the page shows: the inputs as ``info`` describes them and one section per analysis."""

    inputs: list  # analysis.info.FileInfo
    skipped: list[str]
    sections: list[Section]
    version: str
    #: The first page: the sections' results as ranked findings (``reporting.diagnose.collect``), and
    #: their timeline (inline SVG).
    findings: Any = None
    findings_svg: str | None = None


def build_report(paths: list[Path], *, options: Any = None,
                 on_section: Callable[[str], None] | None = None) -> Report:
    """Describe ``paths`` (as ``veotrace info``), run every analysis that applies and draw its figure.

    Raises:
        AnalysisError: no input feeds any analysis (each input and why is named).
        FileNotFoundError: a path does not exist.
    """
    from veotrace import __version__
    from veotrace.sources import ReadOptions

    options = options if options is not None else ReadOptions()
    infos, skipped, jobs = planned(paths, options)
    out = []
    for n, job in enumerate(jobs):
        if on_section is not None:
            on_section(job.cli)
        out.append(run_job(job, n, options))
    report = Report(infos, skipped, out, __version__)
    _first_page(report, jobs)
    return report


def _first_page(report: Report, jobs: list[Job]) -> None:
    """The findings of the sections' own runs (what ``diagnose`` says of the same inputs), and their timeline."""
    from veotrace.findings.rules import RULES
    from veotrace.plot import figure_bytes
    from veotrace.reporting.html import inline_svg
    from veotrace.reporting.timeline import collect

    results = [(job, s.result if s.result is not None else s.error, s.command)
               for job, s in zip(jobs, report.sections, strict=True)
               if job.note is None and job.command in RULES and (s.result is not None or s.error)]
    report.findings = collect(report.inputs, jobs, results)
    report.findings_svg = inline_svg(figure_bytes("diagnose", report.findings, "svg", size=FIGURE_SIZE),
                                     prefix="findings")


def planned(paths: list[Path], options: Any, held: Any = None) -> tuple[list, list[str], list[Job]]:
    """Describe ``paths`` (as ``veotrace info``) and plan the analyses each feeds (``plan``): the files'
    FileInfos, the files that are not traces, the jobs. The report and ``diagnose`` start here.
    ``held`` (``sources.probe.Held``): keeps the alloc/free events the description reads, for the analyses.

    Raises:
        AnalysisError: no input feeds any analysis (each input and why is named).
    """
    from veotrace.analysis.info import describe_all
    from veotrace.sources.frames import frames_or_none
    from veotrace.sources.probe import probe_paths
    from veotrace.sources.remote import as_path

    infos, groups, skipped = [], [], []
    for given in paths:
        probes, skip = probe_paths([as_path(given)], options)  # a Path, or a URL (sources.remote)
        for p in probes:
            p.held = held
        described, skip = describe_all(probes, skip, frames_or_none)
        groups.append(list(range(len(infos), len(infos) + len(described))))
        infos.extend(described)
        skipped.extend(skip)
    jobs = plan(infos, groups)
    if not any(j.note is None for j in jobs):
        raise AnalysisError("none of the inputs feeds an analysis: " + _why_not(infos, skipped, jobs),
                            hint="Run 'veotrace info PATH' to see what each file holds")
    return infos, skipped, jobs


def _why_not(infos: list, skipped: list[str], jobs: list[Job]) -> str:
    parts = [f"{i.path} ({i.error.split('. ')[0] if i.error else i.problems[0] if i.problems else 'feeds no analysis'})"
             for i in infos]
    parts += [f"{j.paths[0]} ({j.note})" for j in jobs if j.note]
    if skipped:
        parts.append(f"{len(skipped)} file{'' if len(skipped) == 1 else 's'} that are not traces")
    return "; ".join(parts[:6]) + ("; ..." if len(parts) > 6 else "") if parts else "no files"


def run_job(job: Job, index: int, options: Any = None) -> Section:
    """The section of one job; an input the analysis refuses gives a section holding the reason."""
    entry = registry.entry(job.command)
    section = Section(id=f"s{index}-" + re.sub(r"[^a-z0-9]+", "-", job.command), title=entry.title,
                      command=job.cli, params=dict(job.params),
                      inputs=", ".join(job.shown or dict.fromkeys(p.name for p in job.paths)))
    if job.note is not None:
        section.error = f"{job.paths[0]}: {job.note}"
        return section
    reading = {"time_unit": getattr(options, "time_unit", "ns"), "skip_bad_rows": getattr(options, "skip_bad_rows", False),
               "format_hint": getattr(options, "format_hint", None)}
    try:
        section.result = registry.resolve(entry.section)(job, section, reading, FIGURE_SIZE)
    except VeotraceError as exc:
        section.error = str(exc)
    return section


def write_report(report: Report, output: Path, *, inputs: Any = ()) -> int:
    """Write the page to ``output`` (never over one of ``inputs``); returns its size in bytes.

    Raises:
        VeotraceError: the file cannot be written.
    """
    from veotrace.outputs import write_bytes
    from veotrace.reporting.html import render_html

    # what no escape reached (a lone surrogate from a file name in a figure's data) as an escape, not an error
    data = render_html(report).encode("utf-8", "backslashreplace")
    write_bytes(data, output, inputs=inputs)
    return len(data)


def check_output(output: Path) -> None:
    """Refuse, before any work, a report path that is a folder or in a missing or unwritable folder.

    Raises:
        VeotraceError: the file could not be written there.
    """
    from veotrace.plot.base import check_writable

    check_writable(output, "report", "a file name such as report.html")


@dataclass
class ReportRun(RunResult):
    """``report``'s result: ``value`` is the ``Report`` (inputs and sections); ``closing`` what the command prints."""

    command = "report"

    def to_dict(self) -> dict:
        r = self.value
        return {"version": r.version, "skipped_files": r.skipped,
                "findings": [f.to_dict() for f in r.findings.findings] if r.findings is not None else [],
                "sections": [{"title": s.title, "command": s.command, "inputs": s.inputs, "headline": s.headline,
                              "error": s.error} for s in r.sections]}

    def headline(self) -> list[tuple[str, Any]]:
        failed = sum(bool(s.error) for s in self.value.sections)
        return [("analyses", len(self.value.sections) - failed), ("not available", failed)]


def report(paths, output, *, time_unit: str = "ns", skip_bad_rows: bool = False, format_hint: str | None = None,
           on_section=None) -> ReportRun:
    """One HTML file: summary, and per analysis that applies (as ``info`` decides) its figure, key table and parameters.

    Args:
        output: the HTML file to write.
        on_section: called with each analysis' command line before it runs.
    """
    paths = common.as_paths(paths)
    output = Path(output)
    check_output(output)
    options, _ = common.reading(time_unit, skip_bad_rows, format_hint)
    built = build_report(paths, options=options, on_section=on_section)
    inputs = common.input_files(paths)
    size = write_report(built, output, inputs=inputs)
    failed = [s for s in built.sections if s.error]
    # a file cut mid-write lost data: said once on stderr, as every command says it (the sections' other
    # read notes are on the page)
    cut = dict.fromkeys(m for s in built.sections for m in getattr(s.result, "messages", None) or []
                        if "(cut mid-write?)" in str(m))
    closing = [*cut, *(f"Warning: {s.title} not available: {s.error}" for s in failed)]
    closing.append(f"Wrote {output} ({size / 1e6:.2f} MB, {len(built.sections) - len(failed)} of "
                   f"{len(built.sections)} analyses)")
    return ReportRun(built, [], inputs, closing=closing)
