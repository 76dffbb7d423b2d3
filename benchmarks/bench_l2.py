"""Benchmark for `veotrace l2-breakpoints` (issue 4): change-point speed and accuracy against ruptures.

In one run, on the same seeded series (the L2 miss rate of one kernel, planted breaks, 2-sigma jumps,
noise sigma = 1):

(a) 10,000 launches: veotrace ``changepoints.detect`` vs ``ruptures.Pelt(model="l2")`` with default
    settings (min_size=2, jump=5), target >= 100x faster;
(b) 100,000 launches: veotrace vs ``ruptures.Binseg(model="l2")`` (defaults), target >= 10x faster.

ruptures gets ``pen=`` equal to veotrace's penalty on that series (``bic_penalty(x, scale)`` with the
default scale), so both minimise the same penalised l2 cost and their F1 compare. F1 counts a found
break as right when within +-3 launches of a planted one (one-to-one). Also times the whole
``find_breakpoints`` on an NCU_METRICS table of the same 100,000 launches (no CSV parsing).

    python3 benchmarks/bench_l2.py [--small] [--runs R] [--seed S] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

TOLERANCE = 3


def _best_of(fn, runs: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def compare(n: int, breaks: int, baseline: str, *, runs: int, seed: int) -> dict:
    import ruptures as rpt

    from veotrace.analysis import changepoints
    from veotrace.analysis.defaults import CHANGEPOINT_PENALTY_SCALE
    from veotrace.synth.ncu import planted_l2

    truth = planted_l2(seed=seed, kernels=1, launches=n, breaks=breaks, sigma=1.0, jump_sigmas=2.0, min_gap=30)
    kernel = truth.kernels[0]
    x = truth.miss_rate(kernel)
    pen = changepoints.bic_penalty(x, scale=CHANGEPOINT_PENALTY_SCALE)
    t_ours, ours = _best_of(lambda: changepoints.detect(x, penalty=pen), runs)
    algo = rpt.Pelt(model="l2") if baseline == "Pelt" else rpt.Binseg(model="l2")
    t0 = time.perf_counter()
    theirs = algo.fit(x.reshape(-1, 1)).predict(pen=pen)[:-1]  # ruptures appends n
    t_theirs = time.perf_counter() - t0
    f_ours = changepoints.match_f1(ours, truth.breaks[kernel], TOLERANCE)
    f_theirs = changepoints.match_f1(theirs, truth.breaks[kernel], TOLERANCE)
    return {"launches": n, "planted": breaks, "baseline": f"ruptures.{baseline}(model='l2') defaults, pen={pen:.4g}",
            "penalty": pen, "sigma": changepoints.noise_sigma(x),
            "veotrace_s": t_ours, "ruptures_s": t_theirs, "speedup": t_theirs / t_ours,
            "veotrace": {"found": len(ours), "precision": f_ours[0], "recall": f_ours[1], "f1": f_ours[2]},
            "ruptures": {"found": len(theirs), "precision": f_theirs[0], "recall": f_theirs[1], "f1": f_theirs[2]}}


def whole_analysis(n_per_kernel: int, *, runs: int, seed: int) -> dict:
    import pyarrow as pa

    from veotrace.analysis.l2 import find_breakpoints
    from veotrace.schemas import NCU_METRICS, conform
    from veotrace.synth.ncu import METRICS, planted_l2

    truth = planted_l2(seed=seed, kernels=4, launches=n_per_kernel, breaks=n_per_kernel // 500, sigma=1.0,
                       min_gap=30)
    cols: dict[str, list] = {"launch_id": [], "kernel": [], "metric": [], "value": [], "source_file": []}
    for k in truth.kernels:
        for m in METRICS:
            v = truth.series[k][m]
            cols["launch_id"].extend(truth.ids[k].tolist())
            cols["kernel"].extend([k] * v.size)
            cols["metric"].extend([m] * v.size)
            cols["value"].extend(v.tolist())
            cols["source_file"].extend(["synthetic"] * v.size)
    table = conform(pa.table(cols), NCU_METRICS)
    t, res = _best_of(lambda: find_breakpoints(table), runs)
    return {"launches": 4 * n_per_kernel, "kernels": 4, "metric_rows": table.num_rows, "seconds": t,
            "breakpoints": res.breakpoints.num_rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="1,000 and 10,000 launches (a quick check)")
    ap.add_argument("--runs", type=int, default=5, help="veotrace runs per size (best is reported)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="also print all numbers as JSON")
    args = ap.parse_args()
    n_a, n_b = (1_000, 10_000) if args.small else (10_000, 100_000)
    results = {
        "a_vs_pelt": compare(n_a, n_a // 200, "Pelt", runs=args.runs, seed=args.seed),
        "b_vs_binseg": compare(n_b, n_b // 500, "Binseg", runs=args.runs, seed=args.seed + 1),
        "c_find_breakpoints": whole_analysis(n_b // 4, runs=args.runs, seed=args.seed + 2),
    }
    for key, target in (("a_vs_pelt", 100), ("b_vs_binseg", 10)):
        r = results[key]
        ok = r["speedup"] >= target and r["veotrace"]["f1"] >= r["ruptures"]["f1"]
        print(f"{key}: {r['launches']:,} launches, {r['planted']} planted breaks, {r['baseline']}")
        print(f"  veotrace {r['veotrace_s'] * 1e3:9.2f} ms  found {r['veotrace']['found']:4d}  "
              f"P {r['veotrace']['precision']:.3f} R {r['veotrace']['recall']:.3f} F1 {r['veotrace']['f1']:.3f}")
        print(f"  ruptures {r['ruptures_s'] * 1e3:9.2f} ms  found {r['ruptures']['found']:4d}  "
              f"P {r['ruptures']['precision']:.3f} R {r['ruptures']['recall']:.3f} F1 {r['ruptures']['f1']:.3f}")
        print(f"  speedup {r['speedup']:.1f}x (target >= {target}x), F1 equal or better: "
              f"{r['veotrace']['f1'] >= r['ruptures']['f1']}  -> {'PASS' if ok else 'FAIL'}")
    c = results["c_find_breakpoints"]
    print(f"c_find_breakpoints: {c['launches']:,} launches in {c['kernels']} kernels ({c['metric_rows']:,} metric rows), "
          f"{c['breakpoints']} breakpoints, {c['seconds'] * 1e3:.1f} ms (series + detection + rules)")
    if args.json:
        print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
