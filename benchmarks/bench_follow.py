"""Benchmark for `veotrace entropy --follow` (issue 29): latency, CPU at 200 events/s, memory over 10M events.

The follower is the real command (``python -m veotrace entropy DIR --follow -f jsonl``) in its own
process; this script is the writer.

1. Real time: a writer appends 200 events/s with bursts (timestamps = the wall clock when written) to a
   folder that rotates by size, rename and copytruncate, for ``--seconds``. Latency = when a window's
   line reaches us minus when the last event of that window was written (median, p95, max); CPU = the
   follower's user+system time over the run / wall time (% of one core).
2. Fast feed: ``--events`` events (default 10M) written as fast as the follower takes them, trace time
   5 ms apart (200 events/s of trace time), 60 s windows; the follower's RSS sampled as its windows come,
   printed at every 10% of the events.

    python3 benchmarks/bench_follow.py [--seconds 30] [--events 10000000] [--poll 0.25]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from veotrace.analysis.entropy.entropy_series import ORIGIN_ROWS  # noqa: E402
from veotrace.synth.live import RotatingWriter, lines  # noqa: E402

CLK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _follower(folder: Path, window: str, poll: float, idle: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    return subprocess.Popen([sys.executable, "-m", "veotrace", "entropy", str(folder), "--follow", "-f", "jsonl",
                             "--window", window, "--poll", f"{poll}s", "--idle-timeout", idle],
                            stdout=subprocess.PIPE, text=True, env=env)


def real_time(seconds: float, poll: float, rate: float = 200.0, seed: int = 0) -> dict:
    """Phase 1: latency and CPU at ``rate`` events/s written in real time."""
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as tmp:
        writer = RotatingWriter(Path(tmp) / "logs", rotate_bytes=64_000, kinds=("size", "rename", "copytruncate"))
        proc = _follower(writer.folder, "1s", poll, "3s")
        arrivals: list[tuple[float, dict]] = []

        def read() -> None:
            for line in proc.stdout:
                arrivals.append((time.time(), json.loads(line)))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        written: list[int] = []  # timestamps (= wall clock ns when written)
        t_end = time.time() + seconds
        cpu0, wall0 = None, None
        while time.time() < t_end:
            n = 1 + int(rng.poisson(rate * 0.01 * 3)) if rng.uniform() < 0.02 else int(rng.poisson(rate * 0.01))
            now = time.time_ns()
            ts = np.full(n, now, np.int64) + np.arange(n)
            rows = np.stack([ts, (rng.uniform(size=n) < 0.45).astype(np.int64),
                             4096 << rng.integers(0, 11, n)], axis=1)
            writer.write(lines(rows))
            written.extend(ts.tolist())
            if cpu0 is None and time.time() > t_end - seconds + 3:  # after the start-up (imports)
                cpu0, wall0 = _cpu_s(proc.pid), time.time()
            time.sleep(0.01)
        cpu1, wall1 = _cpu_s(proc.pid), time.time()
        proc.wait(timeout=60)
        reader.join(timeout=10)
    w = np.asarray(written, np.int64)
    settled = w[min(ORIGIN_ROWS, w.size) - 1]  # no window is printed before the origin's 1,024 rows are read
    lat, first = [], []
    for at, rec in arrivals:
        if rec.get("record") == "window" and rec["complete"]:
            i = np.searchsorted(w, rec["end_ns"]) - 1
            if i >= 0 and w[i] >= rec["start_ns"]:
                (lat if w[i] > settled else first).append(at - w[i] / 1e9)
    lat = np.asarray(lat)
    events_per_s = len(written) / seconds
    return {"events": len(written), "events_per_s": round(events_per_s, 1), "windows": int(lat.size),
            "latency_s": {"median": round(float(np.median(lat)), 3), "p95": round(float(np.percentile(lat, 95)), 3),
                          "max": round(float(lat.max()), 3)},
            "windows_before_origin_rows": len(first),
            "latency_before_origin_rows_max_s": round(max(first), 3) if first else None,
            "poll_s": poll, "cpu_pct_of_one_core": round(100 * (cpu1 - cpu0) / (wall1 - wall0), 2)}


def fast_feed(events: int, poll: float, chunk: int = 200_000, seed: int = 1) -> dict:
    """Phase 2: RSS of the follower over ``events`` events written as fast as it takes them."""
    rng = np.random.default_rng(seed)
    t0, step_ns = 1_700_000_000_000_000_000, 5_000_000
    samples: list[tuple[int, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        writer = RotatingWriter(Path(tmp) / "logs", rotate_bytes=32 << 20, kinds=("size", "rename", "copytruncate"))
        proc = _follower(writer.folder, "60s", poll, "5s")
        seen = {"events": 0, "lines": 0}

        def read() -> None:
            for line in proc.stdout:
                rec = json.loads(line)
                seen["lines"] += 1
                if rec.get("record") == "window":
                    seen["events"] = (rec["end_ns"] - t0) // step_ns
                    try:
                        samples.append((seen["events"], _rss_mib(proc.pid)))
                    except FileNotFoundError:
                        pass
                else:
                    seen["end"] = rec

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        t_start = time.time()
        for lo in range(0, events, chunk):
            n = min(chunk, events - lo)
            ts = t0 + (lo + np.arange(n, dtype=np.int64)) * step_ns
            rows = np.stack([ts, (rng.uniform(size=n) < 0.45).astype(np.int64), 4096 << rng.integers(0, 11, n)], axis=1)
            writer.write(lines(rows))
            while seen["events"] < lo - 4 * chunk and proc.poll() is None:  # keep the backlog a few chunks
                time.sleep(0.05)
        proc.wait(timeout=600)
        reader.join(timeout=10)
        took = time.time() - t_start
    marks = []
    for k in range(1, 11):
        target = events * k // 10
        near = [s for s in samples if s[0] <= target]
        if near:
            marks.append({"events": int(near[-1][0]), "rss_mib": round(near[-1][1], 1)})
    return {"events": events, "seconds": round(took, 1), "rss_mib_at": marks, "end": seen.get("end")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--poll", type=float, default=0.25)
    ap.add_argument("--skip-real-time", action="store_true")
    args = ap.parse_args()
    if not args.skip_real_time:
        print(json.dumps({"real_time": real_time(args.seconds, args.poll)}), flush=True)
    print(json.dumps({"fast_feed": fast_feed(args.events, args.poll)}), flush=True)


if __name__ == "__main__":
    main()
