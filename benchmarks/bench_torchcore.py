"""Benchmark the torch policy's two cores: the compiled core (``_torchcore.c``) against the Python model.

On a ~1M-request seeded training-loop log (bench_simulate.training_csv, under benchmarks/data), each case
is replayed by both cores in the same run, counters only (events drained per chunk and dropped, as
``simulate`` without windows would), and the ratio Python / C printed; both cores' counters must be equal
(the event streams are held equal by tests/test_simulate_core.py). Cases: the defaults (for reference),
expandable segments (no capacity, and a capacity that makes pages unmap), and garbage_collection_threshold
with a capacity (below the default run's peak reserved, so the collection runs).

    python3 benchmarks/bench_torchcore.py [--events 1000000] [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))  # this checkout's veotrace

from bench_simulate import training_csv  # noqa: E402


def run(req, conf, capacity, core: str) -> tuple[float, dict]:
    """Seconds of one torch replay on ``core`` and its counters per device (events not kept)."""
    from veotrace.allocators import replay as rp
    from veotrace.allocators.simulate import make_policy
    from veotrace.allocators.torchcore import recorder_for

    rec, models = recorder_for("torch", core, record=False), {}
    t0 = time.perf_counter()
    for _ in rp.iter_replay(lambda d: make_policy("torch", d, req, rec, conf=conf, capacity=capacity, seed=None,
                                                  tiers=None, core=core), req, models):
        rec.drain()
    dt = time.perf_counter() - t0
    return dt, {d: m.c for d, m in models.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=1, help="runs per core and case (the least time is kept)")
    args = ap.parse_args()
    from veotrace.allocators.builder import build_requests
    from veotrace.allocators.conf import TorchConf, parse_conf
    from veotrace.allocators.torchcore import choose_core
    from veotrace.sources import iter_alloc_events

    path = training_csv(args.events)
    req = build_requests(iter_alloc_events([path]))
    n = len(req)
    es = parse_conf("expandable_segments:True")
    peaks = {}
    for name, conf in (("defaults", TorchConf()), ("expandable", es)):
        _, counters = run(req, conf, None, choose_core(conf, None)[0])
        peaks[name] = max(c.peak_reserved for c in counters.values())
    # the GC capacity: the default run's peak reserved (the collection starts at 60% of it); the expandable
    # one: 95% of its unconstrained peak, so pages unmap (flushes) and some requests do not fit (OOMs)
    cap_gc, cap_es = peaks["defaults"], peaks["expandable"] * 19 // 20
    cases = [("defaults", "", None), ("expandable_segments", "expandable_segments:True", None),
             ("expandable_segments, capacity", "expandable_segments:True", cap_es),
             ("garbage_collection_threshold:0.6, capacity", "garbage_collection_threshold:0.6", cap_gc),
             ("garbage_collection_threshold:0.6, max_split_size_mb:20, capacity",
              "garbage_collection_threshold:0.6,max_split_size_mb:20", cap_gc),
             ("garbage_collection_threshold:0.6, expandable, capacity",
              "garbage_collection_threshold:0.6,expandable_segments:True", cap_es)]
    out = {"log": str(path), "requests": n, "capacity_gc_bytes": cap_gc, "capacity_expandable_bytes": cap_es,
           "cases": {}}
    for name, text, capacity in cases:
        conf = parse_conf(text) if text else TorchConf()
        core, why = choose_core(conf, capacity)
        if core != "c":
            out["cases"][name] = {"c": None, "why": why}
            print(json.dumps({name: out["cases"][name]}), flush=True)
            continue
        times, counters = {}, {}
        for which in ("c", "python"):
            best = None
            for _ in range(args.repeat):
                dt, counters[which] = run(req, conf, capacity, which)
                best = dt if best is None else min(best, dt)
            times[which] = best
        if counters["c"] != counters["python"]:
            raise SystemExit(f"{name}: the cores' counters differ: {counters}")
        c0 = counters["c"][min(counters["c"])]
        row = {"c_s": round(times["c"], 3), "python_s": round(times["python"], 3),
               "python_over_c": round(times["python"] / times["c"], 1),
               "c_requests_per_s": round(n / times["c"]), "python_requests_per_s": round(n / times["python"]),
               "device_allocs": c0.device_allocs, "device_frees": c0.device_frees, "flushes": c0.flushes,
               "ooms": c0.ooms, "peak_reserved": c0.peak_reserved}
        out["cases"][name] = row
        print(json.dumps({name: row}), flush=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
