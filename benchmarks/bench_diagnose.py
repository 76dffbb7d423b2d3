"""Cost of `veotrace diagnose` (issue 31) against the slowest single analysis it runs, in one run.

Inputs: the 237-hour rotated sample logs, the nsys SQLite sample and the ncu sample (as the issue
names them), or --inputs. Each command is a child process, timed best of --repeat; printed: every
single analysis diagnose runs (the commands its findings name), the slowest of them, diagnose, and
the ratio (issue 31 asks at most 1.5x). `diagnose` reads each input once: the description that plans the analyses keeps the alloc/free events
it reads (sources.probe.Held, up to defaults.DIAGNOSE_HOLD_BYTES) and every analysis runs from them.

    python3 benchmarks/bench_diagnose.py [--repeat 3] [--inputs PATH ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ENV = dict(os.environ, PYTHONPATH=str(ROOT))
DEFAULT = ["sample_traces/alloc_logs/", "sample_traces/nsys/synthetic_memory.sqlite", "sample_traces/ncu/l2_details.csv"]


def timed(args: list[str], repeat: int) -> tuple[float, str]:
    best, out = float("inf"), ""
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "veotrace", *args], capture_output=True, text=True, env=ENV, cwd=ROOT)
        best = min(best, time.perf_counter() - t0)
        out = r.stdout
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--inputs", nargs="+", default=DEFAULT)
    a = ap.parse_args()
    whole, out = timed(["diagnose", *a.inputs, "-f", "json"], a.repeat)
    analyses = [x["command"] for x in json.loads(out)["analyses"]]
    singles = []
    for command in analyses:
        args = shlex.split(command)[1:]
        t, _ = timed([*args, "-f", "json", "-o", os.devnull], a.repeat)
        singles.append((t, command))
        print(f"  {t:6.2f} s  {command}")
    slowest = max(singles)
    print(f"slowest single analysis: {slowest[0]:.2f} s ({slowest[1]}); all {len(singles)} one after another: "
          f"{sum(t for t, _ in singles):.2f} s")
    print(f"diagnose: {whole:.2f} s = {whole / slowest[0]:.2f}x the slowest single analysis (issue 31 asks at most 1.5x)")


if __name__ == "__main__":
    main()
