"""Cost of `veotrace view` against `veotrace sites` on the same snapshot, in one run, and the page in a browser.

Issue 41 asks, on the generated 1M-entry stacked snapshot (synth.torch.stacked_snapshot, 20-frame stacks
of 200 distinct ones, as benchmarks/bench_sites.py makes it): `view` within 1.5x of `sites`' time and
peak memory, the HTML at most 8 MiB, and in headless Chromium the first draw under 2 s and a zoom redraw
under 100 ms (performance.now() in the page: the first draw from navigation start; a zoom from setting
the x range to the next painted frame). Issue 48 adds, in the same run and against the same bounds, the
generated 1 GiB snapshot of many segments (synth.segmented.write_segmented: segments grow in number with
the trace, 20-frame stacks of 200 distinct ones) and a snapshot of 200,000 distinct sites (each
allocation a new one first). Issue 45 adds a PyTorch profiler trace: benchmarks/bench_kineto.py's generated
one (2M [memory] events among 6M ops, kernels, Python frames and flows, about 1 GiB plain; its generator, its
file under benchmarks/data), against `sites` on it (by op: the same read of the memory events and their spans).

    python3 benchmarks/bench_view.py [--events 1000000] [--segments-gib 1] [--sites 200000] [--runs 2]
                                     [--kineto-memory 2000000] [--kineto-other 6000000]
                                     [--chromium /usr/bin/chromium]    (0 skips a case)
"""

from __future__ import annotations

import argparse
import os
import pickle
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # this checkout's veotrace and tools
sys.path.insert(0, str(HERE))
from bench_sites import run  # noqa: E402 (one veotrace child process: wall seconds and peak RSS)

MAX_HTML = 8 * 2**20


def made(name: str, write) -> Path:
    """``benchmarks/data/NAME``, written by ``write(path)`` the first time it is asked for."""
    data = HERE / "data"
    data.mkdir(exist_ok=True)
    path = data / name
    if not path.exists():
        write(path)
    return path


def snapshot(events: int, depth: int = 20, stacks: int = 200) -> Path:
    from veotrace.synth.torch import stacked_snapshot

    return made(f"stacked_{events}_{depth}_{stacks}.pickle",
                lambda path: path.write_bytes(pickle.dumps(stacked_snapshot(events=events, depth=depth, stacks=stacks))))


def segments_snapshot(gib: float) -> Path:
    """The generated snapshot of many segments, about ``gib`` GiB (written as it is made)."""
    from veotrace.synth.segmented import write_segmented

    return made(f"segmented_{gib:g}gib.pickle",
                lambda path: write_segmented(path, target_bytes=int(gib * 2**30), depth=20, stacks=200, seed=0))


def sites_snapshot(sites: int) -> Path:
    """A snapshot of ``sites`` distinct sites (each allocation a new site until every one is met)."""
    from veotrace.synth.segmented import write_segmented

    return made(f"sites_{sites}.pickle", lambda path: write_segmented(path, events=int(sites * 2.8), depth=6,
                                                                      stacks=sites, distinct=True, seed=0))


def kineto_trace(memory: int, other: int) -> Path:
    """bench_kineto.py's generated profiler trace (the same file it writes and reads, made once, its answer beside
    it: the answer is written last, so a trace without one, or an answer without its trace, is made again)."""
    import json

    from bench_kineto import write_trace

    name = f"kineto_{memory}_{other}.pt.trace.json"
    if not (HERE / "data" / name).exists():  # an answer without its trace is made again with it
        (HERE / "data" / (name + ".answer.json")).unlink(missing_ok=True)
    made(name + ".answer.json", lambda answer: answer.write_text(
        json.dumps(write_trace(answer.with_name(name), memory, other))))
    return HERE / "data" / name


def in_browser(chromium: str, page: Path, zooms: int = 20) -> tuple[float, list[float], int]:
    """(first draw ms: from navigation start to the first frame painted with every chart, zoom redraw ms
    each, level drawn at the deepest zoom) in headless Chromium."""
    from tools.cdp import Browser

    with tempfile.TemporaryDirectory() as profile, Browser(chromium, Path(profile)) as b:
        p = b.open(page.as_uri(), timeout=120)
        if not p.evaluate("window.veotraceView && veotraceView.ready") or p.errors():
            raise SystemExit(f"the page did not draw: {p.errors()[:3]}")
        first = p.evaluate("new Promise(r => { const w = () => veotraceView.timings.firstPaint ? "
                           "r(veotraceView.timings.firstPaint) : requestAnimationFrame(w); w(); })")
        times = []
        for k in range(zooms):  # zoom in step by step around the peak, then out again
            f = 0.5 ** (k % 10 + 1)
            times.append(p.evaluate(f"""(() => {{ const l = veotraceView.lanes[0], [a, b] = l.span, c = l.data.peaks[0].x;
                const w = (b - a) * {f}; return l.zoom(Math.max(a, c - w / 2), Math.min(b, c + w / 2)); }})()"""))
        level = p.evaluate("veotraceView.lanes[0].drawn.level")
    return first, times, level


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000, help="entries of the stacked snapshot (0: skip it)")
    ap.add_argument("--segments-gib", type=float, default=1.0, help="size of the many-segments snapshot (0: skip it)")
    ap.add_argument("--sites", type=int, default=200_000, help="distinct sites of the many-sites snapshot (0: skip it)")
    ap.add_argument("--kineto-memory", type=int, default=2_000_000, help="[memory] events of the profiler trace (0: skip it)")
    ap.add_argument("--kineto-other", type=int, default=6_000_000, help="other events of the profiler trace")
    ap.add_argument("--runs", type=int, default=2, help="runs of each command; the fastest is kept")
    ap.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    a = ap.parse_args()
    cases = []
    if a.events:
        cases.append((f"{a.events:,} entries, stacked", snapshot(a.events)))
    if a.segments_gib:
        cases.append(("many segments", segments_snapshot(a.segments_gib)))
    if a.sites:
        cases.append((f"{a.sites:,} distinct sites", sites_snapshot(a.sites)))
    if a.kineto_memory:
        cases.append((f"profiler trace, {a.kineto_memory:,} memory events among {a.kineto_other:,} others",
                      kineto_trace(a.kineto_memory, a.kineto_other)))

    def best(args):
        return min((run(args) for _ in range(a.runs)), key=lambda r: r[0])

    for label, path in cases:
        out = Path(tempfile.mkdtemp()) / "view.html"
        sites = best(["sites", str(path), "-f", "json", "-o", os.devnull])
        view = best(["view", str(path), "-o", str(out)])
        size = out.stat().st_size
        print(f"{label}: {path.name} ({path.stat().st_size / 2**20:,.0f} MiB): sites {sites[0]:.2f} s / {sites[1]:.0f} MiB; "
              f"view {view[0]:.2f} s / {view[1]:.0f} MiB; ratio {view[0] / sites[0]:.2f}x time, "
              f"{view[1] / sites[1]:.2f}x memory (bound 1.5x); view.html {size / 2**20:.2f} MiB (bound "
              f"{MAX_HTML / 2**20:.0f} MiB){'' if size <= MAX_HTML else '  OVER THE BOUND'}")
        if Path(a.chromium).exists():
            first, zooms, level = in_browser(a.chromium, out)
            print(f"  headless Chromium: first draw {first:.0f} ms after navigation (bound 2000 ms); zoom redraw median "
                  f"{statistics.median(zooms):.1f} ms, max {max(zooms):.1f} ms over {len(zooms)} zooms (bound 100 ms; "
                  f"{1000 / statistics.median(zooms):.0f} frames a second); deepest zoom draws level {level}")
        else:
            print(f"  no Chromium at {a.chromium}: the in-browser times are not measured")
        shutil.rmtree(out.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
