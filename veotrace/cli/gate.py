"""`veotrace gate`: fail a CI step (exit 3) when allocation-size entropy rose against a saved baseline."""

from __future__ import annotations

import enum
import os
from pathlib import Path
from typing import Annotated, Any

import typer

from veotrace.cli import follow_opts as fo
from veotrace.cli.app import app
from veotrace.cli.common import (
    FormatHintOpt,
    NoProgressOpt,
    PathsArg,
    SkipBadRowsOpt,
    TimeUnit,
    err,
    local_output,
    progress,
    user_errors,
)
from veotrace.defaults import (
    GATE_ALPHA,
    GATE_BLOCK_LEN,
    GATE_LENGTH_TOLERANCE,
    GATE_MAX_INCREASE,
    GATE_MAX_SLOPE_INCREASE,
    GATE_RESAMPLES,
    GATE_SEED,
)


class GateFormat(str, enum.Enum):
    table = "table"
    json = "json"
    markdown = "markdown"
    jsonl = "jsonl"


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
    segments: Annotated[str, _opt("Also compare the mean per period split at these times: 48,120 (a bare number is hours), or 30m,2h (default: the baseline's).", "--segments")] = "",
    length_tolerance: Annotated[float, _opt("Window-by-window check when run lengths differ by at most this fraction.", "--length-tolerance")] = GATE_LENGTH_TOLERANCE,
    resamples: Annotated[int, _opt("Bootstrap resamples (and permutations, at most 999, for --history).", "--resamples")] = GATE_RESAMPLES,
    seed: Annotated[int, _opt("Seed of the resampling (the verdict is reproducible).", "--seed")] = GATE_SEED,
    block_len: Annotated[int, _opt("Bootstrap block length in windows (0 = twice Politis & White's automatic length).", "--block-len")] = GATE_BLOCK_LEN,
    window: Annotated[str | None, _opt("Window length: 300s, 5m (a bare number is seconds) [default: the baseline's; another value is refused].", "--window")] = None,
    step: Annotated[str | None, _opt("Step: 60s, 1m (a bare number is seconds) [default: the baseline's].", "--step")] = None,
    window_events: Annotated[int | None, _opt("Event-count windows (default: the baseline's).", "--window-events")] = None,
    ops: Annotated[str | None, _opt("Counted ops (default: the baseline's).", "--ops")] = None,
    min_class: Annotated[int | None, _opt("Smallest size class (default: the baseline's).", "--min-class")] = None,
    max_class: Annotated[int | None, _opt("Largest size class (default: the baseline's).", "--max-class")] = None,
    time_unit: Annotated[TimeUnit | None, _opt("Timestamp unit of CSV/JSONL logs (default: the baseline's).", "--time-unit")] = None,
    skip_bad_rows: SkipBadRowsOpt = False,
    format_hint: FormatHintOpt = None,
    fmt: Annotated[GateFormat, _opt("table (default), json, or markdown (pull-request comment); with --follow: table or jsonl (one object per line).", "--format", "-f")] = GateFormat.table,
    output: Annotated[Path | None, _opt("Write the verdict to this file instead of stdout.", "--output", "-o", callback=local_output)] = None,
    junit: Annotated[Path | None, _opt("Also write a JUnit XML report (one test case per check).", "--junit", callback=local_output)] = None,
    no_progress: NoProgressOpt = False,
    follow: fo.FollowOpt = False,
    until: fo.UntilOpt = None,
    idle_timeout: fo.IdleTimeoutOpt = None,
    poll: fo.PollOpt = fo.POLL_DEFAULT,
    state: fo.StateOpt = None,
    on_fail: Annotated[str | None, _opt("With --follow: run this shell command when the verdict turns to fail, the verdict's JSON on its stdin.", "--on-fail")] = None,
    exit_on_fail: Annotated[bool, _opt("With --follow: stop at the first failing window (exit 3) instead of following on.", "--exit-on-fail")] = False,
) -> None:
    """Fail (exit 3) when entropy rose above tolerance, significantly, against a baseline or a history."""
    with user_errors():
        from veotrace.runs.gate import gate

        fo.check_follow(follow, paths, until=until, idle_timeout=idle_timeout, poll=poll, state=state,
                     only={"--on-fail": on_fail is not None, "--exit-on-fail": exit_on_fail,
                           "--format jsonl": fmt is GateFormat.jsonl},
                     **{"--history": history is not None, "--window-events": window_events is not None,
                        "--output": output is not None, "--junit": junit is not None})
        if follow:
            _follow(paths[0], fmt, baseline=baseline, on_fail=on_fail, exit_on_fail=exit_on_fail,
                    max_increase=max_increase, max_slope_increase=max_slope_increase, alpha=alpha, strict=strict,
                    segments=segments, length_tolerance=length_tolerance, resamples=resamples, seed=seed,
                    block_len=block_len, window=window, step=step, ops=ops, min_class=min_class, max_class=max_class,
                    time_unit=time_unit, skip_bad_rows=skip_bad_rows, until=until, idle_timeout=idle_timeout,
                    poll=poll, state=state)
            return

        with progress("reading", enabled=not no_progress) as bar:
            result = gate(paths, baseline=baseline, history=history, max_increase=max_increase,
                          max_slope_increase=max_slope_increase, alpha=alpha, strict=strict, segments=segments,
                          length_tolerance=length_tolerance, resamples=resamples, seed=seed, block_len=block_len,
                          window=window, step=step, window_events=window_events, ops=ops, min_class=min_class,
                          max_class=max_class, time_unit=time_unit, skip_bad_rows=skip_bad_rows,
                          format_hint=format_hint, on_progress=bar)
        for line in result.messages:
            err(line)
        _emit(result, fmt, output, junit)
    if result.exit_code:
        raise typer.Exit(result.exit_code)


def _follow(target, fmt: GateFormat, *, on_fail: str | None, **kw: Any) -> None:
    """gate --follow: window rows and verdicts as they come; exit 3 when the last verdict is fail."""
    from veotrace.errors import UsageError
    from veotrace.runs.follow_gate import follow_gate, run_hook

    if fmt not in (GateFormat.table, GateFormat.jsonl):
        raise UsageError(f"--follow prints a table or JSON Lines, not --format {fmt.value}", hint="Use -f jsonl")
    verdict = follow_gate(target, emit=fo.writer(fmt), note=err, on_fail=None if on_fail is None else run_hook(on_fail, err),
                          **kw)
    if verdict == "fail":
        from veotrace.errors import EXIT_CHECK_FAILED

        raise typer.Exit(EXIT_CHECK_FAILED)


def _emit(result, fmt: GateFormat, output: Path | None, junit: Path | None) -> None:
    from veotrace import outputs
    from veotrace.gating.ci import github_commands
    from veotrace.render import export

    if fmt is GateFormat.json:
        outputs.write_text(export.dumps_json(result.to_dict(), pretty=output is None and os.isatty(1)), output,
                           inputs=result.inputs)
    elif fmt is GateFormat.markdown:
        outputs.write_text(result.markdown(), output, inputs=result.inputs)
    else:
        from veotrace.render.console import stdout_console

        if output is None:
            result.render(stdout_console())
        else:
            with outputs.output_file(output, inputs=result.inputs) as fh:
                result.render(stdout_console(fh))
    if junit is not None:
        outputs.write_text(result.junit(), junit, inputs=result.inputs)
    if os.environ.get("GITHUB_ACTIONS") == "true":
        for line in github_commands(result.value):
            err(line)
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary:
            with open(summary, "a", encoding="utf-8") as fh:
                fh.write(result.markdown())
