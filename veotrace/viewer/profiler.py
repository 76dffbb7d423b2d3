"""A PyTorch profiler trace's lanes (``sources.kineto``; a folder of one trace per rank is one run): each file
read once, with the spans enclosing its memory events (``cached_read(..., context=True)``, whose cache serves
the plain read of the alloc/free events too), one lane per rank and GPU and one per rank's CPU (kept apart:
never in a GPU's numbers, no map), titled as ``veotrace info`` names them (``rank 1 cuda:1``).

With the recorded totals (``Total Allocated``, ``Total Reserved``), a lane's live bytes are the recorded
ones: the bytes live before profiling (the first event's ``Total Allocated - Bytes``) are a band of their
own, which the frees of blocks never seen allocated empty, so the lane's total is ``Total Allocated`` at
every event (where the reader's running-sum check holds), and its reserved line is ``Total Reserved``. A
trace without totals or addresses (2021) is the running sum of ``Bytes`` (``viewer.logs``). The op, Python
frame, kernel and module enclosing each event are shown on hover (``viewer.ops``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: The band of the bytes live before profiling (a trace with totals).
BEFORE = "(live before profiling)"
#: A rank's CPU lane key: CPU_KEY - rank (GPU lanes are Device Ids, or rank x 1000 + id: never negative).
CPU_KEY = -1


@dataclass
class LaneFacts:
    """What one lane's file(s) say of it: its device as ``info`` names it, the bytes live before profiling
    (None: no totals) and each event's recorded ``Total Reserved`` in order (one array per file)."""

    text: str
    live_before: int | None = None
    reserved: list = field(default_factory=list)
    mismatches: int = 0  # events where the running sum of Bytes is not Total Allocated (the reader's check)


@dataclass
class ProfilerRead:
    """The one read of a profiler input: the ``ALLOC_EVENTS`` table of its GPU events (what reading them
    gives, in file order; empty when every event is the CPU's), its CPU events as alloc/free batches of their own (lane keys ``CPU_KEY - rank``),
    the facts of each lane, and per file the events' lane, time, signed bytes, span ids and span names."""

    events: object
    cpu: list
    lanes: dict
    ops: list


def read(found, options, report) -> ProfilerRead:
    """Read each profiler trace of ``found`` (``resolve_inputs``' pairs) once, with its spans."""
    import pyarrow as pa

    from veotrace.schemas.kineto import CPU
    from veotrace.sources.base import ReadReport, call_guarded, guarded
    from veotrace.sources.kineto import trace
    from veotrace.sources.limits import bounded_sizes
    from veotrace.viewer.ops import KINDS, SpanNames

    batches, cpu, lanes, ops = [], [], {}, []
    for path, _fmt in found:
        got = call_guarded(path, trace.cached_read, path, options, report, context=True)  # warnings, skips: once
        t = got.table
        dtype, did = t.column("device_type").to_numpy(), t.column("device_id").to_numpy()
        is_cpu = dtype == CPU
        if not is_cpu.any() or not is_cpu.all():  # CPU events only: their lanes alone (no GPU alloc/free events)
            # the alloc/free batches as sources.iter_alloc_events gives them, served from that read (the cache)
            batches += bounded_sizes(path, guarded(path, trace.iter_alloc_events(path, options=options,
                                                                                 report=ReadReport())),
                                     skip_bad_rows=options.skip_bad_rows, report=report)
        key = np.where(is_cpu, CPU_KEY - (got.rank or 0), trace.lane(got, did)).astype(np.int64)
        tr = t.column("total_reserved_bytes")
        reserved = tr.fill_null(-1).to_numpy() if tr.null_count < len(tr) else None
        for (rank, dt, dev), mask in trace.lane_masks(t):
            k = int(key[np.flatnonzero(mask)[0]])
            check = got.checks.get(trace.lane_text((rank, dt, dev)), {})
            facts = lanes.setdefault(k, LaneFacts(trace.lane_text((rank, dt, dev))))
            if check.get("live_before_bytes") is not None and reserved is not None:
                facts.live_before = (facts.live_before or 0) + int(check["live_before_bytes"])
                facts.mismatches += int(check.get("mismatches") or 0)
                facts.reserved.append(reserved[mask])
        if is_cpu.any():
            cpu.append(_cpu_batch(t, is_cpu, key))
        if got.ops is not None:
            names_of = SpanNames.of(got.ops.column("name"))
            ops.append((key, t.column("ts_ns").to_numpy(), t.column("bytes").to_numpy(),
                        {k: t.column(f"{k}_id").fill_null(-1).to_numpy() for k in KINDS}, names_of))
        del got, t
    from veotrace.schemas import ALLOC_EVENTS

    events = pa.Table.from_batches(batches) if batches else ALLOC_EVENTS.empty_table()
    return ProfilerRead(events, cpu, lanes, ops)


def _cpu_batch(t, is_cpu: np.ndarray, key: np.ndarray):
    """The CPU events of ``t`` as ``viewer.logs.COLUMNS`` (their lane key as the device)."""
    import pyarrow as pa

    rows = np.flatnonzero(is_cpu)
    b = t.column("bytes").to_numpy()[rows]
    return pa.RecordBatch.from_arrays([
        pa.array(t.column("ts_ns").to_numpy()[rows]), pa.array(np.where(b < 0, "free", "alloc")), pa.array(np.abs(b)),
        t.column("address").take(pa.array(rows)).combine_chunks(), pa.array(key[rows].astype(np.int32)),
        pa.nulls(rows.size, pa.int64())], names=["ts_ns", "op", "size_bytes", "address", "device", "stream"])


def with_totals(devices: dict, facts: dict) -> dict:
    """The devices of ``viewer.logs.replay_log`` made to draw the recorded totals where the trace has them:
    the bytes live before profiling a band (``BEFORE``) of their own, which each free of a block never seen
    allocated empties. Returns each such device's recorded ``Total Reserved`` after every entry."""
    from veotrace.viewer.snapshot import A_ALLOC

    reserved = {}
    for d, dv in devices.items():
        f = facts.get(d)
        if f is None or f.live_before is None or not dv.addressed:
            continue
        names = dv.names
        code = next((k for k, v in names.items() if v == BEFORE), None)
        if code is None:
            code = len(names)
            names[code] = BEFORE
        e = dv.entries
        unseen = (e.act != A_ALLOC) & (e.rm_code < 0) & (e.size > 0)  # a free of a block from before profiling
        e.rm_code[unseen], e.rm_size[unseen] = code, e.size[unseen]
        n = max(int(unseen.sum()), 1)  # at least one block a free empties (a count the trace does not give)
        dv.pre_key, dv.pre_size = np.full(n, code, np.int64), np.r_[f.live_before, np.zeros(n - 1, np.int64)]
        r = np.concatenate(f.reserved) if f.reserved else np.zeros(0, np.int64)
        if r.size == e.act.size:
            reserved[d] = r
    return reserved


def totals_note(live_before: int, *, gpu: bool = True, mismatches: int = 0) -> str:
    """A lane's note when it draws the recorded totals (``with_totals``)."""
    from veotrace.render.console import fmt_bytes

    if mismatches:
        return (f"the recorded totals, but at {mismatches:,} event{'s' * (mismatches != 1)} the running sum of Bytes is not Total Allocated "
                "(events are missing: the reader's warning), so the total drawn, the sum of the events, parts from it "
                "there" + ("; the line above is Total Reserved" if gpu else ""))
    if not live_before:
        return ("the recorded totals: nothing was live before profiling, so the total is Total Allocated at every event"
                + ("; the line above is Total Reserved" if gpu else ""))
    return (f"the recorded totals: the band {BEFORE} is the {fmt_bytes(live_before)} ({live_before:,} B) the first event "
            "says were live before profiling, emptied by the frees of blocks the trace never saw allocated, so the "
            "total is Total Allocated at every event" + ("; the line above is Total Reserved. The segment map is the "
                                                          "replay's of the blocks the trace saw allocated" if gpu else ""))


def add_ops(lanes: dict, t0, ops: list) -> None:
    """A profiler trace's lanes get the op, Python frame, kernel and module enclosing each memory event (the
    reader's span scan), shown on hover (``viewer.ops``)."""
    from veotrace.viewer.ops import KINDS, MAX_OP_EVENTS, SpanNames, lane_ops, thin

    parts: dict = {}
    for key, ts, size, cols, names_of in (ops if t0 is not None else []):
        for d in np.unique(key).tolist():
            m = key == d
            parts.setdefault(d, []).append(((ts[m] - t0) / 1e9, size[m], {k: c[m] for k, c in cols.items()}, names_of))
    for d, got in parts.items():
        if d not in lanes:
            continue
        # one file per lane in a run (a rank's devices); several: ids made unique by each file's offset
        offset, xs, sizes, ids, names = 0, [], [], {k: [] for k in KINDS}, []
        for x, size, c, names_of in got:
            xs.append(x)
            sizes.append(size)
            for k in KINDS:
                ids[k].append(np.where(c[k] >= 0, c[k] + offset, -1))
            names.append(names_of)
            offset += names_of.size
        x = np.concatenate(xs)
        order = np.argsort(x, kind="stable")
        full = lane_ops(x[order], np.concatenate(sizes)[order], {k: np.concatenate(v)[order] for k, v in ids.items()},
                        SpanNames.concat(names))
        lanes[d].ops_full, lanes[d].ops = full, thin(full, MAX_OP_EVENTS)
        lanes[d].notes.append("hover the timeline: the op, Python frame and GPU kernel enclosing the memory event at "
                              "or before the cursor")
