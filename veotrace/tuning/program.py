"""The program's own ``empty_cache()`` calls, where and how much: the runs of releases that issue 42's
classification (``allocators.releases``, made while the requests are built) calls the program's, placed
back on the trace (first and last release, their entries on their device and times, segments and bytes).

``diagnose``'s rules read them (``tune``'s ``params.program_releases``) to tell the state the program gave
back itself from a state the run suffered: the cache at the instant before ``empty_cache()`` is what the
program released, not the run's problem.
"""

from __future__ import annotations

import numpy as np

#: Runs listed at most (each counted in ``runs`` and ``bytes`` all the same).
MAX_LISTED = 200


def program_releases(req, table) -> dict:
    """The runs of releases classified as the program's ``empty_cache()`` in ``req`` (whole ``Requests``),
    placed on ``table`` (the ``ALLOC_EVENTS`` they were built from). Returns ``{"runs": n, "segments",
    "bytes", "listed": [...]}``, each listed run ``{"device", "segments", "bytes", "first_entry",
    "last_entry", "first_ts_ns", "last_ts_ns", "prev_device_event_entry"}``: entries count the rows of
    that device from 0 (a snapshot's trace index on the device); ``prev_device_event_entry`` is the last
    segment event of the device before the run (-1: none since the trace began), so a state at entry
    ``e`` is the one the run released when ``prev_device_event_entry <= e < first_entry``."""
    from veotrace.allocators.releases import REL_EMPTY_CACHE
    from veotrace.allocators.requests import NO_TIME, REQ_RELEASE
    from veotrace.schemas.events import DEVICE_OPS, RELEASE_OPS

    out = {"runs": 0, "segments": 0, "bytes": 0, "listed": []}
    kind = np.frombuffer(req.kind, np.int64) if len(req) else np.zeros(0, np.int64)
    rel = np.flatnonzero(kind == REQ_RELEASE)
    if not rel.size or table is None or not table.num_rows:
        return out
    k = np.frombuffer(req.size, np.int64)[rel]
    mine = rel[np.where(k < 0, -1 - k, k) == REL_EMPTY_CACHE]
    if not mine.size:
        return out
    import pyarrow as pa
    import pyarrow.compute as pc

    op = table.column("op").cast(pa.string())
    is_rel = pc.is_in(op, value_set=pa.array(RELEASE_OPS)).to_numpy(zero_copy_only=False)
    is_seg = is_rel | pc.is_in(op, value_set=pa.array(DEVICE_OPS)).to_numpy(zero_copy_only=False)
    dev = table.column("device").fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    size = table.column("size_bytes").fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    ts_col = table.column("ts_ns")
    ts = None if ts_col.null_count == len(ts_col) else ts_col.fill_null(NO_TIME).to_numpy(zero_copy_only=False)
    seq = table.column("seq").to_numpy(zero_copy_only=False).astype(np.int64)
    n = len(seq)
    if np.array_equal(seq, np.arange(n)):
        pos_of = np.frombuffer(req.seq, np.int64)[mine]
    else:
        order = np.argsort(seq, kind="stable")
        at = np.searchsorted(seq[order], np.frombuffer(req.seq, np.int64)[mine])
        pos_of = order[np.clip(at, 0, n - 1)]
    entry = np.empty(n, np.int64)  # each row's index among its device's rows
    by_dev = np.argsort(dev, kind="stable")
    starts = np.flatnonzero(np.r_[True, dev[by_dev][1:] != dev[by_dev][:-1]])
    entry[by_dev] = np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))
    breakers, segops = {}, {}
    for p in pos_of.tolist():
        if not 0 <= p < n or not is_rel[p]:
            continue
        d = int(dev[p])
        if d not in breakers:
            breakers[d] = np.flatnonzero(~(is_rel & (dev == d)))
            segops[d] = np.flatnonzero(is_seg & (dev == d))
        b = breakers[d]
        i = np.searchsorted(b, p)
        q = int(b[i]) if i < b.size else n  # the run: device d's releases from p up to the next other row
        s = segops[d]
        j = int(np.searchsorted(s, p)) - 1
        run = {"device": d, "segments": q - p, "bytes": int(size[p:q].sum()),
               "first_entry": int(entry[p]), "last_entry": int(entry[q - 1]),
               "first_ts_ns": None if ts is None or ts[p] == NO_TIME else int(ts[p]),
               "last_ts_ns": None if ts is None or ts[q - 1] == NO_TIME else int(ts[q - 1]),
               "prev_device_event_entry": int(entry[s[j]]) if j >= 0 else -1}
        out["runs"] += 1
        out["segments"] += run["segments"]
        out["bytes"] += run["bytes"]
        if len(out["listed"]) < MAX_LISTED:
            out["listed"].append(run)
    return out


def reserved_unknown(req, seed, rows: list[dict]) -> dict | None:
    """The contradiction of a snapshot whose trace records no segment event (no ``segment_alloc``/``free``/
    ``map``/``unmap``) yet holds more live bytes at once than the snapshot's segments reserve: no allocator
    could have served the trace from those segments, so the segments of the trace's time were made and
    released without a record (or the trace is not this snapshot's), and the reserved bytes over the trace
    cannot be known. ``rows``: tune's finished candidates (their peak live bytes, the replay's). Returns
    ``{"peak_live_bytes", "reserved_bytes", "segments", "why"}``, or None when the input holds together."""
    from veotrace.units import gib

    if seed is None or not seed.segments or req.recorded or req.released:
        return None
    reserved = sum(s[2] for s in seed.segments)
    live = max((r.get("peak_allocated_bytes") or 0 for r in rows if r.get("status") == "finished"), default=0)
    if live <= reserved:
        return None
    return {"peak_live_bytes": int(live), "reserved_bytes": int(reserved), "segments": len(seed.segments),
            "why": (f"the trace contradicts its snapshot: it holds up to {gib(live)} live at once while the "
                    f"snapshot's {len(seed.segments):,} segments reserve {gib(reserved)}, and it records no segment "
                    "event, so the segments that held it were made and released without a record (or the trace is "
                    "not this snapshot's): the reserved bytes over the trace cannot be known, and no setting is "
                    "recommended from it. Record with _record_memory_history() from the job's start (its segment "
                    "events with it)")}
