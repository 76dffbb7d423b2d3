"""Synthetic data: a PyTorch snapshot of many segments and, at will, very many distinct sites, with ground truth;
for the bound of ``veotrace view``'s page (benchmarks/bench_view.py, tests/test_view.py).

One device. Each allocation is placed at the cursor of the segment being filled; when it does not fit, a new
segment is reserved (``segment_alloc``, a size drawn from ``segment_bytes``, never released), so the
segments grow in number with the trace. About 45% of the entries free a live block
(``free_requested``, ``free_completed``). Allocation ``i`` carries stack ``i % stacks`` when ``distinct``
(every site met once before any repeats: ``stacks`` distinct sites once there are as many allocations),
else a seeded one; each entry holds its own frame dicts, as PyTorch writes them. ``name_pad`` lengthens
every user file name by that many characters. The final segments and blocks agree with the trace.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from veotrace.synth.torch import BASE_ADDRESS, T0_US

#: Sizes of a new segment (the caching allocator's 2 MiB small and 20 MiB large segments, and larger).
SEGMENT_BYTES = (2 << 20, 20 << 20, 20 << 20, 64 << 20)


@dataclass
class SegmentedTruth:
    segments: int  # reserved at the end (none is released)
    reserved_bytes: int
    live_blocks: int  # at the end
    live_bytes: int
    sites: int  # distinct stacks the allocations carry
    allocs: int


def _shapes(depth: int, stacks: int, name_pad: int) -> list[list[dict]]:
    internal = [{"name": "_call_impl", "filename": "/env/lib/python3.11/site-packages/torch/nn/modules/module.py",
                 "line": 1750}] * (depth // 2)
    pad = "p" * name_pad
    return [internal + [{"name": f"f{k}_{j}", "filename": f"/work/model/{pad}layer{k % 17}.py", "line": 10 + j}
                        for j in range(depth - len(internal))] for k in range(stacks)]


def segmented_snapshot(*, events: int = 100_000, depth: int = 20, stacks: int = 200, seed: int = 0,
                       distinct: bool = False, name_pad: int = 0,
                       segment_bytes: tuple[int, ...] = SEGMENT_BYTES) -> tuple[dict, SegmentedTruth]:
    """The snapshot (``events`` trace entries) and its truth."""
    rng = np.random.default_rng(seed)
    shapes = _shapes(depth, stacks, name_pad)
    trace: list[dict] = []
    segs: list[tuple[int, int]] = []
    live: dict[int, int] = {}
    base, cursor, end, t, allocs = BASE_ADDRESS, 0, 0, T0_US, 0
    used: set[int] = set()
    while len(trace) < events:
        t += int(rng.integers(1, 50))
        if live and rng.random() < 0.45:
            addr = list(live)[int(rng.integers(0, len(live)))] if rng.random() < 0.5 else next(iter(live))
            size = live.pop(addr)
            for action in ("free_requested", "free_completed"):
                trace.append({"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t, "frames": []})
            continue
        size = int(rng.integers(1, 2048)) * 512
        if cursor + size > end:  # a new segment
            seg_size = max(int(segment_bytes[int(rng.integers(0, len(segment_bytes)))]), -(-size // (2 << 20)) * (2 << 20))
            trace.append({"action": "segment_alloc", "addr": base, "size": seg_size, "stream": 0, "time_us": t})
            segs.append((base, seg_size))
            cursor, end = base, base + seg_size
            base += seg_size + (2 << 20)
        k = allocs % stacks if distinct else int(rng.integers(0, stacks))
        used.add(k)
        trace.append({"action": "alloc", "addr": cursor, "size": size, "stream": 0, "time_us": t,
                      "frames": [dict(f) for f in shapes[k]]})
        live[cursor] = size
        cursor += size
        allocs += 1
    segments = []
    starts = [a for a, _ in segs]
    by_seg: dict[int, list[int]] = {}
    for addr in sorted(live):
        by_seg.setdefault(int(np.searchsorted(starts, addr, "right")) - 1, []).append(addr)
    for i, (a0, n) in enumerate(segs):
        blocks, at = [], a0
        for addr in by_seg.get(i, []):
            if addr > at:
                blocks.append({"address": at, "size": addr - at, "requested_size": 0, "state": "inactive"})
            blocks.append({"address": addr, "size": live[addr], "requested_size": live[addr], "state": "active_allocated"})
            at = addr + live[addr]
        if at < a0 + n:
            blocks.append({"address": at, "size": a0 + n - at, "requested_size": 0, "state": "inactive"})
        held = sum(live[a] for a in by_seg.get(i, []))
        segments.append({"device": 0, "address": a0, "total_size": n, "stream": 0, "segment_type": "large",
                         "allocated_size": held, "active_size": held, "requested_size": held, "blocks": blocks})
    truth = SegmentedTruth(len(segs), sum(n for _, n in segs), len(live), sum(live.values()), len(used), allocs)
    return {"segments": segments, "device_traces": [trace]}, truth
