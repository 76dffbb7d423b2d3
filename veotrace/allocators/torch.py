"""Model of PyTorch's CUDA caching allocator (``DeviceCachingAllocator``), one instance per device.

Read from ``c10/cuda/CUDACachingAllocator.cpp``; methods keep PyTorch's names so each rule can be checked
against the source: ``round_size``, ``get_allocation_size``, ``get_free_block``, ``alloc_block``,
``should_split``, ``alloc_found_block``, ``free_block``, ``try_merge_blocks``, ``release_block``,
``release_available_cached_blocks``, ``release_cached_blocks``, ``garbage_collect_cached_blocks``.
Expandable segments (``find_expandable_block``, ``map_block``, ``unmap_block``) live in
:mod:`veotrace.allocators.expandable`. Not modelled: CUDA-graph private pools, cross-stream
``record_stream`` events (a free is taken at ``free_completed``) and free-memory callbacks.
"""

from __future__ import annotations

from bisect import bisect_left

from veotrace.allocators import releases as rl
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
from veotrace.allocators.blocks import (  # noqa: F401
    Block,
    BlockPool,
    get_allocation_size,
    kLargeBuffer,
    kMinBlockSize,
    kMinLargeAlloc,
    kRoundLarge,
    kSmallBuffer,
    kSmallSize,
    round_size,
    roundup_power2_next_division,
)
from veotrace.allocators.conf import NO_LIMIT, TorchConf
from veotrace.allocators.driver import TIE_WALK, Driver
from veotrace.allocators.expandable import Expandable

#: Distinct requested sizes whose rounding is remembered (the model's own speed-up, not PyTorch's).
SIZE_CACHE = 1 << 16


class TorchAllocator:
    """``DeviceCachingAllocator`` for one device: ``malloc(size, stream) -> Block``, ``free(Block)``.

    Args:
        conf: the allocator settings.
        capacity: the device's memory (``--capacity``): a cudaMalloc, or the pages an expandable segment
            maps, past it fails; None = unlimited. With ``conf.per_process_memory_fraction`` it also gives
            ``allowed_memory_maximum`` (the fraction of it), which alloc_block checks first and
            garbage_collection_threshold needs.
        rec: where events go; counters: totals kept up to date.
        exact_releases: these are the settings the trace was recorded with: its partial releases inside a
            malloc (max_split_size retries, garbage collection) are replayed as recorded (:meth:`release`).
        driver: the cudaMalloc addresses (:class:`veotrace.allocators.driver.Driver`: the recorded ones, else
            the rule learned from the trace); default: no recording, ascending from ``va``'s start.
    """

    def __init__(self, conf: TorchConf, *, capacity: int | None = None, rec: Recorder | None = None,
                 va: AddressSpace | None = None, exact_releases: bool = False, driver: Driver | None = None) -> None:
        self.conf, self.capacity = conf, capacity
        self.rec = rec or Recorder()
        self.c = PolicyCounters()
        self.va = va or AddressSpace()
        self.driver = driver or Driver(start=self.va.next)
        self.driver.c = self.c
        self.large_blocks, self.small_blocks = BlockPool(False), BlockPool(True)
        self.mss = conf.max_split_size
        self.max_non_split_rounding_size = conf.max_non_split_rounding_size
        self.emit = self.rec.emit
        self.allowed = conf.allowed_maximum(capacity)
        self.gc_threshold = conf.gc_threshold_bytes(capacity)
        self.gc_on = self.gc_threshold is not None
        self.es = Expandable(self) if conf.expandable_segments else None
        self.exact_releases = exact_releases
        self.armed: int | None = None  # the kind of the recorded release inside the next malloc
        self.armed_segs: list[tuple[int, int, int]] = []
        self.seeded_blocks: dict[int, Block] = {}
        self._sizes: dict[int, tuple[int, int]] = {}

    # -- allocation ------------------------------------------------------------------------------
    def malloc(self, orig_size: int, stream: int) -> Block:
        sizes = self._sizes.get(orig_size)
        if sizes is None:  # round_size and get_allocation_size, remembered per requested size
            if len(self._sizes) > SIZE_CACHE:
                self._sizes.clear()
            size = round_size(orig_size, self.conf)
            sizes = self._sizes[orig_size] = (size, get_allocation_size(size))
        size, alloc_size = sizes
        pool = self.small_blocks if size <= kSmallSize else self.large_blocks
        block = self.get_free_block(pool, size, stream)
        if block is None:
            block = self.malloc_new_block(pool, orig_size, size, alloc_size, stream)
        else:
            self.armed = None  # a cached block fits: PyTorch's malloc would not have released anything here
        return self.alloc_found_block(block, pool, size, orig_size, self.should_split(block, size))

    def malloc_new_block(self, pool: BlockPool, orig_size: int, size: int, alloc_size: int, stream: int) -> Block:
        """malloc after no cached block fits: the recorded release, garbage collection, a new segment and
        the retries (release_available_cached_blocks, then release_cached_blocks)."""
        if self.armed is not None:  # the trace recorded a release inside this malloc
            self.recorded_release(pool, size, stream)
        if self.gc_on:
            self.garbage_collect_cached_blocks()
        block = self.alloc_block(pool, size, alloc_size, stream)
        if block is None and self.release_available_cached_blocks(pool, size, stream):
            block = self.alloc_block(pool, size, alloc_size, stream)
        if block is None:
            self.release_cached_blocks()
            self.c.alloc_retries += 1
            block = self.alloc_block(pool, size, alloc_size, stream)
        if block is None:  # a real run stops here with OutOfMemoryError; the replay goes on past it
            oom(self.c, self.rec, orig_size, stream)
            block = self.alloc_block(pool, size, alloc_size, stream, force=True)
        return block

    def get_free_block(self, pool: BlockPool, size: int, stream: int) -> Block | None:
        """Best fit: the first free block of the stream at least ``size`` in (size, address) order."""
        if self.gc_on:
            pool.get_free_blocks_call_count += 1
        lst = pool.keys.get(stream)
        if not lst:
            return None
        i = bisect_left(lst, (size,))  # (size,) sorts before every (size, address)
        if i == len(lst):
            return None
        block = pool.free[lst[i][1]]
        if block.seg is not None:  # the block chosen may be a later one, of any kind (a seeded segment's)
            i = self.es.get_free_block_expandable(pool, lst, i)
            block = pool.free[lst[i][1]]
        mss = self.mss
        if size < mss:
            if mss <= block.size:  # do not return an oversized block for a small request
                return None
        elif block.size >= size + self.max_non_split_rounding_size:
            return None
        if self.driver.assumed_live and i + 1 < len(lst) and lst[i + 1][0] == block.size:
            for j in range(i + 1, min(i + 1 + TIE_WALK, len(lst))):  # equal blocks behind it: the driver's tie?
                if lst[j][0] != block.size:
                    break
                if self.driver.tie(block.addr, lst[j][1]):
                    self.c.assumed_ties += 1
                    break
        del lst[i]  # pool.erase, with the position known (the walk's, where it moved on: PyTorch's iterator)
        del pool.free[block.addr]
        return block

    def alloc_block(self, pool: BlockPool, size: int, alloc_size: int, stream: int, *, force: bool = False):
        """A new segment (cudaMalloc of ``alloc_size``), or expandable pages; None when it does not fit.

        As ``alloc_block`` does, the allowed maximum (a memory fraction) is checked first, against
        ``alloc_size`` (get_allocation_size of the request) whatever the segment kind: ``if (set_fraction &&
        total_allocated_memory + size > allowed_memory_maximum)``, before the expandable branch, so an
        expandable request is refused there before any page is mapped. The device's memory then bounds
        cudaMalloc, or each mapping of pages (``map_block``: cuMemCreate fails when the device is full)."""
        if not force and self.allowed is not None and self.c.reserved + alloc_size > self.allowed:
            return None
        if self.es is not None:
            return self.es.try_allocate_expandable_block(pool, size, stream, force=force)
        if not force and self.capacity is not None and self.c.reserved + alloc_size > self.capacity:
            return None
        block = Block(alloc_size, self.driver.take(alloc_size, self.rec.req), stream, pool)
        c = self.c
        c.reserved += alloc_size
        if c.reserved > c.peak_reserved:
            c.peak_reserved = c.reserved
        c.device_allocs += 1
        self.rec.emit(EV_SEGMENT_ALLOC, block.addr, alloc_size, stream, alloc_size)
        return block

    def should_split(self, block: Block, size: int) -> bool:
        remaining = block.size - size
        if block.pool.is_small or self.es is not None:
            return remaining >= kMinBlockSize
        return size < self.mss and remaining > kSmallSize

    def alloc_found_block(self, block: Block, pool: BlockPool, size: int, orig_size: int, split: bool) -> Block:
        if split:
            remaining = block
            block = Block(size, remaining.addr, remaining.stream, pool, remaining.seg)
            prev = block.prev = remaining.prev
            if prev is not None:
                prev.next = block
            block.next = remaining
            remaining.prev = block
            remaining.addr += size
            remaining.size -= size
            pool.insert_into_blocks(remaining)
        block.allocated = True
        block.requested = orig_size
        c = self.c
        allocated = c.allocated = c.allocated + block.size
        if allocated > c.peak_allocated:
            c.peak_allocated = allocated
        self.emit(EV_ALLOC, block.addr, orig_size, block.stream, block.size)
        return block

    def release(self, kind: int, segs=()) -> None:
        """A recorded run of releases (``releases.REL_*``; ``segs``: (address, bytes, stream) of a partial
        one): the program's empty_cache(), or a release inside the next malloc, done there if no cached
        block fits (:meth:`recorded_release`)."""
        if kind in (rl.REL_EMPTY_CACHE, rl.REL_OOM):
            self.release_cached_blocks()
        elif kind == rl.REL_GC and not self.exact_releases:
            return  # garbage collection belongs to the recorded setting; another one collects by its own rule
        else:
            self.armed, self.armed_segs = kind, list(segs)

    def recorded_release(self, pool: BlockPool, size: int, stream: int) -> None:
        """The recorded release inside this malloc, after get_free_block found nothing. The recorded setting
        releases what the trace did: everything unsplit (an OOM retry) or the very segments (a
        max_split_size retry, garbage collection). Another setting retries as PyTorch's malloc does after
        a failed cudaMalloc: release_available_cached_blocks with max_split_size set (taken to succeed
        when it frees enough), else release_cached_blocks."""
        kind, self.armed = self.armed, None
        if self.exact_releases and kind in (rl.REL_SPLIT_RETRY, rl.REL_GC):
            for _, nbytes, st in self.armed_segs:
                self.release_cached_segment(nbytes, st)
            return
        if not self.exact_releases and self.release_available_cached_blocks(pool, size, stream):
            return
        self.release_cached_blocks()
        self.c.alloc_retries += 1

    def release_cached_segment(self, nbytes: int, stream: int) -> None:
        """cudaFree of one recorded segment: the model's free unsplit block of that size and stream (the
        lowest address; blocks with no neighbours are interchangeable), if it holds one."""
        pool = self.small_blocks if nbytes == kSmallBuffer else self.large_blocks
        lst = pool.keys.get(stream) or []
        for i in range(bisect_left(lst, (nbytes,)), len(lst)):
            if lst[i][0] != nbytes:
                break
            block = pool.free[lst[i][1]]
            if not block.is_split() and block.seg is None:
                self.release_block(block)
                return

    def seeded(self, addr: int) -> Block | None:
        """The block of a seeded live allocation at ``addr`` (see :func:`seed_state`), if any."""
        return self.seeded_blocks.pop(addr, None)

    # -- free --------------------------------------------------------------------------------------
    def free(self, block: Block) -> None:
        block.allocated = False
        self.c.allocated -= block.size
        self.emit(EV_FREE, block.addr, block.requested, block.stream, block.size)
        self.free_block(block)

    def free_block(self, block: Block) -> None:
        pool = block.pool
        prev, nxt = block.prev, block.next
        if prev is not None and not prev.allocated:  # try_merge_blocks' own first test, hoisted
            self.try_merge_blocks(block, prev, pool)
        if nxt is not None and not nxt.allocated:
            self.try_merge_blocks(block, nxt, pool)
        pool.insert_into_blocks(block)

    @staticmethod
    def try_merge_blocks(dst: Block, src: Block | None, pool: BlockPool) -> int:
        """Absorb a free neighbour into ``dst``; returns the subsumed size (0 when not merged)."""
        if src is None or src.allocated or dst.mapped != src.mapped:
            return 0
        if src.mapped:
            pool.erase(src)
        else:
            pool.erase_unmapped(src)
        if dst.prev is src:
            dst.addr = src.addr
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
        else:
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size
        return src.size

    # -- returning memory to the device ---------------------------------------------------------------
    def release_block(self, block: Block) -> None:
        """cudaFree of a whole unsplit cached segment."""
        c = self.c
        c.device_frees += 1
        c.reserved -= block.size
        self.driver.release(block.addr)
        self.rec.emit(EV_SEGMENT_FREE, block.addr, block.size, block.stream, block.size)
        block.pool.erase(block)

    def release_available_cached_blocks(self, pool: BlockPool, size: int, stream: int) -> bool:
        """With max_split_size set: free one oversize cached block big enough, or several, largest first."""
        if self.mss == NO_LIMIT:
            return False
        key = max(size, self.mss)
        lst = pool.keys.get(stream) or []
        i = bisect_left(lst, (key, 0))
        if i < len(lst):
            block = pool.free[lst[i][1]]
            if block.is_split() or block.seg is not None:
                return False
            self.release_block(block)
            return True
        released = 0
        for sz, addr in reversed(list(lst)):
            if released >= key or sz < self.mss:
                break
            block = pool.free[addr]
            if not block.is_split() and block.seg is None:
                released += sz
                self.release_block(block)
        return released >= key

    def release_cached_blocks(self) -> None:
        """``emptyCache`` and the last retry of malloc: free every unsplit cached block of both pools."""
        self.c.flushes += 1
        for pool in (self.large_blocks, self.small_blocks):
            self.release_blocks(pool)

    def release_blocks(self, pool: BlockPool) -> None:
        to_unmap = []
        for block in pool.ordered():
            if block.seg is not None:
                to_unmap.append(block)
            elif block.prev is None and block.next is None:
                self.release_block(block)
        for block in to_unmap:
            self.es.unmap_block(block)
            if block.prev is None and block.next is None and not block.mapped:
                pool.erase_unmapped(block)  # release_expandable_segment

    def garbage_collect_cached_blocks(self) -> None:
        """Free unsplit large cached blocks older than average until reserved <= threshold * allowed maximum."""
        threshold = self.gc_threshold
        if self.c.reserved <= threshold:
            return
        target, reclaimed = self.c.reserved - threshold, 0
        pool = self.large_blocks
        count = pool.get_free_blocks_call_count
        freeable = [b for b in pool.ordered() if not b.is_split() and b.seg is None]
        total_age = sum(count - b.gc_base for b in freeable)
        freed = True
        while reclaimed < target and freed and freeable:
            age_threshold = total_age / len(freeable)
            freed, keep = False, []
            for b in freeable:
                if count - b.gc_base >= age_threshold:
                    freed = True
                    reclaimed += b.size
                    total_age -= count - b.gc_base
                    self.release_block(b)
                else:
                    keep.append(b)
            freeable = keep
