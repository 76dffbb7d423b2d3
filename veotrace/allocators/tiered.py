"""``tiered``: time-aware pools chosen by allocation lifetime (the design notes' three tiers).

An allocation living up to 10 ms goes to a pool reserving 4 MB chunks, up to 100 ms to a pool of 64 MB
chunks, longer (or never freed) to a 512 MB reserve; bounds and granularities are parameters. Inside a
pool, best fit with splitting and merging; whole free chunks are returned only under ``--capacity``.
The lifetime is either the trace's own (``oracle``: the best case) or predicted online as the last
lifetime seen for the same (stream, size), the longest tier when there is no history (``predicted``:
what a real allocator could do). Both need timestamps.
"""

from __future__ import annotations

from veotrace.allocators.base import (
    EV_ALLOC,
    EV_FREE,
    EV_SEGMENT_ALLOC,
    EV_SEGMENT_FREE,
    VA_ALIGN,
    AddressSpace,
    PolicyCounters,
    Recorder,
    oom,
)
from veotrace.allocators.holes import Holes
from veotrace.allocators.requests import NO_TIME

ALIGN = 512
#: (largest lifetime in seconds, chunk granularity in bytes), shortest first; the last bound is infinite.
DEFAULT_TIERS: tuple[tuple[float, int], ...] = ((0.010, 4 << 20), (0.100, 64 << 20), (float("inf"), 512 << 20))


def check_tiers(tiers) -> None:
    """Raises ValueError for tiers that are not increasing bounds with positive granularities."""
    bounds = [b for b, _ in tiers]
    if not tiers or bounds != sorted(bounds) or any(g <= 0 for _, g in tiers) or bounds[-1] != float("inf"):
        raise ValueError("tiers need increasing lifetime bounds ending with 'inf' and positive granularities")


class TieredAllocator:
    """Args: req: the Requests (for timestamps and, with ``oracle``, lifetimes); tiers: see DEFAULT_TIERS."""

    def __init__(self, req, *, oracle: bool, tiers=DEFAULT_TIERS, capacity: int | None = None,
                 rec: Recorder | None = None, va: AddressSpace | None = None) -> None:
        check_tiers(tiers)
        self.req, self.oracle, self.tiers = req, oracle, tuple(tiers)
        self.lifetimes = req.lifetimes_ns() if oracle else None
        self.capacity = capacity
        self.rec = rec or Recorder()
        self.c = PolicyCounters()
        self.va = va or AddressSpace()
        self.holes = [Holes(True) for _ in tiers]
        self.segments: list[dict[int, int]] = [{} for _ in tiers]
        self.history: dict[tuple[int, int], int] = {}
        self.stats = {"per_tier_allocs": [0] * len(tiers), "no_history": 0, "predicted_tier_right": 0,
                      "predicted_with_truth": 0}

    def tier_of(self, lifetime_ns: int | None) -> int:
        """The tier of a lifetime; unknown (None, NO_TIME) or never freed (-1): the longest."""
        if lifetime_ns is None or lifetime_ns < 0:
            return len(self.tiers) - 1
        s = lifetime_ns / 1e9
        return next(i for i, (bound, _) in enumerate(self.tiers) if s <= bound)

    def _choose(self, size: int, stream: int) -> int:
        i = self.rec.req
        if self.oracle:
            return self.tier_of(self.lifetimes[i])
        seen = self.history.get((stream, size))
        if seen is None:
            self.stats["no_history"] += 1
        return self.tier_of(seen)

    def malloc(self, size: int, stream: int):
        n = -(-size // ALIGN) * ALIGN
        t = self._choose(size, stream)
        self.stats["per_tier_allocs"][t] += 1
        start = self.holes[t].take(n)
        c = self.c
        if start is None:
            gran = self.tiers[t][1]
            seg = -(-n // gran) * gran
            if self.capacity is not None and c.reserved + seg > self.capacity:
                self.release_cached_blocks()
                c.alloc_retries += 1
                if c.reserved + seg > self.capacity:
                    oom(c, self.rec, size, stream)
            start = self.va.take(seg + VA_ALIGN)  # a gap keeps chunks from merging with each other
            self.segments[t][start] = seg
            if seg > n:
                self.holes[t].put(start + n, seg - n)
            c.reserved += seg
            c.device_allocs += 1
            if c.reserved > c.peak_reserved:
                c.peak_reserved = c.reserved
            self.rec.emit(EV_SEGMENT_ALLOC, start, seg, stream, seg)
        c.allocated += n
        if c.allocated > c.peak_allocated:
            c.peak_allocated = c.allocated
        self.rec.emit(EV_ALLOC, start, size, stream, n)
        return start, n, size, stream, t, self.rec.req

    def free(self, handle) -> None:
        start, n, size, stream, t, born = handle
        self.c.allocated -= n
        self.rec.emit(EV_FREE, start, size, stream, n)
        self.holes[t].put(start, n)
        ts = self.req.ts_ns
        if ts[born] != NO_TIME and ts[self.rec.req] != NO_TIME:
            lifetime = ts[self.rec.req] - ts[born]
            if not self.oracle:
                true_tier = self.tier_of(lifetime)
                self.stats["predicted_with_truth"] += 1
                self.stats["predicted_tier_right"] += true_tier == t
            self.history[(stream, size)] = lifetime

    def release_cached_blocks(self) -> None:
        """Return every completely free chunk of every tier to the device."""
        c = self.c
        c.flushes += 1
        for holes, segs in zip(self.holes, self.segments):
            for start, seg in list(segs.items()):
                if holes.by_start.get(start) == seg:
                    holes.remove(start)
                    del segs[start]
                    c.reserved -= seg
                    c.device_frees += 1
                    self.rec.emit(EV_SEGMENT_FREE, start, seg, 0, seg)
