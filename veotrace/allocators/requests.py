"""Alloc/free requests: the arrays every policy replays (:class:`Requests`) and the checks on them.

Pairing: a free releases the live allocation at the same address on the same device (for logs whose
address column holds an allocation id, the id pairs the same way; ``--id-col`` names another column to
pair by). PyTorch traces free a block at ``free_completed`` (when it returns to the pool;
``free_requested`` only when no ``free_completed`` is recorded). Recorded addresses pair events only;
policies choose their own. Recorded ``segment_free``/``segment_unmap`` runs become release points
(``empty_cache`` or an OOM retry) that the torch model can follow; recorded ``segment_alloc``/
``segment_map`` are kept for validation. The requests are built by :mod:`veotrace.allocators.builder`.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from veotrace.defaults import SIMULATE_MAX_UNKNOWN_FREES
from veotrace.errors import AnalysisError

#: Request kinds: what a policy is asked to do (``Requests.kind``). REQ_, not the EV_ codes of
#: :mod:`veotrace.allocators.base` (what a policy did) nor the OP_ codes of :mod:`veotrace.frag.state`
#: (the decoded ``op`` column); ``_torchcore.c`` calls them R_MALLOC, ...
REQ_MALLOC, REQ_FREE, REQ_RELEASE, REQ_SEED = 0, 1, 2, 3
#: Largest share of frees naming no live allocation before the replay refuses the input.
MAX_UNKNOWN_FREES = SIMULATE_MAX_UNKNOWN_FREES

#: ``ts_ns`` of a request without a timestamp; ``addr`` of an event without an address.
NO_TIME = -(1 << 63)
NO_ADDR = (1 << 64) - 1


@dataclass
class Requests:
    """Parallel typed arrays (8 bytes per value), one entry per request, in replay order.

    ``size[i]`` of a REQ_RELEASE is the kind of the recorded run of releases (``releases.REL_*``: the
    program's empty_cache(), or a release inside a malloc), ``-1 - kind`` for one recorded and not followed
    (``use_releases=False``). ``pair[i]`` is, for a REQ_FREE, the index of the REQ_MALLOC/REQ_SEED it frees.
    ``seq`` is the source row (-1 for seeded allocations); ``ts_ns`` is NO_TIME without a timestamp.
    ``recorded``: (device, request index of the next REQ_MALLOC, op, size) of the trace's own device
    allocations; ``released``: the same for segment_free/segment_unmap. ``rel``: (request index, address,
    bytes, stream) of each segment a partial release (max_split_size retry, garbage collection) freed,
    flat, for the recorded setting's replay (:meth:`release_segments`). ``releases``: the runs by kind
    (``releases.summary``); ``release_conf``: the settings they were classified under.
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
    rel: array = field(default_factory=lambda: array("q"))
    releases: dict = field(default_factory=dict)
    release_conf: Any = None
    #: (device, request index, bytes, address) of each recorded segment_alloc (the driver's pointer), and the
    #: rule of each device's driver learned from the trace (:mod:`veotrace.allocators.driver`).
    seg_addr: list = field(default_factory=list)
    driver_rules: dict = field(default_factory=dict)
    #: Index of the first entry: a chunk of a streamed read holds requests offset..offset+len-1.
    offset: int = 0
    _lifetimes: tuple | None = field(default=None, repr=False, compare=False)  # (length, lifetimes_ns())
    _devices: tuple | None = field(default=None, repr=False, compare=False)  # (length, devices)

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

    def extend(self, **columns: np.ndarray) -> None:
        """Append one array per field (kind, size, stream, device, pair, addr, seq, ts_ns)."""
        for name, values in columns.items():
            dtype = np.uint64 if name == "addr" else np.int64
            getattr(self, name).frombytes(np.ascontiguousarray(values, dtype).view(np.uint8))

    def split(self, keep: int) -> tuple[Requests, Requests]:
        """(the first ``keep`` requests, the rest) as two chunks."""
        head, tail = Requests(offset=self.offset), Requests(offset=self.offset + keep)
        for name in FIELDS:
            values = getattr(self, name)
            setattr(head, name, values[:keep])
            setattr(tail, name, values[keep:])
        for k in range(0, len(self.rel), 4):  # each partial release's segments go with its request
            (head if self.rel[k] < self.offset + keep else tail).rel.extend(self.rel[k:k + 4])
        head.release_conf = tail.release_conf = self.release_conf
        head.driver_rules = tail.driver_rules = self.driver_rules
        head.seg_addr = tail.seg_addr = self.seg_addr
        return head, tail

    def release_segments(self, i: int) -> list[tuple[int, int, int]]:
        """(address, bytes, stream) of the segments the REQ_RELEASE at request ``i`` freed, for a partial
        release (empty otherwise)."""
        rel = self.rel
        return [(rel[k + 1], rel[k + 2], rel[k + 3]) for k in range(0, len(rel), 4) if rel[k] == i]

    @property
    def devices(self) -> list[int]:
        """The devices, sorted (kept while no request is added: every replay of the same requests asks)."""
        n = len(self.device)
        if self._devices is None or self._devices[0] != n:
            self._devices = (n, np.unique(np.frombuffer(self.device, np.int64)).tolist() if n else [])
        return list(self._devices[1])

    @property
    def has_time(self) -> bool:
        return len(self.ts_ns) > 0 and not (np.frombuffer(self.ts_ns, np.int64) == NO_TIME).any()

    def clock(self, has_time: bool) -> np.ndarray:
        """The time of every request: its timestamp, or (a trace without times) its index in the trace."""
        if has_time:
            return np.frombuffer(self.ts_ns, np.int64)
        return np.arange(self.offset, self.offset + len(self), dtype=np.int64)

    def lifetimes_ns(self) -> array:
        """Per request: for an allocation, ns until its free (-1 never freed); NO_TIME without times.

        Computed once and kept (each device's ``tiered-oracle`` model asks for the whole trace's)."""
        if self._lifetimes is not None and self._lifetimes[0] == len(self.kind):
            return self._lifetimes[1]
        ts, out = self.ts_ns, array("q", [NO_TIME]) * len(self.kind)
        for i, k in enumerate(self.kind):
            if k == REQ_MALLOC or k == REQ_SEED:
                if ts[i] != NO_TIME:
                    out[i] = -1
            elif k == REQ_FREE:
                j = self.pair[i]
                if ts[i] != NO_TIME and ts[j] != NO_TIME:
                    out[j] = max(ts[i] - ts[j], 0)
        self._lifetimes = (len(self.kind), out)
        return out


FIELDS = ("kind", "size", "stream", "device", "pair", "addr", "seq", "ts_ns")



def check(req: Requests, max_unknown_frees: float, key: str = "address") -> Requests:
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
            hint=(f"Frees pair with allocs by {key} on the same device: check the {key} column" if key == "address" else
                  f"Frees pair with allocs by the id column {key!r} on the same device: check it") +
                 ", or raise --max-unknown-frees (such frees are ignored)")
    if counts["unknown_frees"]:
        req.notes.append(f"{counts['unknown_frees']:,} of {counts['frees']:,} frees ({share:.1%}) named no "
                         "live allocation and were ignored")
    return req
