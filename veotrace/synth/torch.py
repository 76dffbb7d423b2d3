"""Synthetic data: seeded PyTorch memory snapshots (plain dicts, as _dump_snapshot pickles them) with ground truth.

Covers what no public file shows (FORMATS.md C.3-C.4): active_pending_free blocks, expandable
segments with segment_map/unmap, oom entries (``device_free`` instead of ``addr``), segment_free,
an unknown action, several devices and truncated ring buffers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: Epoch microseconds of the first synthetic event (2025-02-05, like real time_us values).
T0_US = 1_738_780_408_787_504
SEGMENT_BYTES = 20 << 20
BASE_ADDRESS = 0x7F00_0000_0000


@dataclass
class SnapshotTruth:
    """What a reader must recover: every kept trace entry in file order, and the block states."""

    events: list[dict] = field(default_factory=list)  # {ts_ns, op, size_bytes, address, device}
    block_states: dict[str, int] = field(default_factory=dict)
    segments: int = 0
    dropped_entries: int = 0


def synthetic_snapshot(
    *,
    seed: int = 0,
    n_allocs: int = 50,
    devices: int = 1,
    with_time: bool = True,
    expandable: bool = False,
    truncate: int = 0,
    legacy_blocks: bool = False,
    as_segment_list: bool = False,
    compile_context: bool = True,
) -> tuple[object, SnapshotTruth]:
    """A snapshot object and its ground truth.

    Args:
        n_allocs: allocations per device (each followed, mostly, by free_requested/free_completed).
        truncate: drop this many oldest entries of each device trace (a wrapped ring buffer).
        legacy_blocks: blocks without ``address`` but with ``history`` (torch ~2.0).
        as_segment_list: return only the segment list (``torch.cuda.memory_snapshot()``).
    """
    rng = np.random.default_rng(seed)
    truth = SnapshotTruth()
    segments: list[dict] = []
    traces: list[list[dict]] = []
    t_us = T0_US
    for dev in range(devices):
        seg_addr = BASE_ADDRESS + dev * (1 << 36)
        trace: list[dict] = []

        def entry(action: str, addr: int, size: int, trace: list[dict] = trace, **extra: object) -> None:
            nonlocal t_us
            t_us += int(rng.integers(1, 4000))
            e: dict = {"action": action, "addr": addr, "size": size, "stream": 0, **extra}
            if with_time:
                e["time_us"] = t_us
            if compile_context:
                e["compile_context"] = "N/A"
            e["frames"] = [{"name": "forward", "filename": "model.py", "line": 54}]
            trace.append(e)

        entry("segment_map" if expandable else "segment_alloc", seg_addr, SEGMENT_BYTES)
        cursor, live, pending = seg_addr, [], []
        for _ in range(n_allocs):
            size = int(rng.integers(1, 64)) * 512
            if cursor + size > seg_addr + SEGMENT_BYTES:
                break
            entry("alloc", cursor, size)
            live.append((cursor, size))
            cursor += size
            if len(live) > 3 and rng.random() < 0.6:
                addr, sz = live.pop(int(rng.integers(0, len(live))))
                entry("free_requested", addr, sz)
                if rng.random() < 0.85:
                    entry("free_completed", addr, sz)
                else:
                    pending.append((addr, sz))
        entry("user_defined", 0, 0)  # an action this reader has never heard of: kept verbatim
        entry("oom", 0, 1 << 34, device_free=123 << 20)
        del trace[-1]["addr"]  # oom entries carry device_free instead of addr
        entry("snapshot", 0, 0)
        extra_seg = seg_addr + SEGMENT_BYTES
        entry("segment_alloc", extra_seg, 2 << 20)
        entry("segment_unmap" if expandable else "segment_free", extra_seg, 2 << 20)
        kept = trace[truncate:]
        truth.dropped_entries += len(trace) - len(kept)
        for e in kept:
            truth.events.append({
                "ts_ns": e["time_us"] * 1000 if with_time else None,
                "op": e["action"],
                "size_bytes": e["size"],
                "address": None if e["action"] == "oom" else e["addr"],
                "device": dev,
            })
        traces.append(kept)
        segments.append(_segment(dev, seg_addr, live, pending, expandable, legacy_blocks, truth))
    truth.segments = len(segments)
    if as_segment_list:
        return segments, truth
    return {"segments": segments, "device_traces": traces}, truth


def _segment(dev: int, seg_addr: int, live: list, pending: list, expandable: bool, legacy: bool,
             truth: SnapshotTruth) -> dict:
    """The segment at snapshot time: live and pending blocks in address order, gaps as inactive."""
    used = sorted([(a, s, "active_allocated") for a, s in live] + [(a, s, "active_pending_free") for a, s in pending])
    blocks, cursor = [], seg_addr
    for addr, size, state in used + [(seg_addr + SEGMENT_BYTES, 0, None)]:
        if addr > cursor:
            blocks.append({"address": cursor, "size": addr - cursor, "requested_size": addr - cursor, "state": "inactive"})
        if state is not None:
            blocks.append({"address": addr, "size": size, "requested_size": size - 100, "state": state})
        cursor = addr + size
    for b in blocks:
        truth.block_states[b["state"]] = truth.block_states.get(b["state"], 0) + 1
        b["frames"] = []
        if legacy:
            b["history"] = [{"addr": b.pop("address"), "real_size": b["size"], "frames": []}]
    active = sum(b["size"] for b in blocks if b["state"] != "inactive")
    seg = {"device": dev, "address": seg_addr, "total_size": SEGMENT_BYTES, "allocated_size": active,
           "active_size": active, "requested_size": active, "stream": 0, "segment_type": "large", "blocks": blocks}
    if not legacy:
        seg.update({"segment_pool_id": (0, 0), "is_expandable": expandable, "frames": []})
    return seg


def stack_shapes(depth: int, stacks: int) -> list[list[dict]]:
    """``stacks`` distinct stacks of ``depth`` frame dicts: torch's own frames first (the same in every stack),
    then user frames of one of 17 layer files."""
    internal = [{"name": "_call_impl", "filename": "/env/lib/python3.11/site-packages/torch/nn/modules/module.py",
                 "line": 1750}] * (depth // 2)
    return [internal + [{"name": f"f{k}_{j}", "filename": f"/work/model/layer{k % 17}.py", "line": 10 + j}
                        for j in range(depth - len(internal))] for k in range(stacks)]


def stacked_snapshot(*, events: int = 100_000, depth: int = 20, stacks: int = 200, seed: int = 0) -> dict:
    """A one-device snapshot of ``events`` trace entries whose allocations carry ``depth``-frame stacks
    (torch frames first, then user frames) drawn from ``stacks`` distinct ones, each entry with its
    own list of frame dicts as PyTorch writes them; its final segments and blocks agree with the trace.
    For the cost of attributing sites (benchmarks/bench_sites.py)."""
    rng = np.random.default_rng(seed)
    seg, seg_size = BASE_ADDRESS, 1 << 40
    shapes = stack_shapes(depth, stacks)
    trace = [{"action": "segment_alloc", "addr": seg, "size": seg_size, "stream": 0, "time_us": T0_US}]
    live: dict[int, int] = {}
    cursor, t = seg, T0_US
    while len(trace) < events:
        t += int(rng.integers(1, 50))
        if live and rng.random() < 0.45:
            addr = next(iter(live)) if rng.random() < 0.5 else list(live)[int(rng.integers(0, len(live)))]
            size = live.pop(addr)
            frames = [dict(f) for f in shapes[0]]
            for action in ("free_requested", "free_completed"):
                trace.append({"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t, "frames": frames})
            continue
        size = int(rng.integers(1, 4096)) * 512
        k = int(rng.integers(0, stacks))
        trace.append({"action": "alloc", "addr": cursor, "size": size, "stream": 0, "time_us": t,
                      "frames": [dict(f) for f in shapes[k]]})
        live[cursor] = size
        cursor += size
    blocks, at = [], seg
    for addr in sorted(live):
        if addr > at:
            blocks.append({"address": at, "size": addr - at, "requested_size": 0, "state": "inactive"})
        blocks.append({"address": addr, "size": live[addr], "requested_size": live[addr], "state": "active_allocated"})
        at = addr + live[addr]
    if at < seg + seg_size:
        blocks.append({"address": at, "size": seg + seg_size - at, "requested_size": 0, "state": "inactive"})
    segment = {"device": 0, "address": seg, "total_size": seg_size, "stream": 0, "segment_type": "large",
               "allocated_size": sum(live.values()), "blocks": blocks}
    return {"segments": [segment], "device_traces": [trace]}
