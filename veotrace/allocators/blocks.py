"""Blocks, block pools and the size rules of PyTorch's caching allocator (``CUDACachingAllocator.cpp``).

The constants, ``round_size`` (with ``roundup_power2_next_division``) and ``get_allocation_size`` keep
PyTorch's names; ``BlockPool`` orders free blocks as ``BlockComparatorSize`` does.
"""

from __future__ import annotations

from bisect import bisect_left, insort

from veotrace.allocators.conf import TorchConf

kMinBlockSize = 512  # all sizes are rounded to at least 512 bytes
kSmallSize = 1 << 20  # largest "small" allocation is 1 MiB
kSmallBuffer = 2 << 20  # "small" allocations are packed in 2 MiB blocks
kLargeBuffer = 20 << 20  # "large" allocations may be packed in 20 MiB blocks
kMinLargeAlloc = 10 << 20  # allocations between 1 and 10 MiB may use kLargeBuffer
kRoundLarge = 2 << 20  # round up large allocations to 2 MiB


class Block:
    """A block of a segment: free (in its pool), allocated, or (expandable) an unmapped range."""

    __slots__ = ("size", "addr", "stream", "pool", "prev", "next", "allocated", "seg", "mapped",
                 "requested", "gc_base")

    def __init__(self, size: int, addr: int, stream: int, pool: BlockPool, seg=None) -> None:
        self.size, self.addr, self.stream, self.pool, self.seg = size, addr, stream, pool, seg
        self.prev = self.next = None
        self.allocated = False
        self.mapped = True
        self.requested = 0
        self.gc_base = 0

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None


class BlockPool:
    """Free blocks ordered as ``BlockComparatorSize`` (stream, size, address); unmapped ones by address."""

    __slots__ = ("is_small", "keys", "free", "unmapped_keys", "unmapped", "get_free_blocks_call_count")

    def __init__(self, is_small: bool) -> None:
        self.is_small = is_small
        self.keys: dict[int, list[tuple[int, int]]] = {}
        self.free: dict[int, Block] = {}
        self.unmapped_keys: dict[int, list[int]] = {}
        self.unmapped: dict[int, Block] = {}
        self.get_free_blocks_call_count = 0

    def insert_into_blocks(self, b: Block) -> None:
        b.gc_base = self.get_free_blocks_call_count
        lst = self.keys.get(b.stream)
        if lst is None:
            lst = self.keys[b.stream] = []
        insort(lst, (b.size, b.addr))
        self.free[b.addr] = b

    def erase(self, b: Block) -> None:
        lst = self.keys[b.stream]
        del lst[bisect_left(lst, (b.size, b.addr))]
        del self.free[b.addr]

    def insert_unmapped(self, b: Block) -> None:
        insort(self.unmapped_keys.setdefault(b.stream, []), b.addr)
        self.unmapped[b.addr] = b

    def erase_unmapped(self, b: Block) -> None:
        lst = self.unmapped_keys[b.stream]
        del lst[bisect_left(lst, b.addr)]
        del self.unmapped[b.addr]

    def ordered(self) -> list[Block]:
        """All free mapped blocks in set order (stream, size, address)."""
        return [self.free[a] for s in sorted(self.keys) for _, a in self.keys[s]]


def roundup_power2_next_division(size: int, divisions: int) -> int:
    """Round ``size`` up to the next of ``divisions`` equal steps between two powers of two."""
    if size & (size - 1) == 0:
        return size
    floor = 1 << (size.bit_length() - 1)
    step = floor >> (divisions.bit_length() - 1)
    if step == 0:
        return floor << 1
    rounded = size & ~(step - 1)
    return size if rounded == size else rounded + step


def round_size(size: int, conf: TorchConf) -> int:
    """Block size for a request: at least kMinBlockSize, a multiple of it, or a power-of-2 division."""
    if size < kMinBlockSize:
        return kMinBlockSize
    divisions = conf.divisions_for(size)
    if divisions > 1 and size > kMinBlockSize * divisions:
        return roundup_power2_next_division(size, divisions)
    return kMinBlockSize * ((size + kMinBlockSize - 1) // kMinBlockSize)


def get_allocation_size(size: int) -> int:
    """Segment size cudaMalloc'd for a block of ``size``: 2 MiB, 20 MiB, or rounded up to 2 MiB."""
    if size <= kSmallSize:
        return kSmallBuffer
    if size < kMinLargeAlloc:
        return kLargeBuffer
    return kRoundLarge * ((size + kRoundLarge - 1) // kRoundLarge)
