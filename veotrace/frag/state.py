"""Allocator state of one device, rebuilt by replaying events forward: live blocks, segments, counts.

Live blocks are kept as address-sorted numpy arrays, so a run of events is applied with a handful of
vectorised operations: alloc/free pairs are matched by address (sort by address, then time), and the
live set is updated by one delete and one sorted insert per run. Segments (cudaMalloc'd or mapped
ranges) are kept as a sorted Python list, found by bisection (a caching allocator reserves a segment
per stream, so a trace on many streams has many). Nothing here is ever fatal: a free of an unknown
block, a second alloc at a live address or a segment event that does not fit is counted in
:class:`ReplayCounters` and the replay goes on.

Vocabulary shared with :mod:`veotrace.allocators`, whose policies replay alloc/free requests too: the
``OP_*`` codes here are the replay's decoding of an ``alloc_events/1`` ``op`` column (``OP_CODES``),
not the ``EV_*`` codes of the events a simulated policy emits (``allocators.base``) nor the ``REQ_*``
request kinds (``allocators.requests``); the encodings differ (0 here is an op the replay ignores,
``free_completed`` is ``free``, ``free_requested`` has its own code, segment codes come last so
``code >= OP_SEG_ALLOC`` selects them). :class:`ReplayCounters` counts what the replay of a recorded
trace met that a consistent trace would not hold; ``allocators.base.PolicyCounters`` holds what a
simulated policy did.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field, fields

import numpy as np

#: Op codes of the replay (see OP_CODES): OP_OTHER for every op it does not replay.
OP_OTHER, OP_ALLOC, OP_FREE, OP_FREE_REQ, OP_SEG_ALLOC, OP_SEG_FREE, OP_SEG_MAP, OP_SEG_UNMAP = range(8)
#: ALLOC_EVENTS op name -> replay code. ``free`` (logs, nsys) and ``free_completed`` (torch) release
#: a block; ``free_requested`` only marks it pending (it still holds memory until completed).
OP_CODES = {"alloc": OP_ALLOC, "free": OP_FREE, "free_completed": OP_FREE, "free_requested": OP_FREE_REQ,
            "segment_alloc": OP_SEG_ALLOC, "segment_free": OP_SEG_FREE,
            "segment_map": OP_SEG_MAP, "segment_unmap": OP_SEG_UNMAP}


@dataclass
class ReplayCounters:
    """What the replay met that a complete, consistent trace would not hold (all are warnings)."""

    unknown_frees: int = 0  # free of an address with no live block (trace started part-way)
    oversize_frees: int = 0  # free whose size is larger than the block it releases
    double_allocs: int = 0  # alloc at an address that was still live (its old block is dropped)
    unknown_segment_frees: int = 0  # segment_free / segment_unmap of a range that was not reserved
    duplicate_segments: int = 0  # segment_alloc / segment_map over a range already reserved
    events_without_address: int = 0  # alloc/free rows with a null address (not replayed)
    out_of_order: int = 0  # events older than one already replayed (replayed at the later time)
    pre_existing_blocks: int = 0  # blocks live before the first event (from the final snapshot)
    pre_existing_segments: int = 0
    blocks_mismatch_segments: int = 0  # snapshot segments whose blocks do not add up to their size
    inconsistent_entries: int = 0  # trace entries the final snapshot contradicts (e.g. alloc of a dead block)
    allocs_outside_segments: int = 0  # allocs at an address in no segment known by the end of their batch

    def merge(self, other: ReplayCounters) -> ReplayCounters:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        return self

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass
class Segment:
    start: int
    end: int
    expandable: bool = False


def _start(seg: Segment) -> int:
    return seg.start


def segment_at(segments: list, address: int) -> Segment | None:
    """The segment of a sorted, disjoint list holding ``address``, or None (a bisection)."""
    i = bisect.bisect_right(segments, address, key=_start) - 1
    return segments[i] if i >= 0 and address < segments[i].end else None


@dataclass
class DeviceState:
    """State of one device. Addresses are uint64; sizes int64."""

    addr: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    size: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    req: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    pending: set = field(default_factory=set)  # addresses freed by free_requested, not yet completed
    segments: list = field(default_factory=list)  # sorted list of Segment
    live_bytes: int = 0
    reserved_bytes: int = 0
    counters: ReplayCounters = field(default_factory=ReplayCounters)
    segmented: bool = False  # segments were known at some point: free space is found inside them
    #: Every address range reserved so far (merged, sorted (starts, ends)), see count_outside.
    known: tuple = field(default_factory=lambda: (np.zeros(0, np.uint64), np.zeros(0, np.uint64)))
    known_add: list = field(default_factory=list)  # (start, end) reserved since the last fold

    # -- blocks ---------------------------------------------------------------------------------
    def match_run(self, sa: np.ndarray, first: np.ndarray, last: np.ndarray, is_alloc: np.ndarray,
                  bsz: np.ndarray, req: np.ndarray, fsize: np.ndarray, pos: np.ndarray, delta: np.ndarray) -> None:
        """Apply one run of alloc/free rows sorted by (address, time) against the carried live set.

        ``delta`` (live-bytes change per row of the batch, indexed by ``pos``) already holds what the
        run does by itself (its allocs, and frees of blocks allocated earlier in the run, see
        ``windows.match_batch``); this adds the release of carried blocks hit by the first row at
        their address, and updates the live set: carried blocks hit leave it, and every address
        whose last row is an alloc enters it.
        """
        L = self.addr.size
        keep = None
        if L and sa.size:
            fi = np.flatnonzero(first)
            fa = sa[fi]
            cpos = np.searchsorted(self.addr, fa)
            np.minimum(cpos, L - 1, out=cpos)
            ok = self.addr[cpos] == fa
            if ok.any():
                hits, slots = fi[ok], cpos[ok]
                hs = self.size[slots]
                delta[pos[hits]] -= hs
                ia = is_alloc[hits]
                n_alloc = int(ia.sum())
                self.counters.double_allocs += n_alloc
                self.counters.unknown_frees -= hits.size - n_alloc  # counted unknown by match_batch
                self.counters.oversize_frees += int(((fsize[hits] > hs) & ~ia).sum())
                keep = np.ones(L, bool)
                keep[slots] = False
        new = last & is_alloc
        self._merge(keep, sa[new], bsz[new], req[new])

    def count_outside(self, alloc_addr: np.ndarray, seg_start: np.ndarray, seg_end: np.ndarray) -> None:
        """Count the allocations of a batch at addresses in no segment known by its end: none live now,
        reserved before, nor reserved by the batch's own segment events (``seg_start``/``seg_end``).
        A consistent trace has none; a snapshot whose trace allocated in segments released before it
        was taken, with no segment events recorded, has them (the trace and the segments disagree)."""
        self.remember(seg_start, seg_end)
        if alloc_addr.size:
            k0, k1 = self.known
            i = np.searchsorted(k0, alloc_addr, side="right") - 1
            inside = i >= 0
            inside[inside] = alloc_addr[inside] < k1[i[inside]]
            self.counters.allocs_outside_segments += int(alloc_addr.size - inside.sum())

    def remember(self, seg_start: np.ndarray | None = None, seg_end: np.ndarray | None = None) -> None:
        """Fold the live segments, those reserved since the last fold, and the given ranges into ``known``."""
        starts, ends = self.segment_arrays()
        add = np.array(self.known_add, np.uint64).reshape(-1, 2)
        parts0 = [self.known[0], starts, add[:, 0]] + ([seg_start] if seg_start is not None else [])
        parts1 = [self.known[1], ends, add[:, 1]] + ([seg_end] if seg_end is not None else [])
        a0, a1 = np.concatenate(parts0), np.concatenate(parts1)
        self.known_add = []
        if not a0.size:
            return
        order = np.argsort(a0, kind="stable")
        a0, a1 = a0[order], np.maximum.accumulate(a1[order])
        new = np.r_[True, a0[1:] > a1[:-1]]  # overlapping or touching ranges merge
        last = np.r_[np.flatnonzero(new)[1:] - 1, a0.size - 1]
        self.known = (a0[new], a1[last])

    def _merge(self, keep: np.ndarray | None, a: np.ndarray, s: np.ndarray, r: np.ndarray) -> None:
        if keep is not None:
            self.addr, self.size, self.req = self.addr[keep], self.size[keep], self.req[keep]
        if a.size:
            at = np.searchsorted(self.addr, a)
            at += np.arange(a.size)  # where each new block lands in the merged arrays
            n = self.addr.size + a.size
            old = np.ones(n, bool)
            old[at] = False
            for name, new in (("addr", a), ("size", s), ("req", r)):
                cur = getattr(self, name)
                out = np.empty(n, cur.dtype)
                out[old] = cur
                out[at] = new
                setattr(self, name, out)

    def update_pending(self, code: np.ndarray, addr: np.ndarray) -> None:
        """free_requested marks a block pending (it still holds memory until free_completed).

        Called after ``match_run`` on the same run: an address is pending when its last
        alloc/free/free_requested row in the run is a free_requested and the block is live.
        """
        rel = np.flatnonzero((code == OP_ALLOC) | (code == OP_FREE) | (code == OP_FREE_REQ))
        last: dict[int, int] = dict(zip(addr[rel].tolist(), code[rel].tolist()))
        self.pending.difference_update(a for a, c in last.items() if c != OP_FREE_REQ)
        addresses = [a for a, c in last.items() if c == OP_FREE_REQ]
        if not addresses:
            return
        a = np.asarray(addresses, np.uint64)
        at = np.searchsorted(self.addr, a)
        ok = at < self.addr.size
        ok[ok] = self.addr[at[ok]] == a[ok]
        self.pending.update(a[ok].tolist())

    def pending_bytes(self) -> int:
        if not self.pending:
            return 0
        a = np.fromiter(self.pending, np.uint64, len(self.pending))
        at = np.searchsorted(self.addr, a)
        ok = at < self.addr.size
        ok[ok] = self.addr[at[ok]] == a[ok]
        return int(self.size[at[ok]].sum())

    # -- segments -------------------------------------------------------------------------------
    def apply_segment(self, code: int, address: int, size: int) -> int:
        """Apply one segment event; returns the change in reserved bytes (O(log segments) to find its place:
        a trace on many streams reserves a segment per stream)."""
        segs = self.segments
        if code in (OP_SEG_ALLOC, OP_SEG_MAP):
            i = bisect.bisect_right(segs, address, key=_start)
            if (i and segs[i - 1].end > address) or (i < len(segs) and segs[i].start < address + size):
                self.counters.duplicate_segments += 1
                return 0
            self.segments.insert(i, Segment(address, address + size, code == OP_SEG_MAP))
            self.known_add.append((address, address + size))
            self.segmented = True
            if code == OP_SEG_MAP:
                self._coalesce(i)
            self.reserved_bytes += size
            return size
        i = bisect.bisect_right(segs, address, key=_start) - 1
        seg = segs[i] if i >= 0 else None
        if code == OP_SEG_FREE:
            if seg is None or seg.start != address:
                self.counters.unknown_segment_frees += 1
                return 0
            del self.segments[i]
            self.reserved_bytes -= seg.end - seg.start
            return -(seg.end - seg.start)
        if seg is None or address + size > seg.end:  # unmap outside a mapped range
            self.counters.unknown_segment_frees += 1
            return 0
        parts = [Segment(seg.start, address, True), Segment(address + size, seg.end, True)]
        self.segments[i : i + 1] = [p for p in parts if p.end > p.start]
        self.reserved_bytes -= size
        return -size

    def _coalesce(self, i: int) -> None:
        """Mapped pages of one expandable segment next to each other form one range."""
        segs = self.segments
        if i + 1 < len(segs) and segs[i + 1].expandable and segs[i + 1].start == segs[i].end:
            segs[i].end = segs.pop(i + 1).end
        if i > 0 and segs[i - 1].expandable and segs[i - 1].end == segs[i].start:
            segs[i - 1].end = segs.pop(i).end

    def segment_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        starts = np.fromiter((s.start for s in self.segments), np.uint64, len(self.segments))
        ends = np.fromiter((s.end for s in self.segments), np.uint64, len(self.segments))
        return starts, ends

    def to_json(self) -> dict:
        """This state as JSON values (a follower's checkpoint: ``live.fragmentation``), read back by ``from_json``.

        The live blocks' arrays are little-endian bytes in base64: the checkpoint is rewritten every poll,
        and its size is the live set, not the events replayed."""
        return {"addr": _pack(self.addr), "size": _pack(self.size), "req": _pack(self.req),
                "pending": sorted(self.pending), "segments": [[s.start, s.end, s.expandable] for s in self.segments],
                "live_bytes": self.live_bytes, "reserved_bytes": self.reserved_bytes,
                "counters": self.counters.to_dict(), "segmented": self.segmented,
                "known": [_pack(self.known[0]), _pack(self.known[1])], "known_add": [list(p) for p in self.known_add]}

    @classmethod
    def from_json(cls, d: dict) -> DeviceState:
        return cls(_unpack(d["addr"], np.uint64), _unpack(d["size"], np.int64), _unpack(d["req"], np.int64),
                   {int(a) for a in d["pending"]}, [Segment(int(a), int(b), bool(x)) for a, b, x in d["segments"]],
                   int(d["live_bytes"]), int(d["reserved_bytes"]), ReplayCounters(**d["counters"]),
                   bool(d["segmented"]), (_unpack(d["known"][0], np.uint64), _unpack(d["known"][1], np.uint64)),
                   [(int(a), int(b)) for a, b in d["known_add"]])

    def copy(self) -> DeviceState:
        return DeviceState(self.addr.copy(), self.size.copy(), self.req.copy(), set(self.pending),
                           [Segment(s.start, s.end, s.expandable) for s in self.segments],
                           self.live_bytes, self.reserved_bytes, ReplayCounters(), self.segmented,
                           (self.known[0].copy(), self.known[1].copy()), list(self.known_add))


def _pack(a: np.ndarray) -> str:
    """A uint64/int64 array as base64 of its little-endian bytes (``to_json``)."""
    import base64

    return base64.b64encode(a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()).decode("ascii")


def _unpack(text: str, dtype) -> np.ndarray:
    import base64

    return np.frombuffer(base64.b64decode(text), np.dtype(dtype).newbyteorder("<")).astype(dtype)
