"""Synthetic data: a small CUDA caching allocator written from PyTorch's rules, and seeded programs run on it,
recorded as ``torch.cuda.memory._snapshot()`` records them: the ground truth for the torch model's replay.

It shares no code with :mod:`veotrace.allocators` (the model it checks): it is written again, plainly, from
``c10/cuda/CUDACachingAllocator.cpp`` (``DeviceCachingAllocator``: ``malloc``, ``get_free_block``,
``alloc_block``, ``release_available_cached_blocks``, ``release_cached_blocks``,
``garbage_collect_cached_blocks``, ``free_block``, ``emptyCache``, ``setMemoryFraction``), on a fake
device whose ``cudaMalloc`` fails past its memory and hands freed address ranges out again: from the
bottom of the address space (``Settings.driver="ascending"``: the lowest free range that holds it) or
from its top (``"descending"``: the highest, from its end), as CUDA drivers do. With ``Program.frames``,
each release records the stack PyTorch gathers (``emptyCache``: ``maybeGatherContext(RecordContext::ALL)``,
frames naming ``empty_cache``; a retry inside ``malloc``: the allocating op's context). Every release is recorded with why it happened (``ProgramTruth.releases``), which
no trace says. One stream, one device, no expandable segments, no CUDA graphs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

MiB = 1 << 20
_MIN_BLOCK, _SMALL_SIZE, _SMALL_BUFFER = 512, MiB, 2 * MiB
_LARGE_BUFFER, _MIN_LARGE_ALLOC, _ROUND_LARGE = 20 * MiB, 10 * MiB, 2 * MiB
_SIZE_MAX = (1 << 64) - 1
#: Where the fake device's addresses start (a typical CUDA VA base).
_VA_BASE = 0x7F10_0000_0000
#: The stacks recorded with an entry: emptyCache's own context (torch.cuda.empty_cache's frame), and an op's.
_EMPTY_CACHE_FRAMES = [{"name": "empty_cache", "filename": "torch/cuda/memory.py", "line": 222},
                       {"name": "train_step", "filename": "train.py", "line": 40}]
_OP_FRAMES = [{"name": "forward", "filename": "model.py", "line": 12},
              {"name": "train_step", "filename": "train.py", "line": 31}]
T0_US = 1_760_000_000_000_000


@dataclass
class Settings:
    """The allocator's settings and the device: ``max_split_size`` and ``max_non_split_rounding`` in bytes
    (None: PyTorch's defaults), ``gc_threshold`` (0: off), ``fraction`` (``set_per_process_memory_fraction``;
    None: never called), ``device_memory`` (what cudaMalloc can hand out)."""

    max_split_size: int | None = None
    max_non_split_rounding: int = _LARGE_BUFFER
    gc_threshold: float = 0.0
    fraction: float | None = None
    device_memory: int = 80 << 30
    driver: str = "ascending"

    def allocator_settings(self) -> dict:
        """``allocator_settings`` as a snapshot of PyTorch 2.9 writes it (the string holds what the fields
        do not: max_non_split_rounding_mb)."""
        conf = [f"max_split_size_mb:{self.max_split_size // MiB}"] if self.max_split_size else []
        if self.gc_threshold:
            conf.append(f"garbage_collection_threshold:{self.gc_threshold}")
        if self.max_non_split_rounding != _LARGE_BUFFER:
            conf.append(f"max_non_split_rounding_mb:{self.max_non_split_rounding // MiB}")
        return {"PYTORCH_CUDA_ALLOC_CONF": ",".join(conf), "max_split_size": self.max_split_size or -1,
                "garbage_collection_threshold": self.gc_threshold, "expandable_segments": False,
                "pinned_num_register_threads": 1, "release_lock_on_cudamalloc": False,
                "pinned_use_cuda_host_register": False,
                "roundup_power2_divisions": {str(1 << i): 0 for i in range(16)}}


class _Block:
    __slots__ = ("addr", "size", "small", "allocated", "prev", "next", "requested", "gc_base")

    def __init__(self, addr: int, size: int, small: bool) -> None:
        self.addr, self.size, self.small = addr, size, small
        self.allocated, self.prev, self.next, self.requested, self.gc_base = False, None, None, 0, 0

    def split(self) -> bool:
        return self.prev is not None or self.next is not None


class OutOfMemory(Exception):
    """``torch.OutOfMemoryError``: the malloc failed after every retry."""


@dataclass
class ProgramTruth:
    """What a reader of the snapshot cannot see: why each release happened, in trace order (``empty_cache``,
    ``oom_retry``, ``split_retry``, ``gc``), the segments (address, size) reserved when recording began, the
    recorded device allocations and OOMs."""

    releases: list[str] = field(default_factory=list)
    segments_before: list[tuple[int, int]] = field(default_factory=list)
    device_allocs: int = 0
    ooms: int = 0


class CachingAllocator:
    """One device's ``DeviceCachingAllocator``, recording trace entries while ``recording`` is on."""

    def __init__(self, settings: Settings) -> None:
        self.s = settings
        self.free: dict[bool, list[_Block]] = {True: [], False: []}  # pool (small?) -> free blocks
        self.calls = {True: 0, False: 0}  # get_free_blocks_call_count
        self.reserved = 0
        self.va: list[list[int]] = [[_VA_BASE, 1 << 44]]  # free address ranges [start, length], by address
        self.trace: list[dict] = []
        self.recording = False
        self.t_us = T0_US
        self.why = "empty_cache"  # the cause of the releases being made (ProgramTruth.releases)
        self.truth = ProgramTruth()
        self.heads: list[_Block] = []  # the first block of every segment
        self.before: list[list[tuple[int, int]]] = []  # per recorded entry: the segments reserved before it
        self.run_starts: list[int] = []  # the trace index of each run of releases (truth.releases)
        self.frames = False  # record the stacks PyTorch gathers (Program.frames)

    # -- the device -------------------------------------------------------------------------------
    def _record(self, action: str, addr: int, size: int, **extra) -> None:
        if self.recording:
            self.before.append([(h.addr, sum(_chain_sizes(h))) for h in self.heads])  # reserved before it
            self.t_us += 7
            key = "device_free" if action == "oom" else "addr"
            if self.frames and action in ("segment_free", "segment_alloc", "alloc", "oom"):
                extra = {**extra, "frames": _EMPTY_CACHE_FRAMES if action == "segment_free" and self.why == "empty_cache"
                         else _OP_FRAMES}
            self.trace.append({"action": action, key: addr, "size": size, "stream": 0, "time_us": self.t_us, **extra})
            if action == "segment_alloc":
                self.truth.device_allocs += 1
            elif action == "segment_free":  # a run takes the cause of its last release (a retry that ends in a flush)
                if len(self.trace) > 1 and self.trace[-2]["action"] == "segment_free" and self.truth.releases:
                    self.truth.releases[-1] = self.why
                else:
                    self.truth.releases.append(self.why)
                    self.run_starts.append(len(self.trace) - 1)

    def _cuda_malloc(self, size: int) -> int | None:
        if self.reserved + size > self.s.device_memory:
            return None
        if self.s.driver == "descending":  # the highest free range that holds it, from its top
            for r in reversed(self.va):
                if r[1] >= size:
                    r[1] -= size
                    return r[0] + r[1]
            return None
        for r in self.va:  # the lowest free range that holds it: freed addresses come back
            if r[1] >= size:
                addr = r[0]
                r[0] += size
                r[1] -= size
                return addr
        return None

    def _cuda_free(self, addr: int, size: int) -> None:
        self.va.append([addr, size])
        self.va.sort()
        merged = [self.va[0]]
        for r in self.va[1:]:
            if merged[-1][0] + merged[-1][1] == r[0]:
                merged[-1][1] += r[1]
            else:
                merged.append(r)
        self.va = merged

    # -- sizes -------------------------------------------------------------------------------------
    @staticmethod
    def round_size(size: int) -> int:
        return _MIN_BLOCK if size < _MIN_BLOCK else _MIN_BLOCK * -(-size // _MIN_BLOCK)

    @staticmethod
    def allocation_size(size: int) -> int:
        if size <= _SMALL_SIZE:
            return _SMALL_BUFFER
        return _LARGE_BUFFER if size < _MIN_LARGE_ALLOC else _ROUND_LARGE * -(-size // _ROUND_LARGE)

    @property
    def mss(self) -> int:
        return self.s.max_split_size or _SIZE_MAX

    @property
    def gc_on(self) -> bool:  # malloc: set_fraction && garbage_collection_threshold() > 0.0
        return self.s.fraction is not None and self.s.gc_threshold > 0

    # -- malloc --------------------------------------------------------------------------------------
    def malloc(self, orig: int) -> _Block:
        size = self.round_size(orig)
        small = size <= _SMALL_SIZE
        alloc_size = self.allocation_size(size)
        block = self._get_free_block(small, size)
        runs = len(self.truth.releases)
        if block is None:
            if self.gc_on:
                self.why = "gc"
                self._garbage_collect()
            block = self._alloc_block(small, alloc_size)
            if block is None:
                self.why = "split_retry"
                if self._release_available(small, size):
                    block = self._alloc_block(small, alloc_size)
            if block is None:
                self.why = "oom_retry"
                self._release_cached()
                block = self._alloc_block(small, alloc_size)
            self.why = "empty_cache"
        if block is None:
            if len(self.truth.releases) > runs:  # the retries' releases, then the failure
                self.truth.releases[-1] = "oom"
            self.truth.ooms += self.recording
            self._record("oom", self.s.device_memory - self.reserved, size)
            raise OutOfMemory(orig)
        remaining = block.size - size
        split = remaining >= _MIN_BLOCK if small else (size < self.mss and remaining > _SMALL_SIZE)
        if split:
            rest = _Block(block.addr + size, remaining, small)
            rest.prev, rest.next = block, block.next
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            self._insert(rest)
        block.allocated, block.requested = True, orig
        self._record("alloc", block.addr, orig)
        return block

    def _insert(self, b: _Block) -> None:
        b.gc_base = self.calls[b.small]
        self.free[b.small].append(b)

    def _get_free_block(self, small: bool, size: int) -> _Block | None:
        if self.gc_on:
            self.calls[small] += 1
        fits = [b for b in self.free[small] if b.size >= size]
        if not fits:
            return None
        b = min(fits, key=lambda x: (x.size, x.addr))  # the set's lower_bound: smallest, then lowest address
        if size < self.mss <= b.size:  # do not return an oversized block for a small request
            return None
        if size >= self.mss and b.size >= size + self.s.max_non_split_rounding:
            return None
        self.free[small].remove(b)
        return b

    def _alloc_block(self, small: bool, alloc_size: int) -> _Block | None:
        if self.s.fraction is not None and self.reserved + alloc_size > self._allowed():
            return None
        addr = self._cuda_malloc(alloc_size)
        if addr is None:
            return None
        self.reserved += alloc_size
        b = _Block(addr, alloc_size, small)
        self._record("segment_alloc", addr, alloc_size)
        self.heads.append(b)
        return b

    def _allowed(self) -> int:  # setMemoryFraction: fraction x the device's total memory
        return int(self.s.fraction * self.s.device_memory)

    # -- releases ------------------------------------------------------------------------------------
    def _release_block(self, b: _Block) -> None:
        self._record("segment_free", b.addr, b.size)
        self.free[b.small].remove(b)
        self.heads.remove(b)
        self.reserved -= b.size
        self._cuda_free(b.addr, b.size)

    def _release_available(self, small: bool, size: int) -> bool:
        if self.s.max_split_size is None:
            return False
        key = max(size, self.mss)
        order = sorted(self.free[small], key=lambda x: (x.size, x.addr))
        big = [b for b in order if b.size >= key]
        if big:
            if big[0].split():
                return False
            self._release_block(big[0])
            return True
        released = 0
        for b in reversed(order):  # no single block is large enough: the largest oversize ones first
            if released >= key or b.size < self.mss:
                break
            if not b.split():
                released += b.size
                self._release_block(b)
        return released >= key

    def _release_cached(self) -> None:
        for small in (False, True):
            for b in sorted(self.free[small], key=lambda x: (x.size, x.addr)):
                if not b.split():
                    self._release_block(b)

    def _garbage_collect(self) -> None:
        """garbage_collect_cached_blocks: while short of the target, release every unsplit large free block at
        least as old (in get_free_block calls) as the mean age of those left."""
        threshold = int(self.s.gc_threshold * self._allowed())
        if self.reserved <= threshold:
            return
        now, target, reclaimed = self.calls[False], self.reserved - threshold, 0
        left = [b for b in sorted(self.free[False], key=lambda x: (x.size, x.addr)) if not b.split()]
        while left and reclaimed < target:
            mean = sum(now - b.gc_base for b in left) / len(left)
            old = [b for b in left if now - b.gc_base >= mean]
            if not old:
                break
            for b in old:
                reclaimed += b.size
                self._release_block(b)
            left = [b for b in left if b not in old]

    def empty_cache(self) -> None:
        self.why = "empty_cache"
        self._release_cached()

    # -- free ----------------------------------------------------------------------------------------
    def free_(self, b: _Block) -> None:
        b.allocated = False
        self._record("free_requested", b.addr, b.requested)
        self._record("free_completed", b.addr, b.requested)
        # free_block: the free neighbours on either side join it (the span lo..hi becomes one block, b)
        lo = b.prev if b.prev is not None and not b.prev.allocated else b
        hi = b.next if b.next is not None and not b.next.allocated else b
        span = list(dict.fromkeys((lo, b, hi)))
        for x in span:
            if x is not b:
                self.free[b.small].remove(x)
        size = sum(x.size for x in span)
        if lo in self.heads:  # the segment's first block is now b
            self.heads[self.heads.index(lo)] = b
        b.addr, b.size, b.prev, b.next = lo.addr, size, lo.prev, hi.next
        for nb, attr in ((b.prev, "next"), (b.next, "prev")):
            if nb is not None:
                setattr(nb, attr, b)
        self._insert(b)

    # -- the snapshot ----------------------------------------------------------------------------------
    def snapshot(self) -> dict:
        """``_snapshot()``: the segments (each head's chain of blocks) and the recorded trace."""
        segments = []
        for head in sorted(self.heads, key=lambda b: b.addr):
            blocks, b = [], head
            while b is not None:
                blocks.append({"address": b.addr, "size": b.size, "requested_size": b.requested if b.allocated else 0,
                               "state": "active_allocated" if b.allocated else "inactive", "frames": []})
                b = b.next
            total = sum(x["size"] for x in blocks)
            used = sum(x["size"] for x in blocks if x["state"] == "active_allocated")
            segments.append({"device": 0, "address": head.addr, "total_size": total, "allocated_size": used,
                             "active_size": used, "requested_size": sum(x["requested_size"] for x in blocks),
                             "stream": 0, "segment_type": "small" if head.small else "large",
                             "segment_pool_id": (0, 0), "is_expandable": False, "frames": [], "blocks": blocks})
        return {"segments": segments, "device_traces": [list(self.trace)],
                "allocator_settings": self.s.allocator_settings(), "external_annotations": []}


@dataclass
class Program:
    """A seeded training loop: weights allocated before recording, ``iterations`` steps of activations
    (forward allocations freed in reverse), ``empty_cache()`` after a step with probability
    ``empty_cache_p`` and once as recording starts when ``empty_cache_at_start``, on a device of
    ``headroom`` x the loop's need (so full devices retry) unless ``device_memory`` says. The step count
    before recording is ``warmup``; ``settings.device_memory`` is replaced by the device's. ``truncate``
    drops that many of the oldest entries (a ring buffer that wrapped). ``jitter``: the spread of each
    step's sizes (0: every step asks the same sizes, so equal free blocks tie and the driver's addresses
    decide); ``frames``: record the stacks (see the module docstring); ``ties``: the chance a step also runs
    the issue's tie (a 2s segment split in two, a third s block in a new segment, two of them freed, an s
    malloc choosing between the equal free blocks by address, then a 2s malloc that fits only where the
    halves merged)."""

    seed: int = 0
    iterations: int = 12
    warmup: int = 2
    layers: int = 10
    empty_cache_p: float = 0.3
    empty_cache_at_start: bool = True
    truncate: int = 0
    headroom: float = 1.6
    device_memory: int | None = None
    settings: Settings = field(default_factory=Settings)
    frames: bool = False
    jitter: float = 0.25
    ties: float = 0.0


def run_program(p: Program) -> tuple[dict, ProgramTruth]:
    """Run ``p`` on a :class:`CachingAllocator` and return (the snapshot dict, its truth). A malloc that fails
    after every retry is recorded as an ``oom`` and skipped (the program carries on)."""
    rng = np.random.default_rng(p.seed)
    # per layer: activation sizes in every pool (small, 1-10 MiB, large), jittered per step like a
    # changing batch or sequence length
    base = [int(rng.choice([rng.integers(1, 2048) * 256, rng.integers(2, 20) * MiB // 2, rng.integers(6, 120) * MiB]))
            for _ in range(p.layers)]
    weights = [int(rng.integers(1, 40)) * MiB for _ in range(p.layers // 2)]
    need = sum(weights) + 3 * sum(base)
    settings = Settings(**{**p.settings.__dict__,
                           "device_memory": p.device_memory or int(need * p.headroom) // _SMALL_BUFFER * _SMALL_BUFFER})
    a = CachingAllocator(settings)
    a.frames = p.frames
    held = [a.malloc(w) for w in weights]  # the model: live from before recording to the end

    def tie_step() -> None:
        s = int(rng.integers(6, 100)) * _SMALL_BUFFER  # large-pool sizes, whole 2 MiB steps: segments of exactly s
        held_here: dict[str, _Block] = {}

        def take(name: str, size: int) -> None:
            try:
                held_here[name] = a.malloc(size)
            except OutOfMemory:
                pass

        def give(name: str) -> None:
            if name in held_here:
                a.free_(held_here.pop(name))

        take("a", 2 * s)
        give("a")
        for name in "bcd":
            take(name, s)
        give("b")
        give("d")
        take("e", s)
        give("c")
        take("f", 2 * s)
        for name in list(held_here):
            give(name)

    def step(k: int) -> None:
        if rng.random() < p.ties:
            tie_step()
        scale = 1.0 + p.jitter * rng.standard_normal()
        live = []
        for size in base:
            try:
                live.append(a.malloc(max(1, int(size * max(scale, 0.3)))))
            except OutOfMemory:
                pass
            if live and rng.random() < 0.3:  # a temporary freed at once
                a.free_(live.pop(int(rng.integers(0, len(live)))))
        for b in reversed(live):
            a.free_(b)
        if k >= 0 and rng.random() < p.empty_cache_p:
            a.empty_cache()

    for _ in range(p.warmup):
        step(-1)
    extra = [a.malloc(int(rng.integers(1, 3)) * 4 * MiB) for _ in range(2)]  # live at the start, freed later
    a.truth.segments_before = [(h.addr, sum(_chain_sizes(h))) for h in a.heads]
    a.recording = True
    if p.empty_cache_at_start:
        a.empty_cache()
    for k in range(p.iterations):
        step(k)
        if k == p.iterations // 2:
            for b in extra:
                a.free_(b)
    del held
    snap = a.snapshot()
    if p.truncate:
        cut = min(p.truncate, len(a.trace))
        snap["device_traces"][0] = snap["device_traces"][0][cut:]
        a.truth.segments_before = sorted(a.before[cut]) if cut < len(a.before) else sorted(
            (h.addr, sum(_chain_sizes(h))) for h in a.heads)
        kept = snap["device_traces"][0]
        a.truth.device_allocs = sum(e["action"] == "segment_alloc" for e in kept)
        a.truth.releases = [k for k, at in zip(a.truth.releases, a.run_starts, strict=True) if at >= cut]
    return snap, a.truth


def _chain_sizes(head: _Block) -> list[int]:
    out, b = [], head
    while b is not None:
        out.append(b.size)
        b = b.next
    return out
