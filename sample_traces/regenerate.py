"""Regenerate the small seeded examples the README's commands run on (same bytes on every run).

    python3 sample_traces/regenerate.py          # from the repository root

Writes only the files in ``SAMPLES`` below. The older samples have generators of their own and are
left as they are: ``alloc_logs/`` (237 h of rotated logs), ``frames/``, ``ncu/l2_details.csv``,
``nsys/`` (``python -m veotrace.synth.nsys``, ``python -m veotrace.synth.nsys_csv``).
Every file stays well under 200 KB.
"""

from __future__ import annotations

import io
import pickle
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

from veotrace.synth.bursts import planted_bursts_log  # noqa: E402
from veotrace.synth.frames import address_epe_series  # noqa: E402
from veotrace.synth.kineto import kineto_text, profiler_trace  # noqa: E402
from veotrace.synth.ncu import planted_l2  # noqa: E402
from veotrace.synth.torch import synthetic_snapshot  # noqa: E402


def bursty_log() -> bytes:
    """An alloc/free log of a few seconds whose allocs come in 40 bursts a few ms apart (gap 5 ms)."""
    truth = planted_bursts_log(seed=21, bursts=40, gap_ms=5.0, max_events=25, singletons=8, frees=300, shuffle=False)
    t = truth.table
    sizes = t.column("size_bytes").to_numpy()
    address = 0x7F00_0000_0000 + np.cumsum(((sizes + 511) // 512) * 512) - sizes  # 512-byte aligned, increasing
    device = t.column("stream").to_numpy() % 2  # two devices, two streams each
    out = io.StringIO()
    out.write("timestamp,op_type,size_bytes,address,stream,device\n")
    for ts, op, size, addr, stream, dev in zip(t.column("timestamp").to_numpy(), t.column("op_type").to_pylist(),
                                               sizes, address, t.column("stream").to_numpy(), device):
        out.write(f"{ts},{op},{size},0x{addr:x},{stream},{dev}\n")
    return out.getvalue().encode()


def snapshot() -> bytes:
    """A timed PyTorch snapshot (_dump_snapshot layout) on two devices: segment_alloc, alloc,
    free_requested, free_completed, segment_free, oom entries over about 2.6 s."""
    obj, _ = synthetic_snapshot(seed=1, n_allocs=300, devices=2, with_time=True)
    return pickle.dumps(obj, protocol=4)


def ncu_few_launches() -> bytes:
    """ncu --csv details page of a one-shot profile: one or two launches per kernel (--launch-count 1)."""
    truth = planted_l2(seed=5, kernels=3, launches=[1, 2, 1], breaks=0, sigma=0.0)
    return ("\n".join(truth.details_lines()) + "\n").encode()


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def arrays() -> dict[str, bytes]:
    """Frame addresses and EPE for correlate: a run (rho 0.6, AR(1) frames) and a baseline (rho 0)."""
    addrs, epe, _ = address_epe_series(48, rho=0.6, phi=0.3, seed=4)
    addrs0, epe0, _ = address_epe_series(48, rho=0.0, phi=0.3, seed=5)
    rng = np.random.default_rng(4)
    # (48, 16, 16) per-frame EPE maps whose mean is the per-frame EPE (frame 0 has none: copy frame 1)
    per_frame = np.concatenate(([epe[0]], epe))
    maps = (per_frame[:, None, None] * rng.gamma(16.0, 1 / 16.0, (48, 16, 16))).astype(np.float32)
    npz = io.BytesIO()
    np.savez(npz, addrs=addrs, epe=epe)
    return {"addrs.npy": _npy(addrs), "epe.npy": _npy(epe), "addrs0.npy": _npy(addrs0), "epe0.npy": _npy(epe0),
            "epe_maps.npy": _npy(maps), "run.npz": npz.getvalue()}


def profiler_rank(rank: int) -> bytes:
    """One rank's PyTorch profiler trace (export_chrome_trace layout, profile_memory=True, with_stack=True) of a
    two-rank run on one node: ops, Python frames, kernels, an all-reduce per step, [memory] events with totals."""
    trace, _ = profiler_trace(seed=30 + rank, steps=10, ops_per_step=6, rank=rank, world_size=2, device_id=rank)
    return kineto_text(trace).encode()


SAMPLES = {
    **{f"profiler/rank{r}.pt.trace.json": (lambda r=r: profiler_rank(r)) for r in (0, 1)},
    "alloc_logs_bursty/alloc.log.csv": bursty_log,
    "snapshots/memory_snapshot.pickle": snapshot,
    "ncu/launch_count_1.csv": ncu_few_launches,
    **{f"arrays/{name}": (lambda name=name: arrays()[name]) for name in
       ("addrs.npy", "epe.npy", "addrs0.npy", "epe0.npy", "epe_maps.npy", "run.npz")},
}


def main() -> None:
    for rel, make in SAMPLES.items():
        path = HERE / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        data = make()
        assert len(data) < 200_000, (rel, len(data))
        path.write_bytes(data)
        print(f"{rel}: {len(data):,} bytes")


if __name__ == "__main__":
    main()
