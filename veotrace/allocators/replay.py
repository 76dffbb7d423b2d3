"""Alloc/free requests from an ``alloc_events/1`` table, and the loop that drives a policy over them.

Pairing: a free releases the live allocation at the same address on the same device (for logs whose
address column holds an allocation id, the id pairs the same way). PyTorch traces free a block at
``free_completed`` (when it returns to the pool; ``free_requested`` only when no ``free_completed`` is
recorded). Recorded addresses pair events only; policies choose their own. Recorded
``segment_free``/``segment_unmap`` runs become release points (``empty_cache`` or an OOM retry) that
the torch model can follow; recorded ``segment_alloc``/``segment_map`` are kept for validation.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from veotrace.analysis.defaults import SIMULATE_MAX_UNKNOWN_FREES
from veotrace.errors import AnalysisError

#: Request kinds.
MALLOC, FREE, RELEASE, SEED = 0, 1, 2, 3
#: Largest share of frees naming no live allocation before the replay refuses the input.
MAX_UNKNOWN_FREES = SIMULATE_MAX_UNKNOWN_FREES
_DEVICE_OPS = ("segment_alloc", "segment_map")
_RELEASE_OPS = ("segment_free", "segment_unmap")


#: ``ts_ns`` of a request without a timestamp; ``addr`` of an event without an address.
NO_TIME = -(1 << 63)
NO_ADDR = (1 << 64) - 1


@dataclass
class Requests:
    """Parallel typed arrays (8 bytes per value), one entry per request, in replay order.

    ``size[i]`` of a RELEASE is 1 when a device allocation followed at once (an OOM retry inside malloc),
    0 otherwise (``empty_cache``). ``pair[i]`` is, for a FREE, the index of the MALLOC/SEED it frees.
    ``seq`` is the source row (-1 for seeded allocations); ``ts_ns`` is NO_TIME without a timestamp.
    ``recorded``: (device, request index of the next MALLOC, op, size) of the trace's own device
    allocations; ``released``: the same for segment_free/segment_unmap.
    """

    kind: array = field(default_factory=lambda: array("q"))
    size: array = field(default_factory=lambda: array("q"))
    stream: array = field(default_factory=lambda: array("q"))
    device: array = field(default_factory=lambda: array("q"))
    pair: array = field(default_factory=lambda: array("q"))
    addr: array = field(default_factory=lambda: array("Q"))
    seq: array = field(default_factory=lambda: array("q"))
    ts_ns: array = field(default_factory=lambda: array("q"))
    recorded: list[tuple[int, int, str, int]] = field(default_factory=list)
    released: list[tuple[int, int, str, int]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.kind)

    def add(self, kind: int, size: int, stream: int, device: int, pair: int, addr: int, seq: int, ts: int) -> int:
        self.kind.append(kind)
        self.size.append(size)
        self.stream.append(stream)
        self.device.append(device)
        self.pair.append(pair)
        self.addr.append(addr)
        self.seq.append(seq)
        self.ts_ns.append(ts)
        return len(self.kind) - 1

    @property
    def devices(self) -> list[int]:
        return sorted(set(self.device))

    @property
    def has_time(self) -> bool:
        return len(self.ts_ns) > 0 and NO_TIME not in self.ts_ns

    def lifetimes_ns(self) -> array:
        """Per request: for an allocation, ns until its free (-1 never freed); NO_TIME without times."""
        ts, out = self.ts_ns, array("q", [NO_TIME]) * len(self.kind)
        for i, k in enumerate(self.kind):
            if k == MALLOC or k == SEED:
                if ts[i] != NO_TIME:
                    out[i] = -1
            elif k == FREE:
                j = self.pair[i]
                if ts[i] != NO_TIME and ts[j] != NO_TIME:
                    out[j] = max(ts[i] - ts[j], 0)
        return out


def _column(table: pa.Table, name: str, fill: int, dtype) -> np.ndarray:
    col = table.column(name)
    if col.null_count:
        col = pc.fill_null(col, pa.scalar(fill, col.type))
    return col.to_numpy().astype(dtype, copy=False)


def _ops(table: pa.Table) -> tuple[np.ndarray, list[str]]:
    """Op of every row as an index into the returned names."""
    col = table.column("op").combine_chunks() if table.num_rows else pa.array([], pa.string())
    if not pa.types.is_dictionary(col.type):
        col = col.dictionary_encode()
    return col.indices.to_numpy(zero_copy_only=False).astype(np.int64), col.dictionary.to_pylist()


def _is(op: np.ndarray, names: list[str], wanted) -> np.ndarray:
    codes = [i for i, n in enumerate(names) if n in wanted]
    return np.isin(op, codes) if codes else np.zeros(op.shape, bool)


def _pair(device, addr, pos, is_free) -> tuple[np.ndarray, np.ndarray]:
    """For rows sorted by (device, address, position): each free's alloc (-1: unknown), and allocs made
    while the address was live. A free pairs with the row just before it at its address if that is an alloc."""
    order = np.lexsort((pos, addr, device))
    d, a, f = device[order], addr[order], is_free[order]
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
    return out, realloc


def build_requests(table: pa.Table, *, seeds: list[tuple[int, int, int, int]] = (),
                   max_unknown_frees: float = MAX_UNKNOWN_FREES, use_releases: bool = True) -> Requests:
    """Requests from an ``alloc_events/1`` table (pairing vectorised; the few device events walked in Python).

    Args:
        seeds: (device, address, requested size, stream) of blocks live when recording began (from
            :func:`veotrace.allocators.seed.rebuild`); they become SEED requests at the start.
        max_unknown_frees: largest share of frees that may name no live allocation.
        use_releases: turn recorded segment_free/segment_unmap runs into RELEASE requests.

    Raises:
        AnalysisError: no allocation with a size, or too many frees of unknown blocks.
    """
    op, names = _ops(table)
    free_op = "free_completed" if "free_completed" in names else "free_requested"
    size = _column(table, "size_bytes", 0, np.int64)
    addr = _column(table, "address", NO_ADDR, np.uint64)
    stream, device = _column(table, "stream", 0, np.int64), _column(table, "device", 0, np.int64)
    seq, ts = _column(table, "seq", -1, np.int64), _column(table, "ts_ns", NO_TIME, np.int64)
    alloc_any = _is(op, names, ("alloc",))
    is_alloc = alloc_any & (size > 0)
    is_free = _is(op, names, ("free", free_op))
    is_dev, is_rel = _is(op, names, _DEVICE_OPS), _is(op, names, _RELEASE_OPS)
    ignored = ~(alloc_any | is_free | is_dev | is_rel | _is(op, names, ("free_requested",)))
    # pair frees with allocs (and seeds, placed at positions -k..-1) by (device, address)
    n_seed = len(seeds)
    rows = np.flatnonzero((is_alloc | is_free) & (addr != NO_ADDR))
    pos = np.concatenate([np.arange(-n_seed, 0, dtype=np.int64), rows])
    partner, realloc = _pair(np.concatenate([np.array([x[0] for x in seeds], np.int64), device[rows]]),
                             np.concatenate([np.array([x[1] for x in seeds], np.uint64), addr[rows]]),
                             pos, np.concatenate([np.zeros(n_seed, bool), is_free[rows]]))
    got = partner[n_seed:] >= 0
    paired = np.zeros(len(op), bool)
    paired[rows[got]] = True
    partner_row = np.zeros(len(op), np.int64)  # the alloc row (or negative seed position) of each paired free
    partner_row[rows[got]] = pos[partner[n_seed:][got]]
    # requests in row order: allocs, paired frees and release points
    req_rows = np.flatnonzero(is_alloc | paired)
    releases, recorded, released = _device_events(op, names, is_dev | is_rel, req_rows, device, size, use_releases)
    rel_rows = np.array(sorted(releases), np.int64)
    rows_all = np.sort(np.concatenate([req_rows, rel_rows]))
    kinds = np.where(is_alloc[rows_all], MALLOC, FREE)
    kinds[np.isin(rows_all, rel_rows)] = RELEASE
    alloc_at = np.flatnonzero(kinds == MALLOC)  # request positions (before the seeds) of the allocs
    alloc_rows = rows_all[alloc_at]
    pair = np.full(len(rows_all), -1, np.int64)
    frees = np.flatnonzero(kinds == FREE)
    if len(frees):
        pr = partner_row[rows_all[frees]]
        to_alloc = alloc_at[np.clip(np.searchsorted(alloc_rows, pr), 0, max(len(alloc_at) - 1, 0))] if len(alloc_at) else pr
        pair[frees] = np.where(pr < 0, pr + n_seed, to_alloc + n_seed)
    rsize = np.where(kinds == MALLOC, size[rows_all], 0)
    rel_at = np.flatnonzero(kinds == RELEASE)
    rsize[rel_at] = [releases[r] for r in rows_all[rel_at].tolist()]
    req = Requests()
    t0 = int(ts[ts != NO_TIME][0]) if (ts != NO_TIME).any() else NO_TIME
    for d, a, sz, st in seeds:
        req.add(SEED, sz, st, d, -1, a, -1, t0)
    for name, values in (("kind", kinds), ("size", rsize), ("stream", stream[rows_all]),
                         ("device", device[rows_all]), ("pair", pair), ("seq", seq[rows_all]), ("ts_ns", ts[rows_all])):
        getattr(req, name).frombytes(np.ascontiguousarray(values, np.int64).tobytes())
    req.addr.frombytes(np.ascontiguousarray(addr[rows_all], np.uint64).tobytes())
    # a recorded device event names the request of the next alloc on its device
    per_device = {d: alloc_rows[device[alloc_rows] == d] for d in {r[1] for r in recorded + released}}
    for target, found in ((req.recorded, recorded), (req.released, released)):
        for row, d, name, sz in found:
            later = per_device[d]
            i = int(np.searchsorted(later, row))
            nxt = len(req) if i == len(later) else int(np.searchsorted(rows_all, later[i])) + n_seed
            target.append((d, nxt, name, sz))
    req.counts = {"allocs": int(is_alloc.sum()), "frees": int(is_free.sum()),
                  "unknown_frees": int(is_free.sum() - paired.sum()),
                  "zero_size_allocs": int((alloc_any & ~is_alloc).sum()),
                  "realloc_at_live_address": int(realloc[n_seed:].sum()), "ignored_ops": int(ignored.sum()),
                  "seeded": n_seed}
    return _check(req, max_unknown_frees)


def _device_events(op, names, mask, req_rows, device, size, use_releases):
    """Walk the (few) segment rows. Returns {release row: 1 if an OOM retry else 0}, and the recorded
    device allocations and releases as (row, device, op, size)."""
    releases: dict[int, int] = {}
    recorded, released = [], []
    last = None  # (device, alloc/free requests before it) of the last release point added
    last_row = None
    for row in np.flatnonzero(mask).tolist():
        name, d = names[op[row]], int(device[row])
        before = int(np.searchsorted(req_rows, row))
        if name in _RELEASE_OPS:
            released.append((row, d, name, int(size[row])))
            if use_releases and last != (d, before):
                releases[row] = 0
                last, last_row = (d, before), row
        else:
            recorded.append((row, d, name, int(size[row])))
            if last == (d, before):
                releases[last_row] = 1  # released then allocated in one malloc: the retry after a failed device allocation
    return releases, recorded, released


def _check(req: Requests, max_unknown_frees: float) -> Requests:
    """Refuse traces with nothing to replay or too many frees of unknown blocks; note the unknown ones."""
    counts = req.counts
    if counts["allocs"] + counts["seeded"] == 0:
        raise AnalysisError("the trace has no allocation with a size (no 'alloc' rows with size_bytes > 0)",
                            hint="simulate needs alloc/free events with sizes: an alloc log, a PyTorch snapshot "
                                 "recorded with _record_memory_history(), or Nsight Systems memory events")
    share = counts["unknown_frees"] / counts["frees"] if counts["frees"] else 0.0
    if share > max_unknown_frees:
        raise AnalysisError(
            f"{counts['unknown_frees']:,} of {counts['frees']:,} frees ({share:.1%}) name no live allocation, "
            f"above the {max_unknown_frees:.0%} allowed",
            hint="Frees pair with allocs by address on the same device: check the address column, or raise "
                 "--max-unknown-frees (such frees are ignored)")
    if counts["unknown_frees"]:
        req.notes.append(f"{counts['unknown_frees']:,} of {counts['frees']:,} frees ({share:.1%}) named no "
                         "live allocation and were ignored")
    return req


def iter_replay(policy_for_device, req: Requests, policies: dict, *, chunk: int = 1 << 16):
    """Drive one policy per device over the requests, yielding after every ``chunk`` requests.

    ``policy_for_device(device)`` makes a fresh policy (with ``malloc``, ``free``, ``rec`` and optionally
    ``release_cached_blocks``, ``arm_release`` and ``seeded(address)``); they are stored in ``policies``.
    Policies with ``run_chunk(req, device, start, end)`` (the compiled torch core) serve a chunk per call.
    The pauses let a caller drain the recorder while the replay runs, so memory stays bounded by the
    live set. Yields the number of requests done.
    """
    for d in req.devices:
        policies[d] = policy_for_device(d)
    n = len(req.kind)
    if policies and all(hasattr(p, "run_chunk") for p in policies.values()):  # compiled cores serve whole chunks
        several = len(policies) > 1
        for start in range(0, n, chunk):
            end = min(start + chunk, n)
            for d, pol in policies.items():
                pol.run_chunk(req, d if several else None, start, end)
            yield end
        return
    handles: dict[int, object] = {}
    kind, size, stream, device, pair, addr = req.kind, req.size, req.stream, req.device, req.pair, req.addr
    only = next(iter(policies.values())) if len(policies) == 1 else None
    for start in range(0, n, chunk):
        end = min(start + chunk, n)
        if only is not None:  # one device: the common case, with the lookups hoisted out of the loop
            rec, malloc, free, i = only.rec, only.malloc, only.free, start
            while i < end:
                k = kind[i]
                if k == MALLOC:
                    rec.req = i
                    handles[i] = malloc(size[i], stream[i])
                elif k == FREE:
                    rec.req = i
                    free(handles.pop(pair[i]))
                else:
                    break
                i += 1
            start = i
        for i in range(start, end):
            k = kind[i]
            pol = policies[device[i]]
            pol.rec.req = i
            if k == MALLOC:
                handles[i] = pol.malloc(size[i], stream[i])
            elif k == FREE:
                pol.free(handles.pop(pair[i]))
            elif k == SEED:
                seeded = getattr(pol, "seeded", None)
                h = seeded(addr[i]) if seeded is not None else None
                handles[i] = h if h is not None else pol.malloc(size[i], stream[i])
            elif k == RELEASE:
                if size[i]:  # an OOM retry inside PyTorch's malloc: only the torch model follows it
                    if hasattr(pol, "arm_release"):
                        pol.arm_release()  # free cached blocks only if the next malloc finds none that fits
                elif hasattr(pol, "release_cached_blocks"):
                    pol.release_cached_blocks()  # empty_cache(): the program's own call, every policy follows it
        yield end


def replay(policy_for_device, req: Requests) -> dict:
    """Run :func:`iter_replay` to the end; returns {device: policy}."""
    policies: dict = {}
    for _ in iter_replay(policy_for_device, req, policies):
        pass
    return policies
