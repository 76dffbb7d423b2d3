"""Cost of `veotrace tune` (issue 27): the default grid against one default replay, in one run.

One default replay is `veotrace simulate LOG --policy torch` (PyTorch's defaults: the replay an engineer
runs today, read, pairing and fragmentation windows included); `tune` reads and decodes the trace once,
runs every candidate of the default grid through the torch model, counters only, and stops each one
as soon as it can no longer win. Printed: both wall times, their ratio (issue 27: at most 10x on 2
cores), the candidates evaluated and pruned; then `--jobs 2`, `--exhaustive` (no pruning) and a
memory fraction of 0.95 on a device of 1/0.95 the defaults' own peak (72 candidates: the GC threshold joins
the grid, as it does only under a fraction).

The log is the seeded training-loop log of bench_simulate (every free pairs with its alloc), of about
--events rows (one request each: an alloc or a free).

    python3 benchmarks/bench_tune.py [--events 1000000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
ENV = dict(os.environ, PYTHONPATH=str(HERE.parent))


def run(args: list[str]) -> tuple[float, dict]:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "veotrace", *args, "-f", "json"], capture_output=True, text=True, env=ENV)
    if out.returncode:
        raise SystemExit(f"veotrace {' '.join(args)} failed: {out.stderr[-800:]}")
    return time.perf_counter() - t0, json.loads(out.stdout)


def main() -> None:
    from bench_simulate import training_csv

    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    a = ap.parse_args()
    log = training_csv(a.events)
    one, sim = run(["simulate", str(log), "--policy", "torch", "--conf", ""])
    print(f"log {log.name}: {sim['params']['requests']:,} requests")
    print(f"one default replay (simulate --policy torch): {one:.1f} s, core {sim['params'].get('torch_core')}")
    peak = sim["policies"][0]["peak_reserved_bytes"]
    device = int(peak / 0.95) + 1
    for extra in (["--jobs", "1"], ["--jobs", "2"], ["--exhaustive"], ["--capacity", str(device), "--fraction", "0.95"]):
        t, out = run(["tune", str(log), *extra])
        p = out["params"]
        cores = {c["core"] for c in out["candidates"]}
        print(f"tune {' '.join(extra)}: {t:.1f} s = {t / one:.2f}x one default replay; {p['candidates']} candidates, "
              f"{p['evaluated']} run to the end, {p['pruned']} pruned; cores {sorted(cores)}; "
              f"recommended {out['recommendation'].get('export')}")


if __name__ == "__main__":
    main()
