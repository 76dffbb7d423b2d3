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

from veotrace.allocators import releases as rl
from veotrace.allocators.conf import TorchConf
from veotrace.allocators.driver import learn
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
from veotrace.schemas.events import DEVICE_OPS, RELEASE_OPS, Op

#: Row categories of the input (private to the builder; requests.REQ_* are what it makes of them): other (ignored,
#: counted), alloc, free, free_requested (neither), device allocation, release, a recorded OOM.
_ROW_OTHER, _ROW_ALLOC, _ROW_FREE, _ROW_PENDING, _ROW_DEVICE, _ROW_RELEASE, _ROW_OOM = range(7)


class _Run:
    """A run of releases of one device with no request between them (one REQ_RELEASE): its segments
    (address, bytes, stream, unmapped pages?), and what follows it, for :func:`releases.classify`."""

    __slots__ = ("device", "before", "req", "segs", "in_malloc", "then_oom", "next_alloc", "kind", "level", "could_fail",
                 "verdicts", "decided")

    def __init__(self, device: int, before: int, row: int, level: int) -> None:
        self.device, self.before, self.req = device, before, -1 - row  # the request index once known
        self.level = level  # the device's level of segment bytes before the run
        self.could_fail = True  # could the malloc after it have failed for want of memory (releases.classify)
        self.segs: list[tuple[int, int, int, bool]] = []
        self.in_malloc = self.then_oom = False
        self.next_alloc: tuple[int, int] | None = None
        self.kind = rl.REL_EMPTY_CACHE
        self.verdicts: set[str] = set()  # what the frames recorded with its entries say (releases.frames_verdict)
        self.decided = "rule"


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
        use_releases: follow the releases inside a malloc (OOM retries, garbage collection); without it only
            the program's own empty_cache() calls are replayed.
        conf: the settings the trace was recorded with (which releases could have been inside a malloc).
        peaks: per device, the highest reserved level the trace reached (segment bytes allocated less
            released, from its start), when known before the read (a whole table): a cudaMalloc that would
            have stayed under it cannot have failed for want of memory.
        free_op: the op that frees ("free_completed" or "free_requested", besides "free"); None: decided
            as the batches come ("free_completed" from the first batch that has it).
        key: the column frees pair by (``address``, or an id column the batches carry).
    """

    def __init__(self, *, seeds=(), use_releases: bool = True, free_op: str | None = None, key: str = "address",
                 t0: int = NO_TIME, conf: TorchConf | None = None, peaks: dict[int, int] | None = None,
                 frames: dict[int, str] | None = None, segments=()) -> None:
        self.req = Requests()
        self.segments = [(s[0], s[1], s[2]) for s in segments]  # (device, address, bytes) live before the trace
        self.frames = frames or {}  # seq -> what the frames of that release say (releases.release_frames)
        self.use_releases, self.free_op, self.key = use_releases, free_op, key
        self.conf = conf or TorchConf()
        self.peaks, self.level = peaks, {}  # level: per device, segment bytes allocated less released so far
        n_seed = len(seeds)
        for d, a, sz, st in seeds:
            self.req.add(REQ_SEED, sz, st, d, -1, a, -1, t0)
        self.live_dev = np.array([s[0] for s in seeds], np.int64)
        self.live_key = np.array([s[1] for s in seeds], np.uint64)
        self.live_req = np.arange(n_seed, dtype=np.int64)
        self.n = {"allocs": 0, "frees": 0, "paired": 0, "zero_size_allocs": 0, "realloc_at_live_address": 0,
                  "ignored_ops": 0, "seeded": n_seed}
        self.requested = 0  # alloc and paired free requests so far (release points not counted)
        self.last: _Run | None = None  # the last run of releases
        self.runs: list[_Run] = []  # every run, in trace order
        self.open: list[_Run] = []  # runs inside a malloc candidate, waiting for that malloc's request
        self.pending: dict[int, list[list]] = {}  # device -> recorded entries waiting for its next alloc
        self.recorded: list[list] = []
        self.released: list[list] = []
        self.seg_entries: list[tuple[int, str, int, int]] = []  # (device, op, address, bytes): driver.learn's

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
                          _ROW_RELEASE if n in RELEASE_OPS else _ROW_OOM if n == Op.OOM else _ROW_OTHER
                          for n in names] or [_ROW_OTHER], np.int8)
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
        addr = key if self.key == "address" else _column(batch, "address", NO_ADDR, np.uint64)
        alloc_any, is_free = cat == _ROW_ALLOC, cat == _ROW_FREE
        is_alloc = alloc_any & (size > 0)
        n = self.n
        n["allocs"] += int(is_alloc.sum())
        n["frees"] += int(is_free.sum())
        n["zero_size_allocs"] += int((alloc_any & ~is_alloc).sum())
        n["ignored_ops"] += int(((cat == _ROW_OTHER) | (cat == _ROW_OOM)).sum())
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
        new_runs, found = self._device_events(cat, codes, names, req_rows, device, size, stream, addr, seq)
        rel_rows = np.array(sorted(new_runs), np.int64)
        rows_all = np.sort(np.concatenate([req_rows, rel_rows])).astype(np.int64) if len(rel_rows) else req_rows
        kinds = np.where(is_alloc[rows_all], REQ_MALLOC, REQ_FREE)
        is_rel = np.isin(rows_all, rel_rows) if len(rel_rows) else None
        if len(rel_rows):
            kinds[is_rel] = REQ_RELEASE
        base = self.req.offset + len(self.req)
        row_req = np.full(n_rows, -1, np.int64)
        row_req[rows_all] = np.arange(base, base + len(rows_all))
        combined_req = np.concatenate([self.live_req, row_req[rows]])  # request index of every paired-list entry
        pair = np.full(len(rows_all), -1, np.int64)
        pair[kinds == REQ_FREE] = combined_req[partner[nc:][got]]  # the REQ_FREE requests are the paired rows, in row order
        rsize = np.where(kinds == REQ_MALLOC, size[rows_all], 0)  # a release's kind is set once it is known
        self.req.extend(kind=kinds, size=rsize, stream=stream[rows_all], device=device[rows_all], pair=pair,
                        addr=addr[rows_all], seq=seq[rows_all], ts_ns=ts[rows_all])
        for row, run in new_runs.items():
            run.req = int(row_req[row])
            self._write(run)
        self.live_dev, self.live_key, self.live_req = dev_all[live], key_all[live], combined_req[live]
        self.requested += len(req_rows)
        self._resolve(found, device, is_alloc, row_req)

    def _device_events(self, cat, codes, names, req_rows, device, size, stream, addr, seq=None):
        """Walk the (few) segment and OOM rows of a batch. Returns {row: run} of the runs of releases it starts
        (each a REQ_RELEASE at that row) and the recorded entries (row, entry, run or None) waiting for the next
        alloc of their device (a device allocation right after a run names that run)."""
        new_runs: dict[int, _Run] = {}
        found = []
        for row in np.flatnonzero(cat >= _ROW_DEVICE).tolist():
            d = int(device[row])
            before = self.requested + int(np.searchsorted(req_rows, row))
            run = self.last if self.last is not None and (self.last.device, self.last.before) == (d, before) else None
            if cat[row] == _ROW_OOM:  # a malloc that failed after its retries: the releases before it were inside it
                if run is not None and not run.in_malloc:
                    run.in_malloc = run.then_oom = True
                    run.next_alloc = (int(size[row]), int(stream[row]))  # the failed request (rounded)
                    self._settle(run)
                continue
            entry = [d, None, names[codes[row]], int(size[row]), int(addr[row])]
            if entry[2] in ("segment_alloc", "segment_free") and addr[row] != NO_ADDR:
                self.seg_entries.append((d, entry[2], int(addr[row]), int(size[row])))
            level = self.level.get(d, 0)
            if cat[row] == _ROW_RELEASE:
                self.released.append(entry)
                self.level[d] = level - int(size[row])
                if run is None:
                    run = self.last = new_runs[row] = _Run(d, before, row, level)
                    self.runs.append(run)
                run.segs.append((int(addr[row]), int(size[row]), int(stream[row]), names[codes[row]] == Op.SEGMENT_UNMAP))
                said = self.frames.get(int(seq[row])) if self.frames and seq is not None else None
                if said is not None:
                    run.verdicts.add(said)
                    if said == rl.BY_EMPTY_CACHE:  # emptyCache's own stack, whatever follows
                        run.decided = "frames"
                found.append((row, entry, None))
                continue
            self.recorded.append(entry)
            self.level[d] = level + int(size[row])
            if run is not None and not run.in_malloc:  # released then allocated with no request between: one malloc?
                run.in_malloc = True
                # a cudaMalloc of this size at the level before the releases fails only past the device's memory,
                # which is at least the trace's peak
                peak = None if self.peaks is None else self.peaks.get(d)
                run.could_fail = peak is None or run.level + int(size[row]) > peak
                self.open.append(run)
                found.append((row, entry, run))
            else:
                found.append((row, entry, None))
        return new_runs, found

    def _settle(self, run: _Run) -> None:
        """Classify a run inside a malloc candidate now that what followed it is known, and write its kind
        into its REQ_RELEASE (``-1 - kind``: recorded, not followed, under ``use_releases=False``)."""
        told = rl.classify_by_frames(run.verdicts, run.segs, run.next_alloc, run.then_oom, self.conf)
        run.decided = "frames" if told is not None else "rule"
        run.kind = told if told is not None else rl.classify(run.segs, run.next_alloc, run.then_oom, self.conf,
                                                             run.could_fail)
        if run in self.open:
            self.open.remove(run)
        self._write(run)

    def _write(self, run: _Run) -> None:
        """A run's kind into its REQ_RELEASE once both are known, and the segments of a partial release
        (max_split_size retry, garbage collection) into ``Requests.rel`` for the recorded setting's replay."""
        j = run.req - self.req.offset
        if run.req < 0 or not 0 <= j < len(self.req):
            return
        self.req.size[j] = run.kind if self.use_releases or run.kind not in rl.IN_MALLOC else -1 - run.kind
        if run.kind in (rl.REL_SPLIT_RETRY, rl.REL_GC):
            for a, sz, st, _ in run.segs:
                self.req.rel.extend((run.req, a, sz, st))

    def _resolve(self, found, device, is_alloc, row_req) -> None:
        """Name the op of each segment row and give it the request index of the next alloc of its device; a
        run of releases waiting for that alloc is classified by it."""
        alloc_rows = np.flatnonzero(is_alloc)
        if not (found or self.pending):
            return
        # the alloc rows grouped by device (one stable sort, rows ascending within a device), so each
        # lookup is a bisection, not a pass over the batch per device
        allocs_of = {d: rows for d, (rows,) in by_device(np.asarray(device)[alloc_rows], (alloc_rows,))}
        empty = alloc_rows[:0]
        for d in [d for d in self.pending if d in allocs_of]:
            first = allocs_of[d][0]
            for entry, run in self.pending.pop(d):
                self._resolved(entry, run, int(row_req[first]))
        for row, entry, run in found:
            d = entry[0]
            later = allocs_of.get(d, empty)
            i = int(np.searchsorted(later, row))
            if i < len(later):
                self._resolved(entry, run, int(row_req[later[i]]))
            else:
                self.pending.setdefault(d, []).append((entry, run))

    def _resolved(self, entry: list, run: _Run | None, r: int) -> None:
        entry[1] = r
        if run is not None and not run.then_oom:
            j = r - self.req.offset
            run.next_alloc = (int(self.req.size[j]), int(self.req.stream[j]))
            self._settle(run)

    def take(self, final: bool = False) -> Requests:
        """The requests added since the last take, as a chunk; they are dropped here. A run of releases whose
        kind is not known yet (what follows it may be in the next batch) is held back, with what follows it
        (unless ``final``)."""
        keep = len(self.req)
        if final:  # device allocations with no alloc after them (the trace ends): no request to fit
            for run in list(self.open):
                self._settle(run)
        else:
            if self.last is not None and self.last.before == self.requested:
                keep = self.last.req - self.req.offset
            for run in self.open:
                keep = min(keep, run.req - self.req.offset)
        keep = max(keep, 0)
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
        for run in list(self.open):  # device allocations with no alloc after them (the trace ends): no request to fit
            self._settle(run)
        req, n = self.req, self.n
        for entries in self.pending.values():
            for entry, _ in entries:
                entry[1] = req.offset + len(req)
        req.recorded = [(d, r, op, s) for d, r, op, s, _ in self.recorded]
        req.released = [(d, r, op, s) for d, r, op, s, _ in self.released]
        req.seg_addr = [(d, r, s, a) for d, r, op, s, a in self.recorded if op == "segment_alloc" and a != NO_ADDR]
        by_dev: dict[int, list] = {}
        for d, op, a, s in self.seg_entries:
            by_dev.setdefault(d, []).append((op, a, s))
        req.driver_rules = {d: learn(e, [(a, s) for dd, a, s in self.segments if dd == d]) for d, e in by_dev.items()}
        req.releases = rl.summary([r.kind for r in self.runs], [len(r.segs) for r in self.runs],
                                  [r.decided for r in self.runs])
        req.release_conf = self.conf
        req.counts = {"allocs": n["allocs"], "frees": n["frees"], "unknown_frees": n["frees"] - n["paired"],
                      "zero_size_allocs": n["zero_size_allocs"],
                      "realloc_at_live_address": n["realloc_at_live_address"], "ignored_ops": n["ignored_ops"],
                      "seeded": n["seeded"]}
        return check(req, max_unknown_frees, self.key)


def build_requests(data: pa.Table | Iterable[pa.RecordBatch], *, seeds: list[tuple[int, int, int, int]] = (),
                   max_unknown_frees: float = MAX_UNKNOWN_FREES, use_releases: bool = True,
                   key: str = "address", conf: TorchConf | None = None, peaks: dict[int, int] | None = None,
                   frames: dict[int, str] | None = None, segments=()) -> Requests:
    """Requests from an ``alloc_events/1`` table, or from its batches as a reader yields them (streamed).

    Args:
        seeds: (device, address, requested size, stream) of blocks live when recording began (from
            :func:`veotrace.allocators.seed.rebuild`); they become REQ_SEED requests at the start.
        max_unknown_frees: largest share of frees that may name no live allocation.
        use_releases: follow the releases inside a malloc too (the program's empty_cache() calls always are).
        key: the column allocs and frees pair by (default the address).
        conf: the settings the trace was recorded with (a snapshot's), which classify its releases
            (:mod:`veotrace.allocators.releases`); default PyTorch's.
        peaks: per device, the highest level of segment bytes the trace reaches (:func:`peaks`), for a
            trace read whole before its requests are built (a snapshot): see :class:`RequestBuilder`.
        frames: ``{seq: verdict}`` of the releases whose recorded frames say who made them
            (:func:`releases.release_frames`); they decide before the rule.
        segments: (device, address, bytes, ...) of the segments live before the trace began (a seed's), which
            the driver's rule is learned with (:func:`driver.learn`).

    Raises:
        AnalysisError: no allocation with a size, or too many frees of unknown blocks.
    """
    free_op, t0, batches = None, NO_TIME, data
    if isinstance(data, pa.Table):
        free_op = "free_completed" if "free_completed" in data.column("op").unique().to_pylist() else "free_requested"
        ts = data.column("ts_ns").drop_null()
        t0 = int(ts[0].as_py()) if len(ts) else NO_TIME
        batches = data.to_batches()
    builder = RequestBuilder(seeds=seeds, use_releases=use_releases, free_op=free_op, key=key, t0=t0, conf=conf,
                             peaks=peaks, frames=frames, segments=segments)
    for batch in batches:
        builder.add(batch)
    return builder.finish(max_unknown_frees)




def peaks(table: pa.Table) -> dict[int, int]:
    """Per device, the highest level of segment bytes allocated less released from the trace's start (the
    bytes reserved before it are unknown and cancel out where the level is compared)."""
    op = table.column("op")
    op = op.combine_chunks() if isinstance(op, pa.ChunkedArray) else op
    op = op.dictionary_encode() if not pa.types.is_dictionary(op.type) else op
    names = op.dictionary.to_pylist()
    sign = np.array([1 if n in DEVICE_OPS else -1 if n in RELEASE_OPS else 0 for n in names] or [0], np.int64)
    delta = sign[op.indices.to_numpy(zero_copy_only=False)] * _column(table, "size_bytes", 0, np.int64)
    device = _column(table, "device", 0, np.int64)
    out = {}
    for d, (dd,) in by_device(device, (delta,)):
        out[int(d)] = int(np.cumsum(dd).max()) if len(dd) else 0
    return out
