"""The replay's input route for PyTorch profiler traces: the seed (the state before profiling) and the
recorded device allocations, both from the ``[memory]`` events' totals.

A profiler trace records no segments, only ``Total Reserved`` after each event. So:

- each rise of ``Total Reserved`` at an event is a device allocation (``segment_alloc`` of the rise) made for
  that event, and each fall a release (``segment_free``) before it; two in one event show as their net;
- the state before profiling is seeded from the first event's totals: ``live = Total Allocated - Bytes`` and
  ``reserved = Total Reserved`` (less the first event's own rise, which is a recorded allocation). The
  segment layout is unknown, so it is **assumed**: every block the trace frees without having allocated it
  (live before profiling, address known) sits in a segment of its own (a small block in a 2 MiB small
  segment), and the rest of the reserved bytes is one large segment holding the live bytes never freed (one
  block at its start) and, after it, free cached memory.

Both are checked by the validation as a snapshot's are: each recorded rise is reproduced when the model makes
a device allocation of that size for the same event.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from veotrace.allocators.seed import Seed
from veotrace.allocators.torch import kLargeBuffer, kSmallBuffer, kSmallSize

#: Where the assumed segment of the unknown part of the state before profiling is placed: far above any
#: address a device hands out, so it overlaps none.
ASSUMED_BASE = 1 << 56  # past the 47-bit user space; a signed 64-bit value (the compiled core)
ASSUMPTION = ("a profiler trace records no segments: the state before profiling is seeded from the first event's "
              "totals (live = Total Allocated - Bytes, reserved = Total Reserved), with each block the trace frees "
              "but never allocated in a segment of its own, the unfreed live bytes in one segment of their pool, and "
              "the rest of the reserved bytes free (2 MiB small segments under 20 MiB, else one large one); each rise of Total Reserved is a "
              "recorded device allocation of the rise, each fall a release")


def segment_rows(events: pa.Table, reserved: np.ndarray, lanes: np.ndarray) -> tuple[pa.Table, dict]:
    """``events`` (ALLOC_EVENTS of the GPU events, in order) with a ``segment_alloc`` row of each rise of
    ``reserved`` (Total Reserved per row) before the event it came with, and a ``segment_free`` of each fall;
    returns the table and, per device, the reserved bytes before its first event (its first total less its rise,
    taken as none: the first event is assumed to fit the state before profiling)."""
    n = events.num_rows
    before: dict[int, int] = {}
    prev = np.zeros(n, np.int64)
    first = np.zeros(n, bool)
    for d in np.unique(lanes):
        idx = np.flatnonzero(lanes == d)
        prev[idx[1:]] = reserved[idx[:-1]]
        prev[idx[0]] = reserved[idx[0]]
        first[idx[0]] = True
        before[int(d)] = int(reserved[idx[0]])
    delta = reserved - prev
    where = np.flatnonzero(delta != 0)
    if not where.size:
        return events, before
    ops = pa.array(np.where(delta[where] > 0, "segment_alloc", "segment_free").tolist(), pa.string())
    extra = {
        "ts_ns": events.column("ts_ns").take(pa.array(where)),
        "seq": events.column("seq").take(pa.array(where)),
        "op": ops.dictionary_encode(),
        "size_bytes": pa.array(np.abs(delta[where])),
        "address": pa.nulls(where.size, pa.uint64()),
        "stream": pa.nulls(where.size, pa.int64()),
        "device": events.column("device").take(pa.array(where)),
        "mem_kind": events.column("mem_kind").take(pa.array(where)),
        "source_file": events.column("source_file").take(pa.array(where)),
    }
    seg = pa.Table.from_pydict({f.name: extra[f.name] for f in events.schema}).cast(events.schema)
    both = pa.concat_tables([events, seg], promote_options="permissive").unify_dictionaries()
    key = np.concatenate([np.arange(n, dtype=np.float64), where - 0.5])
    return both.take(pa.array(np.argsort(key, kind="stable"))).combine_chunks(), before


def seed_from_totals(events: pa.Table, live_before: dict[int, int], reserved_before: dict[int, int]) -> Seed:
    """The assumed state before profiling (see the module docstring) per device of ``events``."""
    from veotrace.allocators.conf import TorchConf
    from veotrace.allocators.torch import round_size

    conf = TorchConf()
    ops = events.column("op").cast(pa.string()).to_pylist()
    addrs = events.column("address").to_pylist()
    sizes = events.column("size_bytes").to_numpy()
    devs = events.column("device").to_pylist()
    seen: set = set()
    known: dict = {}
    for op, a, s, d in zip(ops, addrs, sizes, devs):
        if a is None:
            continue
        if op == "alloc":
            seen.add((d, a))
        elif op == "free" and (d, a) not in seen and (d, a) not in known:
            known[(d, a)] = int(s)
    seed = Seed(origin="profiler")
    used: dict[int, int] = {}
    freed: dict[int, int] = {}
    by_dev: dict[int, list] = {}
    for (d, a), s in sorted(known.items()):
        by_dev.setdefault(d, []).append((a, s))
    for d, blocks in by_dev.items():
        for k, (a, s) in enumerate(blocks):
            nxt = blocks[k + 1][0] if k + 1 < len(blocks) else None
            small = s <= kSmallSize
            size = kSmallBuffer if small else round_size(s, conf)
            if nxt is not None and a + size > nxt:
                size = max(nxt - a, round_size(s, conf))
                small = small and size == kSmallBuffer
            seed.segments.append((d, a, size, 0, small))
            seed.live.append((d, a, s, 0, None))
            used[d] = used.get(d, 0) + size
            freed[d] = freed.get(d, 0) + s
    for d in sorted(set(live_before) | set(reserved_before)):
        rest = reserved_before.get(d, 0) - used.get(d, 0)
        held = live_before.get(d, 0) - freed.get(d, 0)
        base = ASSUMED_BASE + d * (1 << 40)
        if rest <= 0:
            continue
        if held > 0:  # the unfreed live bytes: one block in a segment of its pool
            small = held <= kSmallSize and rest >= kSmallBuffer
            size = kSmallBuffer if small else min(rest, -(-held // kSmallBuffer) * kSmallBuffer)
            if size >= held:
                seed.segments.append((d, base, size, 0, small))
                seed.live.append((d, base, held, 0, held))
                base, rest = base + size, rest - size
        if rest <= 0:
            continue
        if rest < kLargeBuffer and rest % kSmallBuffer == 0:  # under one large segment: the small pool's 2 MiB ones
            for k in range(rest // kSmallBuffer):
                seed.segments.append((d, base + k * kSmallBuffer, kSmallBuffer, 0, True))
        else:
            seed.segments.append((d, base, rest, 0, False))
    seed.segments.sort()
    seed.live.sort()
    return seed
