"""`veotrace gate`: fail a CI step (exit 3) when allocation-size entropy rose against a saved baseline."""

from __future__ import annotations

import enum
import os
from pathlib import Path
from typing import Annotated, Any

import typer

from veotrace.defaults import (
    ENTROPY_WINDOW_S,
    GATE_ALPHA,
    GATE_BLOCK_LEN,
    GATE_LENGTH_TOLERANCE,
    GATE_MAX_INCREASE,
    GATE_MAX_SLOPE_INCREASE,
    GATE_MIN_HISTORY,
    GATE_RESAMPLES,
    GATE_SEED,
)
from veotrace.cli.app import app
from veotrace.cli.common import (
    FormatHintOpt,
    NoProgressOpt,
    PathsArg,
    SkipBadRowsOpt,
    TimeUnit,
    err,
    local_output,
    user_errors,
)


class GateFormat(str, enum.Enum):
    table = "table"
    json = "json"
    markdown = "markdown"


def _opt(help_text: str, *names: str, **kw: Any) -> Any:
    return typer.Option(*names, help=help_text, **kw)


@app.command("gate")
def gate_command(
    paths: PathsArg,
    baseline: Annotated[Path | None, _opt("Baseline from 'veotrace entropy ... --save-baseline FILE'.", "--baseline", "-b")] = None,
    history: Annotated[Path | None, _opt("Folder of earlier baselines: change-point test on per-run means.", "--history")] = None,
    max_increase: Annotated[str, _opt("Largest accepted rise of mean entropy: bits (0.05) or percent (2%).", "--max-increase")] = GATE_MAX_INCREASE,
    max_slope_increase: Annotated[float, _opt("Largest accepted rise of the trend slope, bits/hour.", "--max-slope-increase")] = GATE_MAX_SLOPE_INCREASE,
    alpha: Annotated[float, _opt("One-sided significance level of each check.", "--alpha")] = GATE_ALPHA,
    strict: Annotated[bool, _opt("Fail on any rise above tolerance, significant or not.", "--strict")] = False,
    segments: Annotated[str, _opt("Also compare the mean per period split at these times: 48,120 (bare numbers are hours), or 30m,2h (default: the baseline's).", "--segments")] = "",
    length_tolerance: Annotated[float, _opt("Window-by-window check when run lengths differ by at most this fraction.", "--length-tolerance")] = GATE_LENGTH_TOLERANCE,
    resamples: Annotated[int, _opt("Bootstrap resamples (and permutations, at most 999, for --history).", "--resamples")] = GATE_RESAMPLES,
    seed: Annotated[int, _opt("Seed of the resampling (the verdict is reproducible).", "--seed")] = GATE_SEED,
    block_len: Annotated[int, _opt("Bootstrap block length in windows (0 = twice Politis & White's automatic length).", "--block-len")] = GATE_BLOCK_LEN,
    window: Annotated[str | None, _opt("Window length (default: the baseline's; another value is refused).", "--window")] = None,
    step: Annotated[str | None, _opt("Step (default: the baseline's).", "--step")] = None,
    window_events: Annotated[int | None, _opt("Event-count windows (default: the baseline's).", "--window-events")] = None,
    ops: Annotated[str | None, _opt("Counted ops (default: the baseline's).", "--ops")] = None,
    min_class: Annotated[int | None, _opt("Smallest size class (default: the baseline's).", "--min-class")] = None,
    max_class: Annotated[int | None, _opt("Largest size class (default: the baseline's).", "--max-class")] = None,
    time_unit: Annotated[TimeUnit | None, _opt("Timestamp unit of CSV/JSONL logs (default: the baseline's).", "--time-unit")] = None,
    skip_bad_rows: SkipBadRowsOpt = False,
    format_hint: FormatHintOpt = None,
    fmt: Annotated[GateFormat, _opt("table (default), json, or markdown (pull-request comment).", "--format", "-f")] = GateFormat.table,
    output: Annotated[Path | None, _opt("Write the verdict to this file instead of stdout.", "--output", "-o", callback=local_output)] = None,
    junit: Annotated[Path | None, _opt("Also write a JUnit XML report (one test case per check).", "--junit", callback=local_output)] = None,
    no_progress: NoProgressOpt = False,
) -> None:
    """Fail (exit 3) when entropy rose above tolerance, significantly, against a baseline or a history."""
    from veotrace.errors import EXIT_CHECK_FAILED

    with user_errors():
        from veotrace.gate.compare import GateOptions, Tolerance

        opts = GateOptions(Tolerance.parse(max_increase), max_slope_increase, alpha, strict, tuple(_hours(segments)),
                           length_tolerance, resamples, seed, block_len)
        opts.check()
        requested = {"window_s": _seconds(window, "--window"), "step_s": _seconds(step, "--step"),
                     "window_events": window_events, "ops": _ops(ops), "min_class": min_class,
                     "max_class": max_class, "time_unit": time_unit.value if time_unit else None}
        result = _run(paths, baseline, history, opts, requested, skip_bad_rows, format_hint, no_progress)
        _emit(result, fmt, output, junit)
    if result.verdict == "fail":
        raise typer.Exit(EXIT_CHECK_FAILED)


def _run(paths, baseline_path, history_path, opts, requested, skip_bad_rows, format_hint, no_progress):
    """Load the baseline(s), recompute the run with their parameters, and compare."""
    from veotrace.analysis.entropy.entropy import COLUMNS, compute_entropy
    from veotrace.cli.common import print_report, progress, read_setup
    from veotrace.errors import UsageError
    from veotrace.gate import baseline as bl
    from veotrace.gate.compare import GateResult, compare, require_windows
    from veotrace.sources import iter_alloc_events

    if baseline_path is None and history_path is None:
        raise UsageError("give --baseline FILE or --history FOLDER (or both)")
    hist = bl.read_history(history_path) if history_path is not None else None
    if hist is not None:
        from veotrace.gate.history import check_history_size

        check_history_size(len(hist), str(history_path), GATE_MIN_HISTORY)
    base = bl.read_baseline(baseline_path) if baseline_path is not None else hist[-1]
    if hist is not None and base is not hist[-1]:
        bl.same_params(base, hist[-1])
    bl.check_params(requested, base)
    p = base.params
    if not opts.segments and p.get("segments_hours"):  # the baseline's --segments, unless given here
        import dataclasses

        opts = dataclasses.replace(opts, segments=tuple(p["segments_hours"]))
    options, report = read_setup(TimeUnit(p["time_unit"]), skip_bad_rows, format_hint)
    with progress("reading", enabled=not no_progress) as bar:
        batches = iter_alloc_events(paths, options=options, report=report, columns=COLUMNS, on_progress=bar)
        # Every parameter pinned to the baseline's, the window too: entropy may pick one itself otherwise.
        run = compute_entropy(batches, window_s=p["window_s"] or ENTROPY_WINDOW_S, step_s=p["step_s"],
                              window_events=p["window_events"], ops=p["ops"], min_class=p["min_class"],
                              max_class=p["max_class"])
    print_report(report)
    series = bl.series_from_result(run)
    window_text = bl.window_text(p)
    require_windows(series, "the run", window_text)
    require_windows(base.series, f"the baseline {base.path}", window_text)
    checks = compare(series, base, opts, step_hours=(p["step_s"] or 0) / 3600 or None)
    fp = bl.input_fingerprint(list(paths), run.summary.get("first_ns"), run.summary.get("last_ns"))
    used = " ".join(f"--{k.removesuffix('_s').replace('_', '-')} {bl.show_param(k, p[k])}"
                    for k in bl.ENTROPY_PARAMS if p.get(k) is not None)
    notes = [f"run recomputed with the baseline's parameters: {used}"]
    if opts.segments:
        notes.append(f"mean per period split at hours {','.join(f'{h:g}' for h in opts.segments)}")
    if fp["digest"] == base.fingerprint.get("digest"):
        notes.append("the run's inputs are the baseline's own (same files, sizes and time span)")
    result = GateResult(checks, {"entropy": {k: p.get(k) for k in bl.ENTROPY_PARAMS}, **opts.__dict__,
                                 "max_increase": str(opts.max_increase), "segments": list(opts.segments)},
                        {"path": base.path, "recorded_at": base.recorded_at, "veotrace_version": base.version,
                         "fingerprint": base.fingerprint},
                        {"windows": run.windows.num_rows, "nonempty_windows": int(series.finite.sum()),
                         "hours": series.span if series.x_unit == "hours" else None, "fingerprint": fp}, notes)
    if hist is not None:
        _add_history(result, hist, series, opts)
    return result


def _add_history(result, hist, series, opts) -> None:
    import numpy as np

    from veotrace.gate.history import HistoryPoint, history_check

    points = [HistoryPoint(Path(b.path).name, b.recorded_at, b.mean) for b in hist]
    points.append(HistoryPoint("this run", "", float(np.nanmean(series.h))))
    check, summary = history_check(points, opts)
    result.checks.append(check)
    result.history = summary


def _emit(result, fmt: GateFormat, output: Path | None, junit: Path | None) -> None:
    from veotrace.gate.ci import github_commands, junit_xml
    from veotrace.render import export
    from veotrace.render.gate import gate_markdown, render_gate

    if fmt is GateFormat.json:
        export.write_text(export.dumps_json(result.to_dict(), pretty=output is None and os.isatty(1)), output)
    elif fmt is GateFormat.markdown:
        export.write_text(gate_markdown(result), output)
    else:
        from veotrace.render.console import stdout_console

        if output is None:
            render_gate(stdout_console(), result)
        else:
            with export.output_file(output) as fh:
                render_gate(stdout_console(fh), result)
    if junit is not None:
        export.write_text(junit_xml(result), junit)
    if os.environ.get("GITHUB_ACTIONS") == "true":
        for line in github_commands(result):
            err(line)
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary:
            with open(summary, "a", encoding="utf-8") as fh:
                fh.write(gate_markdown(result))


def _seconds(text: str | None, option: str) -> float | None:
    from veotrace.cli.units import parse_duration

    return None if text is None else parse_duration(text, option=option)


def _ops(text: str | None) -> list[str] | None:
    from veotrace.cli.common import parse_ops

    return None if text is None else parse_ops(text, ())


def _hours(text: str) -> list[float]:
    """--segments as entropy takes them (bare numbers are hours, or 30m,2h), increasing."""
    from veotrace.cli.units import parse_hours_list
    from veotrace.errors import UsageError

    hours = parse_hours_list(text)
    if hours != sorted(hours):
        raise UsageError("--segments must be increasing positive hours, e.g. 48,120")
    return hours
