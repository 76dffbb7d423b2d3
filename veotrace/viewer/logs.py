"""The lanes of alloc/free logs (no stacks): one per device, live bytes by size class and stream.

The events are replayed as ``fragmentation`` replays them (``alloc`` takes a block at its address, a
second alloc there replaces it; ``free``/``free_completed`` give it back; ``free_requested`` keeps it
until completed), each block in the group of its stream and power-of-two size class. The segment
maps come from ``fragmentation``'s own replay (``frag``'s ``at_each``), so each is ``fragmentation
--at`` at its instant, and the external fragmentation beneath is ``fragmentation``'s windows'.

A device none of whose events has an address (a 2021 profiler trace: ``Bytes`` only; a log without an
address column) cannot be placed, but its live bytes are still the running sum of the sizes: an alloc
adds its size to its group, a free takes its size from the group of its own size class (the freed block's
size is the free's). What a group frees before it allocates was live before the trace began: the least
each group must have held then starts it (``LogDevice.pre_*``), so no band goes below zero and the total is
the tightest lower bound the events give. No map and no fragmentation: those need addresses.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from veotrace.viewer.lanes import class_name, size_class, stack_groups
from veotrace.viewer.snapshot import A_ALLOC, A_OOM, A_OTHER, _Entries

_ACT = {"alloc": A_ALLOC, "oom": A_OOM}
COLUMNS = ("ts_ns", "op", "size_bytes", "address", "device", "stream")


@dataclass
class LogDevice:
    """One device of a log: its entries (group keys index ``names``), whether any of its events has an
    address (else the running sum of sizes: no map), and the blocks live before its first entry (``pre_key``
    group, ``pre_size`` bytes each; an address-less device's least, see the module)."""

    entries: _Entries
    names: dict
    addressed: bool = True
    pre_key: np.ndarray = None
    pre_size: np.ndarray = None

    def __post_init__(self) -> None:
        if self.pre_key is None:
            self.pre_key, self.pre_size = np.zeros(0, np.int64), np.zeros(0, np.int64)

    @property
    def pre_bytes(self) -> int:
        return int(self.pre_size.sum())


def replay_log(batches) -> dict[int, LogDevice]:
    """Per device, its entries (group keys index (stream, size class) pairs) and the key names.

    Vectorised: the events are ordered by (device, address, read order); in each address's run an event
    finds the last alloc before it and the last release before it (forward maxima of their positions),
    and the block is live when that alloc is later than that release. A device without addresses: the
    running sum of sizes by group (the module's docstring)."""
    import pyarrow as pa

    parts = [b.select(list(COLUMNS)) if set(COLUMNS) <= set(b.schema.names) else _with_columns(b) for b in batches]
    if not parts:
        return {}
    t = pa.Table.from_batches(parts).combine_chunks()
    op_alloc, op_free, op_oom = _ops(t.column("op"))  # masks: no Python string per event
    n = op_alloc.size
    ts = t.column("ts_ns").fill_null(-1).to_numpy()
    size = t.column("size_bytes").fill_null(0).to_numpy().astype(np.int64)
    has_addr = t.column("address").is_valid().to_numpy(zero_copy_only=False)
    addr = t.column("address").fill_null(0).to_numpy().astype(np.uint64)
    dev = t.column("device").fill_null(0).to_numpy().astype(np.int64)
    stream_valid = t.column("stream").is_valid().to_numpy(zero_copy_only=False)
    stream = t.column("stream").fill_null(0).to_numpy().astype(np.int64)
    devices = np.unique(dev)
    # a device none of whose events has an address: its events are summed by size (no pairing)
    placed = np.zeros(devices.size, bool)
    placed[np.searchsorted(devices, dev[has_addr])] = True
    summed = ~placed[np.searchsorted(devices, dev)]
    is_alloc = op_alloc & (has_addr | summed)
    is_free = op_free & has_addr
    sum_free = op_free & summed
    # group keys: (stream or none, size class) of each alloc (and of each summed free: its own size's)
    pairs = np.stack([np.where(stream_valid, stream, -1), size_class(size)], axis=1)
    uniq, key = np.unique(pairs[is_alloc | sum_free], axis=0, return_inverse=True)
    code = np.full(n, -1, np.int64)
    code[is_alloc | sum_free] = key.ravel()
    ad_code = np.where(is_alloc, code, -1)
    ad_size = np.where(is_alloc, size, 0)
    rm_code = np.where(sum_free, code, -1)
    rm_size = np.where(sum_free, size, 0)
    is_alloc &= has_addr  # the pairing below: placed events only
    touch = np.flatnonzero(is_alloc | is_free)
    order = touch[np.lexsort((touch, addr[touch], dev[touch]))]
    if order.size:
        pos = np.arange(order.size)
        start = np.r_[True, (addr[order][1:] != addr[order][:-1]) | (dev[order][1:] != dev[order][:-1])]
        run_start = np.maximum.accumulate(np.where(start, pos, 0))
        last_alloc = np.r_[-1, np.maximum.accumulate(np.where(is_alloc[order], pos, -1))[:-1]]
        last_free = np.r_[-1, np.maximum.accumulate(np.where(is_free[order], pos, -1))[:-1]]
        live = (last_alloc >= run_start) & (last_alloc > last_free)
        hit, src = order[live], order[last_alloc[live]]
        rm_code[hit], rm_size[hit] = ad_code[src], size[src]
    act = np.where(op_alloc, A_ALLOC, np.where(op_oom, A_OOM, A_OTHER)).astype(np.int8)
    names = {k: (f"stream {s}, " if s >= 0 else "") + class_name(int(c)) for k, (s, c) in enumerate(uniq.tolist())}
    out = {}
    for i, d in enumerate(devices.tolist()):
        m = dev == d
        e = _Entries(act[m], ts[m], size[m], rm_code[m].astype(np.int32), rm_size[m], ad_code[m].astype(np.int32),
                     ad_size[m], [])
        out[d] = LogDevice(e, names, bool(placed[i]), *(() if placed[i] else least_before(e)))
    return out


def least_before(e: _Entries) -> tuple[np.ndarray, np.ndarray]:
    """The blocks an address-less device must have held before its first entry: per group, the deepest its
    running bytes (and blocks) go below zero. As ``stack_groups``' ``pre_key``/``pre_size`` (one row per block;
    a group's bytes on its first)."""
    key = np.where(e.ad_code >= 0, e.ad_code, e.rm_code).astype(np.int64)  # a summed entry adds or removes, never both
    rows = np.flatnonzero(key >= 0)
    if not rows.size:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    rows = rows[np.argsort(key[rows], kind="stable")]  # by group, in entry order within each
    k = key[rows]
    starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    lengths = np.diff(np.r_[starts, rows.size])

    def lowest(delta: np.ndarray) -> np.ndarray:  # per group, the least of its running sum (0 at the start)
        cs = np.cumsum(delta[rows])
        return np.minimum(np.minimum.reduceat(cs - np.repeat(np.r_[0, cs][starts], lengths), starts), 0)

    low = -lowest(e.ad_size.astype(np.int64) - e.rm_size)
    blocks = -lowest((e.ad_code >= 0).astype(np.int64) - (e.rm_code >= 0))
    pre_key, pre_size = [], []
    for g, b, n in zip(k[starts].tolist(), low.tolist(), blocks.tolist()):
        if b or n:
            n = max(n, 1)
            pre_key += [g] * n
            pre_size += [b] + [0] * (n - 1)
    return np.asarray(pre_key, np.int64), np.asarray(pre_size, np.int64)


def _ops(column) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows of ``column`` (the ``op`` text, plain or dictionary-encoded) that are ``alloc``, ``free`` or
    ``free_completed``, and ``oom``: from the distinct values, never one Python string per row."""
    import pyarrow as pa

    col = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if not pa.types.is_dictionary(col.type):
        col = col.dictionary_encode()
    values = np.asarray(col.dictionary.cast(pa.string()).to_pylist(), dtype=object)
    code = col.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    out = []
    for names in (("alloc",), ("free", "free_completed"), ("oom",)):
        hit = np.r_[np.isin(values, names), False] if values.size else np.zeros(1, bool)
        out.append(hit[code])  # code -1 (a null op) reads the last entry: False
    return out[0], out[1], out[2]


def _with_columns(batch):
    """A batch with every column of COLUMNS (a log without a stream or device column: nulls)."""
    import pyarrow as pa

    types = {"ts_ns": pa.int64(), "op": pa.string(), "size_bytes": pa.int64(), "address": pa.uint64(),
             "device": pa.int32(), "stream": pa.int64()}
    cols = [batch.column(c) if c in batch.schema.names else pa.nulls(batch.num_rows, types[c]) for c in COLUMNS]
    return pa.RecordBatch.from_arrays(cols, names=list(COLUMNS))


#: A lane's note when its events have no addresses (a 2021 profiler trace, a log without an address column).
NO_ADDRESSES = ("the events have no addresses: the live bytes are the running sum of their sizes (Bytes); the memory "
                "map (blocks, segments, fragmentation) needs addresses, which this input lacks")


def log_lane(dev: LogDevice, *, title: str, t0_ns: int | None, points_budget: int, what: str = "an alloc/free log"):
    """The lane of one device's log entries (``replay_log``): its bands, peaks and OOMs; the maps and the
    fragmentation beneath are added from ``fragmentation``'s replay (``add_map``, ``add_windows``)."""
    from veotrace.render.console import fmt_bytes
    from veotrace.viewer.model import Lane

    e, names = dev.entries, dev.names
    n = e.act.size
    timed = n > 0 and bool((e.t >= 0).all()) and t0_ns is not None
    x = (e.t - t0_ns) / 1e9 if timed else np.arange(n, dtype=np.float64)
    x = np.r_[x[:1], x] if n else np.zeros(1)
    st = stack_groups(e, dev.pre_key, dev.pre_size, names, x, points_budget)
    groups = [{"name": names[k]} for k in st.top]
    if st.n_groups > len(st.top):
        groups.append({"name": "(other size classes)", "other": True})
    notes = [f"{what} records no stacks: the bands are size classes and streams, not sites"]
    if not dev.addressed:
        notes.append(NO_ADDRESSES)
        if dev.pre_bytes:
            notes.append(f"its size classes free {fmt_bytes(dev.pre_bytes)} ({dev.pre_bytes:,} B) before allocating it: "
                         "at least that much was live before the trace began, drawn from the start in those classes")
    if not timed:
        notes.append("no timestamps: drawn by entry order" + ("; the segment map is the end state's" if dev.addressed else ""))
    lane = Lane(title=title, group_kind="size class and stream", x_unit="s" if timed else "entry", groups=groups,
                x=x[st.keep], level=st.level, state=st.keep, buckets=st.buckets, bytes=st.bytes, blocks=st.blocks, detail=st.detail,
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
