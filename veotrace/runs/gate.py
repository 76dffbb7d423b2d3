"""Run `gate`: recompute a run with its baseline's parameters and test whether entropy rose (the CI gate)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
from veotrace.errors import EXIT_CHECK_FAILED
from veotrace.runs import common
from veotrace.runs.result import RunResult


@dataclass
class GateRun(RunResult):
    """``gate``'s result: ``value`` is the ``GateResult`` (checks, verdict); exit code 3 when it fails."""

    command = "gate"

    def tables(self) -> dict[str, Any]:
        import pyarrow as pa

        return {"checks": pa.Table.from_pylist([c if isinstance(c, dict) else c.to_dict()
                                                for c in self.to_dict().get("checks", [])])}

    def headline(self) -> list[tuple[str, Any]]:
        d = self.to_dict()
        return [("verdict", d.get("verdict")), ("checks", len(d.get("checks", [])))]

    def render(self, console, *, max_rows: int = 40) -> None:
        from veotrace.render.gate import render_gate

        render_gate(console, self.value)

    def markdown(self) -> str:
        """The verdict as markdown (a pull-request comment, GitHub's step summary)."""
        from veotrace.render.gate import gate_markdown

        return gate_markdown(self.value)

    def junit(self) -> str:
        """The verdict as JUnit XML (one test case per check)."""
        from veotrace.gating.ci import junit_xml

        return junit_xml(self.value)


def gate(paths, *, baseline=None, history=None, max_increase: str | float = GATE_MAX_INCREASE,
         max_slope_increase: float = GATE_MAX_SLOPE_INCREASE, alpha: float = GATE_ALPHA, strict: bool = False,
         segments: str | list[float] | None = None, length_tolerance: float = GATE_LENGTH_TOLERANCE,
         resamples: int = GATE_RESAMPLES, seed: int = GATE_SEED, block_len: int = GATE_BLOCK_LEN,
         window: str | float | None = None, step: str | float | None = None, window_events: int | None = None,
         ops: str | list[str] | None = None, min_class: int | None = None, max_class: int | None = None,
         time_unit: str | None = None, skip_bad_rows: bool = False, format_hint: str | None = None,
         on_progress: common.Progress = None) -> GateRun:
    """Fail (exit code 3) when entropy rose above tolerance, significantly, against a baseline or a history.

    Args:
        baseline: a baseline from ``entropy(..., save_baseline=FILE)``.
        history: a folder of earlier baselines (change-point test on per-run means).
        max_increase: largest accepted rise of mean entropy: bits (0.05) or percent ("2%").
        max_slope_increase: largest accepted rise of the trend slope, bits/hour.
        alpha, strict, length_tolerance, resamples, seed, block_len: the tests (see ``veotrace gate --help``).
        segments: also compare the mean per period split at these hours (default: the baseline's).
        window, step, window_events, ops, min_class, max_class, time_unit: must match the baseline's
            (default: the baseline's; another value is refused).
    """
    paths = common.as_paths(paths)
    opts = gate_options(max_increase, max_slope_increase, alpha, strict, segments, length_tolerance, resamples, seed,
                        block_len)
    requested = requested_params(window, step, window_events, ops, min_class, max_class, time_unit)
    result, messages, aux = _run(paths, None if baseline is None else Path(baseline),
                                 None if history is None else Path(history), opts, requested, skip_bad_rows,
                                 format_hint, on_progress)
    return GateRun(result, messages, common.input_files([*paths, *aux]),
                   exit_code=EXIT_CHECK_FAILED if result.verdict == "fail" else 0)


def gate_options(max_increase: str | float = GATE_MAX_INCREASE, max_slope_increase: float = GATE_MAX_SLOPE_INCREASE,
                 alpha: float = GATE_ALPHA, strict: bool = False, segments: str | list[float] | None = None,
                 length_tolerance: float = GATE_LENGTH_TOLERANCE, resamples: int = GATE_RESAMPLES,
                 seed: int = GATE_SEED, block_len: int = GATE_BLOCK_LEN):
    """The GateOptions of gate's options (checked; the keywords and defaults of :func:`gate`).

    Raises:
        UsageError: an impossible option.
    """
    from veotrace.gating.compare import GateOptions, Tolerance

    hours = _hours(segments) if isinstance(segments, str) else list(segments or ())
    opts = GateOptions(Tolerance.parse(str(max_increase)), max_slope_increase, alpha, strict, tuple(hours or ()),
                       length_tolerance, resamples, seed, block_len)
    opts.check()
    return opts


def requested_params(window, step, window_events, ops, min_class, max_class, time_unit) -> dict:
    """The entropy options given on the gate (None: the baseline's), to check against the baseline's."""
    return {"window_s": common.seconds(window, "--window"), "step_s": common.seconds(step, "--step"),
            "window_events": common.count(window_events, "--window-events"),
            "ops": None if ops is None else common.ops_list(ops, ()), "min_class": min_class, "max_class": max_class,
            "time_unit": getattr(time_unit, "value", time_unit) if time_unit else None}


def load_baselines(baseline_path, history_path, opts, requested):
    """The baseline (given, else the history's last), the history (or None) and the options with the
    baseline's --segments unless given.

    Raises:
        UsageError: neither given, or options that differ from the baseline's. VeotraceError: a bad file.
    """
    from veotrace.errors import UsageError
    from veotrace.gating import baseline as bl

    if baseline_path is None and history_path is None:
        raise UsageError("give --baseline FILE or --history FOLDER (or both)")
    hist = bl.read_history(history_path) if history_path is not None else None
    if hist is not None:
        from veotrace.gating.history import check_history_size

        check_history_size(len(hist), str(history_path), GATE_MIN_HISTORY)
    base = bl.read_baseline(baseline_path) if baseline_path is not None else hist[-1]
    if hist is not None and base is not hist[-1]:
        bl.same_params(base, hist[-1])
    bl.check_params(requested, base)
    p = base.params
    if not opts.segments and p.get("segments_hours"):  # the baseline's --segments, unless given here
        import dataclasses

        opts = dataclasses.replace(opts, segments=tuple(p["segments_hours"]))
    return base, hist, opts


def _run(paths, baseline_path, history_path, opts, requested, skip_bad_rows, format_hint, on_progress):
    """Load the baseline(s), recompute the run with their parameters, and compare.

    Returns:
        (GateResult, the lines reading reported, the baseline and history paths read).
    """
    from veotrace.analysis.entropy.entropy import COLUMNS, compute_entropy
    from veotrace.gating import baseline as bl
    from veotrace.gating.compare import GateResult, compare, require_windows
    from veotrace.sources import iter_alloc_events

    base, hist, opts = load_baselines(baseline_path, history_path, opts, requested)
    p = base.params
    options, report = common.reading(p["time_unit"], skip_bad_rows, format_hint)
    batches = iter_alloc_events(paths, options=options, report=report, columns=COLUMNS, on_progress=on_progress)
    # Every parameter pinned to the baseline's, the window too: entropy may pick one itself otherwise.
    run = compute_entropy(batches, window_s=p["window_s"] or ENTROPY_WINDOW_S, step_s=p["step_s"],
                          window_events=p["window_events"], ops=p["ops"], min_class=p["min_class"],
                          max_class=p["max_class"])
    messages = list(report.messages())
    series = bl.series_from_result(run)
    window_text = bl.window_text(p)
    require_windows(series, "the run", window_text)
    require_windows(base.series, f"the baseline {base.path}", window_text)
    checks = compare(series, base, opts, step_hours=(p["step_s"] or 0) / 3600 or None,
                     span_s=run.summary.get("span_s"))
    fp = bl.input_fingerprint(list(paths), run.summary.get("first_ns"), run.summary.get("last_ns"))
    used = " ".join(f"--{k.removesuffix('_s').replace('_', '-')} {bl.show_param(k, p[k])}"
                    for k in bl.ENTROPY_PARAMS if p.get(k) is not None)
    notes = [f"run recomputed with the baseline's parameters: {used}"]
    if opts.segments:
        notes.append(f"mean per period split at hours {','.join(f'{h:g}' for h in opts.segments)}")
    if fp["digest"] == base.fingerprint.get("digest"):
        notes.append("the run's inputs are the baseline's own (same files, sizes and time span)")
    other = bl.device_note(base.source, list(paths))  # a profiler trace's baseline from other GPUs
    if other:
        notes.append(other)
    result = GateResult(checks, {"entropy": {k: p.get(k) for k in bl.ENTROPY_PARAMS}, **opts.__dict__,
                                 "max_increase": str(opts.max_increase), "segments": list(opts.segments)},
                        {"path": base.path, "recorded_at": base.recorded_at, "veotrace_version": base.version,
                         "fingerprint": base.fingerprint},
                        {"windows": run.windows.num_rows, "nonempty_windows": int(series.finite.sum()),
                         "hours": series.span if series.x_unit == "hours" else None, "fingerprint": fp}, notes)
    if hist is not None:
        _add_history(result, hist, series, opts)
    aux = [baseline_path] if baseline_path is not None else []
    return result, messages, aux + ([history_path] if history_path is not None else [])


def _add_history(result, hist, series, opts) -> None:
    import numpy as np

    from veotrace.gating.history import HistoryPoint, history_check

    points = [HistoryPoint(Path(b.path).name, b.recorded_at, b.mean) for b in hist]
    points.append(HistoryPoint("this run", "", float(np.nanmean(series.h))))
    check, summary = history_check(points, opts)
    result.checks.append(check)
    result.history = summary


def _hours(text: str) -> list[float]:
    """--segments as entropy takes them (bare numbers are hours, or 30m,2h), increasing."""
    from veotrace.errors import UsageError

    hours = common.hours_list(text)
    if hours != sorted(hours):
        raise UsageError("--segments must be increasing positive hours, e.g. 48,120")
    return hours
