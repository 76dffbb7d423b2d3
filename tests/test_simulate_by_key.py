"""`simulate --by site|phase` (issue 26): which policy helps which site. Each policy's live and stranded
bytes by key at its peak reserved, at the first policy's peak and at the end: a hand-built log with a
known answer, the tap against a brute-force replay of real policies' events, and the real snapshots
against the single-run commands (`sites`, the policies' own counters)."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import real_trace, run_cli

MIB = 1 << 20
CACHE, MODEL = "cache.py:42 keep", "model.py:10 forward"
HEADER = "timestamp,op_type,size_bytes,address,stream,device,site\n"


def _log(path, rows):
    path.write_text(HEADER + "".join(f"{t},{op},{n},{a},0,{d},{s}\n" for t, op, n, a, d, s in rows))
    return path


def test_a_small_block_left_in_a_freed_segment_strands_it_under_torch_and_not_under_a_best_fit(tmp_path):
    """20 MiB allocated and freed, then 2 MiB (cache.py) split from that cached segment, then 20 MiB again:
    torch must reserve a second segment (peak 40 MiB) while cache.py's 2 MiB block strands the other
    18 MiB of the first; at that moment a best fit holds 22 MiB and strands nothing."""
    log = _log(tmp_path / "pin.csv", [(0, "alloc", 20 * MIB, 4096, 0, MODEL), (1000, "free", 20 * MIB, 4096, 0, MODEL),
                                      (2000, "alloc", 2 * MIB, 8192, 0, CACHE), (3000, "alloc", 20 * MIB, 12288, 0, MODEL),
                                      (4000, "free", 20 * MIB, 12288, 0, MODEL)])
    r = run_cli("simulate", log, "--by", "site", "-p", "torch", "-p", "bestfit", "-p", "ideal", "-f", "json")
    assert r.exit_code == 0, r.stderr
    sites = json.loads(r.stdout)["sites"]
    assert sites["by"] == "site" and sites["reference"] == "torch"
    torch = sites["policies"]["torch"]["0"]
    peak = {k["key"]: k for k in torch["peak"]["keys"]}
    assert torch["peak"]["reserved_bytes"] == 40 * MIB and torch["peak"]["request"] == 3
    assert peak[CACHE]["block_bytes"] == 2 * MIB and peak[CACHE]["stranded_bytes"] == peak[CACHE]["sole_bytes"] == 18 * MIB
    assert peak[MODEL]["block_bytes"] == 20 * MIB and peak[MODEL]["stranded_bytes"] == 0
    assert [(k["key"], k["block_bytes"], k["stranded_bytes"]) for k in torch["end"]["keys"]] == [(CACHE, 2 * MIB, 18 * MIB)]
    best = sites["policies"]["bestfit"]["0"]["reference_peak"]
    assert best["request"] == 3 and best["reserved_bytes"] == 22 * MIB and best["stranded_bytes"] == 0
    top = sites["helps"][0]
    assert (top["key"], top["reference_bytes"], top["best_policy"], top["best_bytes"], top["saving_bytes"]) == \
        (CACHE, 20 * MIB, "bestfit", 2 * MIB, 18 * MIB)
    assert top["policies"] == {"torch": 20 * MIB, "bestfit": 2 * MIB, "ideal": 2 * MIB}
    text = run_cli("simulate", log, "--by", "site", "-p", "torch", "-p", "bestfit", "-p", "ideal").stdout
    assert "Which policy helps which site" in text and "cache.py:42 keep" in text and "18.0 MiB" in text
    csv = run_cli("simulate", log, "--by", "site", "-p", "torch", "--table", "by_key", "-f", "csv").stdout
    assert csv.replace('"', "").splitlines()[0] == ("policy,device,at,key,blocks,block_bytes,requested_bytes,"
                                                    "stranded_bytes,sole_bytes,segments")
    assert f"torch,0,peak,{CACHE},1,{2 * MIB},{2 * MIB},{18 * MIB},{18 * MIB},1" in csv.replace('"', "")


def _brute(events: np.ndarray, keys: np.ndarray, devices: np.ndarray, at: int | None = None) -> dict:
    """Per device, the live bytes and stranded bytes by key at its peak reserved (the first request after
    which the maximum holds) and at the end, from scratch at every request, with plain loops."""
    from veotrace.allocators.base import EV_ALLOC, EV_FREE, EV_SEGMENT_ALLOC, EV_SEGMENT_FREE, EV_SEGMENT_MAP, EV_SEGMENT_UNMAP

    out = {}
    for d in sorted({int(devices[r]) if r >= 0 else -1 - int(r) for r in events[:, 0]}):
        mine = [e for e in events.tolist() if (devices[e[0]] if e[0] >= 0 else -1 - e[0]) == d]

        def state(upto, mine=mine):
            live, pages, reserved = {}, set(), 0
            segs = {}
            for q, o, a, n, _s, b in mine[:upto]:
                if o == EV_ALLOC:
                    live[a] = (b, -1 if q < 0 else int(keys[q]))
                elif o == EV_FREE:
                    live.pop(a, None)
                elif o in (EV_SEGMENT_ALLOC, EV_SEGMENT_MAP):
                    segs[a] = a + n
                    reserved += n
                elif o in (EV_SEGMENT_FREE, EV_SEGMENT_UNMAP):
                    segs.pop(a, None)
                    reserved -= n
            del pages
            held, stranded = defaultdict(int), defaultdict(int)
            for b, k in live.values():
                held[k] += b
            for lo, hi in segs.items():
                inside = [(b, k) for a, (b, k) in live.items() if lo <= a < hi]
                free = hi - lo - sum(b for b, _ in inside)
                if inside and free > 0:
                    for k in {k for _, k in inside}:
                        stranded[k] += free
            return reserved, dict(held), dict(stranded)

        # the state after each request's last event
        ends = [i + 1 for i in range(len(mine)) if i + 1 == len(mine) or mine[i + 1][0] != mine[i][0]]
        states = [state(i) for i in ends]
        top = max(s[0] for s in states)
        peak = next(s for s in states if s[0] == top)
        out[d] = {"peak": peak, "end": states[-1]}
    return out


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 11), st.integers(1, 6), st.integers(0, 2), st.booleans(), st.integers(0, 1)),
                min_size=1, max_size=60), st.integers(1, 7), st.sampled_from(["torch", "bestfit", "reuse", "ideal"]))
def test_the_tap_equals_a_brute_force_replay_of_the_policys_own_events(ops, chunk, policy):
    """Random allocs and frees (12 slots, sizes of 0.5 to 3 MiB, three sites, two devices) through a real
    policy, drained every ``chunk`` requests as the replay does: the tap's states at each device's peak
    and at the end equal a replay of the same events from scratch after every request."""
    import pyarrow as pa

    from veotrace.allocators import replay as rp
    from veotrace.allocators.base import Recorder
    from veotrace.allocators.builder import build_requests
    from veotrace.allocators.bykey import KeyTap
    from veotrace.allocators.conf import TorchConf
    from veotrace.allocators.simulate import make_policy
    from veotrace.allocators.tiered import DEFAULT_TIERS
    from veotrace.schemas import ALLOC_EVENTS

    live, rows, sites = {}, [], []
    for slot, units, site, free, dev in ops:
        addr = (slot + 1) << 30
        if addr in live and free:
            rows.append(("free", live.pop(addr), addr, dev))
        elif addr not in live:
            live[addr] = units * (MIB // 2)
            rows.append(("alloc", live[addr], addr, dev))
        else:
            continue
        sites.append(site)
    # a device's frees name its own allocations: each address stays on the device that first allocated it
    owner: dict[int, int] = {}
    rows = [(op, n, a, owner.setdefault(a, d)) for op, n, a, d in rows]
    table = pa.table({"ts_ns": pa.array(range(len(rows)), pa.int64()), "seq": pa.array(range(len(rows)), pa.int64()),
                      "op": pa.array([r[0] for r in rows]).dictionary_encode().cast(pa.dictionary(pa.int32(), pa.string())),
                      "size_bytes": pa.array([r[1] for r in rows], pa.int64()),
                      "address": pa.array([r[2] for r in rows], pa.uint64()), "stream": pa.array([0] * len(rows), pa.int64()),
                      "device": pa.array([r[3] for r in rows], pa.int32())})
    table = table.append_column("mem_kind", pa.nulls(len(rows), pa.dictionary(pa.int32(), pa.string())))
    table = table.append_column("source_file", pa.array(["h"] * len(rows)).dictionary_encode()
                                .cast(pa.dictionary(pa.int32(), pa.string()))).select(ALLOC_EVENTS.names).cast(ALLOC_EVENTS)
    req = build_requests(table)
    keys = np.asarray(sites, np.int64)[np.frombuffer(req.seq, np.int64)]
    names = {0: "a", 1: "b", 2: "c"}
    rec, models, tap = Recorder(), {}, KeyTap(keys, names)
    parts = []

    def make(d):
        return make_policy(policy, d, req, rec, conf=TorchConf(), capacity=None, seed=None, tiers=DEFAULT_TIERS,
                           core="python")

    for part in rp.iter_replay(make, req, models, chunk=chunk):
        ev = rec.drain()
        parts.append(ev)
        tap.feed(ev, np.frombuffer(part.device, np.int64), part.offset)
    events = np.concatenate(parts)
    want = _brute(events, keys, np.frombuffer(req.device, np.int64))
    got = tap.result()
    text = {**names, tap.before: "(allocated before the trace)"}
    for d, w in want.items():
        for at in ("peak", "end"):
            s = got[str(d)][at]
            assert s["reserved_bytes"] == w[at][0], (at, d)
            assert {k["key"]: k["block_bytes"] for k in s["keys"]} == {text[k]: v for k, v in w[at][1].items()}, (at, d)
            assert {k["key"]: k["stranded_bytes"] for k in s["keys"] if k["stranded_bytes"]} == \
                {text[k]: v for k, v in w[at][2].items()}, (at, d)
        assert got[str(d)]["peak"]["reserved_bytes"] == models[d].c.peak_reserved


SNAPSHOTS = ["constructorsun_memory_snapshot.pickle", "cranberrii_memory_snapshot.pickle",
             "magma27_memory_snapshot.pickle", "maphsge4_snapshot.pickle"]


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_on_real_snapshots_torch_ends_with_the_sites_own_end_and_every_peak_is_the_policys(name):
    """The torch model's end state by site is what `veotrace sites` reads from the snapshot's own blocks
    and frames (the model reproduces every recorded device allocation); each policy's peak state is at
    the peak reserved its own counters report, and the states at the reference's peak hold the same
    requests (allocated bytes equal up to each policy's rounding)."""
    path = real_trace(name)
    sim = json.loads(run_cli("simulate", path, "--by", "site", "-p", "torch", "-p", "bestfit", "-p", "ideal",
                             "-f", "json").stdout)
    sites = json.loads(run_cli("sites", path, "-f", "json").stdout)
    for d, dev in sites["devices"].items():
        torch = sim["sites"]["policies"]["torch"][d]
        assert {k["key"]: k["block_bytes"] for k in torch["end"]["keys"]} == {r["site"]: r["bytes"] for r in dev["end"]["sites"]}
    for p in sim["policies"]:
        for d, states in sim["sites"]["policies"][p["policy"]].items():
            own = (p.get("per_device") or {}).get(d, {}).get("peak_reserved_bytes", p["peak_reserved_bytes"])
            assert states["peak"]["reserved_bytes"] == own
            if p["policy"] != "torch":
                ref = sim["sites"]["policies"]["torch"][d]["peak"]
                assert states["reference_peak"]["request"] == ref["request"] or ref["request"] is None
                assert states["reference_peak"]["allocated_bytes"] == pytest.approx(ref["allocated_bytes"], rel=0.02)


def test_by_phase_sums_to_the_allocated_bytes_and_bad_requests_are_one_error(tmp_path):
    path = real_trace("constructorsun_memory_snapshot.pickle")
    out = json.loads(run_cli("simulate", path, "--by", "phase", "-p", "torch", "-f", "json").stdout)
    for states in out["phases"]["policies"]["torch"].values():
        for s in (states["peak"], states["end"]):
            assert sum(k["block_bytes"] for k in s["keys"]) == s["allocated_bytes"]
    r = run_cli("simulate", "sample_traces/simulate/training_log.csv", "--by", "site")
    assert r.exit_code == 1 and r.stderr.count("Error:") == 1 and "site" in r.stderr
    r = run_cli("simulate", path, "--by", "site", "--site-filter", "(")
    assert r.exit_code == 2 and "--site-filter" in r.stderr
    r = run_cli("simulate", path, "--table", "by_key", "-f", "csv", "-o", str(tmp_path / "x.csv"))
    assert r.exit_code == 2 and "by_key" in r.stderr
