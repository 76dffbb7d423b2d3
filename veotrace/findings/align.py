"""Two clocks aligned on the allocations both sources recorded: the offset that makes the most of one
source's allocations coincide with the other's, the same allocation being the same size (and address,
when both record addresses) at the same moment.

Every pair of allocations with the same key (size, or size and address) proposes an offset (reference
time - source time); the offset proposed by the most pairs within ``tolerance`` wins, refined to their
median. It is accepted only when it explains at least ``MIN_SHARE`` of the source's allocations, at
least ``MIN_VOTES`` of them, and no other offset (further than 10 tolerances from it) explains half as
many: otherwise there is no shared event to align on, and nothing is guessed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from veotrace.schemas.events import DEVICE_OPS, Op

#: Offsets within this of each other are the same (ns): two tools stamp one allocation apart by at most this.
TOLERANCE_NS = 2_000_000
#: The share of the source's allocations the offset must explain.
MIN_SHARE = 0.5
MIN_VOTES = 5
#: The ops that are allocations, in either source.
ALLOC_OPS = (Op.ALLOC, *DEVICE_OPS)
#: A key (size, address) seen more often than this in the reference proposes no offset: too common to tell.
MAX_REPEATS = 64
#: The source's allocations that vote at most (evenly spaced through it): the pairs stay under
#: MAX_REPEATS x this however long the source.
MAX_VOTERS = 20_000


@dataclass
class Allocs:
    """One source's allocations: times (ns, its own clock), sizes, and addresses (None when not recorded)."""

    ts_ns: np.ndarray
    size: np.ndarray
    address: np.ndarray | None = None


def allocs_of(table) -> Allocs | None:
    """The allocations of an ``ALLOC_EVENTS`` table (ops ``alloc``, ``segment_alloc``, ``segment_map``) with a
    time and a size; None when it has none."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if table is None or not table.num_rows or "ts_ns" not in table.column_names:
        return None
    keep = pc.and_(pc.is_in(table.column("op").cast(pa.string()), value_set=pa.array(ALLOC_OPS)),
                   pc.and_(pc.is_valid(table.column("ts_ns")), pc.is_valid(table.column("size_bytes"))))
    t = table.filter(keep)
    if not t.num_rows:
        return None
    address = None
    if "address" in t.column_names and t.column("address").null_count == 0:
        address = t.column("address").to_numpy().astype(np.uint64)
    return Allocs(t.column("ts_ns").to_numpy().astype(np.int64), t.column("size_bytes").to_numpy().astype(np.int64),
                  address)


def shared_offset(ref: Allocs, src: Allocs, *, tolerance_ns: int = TOLERANCE_NS) -> dict | None:
    """The offset (ns) to add to ``src``'s clock to read ``ref``'s, from their shared allocations, with how
    it was found (``votes``: the source's allocations it explains, ``of``: the source's allocations that
    voted (at most MAX_VOTERS, evenly spaced),
    ``spread_ns``: the interquartile range of the explaining pairs' offsets, ``by``); None when no offset
    passes the rule of the module docstring."""
    by_address = ref.address is not None and src.address is not None
    if src.ts_ns.size > MAX_VOTERS:
        pick = np.linspace(0, src.ts_ns.size - 1, MAX_VOTERS).astype(np.int64)
        src = Allocs(src.ts_ns[pick], src.size[pick], None if src.address is None else src.address[pick])
    rk, sk = _keys(ref, by_address), _keys(src, by_address)
    order = np.argsort(rk, kind="stable")
    rk_sorted, rt_sorted = rk[order], ref.ts_ns[order]
    lo, hi = np.searchsorted(rk_sorted, sk, "left"), np.searchsorted(rk_sorted, sk, "right")
    n = hi - lo
    use = (n > 0) & (n <= MAX_REPEATS)
    if not use.any():
        return None
    which = np.repeat(np.flatnonzero(use), n[use])  # the source allocation of each pair
    start = np.repeat(lo[use], n[use])
    within = np.arange(which.size) - np.repeat(np.cumsum(n[use]) - n[use], n[use])
    offsets = rt_sorted[start + within] - src.ts_ns[which]
    idx = np.argsort(offsets, kind="stable")
    d, who = offsets[idx], which[idx]
    count = np.searchsorted(d, d + tolerance_ns, "right") - np.searchsorted(d, d - tolerance_ns, "left")
    best = int(np.argmax(count))
    near = np.abs(d - d[best]) <= tolerance_ns
    votes = np.unique(who[near]).size  # each source allocation counted once
    far = np.abs(d - d[best]) > 10 * tolerance_ns
    rival = int(count[far].max()) if far.any() else 0
    if votes < MIN_VOTES or votes < MIN_SHARE * src.ts_ns.size or rival * 2 > int(count[best]):
        return None
    picked = d[near]  # sorted: the median in integers (ns near 1.8e18 do not fit a float exactly)
    med = int(picked[picked.size // 2]) if picked.size % 2 else int((picked[picked.size // 2 - 1] + picked[picked.size // 2]) // 2)
    spread = float(picked[(3 * picked.size) // 4] - picked[picked.size // 4])
    return {"offset_ns": med, "votes": int(votes), "of": int(src.ts_ns.size), "spread_ns": spread,
            "by": "size and address" if by_address else "size"}


def _keys(a: Allocs, by_address: bool) -> np.ndarray:
    """One integer key per allocation: its size, or its size and address mixed."""
    if not by_address:
        return a.size.astype(np.int64)
    mixed = a.address.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) ^ a.size.astype(np.uint64)
    return mixed.view(np.int64)
