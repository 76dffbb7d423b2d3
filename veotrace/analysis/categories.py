"""``veotrace categories``: export_memory_timeline's categories over time (parameter, optimizer state, input,
temporary, activation, gradient, autograd detail, unknown).

This module owns the rules: per window, the bytes live in each category at the window's end and at most
during it (the state carried into the window counts), and their total; the peak (the point where the total
is largest, its first occurrence), what it holds and which category dominates it; which category grew most
from the start (the bytes that existed before profiling) to the peak and from the peak to the end; and the
bytes that existed before profiling (raw ``ts`` -1 rows, PREEXISTING). Its input is the points of either
timeline form (``sources.kineto.timeline.series``): the state after every row at one time.

Windows: ``window_s`` (time windows from the first timed point), ``window_events`` (N consecutive points),
or the default ``CATEGORIES_WINDOW_S``, replaced by one chosen from the data when the span gives under
``timescale.MIN_WINDOWS`` (``timescale.fit_window``, the one window rule of every timed analysis).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from veotrace.analysis import timescale
from veotrace.defaults import CATEGORIES_MAX_WINDOWS, CATEGORIES_WINDOW_S
from veotrace.errors import AnalysisError, UsageError

_EMPTY = {"category": None, "bytes": 0}


@dataclass
class CategoriesResult:
    """What ``categories`` found; ``to_dict()`` is the command's JSON, ``export_table()`` its windows."""

    categories: list[str]
    params: dict
    summary: dict
    before: dict
    peak: dict
    end: dict
    growth: dict
    windows: list[dict]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"categories": self.categories, "params": self.params, "summary": self.summary,
                "before_profiling": self.before, "peak": self.peak, "end": self.end, "growth": self.growth,
                "windows": self.windows, "notes": self.notes}

    def export_table(self):
        """The windows as an Arrow table (``--format csv/parquet``): the JSON's ``windows`` rows."""
        import pyarrow as pa

        return pa.Table.from_pylist(self.windows, schema=window_schema(self.categories))

    def headline(self) -> list[tuple[str, Any]]:
        dom = self.peak.get("dominant") or _EMPTY
        grew = self.growth["start_to_peak"]["grew_most"] or _EMPTY
        return [("points", self.summary["points"]), ("peak bytes", self.peak["total"]),
                ("dominant at the peak", dom["category"]), ("grew most to the peak", grew["category"]),
                ("before profiling bytes", self.before["total"]), ("end bytes", self.end["total"])]


def window_schema(names: list[str]):
    import pyarrow as pa

    return pa.schema([pa.field("window", pa.int64()), pa.field("start_s", pa.float64()),
                      pa.field("end_s", pa.float64()), pa.field("points", pa.int64()),
                      pa.field("total_bytes", pa.int64()), pa.field("max_total_bytes", pa.int64()),
                      *(pa.field(f"{c}_bytes", pa.int64()) for c in names),
                      *(pa.field(f"{c}_max_bytes", pa.int64()) for c in names)])


def _by(names: list[str], row: np.ndarray) -> dict[str, int]:
    return {c: int(v) for c, v in zip(names, row)}


def _most(names: list[str], delta: np.ndarray) -> tuple[dict | None, dict | None]:
    """The category whose bytes rose most (None when none rose) and fell most (None when none fell)."""
    if not delta.size:
        return None, None
    hi, lo = int(np.argmax(delta)), int(np.argmin(delta))
    return ({"category": names[hi], "bytes": int(delta[hi])} if delta[hi] > 0 else None,
            {"category": names[lo], "bytes": int(delta[lo])} if delta[lo] < 0 else None)


def _choose(t: np.ndarray, window_s: float | None, window_events: int | None) -> tuple[int | None, int | None, dict]:
    """(window_ns, window_points, choice) by the one window rule."""
    if window_events is not None:
        return None, int(window_events), {"auto": False, "mode": "points", "reason": None}
    if window_s is not None:
        w = int(round(window_s * timescale.NS_PER_S))
        if w < 1:
            raise UsageError(f"--window {window_s:g}s is under a nanosecond", hint="Give a longer --window")
        return w, None, {"auto": False, "mode": "time", "reason": None}
    if not t.size:
        return round(CATEGORIES_WINDOW_S * timescale.NS_PER_S), None, {"auto": False, "mode": "time", "reason": None}
    w, why = timescale.fit_window(int(t[0]), int(t[-1]), CATEGORIES_WINDOW_S, lambda: t, int(t.size))
    if why is None:
        return round(CATEGORIES_WINDOW_S * timescale.NS_PER_S), None, {"auto": False, "mode": "time", "reason": None}
    if w is None:  # the points fall at too few instants for any time window: windows of points
        return None, timescale.auto_window_events(int(t.size)), {"auto": True, "mode": "points", "reason": why}
    return int(w), None, {"auto": True, "mode": "time", "reason": why}


def _implausible(series: dict, t: np.ndarray, timed: np.ndarray, nwin: int) -> None:
    """The default window over a span of years: a time far from the others (a damaged row, another unit), named
    by its row; a profiled run spans seconds.

    Raises:
        AnalysisError: always.
    """
    span = timescale.fmt_duration((int(t[-1]) - int(t[0])) / timescale.NS_PER_S)
    hint = "Fix or remove that row, or give --window-events N (windows of points)"
    at = timescale.find_outlier(t)
    if at is not None:
        rows = series.get("row")
        row = f"row {int(rows[timed][at]):,}" if rows is not None else "a point"
        raise AnalysisError(f"{row}'s time {int(t[at])} ns lies far from all the others (the points span {span}): "
                            "a damaged row, or a time in another unit", hint=hint)
    raise AnalysisError(f"the points span {span}, which the default windows of "
                        f"{timescale.fmt_duration(CATEGORIES_WINDOW_S)} cut into {nwin:,} (at most "
                        f"{CATEGORIES_MAX_WINDOWS:,}); a profiled run spans seconds", hint="Give --window or --window-events")


def categories_over_time(series: dict, *, window_s: float | None = None, window_events: int | None = None) -> CategoriesResult:
    """Categories over time from ``series`` (``sources.kineto.timeline.series``: either timeline form).

    Raises:
        UsageError: ``--window`` giving more than ``CATEGORIES_MAX_WINDOWS`` windows over the span.
        AnalysisError: the default window giving that many (a time far from the others, named by its row).
    """
    names: list[str] = list(series["categories"])
    states: np.ndarray = series["states"]
    null: np.ndarray = series["null"]
    ts: np.ndarray = series["ts_ns"]
    ncat = len(names)
    before = np.asarray(series["before"], np.int64)
    timed = ~null
    t, S = ts[timed], states[timed]
    tot = S.sum(axis=1) if S.size else np.zeros(t.size, np.int64)
    window_ns, window_pts, choice = _choose(t, window_s, window_events)
    notes: list[str] = []
    if choice["auto"]:
        hint = "give --window or --window-events to choose"
        size = window_ns / timescale.NS_PER_S if window_ns else None
        notes.append(timescale.window_note(size, choice["reason"], hint=hint) if size is not None else
                     f"Note: using windows of {window_pts:,} points: {choice['reason']} and its points fall at too "
                     f"few instants for a time window; {hint}")
    windows: list[dict] = []
    t0 = int(t[0]) if t.size else None
    if t.size:
        k = (np.arange(t.size, dtype=np.int64) // window_pts) if window_pts else (t - t0) // window_ns
        nwin = int(k[-1]) + 1
        if nwin > CATEGORIES_MAX_WINDOWS and window_s is None and window_pts is None:
            _implausible(series, t, timed, nwin)
        if nwin > CATEGORIES_MAX_WINDOWS:
            raise UsageError(f"--window {timescale.fmt_duration(window_ns / timescale.NS_PER_S)} gives {nwin:,} "
                             f"windows over the {timescale.fmt_duration((int(t[-1]) - t0) / timescale.NS_PER_S)} span "
                             f"(at most {CATEGORIES_MAX_WINDOWS:,})", hint="Give a longer --window")
        j = np.arange(nwin, dtype=np.int64)
        end_idx = np.searchsorted(k, j, side="right") - 1  # the window's last point, or the last one before it
        end_state, end_tot = S[end_idx], tot[end_idx]
        carried = np.vstack([before[None, :], end_state[:-1]])  # the state live as the window opens
        carried_tot = np.concatenate([[int(before.sum())], end_tot[:-1]])
        first = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
        wins = k[first]
        win_max, win_tot_max = carried.copy(), carried_tot.copy()
        win_max[wins] = np.maximum(carried[wins], np.maximum.reduceat(S, first, axis=0))
        win_tot_max[wins] = np.maximum(carried_tot[wins], np.maximum.reduceat(tot, first))
        counts = np.bincount(k, minlength=nwin)
        if window_pts:
            start_ns = t[np.minimum(j * window_pts, t.size - 1)] - t0
            end_ns = t[end_idx] - t0
        else:
            start_ns, end_ns = j * window_ns, (j + 1) * window_ns
        for w in range(nwin):
            row = {"window": w, "start_s": float(start_ns[w]) / timescale.NS_PER_S,
                   "end_s": float(end_ns[w]) / timescale.NS_PER_S, "points": int(counts[w]),
                   "total_bytes": int(end_tot[w]), "max_total_bytes": int(win_tot_max[w])}
            row.update({f"{c}_bytes": int(end_state[w, i]) for i, c in enumerate(names)})
            row.update({f"{c}_max_bytes": int(win_max[w, i]) for i, c in enumerate(names)})
            windows.append(row)
    total_all = states.sum(axis=1) if states.size else np.zeros(0, np.int64)

    def at(i: int) -> dict:
        pre = bool(null[i])
        return {"ts_ns": None if pre else int(ts[i]), "at_s": None if pre else (int(ts[i]) - t0) / timescale.NS_PER_S,
                "before_profiling": pre, "total": int(total_all[i]), "by_category": _by(names, states[i])}

    if states.shape[0]:
        p = int(np.argmax(total_all))
        peak = at(p)
        dom = int(np.argmax(states[p]))
        peak["dominant"] = ({"category": names[dom], "bytes": int(states[p, dom]),
                             "share": float(states[p, dom] / total_all[p])} if total_all[p] > 0 else None)
        end = at(states.shape[0] - 1)
        peak_state, end_state_all = states[p], states[-1]
    else:
        peak = {"ts_ns": None, "at_s": None, "before_profiling": False, "total": 0, "by_category": _by(names, before),
                "dominant": None}
        end = {"ts_ns": None, "at_s": None, "before_profiling": False, "total": 0, "by_category": _by(names, before)}
        peak_state = end_state_all = before
    up1, down1 = _most(names, peak_state - before)
    up2, down2 = _most(names, end_state_all - peak_state)
    growth = {"start_to_peak": {"by_category": _by(names, peak_state - before), "grew_most": up1, "shrank_most": down1},
              "peak_to_end": {"by_category": _by(names, end_state_all - peak_state), "grew_most": up2,
                              "shrank_most": down2}}
    neg = [names[i] for i in range(ncat) if states.size and states[:, i].min() < 0]
    if neg:
        notes.append(f"Note: the bytes of {', '.join(neg)} go below 0 at some point: the timeline destroys tensors "
                     "it saw no creation of (a profile started mid-run), so those series are low by as much")
    if series.get("out_of_order"):
        notes.append(f"Note: {series['out_of_order']:,} rows were out of time order and were put in order "
                     "(PyTorch writes them in order)")
    span_s = (int(t[-1]) - t0) / timescale.NS_PER_S if t.size else None
    params = {"window_s": window_ns / timescale.NS_PER_S if window_ns else None, "window_events": window_pts,
              "window_choice": choice}
    summary = {"form": series["form"], "rows": int(series["rows"]), "points": int(states.shape[0]),
               "timed_points": int(t.size), "first_ns": t0, "last_ns": int(t[-1]) if t.size else None,
               "span_s": span_s, "windows": len(windows)}
    before_d = {"total": int(before.sum()), "by_category": _by(names, before)}
    return CategoriesResult(names, params, summary, before_d, peak, end, growth, windows, notes)
