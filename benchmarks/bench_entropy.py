"""Benchmark for `veotrace entropy` (issue 2): whole-process wall time and peak RSS, median of N runs.

(a) veotrace entropy on the CSV, (b) on its Parquet from `veotrace convert`, (c) pandas read_csv +
class column + groupby((timestamp - first) // 300 s) + scipy.stats.entropy, (d) polars counting the same
(window, class) pairs. Prints the ratios the issue asks for and checks (a) == (c) to 1e-9 bits.

    python benchmarks/bench_entropy.py --events 10000000 --runs 5
    python benchmarks/bench_entropy.py --cases a,d --growth 0 --runs 5    # the ratio to polars only
    python benchmarks/bench_entropy.py --profile                         # where the time of (a) goes
    python benchmarks/bench_entropy.py --profile --profile-code /tmp/old  # the same for another checkout

--profile times the stages of (a) one after another on one thread (CPU seconds, so that other
processes on the machine count less): start-up (a process importing what `veotrace entropy` imports),
file read (cutting the CSV into line-aligned chunks; a memory-mapped file is read by the scanner's
page faults instead), the C scanner, conform (ALLOC_EVENTS batches), the per-batch entropy work,
and the trend and tables at the end; then the wall time of the reader as it runs (threads).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"

PANDAS = r"""
import sys, json, numpy as np, pandas as pd
from scipy.stats import entropy
df = pd.read_csv(sys.argv[1])
a = df[df.op_type == "alloc"].copy()
a["cls"] = np.clip(np.ceil(np.log2(a.size_bytes / 1024)), 2, 12).astype(int)
a["win"] = (a.timestamp - df.timestamp.min()) // 300_000_000_000  # window 0 starts at the first event
h = a.groupby("win")["cls"].apply(lambda s: entropy(s.value_counts().to_numpy(), base=2))
json.dump({str(int(k)): float(v) for k, v in h.items()}, open(sys.argv[2], "w"))
"""

POLARS = r"""
import sys, json, polars as pl
q = (pl.scan_csv(sys.argv[1])
     .with_columns(((pl.col("timestamp") - pl.col("timestamp").min()) // 300_000_000_000).alias("win"))
     .filter(pl.col("op_type") == "alloc")
     .with_columns(((pl.col("size_bytes") / 1024).log(2).ceil().clip(2, 12)).cast(pl.Int64).alias("cls"))
     .group_by(["win", "cls"]).len())
df = q.collect()
json.dump({"pairs": df.height}, open(sys.argv[2], "w"))
"""


def run(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if status != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}: {proc.stderr.read().decode()[-2000:]}")
    return wall, usage.ru_maxrss / 1024


def median_run(cmd: list[str], runs: int) -> tuple[float, float]:
    results = [run(cmd) for _ in range(runs)]
    return statistics.median(r[0] for r in results), max(r[1] for r in results)


def realistic_log(events: int) -> tuple[Path, Path]:
    """The realistic log of ``events`` events under benchmarks/data and its Parquet, made once and reused."""
    from veotrace.synth.alloc import write_realistic_log

    return cached_log(f"alloc_{events}", write_realistic_log, events)


def cached_log(stem: str, write, events: int) -> tuple[Path, Path]:
    """benchmarks/data/``stem``.csv written by ``write(csv, events=events)`` and its Parquet, each made once."""
    DATA.mkdir(exist_ok=True)
    csv = DATA / f"{stem}.csv"
    if not csv.exists():
        write(csv, events=events)
    pq = csv.with_suffix(".parquet")
    if not pq.exists():
        run([sys.executable, "-m", "veotrace", "convert", str(csv), "-o", str(pq)])
    return csv, pq


PROFILE = r"""
import json, sys, time
from pathlib import Path
import pyarrow as pa
from veotrace.analysis.entropy.entropy import COLUMNS, entropy_partial, finish_entropy
from veotrace.sources import ReadOptions, ReadReport, iter_alloc_events
from veotrace.sources.logs import alloc_log as al
from veotrace.sources.base import open_decompressed
from veotrace.sources.logs.csvscan import scanner_for
from veotrace.schemas.events import alloc_events_schema

path, cpu = Path(sys.argv[1]), time.process_time
opts = ReadOptions()
out = {}
stream, raw = open_decompressed(path)
header, chunks = al._line_chunks(stream, raw, opts.block_bytes, path)
t = cpu(); chunks = list(chunks); out["file read"] = cpu() - t
names = al._split_header(header)
present = al._check_columns(path, names)
read_cols = al._wanted(COLUMNS, present)
scan = scanner_for(names, present, read_cols, "ns")
t = cpu(); raws = [scan(c) for c in chunks]; out["C scanner"] = cpu() - t
del chunks
schema = alloc_events_schema(COLUMNS)
kw = {"report": ReadReport()} if "report" in al.conform_log_batch.__code__.co_varnames else {}
t = cpu()
batches, seq = [], 0
for r in raws:
    batches.append(al.conform_log_batch(r, path=path, options=opts, seq_start=seq, schema=schema, **kw))
    seq += r.num_rows
out["conform"] = cpu() - t
del raws
t = cpu(); part = entropy_partial(iter(batches)); out["per-batch entropy"] = cpu() - t
t = cpu(); finish_entropy(part); out["trend and tables"] = cpu() - t
del batches
t = time.perf_counter()
for _ in iter_alloc_events([path], options=opts, columns=COLUMNS):
    pass
out["reader wall (threads)"] = time.perf_counter() - t
print(json.dumps(out))
"""


def profile(csv: Path, code: str | None) -> None:
    """Print the stages of (a) (see the module docstring), for the checkout at ``code`` if given."""
    env = dict(os.environ, **({"PYTHONPATH": code} if code else {}))
    cwd = tempfile.gettempdir()  # not this checkout: 'python -c' puts the working directory before PYTHONPATH
    imports = "import veotrace.cli, veotrace.cli.entropy, veotrace.analysis.entropy.entropy, veotrace.sources.logs.alloc_log"
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", imports], env=env, check=True, cwd=cwd)
    startup = time.perf_counter() - t0
    res = subprocess.run([sys.executable, "-c", PROFILE, str(csv)], env=env, check=True, capture_output=True, text=True,
                         cwd=cwd)
    stages = {"start-up (wall)": startup, **json.loads(res.stdout)}
    print(f"profile of (a) on {csv.name}{' with ' + code if code else ''}:")
    for name, sec in stages.items():
        print(f"  {name:<24} {sec:6.2f} s")


def fresh_bytecode() -> None:
    """Compile veotrace's modules whose .pyc is missing or stale, as pip does at install.

    Every other package measured here (numpy, pyarrow, polars) runs from its .pyc files. A source
    checkout edited since its last run, on a machine with PYTHONDONTWRITEBYTECODE set (this one),
    would otherwise recompile those modules in every timed run (~20 ms).
    """
    import compileall

    import veotrace

    compileall.compile_dir(Path(veotrace.__file__).parent, quiet=1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--growth", type=int, default=10,
                    help="also run (a) on a folder of this many rotated copies of the log (0 = skip)")
    ap.add_argument("--cases", default="a,b,c,d", help="which of a,b,c,d to run (a is always run)")
    ap.add_argument("--profile", action="store_true", help="print where the time of (a) goes, then stop")
    ap.add_argument("--profile-code", default=None, help="with --profile: a checkout to profile instead")
    args = ap.parse_args()
    fresh_bytecode()
    csv, pq = realistic_log(args.events)
    if args.profile:
        profile(csv, args.profile_code)
        return
    tmp = Path(tempfile.mkdtemp())
    vt = [sys.executable, "-m", "veotrace", "entropy", "--format", "json", "--no-progress"]
    cases = {
        "a_veotrace_csv": vt + [str(csv), "-o", str(tmp / "a.json")],
        "b_veotrace_parquet": vt + [str(pq), "-o", str(tmp / "b.json")],
        "c_pandas_scipy": [sys.executable, "-c", PANDAS, str(csv), str(tmp / "c.json")],
        "d_polars": [sys.executable, "-c", POLARS, str(csv), str(tmp / "d.json")],
    }
    wanted = set(args.cases.split(",")) | {"a"}
    cases = {k: v for k, v in cases.items() if k[0] in wanted}
    # Runs interleaved (a, b, c, d, a, b, ...): a change of machine load hits every case alike.
    runs: dict[str, list] = {name: [] for name in cases}
    for _ in range(args.runs):
        for name, cmd in cases.items():
            runs[name].append(run(cmd))
    res = {name: (statistics.median(r[0] for r in rs), max(r[1] for r in rs)) for name, rs in runs.items()}
    if args.growth:
        folder = DATA / f"rotated_{args.events}_x{args.growth}"
        folder.mkdir(exist_ok=True)
        for i in range(1, args.growth + 1):
            link = folder / f"alloc.log.{i}.csv"
            if not link.exists():
                link.symlink_to(csv.resolve())
        res["a_x_growth"] = run(vt + [str(folder), "-o", str(tmp / "g.json")])
    help_wall = statistics.median(run([sys.executable, "-m", "veotrace", "--help"])[0] for _ in range(5))
    mib = csv.stat().st_size / 2**20
    print(f"log: {args.events:,} events, {mib:.0f} MiB CSV; median of {args.runs} runs, whole process")
    for name, (wall, rss) in res.items():
        name = f"a_veotrace_{args.growth}x_log" if name == "a_x_growth" else name
        print(f"  {name:<20} {wall:7.2f} s   peak RSS {rss:7.0f} MiB")
    ta, tb, tc, td = (res[k][0] if k in res else None for k in
                      ("a_veotrace_csv", "b_veotrace_parquet", "c_pandas_scipy", "d_polars"))
    print(f"load while measuring (uptime): {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    if args.growth:
        print(f"(a) peak RSS on a {args.growth}x longer log (folder of rotated copies, one run): "
              f"{res['a_x_growth'][1]:.0f} MiB vs {res['a_veotrace_csv'][1]:.0f} MiB "
              f"({res['a_x_growth'][1] / res['a_veotrace_csv'][1]:.2f}x; target: not growing)")
    if tc is not None:
        print(f"(a) vs (c) speed-up: {tc / ta:.1f}x (target >= 5)")
    if td is not None:
        print(f"(a) vs (d) polars:   {td / ta:.2f}x (target >= 1.0, i.e. no slower)")
        print(f"(a) time / (d) time: {ta / td:.2f} (issue 51 target <= 0.5)")
    if tc is not None and tb is not None:
        print(f"(b) vs (c) speed-up: {tc / tb:.1f}x (target >= 8)")
    if tc is not None:
        print(f"(a) peak RSS / (c):  {res['a_veotrace_csv'][1] / res['c_pandas_scipy'][1]:.1%} (target < 25%)")
        a = {str(w["window"]): w["entropy_bits"] for w in json.loads((tmp / "a.json").read_text())["windows"]
             if w["entropy_bits"] is not None}
        c = json.loads((tmp / "c.json").read_text())
        diff = max(abs(a[k] - c[k]) for k in c) if set(a) == set(c) else float("inf")
        print(f"max |H(a) - H(c)|:   {diff:.2e} bits over {len(c)} windows (target <= 1e-9)")
    print(f"veotrace --help:     {help_wall:.3f} s (target < 0.5)")


if __name__ == "__main__":
    main()
