"""Benchmark for `veotrace bursts` (issue 3): whole-process time and peak RSS, and the cost of exact merging.

Whole process, median of N runs: (a) veotrace bursts on the CSV, (b) on its Parquet, (c) pandas
read_csv + sort + diff + cumsum + groupby (the obvious one-shot script). In process, on the same
events held as 256k-row batches: (d) partials merged in file order, (e) batches in random order
with rows shuffled inside them (unsorted input), (f) one global numpy sort of all timestamps.
Checks that (a), (c), (d), (e) and (f) find the same bursts.

    python3 benchmarks/bench_bursts.py [--small] [--events N] [--runs R]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from bench_entropy import median_run, realistic_log

PANDAS = r"""
import sys, json, pandas as pd
df = pd.read_csv(sys.argv[1], usecols=["timestamp", "op_type", "size_bytes"])
a = df[df.op_type == "alloc"].sort_values("timestamp", kind="stable")
run = (a.timestamp.diff() >= 5_000_000).cumsum()
g = a.groupby(run.to_numpy()).agg(start=("timestamp", "min"), end=("timestamp", "max"),
                                  events=("timestamp", "size"), bytes=("size_bytes", "sum"))
g = g[g.events >= 2]
json.dump({"bursts": len(g), "events": int(g.events.sum()), "bytes": int(g.bytes.sum()),
           "first_start": int(g.start.iloc[0]), "last_end": int(g.end.iloc[-1])}, open(sys.argv[2], "w"))
"""


def _digest(bursts: list[dict]) -> dict:
    return {"bursts": len(bursts), "events": sum(b["events"] for b in bursts), "bytes": sum(b["bytes"] for b in bursts),
            "first_start": bursts[0]["start_ns"], "last_end": bursts[-1]["end_ns"]}


def in_process(pq_path: Path) -> dict:
    """Time the analysis alone on batches held in memory: in order, shuffled, and a global sort."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from veotrace.analysis.bursts.bursts import compute_bursts
    from veotrace.analysis.bursts.runs import BurstRuns

    table = pq.read_table(pq_path, columns=["ts_ns", "op", "size_bytes"])
    batches = table.to_batches(max_chunksize=1 << 18)
    rng = np.random.default_rng(0)
    shuffled = [b.take(pa.array(rng.permutation(b.num_rows))) for b in (batches[i] for i in rng.permutation(len(batches)))]
    out = {}
    for name, bs in (("d_partials_in_order", batches), ("e_partials_unsorted", shuffled)):
        t0 = time.perf_counter()
        res = compute_bursts(bs)
        out[name] = (time.perf_counter() - t0, _digest(res.bursts.to_pylist()))
    t0 = time.perf_counter()
    alloc = table.filter(pa.compute.equal(table.column("op").cast(pa.string()), "alloc"))
    runs = BurstRuns.from_events(alloc.column("ts_ns").to_numpy(), alloc.column("size_bytes").to_numpy(),
                                 gap_ns=5_000_000)
    keep = runs.count >= 2
    out["f_global_sort"] = (time.perf_counter() - t0, {
        "bursts": int(keep.sum()), "events": int(runs.count[keep].sum()), "bytes": int(runs.nbytes[keep].sum()),
        "first_start": int(runs.start[keep][0]), "last_end": int(runs.end[keep][-1])})
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--small", action="store_true", help="1M events, 1 run")
    args = ap.parse_args()
    if args.small:
        args.events, args.runs = 1_000_000, 1
    csv, pq_path = realistic_log(args.events)
    tmp = Path(tempfile.mkdtemp())
    # The burst table as CSV: the per-burst rows are what the three runs are compared on.
    vt = [sys.executable, "-m", "veotrace", "bursts", "--format", "csv", "--no-progress"]
    cases = {
        "a_veotrace_csv": vt + [str(csv), "-o", str(tmp / "a.csv")],
        "b_veotrace_parquet": vt + [str(pq_path), "-o", str(tmp / "b.csv")],
        "c_pandas": [sys.executable, "-c", PANDAS, str(csv), str(tmp / "c.json")],
    }
    res = {name: median_run(cmd, args.runs) for name, cmd in cases.items()}
    import pyarrow.csv as pacsv

    a = _digest(pacsv.read_csv(tmp / "a.csv").to_pylist())
    c = json.loads((tmp / "c.json").read_text())
    inner = in_process(pq_path)
    print(f"log: {args.events:,} events, {csv.stat().st_size / 2**20:.0f} MiB CSV; median of {args.runs} runs")
    for name, (wall, rss) in res.items():
        print(f"  {name:<22} {wall:7.2f} s   peak RSS {rss:7.0f} MiB")
    print(f"(a) vs (c) speed-up: {res['c_pandas'][0] / res['a_veotrace_csv'][0]:.1f}x; "
          f"(b) vs (c): {res['c_pandas'][0] / res['b_veotrace_parquet'][0]:.1f}x; "
          f"(a) RSS / (c) RSS: {res['a_veotrace_csv'][1] / res['c_pandas'][1]:.0%}")
    print("analysis only, events already in memory (256k-row batches):")
    for name, (wall, _) in inner.items():
        print(f"  {name:<22} {wall:7.3f} s")
    same = a == c == _digest(pacsv.read_csv(tmp / "b.csv").to_pylist()) and all(d == a for _, d in inner.values())
    print(f"bursts: {a['bursts']:,}, events in bursts: {a['events']:,}; identical across a, b, c, d, e, f: {same}")
    if not same:
        raise SystemExit(f"MISMATCH: a={a} c={c} inner={ {k: v[1] for k, v in inner.items()} }")


if __name__ == "__main__":
    main()
