"""Hot zones that follow the allocator's own layout (``--zone-bytes segment``): one zone per segment,
or, where no segment holds an address, one per address range found as the gap metric finds them.

- **segment**: where the source knows the reserved segments (PyTorch snapshots, logs with
  ``segment_alloc``/``segment_map`` events), an alloc or free belongs to the segment holding its
  address *at the time of the event* (mapped pages of an expandable segment that touch form one
  range, as in ``state``). A zone is keyed by its segment's start; ``zone_bytes`` is the segment's
  size when it was last touched.
- **range**: every other event (logs without segments, blocks outside any segment) belongs to a
  range of the address space the trace touched: the union of the extents [address, address + size)
  of its allocs and frees, where neighbours closer than ``--max-gap`` join one range (the rule by
  which ``metrics.free_blocks`` groups live blocks). Ranges only grow and join as the trace goes
  on, so a range's counts are the sums of the ranges it absorbed: exact, and bounded by the
  number of ranges, not by the log length.

Both are mergeable partials (``merge``) for the engines.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

ZONE_KINDS = ("fixed", "segment", "range")


def _hist_rows(keys: np.ndarray, lat_us: np.ndarray, n_keys: int) -> np.ndarray:
    """Latency histogram rows per key index (0..n_keys-1), NaN and negative latencies left out."""
    from veotrace.frag.latency import N_BINS, bin_of

    ok = np.isfinite(lat_us) & (lat_us >= 0)
    flat = np.bincount(keys[ok] * N_BINS + bin_of(lat_us[ok]), minlength=n_keys * N_BINS)
    return flat.reshape(n_keys, N_BINS)


@dataclass
class _Ranges:
    """Disjoint address ranges of one device (sorted), with counts (allocs, frees, bytes) and latency rows."""

    start: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))  # addresses: unsigned 64-bit
    end: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    counts: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), np.int64))
    hist: np.ndarray | None = None

    def add_events(self, addr: np.ndarray, is_alloc: np.ndarray, size: np.ndarray, lat, max_gap: int) -> None:
        """Alloc/free rows: their extents [address, address + size) grouped into ranges first (one packed
        sort, counts by bincount), then joined into these."""
        from veotrace.frag.match import _sort_rows

        order, sa, _ = _sort_rows(addr, np.zeros(addr.size, np.int64))
        s = sa.astype(np.uint64)
        e = s + np.maximum(size[order], 1).astype(np.uint64)
        new = np.ones(s.size, bool)
        new[1:] = _gap(s[1:], np.maximum.accumulate(e)[:-1]) >= max_gap
        group = np.cumsum(new) - 1
        n = int(group[-1]) + 1
        cuts = np.flatnonzero(new)
        n_all = np.bincount(group, minlength=n)
        n_alloc = np.bincount(group, weights=is_alloc[order], minlength=n).astype(np.int64)
        nbytes = np.bincount(group, weights=size[order], minlength=n).astype(np.int64)
        counts = np.stack([n_alloc, n_all - n_alloc, nbytes], axis=1)
        hist = None if lat is None else _hist_rows(group, lat[order], n)
        self.add(s[cuts], np.maximum.reduceat(e, cuts), counts, hist, max_gap)

    def add(self, start, end, counts, hist, max_gap: int) -> None:
        """Join ranges ``start``/``end`` (with their ``counts`` and latency ``hist`` rows) into these."""
        s = np.concatenate([self.start, np.asarray(start, np.uint64)])
        e = np.concatenate([self.end, np.asarray(end, np.uint64)])
        c = np.concatenate([self.counts, counts])
        h = None if self.hist is None and hist is None else np.concatenate(
            [_or_zeros(self.hist, self.start.size), _or_zeros(hist, start.size)])
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
        reach = np.maximum.accumulate(e)
        new = np.ones(s.size, bool)
        new[1:] = _gap(s[1:], reach[:-1]) >= max_gap
        group = np.cumsum(new) - 1
        n = int(group[-1]) + 1 if group.size else 0
        self.start = s[new]
        self.end = np.maximum.reduceat(e, np.flatnonzero(new)) if n else e[:0]
        self.counts = np.zeros((n, 3), np.int64)
        np.add.at(self.counts, group, c[order])
        if h is not None:
            self.hist = np.zeros((n, h.shape[1]), np.int64)
            np.add.at(self.hist, group, h[order])


def _gap(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a - b of uint64 addresses as int64 (negative where ranges overlap): addresses stay unsigned 64-bit
    (issue 47 item 12), an int64 cast turned those at or above 2**63 negative."""
    return (a - b).view(np.int64)


def _or_zeros(h, n):
    from veotrace.frag.latency import N_BINS

    return np.zeros((n, N_BINS), np.int64) if h is None else h


@dataclass
class SegmentZones:
    """Zones per segment (and per touched address range outside segments), for every device."""

    max_gap: int
    segs: dict = field(default_factory=dict)  # (device, start) -> [allocs, frees, bytes, size, hist or None]
    ranges: dict = field(default_factory=dict)  # device -> _Ranges

    def add_in_time(self, d: int, st, code, addr, size, lat, p: np.ndarray, seg_pos: np.ndarray) -> None:
        """The alloc/free rows ``p`` (time order) of one device's batch, each in the segment holding it at
        its time: the batch's segment events ``seg_pos`` are applied in order to a scratch copy of the
        segments of ``st`` (a ``DeviceState``, not changed).

        A caching allocator reserves a segment per stream, so a trace may hold many segments and a
        segment event between every two rows: the rows between two segment events are placed by a
        bisection each when they are few next to the segments, by one search over the segments' arrays
        when many (O(segments), paid for by as many rows); the counts are then added once per batch."""
        from veotrace.frag.state import OP_ALLOC, DeviceState, Segment, segment_at

        scratch = DeviceState(segments=[Segment(x.start, x.end, x.expandable) for x in st.segments])
        a_all = addr[p].astype(np.uint64)
        lo, hi = np.zeros(p.size, np.uint64), np.zeros(p.size, np.uint64)  # the row's segment (uint64 addresses)
        placed = np.zeros(p.size, bool)  # a segment holds the row

        def place(a: int, b: int) -> None:
            segs = scratch.segments
            if b <= a or not segs:
                return
            if (b - a) * 8 >= len(segs):
                s, e = scratch.segment_arrays()
                x = a_all[a:b]
                i = np.maximum(np.searchsorted(s, x, side="right").astype(np.int64) - 1, 0)
                ok = (x >= s[i]) & (x < e[i])
                lo[a:b], hi[a:b], placed[a:b] = s[i], e[i], ok
                return
            for k in range(a, b):
                seg = segment_at(segs, int(a_all[k]))
                if seg is not None:
                    lo[k], hi[k], placed[k] = seg.start, seg.end, True

        prev = 0
        for c, sp in zip(np.searchsorted(p, seg_pos).tolist(), seg_pos.tolist()):
            place(prev, c)
            scratch.apply_segment(int(code[sp]), int(addr[sp]), int(size[sp]))
            prev = c
        place(prev, p.size)
        if p.size:
            self._add_placed(d, addr[p], code[p] == OP_ALLOC, size[p], None if lat is None else lat[p], lo, hi,
                             placed)

    def _add_placed(self, device, addr, is_alloc, size, lat, lo, hi, placed) -> None:
        """Rows (time order) whose segment is [lo, hi) where ``placed`` (elsewhere none holds them)."""
        inside = placed
        if inside.any():
            keys, idx = np.unique(lo[inside], return_inverse=True)
            last = np.zeros(keys.size, np.int64)  # each segment's last row: its size when last touched
            np.maximum.at(last, idx, np.arange(idx.size))
            self._add_segments(device, idx, is_alloc[inside], size[inside], None if lat is None else lat[inside],
                               keys, hi[inside][last])
        outside = ~inside
        if outside.any():
            sel = (lambda x: x) if outside.all() else (lambda x: x[outside])
            self.ranges.setdefault(device, _Ranges()).add_events(
                sel(addr), sel(is_alloc), sel(size), None if lat is None else sel(lat), self.max_gap)

    def _add_segments(self, device, idx, is_alloc, size, lat, seg_start, seg_end) -> None:
        n_seg = seg_start.size  # counts by segment index (the segments the rows touch), no sort
        n_all = np.bincount(idx, minlength=n_seg)
        n_alloc = np.bincount(idx, weights=is_alloc, minlength=n_seg)
        nbytes = np.bincount(idx, weights=size, minlength=n_seg)
        hist = None if lat is None else _hist_rows(idx, lat, n_seg)
        for j in np.flatnonzero(n_all).tolist():
            key = (device, int(seg_start[j]))
            cur = self.segs.setdefault(key, [0, 0, 0, 0, None])
            cur[0] += int(n_alloc[j])
            cur[1] += int(n_all[j] - n_alloc[j])
            cur[2] += int(nbytes[j])
            cur[3] = int(seg_end[j] - seg_start[j])
            if hist is not None:
                cur[4] = hist[j].copy() if cur[4] is None else cur[4] + hist[j]

    def merge(self, other: SegmentZones) -> SegmentZones:
        """These zones then ``other``'s (a later piece of the same trace)."""
        for key, (na, nf, nb, sz, h) in other.segs.items():
            cur = self.segs.setdefault(key, [0, 0, 0, 0, None])
            cur[0], cur[1], cur[2], cur[3] = cur[0] + na, cur[1] + nf, cur[2] + nb, sz
            if h is not None:
                cur[4] = h.copy() if cur[4] is None else cur[4] + h
        for d, r in other.ranges.items():
            self.ranges.setdefault(d, _Ranges()).add(r.start, r.end, r.counts, r.hist, self.max_gap)
        return self

    def touched(self) -> int:
        return len(self.segs) + sum(r.start.size for r in self.ranges.values())

    def table_rows(self, top: int | None = None) -> list[dict]:
        """Zones ranked by events (allocs + frees), then by device and start; shares of all events and bytes."""
        from veotrace.frag.latency import stats_of_row

        zones = [(d, s, "segment", na, nf, nb, sz, h) for (d, s), (na, nf, nb, sz, h) in self.segs.items()]
        for d, r in self.ranges.items():
            for i in range(r.start.size):
                na, nf, nb = (int(x) for x in r.counts[i])
                zones.append((d, int(r.start[i]), "range", na, nf, nb, int(r.end[i] - r.start[i]),
                              None if r.hist is None else r.hist[i]))
        total_ev = sum(z[3] + z[4] for z in zones)
        total_b = sum(z[5] for z in zones)
        zones.sort(key=lambda z: (-(z[3] + z[4]), z[0], z[1]))
        has_lat = any(z[7] is not None for z in zones)
        rows = []
        for rank, (d, s, kind, na, nf, nb, sz, h) in enumerate(zones[:top] if top else zones, 1):
            st = stats_of_row(h) if has_lat else None
            rows.append({
                "rank": rank, "device": d, "zone_start": s, "zone_bytes": sz, "zone_kind": kind,
                "events": na + nf, "allocs": na, "frees": nf, "bytes": nb,
                "event_share": (na + nf) / total_ev if total_ev else 0.0,
                "byte_share": nb / total_b if total_b else None,
                "latency_events": None if st is None else st["n"],
                "latency_p50_us": None if st is None else st["p50_us"],
                "latency_p99_us": None if st is None else st["p99_us"],
            })
        return rows
