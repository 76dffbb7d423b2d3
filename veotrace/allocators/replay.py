"""The loop that drives a policy over alloc/free requests (built in :mod:`veotrace.allocators.requests`).

The request names are re-exported here (``replay.Requests``, ``replay.build_requests``, ``replay.MALLOC``,
...) for the callers that import them from the replay.
"""

from __future__ import annotations

from veotrace.allocators.requests import (FREE, MALLOC, MAX_UNKNOWN_FREES, NO_ADDR, NO_TIME, RELEASE, SEED,  # noqa: F401
                                          RequestBuilder, Requests, build_requests)


def iter_replay(policy_for_device, req: Requests, policies: dict, *, chunk: int = 1 << 16):
    """Drive one policy per device over the requests, yielding after every ``chunk`` requests.

    ``policy_for_device(device)`` makes a fresh policy (with ``malloc``, ``free``, ``rec`` and optionally
    ``release_cached_blocks``, ``arm_release`` and ``seeded(address)``); they are stored in ``policies``.
    Policies with ``run_chunk(req, device, start, end)`` (the compiled torch core) serve a chunk per call.
    The pauses let a caller drain the recorder while the replay runs, so memory stays bounded by the
    live set. Yields the number of requests done.
    """
    for d in req.devices:
        policies[d] = policy_for_device(d)
    n = len(req.kind)
    if policies and all(hasattr(p, "run_chunk") for p in policies.values()):  # compiled cores serve whole chunks
        several = len(policies) > 1
        for start in range(0, n, chunk):
            end = min(start + chunk, n)
            for d, pol in policies.items():
                pol.run_chunk(req, d if several else None, start, end)
            yield end
        return
    handles: dict[int, object] = {}
    kind, size, stream, device, pair, addr = req.kind, req.size, req.stream, req.device, req.pair, req.addr
    only = next(iter(policies.values())) if len(policies) == 1 else None
    for start in range(0, n, chunk):
        end = min(start + chunk, n)
        if only is not None:  # one device: the common case, with the lookups hoisted out of the loop
            rec, malloc, free, i = only.rec, only.malloc, only.free, start
            while i < end:
                k = kind[i]
                if k == MALLOC:
                    rec.req = i
                    handles[i] = malloc(size[i], stream[i])
                elif k == FREE:
                    rec.req = i
                    free(handles.pop(pair[i]))
                else:
                    break
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
