"""The replay over pieces of a trace in parallel (``--jobs N``, ``--engine dask``), exactly as on one process.

A piece's replay needs the allocator state at its start, so pieces are not independent; two
parallel passes make them so:

1. ``boundary.boundary_pass`` (per piece, from an empty state): what the piece does to any state it
   starts from. Every address with an alloc or free in it loses the block it had before (freed,
   or dropped by a second alloc), and the addresses whose last alloc/free is an alloc hold that
   block at its end; segment events are kept in order (they are few). Plus, per device, the first
   and last timestamp (or row) and the last allocation address.
2. ``boundary.start_states`` (on the client, in piece order; its cost follows the live set and
   the distinct addresses each piece touches, not the number of events): each piece's exact
   starting state, and what its replay must know of the pieces around it (the window a
   device's previous event left open, the window of its next event).
3. ``replay_piece`` (per piece): the replay from that state, a pure function of (piece, start).
   A window that two pieces share is left open by the first and continued by the next;
   ``PiecePartial.merge`` joins such rows (counts and integrals add, peaks take the max, the
   state at the window's end comes from the later piece) and merges zones, layout and counters.

Exact for traces in time order per device (what ``fragmentation_series`` asks for): out-of-order
events are ordered within each batch, and batches differ between one process and pieces. The
stride histogram keeps its first MAX_STRIDES distinct strides per batch, so past that many its
``uncounted`` may differ. Sources with ``free_requested`` events (PyTorch traces) are replayed
on one process (``ParallelSetup.replay_params`` says why).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from veotrace.defaults import FRAGMENTATION_BINS as DEFAULT_BINS
from veotrace.frag import windows
from veotrace.frag.boundary import (
    Boundary,
    PieceStart,
    boundary_pass,
    start_states,
)
from veotrace.frag.decode import COLUMNS
from veotrace.frag.layout import DEFAULT_ZONE_BYTES
from veotrace.frag.metrics import DEFAULT_MAX_GAP, DEFAULT_THRESHOLD
from veotrace.frag.rows import finish_row
from veotrace.frag.state import DeviceState, ReplayCounters
from veotrace.frag.windows import Replay, _Win

__all__ = ["COLUMNS", "ParallelSetup", "PiecePartial", "boundary_pass", "replay_piece", "start_states"]


@dataclass
class PiecePartial:
    """The replay of one or several consecutive pieces: complete rows, rows of windows still shared
    with pieces before (``heads``) or after (``tails``), and everything else merged."""

    rows: list
    heads: dict
    tails: dict
    bin_rows: list
    layout: object
    counters: ReplayCounters
    n_read: int
    placed: int
    has_time: bool
    event_windows: bool
    states: dict  # the state at the end of the last piece
    PURE_MERGE = True  # (class attribute) merge leaves both inputs as they were: no copies needed

    def merge(self, other: PiecePartial) -> PiecePartial:
        """This partial followed by ``other`` (the next pieces of the trace); neither is changed (rows
        are shared, never modified: a joined window is a new row)."""
        heads, tails = dict(self.heads), dict(other.tails)
        rows = self.rows + other.rows
        for d, tail in self.tails.items():
            head = other.heads.get(d)
            if head is None:  # the other pieces have no event of d: the window is still open
                tails.setdefault(d, tail)
                continue
            r = _join(tail, head)
            if r["_cont"]:
                heads[d] = r
            if r["_open"]:
                tails[d] = r
            if not (r["_cont"] or r["_open"]):
                rows.append(finish_row(r, self.event_windows))
        for d, head in other.heads.items():
            if d not in self.tails:
                heads.setdefault(d, head)
        layout = copy.deepcopy(self.layout).merge(other.layout)
        return PiecePartial(rows, heads, tails, self.bin_rows + other.bin_rows, layout,
                            copy.copy(self.counters).merge(other.counters), self.n_read + other.n_read,
                            self.placed + other.placed, self.has_time and other.has_time, self.event_windows,
                            other.states or self.states)


_ADD = ("events", "allocs", "frees", "device_allocs", "device_frees")


def _join(a: dict, b: dict) -> dict:
    """The row of a window whose events ``a`` (earlier pieces) and ``b`` (later) share."""
    r = dict(b)
    for k in _ADD:
        r[k] = a[k] + b[k]
    r["_pl"], r["_pr"] = max(a["_pl"], b["_pl"]), max(a["_pr"], b["_pr"])
    r["live_bytes_peak"] = max(a["live_bytes_peak"], b["live_bytes_peak"])
    if a["reserved_bytes_peak"] is not None and b["reserved_bytes_peak"] is not None:
        r["reserved_bytes_peak"] = max(a["reserved_bytes_peak"], b["reserved_bytes_peak"])
    r["_int"], r["_t0"], r["_cont"] = a["_int"] + b["_int"], a["_t0"], a["_cont"]
    return r


def boundary_task(batches, **params) -> list[Boundary]:
    """The engines' pass-1 task: the piece's boundary (``boundary_pass``), in a list that merges by joining."""
    return [boundary_pass(batches, **params)]


def replay_task(batches, *, start: PieceStart, replay: dict) -> PiecePartial:
    """The engines' pass-2 task: ``replay_piece`` from the piece's start state."""
    return replay_piece(batches, start, params=replay)


def replay_piece(batches, start: PieceStart, *, params: dict) -> PiecePartial:
    """Pass 2: replay one piece from its start (``params``: Replay's keywords and ``zone_bytes``)."""
    from veotrace.frag.layout import Layout

    p = dict(params)
    layout = Layout(zone_bytes=p.pop("zone_bytes"), bins=tuple(p["bins"]), max_gap=p["max_gap"])
    rp = Replay(initial=start.states, layout=layout, at_ns=None, **p)
    rp.n_read = rp.n_offset = start.n_offset
    rp.first_ts.update(start.first_ts)
    rp.last_ts.update(start.last_ts)
    layout.strides.last.update(start.last_alloc)
    for d, (k, t_from) in start.cont.items():
        rp.open[d] = _Win(k, t_from, cont=True)
    rp.next_k = start.next_k
    for batch in batches:
        rp.feed(batch)
    rp.finish()
    heads = {r["device"]: r for r in rp.rows if r["_cont"]}
    tails = {r["device"]: r for r in rp.rows if r["_open"]}
    rows = [r for r in rp.rows if not (r["_cont"] or r["_open"])]
    counters = ReplayCounters()
    for st in rp.states.values():
        counters.merge(st.counters)
    return PiecePartial(rows, heads, tails, rp.bin_rows, layout, counters, rp.n_read - rp.n_offset, rp.placed,
                        rp.has_time, rp.window_events is not None, rp.states)


ONE_PIECE = "note: one piece of input (nothing to split): replayed on one process"
#: Local processes (--jobs) from which the two passes are used. One process already keeps ~1.6 cores
#: busy (reader threads beside the replay); the two passes cost 2.1x its CPU on gzip logs (1.6x with
#: pass 1's spill, ``engine.spill``), so 2 local workers finished later (15.1 s against 8.7 s on 34M
#: events in 17 gzip files; 12.6 s with the spill) and the break-even is ~3. A Dask cluster
#: (--engine dask) always gets the pieces.
MIN_LOCAL_JOBS = 4


@dataclass
class ParallelSetup:
    """``fragmentation_series``' keywords for a run on the engines: the jobs of both passes, and the result."""

    window_s: float | None = None
    window_events: int | None = None
    threshold: float = DEFAULT_THRESHOLD
    max_gap: int = DEFAULT_MAX_GAP
    bins: tuple = DEFAULT_BINS
    round_bytes: int = 1
    zone_bytes: int | str = DEFAULT_ZONE_BYTES
    top_zones: int | None = 100
    latency_col: str | None = None

    def __post_init__(self) -> None:
        from veotrace.defaults import FRAGMENTATION_WINDOW_S
        from veotrace.frag.result import check_params

        self.bins = tuple(tuple(b) for b in self.bins)
        check_params(self.window_s, self.window_events, self.threshold, self.max_gap, self.bins, self.round_bytes,
                     self.zone_bytes)
        self.default_window = self.window_s is None and self.window_events is None
        if self.default_window:
            self.window_s = FRAGMENTATION_WINDOW_S

    def boundary_params(self) -> dict:
        return {"round_bytes": self.round_bytes, "time_windows": self.window_events is None}

    def replay_params(self, bounds: list[Boundary]) -> list[dict] | str:
        """The parameters of ``replay_task`` for each piece (pass 2), or why the pieces cannot be replayed apart."""
        if len(bounds) < 2:
            return ONE_PIECE
        if any(b.free_requested for b in bounds):
            return "note: free_requested events (pending frees): replayed on one process"
        first = next((b for b in bounds if b.rows), bounds[0])  # the first batch read is the first row's
        if self.default_window and first.null_ts_first:
            return "note: events without timestamps: replayed on one process"
        window_ns = None if self.window_events is not None else round(self.window_s * 1e9)
        starts = start_states(bounds, window_ns=window_ns, window_events=self.window_events)
        replay = {"window_ns": window_ns, "window_events": self.window_events, "round_bytes": self.round_bytes,
                  "max_gap": self.max_gap, "threshold": self.threshold, "bins": self.bins,
                  "zone_bytes": self.zone_bytes, "latency_col": self.latency_col}
        return [{"start": st, "replay": replay} for st in starts]

    def result(self, part: PiecePartial):
        """The FragmentationResult of the merged partial of every piece (as ``fragmentation_series``')."""
        from types import SimpleNamespace

        from veotrace.frag import require_placed
        from veotrace.frag.result import build_result

        assert not part.heads and not part.tails, "a window left open at the trace's ends"
        if len(part.rows) > windows.MAX_WINDOWS:  # each piece stayed below; joined, they do not
            raise windows.too_many_windows()
        require_placed(part.placed, part.counters.events_without_address)
        states = {d: st for d, st in part.states.items()}
        for st in states.values():  # the counters of the whole trace: every piece's, summed
            st.counters = ReplayCounters()
        next(iter(states.values()), DeviceState()).counters = copy.copy(part.counters)
        replay = SimpleNamespace(rows=part.rows, bin_rows=part.bin_rows, layout=part.layout, states=states,
                                 at_states=None, n_read=part.n_read, has_time=part.has_time,
                                 window_events=self.window_events)
        params = {"window_s": self.window_s if self.window_events is None else None,
                  "window_events": self.window_events, "threshold": self.threshold,
                  "max_gap_bytes": self.max_gap, "round_bytes": self.round_bytes, "zone_bytes": self.zone_bytes,
                  "bins": [[lo, hi] for lo, hi in self.bins], "at_ns": None, "latency_col": self.latency_col}
        return build_result(replay, params, top_zones=self.top_zones)
