"""The replay over pieces of a trace in parallel (``--jobs N``, ``--engine dask``), exactly as on one process.

A piece's replay needs the allocator state at its start, so pieces are not independent; two
parallel passes make them so:

1. ``boundary_pass`` (per piece, from an empty state): what the piece does to any state it
   starts from. Every address with an alloc or free in it loses the block it had before (freed,
   or dropped by a second alloc), and the addresses whose last alloc/free is an alloc hold that
   block at its end; segment events are kept in order (they are few). Plus, per device, the first
   and last timestamp (or row) and the last allocation address.
2. ``start_states`` (on the client, in piece order; its cost follows the live set and the distinct
   addresses each piece touches, not the number of events): each piece's
   exact starting state, and what its replay must know of the pieces around it (the window a
   device's previous event left open, the window of its next event).
3. ``replay_piece`` (per piece): the replay from that state, a pure function of (piece, start).
   A window that two pieces share is left open by the first and continued by the next;
   ``PiecePartial.merge`` joins such rows (counts and integrals add, peaks take the max, the
   state at the window's end comes from the later piece) and merges zones, layout and counters.

Exact for traces in time order per device (what ``fragmentation_series`` asks for): out-of-order
events are ordered within each batch, and batches differ between one process and pieces. The
stride histogram keeps its first MAX_STRIDES distinct strides per batch, so past that many its
``uncounted`` may differ. Sources with ``free_requested`` events (PyTorch traces) are replayed
on one process (``ParallelUnsupported``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from veotrace.fragmentation.layout import DEFAULT_ZONE_BYTES
from veotrace.fragmentation.match import _sort_rows
from veotrace.fragmentation.metrics import (
    DEFAULT_BINS,
    DEFAULT_MAX_GAP,
    DEFAULT_THRESHOLD,
)
from veotrace.fragmentation.state import (
    ALLOC,
    FREE,
    FREE_REQ,
    OTHER,
    SEG_ALLOC,
    Counters,
    DeviceState,
    Segment,
)
from veotrace.fragmentation.windows import Replay, _codes, _col, _Win, finish_row


class ParallelUnsupported(Exception):
    """The pieces hold something the parallel replay does not reproduce exactly (replay on one process)."""


@dataclass
class DevBoundary:
    first_ts: int | None = None
    last_ts: int | None = None
    first_row: int = 0  # row of its first event in the piece
    last_row: int = 0
    last_alloc: int | None = None  # address of its last allocation (strides)
    seg_events: list = field(default_factory=list)  # (code, address, size) in replay order
    addr: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))  # every address with an alloc/free
    is_alloc: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # its last one is an alloc
    size: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # block of that alloc
    req: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


@dataclass
class Boundary:
    rows: int = 0
    null_ts_first: bool = False  # the first batch has rows without a timestamp
    free_requested: bool = False
    devices: dict = field(default_factory=dict)  # device -> DevBoundary


def boundary_pass(batches, *, round_bytes: int, time_windows: bool) -> Boundary:
    """Pass 1 over one piece (see the module docstring); rows are taken as ``Replay.feed`` takes them."""
    out = Boundary()
    for batch in batches:
        n = batch.num_rows
        if n == 0:
            continue
        code = _codes(batch.column("op"))
        addr_arr = batch.column("address") if "address" in batch.schema.names else pa.nulls(n, pa.uint64())
        if addr_arr.null_count:
            code = np.where(np.asarray(addr_arr.is_null()), OTHER, code).astype(np.int8)
            addr_arr = addr_arr.fill_null(0)
        addr = np.asarray(addr_arr).astype(np.uint64, copy=False)
        size = _col(batch, "size_bytes", np.int64, 0)
        block = _col(batch, "block_bytes", np.int64, -1)
        rounded = size if round_bytes <= 1 else -(-size // round_bytes) * round_bytes
        block = rounded if block is None else np.where(block >= 0, block, rounded)
        ts_arr = batch.column("ts_ns") if "ts_ns" in batch.schema.names else pa.nulls(n, pa.int64())
        if out.rows == 0:
            out.null_ts_first = bool(ts_arr.null_count)
        ts = np.asarray(ts_arr.fill_null(0) if ts_arr.null_count else ts_arr).astype(np.int64, copy=False)
        dev = _col(batch, "device", np.int64, 0)
        dev = np.zeros(n, np.int64) if dev is None else dev
        out.free_requested |= bool((code == FREE_REQ).any())
        row = out.rows + np.arange(n, dtype=np.int64)
        out.rows += n
        devices = np.unique(dev) if dev.min() != dev.max() else dev[:1]
        for d in devices.tolist():
            sel = (lambda x: x) if devices.size == 1 else (lambda x, m=dev == d: x[m])
            _device(out.devices.setdefault(int(d), DevBoundary()), sel(code), sel(addr), sel(size), sel(block),
                    sel(ts), sel(row), time_windows)
    return out


def _device(b: DevBoundary, code, addr, size, block, ts, row, time_windows: bool) -> None:
    if time_windows and ts.size > 1 and (np.diff(ts) < 0).any():
        order = np.argsort(ts, kind="stable")
        code, addr, size, block, ts = code[order], addr[order], size[order], block[order], ts[order]
    if b.first_ts is None:
        b.first_ts, b.first_row = int(ts[0]), int(row[0])
    b.last_ts = int(ts.max()) if b.last_ts is None else max(b.last_ts, int(ts.max()))
    b.last_row = int(row[-1])
    allocs = np.flatnonzero(code == ALLOC)
    if allocs.size:
        b.last_alloc = int(addr[allocs[-1]])
    for p in np.flatnonzero(code >= SEG_ALLOC).tolist():
        b.seg_events.append((int(code[p]), int(addr[p]), int(size[p])))
    blocky = np.flatnonzero((code == ALLOC) | (code == FREE))
    if not blocky.size:
        return
    # The last row per address in this batch: hashing (pyarrow) and a max, no sort of the batch.
    enc = pa.array(addr[blocky]).dictionary_encode()
    last_row = np.full(len(enc.dictionary), -1, np.int64)
    np.maximum.at(last_row, np.asarray(enc.indices), np.arange(blocky.size))
    pick = blocky[last_row]
    # ... then over the rows of the earlier batches (the later row wins): a sort of the distinct addresses
    a = np.r_[b.addr, np.asarray(enc.dictionary).astype(np.uint64, copy=False)]
    ia = np.r_[b.is_alloc, code[pick] == ALLOC]
    sz, rq = np.r_[b.size, block[pick]], np.r_[b.req, size[pick]]
    order, sa, _ = _sort_rows(a, np.zeros(a.size, np.int64))  # by (address, position): one packed sort
    last = np.ones(sa.size, bool)
    last[:-1] = sa[1:] != sa[:-1]
    pick = order[last]
    b.addr, b.is_alloc, b.size, b.req = sa[last], ia[pick], sz[pick], rq[pick]


@dataclass
class PieceStart:
    """What the replay of one piece starts from, and knows of the pieces around it."""

    states: dict  # device -> DeviceState (fresh counters)
    n_offset: int  # rows before the piece
    first_ts: dict  # device -> timestamp of its first event in the trace (devices seen before)
    last_ts: dict  # device -> timestamp of its last event before the piece
    last_alloc: dict  # device -> address of its last allocation before the piece
    cont: dict  # device -> (window, integral start time) of a window an earlier piece left open
    next_k: dict  # device (with events in the piece) -> window of its next event after the piece


def start_states(bounds: list[Boundary], *, window_ns: int | None, window_events: int | None,
                 initial: dict | None = None) -> list[PieceStart]:
    """Each piece's starting state and neighbourhood, from the boundary summaries in piece order."""
    states = {d: st.copy() for d, st in (initial or {}).items()}
    first_ts: dict = {}
    last_ts: dict = {}
    last_row: dict = {}
    last_alloc: dict = {}
    offsets = np.r_[0, np.cumsum([b.rows for b in bounds])].tolist()

    def window(i: int, d: int, after: int | None) -> int:  # the window of device d's first event in piece i
        b = bounds[i].devices[d]
        if window_events is not None:
            return (offsets[i] + b.first_row) // window_events
        return (b.first_ts if after is None else max(b.first_ts, after)) // window_ns

    out: list[PieceStart] = []
    for i, bnd in enumerate(bounds):
        cont = {}
        for d in bnd.devices:
            if d in last_ts:
                prev_k = last_row[d] // window_events if window_events is not None else last_ts[d] // window_ns
                if window(i, d, last_ts[d]) == prev_k:
                    cont[d] = (prev_k, last_ts[d])
        out.append(PieceStart({d: st.copy() for d, st in states.items()}, offsets[i], dict(first_ts), dict(last_ts),
                              dict(last_alloc), cont, {}))
        for d, b in bnd.devices.items():
            first_ts.setdefault(d, b.first_ts)
            last_ts[d] = b.last_ts if d not in last_ts else max(last_ts[d], b.last_ts)
            last_row[d] = offsets[i] + b.last_row
            if b.last_alloc is not None:
                last_alloc[d] = b.last_alloc
            states[d] = _apply(states.get(d) or DeviceState(), b)
    for i, start in enumerate(out):  # the next event of each device after piece i
        for d in bounds[i].devices:
            j = next((j for j in range(i + 1, len(bounds)) if d in bounds[j].devices), None)
            if j is not None:
                seen = max(bounds[x].devices[d].last_ts for x in range(i + 1) if d in bounds[x].devices)
                start.next_k[d] = window(j, d, seen)
    return out


def _apply(st: DeviceState, b: DevBoundary) -> DeviceState:
    """The state after a piece with boundary ``b`` that started in ``st`` (segment counters left out)."""
    keep = ~np.isin(st.addr, b.addr)
    new = b.is_alloc
    addr = np.r_[st.addr[keep], b.addr[new]]
    order = np.argsort(addr, kind="stable")
    out = DeviceState(addr[order], np.r_[st.size[keep], b.size[new]][order], np.r_[st.req[keep], b.req[new]][order],
                      set(), [Segment(s.start, s.end, s.expandable) for s in st.segments], 0, st.reserved_bytes,
                      Counters(), st.segmented)
    out.live_bytes = int(out.size.sum())
    for code, a, size in b.seg_events:
        out.apply_segment(code, a, size)
    out.counters = Counters()
    return out


@dataclass
class PiecePartial:
    """The replay of one or several consecutive pieces: complete rows, rows of windows still shared
    with pieces before (``heads``) or after (``tails``), and everything else merged."""

    rows: list
    heads: dict
    tails: dict
    bin_rows: list
    layout: object
    counters: Counters
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


def replay_piece(batches, start: PieceStart, *, params: dict) -> PiecePartial:
    """Pass 2: replay one piece from its start (``params``: Replay's keywords and ``zone_bytes``)."""
    from veotrace.fragmentation.layout import Layout

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
    counters = Counters()
    for st in rp.states.values():
        counters.merge(st.counters)
    return PiecePartial(rows, heads, tails, rp.bin_rows, layout, counters, rp.n_read - rp.n_offset, rp.placed,
                        rp.has_time, rp.window_events is not None, rp.states)


ONE_PIECE = "note: one piece of input (nothing to split): replayed on one process"
#: The ALLOC_EVENTS columns the replay reads.
COLUMNS = ("ts_ns", "op", "size_bytes", "address", "device")


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
        from veotrace.analysis.defaults import FRAGMENTATION_WINDOW_S
        from veotrace.fragmentation.result import check_params

        self.bins = tuple(tuple(b) for b in self.bins)
        check_params(self.window_s, self.window_events, self.threshold, self.max_gap, self.bins, self.round_bytes,
                     self.zone_bytes)
        self.default_window = self.window_s is None and self.window_events is None
        if self.default_window:
            self.window_s = FRAGMENTATION_WINDOW_S

    def boundary_params(self) -> dict:
        return {"round_bytes": self.round_bytes, "time_windows": self.window_events is None}

    def replay_jobs(self, bounds: list[Boundary], options, pieces) -> list | str:
        """One pass-2 job per piece, or why the pieces cannot be replayed apart."""
        from veotrace.engine.tasks import Job

        if len(bounds) < 2:
            return ONE_PIECE
        if any(b.free_requested for b in bounds):
            return "note: free_requested events (pending frees): replayed on one process"
        if self.default_window and bounds[0].null_ts_first:
            return "note: events without timestamps: replayed on one process"
        window_ns = None if self.window_events is not None else round(self.window_s * 1e9)
        starts = start_states(bounds, window_ns=window_ns, window_events=self.window_events)
        replay = {"window_ns": window_ns, "window_events": self.window_events, "round_bytes": self.round_bytes,
                  "max_gap": self.max_gap, "threshold": self.threshold, "bins": self.bins,
                  "zone_bytes": self.zone_bytes, "latency_col": self.latency_col}
        return [Job("fragmentation", {"start": st, "replay": replay}, options, COLUMNS) for st in starts]

    def result(self, part: PiecePartial):
        """The FragmentationResult of the merged partial of every piece (as ``fragmentation_series``')."""
        from types import SimpleNamespace

        from veotrace.fragmentation import require_placed
        from veotrace.fragmentation.result import build_result

        assert not part.heads and not part.tails, "a window left open at the trace's ends"
        require_placed(part.placed, part.counters.events_without_address)
        states = {d: st for d, st in part.states.items()}
        for st in states.values():  # the counters of the whole trace: every piece's, summed
            st.counters = Counters()
        next(iter(states.values()), DeviceState()).counters = copy.copy(part.counters)
        replay = SimpleNamespace(rows=part.rows, bin_rows=part.bin_rows, layout=part.layout, states=states,
                                 at_states=None, n_read=part.n_read, has_time=part.has_time,
                                 window_events=self.window_events)
        params = {"window_s": self.window_s if self.window_events is None else None,
                  "window_events": self.window_events, "threshold": self.threshold,
                  "max_gap_bytes": self.max_gap, "round_bytes": self.round_bytes, "zone_bytes": self.zone_bytes,
                  "bins": [[lo, hi] for lo, hi in self.bins], "at_ns": None, "latency_col": self.latency_col}
        return build_result(replay, params, top_zones=self.top_zones)
