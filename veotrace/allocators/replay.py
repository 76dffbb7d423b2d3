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

import pyarrow as pa

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
#: Rows converted to Python values at a time while building requests (bounds temporary memory).
CHUNK_ROWS = 1 << 18


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


def _col(batch: pa.RecordBatch, name: str, fill: int) -> list:
    col = batch.column(name)
    if col.null_count == 0:
        return col.to_numpy(zero_copy_only=False).tolist()
    return [fill if v is None else v for v in col.to_pylist()]


def build_requests(table: pa.Table, *, seeds: list[tuple[int, int, int, int]] = (),
                   max_unknown_frees: float = MAX_UNKNOWN_FREES, use_releases: bool = True) -> Requests:
    """Requests from an ``alloc_events/1`` table.

    Args:
        seeds: (device, address, requested size, stream) of blocks live when recording began (from
            :func:`veotrace.allocators.seed.rebuild`); they become SEED requests at the start.
        max_unknown_frees: largest share of frees that may name no live allocation.
        use_releases: turn recorded segment_free/segment_unmap runs into RELEASE requests.

    Raises:
        AnalysisError: no allocation with a size, or too many frees of unknown blocks.
    """
    names = set()
    for chunk in table.column("op").chunks:
        names.update(chunk.dictionary.to_pylist() if pa.types.is_dictionary(chunk.type) else chunk.unique().to_pylist())
    free_op = "free_completed" if "free_completed" in names else "free_requested"
    req = Requests()
    live: dict[tuple[int, int], int] = {}
    counts = dict.fromkeys(("allocs", "frees", "unknown_frees", "zero_size_allocs", "realloc_at_live_address",
                            "ignored_ops", "seeded"), 0)
    ts_col = table.column("ts_ns")
    t0 = ts_col.drop_null()[0].as_py() if len(ts_col) > ts_col.null_count else NO_TIME
    for d, a, s, st in seeds:
        live[(d, a)] = req.add(SEED, s, st, d, -1, a, -1, t0)
        counts["seeded"] += 1
    pending: dict[int, list[tuple[int, str, int]]] = {}  # device -> recorded events awaiting the next malloc
    last_release: dict[int, int] = {}
    kind_a, size_a, stream_a, device_a = req.kind.append, req.size.append, req.stream.append, req.device.append
    pair_a, addr_a, seq_a, ts_a = req.pair.append, req.addr.append, req.seq.append, req.ts_ns.append
    allocs = frees = unknown = zero = 0
    for batch in table.to_batches(max_chunksize=CHUNK_ROWS):
        ops = batch.column("op").to_pylist()
        size, addr = _col(batch, "size_bytes", 0), _col(batch, "address", NO_ADDR)
        stream, device = _col(batch, "stream", 0), _col(batch, "device", 0)
        seq, ts = _col(batch, "seq", -1), _col(batch, "ts_ns", NO_TIME)
        for i, op in enumerate(ops):
            d = device[i]
            if op == "alloc":
                if size[i] <= 0:
                    zero += 1
                    continue
                key = (d, addr[i])
                if key in live:
                    counts["realloc_at_live_address"] += 1
                r = len(req.kind)
                kind_a(MALLOC); size_a(size[i]); stream_a(stream[i]); device_a(d)
                pair_a(-1); addr_a(addr[i]); seq_a(seq[i]); ts_a(ts[i])
                if addr[i] != NO_ADDR:
                    live[key] = r
                allocs += 1
                if pending:
                    for rec in pending.pop(d, ()):
                        (req.recorded if rec[1] in _DEVICE_OPS else req.released).append((d, r, rec[1], rec[2]))
            elif op == "free" or op == free_op:
                frees += 1
                j = live.pop((d, addr[i]), -1)
                if j < 0:
                    unknown += 1
                    continue
                kind_a(FREE); size_a(0); stream_a(stream[i]); device_a(d)
                pair_a(j); addr_a(addr[i]); seq_a(seq[i]); ts_a(ts[i])
            elif op in _DEVICE_OPS or op in _RELEASE_OPS:
                pending.setdefault(d, []).append((i, op, size[i]))
                if op in _RELEASE_OPS and use_releases and last_release.get(d) != len(req) - 1:
                    last_release[d] = req.add(RELEASE, 0, stream[i], d, -1, addr[i], seq[i], ts[i])
                elif op in _DEVICE_OPS and last_release.get(d) == len(req) - 1:
                    # released then allocated in one malloc: the retry after a failed device allocation
                    req.size[last_release[d]] = 1
            elif op != "free_requested":
                counts["ignored_ops"] += 1
    counts.update(allocs=allocs, frees=frees, unknown_frees=unknown, zero_size_allocs=zero)
    for d, recs in pending.items():  # device events after the last alloc (e.g. an empty_cache at the end)
        for rec in recs:
            (req.recorded if rec[1] in _DEVICE_OPS else req.released).append((d, len(req), rec[1], rec[2]))
    req.counts = counts
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
    The pauses let a caller drain the recorder while the replay runs, so memory stays bounded by the
    live set. Yields the number of requests done.
    """
    for d in req.devices:
        policies[d] = policy_for_device(d)
    handles: dict[int, object] = {}
    kind, size, stream, device, pair, addr = req.kind, req.size, req.stream, req.device, req.pair, req.addr
    n = len(kind)
    only = next(iter(policies.values())) if len(policies) == 1 else None
    for start in range(0, n, chunk):
        end = min(start + chunk, n)
        if only is not None:  # one device: the common case, with the lookups hoisted out of the loop
            rec, malloc, free, i = only.rec, only.malloc, only.free, start
            while i < end and kind[i] <= FREE:
                rec.req = i
                if kind[i] == MALLOC:
                    handles[i] = malloc(size[i], stream[i])
                else:
                    free(handles.pop(pair[i]))
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
