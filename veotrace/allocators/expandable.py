"""Expandable segments (``expandable_segments:True``) for the torch model: segments that grow by pages.

From Note [Expandable Segments] and ``ExpandableSegment`` in ``CUDACachingAllocator.cpp``: each
(stream, pool) reserves a virtual range of 1 1/8 of device memory and maps physical pages into it
as needed: 2 MiB pages (kSmallBuffer) for the small pool, 20 MiB (kLargeBuffer) for the large one.
``map_block`` emits ``segment_map``; ``unmap_block`` unmaps the whole pages of a free block and emits
``segment_unmap``. Blocks of unmapped address space are kept in the pool's ``unmapped`` set.
Blocks and page sizes come from :mod:`veotrace.allocators.blocks`; :mod:`veotrace.allocators.torch`
imports this module, never the other way round (the owner is passed in).
"""

from __future__ import annotations

from veotrace.allocators.base import EV_SEGMENT_MAP, EV_SEGMENT_UNMAP
from veotrace.allocators.blocks import Block, kLargeBuffer, kSmallBuffer

#: Address space reserved per expandable segment when no --capacity is given (1 1/8 of this).
DEFAULT_DEVICE_MEMORY = 80 << 30


class ExpandableSegment:
    __slots__ = ("base", "segment_size")

    def __init__(self, base: int, segment_size: int) -> None:
        self.base, self.segment_size = base, segment_size


def _allocatable(b) -> bool:
    return b is not None and not b.allocated


def _splice(block, before, after) -> None:
    block.prev = before
    if before is not None:
        before.next = block
    block.next = after
    if after is not None:
        after.prev = block


class Expandable:
    """The expandable-segment half of one TorchAllocator (shares its pools, counters and recorder)."""

    def __init__(self, owner) -> None:
        self.a = owner

    def get_free_block_expandable(self, pool, lst, i):
        """Best fit counts the unmapped space after a block as its size (``expandable_size``): the position
        in ``lst`` of the block chosen (PyTorch advances its iterator, then erases the block there)."""
        free = pool.free

        def expandable_size(b):
            nxt = b.next
            return b.size + (nxt.size if nxt is not None and not nxt.mapped else 0)

        block = free[lst[i][1]]
        j = i + 1
        while block.seg is not None and j < len(lst) and expandable_size(free[lst[j][1]]) < expandable_size(block):
            block = free[lst[j][1]]
            i, j = j, j + 1
        return i

    def find_expandable_block(self, pool, size: int, stream: int):
        """The lowest-address unmapped range (with the free block before it) that can hold ``size``."""
        for addr in pool.unmapped_keys.get(stream, ()):
            c = pool.unmapped[addr]
            if _allocatable(c.prev):
                c = c.prev
            b, room = c, 0
            while room < size and _allocatable(b):
                room += b.size
                b = b.next
            if room >= size:
                return c
        page = kSmallBuffer if pool.is_small else kLargeBuffer
        memory = self.a.capacity or DEFAULT_DEVICE_MEMORY
        # A request larger than that range (possible only past --capacity, on the replay's forced OOM
        # path) gets a range of its own size, so the replay can go on past the OOM it reports.
        span = -(-max(memory + memory // 8, size) // page) * page
        seg = ExpandableSegment(self.a.driver.take_high(span), page)
        candidate = Block(span, seg.base, stream, pool, seg)
        candidate.mapped = False
        pool.insert_unmapped(candidate)
        return candidate

    def map_block(self, to_map, size: int, *, force: bool = False) -> bool:
        seg, a = to_map.seg, self.a
        page = seg.segment_size
        begin = (to_map.addr - seg.base) // page
        end = -(-(to_map.addr + size - seg.base) // page)
        mapped = (end - begin) * page
        if not force and a.capacity is not None and a.c.reserved + mapped > a.capacity:
            return False
        pool = to_map.pool
        pool.erase_unmapped(to_map)
        to_map.mapped = True
        ptr = to_map.addr
        if mapped < to_map.size:
            remaining = Block(to_map.size - mapped, ptr + mapped, to_map.stream, pool, seg)
            remaining.mapped = False
            _splice(remaining, to_map, to_map.next)
            pool.insert_unmapped(remaining)
            to_map.size = mapped
        a.try_merge_blocks(to_map, to_map.prev, pool)
        a.try_merge_blocks(to_map, to_map.next, pool)
        pool.insert_into_blocks(to_map)
        c = a.c
        c.reserved += mapped
        if c.reserved > c.peak_reserved:
            c.peak_reserved = c.reserved
        c.device_allocs += 1
        a.rec.emit(EV_SEGMENT_MAP, ptr, mapped, to_map.stream, mapped)
        return True

    def try_allocate_expandable_block(self, pool, size: int, stream: int, *, force: bool = False):
        candidate = self.find_expandable_block(pool, size, stream)
        if not candidate.mapped and not self.map_block(candidate, min(candidate.size, size), force=force):
            return None
        while candidate.size < size:
            nxt = candidate.next
            # PyTorch's find_expandable_block only returns a block with enough unmapped space after it;
            # when the capacity check made the model pick one without, the segment cannot grow: fail
            # this attempt (the caller frees cached blocks, retries, then reports the OOM).
            if nxt is None:
                return None
            if not self.map_block(nxt, min(size - candidate.size, nxt.size), force=force):
                return None
            candidate = nxt
        pool.erase(candidate)
        return candidate

    def unmap_block(self, block) -> None:
        """Unmap the whole pages inside a free block; the partial pages at its ends stay mapped."""
        seg, a, pool = block.seg, self.a, block.pool
        page = seg.segment_size
        begin = -(-(block.addr - seg.base) // page)
        end = (block.addr + block.size - seg.base) // page
        if begin >= end:
            return
        pool.erase(block)
        start, length = seg.base + begin * page, (end - begin) * page
        before = start - block.addr
        if before > 0:
            head = Block(before, block.addr, block.stream, pool, seg)
            _splice(head, block.prev, block)
            pool.insert_into_blocks(head)
        after = block.size - before - length
        if after > 0:
            tail = Block(after, start + length, block.stream, pool, seg)
            _splice(tail, block, block.next)
            pool.insert_into_blocks(tail)
        block.addr, block.size, block.mapped = start, length, False
        a.try_merge_blocks(block, block.prev, pool)
        a.try_merge_blocks(block, block.next, pool)
        pool.insert_unmapped(block)
        a.c.reserved -= length
        a.c.device_frees += 1
        a.rec.emit(EV_SEGMENT_UNMAP, start, length, block.stream, length)
