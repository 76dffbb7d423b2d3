"""Report layer: run each planned analysis with its defaults, keep its key numbers, table, parameters and figure.

Like a CLI command body this module reads sources and calls analyses; unlike one it never prints:
an analysis that cannot run on its input becomes a section that says why.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veotrace.errors import AnalysisError, VeotraceError
from veotrace.report import sections
from veotrace.report.plan import Job, plan

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
    error: str | None = None


@dataclass
class Report:
    """Everything the page shows: the inputs as ``info`` describes them and one section per analysis."""

    inputs: list  # analysis.info.FileInfo
    skipped: list[str]
    sections: list[Section]
    version: str


def build_report(paths: list[Path], *, options: Any = None,
                 on_section: Callable[[str], None] | None = None) -> Report:
    """Describe ``paths`` (as ``veotrace info``), run every analysis that applies and draw its figure.

    Raises:
        AnalysisError: no input feeds any analysis (each input and why is named).
        FileNotFoundError: a path does not exist.
    """
    from veotrace import __version__
    from veotrace.sources import ReadOptions
    from veotrace.analysis.info import describe_all
    from veotrace.sources.frames import frames_or_none
    from veotrace.sources.probe import probe_paths
    from veotrace.sources.remote import as_path

    options = options if options is not None else ReadOptions()
    infos, groups, skipped = [], [], []
    for given in paths:
        probes, skip = probe_paths([as_path(given)], options)  # a Path, or a URL (sources.remote)
        described, skip = describe_all(probes, skip, frames_or_none)
        groups.append(list(range(len(infos), len(infos) + len(described))))
        infos.extend(described)
        skipped.extend(skip)
    jobs = plan(infos, groups)
    if not any(j.note is None for j in jobs):
        raise AnalysisError("none of the inputs feeds an analysis: " + _why_not(infos, skipped, jobs),
                            hint="Run 'veotrace info PATH' to see what each file holds")
    out = []
    for n, job in enumerate(jobs):
        if on_section is not None:
            on_section(job.cli)
        out.append(run_job(job, n, options))
    return Report(infos, skipped, out, __version__)


def _why_not(infos: list, skipped: list[str], jobs: list[Job]) -> str:
    parts = [f"{i.path} ({i.error.split('. ')[0] if i.error else 'feeds no analysis'})" for i in infos]
    parts += [f"{j.paths[0]} ({j.note})" for j in jobs if j.note]
    if skipped:
        parts.append(f"{len(skipped)} file{'' if len(skipped) == 1 else 's'} that are not traces")
    return "; ".join(parts[:6]) + ("; ..." if len(parts) > 6 else "") if parts else "no files"


def run_job(job: Job, index: int, options: Any = None) -> Section:
    """The section of one job; an input the analysis refuses gives a section holding the reason."""
    runner = sections.RUNNERS[job.command]
    section = Section(id=f"s{index}-" + re.sub(r"[^a-z0-9]+", "-", job.command), title=sections.TITLES[job.command],
                      command=job.cli, params=dict(job.params),
                      inputs=", ".join(job.shown or dict.fromkeys(p.name for p in job.paths)))
    if job.note is not None:
        section.error = f"{job.paths[0]}: {job.note}"
        return section
    try:
        runner(job, section, options, FIGURE_SIZE)
    except VeotraceError as exc:
        section.error = str(exc)
    return section


def write_report(report: Report, output: Path) -> int:
    """Write the page to ``output``; returns its size in bytes.

    Raises:
        VeotraceError: the file cannot be written.
    """
    from veotrace.render.export import write_bytes
    from veotrace.report.html import render_html

    data = render_html(report).encode("utf-8")
    write_bytes(data, output)
    return len(data)


def check_output(output: Path) -> None:
    """Refuse, before any work, a report path that is a folder or in a missing or unwritable folder.

    Raises:
        VeotraceError: the file could not be written there.
    """
    from veotrace.plot.base import check_writable

    check_writable(output, "report", "a file name such as report.html")
