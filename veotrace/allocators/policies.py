"""The allocator policies ``simulate`` replays: the protocol each one meets, and one name -> factory registry.

``POLICIES`` (the names, in ranking order), ``simulate --help``, the option check and the benchmarks
all read :data:`REGISTRY`. Adding a policy means its module (a class meeting :class:`Policy`) and
one :class:`PolicySpec` here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from veotrace.allocators.base import AddressSpace


class Policy(Protocol):
    """One device's simulated allocator, as the replay drives it (``allocators.replay``).

    ``malloc`` returns a handle that ``free`` takes back; ``c`` (``base.PolicyCounters``) sums what it
    did. A policy that caches may also offer ``release_cached_blocks()`` (the program's
    ``empty_cache()``); the torch model offers ``release(kind, segments)`` for every recorded run of
    releases (``allocators.releases``). The replay calls them where they exist.
    """

    c: Any

    def malloc(self, size: int, stream: int) -> Any: ...

    def free(self, handle: Any) -> None: ...


@dataclass(frozen=True)
class PolicySpec:
    """A policy's name, what it models (``--help``), and its factory.

    ``factory(ctx)`` builds one device's policy from a :class:`PolicyContext`.
    """

    name: str
    summary: str
    factory: Callable[[PolicyContext], Policy]


@dataclass(frozen=True)
class PolicyContext:
    """What a factory may use: the device, the requests (the oracle policy reads lifetimes from them),
    the recorder, the torch settings, the capacity, a snapshot's seed, the tiers and the torch core."""

    device: int
    req: Any
    rec: Any
    conf: Any
    capacity: int | None
    seed: Any
    tiers: Any
    core: str = "python"
    va: Any = None


def _torch(ctx: PolicyContext) -> Policy:
    # the settings the trace was recorded with replay its partial releases as recorded (allocators.releases)
    exact = ctx.conf.same(getattr(ctx.req, "release_conf", None))
    rule, recorded = driver_of(ctx.req, ctx.device)
    if ctx.core == "c":
        from veotrace.allocators.torchcore import CTorchAllocator

        model = CTorchAllocator(ctx.conf, capacity=ctx.capacity, rec=ctx.rec, va=ctx.va, exact_releases=exact,
                                driver=(rule, recorded))
        if ctx.seed is not None and ctx.seed.used:
            model.seed(ctx.seed, ctx.device, ctx.conf)
        return model
    from veotrace.allocators.driver import Driver
    from veotrace.allocators.seed import seed_state
    from veotrace.allocators.torch import TorchAllocator

    model = TorchAllocator(ctx.conf, capacity=ctx.capacity, rec=ctx.rec, va=ctx.va, exact_releases=exact,
                           driver=Driver(rule, recorded, start=(ctx.va or AddressSpace()).next))
    if ctx.seed is not None and ctx.seed.used:
        seed_state(model, ctx.seed, ctx.device, ctx.conf)
    return model


def driver_of(req, device: int):
    """(the driver's rule on ``device``, {request: [(bytes, address)]} of its recorded segment_allocs) from the
    requests (``driver.DriverRule()`` and none for requests that carry no segment entries, e.g. a stream)."""
    from veotrace.allocators.driver import DriverRule

    recorded: dict[int, list] = {}
    for d, r, s, a in getattr(req, "seg_addr", ()):
        if d == device:
            recorded.setdefault(r, []).append((s, a))
    return getattr(req, "driver_rules", {}).get(device) or DriverRule(), recorded


def _tiered(oracle: bool) -> Callable[[PolicyContext], Policy]:
    def make(ctx: PolicyContext) -> Policy:
        from veotrace.allocators.tiered import TieredAllocator

        return TieredAllocator(ctx.req, oracle=oracle, tiers=ctx.tiers, capacity=ctx.capacity, rec=ctx.rec, va=ctx.va)

    return make


def _reuse(ctx: PolicyContext) -> Policy:
    from veotrace.allocators.reuse import ReuseAllocator

    return ReuseAllocator(capacity=ctx.capacity, rec=ctx.rec, va=ctx.va)


def _arena(best: bool) -> Callable[[PolicyContext], Policy]:
    def make(ctx: PolicyContext) -> Policy:
        from veotrace.allocators.arena import ArenaAllocator

        return ArenaAllocator(best=best, capacity=ctx.capacity, rec=ctx.rec, va=ctx.va)

    return make


def _ideal(ctx: PolicyContext) -> Policy:
    from veotrace.allocators.arena import IdealAllocator

    return IdealAllocator(capacity=ctx.capacity, rec=ctx.rec, va=ctx.va)


REGISTRY: tuple[PolicySpec, ...] = (
    PolicySpec("torch", "PyTorch's CUDACachingAllocator (PYTORCH_CUDA_ALLOC_CONF, a snapshot's settings and state)", _torch),
    PolicySpec("tiered", "pools by predicted lifetime, each with its own granularity (--tiers)", _tiered(False)),
    PolicySpec("tiered-oracle", "the tiered pools, told each allocation's real lifetime", _tiered(True)),
    PolicySpec("reuse", "exact-size reuse of freed blocks, never split", _reuse),
    PolicySpec("bestfit", "one arena, best-fit free block, coalescing", _arena(True)),
    PolicySpec("firstfit", "one arena, first-fit free block, coalescing", _arena(False)),
    PolicySpec("ideal", "the lower bound: reserved equals live bytes at every moment", _ideal),
)
BY_NAME: dict[str, PolicySpec] = {p.name: p for p in REGISTRY}
POLICIES: tuple[str, ...] = tuple(p.name for p in REGISTRY)


def make(name: str, ctx: PolicyContext) -> Policy:
    """One device's policy ``name`` (a name of :data:`POLICIES`)."""
    return BY_NAME[name].factory(ctx)
