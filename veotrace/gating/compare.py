"""Gate layer: the checks of a run against one baseline, and the verdict.

A check fails only when the increase is above its tolerance **and** significant at ``alpha``
(one-sided; ``strict`` drops the significance part). A decrease never fails. Checks:

- ``mean``: mean entropy over the run (and ``mean A-B h`` per segment);
- ``slope``: least-squares trend slope, in the unit that fits the run's span (bits/second on a
  snapshot, bits/hour on a long log; ``--max-slope-increase`` is bits/hour and is converted). Its
  tolerance is at least the mean tolerance spread over the run's span: a steeper rise that moves the
  entropy by less than that over the whole run (microseconds of timestamp jitter on a 2 s snapshot
  give bits per hour) is not a regression anyone can see;
- ``aligned``: window-by-window difference at the same hour since start, when both runs have the
  same length within ``length_tolerance`` (a job compared with itself at the same age).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from veotrace.analysis import timescale
from veotrace.defaults import (
    GATE_ALPHA,
    GATE_BLOCK_LEN,
    GATE_LENGTH_TOLERANCE,
    GATE_MAX_INCREASE,
    GATE_MAX_SLOPE_INCREASE,
    GATE_MIN_WINDOWS,
    GATE_RESAMPLES,
    GATE_SEED,
    MAX_RESAMPLES,
)
from veotrace.errors import UsageError
from veotrace.gating import stats
from veotrace.gating.baseline import Baseline, Series, require_windows  # noqa: F401 - require_windows: cli.gate's import

METHOD = ("circular block bootstrap (block: twice Politis & White's length), one-sided, "
          "p = P(bootstrap increase - observed >= observed)")


@dataclass(frozen=True)
class Tolerance:
    """Largest accepted increase: ``value`` bits, or ``value`` percent of the baseline's level."""

    value: float
    percent: bool = False

    @classmethod
    def parse(cls, text: str | float, option: str = "--max-increase") -> Tolerance:
        """``"0.05"``, ``"0.05bits"`` or ``"2%"``.

        Raises:
            UsageError: not a non-negative number.
        """
        s = str(text).strip().lower()
        percent = s.endswith("%")
        s = s.rstrip("%").removesuffix("bits").removesuffix("bit").strip()
        try:
            value = float(s)
        except ValueError:
            raise UsageError(f"{option} expects bits such as 0.05 or a percentage such as 2%, got {text!r}") from None
        if not math.isfinite(value) or value < 0:
            raise UsageError(f"{option} must be a non-negative amount, got {text!r}")
        return cls(value, percent)

    def bits(self, level: float) -> float:
        return abs(level) * self.value / 100 if self.percent else self.value

    def __str__(self) -> str:
        return f"{self.value:g}%" if self.percent else f"{self.value:g} bits"


@dataclass(frozen=True)
class GateOptions:
    """How the gate decides (defaults in ``analysis/defaults.py``, justified in the README)."""

    max_increase: Tolerance = Tolerance.parse(GATE_MAX_INCREASE)
    max_slope_increase: float = GATE_MAX_SLOPE_INCREASE
    alpha: float = GATE_ALPHA
    strict: bool = False
    segments: tuple[float, ...] = ()
    length_tolerance: float = GATE_LENGTH_TOLERANCE
    resamples: int = GATE_RESAMPLES
    seed: int = GATE_SEED
    block_len: int = GATE_BLOCK_LEN

    def check(self) -> None:
        """Raises UsageError for impossible values, before any work."""
        if not 0 < self.alpha < 1:
            raise UsageError(f"--alpha must be between 0 and 1, got {self.alpha}")
        if self.max_slope_increase < 0:
            raise UsageError(f"--max-slope-increase must be non-negative, got {self.max_slope_increase}")
        if not 99 <= self.resamples <= MAX_RESAMPLES:
            raise UsageError(f"--resamples must be between 99 and {MAX_RESAMPLES:,}, got {self.resamples}")
        if self.seed < 0:
            raise UsageError(f"--seed must not be negative, got {self.seed}")
        if self.block_len < 0:
            raise UsageError(f"--block-len must be 0 (automatic) or positive, got {self.block_len}")
        if self.length_tolerance < 0:
            raise UsageError(f"--length-tolerance must be non-negative, got {self.length_tolerance}")


@dataclass
class Check:
    """One check's numbers and verdict ("pass", "fail" or "skipped")."""

    name: str
    unit: str
    value: float | None
    baseline: float | None
    change: float | None
    tolerance: float | None
    p_value: float | None
    verdict: str
    message: str
    ci_low: float | None = None
    ci_high: float | None = None
    method: str = ""
    windows: int | None = None

    @property
    def failed(self) -> bool:
        return self.verdict == "fail"

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class GateResult:
    """The verdict, every check, the parameters used and the baseline's identity."""

    checks: list[Check]
    params: dict
    baseline: dict
    run: dict
    notes: list[str] = field(default_factory=list)
    history: dict | None = None

    @property
    def verdict(self) -> str:
        return "fail" if any(c.failed for c in self.checks) else "pass"

    def headline(self) -> str:
        failed = [c.name for c in self.checks if c.failed]
        if failed:
            return f"FAIL: entropy regression in {', '.join(failed)} ({len(failed)} of {len(self.checks)} checks)"
        return f"PASS: no significant entropy increase above tolerance ({len(self.checks)} checks)"

    def method_text(self) -> str:
        text = f"{METHOD}; alpha {self.params.get('alpha', GATE_ALPHA):g}"
        return text + ("; --strict: significance not required" if self.params.get("strict") else "")

    def to_dict(self) -> dict:
        return {"verdict": self.verdict, "headline": self.headline(), "checks": [c.to_dict() for c in self.checks],
                "params": self.params, "baseline": self.baseline, "run": self.run, "notes": self.notes,
                "history": self.history, "method": self.method_text()}


def decide(name: str, unit: str, value: float, base: float, test: stats.Test, tol: float, opts: GateOptions,
           *, windows: int, method: str = METHOD) -> Check:
    """A Check from a test: fail when the increase is above ``tol`` and significant (or ``strict``)."""
    ch, p = test.change, test.p_value
    sig = p <= opts.alpha
    if ch > tol and (sig or opts.strict):
        why = f"significant, p = {p:.3g}" if sig else f"p = {p:.3g}, failed by --strict"
        verdict, msg = "fail", f"{name} rose by {ch:+.4g} {unit}, above the tolerance {tol:.4g} ({why})"
    elif ch > tol:
        verdict, msg = "pass", (f"{name} rose by {ch:+.4g} {unit}, above the tolerance {tol:.4g} but not "
                                f"significant (p = {p:.3g} > alpha {opts.alpha:g})")
    elif ch > 0:
        verdict, msg = "pass", f"{name} rose by {ch:+.4g} {unit}, within the tolerance {tol:.4g}"
    else:
        verdict, msg = "pass", f"{name} did not rise ({ch:+.4g} {unit}); a decrease never fails"
    return Check(name, unit, value, base, ch, tol, p, verdict, msg, test.ci_low, test.ci_high,
                 f"{method}; block {test.block} windows", windows)


def skipped(name: str, unit: str, reason: str) -> Check:
    return Check(name, unit, None, None, None, None, None, "skipped", reason)


def compare(run: Series, base: Baseline, opts: GateOptions, *, step_hours: float | None,
            span_s: float | None = None) -> list[Check]:
    """Every check of ``run`` against ``base`` (both made with the same parameters).

    ``span_s``: the run's span from its first to its last event (entropy's ``summary.span_s``), which
    sets the slope's unit and its least tolerance; default: the span of its windows.
    """
    opts.check()
    r, b = run.finite, base.series.finite
    checks = [_mean("mean", run.h[r], base.series.h[b], opts, seed=opts.seed)]
    checks.append(_slope(run, base.series, opts, run.span * 3600 if span_s is None else span_s))
    checks.append(_aligned(run, base.series, opts, step_hours))
    segments = _segments(opts.segments, max(run.span, base.series.span)) if opts.segments else []
    for i, (lo, hi) in enumerate(segments):
        name = f"mean {lo:g}-{hi:g} h" if math.isfinite(hi) else f"mean {lo:g} h-end"
        sr = r & (run.x >= lo) & (run.x < hi)
        sb = b & (base.series.x >= lo) & (base.series.x < hi)
        if min(sr.sum(), sb.sum()) < GATE_MIN_WINDOWS:
            checks.append(skipped(name, "bits", f"fewer than {GATE_MIN_WINDOWS} windows in this period "
                                  f"(run {int(sr.sum())}, baseline {int(sb.sum())})"))
        else:
            checks.append(_mean(name, run.h[sr], base.series.h[sb], opts, seed=opts.seed + 10 + i))
    return checks


def _segments(bounds: tuple[float, ...], span: float) -> list[tuple[float, float]]:
    edges = [0.0, *bounds, math.inf]
    return [(edges[i], edges[i + 1]) for i in range(len(edges) - 1) if edges[i] <= span]


def _mean(name: str, yr: np.ndarray, yb: np.ndarray, opts: GateOptions, *, seed: int) -> Check:
    t = stats.mean_increase(yr, yb, block=opts.block_len, resamples=opts.resamples, seed=seed)
    tol = opts.max_increase.bits(float(yb.mean()))
    return decide(name, "bits", float(yr.mean()), float(yb.mean()), t, tol, opts, windows=int(yr.size))


def _slope(run: Series, base: Series, opts: GateOptions, span_s: float) -> Check:
    if run.x_unit != "hours" or base.x_unit != "hours":
        return skipped("slope", "bits/hour", "windows without timestamps (--window-events): no slope per hour")
    r, b = run.finite, base.finite
    t = stats.slope_increase(run.x[r], run.h[r], base.x[b], base.h[b], block=opts.block_len,
                             resamples=opts.resamples, seed=opts.seed + 1)
    name, per = timescale.slope_unit(span_s)  # hours per unit
    unit = f"bits/{name}"
    mean_tol = opts.max_increase.bits(float(base.h[b].mean()))
    least = mean_tol / (span_s / 3600) if span_s > 0 else math.inf  # bits/hour
    tol = max(opts.max_slope_increase, least)
    scaled = stats.Test(t.change * per, t.p_value, t.ci_low * per, t.ci_high * per, t.block)
    check = decide("slope", unit, stats.slope(run.x[r], run.h[r]) * per, stats.slope(base.x[b], base.h[b]) * per,
                   scaled, tol * per, opts, windows=int(r.sum()))
    if tol > opts.max_slope_increase:
        check.message += (f"; tolerance raised from --max-slope-increase {opts.max_slope_increase:g} bits/hour "
                          f"to {tol * per:.4g} {unit}: over the {timescale.fmt_duration(span_s)} run a smaller rise "
                          f"moves the entropy by less than the mean tolerance ({mean_tol:.4g} bits)")
    return check


def _aligned(run: Series, base: Series, opts: GateOptions, step_hours: float | None) -> Check:
    name, unit = "aligned", "bits"
    if run.x_unit != "hours" or base.x_unit != "hours":
        return skipped(name, unit, "windows without timestamps: no hours to align on")
    if not step_hours:
        return skipped(name, unit, "event-count windows (--window-events): no common hour grid to align on")
    if abs(run.span - base.span) > opts.length_tolerance * max(base.span, 1e-12):
        return skipped(name, unit, f"runs differ in length ({run.span:.3g} h vs {base.span:.3g} h, more than "
                       f"{opts.length_tolerance:.0%}); the window-by-window check needs the same job length")
    kr = np.rint(run.x / step_hours).astype(np.int64)
    kb = np.rint(base.x / step_hours).astype(np.int64)
    common, ir, ib = np.intersect1d(kr, kb, return_indices=True)
    d = run.h[ir] - base.h[ib]
    ok = np.isfinite(d)
    if ok.sum() < GATE_MIN_WINDOWS:
        return skipped(name, unit, f"only {int(ok.sum())} windows at the same hour in both runs")
    t = stats.paired_increase(d[ok], block=opts.block_len, resamples=opts.resamples, seed=opts.seed + 2)
    return decide(name, unit, float(run.h[ir][ok].mean()), float(base.h[ib][ok].mean()), t,
                  opts.max_increase.bits(float(base.h[ib][ok].mean())), opts, windows=int(ok.sum()),
                  method=METHOD.replace("block bootstrap", "block bootstrap of paired differences"))
