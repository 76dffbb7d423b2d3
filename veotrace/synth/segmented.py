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

import io
import pickle
from dataclasses import dataclass
from pathlib import Path

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


_ACTIONS = ("segment_alloc", "alloc", "free_requested", "free_completed")


def _generate(events: int, stacks: int, seed: int, distinct: bool, segment_bytes: tuple[int, ...]):
    """The trace as columns (action index in _ACTIONS, addr, size, time_us, stack; -1: none), the final segments
    and the truth's counts."""
    rng = np.random.default_rng(seed)
    act, addr_c, size_c, t_c, k_c = (np.zeros(events, np.int64) for _ in range(5))
    segs: list[tuple[int, int]] = []
    live: dict[int, tuple[int, int]] = {}  # addr -> (size, stack)
    order: list[int] = []  # the live addresses, in no particular order
    base, cursor, end, t, allocs, n = BASE_ADDRESS, 0, 0, T0_US, 0, 0
    used: set[int] = set()

    def put(a, addr, size, k):
        nonlocal n
        if n < events:
            act[n], addr_c[n], size_c[n], t_c[n], k_c[n] = a, addr, size, t, k
            n += 1

    while n < events:
        t += int(rng.integers(1, 50))
        if live and rng.random() < 0.45:
            j = int(rng.integers(0, len(order))) if rng.random() < 0.5 else 0
            addr = order[j]
            order[j] = order[-1]  # swap-remove: O(1) whatever the number of live blocks
            order.pop()
            size, k = live.pop(addr)
            put(2, addr, size, k)
            put(3, addr, size, k)
            continue
        size = int(rng.integers(1, 2048)) * 512
        if cursor + size > end:  # a new segment
            seg_size = max(int(segment_bytes[int(rng.integers(0, len(segment_bytes)))]), -(-size // (2 << 20)) * (2 << 20))
            put(0, base, seg_size, -1)
            segs.append((base, seg_size))
            cursor, end = base, base + seg_size
            base += seg_size + (2 << 20)
        k = allocs % stacks if distinct else int(rng.integers(0, stacks))
        used.add(k)
        put(1, cursor, size, k)
        live[cursor] = (size, k)
        order.append(cursor)
        cursor += size
        allocs += 1
    if n and act[n - 1] == 2:  # the trace ended between a free's two entries: the block is freed
        live.pop(int(addr_c[n - 1]), None)
    segments = []
    starts = [a for a, _ in segs]
    by_seg: dict[int, list[int]] = {}
    for addr in sorted(live):
        by_seg.setdefault(int(np.searchsorted(starts, addr, "right")) - 1, []).append(addr)
    for i, (a0, size) in enumerate(segs):
        blocks, at = [], a0
        for addr in by_seg.get(i, []):
            if addr > at:
                blocks.append({"address": at, "size": addr - at, "requested_size": 0, "state": "inactive"})
            blocks.append({"address": addr, "size": live[addr][0], "requested_size": live[addr][0],
                           "state": "active_allocated"})
            at = addr + live[addr][0]
        if at < a0 + size:
            blocks.append({"address": at, "size": a0 + size - at, "requested_size": 0, "state": "inactive"})
        held = sum(live[a][0] for a in by_seg.get(i, []))
        segments.append({"device": 0, "address": a0, "total_size": size, "stream": 0, "segment_type": "large",
                         "allocated_size": held, "active_size": held, "requested_size": held, "blocks": blocks})
    truth = SegmentedTruth(len(segs), sum(z for _, z in segs), len(live), sum(v[0] for v in live.values()), len(used),
                           allocs)
    if n and act[n - 1] == 2:  # complete the last free
        act, addr_c, size_c, t_c, k_c = (np.r_[c, c[n - 1]] for c in (act, addr_c, size_c, t_c, k_c))
        act[-1] = 3
    return (act, addr_c, size_c, t_c, k_c), segments, truth


def segmented_snapshot(*, events: int = 100_000, depth: int = 20, stacks: int = 200, seed: int = 0,
                       distinct: bool = False, name_pad: int = 0,
                       segment_bytes: tuple[int, ...] = SEGMENT_BYTES) -> tuple[dict, SegmentedTruth]:
    """The snapshot (about ``events`` trace entries) and its truth."""
    shapes = _shapes(depth, stacks, name_pad)
    (act, addr, size, t, k), segments, truth = _generate(events, stacks, seed, distinct, segment_bytes)
    trace = [{"action": _ACTIONS[a], "addr": ad, "size": z, "stream": 0, "time_us": tt,
              "frames": [dict(f) for f in shapes[kk]] if kk >= 0 else []}
             for a, ad, z, tt, kk in zip(act.tolist(), addr.tolist(), size.tolist(), t.tolist(), k.tolist())]
    return {"segments": segments, "device_traces": [trace]}, truth


class _Pickler(pickle._Pickler):
    """Python's own pickler (protocol 2) memoising strings only: each entry's frame dicts are its own, as in
    PyTorch's snapshot, and the memo holds no entry once written."""

    def memoize(self, obj) -> None:
        if isinstance(obj, str):
            super().memoize(obj)


def write_segmented(path, *, target_bytes: int | None = None, events: int | None = None, depth: int = 20, stacks: int = 200, seed: int = 0,
                    distinct: bool = False, name_pad: int = 0,
                    segment_bytes: tuple[int, ...] = SEGMENT_BYTES) -> SegmentedTruth:
    """Write the snapshot of about ``target_bytes`` (or ``events`` entries) to ``path`` as it is made (a 1 GiB file costs the memory of its
    trace's columns, not of its entries as dicts); returns its truth."""
    shapes = _shapes(depth, stacks, name_pad)
    scratch = io.BytesIO()
    pk = _Pickler(scratch, protocol=2)
    out = open(path, "wb")  # noqa: SIM115 (closed below)

    def emit(obj) -> bytes:
        at = scratch.tell()
        pk.save(obj)
        return scratch.getvalue()[at:]

    out.write(b"\x80\x02")
    keys = ["action", "addr", "size", "stream", "time_us", "frames", *_ACTIONS]
    for key in keys:  # memoised once (pushed and popped): every entry refers to them
        out.write(emit(key) + b"0")
    ref = {key: emit(key) for key in keys}
    again: dict[int, bytes] = {}

    def frames(kk: int) -> bytes:
        if kk < 0:
            return b"]"
        if kk in again:
            return again[kk]
        got = emit([dict(f) for f in shapes[kk]])  # its new strings memoised here, written with this entry
        again[kk] = emit([dict(f) for f in shapes[kk]])
        return got

    if events is None:  # the bytes an entry takes, measured on a small file of the same kind
        probe = Path(str(path) + ".probe")
        n = 20_000
        write_segmented(probe, events=n, depth=depth, stacks=stacks, seed=seed, distinct=distinct, name_pad=name_pad,
                        segment_bytes=segment_bytes)
        events = max(1, int(target_bytes / (probe.stat().st_size / n)))
        probe.unlink()
    (act, addr, size, t, k), segments, truth = _generate(events, stacks, seed, distinct, segment_bytes)
    out.write(b"}(" + emit("segments") + emit(segments) + emit("device_traces") + b"]]")
    stream = b"K\x00"
    for lo in range(0, act.size, 1000):
        parts = [b"("]
        for a, ad, z, tt, kk in zip(act[lo:lo + 1000].tolist(), addr[lo:lo + 1000].tolist(), size[lo:lo + 1000].tolist(),
                                    t[lo:lo + 1000].tolist(), k[lo:lo + 1000].tolist()):
            parts += [b"}(", ref["action"], ref[_ACTIONS[a]], ref["addr"], _int(ad), ref["size"], _int(z), ref["stream"],
                      stream, ref["time_us"], _int(tt), ref["frames"], frames(kk), b"u"]
        parts.append(b"e")
        out.write(b"".join(parts))
        scratch.seek(0)
        scratch.truncate()
    out.write(b"au.")
    out.close()
    return truth


def _int(n: int) -> bytes:
    """``n`` as pickle protocol 2 writes it."""
    if 0 <= n < 256:
        return b"K" + bytes([n])
    if 0 <= n < 65536:
        return b"M" + n.to_bytes(2, "little")
    if -(2**31) <= n < 2**31:
        return b"J" + n.to_bytes(4, "little", signed=True)
    raw = n.to_bytes((n.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(raw)]) + raw
