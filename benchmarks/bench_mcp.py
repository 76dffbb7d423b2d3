"""A second `diagnose` call through `veotrace mcp` against the command line, on the sample snapshot, in one run.

Issue 50 asks: the server keeps its imports warm, so a second `diagnose` call on the sample snapshot
(sample_traces/snapshots/memory_snapshot.pickle) takes at most half of `veotrace diagnose` run as a command
(a fresh process: start-up, imports, the run). Both are measured here, in turns, on the same machine:

- cli: `python -m veotrace diagnose SNAPSHOT -f json -o FILE`, a new process each time (wall seconds);
- mcp: the SDK's own client talking to `veotrace mcp --no-cache` over stdio (as an assistant launches it):
  the first diagnose call, then each later one (the command runs again each time: --no-cache);
- cached: the same server without --no-cache, a later call for another page of the same result
  (row_offset: the result is reused, the command does not run);
- --parallel: the server letting diagnose fork a process per core for its analyses, as the command line does
  (the server's default runs them in turn: forking the warm worker costs more than it saves on small inputs).

    python3 benchmarks/bench_mcp.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SNAPSHOT = REPO / "sample_traces" / "snapshots" / "memory_snapshot.pickle"


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def cli_once(out: Path) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "veotrace", "diagnose", str(SNAPSHOT), "-f", "json", "-o", str(out)],
                   check=True, env=_env(), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def mcp_calls(runs: int, *extra: str, page: bool = False) -> tuple[float, list[float]]:
    """(first diagnose call's seconds, each later call's seconds) over stdio."""
    import anyio
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "veotrace", "mcp", "--root", str(REPO), *extra],
                                   env=_env(), cwd=str(REPO))
    times: list[float] = []

    async def main() -> None:
        with open(os.devnull, "w") as quiet:  # the server's start-up line
            async with Client(stdio_client(params, errlog=quiet), read_timeout_seconds=300) as client:
                await _calls(client)

    async def _calls(client) -> None:
        await client.list_tools()
        for k in range(runs + 1):
            arguments = {"paths": [str(SNAPSHOT)]}
            if page and k:
                arguments["row_offset"] = k
            start = time.perf_counter()
            result = await client.call_tool("diagnose", arguments)
            times.append(time.perf_counter() - start)
            if result.is_error:
                raise SystemExit(result.content[0].text)

    anyio.run(main)
    return times[0], times[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "d.json"
        cli_once(out)  # the file system's caches, as the server's first call has them
        cli = []
        warm = []
        first = []
        for _ in range(2):  # in turns, so a busy moment weighs on both
            cli += [cli_once(out) for _ in range(args.runs)]
            f, later = mcp_calls(args.runs, "--no-cache")
            first.append(f)
            warm += later
        _, cached = mcp_calls(args.runs, page=True)
        _, forked = mcp_calls(args.runs, "--no-cache", "--parallel")
    cli_s, warm_s = statistics.median(cli), statistics.median(warm)
    print(f"snapshot: {SNAPSHOT.relative_to(REPO)} ({SNAPSHOT.stat().st_size:,} bytes), {args.runs} runs x 2 turns; "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    print(f"cli diagnose (new process each):       median {cli_s:.3f} s  (min {min(cli):.3f}, max {max(cli):.3f})")
    print(f"mcp diagnose, first call:              {', '.join(f'{t:.3f}' for t in first)} s")
    print(f"mcp diagnose, later calls (no cache):  median {warm_s:.3f} s  (min {min(warm):.3f}, max {max(warm):.3f})")
    print(f"mcp diagnose, another page (cached):   median {statistics.median(cached):.3f} s")
    print(f"mcp --parallel, later calls (no cache): median {statistics.median(forked):.3f} s  (diagnose forks a process per core)")
    ratio = warm_s / cli_s
    print(f"second call / cli: {ratio:.2f} (issue 50 asks <= 0.50): {'PASS' if ratio <= 0.5 else 'FAIL'}")


if __name__ == "__main__":
    main()
