"""The segment and block map of one device at one instant: reserved ranges, the live blocks in them (with
their group), the free gaps between, and which sites pin each range's free bytes.

The gaps are ``fragmentation``'s free blocks (inside a segment, between its live blocks and its ends),
so a map's free bytes, largest free block and external fragmentation (1 - largest / free) are those
of ``fragmentation --at`` at the same instant. A map past ``max_rows`` rows keeps every range and
draws each of its crowded ranges as address bins (live and free bytes, the largest gap, the group
holding most bytes): the counts stay exact, the picture stays bounded.
"""

from __future__ import annotations

import numpy as np

#: Address bins of one crowded range when a map is over its row budget.
MAP_BINS = 256
#: Sites named per range as pinning its free bytes.
PINNED_TOP = 3

KIND_SEGMENT, KIND_BLOCK, KIND_FREE, KIND_BIN = 0, 1, 2, 3


def state_map(ranges: list[tuple[int, int]], addr: np.ndarray, size: np.ndarray, group: np.ndarray,
              site: np.ndarray, *, max_rows: int) -> tuple[dict, dict, list[dict]]:
    """(metrics, rows, ranges' pins) of the state with reserved ``ranges`` and live blocks (``addr``,
    ``size``, their band ``group`` and ``site`` index).

    ``rows`` are columns: kind (0 segment, 1 block, 2 free gap, 3 bin), range (index, -1: outside every
    range), address, size, group (blocks; bins: the group of most bytes), site (blocks), live and free
    bytes and largest gap (bins)."""
    starts = np.array([a for a, _ in ranges], np.int64)
    ends = np.array([b for _, b in ranges], np.int64)
    order = np.argsort(addr, kind="stable")
    addr, size, group, site = (np.asarray(v)[order] for v in (addr.astype(np.int64), size, group, site))
    j = np.searchsorted(starts, addr, side="right") - 1
    inside = j >= 0
    inside[inside] = addr[inside] < ends[j[inside]]
    j = np.where(inside, j, -1)
    ins = np.flatnonzero(inside)
    a, z, jj = addr[ins], size[ins].astype(np.int64), j[ins]
    first = np.r_[True, jj[1:] != jj[:-1]] if jj.size else np.zeros(0, bool)
    last = np.r_[jj[1:] != jj[:-1], True] if jj.size else np.zeros(0, bool)
    prev_end = np.where(first, starts[jj] if jj.size else 0, np.r_[0, (a + z)[:-1]] if jj.size else 0)
    gaps = [(prev_end, a - prev_end, jj), (a + z, ends[jj] - (a + z), jj)]
    gaps[1] = tuple(v[last] for v in gaps[1])
    empty = np.ones(len(ranges), bool)
    empty[jj] = False
    gaps.append((starts[empty], ends[empty] - starts[empty], np.flatnonzero(empty)))
    g_addr, g_size, g_range = (np.concatenate([g[k] for g in gaps]) for k in range(3))
    keep = g_size > 0
    g_addr, g_size, g_range = g_addr[keep], g_size[keep], g_range[keep]
    free, largest = int(g_size.sum()), int(g_size.max()) if g_size.size else 0
    metrics = {"reserved_bytes": int((ends - starts).sum()), "segments": len(ranges),
               "live_bytes": int(np.asarray(size).sum()), "live_blocks": int(addr.size),
               "blocks_outside_segments": int(addr.size - ins.size), "free_bytes": free, "free_blocks": int(g_size.size),
               "largest_free_bytes": largest, "external_frag": None if free == 0 else 1 - largest / free}
    pins = _pins(len(ranges), jj, z, site[ins], g_range, g_size)
    rows = _rows(starts, ends, j, addr, size, group, site, g_addr, g_size, g_range, max_rows)
    return metrics, rows, pins


def _pins(n: int, jj, z, site, g_range, g_size) -> list[dict]:
    """Per range holding free bytes and live blocks: its free bytes and the sites of the most live bytes in it."""
    out = []
    free = np.bincount(g_range, weights=g_size, minlength=n) if n else np.zeros(0)
    live = np.bincount(jj, weights=z, minlength=n) if n else np.zeros(0)
    for r in np.flatnonzero((free > 0) & (live > 0)).tolist():
        mine = jj == r
        codes, inv = np.unique(site[mine], return_inverse=True)
        by = np.bincount(inv, weights=z[mine])
        top = np.argsort(-by, kind="stable")[:PINNED_TOP]
        out.append({"range": r, "free_bytes": int(free[r]), "live_bytes": int(live[r]), "live_blocks": int(mine.sum()),
                    "sites": [int(codes[k]) for k in top.tolist()]})
    return out


def _rows(starts, ends, j, addr, size, group, site, g_addr, g_size, g_range, max_rows: int) -> dict:
    n_ranges = starts.size
    per_range = np.bincount(j[j >= 0], minlength=n_ranges) + np.bincount(g_range[g_range >= 0], minlength=n_ranges)
    outside = int((j < 0).sum() + (g_range < 0).sum())  # blocks and gaps in no range (a log without segments)
    bin_outside = outside > max_rows // 2
    crowded = np.zeros(n_ranges, bool)
    budget = max(max_rows - n_ranges - (MAP_BINS if bin_outside else outside), 0)
    if per_range.sum() > budget:  # the ranges with the most rows are drawn as bins until the rest fit
        for r in np.argsort(-per_range, kind="stable").tolist():
            if per_range[~crowded].sum() + MAP_BINS * crowded.sum() <= budget or per_range[r] <= MAP_BINS:
                break
            crowded[r] = True
    cols: dict[str, list] = {k: [] for k in ("kind", "range", "addr", "size", "group", "site", "live", "free", "gap")}

    def add(kind, rng, a, s, g=None, st=None, live=None, free=None, gap=None):
        k = np.size(a)
        for key, v in (("kind", kind), ("range", rng), ("addr", a), ("size", s), ("group", g), ("site", st),
                       ("live", live), ("free", free), ("gap", gap)):
            cols[key].append(np.broadcast_to(np.asarray(-1 if v is None else v, np.int64), (k,)))

    def binned(idx):
        """Whether each row of range ``idx`` (-1: none) is drawn in a bin."""
        inside = (idx >= 0) & crowded[np.maximum(idx, 0)] if n_ranges else np.zeros(idx.size, bool)
        return inside | ((idx < 0) & bin_outside)

    add(KIND_SEGMENT, np.arange(n_ranges), starts, ends - starts)
    plain = ~binned(j)
    add(KIND_BLOCK, j[plain], addr[plain], size[plain], group[plain], site[plain])
    gp = ~binned(g_range)
    add(KIND_FREE, g_range[gp], g_addr[gp], g_size[gp])
    regions = [(r, int(starts[r]), int(ends[r])) for r in np.flatnonzero(crowded).tolist()]
    if bin_outside:
        out_b, out_g = j < 0, g_range < 0
        lo = min(int(addr[out_b].min(initial=2**62)), int(g_addr[out_g].min(initial=2**62)))
        hi = max(int((addr[out_b] + size[out_b]).max(initial=0)), int((g_addr[out_g] + g_size[out_g]).max(initial=0)))
        regions.append((-1, lo, hi))
    for r, lo, hi in regions:
        add(KIND_BIN, np.full(MAP_BINS, r), *_bins(lo, hi, j == r, g_range == r, addr, size, group, g_addr, g_size))
    return {k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in cols.items()}


def _bins(lo: int, hi: int, mine, gm, addr, size, group, g_addr, g_size) -> tuple:
    """MAP_BINS address bins over [lo, hi): start, width, the group of most live bytes, no site, live and
    free bytes, the largest gap (each block and gap counted in the bin of its start)."""
    width = max(1, -(-(hi - lo) // MAP_BINS))
    edges = lo + width * np.arange(MAP_BINS, dtype=np.int64)
    b = np.minimum((addr[mine] - lo) // width, MAP_BINS - 1)
    live = np.bincount(b, weights=size[mine], minlength=MAP_BINS).astype(np.int64)
    gb = np.minimum((g_addr[gm] - lo) // width, MAP_BINS - 1)
    free = np.bincount(gb, weights=g_size[gm], minlength=MAP_BINS).astype(np.int64)
    gap = np.zeros(MAP_BINS, np.int64)
    np.maximum.at(gap, gb, g_size[gm])
    top = np.full(MAP_BINS, -1, np.int64)
    if mine.any():  # per bin the group holding most live bytes
        span = int(group.max()) + 2
        key = b * span + group[mine] + 1
        u, inv = np.unique(key, return_inverse=True)
        by = np.bincount(inv, weights=size[mine])
        best = np.lexsort((-by, u // span))
        ub = u[best] // span
        firsts = np.r_[True, ub[1:] != ub[:-1]]
        top[ub[firsts]] = (u[best] % span - 1)[firsts]
    return edges, np.maximum(np.minimum(width, hi - edges), 0), top, None, live, free, gap


def replay_map(state, *, max_gap: int, threshold: float, max_rows: int) -> tuple[dict, dict, list[dict]]:
    """(metrics, rows, pins) of one device's ``frag`` replay state: its metrics are ``fragmentation --at``'s
    (``frag.metrics.state_metrics``), its free blocks those ``fragmentation`` finds (gaps in segments, or
    under ``max_gap`` without segments). Blocks carry no group (the replay keeps none)."""
    from veotrace.frag import metrics as M

    fb = M.free_blocks(state, max_gap=max_gap)
    metrics = M.state_metrics(state, max_gap=max_gap, threshold=threshold, fb=fb)
    starts = np.array([s.start for s in state.segments], np.int64)
    ends = np.array([s.end for s in state.segments], np.int64)
    addr = state.addr.astype(np.int64)
    size = state.size.astype(np.int64)
    j = np.searchsorted(starts, addr, side="right") - 1 if starts.size else np.full(addr.size, -1)
    ok = j >= 0
    ok[ok] = addr[ok] < ends[j[ok]]
    j = np.where(ok, j, -1)
    fa = np.asarray(fb.address, np.int64)
    fj = np.searchsorted(starts, fa, side="right") - 1 if starts.size else np.full(fa.size, -1)
    none = np.full(addr.size, -1, np.int64)
    rows = _rows(starts, ends, j, addr, size, none, none, fa, np.asarray(fb.size, np.int64), fj, max_rows)
    return metrics, rows, []
