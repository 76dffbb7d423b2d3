"""The forward replay over an event stream, cut into windows: one row per (window, device).

Window k is [k*W, (k+1)*W) in the trace's time base (``window_s``), or events [k*N, (k+1)*N) in read
order (``window_events``; for sources without timestamps). Within a batch, events are replayed in
time order (stable, so equal times keep read order); an event older than one already replayed on
its device is replayed at that later time and counted (``out_of_order``). Each window row carries
the levels seen during the window (peak and mean live bytes, peak reserved, GMLake's ratio) and the
state at its end (free blocks, largest free block, the external fragmentation). Windows with no
events repeat the state they inherit. Memory is the live set plus the rows: batches are not kept.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa

from veotrace.frag import metrics as M
from veotrace.frag.decode import by_device, decode, latency_values
from veotrace.frag.layout import Layout
from veotrace.frag.match import match_batch
from veotrace.frag.rows import _STATE_COLUMNS, bin_label, finish_row
from veotrace.frag.state import (
    OP_ALLOC,
    OP_FREE,
    OP_FREE_REQ,
    OP_SEG_ALLOC,
    OP_SEG_MAP,
    DeviceState,
)
from veotrace.replay_limits import MAX_WINDOW_ROWS, check_devices, too_many_windows

#: Refuse to materialise more window rows than this (replay_limits: the bound and its message, shared with sites).
MAX_WINDOWS = MAX_WINDOW_ROWS


@dataclass
class _Win:
    """Levels of the window open on one device."""

    k: int
    t_from: int | None  # where the time integral resumes (ns)
    events: int = 0
    allocs: int = 0
    frees: int = 0
    dev_allocs: int = 0
    dev_frees: int = 0
    peak_live: int = 0
    peak_reserved: int = 0
    integral: float = 0.0
    t_start: int | None = None  # effective start of the window (first event of the trace, or k*W)
    level: int = 0  # live bytes after the window's last event so far
    cont: bool = False  # continues a window an earlier piece of the trace began (engines: ``parallel``)


class Replay:
    """Stateful replay: ``feed(batch)`` for every batch, then ``finish()``."""

    def __init__(self, *, window_ns: int | None, window_events: int | None, initial, round_bytes: int,
                 max_gap: int, threshold: float, bins, layout: Layout, at_ns: int | None,
                 latency_col: str | None = None, at_each=(), on_at=None) -> None:
        self.window_ns, self.window_events = window_ns, window_events
        self.states: dict[int, DeviceState] = {}
        self.seed(initial)
        self.round_bytes, self.max_gap, self.threshold, self.bins = round_bytes, max_gap, threshold, bins
        self.layout, self.at_ns, self.latency_col = layout, at_ns, latency_col
        self.labels = [bin_label(lo, hi) for lo, hi in bins]
        self.open: dict[int, _Win] = {}
        self.last_ts: dict[int, int] = {}
        self.first_ts: dict[int, int] = {}
        self.rows: list[dict] = []
        self.bin_rows: list[dict] = []
        self.n_read = 0
        self.placed = 0  # alloc/free rows with an address
        self.has_time = True
        self.at_states: dict[int, DeviceState] | None = None if at_ns is None else {}
        # ``at_each``: more times (ns) whose state is handed to ``on_at(at_ns, device, state)`` as it is
        # after the device's last event at or before each (``veotrace view``'s segment maps); the state is
        # the replay's own, so the callback reads it and keeps none of it.
        self.at_each = np.unique(np.asarray(at_each, dtype=np.int64)) if len(at_each) else np.zeros(0, np.int64)
        self.on_at = on_at
        self.at_next: dict[int, int] = {}  # per device, the index in at_each of its next time to hand over
        self.n_offset = 0  # events before this piece of the trace (engines: ``parallel``)
        self.next_k: dict[int, int] | None = None  # per device, the window of its next event after this piece

    def seed(self, initial: dict[int, DeviceState] | None) -> None:
        """Start from ``initial`` (the state before the first event, per device; copied, its counters kept)."""
        check_devices(len(initial or {}))
        self.states = {d: s.copy() for d, s in (initial or {}).items()}
        for d, s in (initial or {}).items():
            self.states[d].counters = s.counters

    # -- input ----------------------------------------------------------------------------------
    def feed(self, batch: pa.RecordBatch) -> None:
        n = batch.num_rows
        if n == 0:
            return
        rows = decode(batch, self.round_bytes)
        code, addr, size, block, dev, ts_arr = rows.code, rows.addr, rows.size, rows.block, rows.dev, rows.ts
        if rows.no_address:
            self._any_state().counters.events_without_address += rows.no_address
        if self.window_events is not None:
            k = (self.n_read + np.arange(n, dtype=np.int64)) // self.window_events
            ts = np.asarray(ts_arr.fill_null(0)) if ts_arr.null_count else np.asarray(ts_arr)
            if ts_arr.null_count:
                self.has_time = False
        else:
            if ts_arr.null_count:
                from veotrace.errors import AnalysisError

                raise AnalysisError("events have no timestamps (e.g. a PyTorch snapshot recorded without time_us)",
                                    hint="Use --window-events N for windows of N consecutive events")
            ts = np.asarray(ts_arr).astype(np.int64, copy=False)
            k = None
        self.n_read += n
        lat = None
        if self.latency_col is not None and self.latency_col in batch.schema.names:
            lat = latency_values(batch.column(self.latency_col), self.latency_col)
        cols = (code, addr, size, block, ts, k, lat)
        for d, sel in by_device(dev, cols):
            self._feed_device(d, *sel)

    def _any_state(self) -> DeviceState:
        return self.states.setdefault(min(self.states) if self.states else 0, DeviceState())

    def _feed_device(self, d, code, addr, size, block, ts, k, lat=None) -> None:
        st = self.states.get(d)
        if st is None:
            check_devices(len(self.states) + 1)
            st = self.states[d] = DeviceState()
        if self.window_events is None:
            if ts.size > 1 and (np.diff(ts) < 0).any():
                order = np.argsort(ts, kind="stable")
                code, addr, size, block, ts = code[order], addr[order], size[order], block[order], ts[order]
                lat = None if lat is None else lat[order]
            last = self.last_ts.get(d)
            if last is not None and ts[0] < last:
                st.counters.out_of_order += int((ts < last).sum())
                ts = np.maximum(ts, last)
            k = ts // self.window_ns
        win = self.open.get(d)
        if win is not None and win.k != int(k[0]):  # the window left open by the last batch ends here
            self._close(d, st, win, end_ns=None, upto=int(k[0]), snap=None)
            del self.open[d]
        self.first_ts.setdefault(d, int(ts[0]))
        self.last_ts[d] = int(ts[-1])
        n = code.size
        cuts = np.flatnonzero(k[1:] != k[:-1]) + 1
        want_at = self.at_ns is not None and d not in self.at_states and self.window_events is None
        if want_at:
            cuts = np.union1d(cuts, np.flatnonzero((ts[:-1] <= self.at_ns) & (ts[1:] > self.at_ns)) + 1)
        each = self.at_each.size and self.window_events is None and self.at_next.get(d, 0) < self.at_each.size
        if each:
            cuts = np.union1d(cuts, np.searchsorted(ts, self.at_each[(self.at_each >= ts[0]) & (self.at_each < ts[-1])],
                                                    "right"))
        bounds = np.r_[0, cuts, n].astype(np.int64)
        nrun = bounds.size - 1
        run_id = np.repeat(np.arange(nrun), np.diff(bounds))
        m = match_batch(code, addr, size, block, run_id, st)
        if m.pos_time.size == n:
            self.layout.add(d, addr, code == OP_ALLOC, size, lat)
        else:
            p = m.pos_time
            self.layout.add(d, addr[p], code[p] == OP_ALLOC, size[p], None if lat is None else lat[p])
        self.placed += int(m.pos.size)
        live0, res0 = st.live_bytes, st.reserved_bytes
        rdelta = None
        seg_pos = np.flatnonzero(code >= OP_SEG_ALLOC)
        if self.layout.by_segment:
            self.layout.zones.add_in_time(d, st, code, addr, size, lat, m.pos_time, seg_pos)
        if st.segmented or seg_pos.size:  # allocations outside every segment known: trace and segments disagree
            grow = seg_pos[(code[seg_pos] == OP_SEG_ALLOC) | (code[seg_pos] == OP_SEG_MAP)]
            ga = addr[grow].astype(np.uint64)
            st.count_outside(addr[code == OP_ALLOC].astype(np.uint64), ga, ga + size[grow].astype(np.uint64))
        has_req = bool((code == OP_FREE_REQ).any())
        snaps: list = [None] * nrun
        bl = bounds.tolist()
        ks = k[bounds[:-1]].tolist()
        for j in range(nrun):
            i0, i1 = bl[j], bl[j + 1]
            if want_at and ts[i0] > self.at_ns and d not in self.at_states:
                self.capture_at(d)
            if each:
                self._hand_over(d, st, int(ts[i0]))
            s0, s1 = m.run_bounds[j], m.run_bounds[j + 1]
            if s1 > s0 or st.addr.size:
                st.match_run(m.sa[s0:s1], m.first[s0:s1], m.last[s0:s1], m.is_alloc[s0:s1], m.bsz[s0:s1],
                             m.req[s0:s1], m.fsize[s0:s1], m.pos[s0:s1], m.delta)
            if has_req or st.pending:
                st.update_pending(code[i0:i1], addr[i0:i1])
            if seg_pos.size:
                a, b = np.searchsorted(seg_pos, [i0, i1])
                if b > a:
                    rdelta = np.zeros(n, np.int64) if rdelta is None else rdelta
                    for p in seg_pos[a:b].tolist():
                        rdelta[p] = st.apply_segment(int(code[p]), int(addr[p]), int(size[p]))
            if j + 1 < nrun and ks[j + 1] != ks[j]:
                snaps[j] = self._snapshot(st)
        live = live0 + np.cumsum(m.delta)
        st.live_bytes = int(live[-1])
        reserved = res0 + np.cumsum(rdelta) if rdelta is not None else None
        starts = bounds[:-1]
        peak_live = np.maximum.reduceat(live, starts)
        peak_res = np.maximum.reduceat(reserved, starts) if reserved is not None else None
        count = lambda mask: np.bincount(run_id[mask], minlength=nrun)  # noqa: E731
        n_alloc, n_free = count(code == OP_ALLOC), count(code == OP_FREE)
        n_dalloc = count((code == OP_SEG_ALLOC) | (code == OP_SEG_MAP))
        n_dfree = count((code >= OP_SEG_ALLOC) & (code != OP_SEG_ALLOC) & (code != OP_SEG_MAP))
        if self.window_events is None:
            piece = np.zeros(n)
            # the gaps in integers, then as floats: epoch nanoseconds (1.7e18) as float64 are 256 ns apart
            piece[:-1] = live[:-1] * np.diff(ts).astype(np.float64)
            piece[bounds[1:] - 1] = 0.0  # a run's last level is integrated by the next run or the close
            integ = np.add.reduceat(piece, starts)
        else:
            integ = np.add.reduceat(live.astype(np.float64), starts)
        end_live = live[bounds[1:] - 1]
        before = np.r_[live0, end_live[:-1]]
        for j in range(nrun):
            kj = ks[j]
            win = self.open.get(d)
            if win is None or win.k != kj:
                if win is not None:
                    self._close(d, st, win, end_ns=None, upto=kj, snap=None)
                t0 = max(kj * self.window_ns, self.first_ts[d]) if self.window_events is None else None
                win = self.open[d] = _Win(kj, t0, t_start=t0)
            win.events += int(bounds[j + 1] - bounds[j])
            win.allocs += int(n_alloc[j])
            win.frees += int(n_free[j])
            win.dev_allocs += int(n_dalloc[j])
            win.dev_frees += int(n_dfree[j])
            win.peak_live = max(win.peak_live, int(before[j]), int(peak_live[j]))
            r_before = res0 if j == 0 or reserved is None else int(reserved[bounds[j] - 1])
            win.peak_reserved = max(win.peak_reserved, r_before, int(peak_res[j]) if peak_res is not None else res0)
            if self.window_events is None:
                win.integral += int(before[j]) * (int(ts[bounds[j]]) - win.t_from) + float(integ[j])
                win.t_from = int(ts[bounds[j + 1] - 1])
            else:
                win.integral += float(integ[j])
            win.level = int(end_live[j])
            if snaps[j] is not None:
                self._close(d, st, win, end_ns=None, upto=ks[j + 1], snap=snaps[j])
                del self.open[d]

    def _snapshot(self, st: DeviceState):
        fb = M.free_blocks(st, max_gap=self.max_gap)
        m = M.state_metrics(st, max_gap=self.max_gap, threshold=self.threshold, fb=fb)
        return m, M.bin_counts(fb.size, self.bins)

    # -- output ---------------------------------------------------------------------------------
    def _close(self, d: int, st: DeviceState, win: _Win, *, end_ns: int | None, upto: int | None, snap,
               still_open: bool = False) -> None:
        """Finish the window ``win`` (its events are all applied), then the empty windows up to ``upto``.

        ``still_open``: the window goes on in a later piece of the trace (its row is merged there)."""
        m, (counts, nbytes) = snap if snap is not None else self._snapshot(st)
        if self.window_events is None:
            w_end = (win.k + 1) * self.window_ns if end_ns is None else end_ns
            raw = (win.integral + win.level * (w_end - win.t_from), win.t_start, w_end)
        else:
            raw = (win.integral, None, None)
        self._row(d, win, m, raw, counts, nbytes, still_open)
        if upto is not None and upto - win.k - 1 > 0:
            if len(self.rows) + upto - win.k > MAX_WINDOWS:
                raise too_many_windows()
            for kk in range(win.k + 1, upto):
                empty = _Win(kk, None, peak_live=m["live_bytes"], peak_reserved=m["reserved_bytes"] or 0,
                             level=m["live_bytes"])
                self._row(d, empty, m, None, counts, nbytes)

    def _row(self, d, win: _Win, m: dict, raw, counts, nbytes, still_open: bool = False) -> None:
        """One window row; ``raw`` = (live-bytes integral, effective start, end) for ``row_mean`` (None:
        an empty window, whose mean is its level). The ``_`` keys let ``parallel`` merge the rows of a
        window that two pieces of the trace share; the tables leave them out."""
        W = self.window_ns
        integral, t0, w_end = raw if raw is not None else (None, None, None)
        # windows count from 0 at the run's first (the replay's k is ts // W: on a timed snapshot, epoch-based
        # numbers like 175,725,325,521 that say nothing; start_ns keeps the absolute time). The run's first
        # event is the earliest device's first: pieces (``parallel``) and a follower's checkpoint carry it.
        number = win.k - min(self.first_ts.values(), default=win.k * W) // W if W else win.k
        row = {
            "_int": integral, "_t0": t0, "_w_end": w_end, "_level": win.level, "_pl": win.peak_live,
            "_pr": win.peak_reserved, "_cont": win.cont, "_open": still_open,
            "window": number, "device": d,
            "start_ns": win.k * W if W else None, "end_ns": (win.k + 1) * W if W else None,
            "events": win.events, "allocs": win.allocs, "frees": win.frees,
            "device_allocs": win.dev_allocs, "device_frees": win.dev_frees,
            "live_bytes_peak": max(win.peak_live, m["live_bytes"]),
            "reserved_bytes_peak": max(win.peak_reserved, m["reserved_bytes"]) if m["reserved_bytes"] is not None else None,
            **{key: m[key] for key in _STATE_COLUMNS},
        }
        if not win.cont:
            finish_row(row, self.window_events is not None)
        self.rows.append(row)
        if len(self.rows) > MAX_WINDOWS:
            raise too_many_windows()
        if still_open:  # the later piece that closes the window gives its bins
            return
        for i, (lo, hi) in enumerate(self.bins):
            self.bin_rows.append({"window": number, "device": d, "bin": self.labels[i], "lo_bytes": lo,
                                  "hi_bytes": hi, "free_blocks": int(counts[i]), "free_bytes": int(nbytes[i])})

    def to_json(self) -> dict:
        """The replay's state between two batches, as JSON values: each device's allocator state and open
        window, and where its time stands (a follower's checkpoint: ``live.fragmentation``; rows already
        taken are not kept). Only a time-window replay of a whole trace (no ``--at``, not a piece) has one."""
        if self.window_events is not None or self.at_ns is not None or self.next_k is not None or self.rows:
            raise ValueError("only a time-window replay with no rows pending can be checkpointed")
        return {"states": {str(d): st.to_json() for d, st in self.states.items()},
                "open": {str(d): asdict(w) for d, w in self.open.items()},
                "last_ts": {str(d): t for d, t in self.last_ts.items()},
                "first_ts": {str(d): t for d, t in self.first_ts.items()},
                "n_read": self.n_read, "placed": self.placed}

    def from_json(self, s: dict) -> None:
        """Continue from ``to_json``'s state (this replay made with the same options)."""
        self.states = {int(d): DeviceState.from_json(v) for d, v in s["states"].items()}
        self.open = {int(d): _Win(**w) for d, w in s["open"].items()}
        self.last_ts = {int(d): int(t) for d, t in s["last_ts"].items()}
        self.first_ts = {int(d): int(t) for d, t in s["first_ts"].items()}
        self.n_read, self.placed = int(s["n_read"]), int(s["placed"])

    def capture_at(self, d: int) -> None:
        """Keep device ``d``'s state as it is after its last event at or before ``at_ns``."""
        self.at_states[d] = self.states[d].copy()

    def _hand_over(self, d: int, st: DeviceState, before_ns: int | None) -> None:
        """``on_at`` for each of ``at_each`` before ``before_ns`` (None: all that are left) not yet handed over."""
        k = self.at_next.get(d, 0)
        while k < self.at_each.size and (before_ns is None or self.at_each[k] < before_ns):
            self.on_at(int(self.at_each[k]), d, st)
            k += 1
        self.at_next[d] = k

    def finish(self) -> None:
        for d, win in sorted(self.open.items()):
            end = self.last_ts[d] if self.window_events is None else None
            nxt = None if self.next_k is None else self.next_k.get(d)
            if nxt is not None and nxt != win.k:  # the device's next event (in a later piece) is in a later window
                self._close(d, self.states[d], win, end_ns=None, upto=nxt, snap=None)
            else:
                self._close(d, self.states[d], win, end_ns=end, upto=None, snap=None, still_open=nxt is not None)
        if self.at_ns is not None:
            for d in self.states:
                if d not in self.at_states:
                    self.capture_at(d)
        if self.at_each.size and self.window_events is None:
            for d, st in sorted(self.states.items()):
                self._hand_over(d, st, None)
