"""``simulate --by site|phase``: who holds each policy's peak reserved, and whose live blocks strand its free space.

A :class:`KeyTap` follows one policy's events as the replay drains them (``Recorder`` rows: request, op,
address, size, stream, block), each request carrying a key (a site's or a phase's code; the blocks a
seeded model starts from, live before the trace, take :data:`BEFORE`). Per device it keeps the live
blocks and the reserved ranges (segments, or the mapped pieces of expandable segments and arenas, as
``attribution`` keeps a snapshot's), and takes two states:

- at the device's peak reserved: the first request after which its reserved bytes reach their maximum
  (found per drained chunk by one cumulative sum over the chunk's segment events, so a state is taken at
  most once per chunk, never once per new high);
- at the end of the replay.

A state is the live block bytes by key (what each key holds), and the free bytes of every range holding
live blocks, by the keys of those blocks (``attribution.sweep.stranded``: the definitions of
``veotrace sites``), with the cached-but-free bytes (reserved - allocated). Memory: the live blocks and
one vector per key, never the events.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from veotrace.allocators.base import (
    EV_ALLOC,
    EV_FREE,
    EV_SEGMENT_ALLOC,
    EV_SEGMENT_FREE,
    EV_SEGMENT_MAP,
    EV_SEGMENT_UNMAP,
    event_devices,
    reserved_delta,
)
from veotrace.attribution.stacks import BEFORE_TRACE
from veotrace.attribution.sweep import cut, stranded

#: The policy that is a bound, not an allocator one could choose (it strands nothing by construction).
LOWER_BOUND = "ideal"
#: The key of blocks live before the trace (a seeded model's starting state); its text is BEFORE_TRACE.
BEFORE = -1
_GROW = (EV_SEGMENT_ALLOC, EV_SEGMENT_MAP)
_SHRINK = (EV_SEGMENT_FREE, EV_SEGMENT_UNMAP)


@dataclass
class _Names:
    """Key texts indexed by code, as ``attribution.sweep.stranded`` reads an Interner's ``sites``."""

    sites: list[str]


@dataclass
class _Device:
    live: dict = field(default_factory=dict)  # address -> (block bytes, requested bytes, key code)
    ranges: list = field(default_factory=list)  # sorted [start, end) reserved ranges
    reserved: int = 0
    peak: int = 0
    states: dict = field(default_factory=dict)  # "peak", "reference_peak": the states taken


class KeyTap:
    """Live bytes and stranded bytes by key at each device's peak reserved, at given requests, and at the
    end of one policy's replay.

    Args:
        keys: the key code of every request, indexed by request (``Requests`` order, whole).
        names: the text of each key code (codes 0..n-1).
        at: per device, a request after which to take the state ``"reference_peak"`` (another policy's
            peak: the same moment of the trace under this policy).
    """

    def __init__(self, keys: np.ndarray, names: dict[int, str], at: dict[int, int] | None = None) -> None:
        self.keys = np.asarray(keys, dtype=np.int64)
        n = max(names, default=-1) + 1
        self.before = n  # BEFORE's own code, after every real key
        self.names = _Names([*(names.get(c, str(c)) for c in range(n)), BEFORE_TRACE])
        self.devices: dict[int, _Device] = {}
        self.at = dict(at or {})  # device -> request still to reach

    def feed(self, ev: np.ndarray, device_of_request: np.ndarray, offset: int) -> None:
        """Apply drained events ``ev`` ((n, 6), see ``Recorder``); ``device_of_request[r - offset]`` is the
        device of request r (requests below 0 are device ``-1 - r``'s seeded state)."""
        if not len(ev):
            return
        r = ev[:, 0]
        dev = event_devices(ev, device_of_request, offset)
        key = self.keys[np.clip(r, 0, max(len(self.keys) - 1, 0))] if len(self.keys) else np.zeros(len(r), np.int64)
        key = np.where((r < 0) | (key == BEFORE), self.before, key)
        delta = reserved_delta(ev[:, 1], ev[:, 3])
        for d in np.unique(dev).tolist():
            st = self.devices.setdefault(d, _Device())
            rows = np.flatnonzero(dev == d)
            marks: list[tuple[int, str]] = []  # (position in rows, state): taken after that event (-1: before all)
            running = st.reserved + np.cumsum(delta[rows])
            top = int(running.argmax())
            if running[top] > st.peak:  # the state after the last event of the request reaching it
                marks.append((int(np.flatnonzero(r[rows] == r[rows[top]])[-1]), "peak"))
            target = self.at.get(d)
            if target is not None and (r[rows] > target).any():  # the replay is past the request: take it here
                marks.append((int(np.count_nonzero(r[rows] <= target)) - 1, "reference_peak"))
                del self.at[d]
            lo = 0
            for at, label in sorted(marks):
                self._apply(st, ev[rows[lo:at + 1]], key[rows[lo:at + 1]])
                lo = at + 1
                q = int(r[rows[at]]) if at >= 0 else -1
                if label == "peak":
                    st.peak = st.reserved
                st.states[label] = self._state(st, q if q >= 0 else None)
            self._apply(st, ev[rows[lo:]], key[rows[lo:]])

    @staticmethod
    def _apply(st: _Device, ev: np.ndarray, key: np.ndarray) -> None:
        """One device's events in order. Allocs and frees at once: an address's last event in the slice
        says whether it is live after it (a policy frees what it allocated, one block per address); the
        segment events (few) one by one, for the ranges."""
        if not len(ev):
            return
        op = ev[:, 1]
        for _q, o, a, n, _s, _b in ev[np.isin(op, _GROW + _SHRINK)].tolist():
            if o in _GROW:
                st.ranges = sorted(cut(st.ranges, a, a + n) + [(a, a + n)])
                st.reserved += n
            else:
                st.ranges = cut(st.ranges, a, a + n)
                st.reserved -= n
        blocks = np.flatnonzero((op == EV_ALLOC) | (op == EV_FREE))
        if not blocks.size:
            return
        addr = ev[blocks, 2]
        order = np.lexsort((blocks, addr))  # by address, then in event order
        last = order[np.r_[addr[order][1:] != addr[order][:-1], True]]
        rows = blocks[last]
        alive = op[rows] == EV_ALLOC
        gone = ev[rows[~alive], 2].tolist()
        for a in gone:
            st.live.pop(a, None)
        born = rows[alive]
        st.live.update(zip(ev[born, 2].tolist(), zip(ev[born, 5].tolist(), ev[born, 3].tolist(), key[born].tolist())))

    def _state(self, st: _Device, request: int | None) -> dict:
        n = len(self.names.sites)
        held = np.zeros(n, np.int64)
        count = np.zeros(n, np.int64)
        asked = np.zeros(n, np.int64)
        if st.live:
            v = np.array(list(st.live.values()), dtype=np.int64).reshape(-1, 3)
            np.add.at(held, v[:, 2], v[:, 0])
            np.add.at(count, v[:, 2], 1)
            np.add.at(asked, v[:, 2], v[:, 1])
        pin = stranded(st.ranges, st.live, self.names)
        by = {r["site"]: r for r in pin["sites"]}
        rows = []
        for c in np.flatnonzero(count).tolist():
            name = self.names.sites[c]
            p = by.get(name, {})
            rows.append({"key": name, "blocks": int(count[c]), "block_bytes": int(held[c]),
                         "requested_bytes": int(asked[c]), "stranded_bytes": p.get("stranded_bytes", 0),
                         "sole_bytes": p.get("sole_bytes", 0), "segments": p.get("segments", 0)})
        rows.sort(key=lambda x: (-(x["block_bytes"] + x["stranded_bytes"]), x["key"]))
        allocated = int(held.sum())
        return {"request": request, "reserved_bytes": st.reserved, "allocated_bytes": allocated,
                "cached_free_bytes": st.reserved - allocated, "stranded_bytes": pin["stranded_bytes"],
                "keys": rows}

    def peak_requests(self) -> dict[int, int | None]:
        """Per device, the request after which its peak reserved was taken (None: the seeded state)."""
        return {d: st.states["peak"]["request"] for d, st in self.devices.items() if "peak" in st.states}

    def result(self) -> dict[str, dict]:
        """Per device (as text): ``peak``, ``end`` and, when asked for, ``reference_peak`` (a device that
        never reserved has the end as its peak; a requested moment never passed is the end)."""
        out = {}
        for d, st in sorted(self.devices.items()):
            end = self._state(st, None)
            states = {"peak": st.states.get("peak", end)}
            if d in self.at or "reference_peak" in st.states:
                states["reference_peak"] = st.states.get("reference_peak", end)
            out[str(d)] = {**states, "end": end}
        return out


def footprint(state: dict) -> dict[str, int]:
    """Bytes each key accounts for in a state: what its live blocks hold plus the free bytes they strand
    (a range pinned by several keys' blocks counts for each, as ``sites`` ranks pinning)."""
    return {k["key"]: k["block_bytes"] + k["stranded_bytes"] for k in state["keys"]}


def helps(keyed: dict, reference: str) -> list[dict]:
    """Which policy helps which key: per device and key, its footprint under each policy at the moment the
    ``reference`` policy (the first replayed) peaks on that device (the same live allocations, each
    policy's own rounding and stranded space), the policy where it is least (``ideal``, the exact-fit
    bound, is never chosen: it shows what is possible), and the saving against the reference; ranked by
    the reference's footprint, largest first."""
    per: dict[tuple[str, str], dict[str, int]] = {}
    for policy, devices in keyed.items():
        for d, states in devices.items():
            for key, n in footprint(states["peak" if policy == reference else "reference_peak"]).items():
                per.setdefault((d, key), {})[policy] = n
    rows = []
    for (d, key), by_policy in per.items():
        full = {p: by_policy.get(p, 0) for p in keyed}
        real = [p for p in full if p != LOWER_BOUND] or list(full)  # ideal strands nothing: a bound, not a choice
        best = min(real, key=lambda p: (full[p], p != reference, p))
        ref = full.get(reference, 0)
        rows.append({"device": d, "key": key, "reference": reference, "reference_bytes": ref,
                     "best_policy": best, "best_bytes": full[best], "saving_bytes": ref - full[best],
                     "policies": full})
    rows.sort(key=lambda x: (-x["reference_bytes"], -x["saving_bytes"], int(x["device"]), x["key"]))
    return rows


def keyed_table(keyed: dict):
    """The states of every policy as ``simulate_by_key/1`` rows (one per policy, device, state and key)."""
    import pyarrow as pa

    from veotrace.schemas.simulate import SIMULATE_BY_KEY

    rows = [{"policy": policy, "device": int(d), "at": at, **k} for policy, devices in keyed.items()
            for d, states in devices.items() for at, state in states.items() for k in state["keys"]]
    return pa.Table.from_pylist(rows, schema=SIMULATE_BY_KEY) if rows else SIMULATE_BY_KEY.empty_table()
