"""The segment and block map of one device at one instant: reserved ranges, the live blocks in them (with
their group), the free gaps between, the unmapped pages of expandable segments, and which sites pin each
range's free bytes.

The ranges are ``fragmentation``'s (``frag.state.DeviceState``: a segment, or the mapped pages of an
expandable segment next to each other), and the gaps its free blocks (inside a range, between its live
blocks and its ends; a block reaching past its range's end is outside every range), so a map's segments,
free bytes, largest free block and external fragmentation (1 - largest / free) are those of
``fragmentation --at`` at the same instant. An expandable segment is drawn as one segment (``extents``:
the address span its pages were mapped in over the trace) whose mapped ranges grow and shrink, the
rest of its span drawn unmapped.

Addresses are held as unsigned 64-bit integers throughout. A map past ``max_rows`` rows draws its
crowded ranges as address bins (live and free bytes, the largest gap, the group holding most bytes),
and, when even one row per range is over the budget, its smallest ranges as segment bins (each the
count of segments it holds, their reserved, live and free bytes and largest gap): the counts stay
exact, the page stays bounded.
"""

from __future__ import annotations

import numpy as np

#: Address bins of one crowded range when a map is over its row budget.
MAP_BINS = 256
#: Sites named per range as pinning its free bytes.
PINNED_TOP = 3

KIND_SEGMENT, KIND_BLOCK, KIND_FREE, KIND_BIN, KIND_UNMAPPED, KIND_SEGBIN = range(6)
#: A map's row columns: kind, range (index in the map's ranges; -1: none), seg (the expandable segment a range
#: or an unmapped span belongs to; -1: none; a segment bin: the number of ranges it holds), address, size,
#: group (blocks; bins: the group of most bytes), site (blocks), live and free bytes and largest gap (bins).
COLUMNS = ("kind", "range", "seg", "addr", "size", "group", "site", "live", "free", "gap")
#: The map figures, each the figure ``fragmentation --at`` gives for the device at the same instant.
METRICS = ("reserved_bytes", "segments", "live_bytes", "live_blocks", "blocks_outside_segments", "free_bytes",
           "free_blocks", "largest_free_bytes", "external_frag", "range_method")
U64 = np.uint64


def extents_of(ranges) -> list[tuple[int, int]]:
    """The expandable segments' spans: ``ranges`` (every (start, end) mapped as expandable over the trace)
    merged where they overlap or touch, sorted."""
    out: list[list[int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def layout(segments, segmented: bool, addr: np.ndarray, size: np.ndarray, *, max_gap: int) -> dict:
    """The free layout of live blocks (``addr`` uint64 sorted, ``size``) in ``segments`` (``frag.state.Segment``,
    sorted), as ``frag.metrics.free_blocks`` finds it, in unsigned 64-bit arithmetic: per block its range
    (-1: outside), the gaps (address, size, range) and the figures (``METRICS``)."""
    addr = np.asarray(addr, U64)
    size = np.asarray(size, np.int64)
    end = addr + size.astype(U64)
    n_seg = len(segments)
    starts = np.fromiter((s.start for s in segments), U64, n_seg)
    ends = np.fromiter((s.end for s in segments), U64, n_seg)
    if not segmented:  # no segment ever known: gaps under max_gap between neighbouring blocks (fragmentation's rule)
        j = np.full(addr.size, -1, np.int64)
        ok = (addr[1:] > end[:-1]) if addr.size > 1 else np.zeros(0, bool)
        gap = np.zeros(max(addr.size - 1, 0), U64)
        gap[ok] = addr[1:][ok] - end[:-1][ok]
        keep = ok & (gap < U64(max_gap))
        g_addr, g_size, g_range, outside, method = end[:-1][keep], gap[keep].astype(np.int64), None, 0, "max_gap"
        g_range = np.full(g_addr.size, -1, np.int64)
    else:
        j = np.searchsorted(starts, addr, side="right").astype(np.int64) - 1 if n_seg else np.full(addr.size, -1, np.int64)
        inside = j >= 0
        inside[inside] = (end[inside] <= ends[j[inside]]) & (end[inside] >= addr[inside])  # (a wrapped end: outside)
        j = np.where(inside, j, -1)
        outside = int(addr.size - inside.sum())
        ia, ie, ij = addr[inside], end[inside], j[inside]
        same = np.zeros(ia.size, bool)
        same[1:] = ij[1:] == ij[:-1]
        prev_end = np.where(same, np.r_[U64(0), ie[:-1]] if ia.size else ie, starts[ij] if ia.size else ie)
        pos = ia > prev_end
        last_end = starts.copy()
        if ia.size:
            is_last = np.ones(ia.size, bool)
            is_last[:-1] = ~same[1:]
            last_end[ij[is_last]] = ie[is_last]
        tail = ends > last_end
        g_addr = np.concatenate([prev_end[pos], last_end[tail]])
        g_size = np.concatenate([(ia[pos] - prev_end[pos]), (ends[tail] - last_end[tail])]).astype(np.int64)
        g_range = np.concatenate([ij[pos], np.flatnonzero(tail)]).astype(np.int64)
        order = np.argsort(g_addr, kind="stable")
        g_addr, g_size, g_range, method = g_addr[order], g_size[order], g_range[order], "segments"
    free = int(g_size.sum())
    largest = int(g_size.max()) if g_size.size else 0
    metrics = {"reserved_bytes": int(sum(s.end - s.start for s in segments)) if segmented else None,
               "segments": n_seg, "live_bytes": int(size.sum()), "live_blocks": int(addr.size),
               "blocks_outside_segments": outside, "free_bytes": free, "free_blocks": int(g_size.size),
               "largest_free_bytes": largest, "external_frag": None if free <= 0 else 1.0 - largest / free,
               "range_method": method}
    if method == "max_gap":
        metrics["max_gap_bytes"] = int(max_gap)
    return {"j": j, "starts": starts, "ends": ends, "g_addr": g_addr, "g_size": g_size, "g_range": g_range,
            "metrics": metrics}


def state_map(segments, segmented: bool, addr, size, group, site, *, max_rows: int, extents=(),
              max_gap: int | None = None) -> tuple[dict, dict, list[dict]]:
    """(metrics, rows, ranges' pins) of the state with reserved ``segments`` (``frag.state.Segment``, sorted)
    and live blocks (``addr``, ``size``, their band ``group`` and ``site`` index); ``extents``: the
    expandable segments' spans (``extents_of``).

    ``rows`` are the columns of ``COLUMNS``, one row per range, block, free gap, unmapped span or bin."""
    from veotrace.defaults import FRAGMENTATION_MAX_GAP_BYTES

    addr = np.asarray(addr, U64)
    order = np.argsort(addr, kind="stable")
    addr, size, group, site = addr[order], np.asarray(size, np.int64)[order], np.asarray(group, np.int64)[order], \
        np.asarray(site, np.int64)[order]
    lay = layout(segments, segmented, addr, size, max_gap=FRAGMENTATION_MAX_GAP_BYTES if max_gap is None else max_gap)
    return _finish(lay, segments, addr, size, group, site, extents, max_rows)


def replay_map(state, *, max_gap: int, threshold: float, max_rows: int, extents=()) -> tuple[dict, dict, list[dict]]:
    """The map of a ``fragmentation`` replay's state (``frag.state.DeviceState``; a log's lanes). Blocks carry
    no group (the replay keeps none)."""
    none = np.full(state.addr.size, -1, np.int64)
    lay = layout(state.segments, state.segmented, state.addr, state.size, max_gap=max_gap)
    lay["metrics"]["reserved_bytes"] = int(state.reserved_bytes) if state.segmented else None
    return _finish(lay, state.segments, np.asarray(state.addr, U64), np.asarray(state.size, np.int64), none, none,
                   extents, max_rows)


def _finish(lay: dict, segments, addr, size, group, site, extents, max_rows: int):
    j = lay["j"]
    ins = j >= 0
    seg_of, unmapped = _expandable(segments, extents)
    rows = _rows(lay["starts"], lay["ends"], seg_of, unmapped, j, addr, size, group, site, lay["g_addr"], lay["g_size"],
                 lay["g_range"], max_rows)
    # the pins of the ranges drawn with their own row, those of most free bytes first, within the map's rows
    drawn = np.zeros(len(segments), bool)
    drawn[rows["range"][rows["kind"] == KIND_SEGMENT]] = True
    pins = _pins(len(segments), j[ins], size[ins], site[ins], lay["g_range"], lay["g_size"], drawn,
                 max(16, max_rows // 4))
    metrics = dict(lay["metrics"])
    if unmapped[0].size or (seg_of >= 0).any():
        metrics["expandable_segments"] = int(np.unique(seg_of[seg_of >= 0]).size)
        metrics["unmapped_bytes"] = int(unmapped[1].sum())
    return metrics, rows, pins


def _expandable(segments, extents) -> tuple[np.ndarray, tuple]:
    """Per range the expandable segment (index in ``extents``) it is mapped in (-1: a plain segment), and the
    unmapped spans (address, size, segment) of each expandable segment with a range mapped now."""
    seg_of = np.full(len(segments), -1, np.int64)
    if not extents:
        return seg_of, (np.zeros(0, U64), np.zeros(0, np.int64), np.zeros(0, np.int64))
    lo = np.array([a for a, _ in extents], U64)
    holes: dict[int, list] = {}
    for r, s in enumerate(segments):
        if not s.expandable:
            continue
        k = int(np.searchsorted(lo, U64(s.start), "right")) - 1
        if k >= 0 and s.end <= extents[k][1]:
            seg_of[r] = k
            holes.setdefault(k, []).append((s.start, s.end))
    ua, us, uk = [], [], []
    for k, mapped in holes.items():
        at = extents[k][0]
        for a, b in sorted(mapped) + [(extents[k][1], extents[k][1])]:
            if a > at:
                ua.append(at), us.append(a - at), uk.append(k)
            at = max(at, b)
    return seg_of, (np.array(ua, U64), np.array(us, np.int64), np.array(uk, np.int64))


def _pins(n: int, jj, z, site, g_range, g_size, drawn, most: int) -> list[dict]:
    """Per range drawn (``drawn``) holding free bytes and live blocks, at most ``most`` (those of most free bytes):
    its free bytes and the sites of the most live bytes in it."""
    out = []
    if not n:
        return out
    gr = g_range >= 0
    free = np.bincount(g_range[gr], weights=g_size[gr], minlength=n)
    live = np.bincount(jj, weights=z, minlength=n)
    held = np.flatnonzero((free > 0) & (live > 0) & drawn)
    held = np.sort(held[np.argsort(-free[held], kind="stable")[:most]])
    order = np.argsort(jj, kind="stable")
    bounds = np.searchsorted(jj[order], np.arange(n + 1))
    for r in held.tolist():
        mine = order[bounds[r]:bounds[r + 1]]
        codes, inv = np.unique(site[mine], return_inverse=True)
        by = np.bincount(inv, weights=z[mine])
        top = np.argsort(-by, kind="stable")[:PINNED_TOP]
        out.append({"range": r, "free_bytes": int(free[r]), "live_bytes": int(live[r]), "live_blocks": int(mine.size),
                    "sites": [int(codes[k]) for k in top.tolist()]})
    return out


def _rows(starts, ends, seg_of, unmapped, j, addr, size, group, site, g_addr, g_size, g_range, max_rows: int) -> dict:
    n_ranges = starts.size
    per_range = np.bincount(j[j >= 0], minlength=n_ranges) + np.bincount(g_range[g_range >= 0], minlength=n_ranges)
    outside = int((j < 0).sum() + (g_range < 0).sum())  # blocks and gaps in no range (a log without segments)
    bin_outside = outside > max_rows // 2
    fixed = unmapped[0].size + (MAP_BINS if bin_outside else outside)
    avail = max(max_rows - fixed, 0)
    # one row per range and its rows while they fit; a range of more than MAP_BINS rows may be drawn as
    # MAP_BINS address bins; past that the smallest ranges are drawn as segment bins
    cost = 1 + np.minimum(per_range, MAP_BINS)
    segbin = np.zeros(n_ranges, bool)
    if int(cost.sum()) > avail:
        by_size = np.argsort(-(ends - starts).astype(np.float64), kind="stable")
        fits = np.cumsum(cost[by_size]) <= max(avail - MAP_BINS, 0)
        segbin[by_size[~fits]] = True
    crowded = np.zeros(n_ranges, bool)
    budget = max(avail - int((~segbin).sum()) - (MAP_BINS if segbin.any() else 0), 0)
    drawn = per_range * ~segbin
    if drawn.sum() > budget:  # the ranges with the most rows are drawn as address bins until the rest fit
        for r in np.argsort(-drawn, kind="stable").tolist():
            if drawn[~crowded].sum() + MAP_BINS * crowded.sum() <= budget or drawn[r] <= MAP_BINS:
                break
            crowded[r] = True
    cols: dict[str, list] = {k: [] for k in COLUMNS}

    def add(kind, rng, a, s, g=None, st=None, live=None, free=None, gap=None, seg=None):
        k = np.size(a)
        for key, v in (("kind", kind), ("range", rng), ("seg", seg), ("size", s), ("group", g), ("site", st),
                       ("live", live), ("free", free), ("gap", gap)):
            cols[key].append(np.broadcast_to(np.asarray(-1 if v is None else v, np.int64), (k,)))
        cols["addr"].append(np.broadcast_to(np.asarray(a, U64), (k,)))

    hidden = segbin | crowded

    def binned(idx):
        """Whether each row of range ``idx`` (-1: none) is drawn in a bin."""
        inside = (idx >= 0) & hidden[np.maximum(idx, 0)] if n_ranges else np.zeros(idx.size, bool)
        return inside | ((idx < 0) & bin_outside)

    own = np.flatnonzero(~segbin)
    add(KIND_SEGMENT, own, starts[own], (ends[own] - starts[own]).astype(np.int64), seg=seg_of[own])
    plain = ~binned(j)
    add(KIND_BLOCK, j[plain], addr[plain], size[plain], group[plain], site[plain])
    gp = ~binned(g_range)
    add(KIND_FREE, g_range[gp], g_addr[gp], g_size[gp])
    add(KIND_UNMAPPED, -1, unmapped[0], unmapped[1], seg=unmapped[2])
    for r in np.flatnonzero(crowded & ~segbin).tolist():
        add(KIND_BIN, r, *_bins(int(starts[r]), int(ends[r]), j == r, g_range == r, addr, size, group, g_addr, g_size))
    if bin_outside:
        out_b, out_g = j < 0, g_range < 0
        los = ([int(addr[out_b].min())] if out_b.any() else []) + ([int(g_addr[out_g].min())] if out_g.any() else [])
        his = (([int((addr[out_b] + size[out_b].astype(U64)).max())] if out_b.any() else [])
               + ([int((g_addr[out_g] + g_size[out_g].astype(U64)).max())] if out_g.any() else []))
        lo, hi = min(los), max(his)
        add(KIND_BIN, -1, *_bins(lo, hi, j < 0, g_range < 0, addr, size, group, g_addr, g_size))
    if segbin.any():
        add(KIND_SEGBIN, -1, *_segment_bins(np.flatnonzero(segbin), starts, ends, j, size, group, g_range, g_size))
    return {k: np.concatenate(v) if v else np.zeros(0, U64 if k == "addr" else np.int64) for k, v in cols.items()}


def _bins(lo: int, hi: int, mine, gm, addr, size, group, g_addr, g_size) -> tuple:
    """MAP_BINS address bins over [lo, hi): start, width, the group of most live bytes, no site, live and
    free bytes, the largest gap (each block and gap counted in the bin of its start)."""
    width = max(1, -(-(hi - lo) // MAP_BINS))
    edges = U64(lo) + U64(width) * np.arange(MAP_BINS, dtype=U64)
    b = np.minimum((addr[mine] - U64(lo)) // U64(width), MAP_BINS - 1).astype(np.int64)
    live = np.bincount(b, weights=size[mine], minlength=MAP_BINS).astype(np.int64)
    gb = np.minimum((g_addr[gm] - U64(lo)) // U64(width), MAP_BINS - 1).astype(np.int64)
    free = np.bincount(gb, weights=g_size[gm], minlength=MAP_BINS).astype(np.int64)
    gap = np.zeros(MAP_BINS, np.int64)
    np.maximum.at(gap, gb, g_size[gm])
    top = _top_group(b, size[mine], group[mine], MAP_BINS)
    w = np.array([max(0, min(width, hi - int(e))) for e in edges.tolist()], np.int64)
    return edges, w, top, None, live, free, gap


def _top_group(b, size, group, n: int) -> np.ndarray:
    """Per bin (``b``: each block's bin) the group holding most live bytes (-1: none)."""
    top = np.full(n, -1, np.int64)
    if b.size:
        span = int(group.max()) + 2
        key = b * span + group + 1
        u, inv = np.unique(key, return_inverse=True)
        by = np.bincount(inv, weights=size)
        best = np.lexsort((-by, u // span))
        ub = u[best] // span
        firsts = np.r_[True, ub[1:] != ub[:-1]]
        top[ub[firsts]] = (u[best] % span - 1)[firsts]
    return top


def _segment_bins(rs: np.ndarray, starts, ends, j, size, group, g_range, g_size) -> tuple:
    """The ranges ``rs`` (ascending) as at most MAP_BINS segment bins of consecutive ranges: first address, reserved
    bytes, the group of most live bytes, the number of ranges, live and free bytes, the largest gap."""
    n = rs.size
    k = min(MAP_BINS, n)
    which = np.full(starts.size, -1, np.int64)
    which[rs] = np.arange(n) * k // n  # the bin of each binned range
    reserved = np.bincount(which[rs], weights=(ends[rs] - starts[rs]).astype(np.float64), minlength=k).astype(np.int64)
    count = np.bincount(which[rs], minlength=k)
    bj = which[np.maximum(j, 0)]
    mine = (j >= 0) & (bj >= 0)
    live = np.bincount(bj[mine], weights=size[mine], minlength=k).astype(np.int64)
    bg = which[np.maximum(g_range, 0)]
    gm = (g_range >= 0) & (bg >= 0)
    free = np.bincount(bg[gm], weights=g_size[gm], minlength=k).astype(np.int64)
    gap = np.zeros(k, np.int64)
    np.maximum.at(gap, bg[gm], g_size[gm])
    first = np.zeros(k, U64)
    first[which[rs][::-1]] = starts[rs][::-1]  # the first range's start of each bin
    top = _top_group(bj[mine], size[mine], group[mine], k)
    return first, reserved, top, None, live, free, gap, count
