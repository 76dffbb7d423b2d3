"""Benchmark for `veotrace fragmentation` (issue 15): events/s, its ratio to `entropy` on the same file,
and peak RSS on a log 10x longer (memory follows the live set and the windows, not the log length).

The log is ``veotrace.synth.heap.slot_log``: 4096 address slots whose allocs and frees pair up, so
the live set stays about 2,000 blocks however long the log is. (The entropy benchmark's log has
addresses too, but its frees are at random addresses: nothing is ever freed, and a replay of it
measures a live set growing to 5 million blocks, not a real trace.) Each command is a whole
process, median of --runs; entropy and fragmentation alternate so that machine load hits both.

    python benchmarks/bench_fragmentation.py --events 10000000 --runs 3
    python benchmarks/bench_fragmentation.py --events 1000000 --growth 10    # 1M vs 10M peak RSS
    python benchmarks/bench_fragmentation.py --events 10000000 --runs 3 --csv --jobs 1,4   # speed-up on the engine

With ``--jobs 1,4`` it times ``fragmentation --jobs J`` for each J on the same files, runs interleaved,
and prints each J's speed-up over the first (``--jobs 1`` is the single-process path, and so are
``--jobs 2`` and ``3``; J >= 4 replays in two parallel passes, see veotrace/frag/parallel.py). ``--only-jobs`` skips the entropy ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_entropy import cached_log, run  # noqa: E402


def slot_log_files(events: int) -> tuple[Path, Path]:
    """The slot log of ``events`` events under benchmarks/data (CSV) and its Parquet, made once."""
    from veotrace.synth.heap import write_slot_log

    return cached_log(f"alloc_addr_{events}", write_slot_log, events)


def timed(path: Path, runs: int) -> dict:
    """Median wall time and max peak RSS of fragmentation and entropy on ``path``, runs interleaved."""
    frag = [sys.executable, "-m", "veotrace", "fragmentation", str(path), "-f", "json"]
    ent = [sys.executable, "-m", "veotrace", "entropy", str(path), "-f", "json"]
    f_runs, e_runs = [], []
    for _ in range(runs):
        f_runs.append(run(frag))
        e_runs.append(run(ent))
    return {"frag_s": statistics.median(r[0] for r in f_runs), "frag_rss": max(r[1] for r in f_runs),
            "entropy_s": statistics.median(r[0] for r in e_runs), "entropy_rss": max(r[1] for r in e_runs)}


def jobs_speedup(kind: str, path: Path, jobs: list[int], runs: int, events: int, dask: bool = False) -> None:
    """Median wall time of fragmentation --jobs J for each J (runs interleaved), and the speed-up over jobs[0]
    (``dask``: --engine dask --workers J instead, a local cluster of J worker processes)."""
    times: dict[int, list[float]] = {j: [] for j in jobs}
    rss: dict[int, float] = {j: 0.0 for j in jobs}
    opt = ["--engine", "dask", "--workers"] if dask else ["--jobs"]
    for _ in range(runs):
        for j in jobs:
            wall, peak = run([sys.executable, "-m", "veotrace", "fragmentation", str(path), "-f", "json",
                              "--no-progress", *opt, str(j)])
            times[j].append(wall)
            rss[j] = max(rss[j], peak)
    base = statistics.median(times[jobs[0]])
    for j in jobs:
        med = statistics.median(times[j])
        print(f"{kind} {events:,} events, fragmentation {' '.join(opt)} {j}: {med:.2f} s = {events / med / 1e6:.2f} M events/s "
              f"(runs {', '.join(f'{t:.2f}' for t in times[j])}), speed-up over {jobs[0]} x{base / med:.2f}, "
              f"peak RSS of the main process {rss[j]:.0f} MiB")


def pass_costs(path: Path) -> dict:
    """CPU seconds (all threads) of the one-process replay and of the engine's two passes run one piece
    after the other in this process: what N workers divide between them (plus their start-up)."""
    import time

    from veotrace.engine import plan
    from veotrace.engine.tasks import Job, merge_tree, run_piece
    from veotrace.frag import parallel
    from veotrace.runs.fragmentation import read_and_replay
    from veotrace.sources import ReadOptions, ReadReport

    opts = ReadOptions()
    t = time.process_time()
    read_and_replay([path], options=opts, report=ReadReport())
    local = time.process_time() - t
    pieces, _ = plan([path], opts, parallel.COLUMNS)
    setup = parallel.ParallelSetup()
    first = Job("fragmentation_boundary", setup.boundary_params(), opts, parallel.COLUMNS)
    t = time.process_time()
    bounds = [run_piece(p, first, i).value[0] for i, p in enumerate(pieces)]
    p1 = time.process_time() - t
    t = time.process_time()
    jobs = setup.replay_params(bounds)
    chain = time.process_time() - t
    if isinstance(jobs, str):  # e.g. one piece: nothing to split
        return {"pieces": len(pieces), "local": local, "note": jobs}
    jobs = [Job("fragmentation", j, opts, parallel.COLUMNS) for j in jobs]
    t = time.process_time()
    parts = [run_piece(p, jobs[i], i) for i, p in enumerate(pieces)]
    p2 = time.process_time() - t
    t = time.process_time()
    setup.result(merge_tree(parts).value)
    return {"pieces": len(pieces), "local": local, "pass1": p1, "chain": chain, "pass2": p2,
            "merge": time.process_time() - t}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--growth", type=int, default=0, help="also run on a log this many times longer (peak RSS)")
    ap.add_argument("--csv", action="store_true", help="also time the CSV (its hex address column is parsed per row)")
    ap.add_argument("--jobs", default="", help="comma-separated --jobs values to time against each other, e.g. 1,2")
    ap.add_argument("--only-jobs", action="store_true", help="with --jobs: only the speed-up, not the entropy ratio")
    ap.add_argument("--dask", action="store_true", help="with --jobs: also time --engine dask --workers J (1 -> 2 workers "
                                                         "of the same engine)")
    args = ap.parse_args()
    csv, pq = slot_log_files(args.events)
    inputs = [("parquet", pq)] + ([("csv", csv)] if args.csv else [])
    if args.jobs:
        for kind, path in inputs:
            jobs_speedup(kind, path, [int(j) for j in args.jobs.split(",")], args.runs, args.events)
            if args.dask:
                jobs_speedup(kind, path, [int(j) for j in args.jobs.split(",")], args.runs, args.events, dask=True)
            c = pass_costs(path)
            if "note" in c:
                print(f"{kind}: {c['note']}")
                continue
            print(f"{kind} CPU seconds: one process {c['local']:.2f}; engine in {c['pieces']} pieces: pass 1 "
                  f"{c['pass1']:.2f} + start states {c['chain']:.2f} + pass 2 {c['pass2']:.2f} + merge {c['merge']:.2f} "
                  f"(the passes' work is {(c['pass1'] + c['pass2']) / c['local']:.2f}x the one-process run's)")
        if args.only_jobs:
            return
    for kind, path in inputs:
        r = timed(path, args.runs)
        print(f"{kind} {args.events:,} events: fragmentation {r['frag_s']:.2f} s = "
              f"{args.events / r['frag_s'] / 1e6:.2f} M events/s, peak RSS {r['frag_rss']:.0f} MiB; "
              f"entropy {r['entropy_s']:.2f} s = {args.events / r['entropy_s'] / 1e6:.2f} M events/s; "
              f"fragmentation / entropy time = {r['frag_s'] / r['entropy_s']:.2f}")
    if args.growth:
        big = args.events * args.growth
        _, pq_big = slot_log_files(big)
        small = run([sys.executable, "-m", "veotrace", "fragmentation", str(pq), "-f", "json"])
        large = run([sys.executable, "-m", "veotrace", "fragmentation", str(pq_big), "-f", "json"])
        print(f"peak RSS: {args.events:,} events {small[1]:.0f} MiB, {big:,} events {large[1]:.0f} MiB "
              f"(x{large[1] / small[1]:.2f} for a {args.growth}x longer log)")


if __name__ == "__main__":
    main()
