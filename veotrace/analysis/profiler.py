"""Analyses of a profiler trace's ``[memory]`` events (``KINETO_MEMORY``) that only its totals allow.

- :func:`profiler_summary`: ``info``'s description: devices and ranks, events, the bytes live before profiling,
  the peaks of live and reserved bytes (the largest ``Total Allocated`` / ``Total Reserved``), the rises of
  ``Total Reserved``, the CPU events kept apart, the reader's checks and what the trace lacks.
- :func:`totals_series`, :func:`with_recorded`: the recorded peaks of live and reserved bytes per device, and
  ``fragmentation``'s windows with the recorded totals (live, reserved, cached-but-free bytes, which it cannot
  split into free blocks without segment events) in place of what addresses alone give.
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


def lane_device(key: tuple, meta: list | None) -> dict:
    """A GPU lane's rank, Device Id and ``device``: its number in the common events (the Device Id, or rank x
    LANE_STRIDE + Device Id when its file's run spans nodes: ``sources.kineto.trace.lane``), so a finding or a
    diff names it by its lane without reading the file again ({} without the reader's notes)."""
    from veotrace.sources.kineto.trace import LANE_STRIDE

    files = [m for m in meta or [] if len(meta) == 1 or m.get("rank") == key[0]]
    if not files:
        return {}
    multi = bool(files[0].get("lanes_multi_node")) and key[0] is not None
    return {"rank": key[0], "device_id": key[2], "device": key[0] * LANE_STRIDE + key[2] if multi else key[2]}


def capacity_of(key: tuple, meta: list | None, peak_reserved: int | None) -> dict:
    """A GPU lane's device from its file's ``deviceProperties`` (``device_name``, ``capacity_bytes``: Kineto's
    ``totalGlobalMem``) and how close to it the lane ran: ``peak_reserved_share`` of it and ``headroom_bytes``
    (capacity - peak reserved). {} when no file of that rank lists the device."""
    files = [m for m in meta or [] if len(meta) == 1 or m.get("rank") == key[0]]
    for m in files:
        name, cap = ((m.get("device_memory") or {}).get(str(key[2])) or (None, None))
        if name or cap:
            out = {"device_name": name, "capacity_bytes": cap}
            if cap and peak_reserved is not None:
                out.update({"peak_reserved_share": peak_reserved / cap, "headroom_bytes": cap - peak_reserved})
            return out
    return {}


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
    for key, name, mask in all_lanes:
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
        if key[1] != CPU:  # how close to the device's memory it ran, when deviceProperties lists the device
            devices[name].update(capacity_of(key, meta, devices[name].get("peak_reserved_bytes")))
            devices[name].update(lane_device(key, meta))
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


def totals_series(table: pa.Table) -> dict:
    """Per GPU device: the recorded peaks of live (``Total Allocated``) and reserved (``Total Reserved``) bytes,
    the cached-but-free bytes (reserved - allocated) at their peak and at the end. (Their values over time are
    ``fragmentation``'s windows: :func:`with_recorded`.)"""
    out = {}
    if not table.num_rows or table.column("total_allocated_bytes").null_count == table.num_rows:
        return out
    ts_all = table.column("ts_ns").to_numpy()
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
        cached = tr - ta
        pk = int(np.argmax(tr))
        out[name] = {"peak_allocated_bytes": int(ta.max()), "peak_reserved_bytes": int(tr.max()),
                     "peak_reserved_at_ns": int(ts[pk]), "allocated_at_reserved_peak_bytes": int(ta[pk]),
                     "peak_cached_free_bytes": int(cached.max()), "end_allocated_bytes": int(ta[-1]),
                     "end_reserved_bytes": int(tr[-1]),
                     "cached_free_share_at_end": float(cached[-1] / tr[-1]) if tr[-1] else None}
    return out


#: What ``fragmentation`` takes from the recorded totals on a profiler trace, said once beside its table.
RECORDED_COLUMNS_NOTE = ("live, allocated, reserved, inactive and their peaks (and GMLake's ratio) are the profiler's "
                         "recorded Total Allocated / Total Reserved, bytes live before profiling included; free blocks, "
                         "the largest free block and external fragmentation are inferred from the addresses of the "
                         "blocks the trace saw (gaps under --max-gap)")


def lane_steps(ts: np.ndarray, allocated: np.ndarray, reserved: np.ndarray, nbytes: np.ndarray) -> dict:
    """One device's recorded totals as step functions (``ts`` sorted; ``allocated``/``reserved`` after each
    event) with the level before its first event (Total Allocated less the first event's Bytes; reserved as
    the first total: a first event's rise cannot be seen)."""
    return {"ts": ts, "allocated": allocated, "reserved": reserved,
            "allocated_before": int(allocated[0] - nbytes[0]) if ts.size else 0,
            "reserved_before": int(reserved[0]) if ts.size else 0}


def _window_stats(steps: dict, start: np.ndarray, end: np.ndarray, which: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per window [start, end): the level at its end, its maximum in it (the level carried in included) and its
    time-weighted mean, of the step function ``steps[which]`` (the level before the first event before it).
    Memory: a few arrays of the windows and one float array of the events (a long trace's millions)."""
    ts, v = steps["ts"], np.asarray(steps[which], np.int64)
    before = steps[f"{which}_before"]
    at_end = np.searchsorted(ts, end, side="left") - 1  # the last event before the window's end
    at_start = np.searchsorted(ts, start, side="left") - 1  # the last event before it starts
    level_end = np.where(at_end >= 0, v[np.maximum(at_end, 0)], before)
    level_in = np.where(at_start >= 0, v[np.maximum(at_start, 0)], before)  # carried into the window
    peak = level_in.copy()
    lo, hi = at_start + 1, at_end + 1  # the window's events: [lo, hi)
    has = np.flatnonzero(hi > lo)
    has = has[np.argsort(lo[has], kind="stable")]  # in time order: the pairs' indices never go back
    if has.size:  # the max over each [lo, hi): reduceat over the pairs, the odd results dropped
        idx = np.empty(2 * has.size, np.int64)
        idx[0::2], idx[1::2] = lo[has], hi[has]
        if idx[-1] >= v.size:
            idx = idx[:-1]
        peak[has] = np.maximum(peak[has], np.maximum.reduceat(v, idx)[0::2])
    if not ts.size:
        return level_end, peak, level_end.astype(np.float64)
    # the integral of the level from the first event: I(t) = C[k] + v[k] (t - ts[k]), k the last event <= t,
    # C[k] = sum over j < k of v[j] (ts[j+1] - ts[j]); before the first event the level is ``before``
    area = np.diff(ts).astype(np.float64)
    area *= v[:-1]
    np.cumsum(area, out=area)

    def integral(t, k):
        kk = np.maximum(k, 0)
        c = np.where(kk > 0, area[np.maximum(kk - 1, 0)] if area.size else 0.0, 0.0)
        inside = c + v[kk].astype(np.float64) * (t - ts[kk]).astype(np.float64)
        return np.where(k >= 0, inside, before * (t - ts[0]).astype(np.float64))

    span = (end - start).astype(np.float64)
    mean = np.where(span > 0, (integral(end, at_end) - integral(start, at_start)) / np.where(span > 0, span, 1),
                    level_end.astype(np.float64))
    return level_end, peak, mean


def with_recorded(windows: pa.Table, end: dict, steps: dict[int, dict]) -> tuple[pa.Table, dict]:
    """``fragmentation``'s windows and end state with the recorded totals of a profiler trace (``steps``: per
    device of the common table, from :func:`lane_steps`) in place of what the replay of addresses alone
    gives for them: live/allocated bytes (Total Allocated, bytes live before profiling included), reserved
    (Total Reserved), inactive (reserved - allocated), their peaks and means in each window, and GMLake's
    ratio. Free blocks and external fragmentation stay the replay's (inferred from addresses). Windows without
    times (``--window-events`` on a trace without ``ts``) are left as they are."""
    if not steps or not windows.num_rows:
        return windows, end
    dev = windows.column("device").to_numpy()
    start_c, end_c = windows.column("start_ns"), windows.column("end_ns")
    if start_c.null_count or end_c.null_count:
        return windows, end
    start, stop = start_c.to_numpy(), end_c.to_numpy()
    cols = {name: windows.column(name).to_numpy(zero_copy_only=False).copy() for name in
            ("live_bytes_mean", "live_bytes_peak", "live_bytes", "allocated_bytes")}
    cols.update({name: windows.column(name).to_numpy(zero_copy_only=False).astype(np.float64) for name in
                 ("reserved_bytes", "reserved_bytes_peak", "inactive_bytes", "gmlake_frag")})
    done = np.zeros(dev.size, bool)
    for d, st in steps.items():
        rows = np.flatnonzero(dev == d)
        if not rows.size:
            continue
        a_end, a_peak, a_mean = _window_stats(st, start[rows], stop[rows], "allocated")
        r_end, r_peak, _ = _window_stats(st, start[rows], stop[rows], "reserved")
        cols["live_bytes"][rows] = a_end
        cols["allocated_bytes"][rows] = a_end
        cols["live_bytes_peak"][rows] = a_peak
        cols["live_bytes_mean"][rows] = a_mean
        cols["reserved_bytes"][rows] = r_end
        cols["reserved_bytes_peak"][rows] = r_peak
        cols["inactive_bytes"][rows] = r_end - a_end
        cols["gmlake_frag"][rows] = np.where(r_peak > 0, 1 - a_peak / np.where(r_peak > 0, r_peak, 1), np.nan)
        done[rows] = True
    out = windows
    for name, values in cols.items():
        field = windows.schema.field(name)
        if field.type == pa.int64() and values.dtype.kind == "f":
            arr = pa.array(np.where(np.isnan(values), 0, values).astype(np.int64), pa.int64(), mask=np.isnan(values))
        else:
            arr = pa.array(values, field.type, mask=np.isnan(values) if values.dtype.kind == "f" else None)
        out = out.set_column(out.schema.get_field_index(name), field, arr)
    return out, _recorded_end(end, steps)


def _recorded_end(end: dict, steps: dict[int, dict]) -> dict:
    """The end state's live/allocated/reserved/inactive bytes from each device's last recorded totals."""
    devices = {k: dict(v) for k, v in (end.get("devices") or {}).items()}
    total = dict(end["total"])
    sums = {"allocated": 0, "reserved": 0}
    for d, st in steps.items():
        a = int(st["allocated"][-1]) if st["ts"].size else st["allocated_before"]
        r = int(st["reserved"][-1]) if st["ts"].size else st["reserved_before"]
        sums["allocated"] += a
        sums["reserved"] += r
        v = devices.get(str(d))
        if v is not None:
            v.update(live_bytes=a, allocated_bytes=a, reserved_bytes=r, inactive_bytes=r - a, totals="recorded")
    if len(steps) == len(devices) or not devices:
        total.update(live_bytes=sums["allocated"], allocated_bytes=sums["allocated"], reserved_bytes=sums["reserved"],
                     inactive_bytes=sums["reserved"] - sums["allocated"], totals="recorded")
    return {**end, "total": total, "devices": devices}


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
