"""Cost of sites against `veotrace fragmentation` on the same snapshot, in one run.

Issue 26 asks that attributing sites cost at most 1.5x the same command without it, and memory that
grows with distinct stacks, not events. This measures `fragmentation --by site` (the replay, plus the
stranded bytes by site at every window's end) and the `sites` command against `fragmentation`, and
`simulate --by site` (each policy's states by site) against `simulate`, on the
largest real snapshot in ../shared/real_traces and on synthetic snapshots of --events entries with
--depth-frame stacks of 200 and 2,000 distinct ones (synth.torch.stacked_snapshot).

    python3 benchmarks/bench_sites.py [--events 300000] [--depth 20]
"""

from __future__ import annotations

import argparse
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REAL = HERE.parent.parent / "shared" / "real_traces"
sys.path.insert(0, str(HERE.parent))  # this checkout's veotrace, for the generator and the runs below
ENV = dict(os.environ, PYTHONPATH=str(HERE.parent))


def run(args: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one veotrace process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "veotrace", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=ENV)
    _, status, usage = os.wait4(proc.pid, 0)
    if status:
        raise SystemExit(f"veotrace {' '.join(args)} failed: {proc.stderr.read().decode()[-500:]}")
    return time.perf_counter() - t0, usage.ru_maxrss / 1024


def compare(path: Path, label: str, policies: list[str]) -> None:
    def best(args):
        return min((run([*args, str(path), "-f", "json", "-o", os.devnull]) for _ in range(2)), key=lambda r: r[0])

    base, by_site, sites = best(["fragmentation"]), best(["fragmentation", "--by", "site"]), best(["sites"])
    print(f"{label}: fragmentation {base[0]:.2f} s / {base[1]:.0f} MiB; fragmentation --by site "
          f"{by_site[0]:.2f} s / {by_site[1]:.0f} MiB, ratio {by_site[0] / base[0]:.2f}x time, "
          f"{by_site[1] / base[1]:.2f}x memory; sites {sites[0]:.2f} s / {sites[1]:.0f} MiB, ratio {sites[0] / base[0]:.2f}x")
    sim = ["simulate", *(x for p in policies for x in ("-p", p))]
    base, by_site = best(sim), best([*sim, "--by", "site"])
    print(f"{label}: {' '.join(sim) if policies else 'simulate (every policy)'} {base[0]:.2f} s / {base[1]:.0f} MiB; "
          f"--by site {by_site[0]:.2f} s / {by_site[1]:.0f} MiB, ratio {by_site[0] / base[0]:.2f}x time, "
          f"{by_site[1] / base[1]:.2f}x memory")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=300_000)
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--stacks", type=int, default=200)
    ap.add_argument("--policy", action="append", help="simulate's policies on the synthetic snapshots [default: torch; "
                                                       "the real snapshot replays every policy]")
    a = ap.parse_args()
    sizes = sorted(REAL.glob("*.pickle"), key=lambda p: p.stat().st_size) if REAL.is_dir() else []
    if sizes:
        compare(sizes[-1], f"largest real snapshot ({sizes[-1].name}, {sizes[-1].stat().st_size / 2**20:.1f} MiB)", [])
    from veotrace.synth.torch import stacked_snapshot

    data = HERE / "data"
    data.mkdir(exist_ok=True)
    for stacks in (a.stacks, a.stacks * 10):
        path = data / f"stacked_{a.events}_{a.depth}_{stacks}.pickle"
        if not path.exists():
            path.write_bytes(pickle.dumps(stacked_snapshot(events=a.events, depth=a.depth, stacks=stacks)))
        compare(path, f"synthetic {a.events:,} entries, {a.depth}-frame stacks, {stacks} distinct "
                      f"({path.stat().st_size / 2**20:.0f} MiB)", a.policy or ["torch"])


if __name__ == "__main__":
    main()
