"""Gate layer: does this run start (or complete) a new, higher regime in a history of runs?

The series is the mean entropy of each earlier baseline, in recorded order, then the run's. It is
split by E-Divisive (Matteson & James 2014, the method behind MongoDB's and Apache Otava's CI
change detection): the split maximising the energy-distance statistic
``Q = (n m / (n + m)) (2 E|X-Y| - E|X-X'| - E|Y-Y'|)`` is kept when a permutation test finds it
significant at ``alpha``, and each side is split again. The check compares the regime holding the
run with the regime before it, with the mean tolerance: a slow creep of small steps, each within
tolerance against the previous run, adds up to two regimes whose means differ by more. Without a
significant change point, ``strict`` compares the run with the mean of the whole history.

A regime accepted on purpose is accepted by removing the baselines before it from the folder.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from veotrace.gating.compare import Check, GateOptions

#: Permutations per split test (each costs O(n^2) for n runs; 999 gives p-values down to 0.001).
MAX_PERMUTATIONS = 999
HISTORY_METHOD = "E-Divisive (energy statistic, permutation test) on per-run mean entropy"


def _best_split(x: np.ndarray) -> tuple[int, float]:
    """The split index tau (x[:tau] | x[tau:]) maximising the energy statistic Q, and Q."""
    n = x.size
    d = np.abs(x[:, None] - x[None, :])
    c = np.zeros((n + 1, n + 1))
    c[1:, 1:] = d.cumsum(0).cumsum(1)  # c[i, j] = sum of d[:i, :j]
    tau = np.arange(1, n)
    m = n - tau
    within_x = c[tau, tau]
    cross = c[tau, n] - within_x
    within_y = c[n, n] - 2 * cross - within_x
    with np.errstate(invalid="ignore", divide="ignore"):
        e = (2 * cross / (tau * m)
             - np.where(tau > 1, within_x / (tau * (tau - 1)), 0.0)
             - np.where(m > 1, within_y / (m * (m - 1)), 0.0))
    q = tau * m / n * e
    i = int(np.argmax(q))
    return int(tau[i]), float(q[i])


def _split_p(x: np.ndarray, q: float, rng: np.random.Generator, permutations: int) -> float:
    hits = sum(_best_split(rng.permutation(x))[1] >= q - 1e-12 for _ in range(permutations))
    return (1 + hits) / (1 + permutations)


def e_divisive(x: np.ndarray, *, alpha: float, permutations: int, seed: int) -> list[tuple[int, float]]:
    """Significant change points of ``x`` as (index of the first point of the new regime, p-value), sorted."""
    rng = np.random.default_rng(seed)
    found: list[tuple[int, float]] = []
    todo = [(0, x.size)]
    while todo:
        lo, hi = todo.pop()
        if hi - lo < 2 or np.ptp(x[lo:hi]) == 0:
            continue
        tau, q = _best_split(x[lo:hi])
        p = _split_p(x[lo:hi], q, rng, permutations)
        if p <= alpha:
            found.append((lo + tau, p))
            todo += [(lo, lo + tau), (lo + tau, hi)]
    return sorted(found)


@dataclass
class HistoryPoint:
    """One run of the series: its label (baseline file or "this run"), recorded time and mean."""

    label: str
    recorded_at: str
    mean: float


def history_check(points: list[HistoryPoint], opts: GateOptions) -> tuple[Check, dict]:
    """The ``history`` check of the last point (this run) against the earlier ones, and a JSON summary."""
    x = np.array([p.mean for p in points])
    cps = e_divisive(x, alpha=opts.alpha, permutations=min(opts.resamples, MAX_PERMUTATIONS), seed=opts.seed)
    bounds = [0, *[t for t, _ in cps], x.size]
    regimes = [{"first": points[bounds[i]].label, "first_recorded_at": points[bounds[i]].recorded_at,
                "runs": bounds[i + 1] - bounds[i], "mean_bits": float(x[bounds[i]:bounds[i + 1]].mean())}
               for i in range(len(bounds) - 1)]
    summary = {"runs": [p.__dict__ for p in points], "change_points": [
        {"index": t, "first": points[t].label, "p_value": p} for t, p in cps], "regimes": regimes,
        "method": HISTORY_METHOD}
    name, unit = "history", "bits"
    if not cps:
        base = float(x[:-1].mean())
        tol = opts.max_increase.bits(base)
        change = float(x[-1] - base)
        if opts.strict and change > tol:
            msg = (f"no change point among {x.size} runs, but this run is {change:+.4g} bits above the history's "
                   f"mean, above the tolerance {tol:.4g} (failed by --strict)")
            return Check(name, unit, float(x[-1]), base, change, tol, None, "fail", msg, method=HISTORY_METHOD,
                         windows=int(x.size)), summary
        return Check(name, unit, float(x[-1]), base, change, tol, None, "pass",
                     f"no change point among {x.size} runs at alpha {opts.alpha:g}", method=HISTORY_METHOD,
                     windows=int(x.size)), summary
    tau, p = cps[-1]
    prev_lo = cps[-2][0] if len(cps) > 1 else 0
    now, before = float(x[tau:].mean()), float(x[prev_lo:tau].mean())
    change, tol = now - before, opts.max_increase.bits(before)
    since = f"runs since {points[tau].label} ({points[tau].recorded_at or 'no time'}, {x.size - tau} runs)"
    if change > tol:
        verdict = "fail"
        msg = (f"this run is in a new regime: {since} average {now:.4g} bits, {change:+.4g} above the "
               f"{tau - prev_lo} runs before ({before:.4g}), above the tolerance {tol:.4g} (change point p = {p:.3g})")
    elif change > 0:
        verdict, msg = "pass", f"{since} average {change:+.4g} bits above the regime before, within the tolerance {tol:.4g}"
    else:
        verdict, msg = "pass", f"{since} average {change:+.4g} bits against the regime before; a decrease never fails"
    return Check(name, unit, now, before, change, tol, p, verdict, msg, method=HISTORY_METHOD,
                 windows=int(x.size)), summary


def check_history_size(points: int, folder: str, need: int) -> None:
    """Raises VeotraceError for an empty or too small history folder."""
    from veotrace.errors import VeotraceError

    if points == 0:
        raise VeotraceError("the history folder holds no baselines (*.json)", path=folder,
                            hint="Save baselines into it with 'veotrace entropy PATH --save-baseline FOLDER/NAME.json'")
    if points < need:
        raise VeotraceError(f"the history folder holds {points} baseline{'s' * (points != 1)}; a change-point test "
                            f"needs at least {need}", path=folder, hint="Use --baseline FILE to compare with one run")
