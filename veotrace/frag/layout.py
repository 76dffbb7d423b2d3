"""Where and how memory is laid out: hot address zones, address alignment and the stride between allocations.

All three are mergeable partial aggregates fed batch by batch (``Layout.add``), so their memory is
bounded by the zones touched and ``MAX_STRIDES`` distinct strides, not by the log length.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np

from veotrace.defaults import FRAGMENTATION_MAX_GAP_BYTES as DEFAULT_MAX_GAP
from veotrace.defaults import FRAGMENTATION_ZONE_BYTES as DEFAULT_ZONE_BYTES

#: Alignments whose share of allocation addresses is reported: 64 B (a cache-line sector pair),
#: 512 B (the CUDA caching allocator's rounding), 2 MiB (large pages and large segments).
ALIGNMENTS = (64, 512, 2 << 20)
#: Distinct stride values counted exactly; strides first seen after that go to ``other``.
MAX_STRIDES = 4096
TOP_STRIDES = 10


def _zone_of(addr: np.ndarray, zone_bytes: int) -> np.ndarray:
    """addr // zone_bytes (a shift when zone_bytes is a power of two: uint64 division is slow)."""
    if zone_bytes & (zone_bytes - 1) == 0:
        return addr >> np.uint64(zone_bytes.bit_length() - 1)
    return addr // np.uint64(zone_bytes)


@dataclass
class Zones:
    """Per (device, zone) counts kept as sorted key arrays (key = device << 44 | zone index)."""

    zone_bytes: int
    keys: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    counts: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), np.int64))  # allocs, frees, bytes

    def add(self, device: int, addr: np.ndarray, is_alloc: np.ndarray, size: np.ndarray) -> None:
        if addr.size == 0:
            return
        zone = _zone_of(addr, self.zone_bytes)
        lo, hi = int(zone.min()), int(zone.max())
        if hi - lo < (1 << 22):  # a dense count: no sort (the usual case, one heap region per batch)
            rel = (zone - np.uint64(lo)).astype(np.int64)
            n_alloc = np.bincount(rel, weights=is_alloc, minlength=hi - lo + 1)
            n_all = np.bincount(rel, minlength=hi - lo + 1)
            nbytes = np.bincount(rel, weights=size, minlength=hi - lo + 1)
            nz = np.flatnonzero(n_all)
            key = nz.astype(np.uint64) + np.uint64(lo)
            vals = np.stack([n_alloc[nz], n_all[nz] - n_alloc[nz], nbytes[nz]], axis=1).astype(np.int64)
        else:
            key, inv = np.unique(zone, return_inverse=True)
            vals = np.stack([np.bincount(inv, weights=is_alloc), np.bincount(inv, weights=~is_alloc),
                             np.bincount(inv, weights=size)], axis=1).astype(np.int64)
        key = key | (np.uint64(device & 0xFFFFF) << np.uint64(44))
        self._merge(key, vals)

    def _merge(self, key: np.ndarray, vals: np.ndarray) -> None:
        if self.keys.size == 0:
            self.keys, self.counts = key, vals
            return
        at = np.searchsorted(self.keys, key)
        hit = at < self.keys.size
        hit[hit] = self.keys[at[hit]] == key[hit]
        np.add.at(self.counts, at[hit], vals[hit])
        if (~hit).any():
            keys = np.concatenate([self.keys, key[~hit]])
            counts = np.concatenate([self.counts, vals[~hit]])
            order = np.argsort(keys, kind="stable")
            self.keys, self.counts = keys[order], counts[order]

    def touched(self) -> int:
        return int(self.keys.size)

    def merge(self, other: Zones) -> Zones:
        if other.keys.size:
            self._merge(other.keys.copy(), other.counts.copy())
        return self

    def table_rows(self, top: int | None = None, latency=None) -> list[dict]:
        """Zones ranked by events (allocs + frees), with their share of all events and bytes."""
        events = self.counts[:, 0] + self.counts[:, 1]
        total_ev, total_b = int(events.sum()), int(self.counts[:, 2].sum())
        order = np.lexsort((self.keys, -events))
        if top:
            order = order[:top]
        rows = []
        for rank, i in enumerate(order, 1):
            key = int(self.keys[i])
            rows.append({
                "rank": rank, "device": key >> 44, "zone_start": (key & ((1 << 44) - 1)) * self.zone_bytes,
                "zone_bytes": self.zone_bytes, "zone_kind": "fixed", "events": int(events[i]), "allocs": int(self.counts[i, 0]),
                "frees": int(self.counts[i, 1]), "bytes": int(self.counts[i, 2]),
                "event_share": int(events[i]) / total_ev if total_ev else 0.0,
                "byte_share": int(self.counts[i, 2]) / total_b if total_b else None,
                **_zone_latency(latency, key),
            })
        return rows


def _zone_latency(latency, key: int) -> dict:
    if latency is None:
        return {"latency_events": None, "latency_p50_us": None, "latency_p99_us": None}
    st = latency.stats(key)
    return {"latency_events": st["n"], "latency_p50_us": st["p50_us"], "latency_p99_us": st["p99_us"]}


@dataclass
class Strides:
    """Exact counts of the differences between consecutive addresses, up to MAX_STRIDES values."""

    counts: dict = field(default_factory=dict)
    other: int = 0
    total: int = 0
    last: dict = field(default_factory=dict)  # device -> last address seen

    def add(self, device: int, addr: np.ndarray) -> None:
        if addr.size == 0:
            return
        a = addr.astype(np.int64)
        prev = self.last.get(device)
        d = np.diff(a) if prev is None else np.diff(np.r_[np.int64(prev), a])
        self.last[device] = int(a[-1])
        self.add_strides(d)

    def add_strides(self, d: np.ndarray) -> None:
        if d.size == 0:
            return
        vals, cnt = np.unique(d, return_counts=True)
        self.total += int(d.size)
        self._add_counts(vals, cnt)

    def _add_counts(self, vals: np.ndarray, cnt: np.ndarray) -> None:
        known = np.fromiter(self.counts, np.int64, len(self.counts))
        hit = np.isin(vals, known)
        for v, c in zip(vals[hit].tolist(), cnt[hit].tolist()):
            self.counts[v] += c
        room = MAX_STRIDES - len(self.counts)
        new_v, new_c = vals[~hit], cnt[~hit]
        if new_v.size > room:  # keep the most frequent new strides, count the rest as uncounted
            top = np.argsort(-new_c, kind="stable")
            self.other += int(new_c[top[room:]].sum())
            new_v, new_c = new_v[top[:room]], new_c[top[:room]]
        self.counts.update(zip(new_v.tolist(), new_c.tolist()))

    def merge(self, other: Strides) -> Strides:
        """These counts and a later piece's (its first stride was counted from ``last`` of this one)."""
        keys = np.fromiter(other.counts, np.int64, len(other.counts))
        order = np.argsort(keys)
        self._add_counts(keys[order], np.fromiter(other.counts.values(), np.int64, len(other.counts))[order])
        self.total += other.total
        self.other += other.other
        self.last.update(other.last)
        return self

    def summary(self) -> dict:
        """Top strides with their shares; ``dominant_share`` is how regular the sequence is (1 = one stride)."""
        top = sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_STRIDES]
        return {
            "strides": self.total,
            "distinct": len(self.counts) + (1 if self.other else 0),
            "dominant_stride_bytes": top[0][0] if top else None,
            "dominant_share": top[0][1] / self.total if top else None,
            "top": [{"stride_bytes": v, "count": c, "share": c / self.total} for v, c in top],
            "uncounted": self.other,
            "histogram_log2": self._log2_histogram(),
        }

    def _log2_histogram(self) -> list[dict]:
        """Counts by sign and power-of-two magnitude: stride s in (2**(b-1), 2**b] goes to bin b."""
        hist: dict[tuple[int, int], int] = {}
        for v, c in self.counts.items():
            sign = (v > 0) - (v < 0)
            b = 0 if v == 0 else int(abs(v) - 1).bit_length()
            hist[(sign, b)] = hist.get((sign, b), 0) + c
        return [{"sign": s, "log2_bytes": b, "count": c} for (s, b), c in sorted(hist.items())]


def stride_summary(addresses: np.ndarray) -> dict:
    """Stride histogram of one address sequence (a ``.npy`` of per-frame addresses)."""
    st = Strides()
    st.add_strides(np.diff(np.asarray(addresses).astype(np.int64)))
    return st.summary()


@dataclass
class Layout:
    """Zones, alignment and strides over the alloc/free rows of every batch.

    ``zone_bytes="segment"``: zones per segment or touched range (``zones.SegmentZones``), fed by the
    replay through ``zones.add`` with the segments of the moment; else fixed-width zones fed here.
    """

    zone_bytes: int | str = DEFAULT_ZONE_BYTES
    zones: Zones = None  # type: ignore[assignment]
    strides: Strides = field(default_factory=Strides)
    aligned: np.ndarray = field(default_factory=lambda: np.zeros(len(ALIGNMENTS), np.int64))
    allocs: int = 0
    bins: tuple = ()
    zone_latency: object = None  # LatencyHist of alloc/free latency per zone, when a latency column is read
    bin_latency: object = None  # LatencyHist of alloc latency per request-size bin

    max_gap: int = DEFAULT_MAX_GAP

    @property
    def by_segment(self) -> bool:
        return self.zone_bytes == "segment"

    def __post_init__(self) -> None:
        if self.zones is None:
            from veotrace.frag.zones import SegmentZones

            self.zones = SegmentZones(self.max_gap) if self.by_segment else Zones(self.zone_bytes)

    def add(self, device: int, addr: np.ndarray, is_alloc: np.ndarray, size: np.ndarray,
            lat_us: np.ndarray | None = None) -> None:
        """Alloc/free rows (time order) of one device with their addresses (and latencies, when known)."""
        if not self.by_segment:
            self.zones.add(device, addr, is_alloc, size)
        if lat_us is not None:
            self._add_latency(device, addr, is_alloc, size, lat_us)
        a = addr[is_alloc]
        self.allocs += int(a.size)
        for i, al in enumerate(ALIGNMENTS):  # powers of two: a mask, not a division
            self.aligned[i] += int(((a & np.uint64(al - 1)) == 0).sum())
        self.strides.add(device, a)

    def _add_latency(self, device, addr, is_alloc, size, lat_us) -> None:
        from veotrace.frag.latency import LatencyHist

        if self.zone_latency is None:
            self.zone_latency, self.bin_latency = LatencyHist(), LatencyHist()
        if not self.by_segment:
            key = _zone_of(addr, self.zone_bytes) | (np.uint64(device & 0xFFFFF) << np.uint64(44))
            self.zone_latency.add(key, lat_us)
        s, lat = size[is_alloc], lat_us[is_alloc]
        for i, (lo, hi) in enumerate(self.bins):
            m = (s >= lo) if hi is None else (s >= lo) & (s <= hi)
            self.bin_latency.add(np.full(int(m.sum()), i, np.int64), lat[m])

    def latency_by_bin(self) -> list[dict] | None:
        """Alloc latency by the size bin of the request (the bins of the free-block counts)."""
        if self.bin_latency is None:
            return None
        return [{"lo_bytes": lo, "hi_bytes": hi, **self.bin_latency.stats(i)} for i, (lo, hi) in enumerate(self.bins)]

    def merge(self, other: Layout) -> Layout:
        """These counts and a later piece's (engines)."""
        self.zones.merge(other.zones)
        self.strides.merge(other.strides)
        self.aligned = self.aligned + other.aligned
        self.allocs += other.allocs
        for name in ("zone_latency", "bin_latency"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if theirs is not None:
                setattr(self, name, copy.deepcopy(theirs) if mine is None else mine.merge(theirs))
        return self

    def alignment(self) -> list[dict]:
        return [{"alignment_bytes": al, "aligned": int(n), "share": int(n) / self.allocs if self.allocs else None}
                for al, n in zip(ALIGNMENTS, self.aligned)]
