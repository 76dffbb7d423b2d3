"""Seeded ``nsys stats --format csv`` cuda_gpu_trace output (three header generations) with the answer.

``planted_gpu_trace`` returns a GPU_ACTIVITY table whose kernel launches form known bursts, with
memcpys and memsets in between; ``gpu_trace_csv`` writes it as nsys would (FORMATS.md A.3) and
``captured_stdout`` wraps that in the ``Generating`` / ``NOTICE:`` / ``Processing [...]`` / ``SKIPPED:``
lines of captured stdout. Times are whole microseconds and sizes whole kB so every generation
(2021.1 prints seconds with 6 decimals, later ones MB with 3) holds the exact values.

Regenerate the sample with ``python -m veotrace.synth.nsys_csv sample_traces/nsys/cuda_gpu_trace.csv``.
"""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa

from veotrace.synth.bursts import PlantedBursts, _plant

US = 1_000
#: Header per generation: nsys 2021.1 gputrace, 2021.2-2023 gputrace/cuda_gpu_trace, 2024+ cuda_gpu_trace.
HEADERS = {
    "2021": "Start(sec),Duration(nsec),CorrId,GrdX,GrdY,GrdZ,BlkX,BlkY,BlkZ,Reg/Trd,StcSMem,DymSMem,Bytes,"
            "Thru(MB/s),SrcMemKd,DstMemKd,Device,Ctx,Strm,Name",
    "2022": "Start ({t}),Duration ({t}),CorrId,GrdX,GrdY,GrdZ,BlkX,BlkY,BlkZ,Reg/Trd,StcSMem (MB),DymSMem (MB),"
            "Bytes (MB),Throughput (MBps),SrcMemKd,DstMemKd,Device,Ctx,Strm,Name",
    "2025": "Start ({t}),Duration ({t}),CorrId,GrdX,GrdY,GrdZ,BlkX,BlkY,BlkZ,Reg/Trd,StcSMem (MB),DymSMem (MB),"
            "Bytes (MB),Throughput (MB/s),SrcMemKd,DstMemKd,Device,Ctx,GreenCtx,Strm,Name",
}
GENERATIONS = tuple(HEADERS)
TIME_FACTORS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
KERNELS = ("ampere_sgemm_128x64_nn", "void at::native::vectorized_elementwise_kernel<4, float>(int, float*)",
           "flash_fwd_kernel")
_LONG = {"HtoD": "Host-to-Device", "DtoH": "Device-to-Host", "DtoD": "Device-to-Device"}
_MEM_KINDS = {"HtoD": ("Pinned", "Device"), "DtoH": ("Device", "Pinned"), "DtoD": ("Device", "Device")}
_SKIPPED = ("nvtx_sum", "NV Tools Extension (NVTX)"), ("osrt_sum", "OS runtime libraries")


def planted_gpu_trace(*, seed: int = 0, bursts: int = 12, gap_ms: float = 5.0, max_events: int = 20,
                      singletons: int = 4, memcpys: int = 30, memsets: int = 10, devices: int = 2) -> PlantedBursts:
    """A GPU_ACTIVITY table (sorted by start) whose kernel launches form ``bursts`` known bursts."""
    from veotrace.schemas import GPU_ACTIVITY, conform

    rng = np.random.default_rng(seed)
    gap_us = round(gap_ms * 1000)
    ts_us, burst_of = _plant(rng, bursts, gap_us, max_events, min(singletons, bursts), 250_000)
    ts = ts_us * US
    in_burst = burst_of >= 0
    n_k, n_other = ts.size, memcpys + memsets
    other_ts = rng.integers(int(ts_us.min()), int(ts_us.max()) + 1, n_other) * US
    start = np.concatenate((ts, other_ts))
    kind = np.array(["kernel"] * n_k + ["memcpy"] * memcpys + ["memset"] * memsets)
    copy = np.array([None] * n_k + list(rng.choice(list(_LONG), memcpys)) + [None] * memsets, dtype=object)
    names = np.array(list(rng.choice(KERNELS, n_k)) + [f"[CUDA memcpy {c}]" for c in copy[n_k:n_k + memcpys]]
                     + ["[CUDA memset]"] * memsets, dtype=object)
    nbytes = np.concatenate((np.full(n_k, -1), rng.integers(1, 64_000, n_other) * 1000))
    grid = rng.integers(1, 4097, (start.size, 3))
    block = rng.choice([32, 64, 128, 256], (start.size, 3))
    is_k = kind == "kernel"
    order = np.argsort(start, kind="stable")
    cols = {
        "kind": kind, "name": names, "start_ns": start, "end_ns": start + rng.integers(2, 900, start.size) * US,
        "device": rng.integers(0, devices, start.size).astype(np.int32), "stream": rng.choice([7, 13, 14], start.size),
        "bytes": pa.array(nbytes, pa.int64(), mask=is_k), "copy_kind": copy,
        **{f"grid_{a}": pa.array(grid[:, i], pa.int32(), mask=~is_k) for i, a in enumerate("xyz")},
        **{f"block_{a}": pa.array(block[:, i], pa.int32(), mask=~is_k) for i, a in enumerate("xyz")},
    }
    table = pa.table({k: pa.array(v) if not isinstance(v, pa.Array) else v for k, v in cols.items()}).take(order)
    table = table.append_column("correlation_id", pa.array(np.arange(1, start.size + 1) * 2 + 100))
    table = table.append_column("source_file", pa.array(["synthetic"] * start.size))
    counts = np.bincount(burst_of[in_burst], minlength=bursts)
    starts = np.array([ts[burst_of == b].min() for b in range(bursts)])
    ends = np.array([ts[burst_of == b].max() for b in range(bursts)])
    return PlantedBursts(conform(table, GPU_ACTIVITY), gap_ms, starts, ends, counts, np.zeros(bursts, np.int64),
                         int((~in_burst).sum()))


def _decimal(value: int, factor: int) -> str:
    """``value`` / ``factor`` written exactly (factor a power of ten)."""
    digits = len(str(factor)) - 1
    return str(value) if digits == 0 else f"{value // factor}.{value % factor:0{digits}d}"


def gpu_trace_csv(table: pa.Table, *, generation: str = "2025", time_unit: str = "ns") -> str:
    """One cuda_gpu_trace report (header and rows) as nsys ``generation`` writes it.

    ``time_unit`` is ``nsys stats --timeunit`` (2022 and 2025 headers; 2021.1 always wrote seconds
    and nanoseconds).
    """
    out = io.StringIO()
    out.write(HEADERS[generation].format(t=time_unit) + "\n")
    writer = csv.writer(out, lineterminator="\n")
    t_start, t_dur = (10**9, 1) if generation == "2021" else (TIME_FACTORS[time_unit],) * 2
    for r in table.to_pylist():
        dur = r["end_ns"] - r["start_ns"]
        is_k = r["kind"] == "kernel"
        mem = _MEM_KINDS.get(r["copy_kind"], ("Device", "")) if not is_k else ("", "")
        nb = r["bytes"]
        size = "" if nb is None else str(nb) if generation == "2021" else _decimal(nb, 10**6)
        thru = "" if nb is None else f"{nb * 1000 / dur:.3f}"
        name = r["name"]
        if r["kind"] == "memcpy" and generation == "2025":
            name = f"[CUDA memcpy {_LONG[r['copy_kind']]}]"
        shared = ("0", "0") if generation == "2021" else ("0.000", "0.000")
        launch = [r["grid_x"], r["grid_y"], r["grid_z"], r["block_x"], r["block_y"], r["block_z"], 32, *shared] \
            if is_k else [""] * 9
        green = [""] if generation == "2025" else []
        writer.writerow([_decimal(r["start_ns"], t_start), _decimal(dur, t_dur), r["correlation_id"], *launch, size,
                         thru, *mem, f"NVIDIA A100-SXM4-80GB ({r['device']})", 1, *green, r["stream"], name])
    return out.getvalue()


def captured_stdout(report_csv: str, *, generation: str = "2025", db: str = "/tmp/run.sqlite") -> str:
    """``report_csv`` inside captured ``nsys stats`` stdout: log lines, empty reports, a summary report."""
    reports = "/opt/nvidia/nsight-systems/2025.3.2/host-linux-x64/reports"
    trace = "gputrace" if generation != "2025" else "cuda_gpu_trace"
    kern_sum = "gpukernsum" if generation != "2025" else "cuda_gpu_kern_sum"

    def processing(name: str) -> str:
        return f"Processing [{db}] with [{reports}/{name}.py]... \n"

    parts = [f"Generating SQLite file {db} from {db[:-7]}.nsys-rep\n",
             f"NOTICE: Existing SQLite export found: {db}\n"]
    for name, what in _SKIPPED:
        parts += [processing(name), f"SKIPPED: {db} does not contain {what} data.\n", "\n"]
    parts += [processing(kern_sum), ("Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),"
              "StdDev (ns),Name\n"), "100.0,1000,2,500.0,500.0,400,600,141.4,flash_fwd_kernel\n", "\n"]
    parts += [processing(trace), report_csv, "\n"]
    parts += [processing("um_sum"), f"SKIPPED: {db} does not contain CUDA memory transfers data.\n", "\n"]
    return "".join(parts)


def write_sample(path: Path) -> PlantedBursts:
    """The small sample in ``sample_traces/nsys/`` (seed 7, 2025 header)."""
    truth = planted_gpu_trace(seed=7, bursts=8, max_events=12, singletons=3, memcpys=12, memsets=4)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(gpu_trace_csv(truth.table, generation="2025"))
    return truth


if __name__ == "__main__":
    write_sample(Path(sys.argv[1]))
