"""Benchmark: PyTorch snapshot pickles of any size, streamed in flat memory (issue 30).

Writes seeded snapshots in PyTorch's layout (``veotrace.synth.snapshot_file``: protocol 4, shared strings
and frame dicts, 60-frame stacks as ``_record_memory_history(stacks='all')`` records Python and C++
frames) under ``benchmarks/data/`` (kept for the next run; ``--clean`` deletes them), then in child
processes, one at a time, measuring wall seconds and the child's peak RSS:

1. on the reference file (default 400 MB, which ``pickle.load`` can hold): ``pickle.load`` (the
   unrestricted C unpickler: the fastest whole read there is, and the memory it takes) against the
   streaming read of the same file (both passes, every entry to an ``alloc_events`` batch); the
   throughput ratio must be at least 2;
2. on the big file (default 4 GB): ``entropy``, ``fragmentation`` and ``convert`` as the CLI runs them,
   each with a peak RSS of at most 1 GiB.

    python3 benchmarks/bench_snapshot.py                    # 4 GB and 400 MB (writing them takes ~4 min)
    python3 benchmarks/bench_snapshot.py --big-mb 1000 --ref-mb 200
    python3 benchmarks/bench_snapshot.py --clean            # delete the generated files afterwards
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "benchmarks" / "data"
RSS_BOUND_MIB = 1024
RATIO_BOUND = 2.0

PICKLE_LOAD = "import pickle, sys\nwith open(sys.argv[1], 'rb') as f:\n    obj = pickle.load(f)\nprint(len(obj['device_traces'][0]))"
STREAM_READ = ("import sys\nfrom pathlib import Path\nfrom veotrace.sources.snapshots import large\n"
               "n = sum(b.num_rows for b in large.alloc_events(Path(sys.argv[1]), skip_bad_rows=False, report=None, "
               "columns=None))\nprint(n)")


def child(argv: list[str]) -> tuple[float, float, int, str]:
    """(seconds, peak RSS in MiB, exit code, stdout's last line) of one child process."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=err, cwd=str(DATA))
        _, status, usage = os.wait4(proc.pid, 0)
        secs = time.perf_counter() - t0
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if code:
            sys.stderr.write(err.read().decode()[-2000:])
        lines = out.read().decode().strip().splitlines()
    return secs, usage.ru_maxrss / 1024, code, lines[-1] if lines else ""


def generated(mb: int, seed: int = 0) -> Path:
    """A snapshot of about ``mb`` MB (10**6 bytes) written once and kept under benchmarks/data/."""
    from veotrace.synth.snapshot_file import write_snapshot

    path = DATA / f"snapshot_{mb}MB_seed{seed}.pickle"
    truth_path = path.with_suffix(".truth.json")
    if not (path.exists() and truth_path.exists()):
        DATA.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        truth = write_snapshot(path, target_bytes=mb * 10**6, seed=seed, depth=60, stacks=2000)
        truth_path.write_text(json.dumps(truth.__dict__))
        print(f"wrote {path.name}: {truth.bytes / 1e6:,.0f} MB, {truth.entries:,} entries in "
              f"{time.perf_counter() - t0:.0f} s", flush=True)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--big-mb", type=int, default=4000)
    ap.add_argument("--ref-mb", type=int, default=400)
    ap.add_argument("--clean", action="store_true", help="delete the generated snapshots at the end")
    a = ap.parse_args()
    sys.path.insert(0, str(REPO))
    ref, big = generated(a.ref_mb), generated(a.big_mb)
    results: dict = {}
    size = ref.stat().st_size / 1e6
    print(f"\nreference {ref.name} ({size:,.0f} MB)")
    for label, code in (("pickle.load", PICKLE_LOAD), ("streaming read", STREAM_READ)):
        secs, rss, rc, line = child([sys.executable, "-c", code, str(ref)])
        results[label] = {"seconds": round(secs, 2), "peak_rss_mib": round(rss), "mb_per_s": round(size / secs, 1),
                          "exit": rc, "out": line}
        print(f"  {label:15} {secs:7.2f} s  {size / secs:7.1f} MB/s  peak RSS {rss:7.0f} MiB  exit {rc}  ({line})")
    ratio = results["pickle.load"]["seconds"] / results["streaming read"]["seconds"]
    results["throughput_ratio"] = round(ratio, 2)
    print(f"  streaming read / pickle.load throughput: {ratio:.2f}x (bound {RATIO_BOUND}x)")
    size = big.stat().st_size / 1e6
    print(f"\nbig {big.name} ({size:,.0f} MB)")
    out = DATA / "bench_snapshot_out.parquet"
    for label, args in (("entropy", ["entropy", str(big), "-f", "json", "--no-progress"]),
                        ("fragmentation", ["fragmentation", str(big), "-f", "json", "--no-progress"]),
                        ("convert", ["convert", str(big), "-o", str(out), "--no-progress"])):
        secs, rss, rc, line = child([sys.executable, "-m", "veotrace", *args])
        results[label] = {"seconds": round(secs, 2), "peak_rss_mib": round(rss), "mb_per_s": round(size / secs, 1),
                          "exit": rc}
        ok = "ok" if rss <= RSS_BOUND_MIB and rc == 0 else "OVER" if rc == 0 else "FAILED"
        print(f"  {label:15} {secs:7.2f} s  {size / secs:7.1f} MB/s  peak RSS {rss:7.0f} MiB  exit {rc}  {ok}")
    for p in DATA.glob("bench_snapshot_out*.parquet"):
        p.unlink()
    results_dir = REPO / "benchmarks" / "results"
    results_dir.mkdir(exist_ok=True)
    (results_dir / "bench_snapshot.json").write_text(json.dumps(results, indent=1))
    if a.clean:
        for p in (ref, big):
            p.unlink()
            p.with_suffix(".truth.json").unlink()


if __name__ == "__main__":
    main()
