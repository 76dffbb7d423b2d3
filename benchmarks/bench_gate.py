"""How good is `veotrace gate`? False-positive and detection rates on seeded log pairs, and its cost.

Rates: ``--pairs`` pairs of seeded logs from the same process (veotrace.synth.gate: 240 windows of
1 h, 300 allocs each, AR(1) window noise), the second one unchanged, +0.05 bits, +0.10 bits, or
tilted (+0.004 bits/hour about mid-run, same mean). Each pair goes through the library path of the
CLI: compute_entropy -> baseline document -> parse -> compare at the defaults. For contrast, the
same mean check with an iid z-test instead of the block bootstrap.

Cost: ``veotrace entropy`` and ``veotrace gate`` on one realistic 237-hour CSV log, as commands,
alternated ``--runs`` times in this one run (medians), so machine load cancels in the ratio.

    python3 benchmarks/bench_gate.py                 # 100 pairs per case, a 2M-event 237-hour log
    python3 benchmarks/bench_gate.py --pairs 20 --events 500000
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from veotrace.analysis.entropy.entropy import compute_entropy
from veotrace.gating.baseline import entropy_baseline, parse_baseline, series_from_result
from veotrace.gating.compare import GateOptions, compare
from veotrace.synth.alloc import write_realistic_log
from veotrace.synth.gate import gate_log

CASES = {"same process": {}, "+0.05 bits": {"shift_bits": 0.05}, "+0.10 bits": {"shift_bits": 0.10},
         "slope +0.004 bits/h": {"extra_slope_bits_per_hour": 0.004}}


def one_pair(i: int, change: dict, opts: GateOptions, log_kw: dict) -> tuple[dict, float, float]:
    """The gate's checks on pair i, and the iid z-test's mean increase and p-value for contrast."""
    runs = []
    for seed, kw in ((10_000 + 2 * i, {}), (10_001 + 2 * i, change)):
        g = gate_log(seed=seed, **log_kw, **kw)
        runs.append(compute_entropy(g.table.to_batches(), window_s=log_kw["window_s"]))
    doc = entropy_baseline(runs[0], fingerprint={}, time_unit="ns", recorded_at="2026-01-01T00:00:00Z")
    base = parse_baseline(json.dumps(doc).encode(), "bench")
    run = series_from_result(runs[1])
    checks = compare(run, base, opts, step_hours=log_kw["window_s"] / 3600)
    a, b = base.series.h[base.series.finite], run.h[run.finite]
    d = b.mean() - a.mean()
    z = d / math.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)
    return {c.name: c for c in checks}, d, 0.5 * math.erfc(z / math.sqrt(2))


def rates(pairs: int, log_kw: dict) -> None:
    opts = GateOptions()
    print(f"{pairs} pairs per case; logs of {log_kw['windows']} windows x {log_kw['window_s']:g} s, "
          f"{log_kw['events_per_window']} allocs per window; defaults: --max-increase {opts.max_increase}, "
          f"--max-slope-increase {opts.max_slope_increase} bits/h, --alpha {opts.alpha}")
    print("columns: pairs the gate fails; failures per check; mean check p <= alpha alone (no tolerance), "
          "block bootstrap vs an iid z-test; the mean check with the iid test")
    print(f"{'case':<22}{'gate fails':>11}{'mean':>6}{'slope':>7}{'aligned':>9}{'sig boot':>10}{'sig iid':>9}"
          f"{'iid fails':>11}{'s/pair':>8}")
    for name, change in CASES.items():
        t0 = time.perf_counter()
        n = dict.fromkeys(("gate", "mean", "slope", "aligned", "sig", "sig_iid", "iid"), 0)
        for i in range(pairs):
            checks, d, p_iid = one_pair(i, change, opts, log_kw)
            n["gate"] += any(c.failed for c in checks.values())
            for k in ("mean", "slope", "aligned"):
                n[k] += checks[k].failed
            n["sig"] += checks["mean"].p_value <= opts.alpha
            n["sig_iid"] += p_iid <= opts.alpha
            n["iid"] += d > opts.max_increase.bits(checks["mean"].baseline) and p_iid <= opts.alpha
        dt = (time.perf_counter() - t0) / pairs
        print(f"{name:<22}{n['gate']:>7}/{pairs:<3}{n['mean']:>6}{n['slope']:>7}{n['aligned']:>9}{n['sig']:>10}"
              f"{n['sig_iid']:>9}{n['iid']:>11}{dt:>8.3f}")


def cost(events: int, runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        log, base = Path(tmp) / "run.csv", Path(tmp) / "base.json"
        t0 = time.perf_counter()
        write_realistic_log(log, events=events, hours=237.0, seed=3)
        print(f"\ncost on a 237-hour log of {events:,} events ({log.stat().st_size / 1e6:.0f} MB CSV, "
              f"written in {time.perf_counter() - t0:.1f} s); median of {runs} alternated runs:")
        cli = [sys.executable, "-m", "veotrace"]
        subprocess.run([*cli, "entropy", str(log), "--save-baseline", str(base), "-f", "json", "-o", str(Path(tmp) / "e.json")],
                       check=True)
        timing = {"entropy": [], "gate": []}
        for _ in range(runs):
            for name, args in (("entropy", ["entropy", str(log), "-f", "json", "-o", str(Path(tmp) / "e.json")]),
                               ("gate", ["gate", str(log), "--baseline", str(base), "-f", "json", "-o",
                                         str(Path(tmp) / "g.json")])):
                t0 = time.perf_counter()
                subprocess.run([*cli, *args], check=True)
                timing[name].append(time.perf_counter() - t0)
        e, g = statistics.median(timing["entropy"]), statistics.median(timing["gate"])
        windows = len(json.loads(base.read_text())["metrics"]["entropy"]["windows"]["window"])
        print(f"  commands: veotrace entropy {e:.2f} s; veotrace gate (the same read + {windows} windows x 3 "
              f"checks) {g:.2f} s; gate / entropy = {g / e:.2f}")
        # In one process: the analysis both commands run, then the gate's own work (baseline, checks).
        from veotrace.analysis.entropy.entropy import COLUMNS
        from veotrace.gating.baseline import read_baseline
        from veotrace.sources import ReadOptions, ReadReport, iter_alloc_events

        t0 = time.perf_counter()
        result = compute_entropy(iter_alloc_events([log], options=ReadOptions(), report=ReadReport(), columns=COLUMNS))
        analysis = time.perf_counter() - t0
        own = []
        for _ in range(max(runs, 3)):
            t0 = time.perf_counter()
            compare(series_from_result(result), read_baseline(base), GateOptions(), step_hours=300 / 3600)
            own.append(time.perf_counter() - t0)
        print(f"  in process: entropy analysis {analysis:.2f} s; the gate's own work (read the baseline, "
              f"bootstrap 3 checks x 2000) {statistics.median(own):.3f} s = {statistics.median(own) / analysis:.1%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=100)
    ap.add_argument("--windows", type=int, default=240)
    ap.add_argument("--events-per-window", type=int, default=300)
    ap.add_argument("--events", type=int, default=2_000_000, help="events in the 237-hour log timed")
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    log_kw = {"windows": a.windows, "window_s": 3600.0, "events_per_window": a.events_per_window}
    rates(a.pairs, log_kw)
    cost(a.events, a.runs)


if __name__ == "__main__":
    main()
