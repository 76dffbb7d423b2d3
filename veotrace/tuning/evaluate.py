"""One candidate setting replayed through the torch model on the shared requests, stopped early when it
can no longer win.

The replay is ``simulate``'s (the same requests, seed, capacity and core, ``allocators.torchcore.
choose_core``), so every number equals what ``simulate --policy torch --conf TEXT`` prints for that
setting. The objective is a counter that only grows during a replay (peak reserved, device
allocations, flushes: :data:`OBJECTIVES`), as are the tie-breakers after it; at every pause of the
replay (``replay.iter_replay``'s chunks) a candidate whose (objective, device allocations, flushes)
already exceed ``bound`` (the best finished candidate's, compared in that order) cannot win and stops
(``pruned``); with a capacity, one that has failed an allocation cannot fit and stops too.
Pruning never changes the recommendation: it only stops candidates that could not have been chosen.
"""

from __future__ import annotations

import numpy as np

from veotrace.allocators import replay as rp
from veotrace.allocators.simulate import per_device, totals

#: Objectives: the candidate's number each minimises (summed over devices; a PolicyCounters field without
#: "_bytes"), all non-decreasing during a replay.
OBJECTIVES = {"peak-reserved": "peak_reserved_bytes", "device-allocs": "device_allocs", "flushes": "flushes"}
#: Requests served between two checks of the bound.
CHUNK = 1 << 15


def evaluate(req, cand, *, seed=None, capacity=None, core: str = "auto", objective: str = "peak-reserved",
             bound: tuple | None = None, prune: bool = True, chunk: int = CHUNK, stop: int | None = None) -> dict:
    """Replay ``req`` (whole ``Requests``) through the torch model with ``cand``'s settings (a
    ``space.Candidate``). ``capacity``: bytes per device, a dict {device: bytes}, or None.

    Returns a dict: ``status`` ("finished" or "pruned"), the counters summed over devices (as
    ``simulate``'s torch row (``prune=False``: never stopped early): ``peak_reserved_bytes``, ``peak_allocated_bytes``, ``device_allocs``,
    ``device_frees``, ``flushes``, ``alloc_retries``, ``ooms``, ``first_oom``), ``per_device``, the core that
    ran, and for a pruned one ``pruned_at`` (the request) and ``why``. ``stop``: replay only the first
    ``stop`` requests (``status`` "probe").
    """
    make, rec, ran, why_core = _torch_models(req, cand, seed, capacity, core, record=False)
    models: dict = {}
    for part in rp.iter_replay(make, req, models, chunk=chunk if stop is None else max(stop, 1)):
        rec.drain()  # counters only: the events are not kept
        if stop is not None:  # the first ``stop`` requests only: a probe (its counters bound the whole run's from below)
            return _row(cand, models, ran, why_core, "probe", part, None, served=min(stop, len(req)))
        total = totals(models)
        if not prune:
            continue
        if capacity is not None and total.ooms:
            return _row(cand, models, ran, why_core, "pruned", part, "an allocation did not fit the capacity")
        if bound is not None and ranked(total, objective) > bound:
            return _row(cand, models, ran, why_core, "pruned", part,
                        f"{objective} (then device allocations, flushes) {ranked(total, objective)} already past the "
                        f"best finished {bound}")
    return _row(cand, models, ran, why_core, "finished", None, None)


def ranked(c, objective: str) -> tuple[int, int, int]:
    """The counters the recommendation rule compares first, in its order (``search.rank_key``), from
    counters (running or final) or a row: each only grows during a replay, so a running tuple already
    past the best finished one's can only end past it."""
    if isinstance(c, dict):
        return (c[OBJECTIVES[objective]], c["device_allocs"], c["flushes"])
    return (getattr(c, OBJECTIVES[objective].removesuffix("_bytes")), c.device_allocs, c.flushes)


def _torch_models(req, cand, seed, capacity, core: str, *, record: bool):
    """(``make(device)`` -> the torch model of ``cand``'s settings on that device, its recorder, the core
    that runs, why): as ``simulate --policy torch --conf`` makes them. ``capacity``: bytes, a dict
    {device: bytes}, or None."""
    from veotrace.allocators.simulate import make_policy
    from veotrace.allocators.torchcore import choose_core, recorder_for

    cap_of = capacity.get if isinstance(capacity, dict) else (lambda d: capacity)
    caps = [v for v in (capacity.values() if isinstance(capacity, dict) else [capacity]) if v is not None]
    ran, why = choose_core(cand.conf, max(caps) if caps else None, core)
    rec = recorder_for("torch", ran, record=record)

    def make(d):
        return make_policy("torch", d, req, rec, conf=cand.conf, capacity=cap_of(d), seed=seed, tiers=None, core=ran)

    return make, rec, ran, why


def _row(cand, models: dict, core: str, why_core: str, status: str, part, why: str | None,
         served: int | None = None) -> dict:
    t = totals(models)
    row = {**cand.to_dict(), "status": status, "core": core, "core_why": why_core,
           "peak_reserved_bytes": t.peak_reserved, "peak_allocated_bytes": t.peak_allocated,
           "device_allocs": t.device_allocs, "device_frees": t.device_frees, "flushes": t.flushes,
           "alloc_retries": t.alloc_retries, "ooms": t.ooms, "first_oom": t.first_oom,
           # device allocations the recording never made, and the best-fit ties their assumed addresses decided
           "assumed_addresses": t.assumed_addresses, "assumed_ties": t.assumed_ties,
           # GMLake's fragmentation at the peak: the share of the peak reserved bytes never live at once
           "gmlake_frag": 1 - t.peak_allocated / t.peak_reserved if t.peak_reserved else None,
           "per_device": per_device(models)}
    if status in ("pruned", "probe"):
        row["pruned_at"] = served if served is not None else int(part.offset + len(part)) if part is not None else 0
        row["why"] = why
    return row


def part_peaks(req, cand, divisions: list[np.ndarray], *, seed=None, capacity=None,
               core: str = "auto") -> list[dict[str, dict]]:
    """Per division of the trace, per device, the peak reserved bytes during each of its parts, from one
    replay with ``cand``'s settings. A division gives each request its part (a small int; -1: none); a
    part's peak is the highest reserved level after an event of one of its requests (the first part also
    holds the seeded state). Read from the replay's device allocation events. Returns one
    {device: {part: bytes}} per division."""
    from veotrace.allocators.base import event_devices, reserved_delta

    make, rec, _, _ = _torch_models(req, cand, seed, capacity, core, record=True)
    models: dict = {}
    pieces = []
    for _ in rp.iter_replay(make, req, models):
        ev = rec.drain()
        delta = reserved_delta(ev[:, 1], ev[:, 3])
        pieces.append(np.column_stack([ev[:, 0], delta])[delta != 0])  # the device allocations alone
    ev = np.concatenate(pieces) if pieces else np.zeros((0, 2), np.int64)
    devices = np.frombuffer(req.device, np.int64)
    r, delta = ev[:, 0], ev[:, 1]
    dev = event_devices(ev, devices)
    return [_peaks_by_part(parts, r, dev, delta, devices, sorted(models)) for parts in divisions]


def _peaks_by_part(parts: np.ndarray, r, dev, delta, devices, device_ids) -> dict[str, dict]:
    part = np.where(r >= 0, parts[np.clip(r, 0, max(len(parts) - 1, 0))] if len(parts) else -1,
                    parts[0] if len(parts) else -1)  # seeded: the first part
    out: dict[str, dict] = {}
    for d in device_ids:
        mine = dev == d
        level, labels = np.cumsum(delta[mine]), part[mine]
        peaks: dict[int, int] = {}
        for k in np.unique(labels[labels >= 0]).tolist():
            peaks[k] = int(level[labels == k].max())
        # a part with no device allocation of its own holds what was reserved when it began
        for k in np.unique(parts[(devices == d) & (parts >= 0)]).tolist() if len(parts) else []:
            if k not in peaks:
                first = int(np.flatnonzero((devices == d) & (parts == k))[0])
                before = level[r[mine] < first]
                peaks[k] = int(before[-1]) if before.size else 0
        out[str(d)] = peaks
    return out


def halves(req) -> np.ndarray:
    """Each request's half of the trace (0, then 1 from the middle request on)."""
    return (np.arange(len(req)) >= len(req) // 2).astype(np.int64)


def evaluate_call(shared: tuple, cand, bound: tuple | None, stop: int | None = None, prune: bool = True) -> dict:
    """:func:`evaluate` as an engine call (``engine.calls.call_pool``): ``shared`` is (requests, keywords),
    sent to each worker once."""
    req, kw = shared
    return evaluate(req, cand, bound=bound, stop=stop, **{**kw, "prune": prune})
