"""Seeded alloc/free logs with addresses that pair up, and their ground truth, for fragmentation.

``slot_log``: ``slots`` address slots ``slot_bytes`` apart; each slot alternates alloc and free over
time (an alloc of a random size that fits, then its free), so every free releases a live block and
the live set at any moment is known exactly. Sizes follow the same widening size-class mix as the
realistic entropy log.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from veotrace.synth.alloc import NS, class_size

BASE_ADDRESS = 0x7F0000000000


@dataclass
class SlotLog:
    """The log (columns timestamp, op_type, size_bytes, address, stream, device) and its truth."""

    table: pa.Table
    live_bytes_end: int
    live_blocks_end: int
    slot_bytes: int


def slot_log(*, events: int = 100_000, slots: int = 4096, slot_bytes: int = 4 << 20, hours: float = 237.0,
             seed: int = 0, align: int = 512) -> SlotLog:
    """A time-ordered log whose frees all match earlier allocs at the same address."""
    rng = np.random.default_rng(seed)
    span = int(hours * 3600 * NS)
    slot = rng.integers(0, slots, events)
    ts = np.sort(rng.integers(0, span, events))
    order = np.lexsort((np.arange(events), slot))  # by slot, then time
    rank = np.empty(events, np.int64)
    s_sorted = slot[order]
    start = np.r_[0, np.flatnonzero(s_sorted[1:] != s_sorted[:-1]) + 1]
    run_start = np.repeat(start, np.diff(np.r_[start, events]))
    rank[order] = np.arange(events) - run_start
    is_alloc = rank % 2 == 0
    frac = ts / span
    cls = np.clip(np.rint(rng.normal(5 + 4 * frac, 0.5 + 2.5 * frac)), 2, 12).astype(np.int64)
    size = np.minimum(class_size(rng, cls), slot_bytes)
    # a free carries the size of the alloc before it in its slot
    prev_in_slot = np.empty(events, np.int64)
    prev_in_slot[order[1:]] = order[:-1]
    prev_in_slot[order[0]] = order[0]
    size = np.where(is_alloc, size, size[prev_in_slot])
    offset = np.minimum(rng.integers(0, 8, events) * align, slot_bytes - size)
    offset = np.where(is_alloc, offset, offset[prev_in_slot])
    addr = (BASE_ADDRESS + slot.astype(np.int64) * slot_bytes + offset).astype(np.uint64)
    ops = np.where(is_alloc, "alloc", "free")
    tail = order[np.r_[start[1:] - 1, events - 1]]  # last event of each slot
    live = tail[is_alloc[tail]]
    table = pa.table({"timestamp": ts, "op_type": ops, "size_bytes": size, "address": addr,
                      "stream": rng.integers(0, 4, events), "device": np.zeros(events, np.int64)})
    return SlotLog(table, int(size[live].sum()), int(live.size), slot_bytes)


def write_slot_log(path: Path, *, events: int, seed: int = 0, chunk: int = 1_000_000, **kw) -> SlotLog:
    """Write ``slot_log`` as CSV (hex addresses, as loggers write them); returns the log."""
    import pyarrow.csv as pacsv

    log = slot_log(events=events, seed=seed, **kw)
    t = log.table
    hexaddr = pa.array(np.char.add("0x", np.char.mod("%x", t.column("address").to_numpy())))
    out = t.set_column(t.schema.get_field_index("address"), "address", hexaddr)
    with pacsv.CSVWriter(str(path), out.schema) as w:
        for b in out.to_batches(max_chunksize=chunk):
            w.write_batch(b)
    return log
