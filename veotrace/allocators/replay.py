"""Alloc/free requests from an ``alloc_events/1`` table, and the loop that drives a policy over them.

Pairing: a free releases the live allocation at the same address on the same device (for logs whose
address column holds an allocation id, the id pairs the same way). PyTorch traces free a block at
``free_completed`` (when it returns to the pool; ``free_requested`` only when no ``free_completed`` is
recorded). Recorded addresses pair events only; policies choose their own. Recorded
``segment_free``/``segment_unmap`` runs become release points (``empty_cache`` or an OOM retry) that
the torch model can follow; recorded ``segment_alloc``/``segment_map`` are kept for validation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from veotrace.errors import AnalysisError

#: Request kinds.
MALLOC, FREE, RELEASE, SEED = 0, 1, 2, 3
#: Largest share of frees naming no live allocation before the replay refuses the input.
MAX_UNKNOWN_FREES = 0.05
_DEVICE_OPS = ("segment_alloc", "segment_map")
_RELEASE_OPS = ("segment_free", "segment_unmap")


@dataclass
class Requests:
    """Parallel lists, one entry per request, in replay order.

    ``size[i]`` of a RELEASE is 1 when a device allocation followed at once (an OOM retry inside malloc),
    0 otherwise (``empty_cache``). ``pair[i]`` is, for a FREE, the index of the MALLOC/SEED it frees. ``seq`` is the source row
    (-1 for seeded allocations). ``lifetime_ns[i]`` (MALLOC/SEED): time to its free, -1 if never freed,
    None without timestamps. ``recorded``: (device, request index of the next MALLOC, op, size) of the
    trace's own device allocations; ``released``: same for segment_free/segment_unmap.
    """

    kind: list[int] = field(default_factory=list)
    size: list[int] = field(default_factory=list)
    stream: list[int] = field(default_factory=list)
    device: list[int] = field(default_factory=list)
    pair: list[int] = field(default_factory=list)
    addr: list[int] = field(default_factory=list)
    seq: list[int] = field(default_factory=list)
    ts_ns: list[int | None] = field(default_factory=list)
    recorded: list[tuple[int, int, str, int]] = field(default_factory=list)
    released: list[tuple[int, int, str, int]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.kind)

    def add(self, kind: int, size: int, stream: int, device: int, pair: int, addr: int, seq: int, ts) -> int:
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

    def lifetimes_ns(self) -> list[int | None]:
        """Per request: for an allocation, ns until its free (-1 never freed); None without times."""
        out: list[int | None] = [None] * len(self.kind)
        for i, (k, j) in enumerate(zip(self.kind, self.pair)):
            if k == FREE and j >= 0:
                t0, t1 = self.ts_ns[j], self.ts_ns[i]
                out[j] = None if t0 is None or t1 is None else max(t1 - t0, 0)
        for i, k in enumerate(self.kind):
            if k in (MALLOC, SEED) and out[i] is None and self.ts_ns[i] is not None:
                out[i] = -1
        return out


def _col(table: pa.Table, name: str, fill: int) -> list:
    col = table.column(name)
    if col.null_count == 0:
        return col.to_numpy().tolist()
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
    ops = table.column("op").to_pylist()
    have_completed = "free_completed" in set(ops)
    free_op = "free_completed" if have_completed else "free_requested"
    size, addr = _col(table, "size_bytes", 0), _col(table, "address", -1)
    stream, device = _col(table, "stream", 0), _col(table, "device", 0)
    seq, ts = table.column("seq").to_pylist(), table.column("ts_ns").to_pylist()
    req = Requests()
    live: dict[tuple[int, int], int] = {}
    counts = dict.fromkeys(("allocs", "frees", "unknown_frees", "zero_size_allocs", "realloc_at_live_address",
                            "ignored_ops", "seeded"), 0)
    t0 = next((t for t in ts if t is not None), None)
    for d, a, s, st in seeds:
        live[(d, a)] = req.add(SEED, s, st, d, -1, a, -1, t0)
        counts["seeded"] += 1
    pending: dict[int, list[tuple[int, str, int]]] = {}  # device -> recorded events awaiting the next malloc
    last_release: dict[int, int] = {}
    for i, op in enumerate(ops):
        d = device[i]
        if op == "alloc":
            if size[i] <= 0:
                counts["zero_size_allocs"] += 1
                continue
            key = (d, addr[i])
            if key in live:
                counts["realloc_at_live_address"] += 1
            r = req.add(MALLOC, size[i], stream[i], d, -1, addr[i], seq[i], ts[i])
            live[key] = r
            counts["allocs"] += 1
            for rec in pending.pop(d, ()):
                (req.recorded if rec[1] in _DEVICE_OPS else req.released).append((d, r, rec[1], rec[2]))
        elif op == "free" or op == free_op:
            counts["frees"] += 1
            j = live.pop((d, addr[i]), -1)
            if j < 0:
                counts["unknown_frees"] += 1
                continue
            req.add(FREE, 0, stream[i], d, j, addr[i], seq[i], ts[i])
        elif op in _DEVICE_OPS or op in _RELEASE_OPS:
            pending.setdefault(d, []).append((i, op, size[i]))
            if op in _RELEASE_OPS and use_releases and last_release.get(d) != len(req) - 1:
                last_release[d] = req.add(RELEASE, 0, stream[i], d, -1, addr[i], seq[i], ts[i])
            elif op in _DEVICE_OPS and last_release.get(d) == len(req) - 1:
                # released then allocated in one malloc: the retry after a failed device allocation
                req.size[last_release[d]] = 1
        elif op != "free_requested":
            counts["ignored_ops"] += 1
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


def replay(policy_for_device, req: Requests, *, on_progress=None) -> dict:
    """Drive one policy per device over the requests; returns {device: policy}.

    ``policy_for_device(device)`` makes a fresh policy (with ``malloc``, ``free``, ``rec`` and
    optionally ``release_cached_blocks`` and ``seeded(address)``).
    """
    policies = {d: policy_for_device(d) for d in req.devices}
    handles: dict[int, object] = {}
    kind, size, stream, device, pair, addr = req.kind, req.size, req.stream, req.device, req.pair, req.addr
    for i in range(len(kind)):
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
        if on_progress is not None and i & 0xFFFF == 0:
            on_progress(i, len(kind))
    return policies


def to_numpy(values: list) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)
