"""Benchmark: cost that grows with devices or streams, not events (issue 25).

Each point is one command run in a child process (`python -m veotrace ...`) on a seeded trace from
`veotrace.synth.spread`; it prints wall seconds, the child's peak RSS and exit code, and for each sweep
the growth ratio time(next)/time(this) beside the ratio of the swept quantity, so linearity shows (a
ratio near the size ratio is linear, near its square quadratic; the interpreter's start-up, printed
first, keeps the ratios of small points near 1). Exit 1 past a bound is a measured point too.

Sweeps (events fixed, and events growing with the distinct count):
- devices: a log of 100,000 allocations over D devices round-robin (D up to MAX_DEVICES), and a log
  with a device per row (D rows; past MAX_DEVICES the replays refuse it, which is measured too);
- streams: alloc/free pairs, 200,000 rows over S streams, and S rows with a stream per row;
- the issue's three reproducers at full size: 100,000 rows each on its own device, a snapshot with
  5,000 devices, 200,000 rows each on its own stream.

    python3 benchmarks/bench_devices_streams.py                 # everything (about 10 min on 2 cores)
    python3 benchmarks/bench_devices_streams.py --quick         # smaller sweeps (about 2 min)
    python3 benchmarks/bench_devices_streams.py --sweep repro --pythonpath /path/to/other/tree --timeout 45
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # veotrace.defaults only (it imports nothing); the inputs are written by children

POLICIES = ("torch", "ideal", "tiered", "tiered-oracle", "reuse", "bestfit", "firstfit")


def commands(everything: bool) -> list[tuple[str, list[str]]]:
    """(label, arguments after the input path) of the commands measured (``everything``: each policy alone too)."""
    out = [("fragmentation", ["fragmentation", "-f", "json", "-o", "{out}.json"])]
    if everything:
        out += [(f"simulate -p {p}", ["simulate", "-p", p, "-f", "json", "-o", "{out}.json"]) for p in POLICIES]
        out += [("simulate -p torch (python core)", ["simulate", "-p", "torch", "--torch-core", "python", "-f", "json",
                                                     "-o", "{out}.json"])]
    out += [("simulate (all)", ["simulate", "-f", "json", "-o", "{out}.json"]),
            ("report", ["report", "-o", "{out}.html"]),
            ("entropy", ["entropy", "-f", "json", "-o", "{out}.json"]),
            ("bursts", ["bursts", "-f", "json", "-o", "{out}.json"]),
            ("info", ["info", "-f", "json"])]
    return out


def run(path: Path, args: list[str], *, pythonpath: str, timeout: float, out: Path) -> tuple[float, float, int]:
    """(seconds, peak RSS in MiB, exit code; 124 on timeout) of ``python -m veotrace PATH ARGS``."""
    argv = [sys.executable, "-m", "veotrace", args[0], str(path), *[a.format(out=out) for a in args[1:]]]
    if args[0] not in ("report", "info"):
        argv.append("--no-progress")
    env = dict(os.environ, PYTHONPATH=pythonpath)
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=str(out.parent))
    deadline = t0 + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            proc.kill()
            pid, status, usage = os.wait4(proc.pid, 0)
            return time.perf_counter() - t0, usage.ru_maxrss / 1024, 124
        time.sleep(0.02)
    secs = time.perf_counter() - t0
    proc.stderr.close()
    return secs, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


# Writes one input in a child process: this process stays small (no numpy, no pyarrow), because Linux
# reports a child's peak RSS as at least its parent's at the fork.
WRITE = """
import sys
from pathlib import Path
from veotrace.synth import spread
kind, n, extra, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
if kind == "snapshot":
    spread.write_snapshot(spread.device_snapshot(n)[0], path)
elif kind == "devices":
    spread.write_csv(spread.device_log(n, devices=extra or None), path)
else:
    spread.write_csv(spread.stream_log(n, streams=extra or None), path)
"""


def write(kind: str, n: int, extra: int, path: Path) -> Path:
    """The input ``kind`` (devices: ``n`` rows over ``extra`` devices; streams: ``n`` rows over ``extra``
    streams; 0: one per row; snapshot: ``n`` devices) at ``path``."""
    subprocess.run([sys.executable, "-c", WRITE, kind, str(n), str(extra), str(path)], check=True,
                   env=dict(os.environ, PYTHONPATH=str(REPO)))
    return path


def inputs(sweep: str, quick: bool, folder: Path) -> list[tuple[str, str, int, Path]]:
    """(sweep name, point label, swept quantity, file) of one sweep, written under ``folder``."""
    from veotrace.defaults import MAX_DEVICES  # imports nothing

    files = []
    if sweep == "devices":
        events = 20_000 if quick else 100_000
        for d in ((16, 128, 1024) if quick else (16, 128, MAX_DEVICES)):
            files.append((f"devices, {events:,} events fixed", f"D={d}", d,
                          write("devices", events, d, folder / f"dev_fixed_{d}.csv")))
        for d in ((100, 1000, 10_000) if quick else (100, 1000, 10_000, 100_000)):
            files.append(("devices, a device per row", f"D={d}", d, write("devices", d, 0, folder / f"dev_row_{d}.csv")))
    elif sweep == "streams":
        rows = 20_000 if quick else 200_000
        for s in (1000, 10_000) if quick else (1000, 10_000, 100_000):
            files.append((f"streams, {rows:,} rows fixed", f"S={s}", s,
                          write("streams", rows, s, folder / f"str_fixed_{s}.csv")))
        for s in (2000, 20_000) if quick else (2000, 20_000, 200_000):
            files.append(("streams, a stream per row", f"S={s}", s, write("streams", s, 0, folder / f"str_row_{s}.csv")))
    elif sweep == "snapshot":
        for d in (100, 1000) if quick else (100, 1000, 5000):
            files.append(("snapshot, devices", f"D={d}", d, write("snapshot", d, 0, folder / f"snap_{d}.pickle")))
    elif sweep == "repro":
        files.append(("issue 25 reproducers", "100k rows, a device each", 100_000,
                      write("devices", 100_000, 0, folder / "repro_devices.csv")))
        files.append(("issue 25 reproducers", "snapshot of 5,000 devices", 5000,
                      write("snapshot", 5000, 0, folder / "repro_snapshot.pickle")))
        files.append(("issue 25 reproducers", "200k rows, a stream each", 200_000,
                      write("streams", 200_000, 0, folder / "repro_streams.csv")))
    return files


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", action="append", choices=("devices", "streams", "snapshot", "repro"),
                    help="sweeps to run (repeatable; default: all)")
    ap.add_argument("--quick", action="store_true", help="smaller sweeps and fewer commands")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds before a run is stopped (exit 124)")
    ap.add_argument("--pythonpath", default=str(REPO), help="the veotrace tree to measure (default: this one)")
    ap.add_argument("--command", action="append", help="only commands whose label starts with this (repeatable)")
    args = ap.parse_args()
    sweeps = args.sweep or ["devices", "streams", "snapshot", "repro"]
    with tempfile.TemporaryDirectory(prefix="bench_devices_streams_") as tmp:
        folder = Path(tmp)
        tiny = folder / "tiny.csv"
        tiny.write_text("timestamp,op_type,size_bytes,address,stream,device\n0,alloc,512,4096,0,0\n")
        t_start, _, _ = run(tiny, ["info", "-f", "json"], pythonpath=args.pythonpath, timeout=args.timeout,
                            out=folder / "o")
        print(f"# tree {args.pythonpath}; start-up (info on a one-row file) {t_start:.2f} s; timeout {args.timeout:g} s")
        print(f"{'sweep':34} {'point':26} {'command':32} {'seconds':>8} {'MiB':>6} {'exit':>4} {'x size':>7} {'x time':>7}")
        for sweep in sweeps:
            points = inputs(sweep, args.quick, folder)
            by_cmd: dict[tuple[str, str], tuple[int, float]] = {}
            for name, label, n, path in points:
                for cmd, cargs in commands(not args.quick):
                    if args.command and not any(cmd.startswith(c) for c in args.command):
                        continue
                    secs, mib, code = run(path, cargs, pythonpath=args.pythonpath, timeout=args.timeout,
                                          out=folder / "o")
                    prev = by_cmd.get((name, cmd))
                    ratio = f"{n / prev[0]:7.1f} {secs / prev[1]:7.2f}" if prev and sweep != "repro" else ""
                    by_cmd[(name, cmd)] = (n, secs)
                    print(f"{name:34} {label:26} {cmd:32} {secs:8.2f} {mib:6.0f} {code:4d} {ratio}", flush=True)


if __name__ == "__main__":
    main()
