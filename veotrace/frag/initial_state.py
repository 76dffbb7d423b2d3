"""Initial allocator state: from segment/block tables, or rebuilt backwards from a snapshot's final state.

A PyTorch trace is a ring buffer: it may start after blocks were allocated and segments reserved
(FORMATS.md C.4). ``seed_from_final`` undoes the trace entries one by one, newest first, starting
from the snapshot's own segments and blocks (what PyTorch's memory viewer does), which gives the
state before the first entry. Replaying forward from it then ends exactly in the snapshot's state.
It also gives every ``alloc`` entry its block size (``block_bytes``): trace entries carry the
requested size only, so a block still live at the end takes its size from the snapshot, and any
other block its requested size rounded up to the allocator's 512-byte granularity.

Not to be confused with :mod:`veotrace.allocators.seed`, which seeds the ``simulate`` policies: it does
not undo the trace but infers which segments and blocks predate it (a segment whose first trace event
is not a ``segment_alloc``, a block freed before it is allocated) and lays them out by PyTorch's
allocator rules (``round_size``, ``should_split``) for the torch model. Here the state is exact, for
the fragmentation replay (:class:`~veotrace.frag.state.DeviceState` per device), and the
module is named for what it returns, the replay's ``initial`` state.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from veotrace.frag.state import (
    OP_ALLOC,
    OP_CODES,
    OP_FREE,
    OP_FREE_REQ,
    OP_SEG_ALLOC,
    OP_SEG_FREE,
    OP_SEG_MAP,
    OP_SEG_UNMAP,
    DeviceState,
    ReplayCounters,
    Segment,
)

#: PyTorch's CUDA caching allocator rounds requests up to multiples of 512 bytes (kMinBlockSize).
TORCH_ROUND_BYTES = 512
_LIVE_STATES = ("active_allocated", "active_pending_free")
#: The inverse of each segment event, applied when going backwards.
_UNDO = {OP_SEG_ALLOC: OP_SEG_FREE, OP_SEG_FREE: OP_SEG_ALLOC, OP_SEG_MAP: OP_SEG_UNMAP, OP_SEG_UNMAP: OP_SEG_MAP}


def initial_from_tables(segments: pa.Table, blocks: pa.Table | None = None) -> dict[int, DeviceState]:
    """Per-device state from ``SEGMENTS`` and ``BLOCKS`` tables (e.g. a snapshot, or a simulator's start).

    Blocks in state active_allocated / active_pending_free are live; other blocks are free space.
    A segment whose blocks do not add up to its size is counted (``blocks_mismatch_segments``).
    """
    states: dict[int, DeviceState] = {}
    seg_rows = segments.select(["device", "address", "total_size_bytes", "is_expandable"]).to_pylist()
    for r in sorted(seg_rows, key=lambda r: (r["device"] or 0, r["address"])):
        st = states.setdefault(r["device"] or 0, DeviceState())
        st.segments.append(Segment(r["address"], r["address"] + r["total_size_bytes"], bool(r["is_expandable"])))
        st.reserved_bytes += r["total_size_bytes"]
        st.segmented = True
    if blocks is None or blocks.num_rows == 0:
        return states
    rows = blocks.select(["device", "segment_address", "address", "size_bytes", "requested_size_bytes", "state"]).to_pylist()
    sums: dict[tuple[int, int], int] = {}
    live: dict[int, list] = {}
    for r in rows:
        d = r["device"] or 0
        sums[(d, r["segment_address"])] = sums.get((d, r["segment_address"]), 0) + r["size_bytes"]
        if r["state"] in _LIVE_STATES:
            req = r["requested_size_bytes"] if r["requested_size_bytes"] is not None else r["size_bytes"]
            live.setdefault(d, []).append((r["address"], r["size_bytes"], req, r["state"] != "active_allocated"))
    for d, st in states.items():
        for s in st.segments:
            if (d, s.start) in sums and sums[(d, s.start)] != s.end - s.start:
                st.counters.blocks_mismatch_segments += 1
        _set_live(st, live.get(d, []))
    for d in set(live) - set(states):
        _set_live(states.setdefault(d, DeviceState()), live[d])
    return states


def _set_live(st: DeviceState, blocks: list) -> None:
    blocks = sorted(blocks)
    st.addr = np.array([b[0] for b in blocks], np.uint64)
    st.size = np.array([b[1] for b in blocks], np.int64)
    st.req = np.array([b[2] for b in blocks], np.int64)
    st.pending = {b[0] for b in blocks if b[3]}
    st.live_bytes = int(st.size.sum())


#: Events turned into Python values at a time by ``seed_from_final``.
_SEED_ROWS = 1 << 16


def seed_from_final(events: pa.Table, final: dict[int, DeviceState], *,
                    round_bytes: int = TORCH_ROUND_BYTES) -> tuple[dict[int, DeviceState], pa.Table]:
    """The state before the first event, and ``events`` with a ``block_bytes`` column for the replay
    (``seed_blocks``, whose column this appends)."""
    initial, block = seed_blocks(events, final, round_bytes=round_bytes)
    return initial, events.append_column("block_bytes", block)


def seed_blocks(events: pa.Table, final: dict[int, DeviceState], *,
                round_bytes: int = TORCH_ROUND_BYTES) -> tuple[dict[int, DeviceState], pa.Array]:
    """The state before the first event, and each event's ``block_bytes`` for the replay (null where none).

    Args:
        events: the whole trace (ALLOC_EVENTS: op, address, size_bytes and device are read), in replay order.
        final: the state after the last event (``initial_from_tables`` of the snapshot).

    Returns:
        (initial state per device, ``block_bytes`` per event). Inconsistencies met going backwards
        (an alloc of a block that is not live after it, ...) are counted in the states' counters.
    """
    live = {d: {int(a): [int(s), int(r)] for a, s, r in zip(st.addr.tolist(), st.size.tolist(), st.req.tolist())}
            for d, st in final.items()}
    pending = {d: set(st.pending) for d, st in final.items()}
    segs = {d: DeviceState(segments=[Segment(s.start, s.end, s.expandable) for s in st.segments],
                           reserved_bytes=st.reserved_bytes, counters=ReplayCounters(), segmented=st.segmented)
            for d, st in final.items()}
    n = events.num_rows
    block = np.zeros(n, np.int64)
    known = np.zeros(n, np.bool_)
    # backwards a slice at a time: Python values for one slice, not for the whole trace (a streamed
    # snapshot's 15M entries as lists cost gigabytes)
    for stop in range(n, 0, -_SEED_ROWS):
        lo = max(0, stop - _SEED_ROWS)
        part = events.slice(lo, stop - lo)
        ops = part.column("op").to_pylist()
        addr = part.column("address").to_pylist()
        size = part.column("size_bytes").to_pylist()
        dev = [d or 0 for d in part.column("device").to_pylist()]
        for j in range(len(ops) - 1, -1, -1):
            code, a, d = OP_CODES.get(ops[j]), addr[j], dev[j]
            if code is None or a is None:
                continue
            lv = live.setdefault(d, {})
            if code == OP_ALLOC:
                blk = lv.pop(a, None)
                pending.setdefault(d, set()).discard(a)
                block[lo + j] = blk[0] if blk is not None else _round(size[j], round_bytes)
                known[lo + j] = True
                if blk is None:
                    segs.setdefault(d, DeviceState()).counters.inconsistent_entries += 1
            elif code == OP_FREE:
                lv[a] = [_round(size[j], round_bytes), size[j]]
                if ops[j] == "free_completed":  # between free_requested and free_completed it was pending
                    pending.setdefault(d, set()).add(a)
            elif code == OP_FREE_REQ:
                pending.setdefault(d, set()).discard(a)
            else:
                segs.setdefault(d, DeviceState()).apply_segment(_UNDO[code], a, size[j])
    out: dict[int, DeviceState] = {}
    for d in set(live) | set(segs):
        st = segs.get(d) or DeviceState()
        blocks = [(a, s, r, a in pending.get(d, ())) for a, (s, r) in live.get(d, {}).items()]
        _set_live(st, blocks)
        st.counters.pre_existing_blocks = len(blocks)
        st.counters.pre_existing_segments = len(st.segments)
        if d in final:
            st.counters.blocks_mismatch_segments += final[d].counters.blocks_mismatch_segments
        out[d] = st
    return out, pa.array(block, pa.int64(), mask=~known)


def _round(n: int, r: int) -> int:
    return n if r <= 1 else -(-n // r) * r
