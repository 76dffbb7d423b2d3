"""Time scales chosen from the data: round window lengths, display units, implausible spans, wording.

A timed PyTorch snapshot spans seconds and a training log spans days; one fixed default window
(300 s) cannot serve both. This module picks a round window from the data when the default would
give too few windows, names durations and slope units that fit a span, and spots a timestamp that
lies orders of magnitude away from the other rows (one epoch-ns row in a log of small numbers)
before anything is allocated for the windows it would imply.
"""

from __future__ import annotations

import numpy as np

NS_PER_S = 1_000_000_000
#: Fewer windows than this is not a usable series: the default window is replaced by one from the data.
MIN_WINDOWS = 20
#: An automatic choice aims at about one non-empty window per this many counted events ...
AUTO_EVENTS_PER_WINDOW = 20
#: ... and at this many non-empty windows at most (enough for a trend, few enough to read).
AUTO_MAX_WINDOWS = 100
#: An automatic window never cuts the span into more windows than this (events in short bursts far apart
#: would otherwise get a window of microseconds over seconds: millions of mostly empty windows).
AUTO_MAX_SPAN_WINDOWS = 10_000
#: Round window lengths (ns) an automatic choice picks from: 1-2-5 steps from 1 us to 5 s, then 10 s ... 5 min.
ROUND_WINDOWS_NS = tuple(int(m * 10**e) for e in range(3, 10) for m in (1, 2, 5)) + (
    10 * NS_PER_S, 15 * NS_PER_S, 30 * NS_PER_S, 60 * NS_PER_S, 120 * NS_PER_S, 300 * NS_PER_S)
#: A span of more windows than this AND more than OUTLIER_WINDOWS_PER_ROW per row read is implausible.
OUTLIER_MIN_WINDOWS = 100_000
OUTLIER_WINDOWS_PER_ROW = 10
#: ... and more than REFUSE_MIN_WINDOWS windows and REFUSE_WINDOWS_PER_ROW per row read is refused (a
#: series nearly all empty, whose tables take minutes and gigabytes: two rows 28 years apart in 5 min
#: windows make 2.9 million, 16 s and 2.9 GB before this bound).
REFUSE_MIN_WINDOWS = 1_000_000
REFUSE_WINDOWS_PER_ROW = 1000
#: One timestamp is an outlier when the gap between it and the rest is this share of the whole span.
OUTLIER_GAP_SHARE = 0.99

#: A run of empty windows is an idle gap (the run falls into phases) when it is at least this many
#: windows long and at least IDLE_GAP_SHARE of all windows.
IDLE_GAP_MIN_WINDOWS = 5
IDLE_GAP_SHARE = 0.1

_UNITS = ((1e-9, "ns"), (1e-6, "us"), (1e-3, "ms"), (1.0, "s"), (60.0, "min"), (3600.0, "h"))


def plural(n: int, word: str, many: str | None = None) -> str:
    """``"1 window"``, ``"2 windows"``, ``"1,024 bursts"``."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


def duration_unit(seconds: float) -> tuple[str, float]:
    """The unit (name, seconds per unit) in which ``seconds`` reads as a number from 1 to < 1000-ish."""
    name, scale = "ns", 1e-9
    for s, n in _UNITS:
        if abs(seconds) >= s:
            name, scale = n, s
    return name, scale


def fmt_duration(seconds: float) -> str:
    """A duration in the unit that fits it: ``"10 ms"``, ``"2.5 s"``, ``"5 min"``, ``"236.9 h"``."""
    if seconds == 0:
        return "0 s"
    name, scale = duration_unit(seconds)
    return f"{seconds / scale:.4g} {name}"


def slope_unit(span_s: float) -> tuple[str, float]:
    """Per-time unit for a slope over a run of ``span_s`` seconds: (name, hours per unit).

    Seconds below 2 minutes, minutes below 2 hours, hours above, so that a 3-second snapshot
    does not report "1,595 bits/hour".
    """
    if span_s < 120:
        return "second", 1 / 3600
    if span_s < 7200:
        return "minute", 1 / 60
    return "hour", 1.0


def target_windows(n_events: int) -> int:
    """How many non-empty windows an automatic choice aims at for ``n_events`` counted events."""
    return int(min(AUTO_MAX_WINDOWS, max(MIN_WINDOWS, n_events // AUTO_EVENTS_PER_WINDOW)))


def nonempty_windows(ts_sorted: np.ndarray, window_ns: int) -> int:
    """Number of distinct windows [k*W, (k+1)*W) holding at least one of the sorted timestamps."""
    if ts_sorted.size == 0:
        return 0
    k = ts_sorted // window_ns
    return int(np.count_nonzero(k[1:] != k[:-1])) + 1


def choose_window_ns(ts: np.ndarray, n_events: int) -> int | None:
    """The longest round window giving at least ``target_windows(n_events)`` non-empty windows.

    Args:
        ts: timestamps (ns) of the counted events, any order.

    Returns:
        The window in ns, or None when even the shortest round window gives too few (events at a
        handful of instants): the caller then falls back to windows of consecutive events.
    """
    want = target_windows(n_events)
    ts = np.sort(ts)
    # Non-empty windows shrink (near enough monotonically) as windows grow: bisect the ladder.
    lo, hi = 0, len(ROUND_WINDOWS_NS)  # invariant: every ladder entry below lo fits
    while lo < hi:
        mid = (lo + hi) // 2
        if nonempty_windows(ts, ROUND_WINDOWS_NS[mid]) >= want:
            lo = mid + 1
        else:
            hi = mid
    return ROUND_WINDOWS_NS[lo - 1] if lo > 0 else None


def round_up_window(ns: int) -> int:
    """The smallest round window (1-2-5 steps, then minutes and hours) of at least ``ns``."""
    for w in ROUND_WINDOWS_NS + tuple(m * 60 * NS_PER_S for m in (10, 20, 30, 60, 120, 300, 600, 1200, 3000)):
        if w >= ns:
            return w
    return int(ns)


def auto_window_events(n_events: int) -> int:
    """Events per window for an automatic event-count window (at least 1)."""
    return max(1, n_events // target_windows(n_events))


def default_window_reason(default_s: float, first_ns: int, last_ns: int, spanned: int) -> str:
    """Why a default window is replaced: "the default 300 s window gives 1 window over the 2.7 s span"."""
    span = fmt_duration((last_ns - first_ns) / NS_PER_S)
    return f"the default {fmt_duration(default_s)} window gives {plural(spanned, 'window')} over the {span} span"


def fit_window(first_ns: int, last_ns: int, default_s: float, timestamps, n_events: int,
               origin_ns: int = 0) -> tuple[int | None, str | None]:
    """The one window rule of every timed analysis when no window is asked for.

    The default window stays when the span gives it at least MIN_WINDOWS windows: (None, None).
    Otherwise a round window from the data (:func:`choose_window_ns` on ``timestamps()``, called only
    then) and the reason: (window_ns, why); (None, why) when the events fall at too few instants for
    any time window (the caller then counts windows of events). Entropy, fragmentation (snapshots and
    logs) and simulate all choose their window here; ``origin_ns`` is where window 0 starts.
    """
    default_ns = round(default_s * NS_PER_S)
    spanned = windows_spanned(first_ns, last_ns, default_ns, default_ns, origin_ns)
    if spanned >= MIN_WINDOWS:
        return None, None
    why = default_window_reason(default_s, first_ns, last_ns, spanned)
    chosen = choose_window_ns(np.asarray(timestamps(), dtype=np.int64), n_events)
    floor = round_up_window(-(-(last_ns - first_ns + 1) // AUTO_MAX_SPAN_WINDOWS))
    if chosen is not None and chosen < floor:
        chosen = floor
        why += f" (and no shorter window, so that the span holds at most {AUTO_MAX_SPAN_WINDOWS:,} windows)"
    return chosen, why


def window_note(window_s: float, why: str, *, windows: int | None = None,
                hint: str = "give --window to choose") -> str:
    """The one wording of a window chosen from the data, on every command's stderr."""
    count = f" ({plural(windows, 'window')})" if windows is not None else ""
    return f"Note: using windows of {fmt_duration(window_s)}{count}: {why}; {hint}"


def windows_spanned(first_ns: int, last_ns: int, window_ns: int, step_ns: int, origin_ns: int = 0) -> int:
    """Number of windows k with O + k*S <= last and O + k*S + W > first (the windows a span produces)."""
    return int((last_ns - origin_ns) // step_ns - ((first_ns - origin_ns - window_ns) // step_ns + 1) + 1)


def implausible_span(n_windows: int, rows_read: int) -> bool:
    """True when ``n_windows`` is far more than the rows read could need (a unit mistake or an outlier row)."""
    return n_windows > OUTLIER_MIN_WINDOWS and n_windows > OUTLIER_WINDOWS_PER_ROW * max(rows_read, 1)


def find_outlier(ts: np.ndarray, first_ns: int | None = None, last_ns: int | None = None) -> int | None:
    """Index in ``ts`` of a single timestamp far from all the others, or None.

    ``first_ns``/``last_ns`` are the span of rows seen before ``ts`` (they take part in the
    comparison but are never returned). A timestamp is an outlier when the gap between it and the
    nearest other value is at least OUTLIER_GAP_SHARE of the whole span.
    """
    if ts.size == 0:
        return None
    prior = [v for v in (first_ns, last_ns) if v is not None]
    allv = np.concatenate([ts.astype(np.int64), np.array(prior, np.int64)]) if prior else ts.astype(np.int64)
    if allv.size < 3:
        return None
    order = np.argsort(allv, kind="stable")
    s = allv[order].astype(np.float64)
    span = s[-1] - s[0]
    if span <= 0:
        return None
    for pos, gap in ((-1, s[-1] - s[-2]), (0, s[1] - s[0])):
        if gap >= OUTLIER_GAP_SHARE * span and order[pos] < ts.size:
            return int(order[pos])
    return None


def phases(events_per_window: np.ndarray) -> list[tuple[int, int]]:
    """The phases of activity of a run: [start, end) window ranges between idle gaps (runs of empty
    windows at least IDLE_GAP_MIN_WINDOWS long and IDLE_GAP_SHARE of all windows). One phase when the
    run has no such gap; none when every window is empty."""
    busy = np.asarray(events_per_window) > 0
    n = busy.size
    if not busy.any():
        return []
    edges = np.flatnonzero(np.diff(np.r_[1, busy.astype(np.int8), 1]))  # starts and ends of empty runs
    gaps = [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2])
            if b - a >= max(IDLE_GAP_MIN_WINDOWS, IDLE_GAP_SHARE * n) and a > 0 and b < n]
    cuts = [0, *[x for g in gaps for x in g], n]
    out = []
    for lo, hi in zip(cuts[::2], cuts[1::2]):
        nz = np.flatnonzero(busy[lo:hi])
        out.append((lo + int(nz[0]), lo + int(nz[-1]) + 1))
    return out
