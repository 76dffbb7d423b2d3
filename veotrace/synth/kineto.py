"""Seeded PyTorch profiler traces (Kineto chrome-trace JSON) with their known answers.

``profiler_trace(seed, ...)`` builds one rank's trace as the profiler writes it (``traceEvents`` with
``cpu_op`` and ``python_function`` spans, GPU kernels and collectives, and ``[memory]`` instant events with
``Addr``, signed ``Bytes``, ``Total Allocated``, ``Total Reserved``, ``Device Type``, ``Device Id``, ``Ev Idx``),
and ``KinetoTruth``: every memory event in order with the op, frame and kernel enclosing it, each device's
peaks, the rises of ``Total Reserved`` and the op under each. The reserved totals follow a small caching
rule (a request the cached free bytes cannot hold reserves ``ceil(size / 2 MiB)`` x 2 MiB more), which is
all the answer needs: the reader reports what the trace says, it does not re-derive it.

Variants: ``device_type`` 1 (CUDA) or 6 (HIP: fractional microsecond ``ts`` and ``finished`` as ROCm writes),
``old_format`` (2021: only ``Bytes``, ``Device Type``, ``Device Id``), CPU events (Device Type 0), bytes live
before profiling, a folder of ranks (``write_ranks``), and ``write_trace(..., cut=)`` for a file cut mid-write.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

SEGMENT = 2 << 20
OPS = ("aten::linear", "aten::matmul", "aten::layer_norm", "aten::softmax", "aten::add", "aten::cat")
FRAMES = ("model.py(41): forward", "layers.py(88): forward", "attention.py(17): attn", "train.py(120): step")
KERNELS = ("gemm_kernel", "elementwise_kernel", "layer_norm_kernel", "softmax_kernel", "add_kernel", "cat_kernel")
COLLECTIVE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


@dataclass
class KinetoTruth:
    """What a generated trace holds. ``events``: one dict per [memory] event in (ts, Ev Idx) order with
    ``device_type``, ``device_id``, ``bytes``, ``address``, ``total_allocated``, ``total_reserved``, and the
    names of the enclosing ``op``, ``frame`` and ``kernel`` (None when none)."""

    rank: int | None
    events: list[dict] = field(default_factory=list)
    peak_allocated: dict = field(default_factory=dict)  # (device_type, device_id) -> bytes
    peak_reserved: dict = field(default_factory=dict)
    rises: dict = field(default_factory=dict)  # (device_type, device_id) -> count of Total Reserved rises
    rise_bytes_by_op: dict = field(default_factory=dict)  # op name -> bytes Total Reserved rose during it
    live_before: dict = field(default_factory=dict)  # (device_type, device_id) -> bytes live before profiling
    frees_of_unknown: int = 0  # frees of blocks allocated before profiling (GPU)

    @property
    def gpu_events(self) -> list[dict]:
        return [e for e in self.events if e["device_type"] != 0]

    @property
    def cpu_events(self) -> list[dict]:
        return [e for e in self.events if e["device_type"] == 0]


def profiler_trace(seed: int = 0, *, steps: int = 6, ops_per_step: int = 8, device_type: int = 1, device_id: int = 0,
                   rank: int | None = None, world_size: int | None = None, old_format: bool = False,
                   cpu_events: bool = True, live_before: int = 48 << 20, reserved_before: int = (48 << 20) + SEGMENT,
                   ts0_us: float | None = None, nodes_gpus: int | None = None) -> tuple[dict, KinetoTruth]:
    """One rank's trace (the JSON object) and its truth. Times in microseconds from ``ts0_us``; each op
    allocates 1-3 tensors (freed one or two ops later), under a python_function frame, while a kernel runs.
    ``nodes_gpus``: the GPUs one node lists in ``deviceProperties`` (default: the world's, one node)."""
    rng = np.random.default_rng(seed)
    hip = device_type == 6
    if ts0_us is None:  # CUDA traces: epoch microseconds (integers); ROCm: a monotonic clock with fractions
        ts0_us = 3_545_056_405_505.125 if hip else 1_717_000_000_000_000.0
    pid, tid = 4242 + (rank or 0), 4242 + (rank or 0)
    gpu_pid = device_id if not hip else device_id + 2  # ROCm traces may put GPU spans under another index
    events: list[dict] = []
    truth = KinetoTruth(rank)
    dev = (device_type, device_id)
    cpu = (0, -1)
    alloc = {dev: live_before, cpu: 0}
    reserved = {dev: reserved_before, cpu: 0}
    truth.live_before = {dev: live_before}
    truth.peak_allocated = {dev: live_before, cpu: 0}
    truth.peak_reserved = {dev: reserved_before, cpu: 0}
    truth.rises = {dev: 0}
    pre_blocks = [(0x7F00_0000_0000 + i * (8 << 20), 4 << 20) for i in range(3)]  # live before; some freed later
    next_addr = 0x7F10_0000_0000
    ev_idx = 10_000
    mem: list[tuple[float, int, dict, dict]] = []  # (ts, ev_idx, event, truth row)
    pending: list[tuple[int, int, tuple]] = []  # (free at op number, address, size, device)
    t = ts0_us
    op_no = 0
    events.append({"ph": "X", "cat": "python_function", "name": "train.py(1): <module>", "pid": pid, "tid": tid,
                   "ts": t, "dur": 0.0, "args": {"Python id": 1, "Python parent id": None}})
    top = events[-1]

    def tsv(x: float) -> float | int:
        return round(x, 3) if hip else int(x)

    seen_gpu = False

    def memory(ts: float, device: tuple, nbytes: int, addr: int, op: str, frame: str, kernel: str | None) -> None:
        nonlocal ev_idx, seen_gpu
        alloc[device] += nbytes
        grew = 0
        if device != cpu and nbytes > 0 and reserved[device] - (alloc[device] - nbytes) < nbytes:
            grew = -(-nbytes // SEGMENT) * SEGMENT
            reserved[device] += grew
            if seen_gpu:  # a rise at the first event shows in no total before it: not in the answer
                truth.rises[device] += 1
                truth.rise_bytes_by_op[op] = truth.rise_bytes_by_op.get(op, 0) + grew
        truth.peak_allocated[device] = max(truth.peak_allocated[device], alloc[device])
        truth.peak_reserved[device] = max(truth.peak_reserved[device], reserved[device])
        if old_format:
            args = {"Device Type": device[0], "Device Id": device[1], "Bytes": nbytes}
        else:
            args = {"Total Reserved": reserved[device], "Total Allocated": alloc[device], "Bytes": nbytes,
                    "Addr": addr, "Device Id": device[1], "Device Type": device[0]}
            if hip:
                args["finished"] = False
            args["Ev Idx"] = ev_idx
        ev = {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": pid, "tid": tid,
              "ts": tsv(ts), "args": args}
        row = {"device_type": device[0], "device_id": device[1], "bytes": nbytes,
               "address": None if old_format else addr,
               "total_allocated": None if old_format else alloc[device],
               "total_reserved": None if old_format else reserved[device],
               "op": op, "frame": frame, "kernel": kernel if device != cpu else None, "ts_us": tsv(ts)}
        mem.append((tsv(ts), ev_idx, ev, row))
        ev_idx += 1
        seen_gpu = seen_gpu or device != cpu

    for step in range(steps):
        frame = FRAMES[step % len(FRAMES)]
        f_start = t + 1
        ops_here = []
        t = f_start + 2
        for k in range(ops_per_step):
            name = OPS[int(rng.integers(len(OPS)))]
            o_start = t
            dur = float(rng.integers(40, 90))
            kernel = KERNELS[OPS.index(name)]
            k_start, k_dur = o_start + 5, dur - 10
            events.append({"ph": "X", "cat": "kernel", "name": kernel, "pid": gpu_pid, "tid": 7,
                           "ts": tsv(k_start), "dur": tsv(k_dur) if hip else int(k_dur),
                           "args": {"device": gpu_pid, "stream": 7, "correlation": op_no}})
            # allocations inside the kernel's run, each at its own microsecond
            n = int(rng.integers(1, 4))
            for j in range(n):
                size = int(rng.choice([512, 4096, 1 << 20, 3 << 20, 6 << 20]))
                addr = next_addr
                next_addr += -(-size // 512) * 512 + 512
                memory(k_start + 1 + 2 * j, dev, size, addr, name, frame, kernel)
                pending.append((op_no + int(rng.integers(1, 3)), addr, size, dev))
            if cpu_events and k % 3 == 0:
                caddr = 0x5555_0000_0000 + op_no * 4096
                memory(k_start + 1 + 2 * n, cpu, 1024, caddr, name, frame, kernel)
                pending.append((op_no + 1, caddr, 1024, cpu))
            # frees due now, then (step > 0) a block from before profiling
            j = 0
            for item in [p for p in pending if p[0] <= op_no]:
                pending.remove(item)
                _, addr, size, device = item
                memory(k_start + 1 + 2 * (n + 1 + j), device, -size, addr, name, frame, kernel)
                j += 1
            if k == ops_per_step - 1 and step < len(pre_blocks):
                addr, size = pre_blocks[step]
                memory(k_start + 1 + 2 * (n + 1 + j), dev, -size, addr, name, frame, kernel)
                truth.frees_of_unknown += 1
            events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": pid, "tid": tid, "ts": tsv(o_start),
                           "dur": tsv(dur) if hip else int(dur), "args": {"External id": op_no}})
            ops_here.append(name)
            op_no += 1
            t = o_start + dur + 3
        if world_size and world_size > 1:  # a collective on the GPU after each step, with one allocation in it
            c_start = t + 1
            events.append({"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": pid, "tid": tid,
                           "ts": tsv(c_start), "dur": 40, "args": {"External id": op_no}})
            events.append({"ph": "X", "cat": "kernel", "name": COLLECTIVE, "pid": gpu_pid, "tid": 9,
                           "ts": tsv(c_start + 2), "dur": 30, "args": {"device": gpu_pid, "stream": 9}})
            size = 8 << 20
            addr = next_addr
            next_addr += size + 512
            memory(c_start + 5, dev, size, addr, "c10d::allreduce_", frame, COLLECTIVE)
            memory(c_start + 30, dev, -size, addr, "c10d::allreduce_", frame, COLLECTIVE)
            op_no += 1
            t = c_start + 45
        events.append({"ph": "X", "cat": "python_function", "name": frame, "pid": pid, "tid": tid,
                       "ts": tsv(f_start), "dur": tsv(t - f_start), "args": {"Python id": 2 + step,
                                                                              "Python parent id": 1}})
        t += 5
    top["dur"] = tsv(t - ts0_us)
    top["ts"] = tsv(ts0_us)
    mem.sort(key=lambda m: (m[0], m[1]))
    truth.events = [m[3] for m in mem]
    events.extend(m[2] for m in mem)
    order = rng.permutation(len(events))  # the profiler writes spans and instants in its own order
    body = [events[i] for i in order]
    body.append({"name": "process_name", "ph": "M", "ts": tsv(ts0_us), "pid": pid, "tid": 0, "args": {"name": "python"}})
    gpu = {"name": "AMD Instinct MI300X" if hip else "NVIDIA H100 80GB HBM3",
           "totalGlobalMem": 206141652992 if hip else 85520809984}
    listed = range(max(world_size or 1, device_id + 1)) if nodes_gpus is None else range(nodes_gpus)
    head = {"schemaVersion": 1, "deviceProperties": [{"id": i, **gpu} for i in listed]}  # the node's GPUs
    if rank is not None:
        head["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world_size or 1}
    if not old_format:
        head.update({"record_shapes": 1, "with_stack": 1, "profile_memory": 1})
    trace = {**head, "traceEvents": body, "traceName": "trace.json"}
    if hip:
        trace["displayTimeUnit"] = "ms"
    return trace, truth


def kineto_text(trace: dict, *, compact: bool = False, leading_newline: bool = True) -> str:
    """The JSON text as Kineto writes it (one event per block of lines, a newline before the brace), or
    ``compact`` (``json.dumps`` with no spaces, keys sorted: any writer's layout must read the same)."""
    if compact:
        return json.dumps(trace, separators=(",", ":"), sort_keys=True)
    parts = ["\n{" if leading_newline else "{"]
    keys = [k for k in trace if k != "traceEvents"]
    before = [k for k in keys if k != "traceName" and k != "displayTimeUnit"]
    for k in before:
        parts.append(f'\n  "{k}": {json.dumps(trace[k])},')
    parts.append('\n  "traceEvents": [')
    evs = []
    for e in trace["traceEvents"]:
        args = e.get("args")
        rest = {k: v for k, v in e.items() if k != "args"}
        body = ", ".join(f'"{k}": {json.dumps(v)}' for k, v in rest.items())
        text = "\n  {\n    " + body
        if args is not None:
            text += ',\n    "args": {\n      ' + ", ".join(f'"{k}": {json.dumps(v)}' for k, v in args.items()) + "\n    }"
        evs.append(text + "\n  }")
    parts.append(",".join(evs))
    parts.append("\n  ]")
    for k in keys:
        if k not in before:
            parts.append(f',\n  "{k}": {json.dumps(trace[k])}')
    parts.append("\n}")
    return "".join(parts)


def write_trace(path: Path, trace: dict, *, gz: bool | None = None, compact: bool = False, cut: float | None = None,
                leading_newline: bool = True) -> Path:
    """Write ``trace``; gzip when ``gz`` (default: the name ends in ``.gz``); ``cut`` keeps that share of the
    bytes (a trace cut mid-write). Returns the path."""
    data = kineto_text(trace, compact=compact, leading_newline=leading_newline).encode()
    if cut is not None:
        data = data[: int(len(data) * cut)]
    gz = str(path).endswith(".gz") if gz is None else gz
    path = Path(path)
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    return path


def write_ranks(folder: Path, seed: int = 0, *, world_size: int = 2, device_type: int = 1, **kw) -> list[KinetoTruth]:
    """A folder of one trace per rank (rank r on device r, as one node runs them): their truths in rank order."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    truths = []
    for r in range(world_size):
        trace, truth = profiler_trace(seed + r, rank=r, world_size=world_size, device_id=r, device_type=device_type, **kw)
        write_trace(folder / f"rank{r}.pt.trace.json", trace)
        truths.append(truth)
    return truths


def memory_timeline_rows(seed: int = 0, n: int = 200) -> tuple[list[list[int]], dict]:
    """``export_memory_timeline`` raw rows ``[ts, action, bytes, category]`` and the bytes live per category at
    the end (the answer): a few preexisting tensors (ts -1), then creates, version bumps and destroys."""
    rng = np.random.default_rng(seed)
    rows: list[list[int]] = []
    live: dict[int, list[tuple[int, int]]] = {}
    end = dict.fromkeys(range(8), 0)
    for c in (0, 0, 7):
        size = int(rng.integers(1, 64)) * 512
        rows.append([-1, 1, size, c])
        live.setdefault(c, []).append((size, len(rows)))
        end[c] += size
    t = 1_696_966_048_000_000_000
    for _ in range(n):
        t += int(rng.integers(1, 5000))
        kind = int(rng.integers(0, 3))
        c = int(rng.integers(0, 8))
        if kind == 0 or not live.get(c):
            size = int(rng.integers(1, 64)) * 512
            rows.append([t, 2, size, c])
            live.setdefault(c, []).append((size, len(rows)))
            end[c] += size
        elif kind == 1:  # a version bump moves the bytes to another category (e.g. activation -> gradient)
            size, _ = live[c].pop()
            to = (c + 1) % 8
            rows.append([t, 3, -size, c])
            rows.append([t, 3, size, to])
            live.setdefault(to, []).append((size, len(rows)))
            end[c] -= size
            end[to] += size
        else:
            size, _ = live[c].pop()
            rows.append([t, 4, -size, c])
            end[c] -= size
    return rows, end
