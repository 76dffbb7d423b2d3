"""Analyses of a profiler trace's ``[memory]`` events (``KINETO_MEMORY``) that only its totals allow.

- :func:`profiler_summary`: ``info``'s description: devices and ranks, events, the bytes live before profiling,
  the peaks of live and reserved bytes (the largest ``Total Allocated`` / ``Total Reserved``), the rises of
  ``Total Reserved``, the CPU events kept apart, the reader's checks and what the trace lacks.
- :func:`totals_series`: reserved vs live bytes over time from the totals, per device (windows), with the
  cached-but-free bytes (reserved - allocated) that fragmentation cannot split without segment events.
- :func:`reserved_growth`: which op grew reserved memory: the ops (and the GPU kernel or collective running
  then) during which ``Total Reserved`` rose, with the bytes, and the ops after which memory stayed cached but
  free longest.

Pure: tables in, dicts out.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pyarrow as pa

from veotrace.schemas.kineto import CPU

#: Rows of the growth tables in the JSON (the terminal shows fewer).
GROWTH_TOP = 20
#: What a profiler trace cannot say, said once wherever its fragmentation is shown.
SEGMENTS_NOTE = ("the trace records the allocator's totals, not its segments: reserved - allocated is memory "
                 "cached but free; how it is split into free blocks (the largest free block, external "
                 "fragmentation within segments) is not recorded; from addresses alone it is inferred")


def _lanes(table: pa.Table):
    from veotrace.sources.kineto.trace import lane_masks, lane_text

    for key, mask in lane_masks(table):
        yield key, lane_text(key), mask


def profiler_summary(table: pa.Table, meta: list[dict] | None = None) -> dict:
    """``info``'s summary of a ``KINETO_MEMORY`` table (``meta``: the reader's notes per file)."""
    from veotrace.sources.kineto.trace import running_sum_check

    n = table.num_rows
    noted = [m.get("checks") for m in meta or []]  # the reader's own check, when the table is one file's
    checks = noted[0] if len(noted) == 1 and noted[0] is not None else running_sum_check(table)
    dtype = table.column("device_type").to_numpy() if n else np.zeros(0, np.int8)
    import pyarrow.compute as pc

    ranks = sorted(r for r in pc.unique(table.column("rank")).to_pylist() if r is not None) if n else []
    gpu = int((dtype != CPU).sum())
    has_addr = table.column("address").null_count < n if n else False
    has_totals = table.column("total_allocated_bytes").null_count < n if n else False
    devices = {}
    all_lanes = list(_lanes(table))
    tr_all, ta_all = table.column("total_reserved_bytes"), table.column("total_allocated_bytes")
    full = tr_all.null_count == 0 and ta_all.null_count == 0
    for _, name, mask in all_lanes:
        c = checks[name]
        cached = None
        if full:  # reserved - allocated: the bytes cached but free after each event
            tr, ta = tr_all.to_numpy(), ta_all.to_numpy()
            cached = tr - ta if len(all_lanes) == 1 else tr[mask] - ta[mask]
        devices[name] = {k: c.get(k) for k in ("events", "allocs", "frees", "live_before_bytes", "peak_allocated_bytes",
                                                "peak_reserved_bytes", "reserved_rises", "reserved_falls",
                                                "first_reserved_bytes", "running_sum_peak_bytes", "mismatches")}
        devices[name]["peak_cached_free_bytes"] = int(cached.max()) if cached is not None and cached.size else None
        devices[name]["pairing"] = c.get("pairing")
        devices[name]["kind"] = "cpu" if name.endswith("cpu") else "gpu"
    lacks = []
    if not gpu:
        lacks.append("GPU memory events: the trace records CPU memory only (Device Type 0); no GPU analysis applies")
    if n and not has_addr:
        lacks.append("addresses and totals (the 2021 format: Bytes, Device Type, Device Id only): no fragmentation, "
                     "no replay; peaks are of the running sum of Bytes, without the bytes live before profiling")
    elif gpu:
        lacks.append("the allocator's segments: " + SEGMENTS_NOTE.split(": ", 1)[1])
    if gpu and has_addr:
        lacks.append("the allocator settings (PYTORCH_CUDA_ALLOC_CONF / PYTORCH_HIP_ALLOC_CONF): simulate assumes "
                     "PyTorch's defaults")
    if not n:
        lacks.append("[memory] events: record with torch.profiler.profile(profile_memory=True)")
    out = {"rows": n, "gpu_events": gpu, "cpu_events": int(n - gpu), "ranks": ranks, "lanes": devices,
           "has_addresses": bool(has_addr), "has_totals": bool(has_totals), "lacks": lacks}
    for m in meta or []:
        out.setdefault("files", []).append({k: m.get(k) for k in ("path", "rank", "world_size", "devices", "cut",
                                                                  "bad_utf8", "schema_version", "with_stack")})
    if n:
        ts = table.column("ts_ns")
        mm = pc.min_max(ts).as_py()
        out.update({"first_ns": mm["min"], "last_ns": mm["max"], "duration_s": (mm["max"] - mm["min"]) / 1e9})
    return out


def totals_series(table: pa.Table, *, window_s: float | None = None, windows: int = 200) -> dict:
    """Per GPU device: the recorded live (``Total Allocated``) and reserved (``Total Reserved``) bytes at the
    end of each time window and their maxima in it, and the peaks; ``window_s`` None: ``windows`` windows."""
    out = {}
    if not table.num_rows or table.column("total_allocated_bytes").null_count == table.num_rows:
        return out
    ts_all = table.column("ts_ns").to_numpy()
    t0 = int(ts_all.min())
    span = max(int(ts_all.max()) - t0, 1)
    width = int(window_s * 1e9) if window_s else max(-(-span // windows), 1)
    all_lanes = list(_lanes(table))
    ta_col, tr_col = table.column("total_allocated_bytes"), table.column("total_reserved_bytes")
    whole = ta_col.null_count == 0 and tr_col.null_count == 0
    for key, name, mask in all_lanes:
        if key[1] == CPU:
            continue
        if whole and len(all_lanes) == 1:  # one device with every total: its columns as they are
            ta, tr, ts = ta_col.to_numpy(), tr_col.to_numpy(), ts_all
        else:
            ok = mask & ~np.asarray(ta_col.is_null()) & ~np.asarray(tr_col.is_null())
            ta = ta_col.fill_null(0).to_numpy()[ok]
            tr = tr_col.fill_null(0).to_numpy()[ok]
            ts = ts_all[ok]
        if not ta.size:
            continue
        w = (ts - t0) // width
        ends = np.flatnonzero(np.r_[w[1:] != w[:-1], True])
        starts = np.r_[0, ends[:-1] + 1]
        max_ta, max_tr = np.maximum.reduceat(ta, starts), np.maximum.reduceat(tr, starts)
        rows = [{"window": int(w[e]), "start_ns": int(t0 + w[e] * width), "events": int(e - s + 1),
                 "allocated_bytes": int(ta[e]), "reserved_bytes": int(tr[e]),
                 "max_allocated_bytes": int(mt), "max_reserved_bytes": int(mr), "cached_free_bytes": int(tr[e] - ta[e])}
                for s, e, mt, mr in zip(starts.tolist(), ends.tolist(), max_ta.tolist(), max_tr.tolist())]
        del w
        cached = tr - ta
        pk = int(np.argmax(tr))
        out[name] = {"peak_allocated_bytes": int(ta.max()), "peak_reserved_bytes": int(tr.max()),
                     "peak_reserved_at_ns": int(ts[pk]), "allocated_at_reserved_peak_bytes": int(ta[pk]),
                     "peak_cached_free_bytes": int(cached.max()), "end_allocated_bytes": int(ta[-1]),
                     "end_reserved_bytes": int(tr[-1]),
                     "cached_free_share_at_end": float(cached[-1] / tr[-1]) if tr[-1] else None,
                     "window_ns": int(width), "windows": rows}
    return out


def reserved_growth(table: pa.Table, ops: pa.Table | None, *, top: int = GROWTH_TOP) -> dict:
    """Which op grew reserved memory (see the module docstring). ``table`` has its ``op_id``/``kernel_id``
    (a read with context); ``ops`` is its ``KINETO_OPS``. Per GPU device: ``rises`` (every rise of
    Total Reserved with its op, frame and kernel), ``by_op`` (bytes and rises per op name, with the kernels
    seen under it) and ``cached_free_after`` (the ops after whose events the device held the most cached-but-free
    byte-seconds until the next event)."""
    out: dict = {}
    if not table.num_rows or table.column("total_reserved_bytes").null_count == table.num_rows:
        return out
    names = ops.column("name").to_pylist() if ops is not None and ops.num_rows else []

    def name_of(i) -> str | None:
        return names[i] if i is not None and 0 <= i < len(names) else None

    ts_all = table.column("ts_ns").to_numpy()
    # ids as arrays (-1: none), not lists of Python ints (80 MB a column on a 2M-event trace)
    op_ids, fr_ids, k_ids = (_ids(table, c) for c in ("op_id", "frame_id", "kernel_id"))
    ev_col = table.column("ev_idx")
    for key, name, mask in _lanes(table):
        if key[1] == CPU:
            continue
        idx = np.flatnonzero(mask)
        tr = table.column("total_reserved_bytes").take(pa.array(idx)).to_numpy(zero_copy_only=False)
        ta = table.column("total_allocated_bytes").take(pa.array(idx)).to_numpy(zero_copy_only=False)
        if tr.dtype.kind == "f":
            continue
        rises = []
        by_op: dict = defaultdict(lambda: {"bytes": 0, "rises": 0, "kernels": defaultdict(int)})
        d = np.diff(tr)
        for j in np.flatnonzero(d > 0) + 1:
            i = int(idx[j])
            op, kern, frame = name_of(int(op_ids[i])), name_of(int(k_ids[i])), name_of(int(fr_ids[i]))
            grew = int(tr[j] - tr[j - 1])
            rises.append({"ts_ns": int(ts_all[i]), "ev_idx": ev_col[i].as_py(), "bytes": grew, "reserved_after_bytes": int(tr[j]),
                          "op": op, "frame": frame, "kernel": kern})
            row = by_op[op or "(no op)"]
            row["bytes"] += grew
            row["rises"] += 1
            if kern:
                row["kernels"][kern] += grew
        # cached but free after each event, until the next one: byte-seconds per op
        held = defaultdict(float)
        if idx.size > 1:
            cached = (tr - ta)[:-1].astype(np.float64)
            dt = np.diff(ts_all[idx]).astype(np.float64) / 1e9
            sel = np.flatnonzero(cached * dt > 0)
            for lo in range(0, sel.size, CHUNK):  # in chunks: no list of every event at once
                part = sel[lo:lo + CHUNK]
                for op_id, v in zip(op_ids[idx[part]].tolist(), (cached[part] * dt[part]).tolist()):
                    held[name_of(op_id) or "(no op)"] += v
        table_rows = sorted(({"op": k, "bytes": v["bytes"], "rises": v["rises"],
                              "kernels": dict(sorted(v["kernels"].items(), key=lambda kv: -kv[1])[:3])}
                             for k, v in by_op.items()), key=lambda r: (-r["bytes"], r["op"]))
        out[name] = {"rises": len(rises), "rise_bytes": int(sum(r["bytes"] for r in rises)),
                     "peak_reserved_bytes": int(tr.max()) if tr.size else None,
                     "by_op": table_rows[:top], "first_rises": rises[:top],
                     "cached_free_after": [{"op": k, "byte_seconds": v} for k, v in
                                           sorted(held.items(), key=lambda kv: -kv[1])[:top]],
                     "without_op": int(sum(r["bytes"] for r in rises if r["op"] is None))}
    return out


def growth_finding(growth: dict) -> dict | None:
    """The finding: the op under which reserved memory grew most, over all devices (None when it never grew)."""
    best = None
    for dev, g in growth.items():
        for row in g["by_op"][:1]:
            if best is None or row["bytes"] > best["bytes"]:
                best = {"device": dev, **row, "device_rise_bytes": g["rise_bytes"], "device_rises": g["rises"],
                        "peak_reserved_bytes": g.get("peak_reserved_bytes")}
    if best is None or not best["bytes"]:
        return None
    kern = next(iter(best["kernels"]), None)
    share = best["bytes"] / best["device_rise_bytes"] if best["device_rise_bytes"] else None
    best["text"] = (f"{best['device']}: Total Reserved rose {best['rises']} time(s) by {best['bytes']:,} bytes during "
                    f"{best['op']}" + (f" (GPU running {kern})" if kern else "") +
                    (f": {share:.0%} of the device's {best['device_rise_bytes']:,} bytes of growth" if share is not None else ""))
    return best


#: What ``sites --by`` groups a profiler trace's allocations by: the column of the enclosing span.
BY_COLUMN = {"op": "op_id", "frame": "frame_id", "module": "module_id", "kernel": "kernel_id"}
BEFORE = "(live before profiling)"
UNKNOWN = "(no enclosing {})"


def peak_holders(table: pa.Table, ops: pa.Table | None, by: str = "op", *, top: int = GROWTH_TOP) -> dict:
    """Who holds memory at each GPU device's peak of live bytes, by the ``by`` span (op, frame, module, kernel)
    enclosing the allocation of each block live then; the bytes live before profiling (from the first event's
    totals, less those the trace frees) are their own row. Also the holders at the end of the trace.

    The peak is the largest ``Total Allocated`` (the running sum of ``Bytes`` in the 2021 format, which has
    no addresses: its blocks are paired by nothing, so only the totals by op of the bytes allocated are given)."""
    col = BY_COLUMN[by]
    names = ops.column("name").to_pylist() if ops is not None and ops.num_rows else []
    out: dict = {}
    if not table.num_rows:
        return out
    key_ids = _ids(table, col)
    addr_col = table.column("address")
    addr = addr_col.fill_null(0).to_numpy()
    no_addr = addr_col.is_null().to_numpy(zero_copy_only=False) if addr_col.null_count else None
    nbytes = table.column("bytes").to_numpy()
    ts = table.column("ts_ns").to_numpy()
    ta_col = table.column("total_allocated_bytes")
    for key, name, mask in _lanes(table):
        if key[1] == CPU:
            continue
        idx = np.flatnonzero(mask)
        b = nbytes[idx]
        ta = ta_col.take(pa.array(idx)).to_numpy(zero_copy_only=False)
        totals = ta.dtype.kind != "f"
        level = ta if totals else np.cumsum(b)
        peak_j = int(np.argmax(level))
        before = int(ta[0] - b[0]) if totals else 0
        live: dict = {}
        freed_before = 0
        holders_at_peak = None
        for lo in range(0, idx.size, CHUNK):  # in chunks: no list of every event at once
            part = idx[lo:lo + CHUNK]
            gone = no_addr[part].tolist() if no_addr is not None else [False] * part.size
            for j, a, n, k, none in zip(range(lo, lo + part.size), addr[part].tolist(), b[lo:lo + CHUNK].tolist(),
                                        key_ids[part].tolist(), gone):
                if none:
                    a = None
                if n > 0:
                    if a is not None:
                        live[a] = (n, k if k >= 0 else None)
                elif a is not None:
                    if live.pop(a, None) is None:
                        freed_before += -n
                if j == peak_j:
                    holders_at_peak = _group(live, names, by, before - freed_before)
        end = _group(live, names, by, before - freed_before)
        out[name] = {"by": by, "peak_bytes": int(level[peak_j]), "peak_at_ns": int(ts[idx[peak_j]]),
                     "peak_is": "Total Allocated" if totals else "running sum of Bytes",
                     "at_peak": (holders_at_peak or [])[:top], "at_end": end[:top],
                     "live_before_bytes": before if totals else None}
    return out


#: Events turned into Python values at a time by the loops over every event.
CHUNK = 1 << 16


def _ids(table: pa.Table, name: str) -> np.ndarray:
    """An id column (op_id, frame_id, ...) as int64, -1 where null."""
    return table.column(name).fill_null(-1).to_numpy()


def _group(live: dict, names: list, by: str, before: int) -> list[dict]:
    acc: dict = defaultdict(lambda: [0, 0])
    for size, k in live.values():
        label = names[k] if k is not None and 0 <= k < len(names) else UNKNOWN.format(by)
        acc[label][0] += size
        acc[label][1] += 1
    total = sum(v[0] for v in acc.values()) + max(before, 0)
    rows = [{"name": k, "bytes": v[0], "blocks": v[1], "share": v[0] / total if total else None} for k, v in acc.items()]
    if before > 0:
        rows.append({"name": BEFORE, "bytes": before, "blocks": None, "share": before / total if total else None})
    return sorted(rows, key=lambda r: (-r["bytes"], r["name"]))
