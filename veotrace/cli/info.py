"""`veotrace info`: what each file is and holds, before any analysis."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from veotrace.cli.app import app
from veotrace.cli.common import (
    FormatHintOpt,
    FormatOpt,
    OutputFormat,
    OutputOpt,
    SkipBadRowsOpt,
    TimeUnit,
    TimeUnitOpt,
    emit,
    err,
    print_report,
    read_setup,
    user_errors,
)


def _frames_or_none(path):
    """The file read as a per-frame metrics table (what `coherence` reads), or None when it is not one."""
    from veotrace.errors import VeotraceError
    from veotrace.sources.frames import read_frame_metrics

    try:
        return read_frame_metrics(path)
    except (VeotraceError, OSError, UnicodeDecodeError, ValueError):
        return None


def _describe(probes, skipped, analysis):
    """FileInfos of the probed files; files no reader detects are tried as per-frame metric tables."""
    infos = []
    for p in probes:
        frames = _frames_or_none(p.path) if p.fmt is None and p.error is not None else None
        infos.append(analysis.describe_frames(str(p.path), frames) if frames else analysis.describe(p))
    kept = []
    for name in skipped:
        frames = _frames_or_none(Path(name))
        if frames:
            infos.append(analysis.describe_frames(name, frames))
        else:
            kept.append(name)
    return infos, kept


@app.command("info")
def info_command(
    paths: Annotated[list[Path], typer.Argument(help="Any files veotrace reads (alloc logs, snapshots, nsys/ncu exports, arrays, per-frame metric tables, Parquet) or folders of them.")],
    time_unit: TimeUnitOpt = TimeUnit.ns,
    skip_bad_rows: SkipBadRowsOpt = False,
    format_hint: FormatHintOpt = None,
    fmt: FormatOpt = OutputFormat.table,
    output: OutputOpt = None,
) -> None:
    """What each file is: format and version, tables and rows, time span, devices, streams, ops, sizes, kernels, and the commands that will run on it."""
    with user_errors():
        from veotrace.analysis import info as analysis
        from veotrace.render.info import render_info
        from veotrace.sources.probe import probe_paths

        options, _ = read_setup(time_unit, skip_bad_rows, format_hint)
        probes, skipped = probe_paths(paths, options)
        infos, skipped = _describe(probes, skipped, analysis)
        for p in probes:
            p.report.warnings.clear()  # reader notes (e.g. "no time_us") are part of the description
            print_report(p.report)
        if skipped:
            err(f"Warning: skipped {len(skipped)} file{'' if len(skipped) == 1 else 's'} that {'is' if len(skipped) == 1 else 'are'} not a trace: {', '.join(skipped[:5])}")
        emit(fmt, output, as_json=lambda: {"files": [i.to_dict() for i in infos], "skipped_files": skipped},
             as_table=lambda: analysis.info_table(infos), render_terminal=lambda con: render_info(con, infos))
        for bad in (i for i in infos if i.error):
            err(f"Error: {bad.path}: {bad.error}")
        if any(i.error for i in infos):
            raise typer.Exit(1)
