"""``reuse``: exact-size free lists, buffers reused by shape (the frame-timeline idea).

A freed buffer is retained on the free list of its (stream, size); a request takes the oldest retained
buffer of exactly its size, or else a new device allocation of exactly its size (rounded to 512 bytes).
Nothing is split or merged. When ``--capacity`` would be exceeded, every retained buffer is returned to
the device (a flush) and the allocation retried.
"""

from __future__ import annotations

from collections import deque

from veotrace.allocators.base import (
    EV_ALLOC,
    EV_FREE,
    EV_SEGMENT_ALLOC,
    EV_SEGMENT_FREE,
    AddressSpace,
    PolicyCounters,
    Recorder,
    oom,
)

ALIGN = 512


class ReuseAllocator:
    def __init__(self, *, capacity: int | None = None, rec: Recorder | None = None,
                 va: AddressSpace | None = None) -> None:
        self.capacity = capacity
        self.rec = rec or Recorder()
        self.c = PolicyCounters()
        self.va = va or AddressSpace()
        self.retained: dict[tuple[int, int], deque[int]] = {}
        self.retained_bytes = 0

    def malloc(self, size: int, stream: int) -> tuple[int, int, int, int]:
        n = -(-size // ALIGN) * ALIGN
        key = (stream, n)
        c = self.c
        lst = self.retained.get(key)
        if lst:
            addr = lst.popleft()  # the oldest retained buffer of this size
            self.retained_bytes -= n
        else:
            if self.capacity is not None and c.reserved + n > self.capacity:
                self.release_cached_blocks()
                c.alloc_retries += 1
                if c.reserved + n > self.capacity:
                    oom(c, self.rec, size, stream)
            addr = self.va.take(n)
            c.reserved += n
            c.device_allocs += 1
            if c.reserved > c.peak_reserved:
                c.peak_reserved = c.reserved
            self.rec.emit(EV_SEGMENT_ALLOC, addr, n, stream, n)
        c.allocated += n
        if c.allocated > c.peak_allocated:
            c.peak_allocated = c.allocated
        self.rec.emit(EV_ALLOC, addr, size, stream, n)
        return addr, n, size, stream

    def free(self, handle: tuple[int, int, int, int]) -> None:
        addr, n, size, stream = handle
        self.c.allocated -= n
        self.rec.emit(EV_FREE, addr, size, stream, n)
        self.retained.setdefault((stream, n), deque()).append(addr)
        self.retained_bytes += n

    def release_cached_blocks(self) -> None:
        """Return every retained buffer to the device."""
        c = self.c
        c.flushes += 1
        for (stream, n), lst in self.retained.items():
            for addr in lst:
                c.reserved -= n
                c.device_frees += 1
                self.rec.emit(EV_SEGMENT_FREE, addr, n, stream, n)
        self.retained.clear()
        self.retained_bytes = 0
