"""Benchmark for the real-source readers (issue 3).

(i) A synthetic nsys SQLite export with N (default 1,000,000) memory events, stored out of time
order: veotrace's alloc-event read (ADBC SQLite -> Arrow -> pyarrow.compute mapping to ALLOC_EVENTS)
against pandas ``read_sql`` of the same table followed by the same mapping in pandas (stable sort by
start, op and memKind decoded, address as uint64, seq, categorical strings). Target: >= 3x.
Both results are checked to hold the same values.
(ii) Reading the largest real PyTorch snapshot in ../shared/real_traces into ALLOC_EVENTS (and
segments and blocks), cold (the snapshot cache is cleared before each run).

Times are medians of R in-process repeats (default 5), measured in one run.

    python3 benchmarks/bench_readers.py [--events N] [--runs R]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

REAL_TRACES = HERE.parent.parent / "shared" / "real_traces"


def median_time(fn, runs: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def veotrace_read(path: Path):
    import pyarrow as pa

    from veotrace.schemas import ALLOC_EVENTS
    from veotrace.sources import iter_alloc_events

    return pa.Table.from_batches(list(iter_alloc_events([path])), schema=ALLOC_EVENTS)


def pandas_read(path: Path):
    """pandas read_sql of CUDA_GPU_MEMORY_USAGE_EVENTS, then the mapping veotrace does, in pandas."""
    import sqlite3

    import numpy as np
    import pandas as pd

    from veotrace.sources.nsight.nsys_sqlite import MEM_KINDS, MEMORY_OPS
    from veotrace.sources.nsight.sqlite_ro import ro_uri

    con = sqlite3.connect(ro_uri(path), uri=True)
    try:
        df = pd.read_sql("SELECT start, memoryOperationType, bytes, address, streamId, deviceId, memKind "
                         "FROM CUDA_GPU_MEMORY_USAGE_EVENTS", con)
    finally:
        con.close()
    if not df["start"].is_monotonic_increasing:
        df = df.sort_values("start", kind="stable", ignore_index=True)
    return pd.DataFrame({
        "ts_ns": df["start"].astype("int64"),
        "seq": np.arange(len(df), dtype=np.int64),
        "op": df["memoryOperationType"].map(MEMORY_OPS).astype("category"),
        "size_bytes": df["bytes"].astype("int64"),
        "address": df["address"].astype("int64").to_numpy().view(np.uint64),
        "stream": df["streamId"].astype("Int64"),
        "device": df["deviceId"].astype("int32"),
        "mem_kind": df["memKind"].map(MEM_KINDS).astype("category"),
        "source_file": pd.Categorical([str(path)] * len(df)),
    })


def bench_nsys(events: int, runs: int) -> None:
    from veotrace.synth.nsys import write_export

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "memory_1m.sqlite"
        t0 = time.perf_counter()
        write_export(path, seed=0, generation="2024.6", kernels=1_000, memory=events)
        print(f"(i) synthetic nsys export: {events:,} memory events, {path.stat().st_size / 2**20:.1f} MiB "
              f"(written in {time.perf_counter() - t0:.1f} s)")
        veotrace_read(path), pandas_read(path)  # warm the page cache and imports for both
        t_vt, table = median_time(lambda: veotrace_read(path), runs)
        t_pd, frame = median_time(lambda: pandas_read(path), runs)
        same = (table.num_rows == len(frame)
                and table.column("ts_ns").to_numpy().tolist() == frame["ts_ns"].tolist()
                and table.column("address").to_numpy().tolist() == frame["address"].tolist()
                and table.column("mem_kind").cast("string").to_pylist() == frame["mem_kind"].astype(str).tolist())
        print(f"    veotrace (ADBC + pyarrow.compute):   {t_vt:.3f} s  ({events / t_vt / 1e6:.1f} M events/s)")
        print(f"    pandas read_sql + pandas mapping:    {t_pd:.3f} s  ({events / t_pd / 1e6:.1f} M events/s)")
        print(f"    ratio (pandas / veotrace): {t_pd / t_vt:.2f}x  (target >= 3x)  same values: {same}")


def bench_snapshot(runs: int) -> None:
    from veotrace.sources import read_table
    from veotrace.sources.snapshots import torch_snapshot

    snaps = sorted((p for p in REAL_TRACES.glob("*.p*kl*") if p.suffix in (".pickle", ".pkl")),
                   key=lambda p: p.stat().st_size)
    if not snaps:
        print(f"(ii) no real snapshots in {REAL_TRACES}: skipped")
        return
    path = snaps[-1]

    def read():
        torch_snapshot._load_cached.cache_clear()
        return (read_table([path], "alloc_events"), read_table([path], "segments"), read_table([path], "blocks"))

    t, (events, segments, blocks) = median_time(read, runs)

    def events_only():
        torch_snapshot._load_cached.cache_clear()
        return read_table([path], "alloc_events")

    t_ev, _ = median_time(events_only, runs)
    print(f"(ii) largest real snapshot: {path.name} ({path.stat().st_size / 2**20:.2f} MiB): "
          f"{events.num_rows:,} events, {segments.num_rows:,} segments, {blocks.num_rows:,} blocks")
    print(f"    alloc events alone (cold): {t_ev:.3f} s; events + segments + blocks: {t:.3f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    bench_nsys(args.events, args.runs)
    bench_snapshot(args.runs)


if __name__ == "__main__":
    main()
