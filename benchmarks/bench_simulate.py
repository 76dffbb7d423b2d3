"""Benchmark `veotrace simulate`: requests per second per policy on a 10M-event paired alloc/free log.

The shared 10M-event benchmark log (bench_entropy.realistic_log) draws its free addresses at random, so
its frees pair with no allocation and simulate refuses it (checked here on a small copy). The policies
are therefore timed on a seeded training-loop log of the same length (veotrace.synth.training), whose
every free pairs with its alloc.

Every policy's rate is also given as a ratio to a baseline measured in the same run: a bare Python loop
over the same requests that only stores and pops a handle per allocation (the least any Python replay
does). The ratio cancels out contention on a shared machine; the absolute numbers do not. ``torch`` runs
the compiled core when it is built (``torch-python``: the reference model, same requests).

``end_to_end`` is the whole command, ``veotrace simulate LOG --policy torch -f json`` in a child process
(read, pairing, replay, fragmentation windows, JSON): its events/s (log rows / wall seconds), its ratio to
the baseline, and the child's peak RSS.

    python3 benchmarks/bench_simulate.py [--events 10000000] [--policies torch,ideal,...]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
STEP_EVENTS, LAYERS = 72, 12  # a training_log step of 12 layers writes 72 events


def training_csv(events: int) -> Path:
    """The paired log of about ``events`` events under benchmarks/data, made once (in 1M-event pieces)."""
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv

    from veotrace.synth.training import STEP_NS, training_log

    DATA.mkdir(exist_ok=True)
    path = DATA / f"training_{events}.csv"
    if path.exists():
        return path
    per_piece = 1_000_000 // STEP_EVENTS
    steps_total, done, writer = max(events // STEP_EVENTS, 1), 0, None
    tmp = path.with_suffix(".tmp")
    for piece in range(0, steps_total, per_piece):
        steps = min(per_piece, steps_total - piece)
        t = training_log(seed=piece, steps=steps, layers=LAYERS).table
        t = t.set_column(0, "timestamp", pc.add(t["timestamp"], piece * STEP_NS))
        t = t.set_column(3, "address", pc.add(t["address"], done * 512))
        done += t.num_rows
        if writer is None:
            writer = pacsv.CSVWriter(str(tmp), t.schema)
        writer.write_table(t)
    writer.close()
    tmp.rename(path)
    return path


def baseline(req) -> float:
    """Seconds of the least a Python replay does: one handle stored per alloc and popped per free."""
    from veotrace.allocators.requests import REQ_FREE, REQ_MALLOC

    kind, size, pair = req.kind, req.size, req.pair
    handles = {}
    t0 = time.perf_counter()
    for i in range(len(kind)):
        k = kind[i]
        if k == REQ_MALLOC:
            handles[i] = size[i]
        elif k == REQ_FREE:
            handles.pop(pair[i])
    return time.perf_counter() - t0


def time_policy(name: str, req, *, record: bool) -> float:
    """Seconds of the model loop (events drained per chunk as simulate does; not kept without ``record``)."""
    from veotrace.allocators import replay as rp
    from veotrace.allocators.conf import TorchConf
    from veotrace.allocators.simulate import make_policy
    from veotrace.allocators.tiered import DEFAULT_TIERS
    from veotrace.allocators.torchcore import choose_core, recorder_for

    core = choose_core(TorchConf(), None, "python" if name == "torch-python" else "auto")[0]
    policy = "torch" if name.startswith("torch") else name
    rec = recorder_for(policy, core, record=record)
    t0 = time.perf_counter()
    for _ in rp.iter_replay(lambda d: make_policy(policy, d, req, rec, conf=TorchConf(), capacity=None, seed=None,
                                                  tiers=DEFAULT_TIERS, core=core), req, {}):
        rec.drain()
    return time.perf_counter() - t0


def end_to_end(path: Path, rows: int) -> dict:
    """The whole ``simulate --policy torch`` command in a child process: wall seconds, events/s, peak RSS."""
    import resource
    from subprocess import DEVNULL, run

    t0 = time.perf_counter()
    r = run([sys.executable, "-m", "veotrace", "simulate", str(path), "--policy", "torch", "-f", "json"],
            stdout=DEVNULL, capture_output=False)
    wall = time.perf_counter() - t0
    if r.returncode:
        raise SystemExit(f"simulate exited {r.returncode}")
    return {"wall_s": round(wall, 2), "events_per_s": round(rows / wall),
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024}


def realistic_refused() -> str:
    """What simulate says of (a 200k-event copy of) the shared realistic benchmark log."""
    import tempfile

    from veotrace.synth.alloc import write_realistic_log

    path = Path(tempfile.mkdtemp()) / "realistic.csv"
    write_realistic_log(path, events=200_000)
    from subprocess import run

    r = run([sys.executable, "-m", "veotrace", "simulate", str(path), "-p", "torch"], capture_output=True, text=True)
    return r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=10_000_000)
    from veotrace.allocators.policies import POLICIES  # every registered policy, and the Python torch core

    ap.add_argument("--policies", default=",".join(["torch", "torch-python", *(p for p in POLICIES if p != "torch")]))
    args = ap.parse_args()
    from veotrace.allocators.builder import build_requests
    from veotrace.sources import iter_alloc_events

    path = training_csv(args.events)
    e2e = end_to_end(path, sum(1 for _ in open(path, "rb")) - 1)
    t0 = time.perf_counter()
    req = build_requests(iter_alloc_events([path]))  # read and paired batch by batch, as simulate does
    t_build = time.perf_counter() - t0
    n = len(req)
    t_base = baseline(req)
    e2e["vs_baseline"] = round(t_base / e2e["wall_s"], 3)
    print(json.dumps({"end_to_end": e2e}), flush=True)
    out = {"log": str(path), "requests": n, "read_and_build_requests_per_s": round(n / t_build),
           "baseline_requests_per_s": round(n / t_base), "end_to_end": e2e, "policies": {}}
    for name in args.policies.split(","):
        dt = time_policy(name, req, record=False)
        out["policies"][name] = {"requests_per_s": round(n / dt), "vs_baseline": round(t_base / dt, 3)}
        print(json.dumps({name: out["policies"][name]}), flush=True)
    dt = time_policy("torch", req, record=True)
    out["torch_recording_events_requests_per_s"] = round(n / dt)
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    out["target_torch_events_per_s"] = 500_000
    out["realistic_log"] = realistic_refused()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
