"""The compiled core of the ``torch`` policy (``_torchcore.c``) and the one place that decides which core runs.

``_torchcore.c`` ports :class:`veotrace.allocators.torch.TorchAllocator` rule by rule (same PyTorch names)
for the common case, and serves a whole range of replay requests per call, so the per-request cost is
C's. The Python model stays the reference and runs whenever the C core does not cover the run:
expandable segments, ``garbage_collection_threshold`` with a capacity, or an install built without a
C compiler (a model seeded from a snapshot runs in C from the same :func:`seed.seed_chains`). :func:`choose_core` says which core ran and why (``params``).
"""

from __future__ import annotations

import numpy as np

from veotrace.allocators.base import AddressSpace, PolicyCounters
from veotrace.allocators.conf import NO_LIMIT, TorchConf

try:
    from veotrace.allocators import _torchcore
except ImportError:  # built without a C compiler (setup.py marks the extension optional)
    _torchcore = None

CORES = ("auto", "c", "python")
#: The compiled core keeps roundup_power2_divisions entries as C ints.
C_INT_MAX = 2**31 - 1


def choose_core(conf: TorchConf, capacity: int | None, wanted: str = "auto") -> tuple[str, str]:
    """("c" | "python", why) for one torch run. ``wanted="python"`` forces the reference model;
    ``"c"`` asks for the compiled core and still gets Python, with the reason, where it cannot run."""
    if wanted == "python":
        return "python", "asked for (--torch-core python)"
    if conf.expandable_segments:
        return "python", "expandable_segments is modelled by the Python core only"
    if conf.garbage_collection_threshold > 0 and capacity is not None:
        return "python", "garbage_collection_threshold is modelled by the Python core only"
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

    def __init__(self, conf: TorchConf, *, capacity: int | None, rec: CoreRecorder, va: AddressSpace | None = None) -> None:
        # limits past what any size reaches act as no limit (the same decisions), so they fit C's integers;
        # a max_split_size past 2^63 is NO_LIMIT too (release_available_cached_blocks reads it as int64)
        mss = conf.max_split_size if conf.max_split_size < 1 << 63 else NO_LIMIT
        self.core = _torchcore.Core(mss, min(conf.max_non_split_rounding_size, 1 << 62),
                                    list(conf.roundup_power2_divisions), None if capacity is None else min(capacity, 1 << 62),
                                    (va or AddressSpace()).next)
        self.rec = rec
        rec.cores.append(self.core)

    def run_chunk(self, req, device: int | None, start: int, end: int) -> None:
        """Serve requests ``start..end-1`` (only those of ``device`` unless it is None); ``req`` holds them
        from ``req.offset`` on."""
        self.rec.touch(self.core)
        self.core.run(req.kind, req.size, req.stream, req.pair, None if device is None else req.device,
                      -1 if device is None else device, start, end, req.offset, req.addr)

    def run_rows(self, req, rows: np.ndarray, lo: int, hi: int) -> None:
        """Serve the requests at positions ``rows[lo:hi]`` of ``req`` (ascending, all of this device)."""
        self.rec.touch(self.core)
        self.core.run_rows(req.kind, req.size, req.stream, req.pair, rows, lo, hi, req.offset, req.addr)

    def seed(self, seed, device: int, conf: TorchConf) -> None:
        """The seeded segments and live blocks of a part-way trace (as :func:`seed.seed_state` does)."""
        from veotrace.allocators.seed import seed_chains

        self.rec.touch(self.core)
        self.core.seed(device, seed_chains(seed, device, conf))

    @property
    def c(self) -> PolicyCounters:
        return PolicyCounters(**self.core.counters())
