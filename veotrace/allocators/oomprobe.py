"""Would another allocator have served the request that ran out of memory? The recorded OOMs, replayed.

A recorded OOM (PyTorch's ``oom`` trace entry: device, time, request, the device's free bytes) is not a
request of the trace: the allocation failed, so no ``alloc`` follows it. Each policy replays the trace up
to that moment on a fresh model (no capacity), and is then asked for the failed request on its stream
(the torch model first frees its cached blocks if none fits, as PyTorch's malloc does before it
raises); its reserved bytes on the device just before and just after are what it needed.

The budget a policy had is what PyTorch could hold on that device at that moment: ``--capacity`` when
given (per device), else the torch model's reserved bytes just before the request (the replay reproduces
the recorded device allocations, recorded releases included) plus the free bytes the trace recorded.
A policy avoids the OOM when its reserved bytes with the request fit the budget. The torch model must
not: when it does, the verdicts carry a note that the model did not reproduce this OOM.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from veotrace.allocators.requests import FIELDS, NO_ADDR, REQ_MALLOC, REQ_RELEASE, Requests

#: At most this many recorded OOMs are replayed (each costs one replay per policy of the trace up to it).
MAX_PROBED = 3


def probe_ooms(req, ooms: list[dict], *, policies: list[str], conf, seed, tiers, core: str,
               capacity: int | dict | None, budget_conf=None) -> list[dict]:
    """``ooms`` (``analysis.ooms`` records), each with what every policy needed at it (``what_if``).

    Args:
        req: the simulate run's Requests (whole) or RequestStream.
        policies: the policies of the run; the torch model is replayed too (for the budget) if absent.
        conf: the torch policy's settings.
        capacity: the run's ``--capacity`` (bytes per device, or {device: bytes}), or None.
        budget_conf: the settings the trace ran with (default ``conf``): without a capacity, the budget is
            what the torch model under them held before the request, plus the recorded free bytes.
    """
    out = []
    for k, o in enumerate(ooms):
        if k >= MAX_PROBED or o.get("ts_ns") is None or o.get("request_bytes") is None:
            why = (f"only the first {MAX_PROBED} recorded OOMs are replayed" if k >= MAX_PROBED
                   else "the OOM has no time or no request size to replay it at")
            out.append(dict(o, what_if={"evaluated": False, "reason": why}))
            continue
        cap = capacity.get(int(o["device"])) if isinstance(capacity, dict) else capacity
        out.append(dict(o, what_if=_probe(req, o, policies, conf, seed, tiers, core, cap, budget_conf or conf)))
    return out


def _probe(req, o: dict, policies, conf, seed, tiers, core, capacity, budget_conf) -> dict:
    device, size, stream, ts = int(o["device"]), int(o["request_bytes"]), int(o.get("stream") or 0), int(o["ts_ns"])
    upto = _requests_before(req, ts)
    needed = {}
    for name in dict.fromkeys(["torch", *policies]):  # torch first: its state gives the budget
        if name.startswith("tiered") and not isinstance(req, Requests):
            continue
        needed[name] = _replay_to(req, upto, (device, size, stream, ts), name, conf, seed, tiers, core)
    in_use = needed["torch"] if budget_conf.same(conf) else _replay_to(req, upto, (device, size, stream, ts), "torch",
                                                                       budget_conf, seed, tiers, core)
    before = in_use[0]
    if capacity is not None:
        budget, rule = capacity, "--capacity (per device)"
    elif o.get("device_free_bytes") is not None:
        budget = before + int(o["device_free_bytes"])
        rule = "the torch model's reserved bytes just before the request + the device's free bytes the trace recorded"
    else:
        budget, rule = None, "unknown: the trace records no free bytes at the OOM; give --capacity"
    rows = [{"policy": name, "reserved_before_bytes": b, "reserved_with_request_bytes": a,
             "avoids": None if budget is None else a <= budget}
            for name, (b, a) in needed.items() if name in policies]
    res = {"evaluated": True, "budget_bytes": budget, "budget_rule": rule, "requests_replayed": upto,
           "policies": rows}
    res["reproduced"] = None if budget is None else in_use[1] > budget
    if res["reproduced"] is False:
        res["note"] = ("the torch model, under the settings the run used, serves this request within the budget: it "
                       "did not reproduce this OOM. " + LEFT_OUT)
    return res


#: What the model leaves out, that can make a real malloc fail where it fits.
LEFT_OUT = ("The model leaves out other processes on the device, the CUDA context, a memory fraction not given "
            "(--fraction), memory allocated outside PyTorch's allocator, and CUDA graphs' private pools")


def _requests_before(req, ts_ns: int) -> int:
    """Number of requests (in replay order) before the first one timed after the OOM."""
    if isinstance(req, Requests):
        ts = np.frombuffer(req.ts_ns, np.int64)
        after = np.flatnonzero(ts > ts_ns)
        return int(after[0]) if after.size else len(req)
    n = 0
    for part in req.chunks():
        ts = np.frombuffer(part.ts_ns, np.int64)
        after = np.flatnonzero(ts > ts_ns)
        if after.size:
            return part.offset + int(after[0])
        n = part.offset + len(part)
    return n


def _replay_to(req, upto: int, failed: tuple[int, int, int, int], name: str, conf, seed, tiers,
               core: str) -> tuple[int, int]:
    """(reserved on the device after the first ``upto`` requests, and after the ``failed`` request
    (device, size, stream, ts_ns) too)."""
    from veotrace.allocators import replay as rp
    from veotrace.allocators.simulate import make_policy
    from veotrace.allocators.torchcore import choose_core, recorder_for

    core = choose_core(conf, None, core)[0] if name == "torch" else "python"
    device, size, stream, ts = failed
    probe = Requests(offset=upto)
    # PyTorch's malloc, finding no cached block that fits and no room for a new segment, frees its
    # cached blocks and tries once more before it raises: the torch model follows (an armed release).
    probe.add(REQ_RELEASE, 1, stream, device, -1, NO_ADDR, -1, ts)
    probe.add(REQ_MALLOC, size, stream, device, -1, NO_ADDR, -1, ts)
    whole = isinstance(req, Requests)
    context = _joined(req, upto, probe) if whole else req  # the tiered models read lifetimes by index
    rec, models = recorder_for(name, core, record=False), {}

    def make(d):
        return make_policy(name, d, context, rec, conf=conf, capacity=None, seed=seed, tiers=tiers, core=core)

    before = 0
    for part in rp.iter_replay(make, _parts(req, upto, probe), models):
        if part is not probe:
            before = models[device].c.reserved if device in models else 0
    return before, models[device].c.reserved


def _parts(req, upto: int, probe: Requests) -> Iterator[Requests]:
    if isinstance(req, Requests):
        yield req.split(upto)[0]
    else:
        for part in req.chunks():
            if part.offset >= upto:
                break
            yield part.split(upto - part.offset)[0] if part.offset + len(part) > upto else part
    yield probe


def _joined(req: Requests, upto: int, probe: Requests) -> Requests:
    head = req.split(upto)[0]
    out = Requests()
    for name in FIELDS:
        setattr(out, name, getattr(head, name) + getattr(probe, name))
    out.release_conf = req.release_conf  # the models made for it replay the recorded releases as the trace's own do
    return out


def counted(row_policy: str, in_use: bool, ooms: list[dict]) -> dict:
    """The recorded OOMs one policy (row) counts: every one for the torch model under the settings the run
    used (it happened), the ones it does not avoid (its replay needs more than the budget) for any other;
    ``unknown``: no budget to judge by."""
    n = not_avoided = unknown = 0
    for o in ooms:
        w = o.get("what_if") or {}
        if not w.get("evaluated"):
            unknown += 1
            continue
        n += 1
        verdict = next((r["avoids"] for r in w["policies"] if r["policy"] == row_policy), None)
        if in_use or verdict is False:
            not_avoided += 1
        elif verdict is None:
            unknown += 1
    return {"recorded": n, "counted": not_avoided, "unknown": unknown, "in_use": in_use}
