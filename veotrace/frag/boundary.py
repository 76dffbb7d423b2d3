"""The first pass of the replay in pieces (``parallel``): what each piece does to any state it starts
from (``boundary_pass``, per piece, from the rows alone), and those effects chained in piece order
into each piece's exact starting state and neighbourhood (``start_states``, on the client; its cost
follows the live set and the distinct addresses per piece, not the events).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from veotrace.frag.decode import by_device, decode
from veotrace.frag.match import _sort_rows
from veotrace.frag.state import (
    OP_ALLOC,
    OP_FREE,
    OP_FREE_REQ,
    OP_SEG_ALLOC,
    DeviceState,
    ReplayCounters,
)
from veotrace.replay_limits import check_devices


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
        rows = decode(batch, round_bytes)
        code, addr, size, block, dev, ts_arr = rows.code, rows.addr, rows.size, rows.block, rows.dev, rows.ts
        if out.rows == 0:
            out.null_ts_first = bool(ts_arr.null_count)
        ts = np.asarray(ts_arr.fill_null(0) if ts_arr.null_count else ts_arr).astype(np.int64, copy=False)
        out.free_requested |= bool((code == OP_FREE_REQ).any())
        row = out.rows + np.arange(n, dtype=np.int64)
        out.rows += n
        for d, sel in by_device(dev, (code, addr, size, block, ts, row)):
            if d not in out.devices:
                check_devices(len(out.devices) + 1)
                out.devices[d] = DevBoundary()
            _device(out.devices[d], *sel, time_windows)
    return out


def _device(b: DevBoundary, code, addr, size, block, ts, row, time_windows: bool) -> None:
    if time_windows and ts.size > 1 and (np.diff(ts) < 0).any():
        order = np.argsort(ts, kind="stable")
        code, addr, size, block, ts = code[order], addr[order], size[order], block[order], ts[order]
    if b.first_ts is None:
        b.first_ts, b.first_row = int(ts[0]), int(row[0])
    b.last_ts = int(ts.max()) if b.last_ts is None else max(b.last_ts, int(ts.max()))
    b.last_row = int(row[-1])
    allocs = np.flatnonzero(code == OP_ALLOC)
    if allocs.size:
        b.last_alloc = int(addr[allocs[-1]])
    for p in np.flatnonzero(code >= OP_SEG_ALLOC).tolist():
        b.seg_events.append((int(code[p]), int(addr[p]), int(size[p])))
    blocky = np.flatnonzero((code == OP_ALLOC) | (code == OP_FREE))
    if not blocky.size:
        return
    # The last row per address in this batch: hashing (pyarrow) and a max, no sort of the batch.
    enc = pa.array(addr[blocky]).dictionary_encode()
    last_row = np.full(len(enc.dictionary), -1, np.int64)
    np.maximum.at(last_row, np.asarray(enc.indices), np.arange(blocky.size))
    pick = blocky[last_row]
    # ... then over the rows of the earlier batches (the later row wins): a sort of the distinct addresses
    a = np.r_[b.addr, np.asarray(enc.dictionary).astype(np.uint64, copy=False)]
    ia = np.r_[b.is_alloc, code[pick] == OP_ALLOC]
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

    last_piece: dict = {}  # device -> the last piece before with an event of it
    out: list[PieceStart] = []
    for i, bnd in enumerate(bounds):
        cont = {}
        for d in bnd.devices:
            if d in last_ts:
                k = window(i, d, last_ts[d])
                out[last_piece[d]].next_k[d] = k  # its next event after that piece is this piece's first
                prev_k = last_row[d] // window_events if window_events is not None else last_ts[d] // window_ns
                if k == prev_k:
                    cont[d] = (prev_k, last_ts[d])
        out.append(PieceStart({d: st.copy() for d, st in states.items()}, offsets[i], dict(first_ts), dict(last_ts),
                              dict(last_alloc), cont, {}))
        for d, b in bnd.devices.items():
            last_piece[d] = i
            first_ts.setdefault(d, b.first_ts)
            last_ts[d] = b.last_ts if d not in last_ts else max(last_ts[d], b.last_ts)
            last_row[d] = offsets[i] + b.last_row
            if b.last_alloc is not None:
                last_alloc[d] = b.last_alloc
            states[d] = _apply(states.get(d) or DeviceState(), b)
    return out


def _apply(st: DeviceState, b: DevBoundary) -> DeviceState:
    """The state after a piece with boundary ``b`` that started in ``st`` (segment counters left out)."""
    out = st.copy()
    out.remember()  # the segments live at the piece's start count as known (allocs_outside_segments)
    new = b.is_alloc  # b.addr is sorted: the live set's sorted insert, as in the replay
    out._merge(~np.isin(st.addr, b.addr), b.addr[new], b.size[new], b.req[new])
    out.live_bytes = int(out.size.sum())
    for code, a, size in b.seg_events:
        out.apply_segment(code, a, size)
    out.counters = ReplayCounters()
    return out
