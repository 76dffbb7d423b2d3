"""Run ``gate --follow`` (issue 29): the offline gate's checks at every completed window of a growing log,
a verdict record when the verdict changes, ``--on-fail CMD`` with the verdict JSON on stdin, exit 3."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

from veotrace.defaults import ENTROPY_WINDOW_S, FOLLOW_POLL_S, GATE_MIN_WINDOWS
from veotrace.runs.follow import Emit, Note, run_follow


class GateJudge:
    """The gate over the windows printed so far: the same checks as ``gate`` on the log cut at the window's end.

    No verdict before both the run and the baseline have GATE_MIN_WINDOWS non-empty windows (the offline
    gate refuses a shorter run).
    """

    def __init__(self, base, opts, windows, *, emit: Emit, note: Note, on_fail: Callable[[dict], None] | None,
                 exit_on_fail: bool) -> None:
        self.base, self.opts, self.windows = base, opts, windows
        self.emit, self.note, self.on_fail, self.exit_on_fail = emit, note, on_fail, exit_on_fail
        step_s = base.params["step_s"]
        self.step_hours = (step_s or 0) / 3600 or None
        self.starts: list[int] = []
        self.h: list[float | None] = []
        self.verdict: str | None = None

    def window(self, rec: dict) -> str | None:
        """Judge after window ``rec``; ``"failed"`` to stop following (``--exit-on-fail``)."""
        from veotrace.gating.baseline import series_from_columns
        from veotrace.gating.compare import GateResult, compare

        self.starts.append(rec["start_ns"])
        self.h.append(rec["entropy_bits"])
        if sum(v is not None for v in self.h) < GATE_MIN_WINDOWS:
            return None
        series = series_from_columns(range(len(self.h)), self.starts, self.h)
        span_s = (rec["_last_ns"] - self.windows.first_ns) / 1e9
        checks = compare(series, self.base, self.opts, step_hours=self.step_hours, span_s=span_s)
        result = GateResult(checks, {}, {}, {})
        if result.verdict != self.verdict:
            self.verdict = result.verdict
            verdict = self._record(rec, result)
            self.emit(verdict)
            if result.verdict == "fail" and self.on_fail is not None:
                self.on_fail(verdict)
        return "failed" if result.verdict == "fail" and self.exit_on_fail else None

    def _record(self, rec: dict, result) -> dict:
        from veotrace.live.contract import record
        from veotrace.render.export import jsonable

        failed = [c for c in result.checks if c.failed]
        return jsonable(record("verdict", "gate", window=rec["window"], start_ns=rec["start_ns"], end_ns=rec["end_ns"],
                               complete=rec["complete"], verdict=result.verdict, headline=result.headline(),
                               reason="; ".join(c.message for c in failed) or None, baseline=self.base.path,
                               checks=[c.to_dict() for c in result.checks]))

    def to_state(self) -> dict:
        return {"starts": self.starts, "h": self.h, "verdict": self.verdict}

    @staticmethod
    def state_schema():
        """What ``to_state`` writes, as ``live.checkpoint`` checks it: a start and an entropy per window, the verdict."""
        from veotrace.live import checkpoint as c

        base = c.record({"starts": c.ascending(c.TIME), "h": c.items(c.optional(c.number(0.0, 64.0))),
                         "verdict": c.optional(c.one_of("pass", "fail"))}, optional_keys=("starts", "h", "verdict"))

        def check(v, where):
            d = base(v, where)
            if len(d.get("starts", [])) != len(d.get("h", [])):
                raise c.Bad(where, "holds window starts and entropies of different lengths")
            return d
        return check

    def from_state(self, s: dict) -> None:
        self.starts, self.h, self.verdict = list(s.get("starts", [])), list(s.get("h", [])), s.get("verdict")


def run_hook(command: str, note: Note) -> Callable[[dict], None]:
    """``--on-fail CMD``: run CMD in a shell with the verdict's JSON on stdin; its failure is a warning."""
    from veotrace.render.export import dumps_json

    def hook(verdict: dict) -> None:
        try:
            done = subprocess.run(command, shell=True, input=dumps_json(verdict), text=True, check=False)
        except OSError as exc:
            note(f"Warning: --on-fail could not run: {exc}")
            return
        if done.returncode:
            note(f"Warning: --on-fail exited with code {done.returncode}")

    return hook


def follow_gate(target, *, baseline, emit: Emit, note: Note, on_fail: Callable[[dict], None] | None = None,
                exit_on_fail: bool = False, window=None, step=None, ops=None, min_class: int | None = None,
                max_class: int | None = None, time_unit: str | None = None, skip_bad_rows: bool = False, until=None,
                idle_timeout=None, poll=FOLLOW_POLL_S, state: Path | None = None, clock=None,
                **gate_kw) -> str | None:
    """Follow ``target`` and judge it against ``baseline`` at every completed window (``gate``'s options:
    ``gate_kw`` are :func:`veotrace.runs.gate.gate_options`' keywords, max_increase ... block_len).

    Returns:
        The last verdict (``"pass"``, ``"fail"``), None when the log never had enough windows.

    Raises:
        UsageError: impossible options, a baseline of event-count windows. VeotraceError: bad input.
    """
    from veotrace.analysis.entropy.entropy import COLUMNS
    from veotrace.errors import UsageError
    from veotrace.live.windows import EntropyWindows
    from veotrace.runs.gate import gate_options, load_baselines, requested_params

    if baseline is None:  # --history is offline only (check_follow refuses it): the baseline is what it judges against
        raise UsageError("gate --follow judges each window against --baseline FILE, and none was given",
                         hint="Save one with 'veotrace entropy LOG --save-baseline FILE' from a good run")
    opts = gate_options(**gate_kw)
    base, _, opts = load_baselines(Path(baseline), None, opts,
                                   requested_params(window, step, None, ops, min_class, max_class, time_unit))
    p = base.params
    from veotrace.gating.baseline import require_windows, window_text

    require_windows(base.series, f"the baseline {base.path}", window_text(p))
    if p.get("window_events") is not None:
        raise UsageError(f"the baseline {base.path} counts windows of {p['window_events']} events; --follow follows time "
                         "windows", hint="Save a baseline with --window to gate a run as it grows")
    windows = EntropyWindows(window_s=p["window_s"] or ENTROPY_WINDOW_S, step_s=p["step_s"], ops=p["ops"],
                             min_class=p["min_class"], max_class=p["max_class"], track_last=True)
    judge = GateJudge(base, opts, windows, emit=emit, note=note, on_fail=on_fail, exit_on_fail=exit_on_fail)
    params = {"window_ns": windows.window_ns, "step_ns": windows.step_ns, "ops": p["ops"], "min_class": p["min_class"],
              "max_class": p["max_class"], "time_unit": p["time_unit"], "baseline": str(Path(baseline).resolve()),
              "gate": {k: (str(v) if k == "max_increase" else v) for k, v in opts.__dict__.items()}}
    run_follow("gate", target, windows, params, COLUMNS, emit=emit, note=note, time_unit=p["time_unit"],
               skip_bad_rows=skip_bad_rows, until=until, idle_timeout=idle_timeout, poll=poll, state=state,
               clock=clock, on_window=judge.window, extra=(judge.to_state, judge.from_state, judge.state_schema()))
    if judge.verdict is None:
        n = sum(v is not None for v in judge.h)
        note(f"Warning: no verdict: the log had {n} non-empty window{'s' * (n != 1)}; the gate needs "
             f"{GATE_MIN_WINDOWS}")
    return judge.verdict


