"""Seeding for traces that start part-way: the segments and live blocks that existed when recording began.

A PyTorch trace is a ring buffer (or was cleared), so it can begin with frees of blocks it never saw
allocated, inside segments reserved before it. Rebuilt from the final snapshot and the trace:
- a segment existed at the start if its first segment event in the trace is not a ``segment_alloc``
  (it is freed first, or never appears and is in the final snapshot);
- a block was live at the start if the trace frees its address before allocating it, or the final
  snapshot has it allocated and the trace never allocated that address.
A block's size is exact when the final snapshot still holds it; otherwise it is ``round_size`` of the
requested size, grown to the next boundary when PyTorch would not have split off the rest
(``should_split``). Space between live blocks is one free block (free neighbours always merge).

Not :mod:`veotrace.frag.initial_state`, which rebuilds the exact state before the trace for
the fragmentation replay by undoing every trace entry from the final snapshot backwards: this module
seeds the ``simulate`` policies (every policy gets the live blocks as ``REQ_SEED`` requests; the torch
model also gets the segments, laid out by its own split rules in :func:`seed_chains`), so its rules
are the allocator's, not the trace's.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field

import pyarrow as pa

from veotrace.allocators.base import EV_ALLOC, EV_SEGMENT_ALLOC
from veotrace.allocators.conf import TorchConf
from veotrace.allocators.torch import Block, TorchAllocator, kMinBlockSize, kSmallBuffer, kSmallSize, round_size
from veotrace.errors import TraceFormatError
from veotrace.replay_limits import check_model_addresses
from veotrace.schemas.events import RELEASE_OPS


@dataclass
class Seed:
    """live: (device, address, requested size, stream, block size or None); segments: (device, address,
    size, stream, is_small)."""

    live: list[tuple[int, int, int, int, int | None]] = field(default_factory=list)
    segments: list[tuple[int, int, int, int, bool]] = field(default_factory=list)
    expandable: bool = False
    #: ``{seq: verdict}`` of the releases whose frames (read with the snapshot) say who made them
    #: (``releases.release_frames``): the builders classify those runs by them.
    release_frames: dict = field(default_factory=dict)
    #: What the state was rebuilt from: "snapshot" (a snapshot's segments and blocks, :func:`rebuild`) or
    #: "profiler" (a profiler trace's first totals, ``kineto_seed``: its layout assumed).
    origin: str = "snapshot"
    _by_device: dict | None = field(default=None, repr=False, compare=False)

    def of_device(self, device: int) -> tuple[list, list]:
        """(segments, live blocks) of ``device``, each in address order; indexed once on the first call
        (after :func:`rebuild`), so seeding every device costs the seed's size, not devices x size."""
        if self._by_device is None:
            index: dict[int, tuple[list, list]] = {}
            for s in self.segments:
                index.setdefault(s[0], ([], []))[0].append(s)
            for s in self.live:
                index.setdefault(s[0], ([], []))[1].append(s)
            for segs, live in index.values():
                segs.sort(key=lambda s: s[1])
                live.sort(key=lambda s: s[1])
            self._by_device = index
        return self._by_device.get(device, ([], []))

    @property
    def used(self) -> bool:
        return bool(self.live or self.segments)

    def request_seeds(self) -> list[tuple[int, int, int, int]]:
        """The live blocks as ``build_requests``' seeds: (device, address, requested size, stream)."""
        return [(d, a, s, st) for d, a, s, st, _ in self.live]

    def describe(self) -> str:
        if not self.used:
            return "not seeded: the trace covers the run from its first allocation"
        held = (f"{len(self.segments)} segments ({sum(s[2] for s in self.segments):,} bytes) reserved and "
                f"{len(self.live)} blocks live")
        if self.origin == "profiler":
            return f"seeded from the first events' totals (assumed layout): {held} before profiling began"
        return f"seeded from the final snapshot and the trace: {held} before recording began"


def rebuild(events: pa.Table, segments: pa.Table, blocks: pa.Table) -> Seed:
    """The state at the start of the trace (see the module docstring).

    Raises:
        AnalysisError: an address at or above 2**63, which the model (both cores) holds as a signed 64-bit number.
    """
    check_model_addresses(events, segments, blocks)
    ops = events.column("op").to_pylist()
    free_op = "free_completed" if "free_completed" in ops else "free_requested"
    addrs, sizes = events.column("address").to_pylist(), events.column("size_bytes").to_pylist()
    devs, streams = events.column("device").to_pylist(), events.column("stream").to_pylist()
    seen_alloc: set[tuple[int, int]] = set()
    first_seg: dict[tuple[int, int], tuple[str, int, int]] = {}
    live_at_start: dict[tuple[int, int], tuple[int, int]] = {}
    for op, a, s, d, st in zip(ops, addrs, sizes, devs, streams):
        key = (d, a)
        if op == "alloc":
            seen_alloc.add(key)
        elif op == free_op and key not in seen_alloc and key not in live_at_start:
            live_at_start[key] = (s, st or 0)
        elif op.startswith("segment_") and key not in first_seg:
            first_seg[key] = (op, s, st or 0)
    seed = Seed(expandable=any(bool(v) for v in segments.column("is_expandable").to_pylist()))
    final_blocks = {}
    for row in blocks.to_pylist():
        final_blocks[(row["device"] or 0, row["address"])] = row
    for row in blocks.to_pylist():
        key = (row["device"] or 0, row["address"])
        if row["state"] == "active_allocated" and key not in seen_alloc and key not in live_at_start:
            live_at_start[key] = (row["requested_size_bytes"] or row["size_bytes"], None)
    seg_rows = segments.to_pylist()
    seg_stream = {}
    for row in seg_rows:
        key = (row["device"] or 0, row["address"])
        seg_stream[key] = row["stream"] or 0
        if key not in first_seg and not seed.expandable:
            seed.segments.append((key[0], key[1], row["total_size_bytes"], row["stream"] or 0,
                                  row["segment_type"] == "small"))
    for key, (op, size, st) in first_seg.items():
        if op in RELEASE_OPS and not seed.expandable:
            seed.segments.append((key[0], key[1], size, st, size == kSmallBuffer))
    seed.segments.sort()
    seg_at = {}  # device -> (segment starts, segments), for the stream of a live block's segment
    for seg in seed.segments:
        starts, segs = seg_at.setdefault(seg[0], ([], []))
        starts.append(seg[1])
        segs.append(seg)
    for (d, a), (req, st) in live_at_start.items():
        exact = final_blocks.get((d, a))
        block_size = exact["size_bytes"] if exact is not None and exact["state"] == "active_allocated" \
            and (d, a) not in seen_alloc else None
        if st is None:  # the stream of the segment holding it (segments overlap nowhere: checked below)
            starts, segs = seg_at.get(d, ((), ()))
            i = bisect_right(starts, a) - 1
            st = segs[i][3] if i >= 0 and a < segs[i][1] + segs[i][2] else 0
        seed.live.append((d, a, req, st, block_size))
    seed.live.sort()
    for a, b in zip(seed.segments, seed.segments[1:]):  # the models' free lists need disjoint segments
        if a[0] == b[0] and b[1] < a[1] + a[2]:
            raise TraceFormatError(f"the snapshot's segments overlap on device {a[0]}: {a[2]:,} bytes at {a[1]:#x} "
                                   f"and {b[2]:,} bytes at {b[1]:#x}, so the state before the trace cannot be rebuilt",
                                   hint="A snapshot from torch.cuda.memory._snapshot() lists each segment once")
    return seed


def seed_chains(seed: Seed, device: int, conf: TorchConf) -> list[tuple[int, int, int, bool, list[tuple[int, int, int, bool]]]]:
    """The seeded segments of ``device``: (base, size, stream, is_small, blocks), the blocks as (address,
    size, requested size, allocated) in address order. Live blocks keep their exact size when known, else
    ``round_size`` grown to the next boundary where PyTorch would not split; gaps are free blocks."""
    out = []
    segments, live = seed.of_device(device)
    addrs = [s[1] for s in live]
    for _, base, size, stream, is_small in segments:
        inside = live[bisect_left(addrs, base):bisect_left(addrs, base + size)]
        chain, pos = [], base
        for k, (_, addr, req, _, exact) in enumerate(inside):
            if addr > pos:
                chain.append((pos, addr - pos, 0, False))
            bound = inside[k + 1][1] if k + 1 < len(inside) else base + size
            rs = round_size(req, conf)
            if exact is not None:
                bsize = exact
            else:
                gap = bound - addr - rs
                split = gap >= kMinBlockSize if is_small else (rs < conf.max_split_size and gap > kSmallSize)
                bsize = rs if split and gap > 0 else bound - addr
            chain.append((addr, min(bsize, bound - addr), req, True))
            pos = addr + chain[-1][1]
        if pos < base + size:
            chain.append((pos, base + size - pos, 0, False))
        out.append((base, size, stream, is_small, chain))
    return out


def seed_state(alloc: TorchAllocator, seed: Seed, device: int, conf: TorchConf) -> int:
    """Build the seeded segments of ``device`` (:func:`seed_chains`) in a fresh allocator; returns the bytes
    reserved. Live blocks become allocated Blocks found again by ``alloc.seeded(address)``; gaps become free
    blocks. The starting state is also emitted (request ``-1 - device``) so the model's event stream is whole.
    The compiled core does the same in ``_torchcore.c`` (``Core.seed``) from the same chains.
    """
    rec, saved = alloc.rec, alloc.rec.req
    rec.req = -1 - device
    top = 0
    for base, size, stream, is_small, blocks in seed_chains(seed, device, conf):
        pool = alloc.small_blocks if is_small else alloc.large_blocks
        chain = []
        for addr, bsize, req, allocated in blocks:
            b = Block(bsize, addr, stream, pool)
            if allocated:
                b.allocated, b.requested = True, req
                alloc.seeded_blocks[addr] = b
                alloc.c.allocated += b.size
            chain.append(b)
        for x, y in zip(chain, chain[1:]):
            x.next, y.prev = y, x
        rec.emit(EV_SEGMENT_ALLOC, base, size, stream, size)
        for b in chain:
            if b.allocated:
                rec.emit(EV_ALLOC, b.addr, b.requested, stream, b.size)
        for b in chain:
            if not b.allocated:
                pool.insert_into_blocks(b)
        alloc.c.reserved += size
        alloc.driver.reserve(base, size)  # a recorded address
        top = max(top, base + size)
    rec.req = saved
    c = alloc.c
    c.peak_reserved, c.peak_allocated = max(c.peak_reserved, c.reserved), max(c.peak_allocated, c.allocated)
    return c.reserved
