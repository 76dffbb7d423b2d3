"""What every policy shares: the event recorder, the per-policy counters and a virtual address space.

A policy is an object with ``malloc(size, stream) -> handle`` and ``free(handle)``; it records what it
did (alloc, free, segment_alloc/free/map/unmap, oom) through a :class:`Recorder` and keeps a
:class:`PolicyCounters`. Addresses are the model's own, handed out by :class:`AddressSpace`.

Vocabulary shared with :mod:`veotrace.frag`, which replays alloc/free events too:

- ``EV_*`` (here) are the op codes of the events a policy *emits*; they index :data:`EV_NAMES` and are
  the ``E_*`` codes of ``_torchcore.c``. ``REQ_*`` (:mod:`veotrace.allocators.requests`) are the kinds
  of request a policy is *asked* to serve. ``OP_*`` (:mod:`veotrace.frag.state`) are the
  codes the fragmentation replay decodes any ``alloc_events/1`` ``op`` column into. The three
  encodings differ on purpose (the replay keeps 0 for ops it ignores, folds ``free_completed`` into
  ``free``, has ``free_requested`` and no ``oom``, and keeps segment codes last), and never meet as
  numbers: a policy's events reach the replay as op names (``EV_NAMES``), decoded by ``OP_CODES``.
- :class:`PolicyCounters` (here) are the totals of what a simulated policy did (bytes reserved, peaks,
  flushes, OOMs); ``fragmentation.state.ReplayCounters`` are the warnings the replay of a recorded
  trace met (frees of unknown blocks, overlapping segments, ...).
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Op codes of the events a policy emits (the ``op`` of each Recorder tuple), and their ``alloc_events/1`` op names.
EV_ALLOC, EV_FREE, EV_SEGMENT_ALLOC, EV_SEGMENT_FREE, EV_SEGMENT_MAP, EV_SEGMENT_UNMAP, EV_OOM = range(7)
EV_NAMES = ("alloc", "free", "segment_alloc", "segment_free", "segment_map", "segment_unmap", "oom")
#: Model addresses start here (a typical CUDA VA base), away from zero so they read as addresses.
VA_BASE = 0x7F0000000000
#: Device allocations are placed at this alignment (CUDA hands out 2 MiB-aligned memory).
VA_ALIGN = 2 << 20


class Recorder:
    """Collects a policy's events as ``(request, op, address, size, stream, block size)`` tuples.

    ``req`` is set by the replay before each call, so every event names the request that caused it
    (``-1 - device`` for the state a seeded model starts from). ``size`` is the requested size of
    allocs and frees and the bytes of segment events; ``block`` is the bytes the policy set aside.
    With ``enabled=False`` nothing is kept (the counters still are): for speed measurements.
    """

    __slots__ = ("events", "req", "enabled")

    def __init__(self, enabled: bool = True) -> None:
        self.events: list[tuple[int, int, int, int, int, int]] = []
        self.req = 0
        self.enabled = enabled

    def emit(self, op: int, addr: int, size: int, stream: int, block: int) -> None:
        if self.enabled:
            self.events.append((self.req, op, addr, size, stream, block))

    def drain(self):
        """The events since the last drain as an (n, 6) int64 numpy array; the list is emptied."""
        import numpy as np

        ev = np.array(self.events, dtype=np.int64).reshape(-1, 6)
        self.events.clear()
        return ev


@dataclass
class PolicyCounters:
    """Per-policy totals: bytes reserved from / handed to the device, peaks, calls, flushes, OOMs."""

    reserved: int = 0
    allocated: int = 0
    peak_reserved: int = 0
    peak_allocated: int = 0
    device_allocs: int = 0
    device_frees: int = 0
    flushes: int = 0
    alloc_retries: int = 0
    ooms: int = 0
    #: cudaMalloc calls given an address the recording never made (``driver.Driver``), and the best-fit ties
    #: such an address decided (the prediction depends on the driver's rule where this is not 0).
    assumed_addresses: int = 0
    assumed_ties: int = 0
    #: The first request that did not fit --capacity: {"request": i, "size_bytes": n, "reserved_bytes": r}.
    first_oom: dict | None = None
    notes: list[str] = field(default_factory=list)

    def merge(self, other: PolicyCounters) -> None:
        """Sum of devices: peaks add up (per-device peaks may happen at different times: an upper bound)."""
        for name in ("reserved", "allocated", "peak_reserved", "peak_allocated", "device_allocs",
                     "device_frees", "flushes", "alloc_retries", "ooms", "assumed_addresses", "assumed_ties"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        if other.first_oom and (self.first_oom is None or other.first_oom["request"] < self.first_oom["request"]):
            self.first_oom = other.first_oom
        self.notes.extend(n for n in other.notes if n not in self.notes)


class AddressSpace:
    """A bump allocator of virtual addresses: device allocations never overlap and never move."""

    __slots__ = ("next",)

    def __init__(self, start: int = VA_BASE) -> None:
        self.next = -(-start // VA_ALIGN) * VA_ALIGN

    def take(self, size: int) -> int:
        addr = self.next
        self.next = addr + -(-max(size, 1) // VA_ALIGN) * VA_ALIGN
        return addr


def event_devices(ev, device_of_request, offset: int = 0):
    """The device of each drained event (``ev``: the (n, 6) rows of :meth:`Recorder.drain`):
    ``device_of_request[r - offset]`` for request r; a seeded model's starting state (request ``-1 - d``)
    is device d's."""
    import numpy as np

    r = ev[:, 0]
    idx = np.clip(r - offset, 0, max(len(device_of_request) - 1, 0))
    return np.where(r >= 0, device_of_request[idx] if len(device_of_request) else 0, -1 - r)


def reserved_delta(op, size):
    """How each event moves its device's reserved bytes: + size for a segment alloc or map, - size for a
    segment free or unmap, 0 for the rest (``op``, ``size``: the events' columns)."""
    import numpy as np

    grow = np.isin(op, (EV_SEGMENT_ALLOC, EV_SEGMENT_MAP))
    return np.where(grow, size, np.where(np.isin(op, (EV_SEGMENT_FREE, EV_SEGMENT_UNMAP)), -size, 0))


def oom(counters: PolicyCounters, rec: Recorder, size: int, stream: int) -> None:
    """Count a request that does not fit the capacity, remembering the first one."""
    counters.ooms += 1
    rec.emit(EV_OOM, 0, size, stream, 0)
    if counters.first_oom is None:
        counters.first_oom = {"request": rec.req, "size_bytes": size, "reserved_bytes": counters.reserved,
                              "allocated_bytes": counters.allocated}
