"""The loop that drives a policy over alloc/free requests (built in :mod:`veotrace.allocators.builder`)."""

from __future__ import annotations

import numpy as np

from veotrace.allocators import releases as rl
from veotrace.allocators.requests import REQ_FREE, REQ_MALLOC, REQ_RELEASE, REQ_SEED, Requests
from veotrace.replay_limits import check_devices


def iter_replay(policy_for_device, req, policies: dict, *, chunk: int = 1 << 16):
    """Drive one policy per device over the requests, yielding after every ``chunk`` requests.

    ``req``: a whole :class:`Requests`, or an iterable of Requests chunks (each holding the requests from
    its ``offset`` on, e.g. :meth:`veotrace.allocators.stream.RequestStream.chunks`), served in order.
    ``policy_for_device(device)`` makes a fresh policy (with ``malloc``, ``free``, ``rec`` and optionally
    ``release_cached_blocks``, ``release`` and ``seeded(address)``) when its device first appears;
    they are stored in ``policies``. Policies with ``run_chunk(req, device, start, end)`` and
    ``run_rows(req, rows, lo, hi)`` (the compiled torch core) serve a chunk per call, or with several
    devices, each device its own requests of the chunk (grouped by one sort, so the cost is the
    requests', not devices x requests). The pauses let a caller drain the recorder while the replay runs,
    so memory stays bounded by the live set. Yields the chunk being served (requests up to the pause done).
    """
    whole = isinstance(req, Requests)
    if whole:
        check_devices(len(req.devices))
        for d in req.devices:
            policies[d] = policy_for_device(d)
    handles: dict[int, object] = {}
    for part in ([req] if whole else req):
        for d in part.devices:
            if d not in policies:
                check_devices(len(policies) + 1)
                policies[d] = policy_for_device(d)
        off, n = part.offset, part.offset + len(part)
        compiled = all(hasattr(p, "run_chunk") for p in policies.values())
        for start in range(off, n, chunk):
            end = min(start + chunk, n)
            if compiled and len(policies) == 1:  # compiled cores serve whole chunks
                next(iter(policies.values())).run_chunk(part, None, start, end)
            elif compiled:
                _serve_compiled(policies, part, start, end)
            else:
                _serve(policies, handles, part, start, end)
            yield part


def _serve_compiled(policies: dict, part: Requests, start: int, end: int) -> None:
    """Requests ``start..end-1`` on compiled cores of several devices: each device's requests, grouped by
    one stable sort of the chunk (``frag.decode.by_device``), in request order (a request touches one
    device only, so serving the devices one after the other gives each core what a shared loop would)."""
    from veotrace.frag.decode import by_device

    off = part.offset
    dev = np.frombuffer(part.device, np.int64)[start - off:end - off]
    for d, (rows,) in by_device(dev, (np.arange(start - off, end - off, dtype=np.int64),)):
        policies[d].run_rows(part, rows, 0, rows.size)


def _serve(policies: dict, handles: dict, part: Requests, start: int, end: int) -> None:
    """Requests ``start..end-1`` (global indices; ``part`` holds them from ``part.offset``) in Python."""
    kind, size, stream, device, pair, addr = part.kind, part.size, part.stream, part.device, part.pair, part.addr
    off = part.offset
    j, stop = start - off, end - off
    if len(policies) == 1:  # one device: the common case, with the lookups hoisted out of the loop
        only = next(iter(policies.values()))
        rec, malloc, free = only.rec, only.malloc, only.free
        while j < stop:
            k = kind[j]
            if k == REQ_MALLOC:
                rec.req = j + off
                handles[j + off] = malloc(size[j], stream[j])
            elif k == REQ_FREE:
                rec.req = j + off
                free(handles.pop(pair[j]))
            else:
                break
            j += 1
    for j in range(j, stop):  # noqa: B020  (the loop goes on from where the one above stopped)
        k, i = kind[j], j + off
        pol = policies[device[j]]
        pol.rec.req = i
        if k == REQ_MALLOC:
            handles[i] = pol.malloc(size[j], stream[j])
        elif k == REQ_FREE:
            pol.free(handles.pop(pair[j]))
        elif k == REQ_SEED:
            seeded = getattr(pol, "seeded", None)
            h = seeded(addr[j]) if seeded is not None else None
            handles[i] = h if h is not None else pol.malloc(size[j], stream[j])
        elif k == REQ_RELEASE and size[j] >= 0:  # a negative kind: recorded, not followed
            what = size[j]
            if hasattr(pol, "release"):  # the torch model: every kind (allocators.releases)
                pol.release(what, part.release_segments(i) if what in (rl.REL_SPLIT_RETRY, rl.REL_GC) else ())
            elif what in (rl.REL_EMPTY_CACHE, rl.REL_OOM) and hasattr(pol, "release_cached_blocks"):
                pol.release_cached_blocks()  # the cache emptied at that point: every policy follows


def replay(policy_for_device, req: Requests) -> dict:
    """Run :func:`iter_replay` to the end; returns {device: policy}."""
    policies: dict = {}
    for _ in iter_replay(policy_for_device, req, policies):
        pass
    return policies
