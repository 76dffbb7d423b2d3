"""Reference policies over one arena: ``bestfit``, ``firstfit``, and ``ideal`` (reserved = live bytes).

``bestfit``/``firstfit``: one contiguous arena for all streams that grows at its top when no hole fits
(``segment_map`` of the growth) and never shrinks; sizes aligned to 512 bytes as PyTorch's blocks are;
freed ranges merge with their neighbours. ``ideal`` gives every allocation exactly its requested bytes
and returns them at its free: the lower bound every other policy is measured against.
"""

from __future__ import annotations

from veotrace.allocators.base import (
    EV_ALLOC,
    EV_FREE,
    EV_SEGMENT_ALLOC,
    EV_SEGMENT_FREE,
    EV_SEGMENT_MAP,
    AddressSpace,
    PolicyCounters,
    Recorder,
    oom,
)
from veotrace.allocators.holes import Holes

ALIGN = 512


class ArenaAllocator:
    """One growing arena searched best-fit (``best=True``) or first-fit."""

    def __init__(self, *, best: bool, capacity: int | None = None, rec: Recorder | None = None,
                 va: AddressSpace | None = None) -> None:
        self.holes = Holes(best)
        self.capacity = capacity
        self.rec = rec or Recorder()
        self.c = PolicyCounters()
        self.base = self.top = (va or AddressSpace()).take(1)

    def malloc(self, size: int, stream: int) -> tuple[int, int, int]:
        n = -(-size // ALIGN) * ALIGN
        start = self.holes.take(n)
        c = self.c
        if start is None:
            start = self.holes.ending_at(self.top)
            if start is not None:
                self.holes.remove(start)
            else:
                start = self.top
            grow = start + n - self.top
            if self.capacity is not None and c.reserved + grow > self.capacity:
                oom(c, self.rec, size, stream)
            self.rec.emit(EV_SEGMENT_MAP, self.top, grow, stream, grow)
            self.top += grow
            c.reserved += grow
            c.device_allocs += 1
            if c.reserved > c.peak_reserved:
                c.peak_reserved = c.reserved
        c.allocated += n
        if c.allocated > c.peak_allocated:
            c.peak_allocated = c.allocated
        self.rec.emit(EV_ALLOC, start, size, stream, n)
        return start, n, size, stream

    def free(self, handle: tuple[int, int, int, int]) -> None:
        start, n, size, stream = handle
        self.c.allocated -= n
        self.rec.emit(EV_FREE, start, size, stream, n)
        self.holes.put(start, n)


class IdealAllocator:
    """Reserved = live requested bytes at every moment: each allocation is its own exact device range."""

    def __init__(self, *, capacity: int | None = None, rec: Recorder | None = None,
                 va: AddressSpace | None = None) -> None:
        self.capacity = capacity
        self.rec = rec or Recorder()
        self.c = PolicyCounters()
        self.next = (va or AddressSpace()).take(1)

    def malloc(self, size: int, stream: int) -> tuple[int, int]:
        c = self.c
        addr = self.next
        self.next += -(-size // ALIGN) * ALIGN
        if self.capacity is not None and c.reserved + size > self.capacity:
            oom(c, self.rec, size, stream)
        c.reserved += size
        c.allocated += size
        c.device_allocs += 1
        if c.reserved > c.peak_reserved:
            c.peak_reserved = c.peak_allocated = c.reserved
        self.rec.emit(EV_SEGMENT_ALLOC, addr, size, stream, size)
        self.rec.emit(EV_ALLOC, addr, size, stream, size)
        return addr, size, stream

    def free(self, handle: tuple[int, int, int]) -> None:
        addr, size, stream = handle
        c = self.c
        c.reserved -= size
        c.allocated -= size
        c.device_frees += 1
        self.rec.emit(EV_FREE, addr, size, stream, size)
        self.rec.emit(EV_SEGMENT_FREE, addr, size, stream, size)
