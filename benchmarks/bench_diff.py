"""Cost of `veotrace diff A B` against the single-run commands it reports, one after another on both sides, in one run.

Issue 28 asks that a diff of two 10M-event logs take at most 0.6x the time of running the single-run
commands whose numbers it reports (entropy, bursts, fragmentation; sites reads snapshots only) one
after another on both sides: each side is read once for all of them (the sides are measured one after the
other: concurrency measured slower here, see comparison.diff.measure_both).
The inputs are two 10M-event CSV logs of different runs: benchmarks/data/alloc_addr_10000000.csv and
training_10000000.csv when present (here, or in ../main/benchmarks/data), else written by
synth.alloc.write_realistic_log with two seeds (about 450 MB each, under benchmarks/data/, not committed).

    python3 benchmarks/bench_diff.py [--events 10000000] [--repeat 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # this checkout's veotrace, for the generator and the runs below
ENV = dict(os.environ, PYTHONPATH=str(HERE.parent))
SINGLE = ("entropy", "bursts", "fragmentation")


def run(args: list) -> tuple[float, float, float]:
    """Wall seconds, peak RSS (MiB) and CPU seconds (user + system, with the processes it waited for) of one
    veotrace process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "veotrace", *map(str, args)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=ENV)
    _, status, usage = os.wait4(proc.pid, 0)
    if status >> 8 not in (0, 3):
        raise SystemExit(f"veotrace {' '.join(map(str, args))} failed: {proc.stderr.read().decode()[-500:]}")
    return time.perf_counter() - t0, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def inputs(events: int) -> tuple[Path, Path]:
    """Two logs of ``events`` events: existing benchmark files of that size, else seeded ones written here."""
    for folder in (HERE / "data", HERE.parent.parent / "main" / "benchmarks" / "data"):
        a, b = folder / f"alloc_addr_{events}.csv", folder / f"training_{events}.csv"
        if a.is_file() and b.is_file():
            return a, b
    from veotrace.synth.alloc import write_realistic_log

    (HERE / "data").mkdir(exist_ok=True)
    out = []
    for seed in (1, 2):
        path = HERE / "data" / f"diff_{events}_seed{seed}.csv"
        if not path.is_file():
            write_realistic_log(path, events=events, seed=seed)
        out.append(path)
    return out[0], out[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=2, help="runs of each measurement; the fastest counts")
    a = ap.parse_args()
    before, after = inputs(a.events)
    print(f"BEFORE {before} ({before.stat().st_size / 1e6:.0f} MB), AFTER {after} ({after.stat().st_size / 1e6:.0f} MB)")
    singles = {}
    for cmd in SINGLE:
        for side in (before, after):
            singles[(cmd, side.name)] = min(run([cmd, side, "-f", "json", "-o", os.devnull]) for _ in range(a.repeat))
            print(f"  {cmd} {side.name}: {singles[(cmd, side.name)][0]:.2f} s, {singles[(cmd, side.name)][1]:.0f} MiB")
    total = sum(t for t, _, _ in singles.values())
    cpu = sum(c for _, _, c in singles.values())
    diff = min(run(["diff", before, after, "-f", "json", "-o", os.devnull]) for _ in range(a.repeat))
    print(f"single-run commands one after another on both sides: {total:.2f} s, {cpu:.2f} CPU s "
          f"(largest {max(m for _, m, _ in singles.values()):.0f} MiB)")
    print(f"diff: {diff[0]:.2f} s, {diff[2]:.2f} CPU s, {diff[1]:.0f} MiB")
    print(f"load average while measuring: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print(f"ratio diff / single runs: {diff[0] / total:.2f}x (issue 28 asks at most 0.60x)")


if __name__ == "__main__":
    main()
