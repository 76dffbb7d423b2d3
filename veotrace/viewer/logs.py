"""The lanes of alloc/free logs (no stacks): one per device, live bytes by size class and stream.

The events are replayed as ``fragmentation`` replays them (``alloc`` takes a block at its address, a
second alloc there replaces it; ``free``/``free_completed`` give it back; ``free_requested`` keeps it
until completed), each block in the group of its stream and power-of-two size class. The segment
maps come from ``fragmentation``'s own replay (``frag``'s ``at_each``), so each is ``fragmentation
--at`` at its instant, and the external fragmentation beneath is ``fragmentation``'s windows'.
"""

from __future__ import annotations

from array import array

import numpy as np

from veotrace.viewer.lanes import class_name, size_class, stack_groups
from veotrace.viewer.snapshot import A_ALLOC, A_OOM, A_OTHER, _Entries

_ACT = {"alloc": A_ALLOC, "oom": A_OOM}
COLUMNS = ("ts_ns", "op", "size_bytes", "address", "device", "stream")


def replay_log(batches) -> dict[int, tuple[_Entries, dict]]:
    """Per device, its entries (group keys are (stream, size class) pairs' indices) and the key names."""
    keys: dict[tuple, int] = {}
    out: dict[int, dict] = {}
    for b in batches:
        cols = {c: b.column(c).to_pylist() if c in b.schema.names else [None] * b.num_rows for c in COLUMNS}
        for t, op, size, addr, dev, stream in zip(*(cols[c] for c in COLUMNS)):
            d = out.setdefault(dev or 0, {"act": array("b"), "t": array("q"), "size": array("q"), "rmc": array("i"),
                                          "rms": array("q"), "adc": array("i"), "ads": array("q"), "live": {}})
            size = size or 0
            d["act"].append(_ACT.get(op, A_OTHER))
            d["t"].append(t if t is not None else -1)
            d["size"].append(size)
            rm = ad = None
            if addr is not None:
                if op == "alloc":
                    rm = d["live"].get(addr)
                    k = keys.setdefault((stream, int(size_class(size))), len(keys))
                    ad = d["live"][addr] = (size, k)
                elif op in ("free", "free_completed"):
                    rm = d["live"].pop(addr, None)
            d["rmc"].append(-1 if rm is None else rm[1])
            d["rms"].append(0 if rm is None else rm[0])
            d["adc"].append(-1 if ad is None else ad[1])
            d["ads"].append(0 if ad is None else ad[0])
    names = {k: (f"stream {s}, " if s is not None else "") + class_name(c) for (s, c), k in keys.items()}

    def arr(a, dt):
        return np.frombuffer(a, dt) if len(a) else np.zeros(0, dt)

    return {dev: (_Entries(arr(v["act"], np.int8), arr(v["t"], np.int64), arr(v["size"], np.int64),
                           arr(v["rmc"], np.int32), arr(v["rms"], np.int64), arr(v["adc"], np.int32),
                           arr(v["ads"], np.int64), []), names) for dev, v in sorted(out.items())}


def log_lane(e: _Entries, names: dict, *, title: str, t0_ns: int | None, points_budget: int):
    """The lane of one device's log entries (``replay_log``): its bands, peaks and OOMs; the maps and the
    fragmentation beneath are added from ``fragmentation``'s replay (``add_map``, ``add_windows``)."""
    from veotrace.viewer.model import Lane

    n = e.act.size
    timed = n > 0 and bool((e.t >= 0).all()) and t0_ns is not None
    x = (e.t - t0_ns) / 1e9 if timed else np.arange(n, dtype=np.float64)
    x = np.r_[x[:1], x] if n else np.zeros(1)
    st = stack_groups(e, np.zeros(0, np.int64), np.zeros(0, np.int64), names, x, points_budget)
    groups = [{"name": names[k]} for k in st.top]
    if st.n_groups > len(st.top):
        groups.append({"name": "(other size classes)", "other": True})
    notes = ["an alloc/free log records no stacks: the bands are size classes and streams, not sites"]
    if not timed:
        notes.append("no timestamps: drawn by entry order; the segment map is the end state's")
    lane = Lane(title=title, group_kind="size class and stream", x_unit="s" if timed else "entry", groups=groups,
                x=x[st.keep], level=st.level, state=st.keep, buckets=st.buckets, bytes=st.bytes, blocks=st.blocks,
                notes=notes, entries=n)
    lane.peaks.append(st.peak_row(x))
    ooms = np.flatnonzero(e.act == A_OOM)
    lane.ooms = [{"x": float(x[i + 1]), "state": int(i + 1), "request_bytes": int(e.size[i])} for i in ooms[:20].tolist()]
    return lane, st


def instants_ns(lane, e: _Entries, keyframes: int) -> dict[int, str]:
    """The times (ns) of a timed log lane's maps: each peak, each OOM, keyframes; label of each."""
    n = e.act.size
    if not n or lane.x_unit != "s":
        return {}
    want = [(p["state"], f"peak {p['kind']}") for p in lane.peaks] + [(o["state"], "OOM") for o in lane.ooms]
    want += [(int(k), "keyframe") for k in np.linspace(0, n, keyframes + 2)[1:-1].round().astype(int)]
    out: dict[int, str] = {}
    for s, label in want:
        t = int(e.t[max(s - 1, 0)])
        if label not in out.get(t, ""):
            out[t] = f"{out[t]}, {label}" if t in out else label
    return out


def add_windows(lane, windows, device: int, t0_ns: int | None) -> None:
    """``fragmentation``'s windows of ``device`` beneath the lane: external fragmentation at each end."""
    rows = [r for r in windows.to_pylist() if r["device"] == device]
    if not rows or lane.x_unit != "s" or t0_ns is None:
        return
    lane.frag = {"x": [(r["end_ns"] - t0_ns) / 1e9 for r in rows],
                 "external_frag": [r["external_frag"] for r in rows], "free_bytes": [r["free_bytes"] for r in rows],
                 "largest_free_bytes": [r["largest_free_bytes"] for r in rows]}
