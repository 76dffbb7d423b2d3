"""Check the torch model against a real snapshot: does it make the device allocations the trace recorded?

A recorded ``segment_alloc``/``segment_map`` is reproduced when the model, replaying the same requests,
makes a device allocation of the same size while serving the same trace allocation (the next ``alloc``
after the recorded entry). ``extra`` counts the model's device allocations the trace does not have.
The check runs twice: following the trace's own releases (``segment_free``/``segment_unmap`` runs
become ``release_cached_blocks`` points), and without them, where only ``--capacity`` (or, when none
is given, the trace's own peak reserved bytes per device) makes the model release cached memory.
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa

from veotrace.allocators import replay as rp
from veotrace.allocators.base import EV_NAMES, EV_SEGMENT_ALLOC, EV_SEGMENT_MAP, Recorder
from veotrace.allocators.builder import build_requests, peaks
from veotrace.allocators.conf import TorchConf
from veotrace.allocators.requests import MAX_UNKNOWN_FREES, REQ_FREE, REQ_MALLOC, REQ_SEED, Requests
from veotrace.allocators.seed import Seed
from veotrace.allocators.torch import get_allocation_size, round_size

#: Mismatches listed per kind in the output.
MAX_MISMATCHES = 5
#: Targets from the issue: reproduced share and extras as a share of recorded.
TARGET_SHARE, TARGET_EXTRA = 0.95, 0.05
#: More than this share of segment sizes off get_allocation_size: the trace is another allocator's.
OTHER_ALLOCATOR_SHARE = 0.5
#: Fewer segment_alloc entries than this say nothing of the allocator that wrote them.
MIN_CHECKED = 5


def run_torch(req: Requests, conf: TorchConf, seed: Seed | None, capacity, core: str = "python") -> tuple[dict, Recorder]:
    """Replay ``req`` through seeded torch models (one per device) on ``core`` ("c" or "python");
    ``capacity``: int, dict or None. The recorder returned holds every event."""
    from veotrace.allocators.simulate import make_policy
    from veotrace.allocators.torchcore import recorder_for

    rec = recorder_for("torch", core)

    def make(device: int):
        cap = capacity.get(device) if isinstance(capacity, dict) else capacity
        return make_policy("torch", device, req, rec, conf=conf, capacity=cap, seed=seed, tiers=None, core=core)

    policies = rp.replay(make, req)
    if core == "c":
        events, rec = rec.drain(), Recorder()
        rec.events = [tuple(e) for e in events.tolist()]
    return policies, rec


def recorded_peaks(req: Requests, seed: Seed | None) -> dict[int, int]:
    """Peak reserved bytes per device as the trace recorded them (seeded segments included)."""
    events = sorted([(r, +s, d) for d, r, _, s in req.recorded] + [(r, -s, d) for d, r, _, s in req.released],
                    key=lambda e: (e[0], e[1] > 0))
    cur = Counter()
    for d, _, size, _, _ in (seed.segments if seed else ()):
        cur[d] += size
    peak = Counter(cur)
    for _, delta, d in events:
        cur[d] += delta
        peak[d] = max(peak[d], cur[d])
    return dict(peak)


def compare(req: Requests, rec: Recorder) -> dict:
    """Match recorded device allocations with the model's by (device, request, size)."""
    recorded = Counter((d, r, s) for d, r, _, s in req.recorded)
    model = Counter((req.device[r] if r < len(req) else -1, r, s)
                    for r, op, _, s, _, _ in rec.events if op in (EV_SEGMENT_ALLOC, EV_SEGMENT_MAP) and r >= 0)
    matched = recorded & model
    missing, extra = recorded - matched, model - matched
    n_rec, n_rep = sum(recorded.values()), sum(matched.values())
    by_req: dict[int, list[str]] = {}
    for r, op, _, s, _, _ in rec.events:
        if op >= EV_SEGMENT_ALLOC and r >= 0:
            by_req.setdefault(r, []).append(f"{EV_NAMES[op]} {s:,}")
    rec_by_req: dict[int, list[str]] = {}
    for _, r, op, s in req.recorded:
        rec_by_req.setdefault(r, []).append(f"{op} {s:,}")

    def context(kind: str, key) -> dict:
        d, r, s = key
        ok = r < len(req)
        return {"kind": kind, "device": d, "request": r, "source_row": req.seq[r] if ok else None,
                "alloc_size_bytes": req.size[r] if ok else None, "device_alloc_bytes": s,
                "recorded_here": rec_by_req.get(r, []), "model_here": by_req.get(r, [])}

    first = sorted([context("not reproduced", k) for k in missing] + [context("extra", k) for k in extra],
                   key=lambda m: m["request"])
    return {
        "recorded_segment_allocs": n_rec, "reproduced": n_rep,
        "share": n_rep / n_rec if n_rec else None,
        "extra": sum(extra.values()),
        "extra_share": sum(extra.values()) / n_rec if n_rec else None,
        "meets_targets": bool(n_rec) and n_rep / n_rec >= TARGET_SHARE and sum(extra.values()) <= TARGET_EXTRA * n_rec,
        "first_mismatches": first[:2 * MAX_MISMATCHES],
    }


def validate(table: pa.Table, seed: Seed, conf: TorchConf, *, capacity: int | None = None,
             max_unknown_frees: float = MAX_UNKNOWN_FREES, torch_core: str = "auto") -> dict:
    """The ``validation`` object of simulate's JSON for one snapshot (see the module docstring); the torch
    model runs on the core :func:`torchcore.choose_core` picks (``validation.torch_core``)."""
    from veotrace.allocators.torchcore import choose_core

    seeds, top = seed.request_seeds(), peaks(table)  # both builds classify the releases by the same peaks
    with_rel = build_requests(table, seeds=seeds, max_unknown_frees=max_unknown_frees, use_releases=True, conf=conf,
                              peaks=top, frames=seed.release_frames,
                              segments=seed.segments)
    if not with_rel.recorded:
        return {"recorded_segment_allocs": 0, "note": "the trace records no segment_alloc/segment_map entries: "
                "nothing to validate against"}
    inferred = capacity is None
    cap = capacity if capacity is not None else recorded_peaks(with_rel, seed)
    # one core for both runs, chosen with the capacity the run without releases has (given or inferred): the
    # core must cover that run too (expandable segments past a 2^50-byte capacity run in Python)
    core = choose_core(conf, cap, torch_core)[0]
    models, rec = run_torch(with_rel, conf, seed, None, core)  # the recorded releases stand for the device's limit
    out = compare(with_rel, rec)
    out["assumed_addresses"] = {"device_allocations": sum(m.c.assumed_addresses for m in models.values()),
                                "best_fit_ties_decided": sum(m.c.assumed_ties for m in models.values())}
    no_rel = build_requests(table, seeds=seeds, max_unknown_frees=max_unknown_frees, use_releases=False, conf=conf,
                            peaks=top, frames=seed.release_frames,
                              segments=seed.segments)
    _, rec2 = run_torch(no_rel, conf, seed, cap, core)
    alone = compare(no_rel, rec2)
    alone.pop("first_mismatches")
    alone["capacity"] = cap if not inferred else {str(d): v for d, v in cap.items()}
    alone["capacity_from"] = "--capacity" if not inferred else "the trace's peak reserved bytes per device"
    out["without_recorded_releases"] = alone
    out["allocator"] = port_signs(with_rel, out, allocator_check(with_rel, conf))
    if out["allocator"]["pytorch_cuda_caching"] is False:  # a statement about another allocator, not PyTorch
        out["meets_targets"] = alone["meets_targets"] = False
    out["explanations"] = explain(table, seed, conf, with_rel, out, alone)
    out["assumptions"] = [] if "defaults" not in conf.source else [
        "the snapshot has no allocator_settings: PyTorch's defaults are assumed (a job that set "
        "PYTORCH_CUDA_ALLOC_CONF ran under other rules)"]
    out["recorded_releases"] = with_rel.releases
    out["seeded"] = seed.used
    out["seed"] = seed.describe()
    out["settings"] = conf.source
    out["torch_core"] = core
    return out


def allocator_check(req: Requests, conf: TorchConf) -> dict:
    """Was the trace written by PyTorch's CUDA caching allocator? Its cudaMalloc sizes are
    ``get_allocation_size(round_size(request))`` of the allocation each segment_alloc precedes; when most
    recorded sizes are not (another vendor's port of the allocator, a custom one, synthetic data), the
    model's numbers are not a statement about PyTorch. Expandable segments map whole pages: not checked.
    Returns ``{"pytorch_cuda_caching": True | False | None, "checked", "off_sizes", "why"}``."""
    if conf.expandable_segments:
        return {"pytorch_cuda_caching": None, "checked": 0, "off_sizes": 0,
                "why": "expandable segments map whole pages: the segment sizes say nothing of the allocator"}
    pairs = [(r, size) for _, r, op, size in req.recorded if op == "segment_alloc" and r < len(req)]
    off = [(r, size) for r, size in pairs if size != get_allocation_size(round_size(req.size[r], conf))]
    out = {"pytorch_cuda_caching": None, "checked": len(pairs), "off_sizes": len(off), "why": None}
    if len(pairs) < MIN_CHECKED:
        out["why"] = f"only {len(pairs)} segment_alloc entries before an alloc: too few to tell"
        return out
    r, size = off[0] if off else (None, None)
    if len(off) > OTHER_ALLOCATOR_SHARE * len(pairs):
        out["pytorch_cuda_caching"] = False
        out["why"] = (f"{len(off)} of {len(pairs)} recorded segment sizes are not what PyTorch's get_allocation_size "
                      f"gives for the allocation they precede (e.g. {size:,} bytes before a {req.size[r]:,}-byte "
                      "request): the trace was written by another allocator (another vendor's port, a custom one), "
                      "so the torch model's numbers are not PyTorch's")
    else:
        out["pytorch_cuda_caching"] = True
        out["why"] = f"{len(pairs) - len(off)} of {len(pairs)} recorded segment sizes are get_allocation_size's"
    return out


def port_signs(req: Requests, out: dict, check: dict) -> dict:
    """Every sign the trace gives that another vendor's port of the allocator wrote it, added to ``check``
    (:func:`allocator_check`'s) as ``signs``: stream ids that are all pointers with none on stream 0 (PyTorch's
    CUDA default stream is 0, and a port writes its own stream handles, e.g. ``aclrtStream``), the segment
    sizes, and a replay that fails from the first device allocation. Stream ids alone prove nothing (PyTorch
    writes ``cudaStream_t`` pointers for its other streams): the pointers and the failure from the first
    request together name the trace another allocator's."""
    import numpy as np

    kind = np.frombuffer(req.kind, np.int64)
    streams = np.unique(np.frombuffer(req.stream, np.int64)[kind == REQ_MALLOC]) if len(kind) else np.zeros(0, np.int64)
    pointers = bool(len(streams)) and 0 not in streams and bool((np.abs(streams) > 1 << 32).all())
    first_alloc = next((r for _, r, op, _ in req.recorded if op == "segment_alloc"), None)
    first = out["first_mismatches"][0]["request"] if out["first_mismatches"] else None
    from_first = not out["meets_targets"] and first is not None and first_alloc is not None and first <= first_alloc
    signs = {"stream_ids_all_pointers": pointers, "streams": [hex(int(v)) for v in streams[:4]],
             "off_sizes": check["off_sizes"], "checked_sizes": check["checked"],
             "fails_from_first_device_allocation": from_first}
    out_check = dict(check, signs=signs)
    if check["pytorch_cuda_caching"] is not False and pointers and from_first:
        out_check["pytorch_cuda_caching"] = False
        out_check["why"] = (f"another vendor's port of the allocator wrote this trace: every allocation's stream id is "
                            f"a pointer ({', '.join(signs['streams'])}; PyTorch's CUDA default stream is 0) and the "
                            f"replay fails from the first device allocation (request {first:,}), while "
                            f"{check['checked'] - check['off_sizes']} of {check['checked']} segment sizes are "
                            "get_allocation_size's: the torch model's numbers here are not PyTorch's")
    return out_check


def explain(table: pa.Table, seed: Seed, conf: TorchConf, req: Requests, out: dict, alone: dict) -> list[str]:
    """Why the model does not match this trace: only causes the trace shows, each with its count; when
    none is found, that is said, with the first mismatch."""
    why = []
    if out["meets_targets"] and alone["meets_targets"]:
        return why
    check = out["allocator"]
    if check["pytorch_cuda_caching"] is False:
        why.append(check["why"])
    elif check["off_sizes"] > TARGET_EXTRA * max(check["checked"], 1):
        why.append(f"{check['off_sizes']} of {check['checked']} recorded segment sizes are not what "
                   "get_allocation_size gives for the allocation they precede (another PyTorch version, or "
                   "settings the snapshot does not record)")
    if req.counts.get("unknown_frees"):
        why.append(f"{req.counts['unknown_frees']} frees name blocks neither the trace nor the seeding knows; "
                   "their memory stays allocated in the model")
    if seed.expandable and not seed.used and req.counts.get("unknown_frees"):
        why.append("the trace starts part-way in expandable segments, which are not seeded (their mapped pages "
                   "before recording are unknown)")
    ops = table.column("op").to_pylist()
    late = sum(1 for a, b in zip(ops, ops[1:]) if a == "free_requested" and b != "free_completed")
    if late:
        why.append(f"{late} frees completed later than requested (record_stream on other streams); the model "
                   "returns blocks at free_completed, but cannot know the events PyTorch polled in between")
    first = next((m for m in out["first_mismatches"]), None)
    ties = (out.get("assumed_addresses") or {}).get("best_fit_ties_decided", 0)
    if not out["meets_targets"] and ties:
        why.append(f"{ties} best-fit tie{'' if ties == 1 else 's'} between equal free blocks "
                   f"{'was' if ties == 1 else 'were'} decided by "
                   "addresses the recording never made (the model's own extra cudaMalloc calls, placed by the driver's rule learned from the trace): "
                   "PyTorch breaks such ties by the driver's pointers (BlockComparatorSize), so the splits that follow "
                   "can differ")
    if not out["meets_targets"] and seed.used and first is not None and not ties:
        live = _seeded_live_at(req, first["request"])
        if live:
            why.append(f"the first mismatch (request {first['request']:,}) comes while {live} blocks live before "
                       "recording are still live: their sizes are estimated (round_size of the requested size, "
                       "grown where PyTorch would not split), so the splits around them can differ")
    dropped = {k: v["runs"] for k, v in req.releases.get("by_kind", {}).items() if k != "empty_cache"}
    if not alone["meets_targets"] and out["meets_targets"] and dropped:
        runs = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in dropped.items())
        why.append(f"without the releases recorded inside a malloc ({runs}) the model releases cached memory only "
                   f"past the capacity ({alone['capacity_from']}), which the recorded run's limit may not be")
    if not why and first is not None:
        why.append(f"no cause found in the trace: the first mismatch is at request {first['request']:,} (source row "
                   f"{first['source_row']}): recorded {first['recorded_here'] or 'no device allocation'}, "
                   f"model {first['model_here'] or 'no device allocation'}")
    return why


def _seeded_live_at(req: Requests, r: int) -> int:
    """How many blocks live before recording (REQ_SEED) are still live before request ``r``."""
    import numpy as np

    kind, pair = np.frombuffer(req.kind, np.int64)[:r], np.frombuffer(req.pair, np.int64)[:r]
    seeded = kind == REQ_SEED
    freed = np.isin(np.flatnonzero(seeded), pair[kind == REQ_FREE])
    return int(seeded.sum() - freed.sum())
