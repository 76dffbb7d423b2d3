"""Entropy of one alloc/free CSV read as a local path, as a file:// URL and as an http:// URL on loopback.

The same file three ways, alternating, best of ``--repeat`` per way (so that contention on a shared
machine hits every way alike): the ratio URL/local is the cost of reading through fsspec (a Python
file object instead of a memory map; HTTP range requests) with the same C scanner behind it.

    python3 benchmarks/bench_remote.py --events 2000000
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial
from http.server import ThreadingHTTPServer
from pathlib import Path


def _run(target: str) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "veotrace", "entropy", target, "--no-progress", "--format", "json",
                    "-o", "/dev/null"], check=True, capture_output=True)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.test_remote_inputs import _Ranges  # http.server with byte ranges
    from veotrace.synth.alloc import write_realistic_log

    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "alloc.csv"
        write_realistic_log(log, events=args.events, hours=24.0)
        server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Ranges, directory=d))
        server.handle_error = lambda *a: None  # a client closing a kept-alive connection is no news
        threading.Thread(target=server.serve_forever, daemon=True).start()
        ways = {"local path": str(log), "file:// URL": log.as_uri(),
                "http:// URL (loopback)": f"http://127.0.0.1:{server.server_address[1]}/alloc.csv"}
        best = {k: float("inf") for k in ways}
        for _ in range(args.repeat):
            for name, target in ways.items():
                best[name] = min(best[name], _run(target))
        server.shutdown()
        size = log.stat().st_size
    base = best["local path"]
    print(f"{args.events:,} events, {size / 1e6:.0f} MB CSV; veotrace entropy, best of {args.repeat}:")
    for name, t in best.items():
        print(f"  {name:24s} {t:6.2f} s  {args.events / t / 1e6:5.2f} M events/s  {t / base:4.2f}x local")


if __name__ == "__main__":
    main()
