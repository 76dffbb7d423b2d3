"""Pairing of allocs and frees by address within the runs of a batch (one sort for the whole batch)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from veotrace.fragmentation.state import ALLOC, FREE, DeviceState


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


def _order_by_address(a: np.ndarray) -> np.ndarray:
    """A stable argsort of addresses: one sort of (address - min) << k | position when that fits 63 bits
    (a heap spans far less than 2**40 bytes), which sorts values with numpy's fastest sort, else a stable argsort."""
    if a.size == 0:
        return np.zeros(0, np.int64)
    lo = a.min()
    bits_pos = int(a.size).bit_length()
    if (int(a.max()) - int(lo)).bit_length() + bits_pos > 63:
        return np.argsort(a, kind="stable")
    key = ((a - lo).astype(np.int64) << bits_pos) | np.arange(a.size, dtype=np.int64)
    key.sort()
    return key & ((1 << bits_pos) - 1)


def match_batch(code, addr, size, block, run_id, st: DeviceState) -> Matched:
    """Pair allocs and frees at the same address within each run with one sort for the whole batch.

    A free releases the block of the alloc just before it at its address in the same run; frees
    with no such alloc are counted unknown here and un-counted by ``DeviceState.match_run`` when
    the carried live set holds their block.
    """
    blocky = (code == ALLOC) | (code == FREE)
    if blocky.all():  # a plain alloc/free log: no gathers
        pos_time, a, r = np.arange(code.size), addr, run_id
    else:
        pos_time = np.flatnonzero(blocky)
        a, r = addr[pos_time], run_id[pos_time]
    order = _order_by_address(a)
    if r.size and r[-1] > 0:  # then by run: a stable radix sort when run ids fit in 16 bits
        rr = r[order]
        order = order[np.argsort(rr.astype(np.int16) if rr[-1] < 32768 and r.max() < 32768 else rr, kind="stable")]
    pos, sa, sr = pos_time[order], a[order], r[order]
    is_alloc = code[pos] == ALLOC
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
