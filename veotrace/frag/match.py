"""Pairing of allocs and frees by address within the runs of a batch (one sort for the whole batch)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from veotrace.frag.state import OP_ALLOC, OP_FREE, DeviceState


@dataclass
class Matched:
    """Alloc/free rows of a batch sorted by (run, address, time), with what the rows do among themselves."""

    pos: np.ndarray  # row index in the batch
    pos_time: np.ndarray  # the same rows in time order
    sa: np.ndarray
    first: np.ndarray
    last: np.ndarray
    is_alloc: np.ndarray
    bsz: np.ndarray
    req: np.ndarray
    fsize: np.ndarray
    delta: np.ndarray  # live-bytes change per batch row
    run_bounds: list


def _sort_rows(a: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows ordered by (run, address, position): the order, and the addresses and runs in that order.

    When run, address - min and position fit 63 bits together (a heap spans far less than 2**40
    bytes), one sort of the packed values gives all three with no gather (numpy's fastest sort);
    otherwise a stable argsort by address, then a stable sort by run.
    """
    if a.size == 0:
        return np.zeros(0, np.int64), a, r
    lo = a.min()
    b_pos = int(a.size).bit_length()
    b_addr = (int(a.max()) - int(lo)).bit_length()
    b_run = int(r[-1]).bit_length()
    if b_run + b_addr + b_pos <= 63:
        key = ((a - lo).astype(np.int64) << b_pos) | np.arange(a.size, dtype=np.int64)
        if b_run:
            key |= r.astype(np.int64) << (b_addr + b_pos)
        key.sort()
        order = key & ((1 << b_pos) - 1)
        sa = ((key >> b_pos) & ((1 << b_addr) - 1)).astype(np.uint64) + lo
        return order, sa, key >> (b_addr + b_pos)
    order = np.argsort(a, kind="stable")
    if r[-1] > 0:
        order = order[np.argsort(r[order], kind="stable")]
    return order, a[order], r[order]


def match_batch(code, addr, size, block, run_id, st: DeviceState) -> Matched:
    """Pair allocs and frees at the same address within each run with one sort for the whole batch.

    A free releases the block of the alloc just before it at its address in the same run; frees
    with no such alloc are counted unknown here and un-counted by ``DeviceState.match_run`` when
    the carried live set holds their block.
    """
    blocky = (code == OP_ALLOC) | (code == OP_FREE)
    if blocky.all():  # a plain alloc/free log: no gathers
        pos_time, a, r = np.arange(code.size), addr, run_id
    else:
        pos_time = np.flatnonzero(blocky)
        a, r = addr[pos_time], run_id[pos_time]
    order, sa, sr = _sort_rows(a, r)
    pos = order if pos_time.size == code.size else pos_time[order]
    is_alloc = code[pos] == OP_ALLOC
    bsz = block[pos]
    m = sa.size
    first = np.ones(m, bool)
    first[1:] = (sa[1:] != sa[:-1]) | (sr[1:] != sr[:-1])
    last = np.ones(m, bool)
    last[:-1] = first[1:]
    prev_alloc = np.zeros(m, bool)
    prev_alloc[1:] = is_alloc[:-1] & ~first[1:]
    prev_sz = np.zeros(m, np.int64)
    prev_sz[1:] = np.where(prev_alloc[1:], bsz[:-1], 0)
    fsize = size[pos]
    delta = np.zeros(code.size, np.int64)
    delta[pos] = np.where(is_alloc, bsz, 0) - prev_sz
    st.counters.double_allocs += int((is_alloc & prev_alloc).sum())
    st.counters.oversize_frees += int((~is_alloc & prev_alloc & (fsize > prev_sz)).sum())
    st.counters.unknown_frees += int((~is_alloc & ~prev_alloc).sum())
    run_bounds = np.searchsorted(sr, np.arange(int(run_id[-1]) + 2) if run_id.size else [0]).tolist()
    return Matched(pos, pos_time, sa, first, last, is_alloc, bsz, fsize, fsize, delta, run_bounds)
