"""The compiled core of the ``torch`` policy (``_torchcore.c``) and the one place that decides which core runs.

``_torchcore.c`` ports :class:`veotrace.allocators.torch.TorchAllocator` rule by rule (same PyTorch names),
expandable segments (:mod:`veotrace.allocators.expandable`) and ``garbage_collection_threshold`` with a
capacity included, and serves a whole range of replay requests per call, so the per-request cost is C's
(a model seeded from a snapshot runs in C from the same :func:`seed.seed_chains`). The Python model stays
the reference (``--torch-core python``; both give the same events, tests/test_simulate_core.py) and runs
where the C core does not cover the run: an install built without a C compiler, a
roundup_power2_divisions entry past a C int, or expandable segments with a capacity past 2^50 bytes
(each segment reserves 1 1/8 of it in the model's int64 address space). :func:`choose_core` says which
core ran and why (``params``).
"""

from __future__ import annotations

import numpy as np

from veotrace.allocators.base import AddressSpace, PolicyCounters
from veotrace.allocators.conf import NO_LIMIT, TorchConf
from veotrace.allocators.expandable import DEFAULT_DEVICE_MEMORY

try:
    from veotrace.allocators import _torchcore
except ImportError:  # built without a C compiler (setup.py marks the extension optional)
    _torchcore = None

CORES = ("auto", "c", "python")
#: The compiled core keeps roundup_power2_divisions entries as C ints.
C_INT_MAX = 2**31 - 1
#: Each expandable segment reserves 1 1/8 of the capacity in the model's int64 address space.
ES_CAPACITY_MAX = 1 << 50


def choose_core(conf: TorchConf, capacity: int | dict[int, int] | None, wanted: str = "auto") -> tuple[str, str]:
    """("c" | "python", why) for one torch run (``capacity``: bytes, per device or for all, or None).
    ``wanted="python"`` forces the reference model; ``"c"`` asks for the compiled core and still gets
    Python, with the reason, where it cannot run."""
    if wanted == "python":
        return "python", "asked for (--torch-core python)"
    caps = capacity.values() if isinstance(capacity, dict) else () if capacity is None else (capacity,)
    if conf.expandable_segments and any(c > ES_CAPACITY_MAX for c in caps):
        return "python", "expandable segments with a capacity past 2^50 bytes pass the compiled core's int64 addresses"
    if any(d > C_INT_MAX for d in conf.roundup_power2_divisions):
        return "python", "a roundup_power2_divisions entry is above the compiled core's int range"
    if _torchcore is None:
        return "python", "the compiled core is not built (installed without a C compiler)"
    return "c", "compiled core (veotrace/allocators/_torchcore.c)"


def recorder_for(policy: str, core: str, *, record: bool = True):
    """The recorder of one policy's run: the compiled core keeps its events itself (CoreRecorder), the
    Python models emit into a Recorder (``record=False``: counters only)."""
    from veotrace.allocators.base import Recorder

    return CoreRecorder() if policy == "torch" and core == "c" else Recorder(enabled=record)


class CoreRecorder:
    """The Recorder of compiled-core runs: its events are kept inside each device's core until drained."""

    __slots__ = ("cores", "req", "ran", "_ran_ids")

    def __init__(self) -> None:
        self.cores: list = []
        self.req = 0
        self.ran: list = []  # the cores that served or seeded since the last drain, in first-touch order
        self._ran_ids: set[int] = set()

    def touch(self, core) -> None:
        """``core`` may hold events: drain reads it (only those: a drain costs the devices that ran, not all)."""
        if id(core) not in self._ran_ids:
            self._ran_ids.add(id(core))
            self.ran.append(core)

    def drain(self) -> np.ndarray:
        """Events since the last drain as an (n, 6) int64 array, in request order across devices."""
        ran, self.ran = self.ran, []
        self._ran_ids.clear()
        parts = [np.frombuffer(core.take_events(), dtype=np.int64).reshape(-1, 6) for core in ran]
        parts = [p for p in parts if len(p)]
        if not parts:
            return np.zeros((0, 6), np.int64)
        if len(parts) == 1:
            return parts[0]
        ev = np.concatenate(parts)
        # a request's events all come from one device; the seeding events (request -1 - device) keep the
        # order of the cores (seeded as they are made, so first touched in that order), as the Python
        # models emit them when made
        r = ev[:, 0]
        return ev[np.argsort(np.where(r < 0, -1, r), kind="stable")]


class CTorchAllocator:
    """One device's ``DeviceCachingAllocator`` in C; the replay calls :meth:`run_chunk` instead of malloc/free."""

    def __init__(self, conf: TorchConf, *, capacity: int | None, rec: CoreRecorder, va: AddressSpace | None = None,
                 exact_releases: bool = False, driver: tuple | None = None) -> None:
        # limits past what any size reaches act as no limit (the same decisions), so they fit C's integers;
        # a max_split_size past 2^63 is NO_LIMIT too (release_available_cached_blocks reads it as int64)
        mss = conf.max_split_size if conf.max_split_size < 1 << 63 else NO_LIMIT
        gc, allowed = conf.gc_threshold_bytes(capacity), conf.allowed_maximum(capacity)
        self.core = _torchcore.Core(mss, min(conf.max_non_split_rounding_size, 1 << 62),
                                    list(conf.roundup_power2_divisions), None if capacity is None else min(capacity, 1 << 62),
                                    (va or AddressSpace()).next,
                                    expandable_memory=(capacity or DEFAULT_DEVICE_MEMORY) if conf.expandable_segments else 0,
                                    gc_threshold=None if gc is None else min(gc, 1 << 62),
                                    exact_releases=exact_releases,
                                    allowed=None if allowed is None else min(allowed, 1 << 62))
        self.rec = rec
        rec.cores.append(self.core)
        if driver is not None:  # (driver.DriverRule, {request: [(bytes, address)]}): as driver.Driver takes them
            rule, recorded = driver
            flat = [v for r in sorted(recorded) for s, a in recorded[r] for v in (r, s, a)]
            self.core.set_driver(rule.direction, rule.reuse, flat, rule.same_size)

    def run_chunk(self, req, device: int | None, start: int, end: int) -> None:
        """Serve requests ``start..end-1`` (only those of ``device`` unless it is None); ``req`` holds them
        from ``req.offset`` on."""
        self.rec.touch(self.core)
        self.core.run(req.kind, req.size, req.stream, req.pair, None if device is None else req.device,
                      -1 if device is None else device, start, end, req.offset, req.addr, req.rel or None)

    def run_rows(self, req, rows: np.ndarray, lo: int, hi: int) -> None:
        """Serve the requests at positions ``rows[lo:hi]`` of ``req`` (ascending, all of this device)."""
        self.rec.touch(self.core)
        self.core.run_rows(req.kind, req.size, req.stream, req.pair, rows, lo, hi, req.offset, req.addr, req.rel or None)

    def seed(self, seed, device: int, conf: TorchConf) -> None:
        """The seeded segments and live blocks of a part-way trace (as :func:`seed.seed_state` does)."""
        from veotrace.allocators.seed import seed_chains

        self.rec.touch(self.core)
        self.core.seed(device, seed_chains(seed, device, conf))

    @property
    def c(self) -> PolicyCounters:
        return PolicyCounters(**self.core.counters())
