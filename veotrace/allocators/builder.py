"""Requests from ``alloc_events/1`` batches, built batch by batch: pairing, release points, device events.

:class:`RequestBuilder` takes the batches in order; allocations still live at the end of a batch are
carried into the next, so a log is read as a stream and only the request arrays (8 bytes per value) and
the live set are kept, never the whole table. :func:`build_requests` builds all of a table or a
reader's batches at once.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from veotrace.allocators.requests import (
    MAX_UNKNOWN_FREES,
    NO_ADDR,
    NO_TIME,
    REQ_FREE,
    REQ_MALLOC,
    REQ_RELEASE,
    REQ_SEED,
    Requests,
    check,
)
from veotrace.frag.decode import by_device
from veotrace.replay_limits import check_block_sizes
from veotrace.schemas.events import DEVICE_OPS, RELEASE_OPS

#: Row categories of the input (private to the builder; requests.REQ_* are what it makes of them): other (ignored,
#: counted), alloc, free, free_requested (neither), device allocation, release.
_ROW_OTHER, _ROW_ALLOC, _ROW_FREE, _ROW_PENDING, _ROW_DEVICE, _ROW_RELEASE = range(6)


def _column(batch, name: str, fill: int, dtype) -> np.ndarray:
    col = batch.column(name)
    if col.null_count:
        col = pc.fill_null(col, pa.scalar(fill, col.type))
    return col.to_numpy(zero_copy_only=False).astype(dtype, copy=False)


def _keys(batch, name: str) -> tuple[np.ndarray, np.ndarray]:
    """The pairing key of every row as uint64, and where it is present. The address column as it is; an id
    column by value: integers as they are, floats by their bits, text by its hash (stable within a run)."""
    if name == "address":
        key = _column(batch, "address", NO_ADDR, np.uint64)
        return key, key != NO_ADDR
    col = batch.column(name)
    valid = ~col.is_null().to_numpy(zero_copy_only=False)
    if pa.types.is_integer(col.type):
        return _column(batch, name, 0, np.int64).view(np.uint64), valid
    if pa.types.is_floating(col.type):
        return _column(batch, name, 0, np.float64).view(np.uint64), valid
    col = col.cast(pa.string()).dictionary_encode() if not pa.types.is_dictionary(col.type) else col
    hashes = np.array([hash(v) & NO_ADDR for v in col.dictionary.to_pylist()] or [0], np.uint64)
    return hashes[col.indices.fill_null(0).to_numpy(zero_copy_only=False)], valid


def _pair(device, key, is_free):
    """For rows in replay order, sorted (stably) by (device, key): each free's alloc (-1: unknown), allocs
    made while the key was live, and the allocs still live at the end. A free pairs with the row just
    before it at its key if that is an alloc."""
    one_device = len(device) == 0 or device.min() == device.max()
    order = np.argsort(key, kind="stable") if one_device else np.lexsort((key, device))
    d, a, f = device[order], key[order], is_free[order]
    same = np.zeros(len(order), bool)
    same[1:] = (d[1:] == d[:-1]) & (a[1:] == a[:-1])
    prev_alloc = np.zeros(len(order), bool)
    prev_alloc[1:] = ~f[:-1]
    partner = np.full(len(order), -1, np.int64)
    hit = same & f & prev_alloc
    partner[np.flatnonzero(hit)] = order[np.flatnonzero(hit) - 1]
    out = np.full(len(order), -1, np.int64)
    out[order] = partner
    realloc = np.zeros(len(order), bool)
    realloc[order] = same & ~f & prev_alloc
    last = np.ones(len(order), bool)
    last[:-1] = ~same[1:]
    live = np.zeros(len(order), bool)
    live[order] = last & ~f
    return out, realloc, live


class RequestBuilder:
    """Requests from batches fed in order (:meth:`add`), then :meth:`finish`.

    Args:
        seeds: (device, address, requested size, stream) of blocks live when recording began; they
            become REQ_SEED requests at the start, timed ``t0``.
        use_releases: turn recorded segment_free/segment_unmap runs into REQ_RELEASE requests.
        free_op: the op that frees ("free_completed" or "free_requested", besides "free"); None: decided
            as the batches come ("free_completed" from the first batch that has it).
        key: the column frees pair by (``address``, or an id column the batches carry).
    """

    def __init__(self, *, seeds=(), use_releases: bool = True, free_op: str | None = None, key: str = "address",
                 t0: int = NO_TIME) -> None:
        self.req = Requests()
        self.use_releases, self.free_op, self.key = use_releases, free_op, key
        n_seed = len(seeds)
        for d, a, sz, st in seeds:
            self.req.add(REQ_SEED, sz, st, d, -1, a, -1, t0)
        self.live_dev = np.array([s[0] for s in seeds], np.int64)
        self.live_key = np.array([s[1] for s in seeds], np.uint64)
        self.live_req = np.arange(n_seed, dtype=np.int64)
        self.n = {"allocs": 0, "frees": 0, "paired": 0, "zero_size_allocs": 0, "realloc_at_live_address": 0,
                  "ignored_ops": 0, "seeded": n_seed}
        self.requested = 0  # alloc and paired free requests so far (release points not counted)
        self.last = None  # (device, requests before it, request index or -1 - row in the batch) of the last release
        self.pending: dict[int, list[list]] = {}  # device -> recorded entries waiting for its next alloc
        self.recorded: list[list] = []
        self.released: list[list] = []

    def _categories(self, batch) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """Category of every row, and the op of every row as an index into the returned names."""
        col = batch.column("op")
        if not pa.types.is_dictionary(col.type):
            col = col.dictionary_encode()
        names = col.dictionary.to_pylist()
        if self.free_op is None and "free_completed" in names:
            self.free_op = "free_completed"
        free_op = self.free_op or "free_requested"
        table = np.array([_ROW_ALLOC if n == "alloc" else _ROW_FREE if n in ("free", free_op) else
                          _ROW_PENDING if n == "free_requested" else _ROW_DEVICE if n in DEVICE_OPS else
                          _ROW_RELEASE if n in RELEASE_OPS else _ROW_OTHER for n in names] or [_ROW_OTHER], np.int8)
        codes = col.indices.to_numpy(zero_copy_only=False)
        return table[codes], codes, names

    def add(self, batch) -> None:
        n_rows = batch.num_rows
        if not n_rows:
            return
        cat, codes, names = self._categories(batch)
        size = _column(batch, "size_bytes", 0, np.int64)
        check_block_sizes(size, batch)
        key, has_key = _keys(batch, self.key)
        stream, device = _column(batch, "stream", 0, np.int64), _column(batch, "device", 0, np.int64)
        seq, ts = _column(batch, "seq", -1, np.int64), _column(batch, "ts_ns", NO_TIME, np.int64)
        alloc_any, is_free = cat == _ROW_ALLOC, cat == _ROW_FREE
        is_alloc = alloc_any & (size > 0)
        n = self.n
        n["allocs"] += int(is_alloc.sum())
        n["frees"] += int(is_free.sum())
        n["zero_size_allocs"] += int((alloc_any & ~is_alloc).sum())
        n["ignored_ops"] += int((cat == _ROW_OTHER).sum())
        # pair with the allocations carried from earlier batches (placed at positions -k..-1) by (device, key)
        rows = np.flatnonzero((is_alloc | is_free) & has_key)
        nc = len(self.live_req)
        dev_all = np.concatenate([self.live_dev, device[rows]])
        key_all = np.concatenate([self.live_key, key[rows]])
        partner, realloc, live = _pair(dev_all, key_all, np.concatenate([np.zeros(nc, bool), is_free[rows]]))
        got = partner[nc:] >= 0
        n["paired"] += int(got.sum())
        n["realloc_at_live_address"] += int(realloc[nc:].sum())
        paired = np.zeros(n_rows, bool)
        paired[rows[got]] = True
        req_rows = np.flatnonzero(is_alloc | paired)
        releases, found = self._device_events(cat, codes, names, req_rows, device, size)
        rows_all = np.sort(np.concatenate([req_rows, list(releases)])).astype(np.int64) if releases else req_rows
        kinds = np.where(is_alloc[rows_all], REQ_MALLOC, REQ_FREE)
        is_rel = np.isin(rows_all, list(releases)) if releases else None
        if releases:
            kinds[is_rel] = REQ_RELEASE
        base = self.req.offset + len(self.req)
        row_req = np.full(n_rows, -1, np.int64)
        row_req[rows_all] = np.arange(base, base + len(rows_all))
        combined_req = np.concatenate([self.live_req, row_req[rows]])  # request index of every paired-list entry
        pair = np.full(len(rows_all), -1, np.int64)
        pair[kinds == REQ_FREE] = combined_req[partner[nc:][got]]  # the REQ_FREE requests are the paired rows, in row order
        rsize = np.where(kinds == REQ_MALLOC, size[rows_all], 0)
        if releases:
            rsize[is_rel] = [releases[r] for r in rows_all[is_rel].tolist()]
        addr = key if self.key == "address" else _column(batch, "address", NO_ADDR, np.uint64)
        self.req.extend(kind=kinds, size=rsize, stream=stream[rows_all], device=device[rows_all], pair=pair,
                        addr=addr[rows_all], seq=seq[rows_all], ts_ns=ts[rows_all])
        if self.last is not None and self.last[2] < 0:  # the batch's last release point, now with its request index
            self.last = (self.last[0], self.last[1], int(row_req[-1 - self.last[2]]))
        self.live_dev, self.live_key, self.live_req = dev_all[live], key_all[live], combined_req[live]
        self.requested += len(req_rows)
        self._resolve(found, device, is_alloc, row_req)

    def _device_events(self, cat, codes, names, req_rows, device, size):
        """Walk the (few) segment rows of a batch. Returns {release row: 1 if an OOM retry else 0} and the
        recorded entries (row, entry) waiting for the next alloc of their device."""
        releases: dict[int, int] = {}
        found = []
        for row in np.flatnonzero(cat >= _ROW_DEVICE).tolist():
            d = int(device[row])
            before = self.requested + int(np.searchsorted(req_rows, row))
            entry = [d, None, names[codes[row]], int(size[row])]
            if cat[row] == _ROW_RELEASE:
                self.released.append(entry)
                if self.use_releases and (self.last is None or self.last[:2] != (d, before)):
                    releases[row] = 0
                    self.last = (d, before, -1 - row)
            else:
                self.recorded.append(entry)
                if self.last is not None and self.last[:2] == (d, before):
                    # released then allocated in one malloc: the retry after a failed device allocation
                    if self.last[2] < 0:
                        releases[-1 - self.last[2]] = 1
                    else:
                        self.req.size[self.last[2] - self.req.offset] = 1
            found.append((row, entry))
        return releases, found

    def _resolve(self, found, device, is_alloc, row_req) -> None:
        """Name the op of each segment row and give it the request index of the next alloc of its device."""
        alloc_rows = np.flatnonzero(is_alloc)
        if not (found or self.pending):
            return
        # the alloc rows grouped by device (one stable sort, rows ascending within a device), so each
        # lookup is a bisection, not a pass over the batch per device
        allocs_of = {d: rows for d, (rows,) in by_device(np.asarray(device)[alloc_rows], (alloc_rows,))}
        empty = alloc_rows[:0]
        for d in [d for d in self.pending if d in allocs_of]:
            first = allocs_of[d][0]
            for entry in self.pending.pop(d):
                entry[1] = int(row_req[first])
        for row, entry in found:
            d = entry[0]
            later = allocs_of.get(d, empty)
            i = int(np.searchsorted(later, row))
            if i < len(later):
                entry[1] = int(row_req[later[i]])
            else:
                self.pending.setdefault(d, []).append(entry)

    def take(self, final: bool = False) -> Requests:
        """The requests added since the last take, as a chunk; they are dropped here. A release point that a
        device allocation in the next batch may still turn into an OOM retry is held back (unless ``final``)."""
        keep = len(self.req)
        if not final and self.last is not None and self.last[1] == self.requested:
            keep = self.last[2] - self.req.offset
        if keep == len(self.req):
            chunk, self.req = self.req, Requests(offset=self.req.offset + keep)
        else:
            chunk, self.req = self.req.split(keep)
        return chunk

    def finish(self, max_unknown_frees: float = MAX_UNKNOWN_FREES) -> Requests:
        """The requests not taken, with the counts, recorded device events and notes of the whole read.

        Raises:
            AnalysisError: no allocation with a size, or too many frees of unknown blocks.
        """
        req, n = self.req, self.n
        for entries in self.pending.values():
            for entry in entries:
                entry[1] = req.offset + len(req)
        req.recorded = [(d, r, op, s) for d, r, op, s in self.recorded]
        req.released = [(d, r, op, s) for d, r, op, s in self.released]
        req.counts = {"allocs": n["allocs"], "frees": n["frees"], "unknown_frees": n["frees"] - n["paired"],
                      "zero_size_allocs": n["zero_size_allocs"],
                      "realloc_at_live_address": n["realloc_at_live_address"], "ignored_ops": n["ignored_ops"],
                      "seeded": n["seeded"]}
        return check(req, max_unknown_frees, self.key)


def build_requests(data: pa.Table | Iterable[pa.RecordBatch], *, seeds: list[tuple[int, int, int, int]] = (),
                   max_unknown_frees: float = MAX_UNKNOWN_FREES, use_releases: bool = True,
                   key: str = "address") -> Requests:
    """Requests from an ``alloc_events/1`` table, or from its batches as a reader yields them (streamed).

    Args:
        seeds: (device, address, requested size, stream) of blocks live when recording began (from
            :func:`veotrace.allocators.seed.rebuild`); they become REQ_SEED requests at the start.
        max_unknown_frees: largest share of frees that may name no live allocation.
        use_releases: turn recorded segment_free/segment_unmap runs into REQ_RELEASE requests.
        key: the column allocs and frees pair by (default the address).

    Raises:
        AnalysisError: no allocation with a size, or too many frees of unknown blocks.
    """
    free_op, t0, batches = None, NO_TIME, data
    if isinstance(data, pa.Table):
        free_op = "free_completed" if "free_completed" in data.column("op").unique().to_pylist() else "free_requested"
        ts = data.column("ts_ns").drop_null()
        t0 = int(ts[0].as_py()) if len(ts) else NO_TIME
        batches = data.to_batches()
    builder = RequestBuilder(seeds=seeds, use_releases=use_releases, free_op=free_op, key=key, t0=t0)
    for batch in batches:
        builder.add(batch)
    return builder.finish(max_unknown_frees)


