"""Run several policies over one request sequence and compare them: the analysis behind ``veotrace simulate``.

Each policy replays the same requests; its own event stream (model addresses, ``alloc_events/1`` plus
``block_bytes``) goes through :func:`veotrace.frag.fragmentation_series`, so reserved,
allocated and fragmentation per window use the same definitions as ``veotrace fragmentation``.
Windows are aligned across policies: time windows, or windows of N requests when the trace has no
timestamps (the request index then stands in for the clock).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from veotrace.allocators import replay as rp
from veotrace.allocators.base import EV_NAMES, EV_OOM, AddressSpace, PolicyCounters, Recorder, event_devices
from veotrace.allocators.bykey import KeyTap
from veotrace.allocators.conf import TorchConf
from veotrace.allocators.policies import POLICIES
from veotrace.allocators.requests import NO_TIME, REQ_SEED, Requests
from veotrace.allocators.seed import Seed
from veotrace.allocators.stream import RequestStream
from veotrace.analysis import timescale
from veotrace.defaults import SIMULATE_AUTO_WINDOW_ROWS, SIMULATE_WINDOW_S
from veotrace.errors import UsageError
from veotrace.schemas import ALLOC_EVENTS, repeated
from veotrace.schemas.simulate import SIMULATE_WINDOWS, WINDOW_COLUMNS

EVENTS_SCHEMA = ALLOC_EVENTS.append(pa.field("block_bytes", pa.int64(), nullable=True))


@dataclass
class SimulateResult:
    policies: list[dict]
    whatif: list[dict]
    windows: pa.Table
    params: dict
    validation: dict | None = None
    notes: list[str] = field(default_factory=list)
    #: ``by`` given: per policy, per device, the states by key at the peak and the end (``bykey.KeyTap``).
    keyed: dict | None = None

    @property
    def first_oom(self) -> dict | None:
        hits = [dict(p["first_oom"], policy=p["policy"]) for p in self.policies if p.get("first_oom")]
        return min(hits, key=lambda h: h["request"]) if hits else None

    def to_dict(self) -> dict:
        out = {"params": self.params, "policies": self.policies, "whatif": self.whatif,
               "validation": self.validation, "notes": self.notes, "windows": self.windows.to_pylist()}
        if self.keyed is not None:  # --by site: "sites"; --by phase: "phases"
            out[f"{self.keyed['by']}s"] = self.keyed
        return out


def check_policies(names: list[str]) -> list[str]:
    bad = [n for n in names if n not in POLICIES]
    if bad:
        raise UsageError(f"unknown policy {bad[0]!r}", hint=f"Policies are {', '.join(POLICIES)}")
    return list(dict.fromkeys(names)) or list(POLICIES)


def check_core(name: str) -> str:
    from veotrace.allocators.torchcore import CORES

    if name not in CORES:
        raise UsageError(f"unknown --torch-core {name!r}", hint=f"Cores are {', '.join(CORES)}")
    return name


def make_policy(name: str, device: int, req: Requests, rec: Recorder, *, conf: TorchConf, capacity,
                seed: Seed | None, tiers, core: str = "python"):
    """One device's policy (``allocators.policies``). ``core="c"``: the compiled torch core (``rec`` is then a CoreRecorder)."""
    from veotrace.allocators.policies import PolicyContext, make

    return make(name, PolicyContext(device, req, rec, conf, capacity, seed, tiers, core, AddressSpace()))


def events_batch(ev: np.ndarray, req: Requests, name: str, clock: np.ndarray, seq0: int = 0) -> pa.RecordBatch:
    """Drained events (an (n, 6) array, see Recorder) as ``alloc_events/1`` (+ ``block_bytes``), timed by
    the request that caused them (``req`` and ``clock`` hold the requests from ``req.offset`` on)."""
    idx = np.clip(ev[:, 0] - req.offset, 0, max(len(req) - 1, 0))
    dev = event_devices(ev, np.frombuffer(req.device, dtype=np.int64), req.offset).astype(np.int32)
    ts = clock[idx] if len(req) else np.zeros(0, np.int64)
    n = len(ev)
    return pa.RecordBatch.from_pydict({
        "ts_ns": pa.array(ts, pa.int64()),
        "seq": pa.array(np.arange(seq0, seq0 + n), pa.int64()),
        "op": pa.DictionaryArray.from_arrays(pa.array(ev[:, 1].astype(np.int32)), pa.array(EV_NAMES)),
        "size_bytes": pa.array(ev[:, 3]),
        "address": pa.array(ev[:, 2].astype(np.uint64)),
        "stream": pa.array(ev[:, 4]),
        "device": pa.array(dev),
        "mem_kind": pa.nulls(n, pa.dictionary(pa.int32(), pa.string())),
        "source_file": repeated(f"simulate:{name}", n),
        "block_bytes": pa.array(ev[:, 5]),
    }, schema=EVENTS_SCHEMA)


def _oom_context(ev: np.ndarray, part: Requests, found: dict, seen: set) -> None:
    """Remember where each device's first OOM happened while its request is at hand (a chunk of a stream).

    Read from the drained events (each OOM is an ``oom`` event naming its request), not by asking every
    device's model: the cost is the chunk's, not the number of devices."""
    hits = ev[ev[:, 1] == EV_OOM, 0] if len(ev) else ev[:0, 0]
    for r in hits.tolist():
        j = r - part.offset
        if 0 <= j < len(part) and part.device[j] not in seen:  # ``seen``: devices whose first OOM is found
            seen.add(part.device[j])
            found[r] = {"device": part.device[j], "source_row": part.seq[j],
                        "ts_ns": None if part.ts_ns[j] == NO_TIME else part.ts_ns[j]}


def totals(models: dict) -> PolicyCounters:
    """One policy's counters summed over its devices' models (peaks add up: see PolicyCounters.merge)."""
    total = PolicyCounters()
    for m in models.values():
        total.merge(m.c)
    return total


def per_device(models: dict) -> dict[str, dict]:
    """Each device's own peaks, device allocations and OOMs (the JSON ``per_device``)."""
    return {str(d): {"peak_reserved_bytes": m.c.peak_reserved, "peak_allocated_bytes": m.c.peak_allocated,
                     "device_allocs": m.c.device_allocs, "ooms": m.c.ooms} for d, m in sorted(models.items())}


def _policy_row(name: str, counters: PolicyCounters, oom_at: dict, frag, extra: dict) -> dict:
    oom = counters.first_oom
    if oom is not None and oom["request"] in oom_at:
        oom = dict(oom, **oom_at[oom["request"]])
    w = frag.windows
    ext = [v for v in w.column("external_frag").to_pylist() if v is not None] if w.num_rows else []
    gml = [v for v in w.column("gmlake_frag").to_pylist() if v is not None] if w.num_rows else []
    return {
        "policy": name, "peak_reserved_bytes": counters.peak_reserved, "peak_allocated_bytes": counters.peak_allocated,
        "final_reserved_bytes": counters.reserved, "device_allocs": counters.device_allocs,
        "device_frees": counters.device_frees, "flushes": counters.flushes, "alloc_retries": counters.alloc_retries,
        "ooms": counters.ooms, "first_oom": oom,
        "fragmentation": {"windows": w.num_rows, "fragmented_windows": frag.summary.get("fragmented_windows"),
                          "external_frag_max": max(ext) if ext else None,
                          "gmlake_frag_max": max(gml) if gml else None},
        **extra, "notes": counters.notes,
    }


def whatif_table(rows: list[dict]) -> list[dict]:
    """Policies ranked by peak reserved bytes, each against ``ideal`` (when it ran)."""
    ideal = next((r["peak_reserved_bytes"] for r in rows if r["policy"] == "ideal"), None)
    out = []
    for rank, r in enumerate(sorted(rows, key=lambda r: (r["peak_reserved_bytes"], r["policy"])), 1):
        out.append({"rank": rank, "policy": r["policy"], "peak_reserved_bytes": r["peak_reserved_bytes"],
                    "vs_ideal": r["peak_reserved_bytes"] / ideal if ideal else None,
                    "over_ideal_bytes": r["peak_reserved_bytes"] - ideal if ideal is not None else None,
                    "device_allocs": r["device_allocs"], "flushes": r["flushes"], "ooms": r["ooms"]})
    return out


def simulate(req: Requests | RequestStream, *, policies: list[str], conf: TorchConf, capacity: int | None = None,
             seed: Seed | None = None, tiers=None, window_s: float | None = None,
             window_requests: int | None = None, on_progress=None, torch_core: str = "auto",
             by: tuple[np.ndarray, dict[int, str]] | None = None) -> SimulateResult:
    """Replay ``req`` through each policy (one instance per device) and measure each over windows.

    Args:
        req: the whole requests, or a :class:`RequestStream` read again for each policy (memory bounded
            by the live set; not for the tiered policies, whose lifetimes need the whole trace).
        policies: names from :data:`POLICIES`. conf: settings of the ``torch`` policy.
        capacity: bytes per device (None: unlimited). seed: starting state for ``torch`` (part-way traces).
        tiers: ``tiered`` bounds and granularities (default :data:`tiered.DEFAULT_TIERS`).
        window_s / window_requests: window length; neither: the one window rule of every timed analysis
            (``timescale.fit_window``: 300 s unless that gives under 20 windows, then one from the data;
            windows of events, as entropy counts them, without timestamps).
        torch_core: "auto" (the compiled core where it covers the run), "c" or "python" (see torchcore.choose_core).
        by: (a key code per request of the whole ``req``, the text of each code): each policy's live and
            stranded bytes by key at each device's peak reserved, at the moment the first policy peaks,
            and at the end (``bykey.KeyTap``).
    """
    from veotrace.allocators.tiered import DEFAULT_TIERS
    from veotrace.allocators.torchcore import choose_core, recorder_for
    from veotrace.frag import fragmentation_series

    tiers = tiers or DEFAULT_TIERS
    streamed = isinstance(req, RequestStream)
    if by is not None and streamed:
        raise ValueError("keys per request need the whole requests, not a RequestStream")
    keyed: dict | None = {} if by is not None else None
    reference_at: dict | None = None  # with ``by``: per device, the request where the first policy peaks
    releases = req.releases
    has_time = req.has_time
    if not streamed:
        clock = req.clock(has_time)
    if not has_time and window_s is not None:
        raise UsageError("--window needs timestamps, and this trace has none", hint="Use --window-requests N")
    if has_time and window_requests is not None:
        raise UsageError("--window-requests is for traces without timestamps", hint="Use --window DURATION")
    rows, wins, notes = [], [], list(req.notes)
    choice = {"auto": False, "mode": "given"}
    if has_time and window_s:
        window_ns = round(window_s * 1e9)
    elif has_time:
        def stamps():  # only when the span is short: the requests' times
            return clock if not streamed else np.concatenate([req.clock(c) for c in req.chunks()])

        first, last = (req.t_first, req.t_last) if streamed else (int(clock[0]), int(clock[-1]))
        w, why = timescale.fit_window(first, last, SIMULATE_WINDOW_S, stamps, len(req))
        window_ns = w or round(SIMULATE_WINDOW_S * 1e9)
        if why is not None:
            choice = {"auto": True, "mode": "time", "window_s": window_ns / 1e9, "reason": why}
        else:
            choice = {"auto": False, "mode": "default"}
    else:
        window_ns = window_requests or timescale.auto_window_events(len(req))
        if not window_requests:
            choice = {"auto": True, "mode": "requests", "window_requests": window_ns,
                      "reason": "the trace has no timestamps"}
    n_dev = len(req.devices)
    if n_dev > 1 and not (window_s or window_requests):  # devices x windows: each a row of every policy's table
        span = (int(req.t_last) - int(req.t_first) if streamed else int(clock[-1] - clock[0])) + 1 if has_time else len(req)
        allowed = max(1, SIMULATE_AUTO_WINDOW_ROWS // n_dev)
        if -(-span // window_ns) > allowed:
            window_ns = timescale.round_up_window(-(-span // allowed)) if has_time else -(-span // allowed)
            notes.append(f"{n_dev:,} devices: windows of {timescale.fmt_duration(window_ns / 1e9) if has_time else window_ns}"
                         f"{'' if has_time else ' requests'}, about {allowed} per device, so each policy's window table "
                         f"stays near {SIMULATE_AUTO_WINDOW_ROWS:,} rows (--window or --window-requests sets the windows)")
            choice = {**choice, "auto": True, "devices_cap": allowed,
                      **({"window_s": window_ns / 1e9} if has_time else {"window_requests": window_ns})}
    core, core_why = choose_core(conf, capacity, torch_core)
    for name in policies:
        if name.startswith("tiered") and not has_time:
            notes.append(f"{name}: not run, lifetimes need timestamps and this trace has none")
            continue
        if name.startswith("tiered") and streamed:
            raise ValueError("the tiered policies need the whole requests, not a RequestStream")
        rec, models = recorder_for(name, core), {}
        def make(d, name=name, rec=rec):
            return make_policy(name, d, req, rec, conf=conf, capacity=capacity, seed=seed, tiers=tiers, core=core)

        oom_at: dict = {}
        oom_seen: set = set()
        tap = KeyTap(*by, at=reference_at) if by is not None else None

        def stream(name=name, rec=rec, models=models, make=make, oom_at=oom_at, oom_seen=oom_seen, tap=tap):
            seq0 = 0
            for part in rp.iter_replay(make, req.chunks() if streamed else req, models):
                ev = rec.drain()
                if tap is not None:
                    tap.feed(ev, np.frombuffer(part.device, np.int64), part.offset)
                if len(ev):
                    batch = events_batch(ev, part, name, req.clock(part) if streamed else clock, seq0)
                    seq0 += batch.num_rows
                    yield batch
                _oom_context(ev, part, oom_at, oom_seen)

        frag = fragmentation_series(stream(), window_s=window_ns / 1e9)
        total = totals(models)
        extra = {}
        if name.startswith("tiered"):
            stats = [m.stats for m in models.values()]
            extra["tiers"] = {k: (np.sum([s[k] for s in stats], axis=0).tolist()) for k in stats[0]}
        if len(models) > 1:  # the totals add per-device peaks, which may fall at different moments
            extra["per_device"] = per_device(models)
        if name == "torch":  # the cudaMalloc addresses: recorded, or assumed by the rule learned from the trace
            from veotrace.allocators import driver

            extra["addresses"] = driver.summary(total.assumed_addresses, total.assumed_ties,
                                                getattr(req, "driver_rules", {}), models)
        rows.append(_policy_row(name, total, oom_at, frag, extra))
        if tap is not None:
            keyed[name] = tap.result()
            if reference_at is None:  # the others' states at the same moments (None: once seeded)
                seeded = int(np.count_nonzero(np.frombuffer(req.kind, np.int64) == REQ_SEED))
                reference_at = {d: seeded - 1 if q is None else q for d, q in tap.peak_requests().items()}
        w = frag.windows.select(WINDOW_COLUMNS)
        if not has_time:  # the request index stood in for the clock
            nulls = pa.nulls(w.num_rows, pa.int64())
            w = w.set_column(2, "start_ns", nulls).set_column(3, "end_ns", nulls)
        wins.append(w.append_column("policy", repeated(name, w.num_rows)))
        if on_progress is not None:
            on_progress(name)
    windows = pa.concat_tables([w.cast(SIMULATE_WINDOWS) for w in wins]) if wins else SIMULATE_WINDOWS.empty_table()
    params = {"policies": [r["policy"] for r in rows], "torch_conf": conf.to_dict(), "capacity_bytes": capacity,
              "tiers": [{"max_lifetime_s": None if b == float("inf") else b, "granularity_bytes": g} for b, g in tiers],
              "window_ns": window_ns if has_time else None, "window_requests": None if has_time else window_ns,
              "window_choice": choice,
              "requests": len(req), "counts": req.counts, "requests_streamed": streamed,
              "seed": seed.describe() if seed is not None else "not seeded (not a PyTorch snapshot)",
              "recorded_releases": releases}
    if "torch" in params["policies"]:
        params["torch_core"], params["torch_core_why"] = core, core_why
    return SimulateResult(rows, whatif_table(rows), windows, params, notes=notes, keyed=keyed)
