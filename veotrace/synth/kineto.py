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
before profiling, a folder of ranks (``write_ranks``, one rank's file cut with ``cut={rank: share}``), and
``write_trace(..., cut=)`` for a file cut mid-write.

``full=True`` writes what a real run's file carries besides (as ``torch/profiler/profiler.py``'s
``_get_distributed_info`` and Kineto's ``output_json.cpp`` / ``DeviceProperties.cpp`` write it; the shapes
checked on the shared real files): ``distributedInfo`` with ``pg_count``, ``pg_config`` and ``nccl_version``,
every ``deviceProperties`` field, ``baseTimeNanoseconds``, ``trace_id`` (and ROCm's ``roctracer_version``,
``hip_runtime_version``), the runtime launch event of each kernel with its ``ac2g`` flow, the ``Trace`` span
under the string pid ``"Spans"``, and around each collective the ``record_param_comms`` op with its args and
the NCCL (RCCL on ROCm) kernel. ``graph_replays`` captures the last step into a CUDA (HIP) graph: its
allocations go to the graph's private pool (its own cached bytes, so Total Reserved rises though the
general cache holds free bytes), then ``cudaGraphLaunch`` / ``hipGraphLaunch`` replays that allocate
nothing. ``reserve_share`` puts the bytes live before profiling so that the peak of Total Reserved is
about that share of the device's ``totalGlobalMem`` (a job that reserved almost the whole device).
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
RCCL_COLLECTIVE = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, ncclWork*)"
#: The devices of the generated traces: deviceProperties as Kineto writes them (fields of the shared real files).
H100 = {"name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85520809984, "computeMajor": 9, "computeMinor": 0,
        "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536,
        "regsPerMultiprocessor": 65536, "warpSize": 32, "sharedMemPerBlock": 49152,
        "sharedMemPerMultiprocessor": 233472, "numSms": 132, "sharedMemPerBlockOptin": 232448}
MI300X = {"name": "AMD Instinct MI300X", "totalGlobalMem": 206141652992, "computeMajor": 9, "computeMinor": 4,
          "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, "warpSize": 64,
          "sharedMemPerBlock": 65536, "numSms": 304, "maxSharedMemoryPerMultiProcessor": 65536}


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
    device_name: str | None = None  # deviceProperties' name of the trace's GPU
    capacity: int | None = None  # its totalGlobalMem
    graph_pool_rises: int = 0  # rises of Total Reserved in graph capture (the private pool's own segments)
    graph_launches: int = 0  # cudaGraphLaunch / hipGraphLaunch runtime events
    collectives: int = 0  # record_param_comms ops (with full=True) or collective kernels

    @property
    def gpu_events(self) -> list[dict]:
        return [e for e in self.events if e["device_type"] != 0]

    @property
    def cpu_events(self) -> list[dict]:
        return [e for e in self.events if e["device_type"] == 0]


def profiler_trace(seed: int = 0, *, steps: int = 6, ops_per_step: int = 8, device_type: int = 1, device_id: int = 0,
                   rank: int | None = None, world_size: int | None = None, old_format: bool = False,
                   cpu_events: bool = True, live_before: int = 48 << 20, reserved_before: int = (48 << 20) + SEGMENT,
                   ts0_us: float | None = None, nodes_gpus: int | None = None, full: bool = False,
                   graph_replays: int = 0, reserve_share: float | None = None,
                   allocator: str = "simple", big_alloc: int | None = None) -> tuple[dict, KinetoTruth]:
    """One rank's trace (the JSON object) and its truth. Times in microseconds from ``ts0_us``; each op
    allocates 1-3 tensors (freed one or two ops later), under a python_function frame, while a kernel runs.
    ``nodes_gpus``: the GPUs one node lists in ``deviceProperties`` (default: the world's, one node).
    ``full``, ``graph_replays``, ``reserve_share``: see the module's docstring (off: the same file as before).
    ``allocator="caching"``: the GPU's blocks, addresses and Total Reserved come from ``synth.caching``'s
    allocator written from PyTorch's rules (a cold start: nothing live or reserved before profiling), so the
    torch model's replay must reproduce every rise of Total Reserved; the default is the module's small rule.
    ``big_alloc``: one more allocation of that many bytes in the first op, never freed (a KV cache or a model's
    weights allocated while profiling: sizes past 2**32 through every column)."""
    rng = np.random.default_rng(seed)
    hip = device_type == 6
    gpu = MI300X if hip else H100
    if reserve_share is not None:  # the job's weights and caches, live before profiling, fill the device
        live_before = int(gpu["totalGlobalMem"] * reserve_share) // SEGMENT * SEGMENT
        reserved_before = live_before + SEGMENT
    caching = None
    if allocator == "caching":  # PyTorch's rules (synth.caching), from an empty device
        from veotrace.synth.caching import CachingAllocator, Settings

        settings = Settings(device_memory=(MI300X if hip else H100)["totalGlobalMem"])
        caching = CachingAllocator(settings)
        graph_pool = CachingAllocator(settings)  # the captured graph's private pool: its own segments
        graph_pool.va = [[caching.va[0][0] + (1 << 44), 1 << 44]]  # elsewhere in the address space
        live_before = reserved_before = 0
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
    blocks: dict[int, object] = {}  # the caching allocator's block of each live address
    pre_blocks = [] if caching else [(0x7F00_0000_0000 + i * (8 << 20), 4 << 20) for i in range(3)]  # live before
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
    pool = {"live": 0, "reserved": 0}  # a CUDA graph's private pool: its blocks come from its own segments
    pool_addrs: set[int] = set()
    capturing = False

    def gpu_addr(size: int) -> int:
        """The address of a new GPU block of ``size`` bytes (the caching allocator's, else the next free one)."""
        nonlocal next_addr
        if caching is not None:
            owner = graph_pool if capturing else caching  # in capture, the graph's pool serves every request
            block = owner.malloc(size)
            blocks[block.addr] = (owner, block)
            return block.addr
        addr = next_addr
        next_addr += -(-size // 512) * 512 + 512
        return addr

    def memory(ts: float, device: tuple, nbytes: int, addr: int, op: str, frame: str, kernel: str | None) -> None:
        nonlocal ev_idx, seen_gpu
        alloc[device] += nbytes
        grew = 0
        if caching is not None and device != cpu:
            if nbytes < 0:  # back to the pool it came from (a graph's blocks to the graph's pool)
                owner, block = blocks.pop(addr)
                owner.free_(block)
            total = caching.reserved + graph_pool.reserved
            grew = total - reserved[device]
            reserved[device] = total
            if grew and seen_gpu:
                truth.rises[device] += 1
                truth.rise_bytes_by_op[op] = truth.rise_bytes_by_op.get(op, 0) + grew
                truth.graph_pool_rises += capturing
            nbytes_rule = 0  # the rule below is the simple allocator's
        else:
            nbytes_rule = nbytes
        in_pool = device != cpu and (capturing if nbytes > 0 else addr in pool_addrs)
        if in_pool:  # allocated in capture, or a pool block freed (back to the pool, wherever it is freed)
            pool["live"] += nbytes
            (pool_addrs.add if nbytes > 0 else pool_addrs.discard)(addr)
        free_cached = (pool["reserved"] - (pool["live"] - nbytes) if in_pool else
                       reserved[device] - pool["reserved"] - (alloc[device] - pool["live"] - nbytes))
        if device != cpu and nbytes_rule > 0 and free_cached < nbytes_rule:
            grew = -(-nbytes // SEGMENT) * SEGMENT
            reserved[device] += grew
            if in_pool:
                pool["reserved"] += grew
            if seen_gpu:  # a rise at the first event shows in no total before it: not in the answer
                truth.rises[device] += 1
                truth.rise_bytes_by_op[op] = truth.rise_bytes_by_op.get(op, 0) + grew
                truth.graph_pool_rises += in_pool
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

    runtime = "hip" if hip else "cuda"
    corr = 0

    def launch(ts: float, name: str, external: int, kernel: str | None = None) -> int:
        """A runtime event on the CPU thread (``full``) with its ac2g flow start: the correlation id."""
        nonlocal corr
        corr += 1
        if full:
            events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": pid, "tid": tid, "ts": tsv(ts),
                           "dur": tsv(2.0) if hip else 2, "args": {"External id": external, "cbid": 211,
                                                                  "correlation": corr,
                                                                  **({"kernel": kernel} if kernel else {})}})
            events.append({"ph": "s", "id": corr, "pid": pid, "tid": tid, "ts": tsv(ts), "cat": "ac2g", "name": "ac2g"})
        return corr

    def gpu_span(ts: float, dur: float, name: str, c: int, stream: int = 7, **more) -> None:
        ids = {"correlation": c if full else op_no} if full or stream == 7 else {}  # as before without ``full``
        events.append({"ph": "X", "cat": "kernel", "name": name, "pid": gpu_pid, "tid": stream, "ts": tsv(ts),
                       "dur": tsv(dur) if hip else int(dur), "args": {"device": gpu_pid, "stream": stream, **ids, **more}})
        if full:
            events.append({"ph": "f", "id": c, "pid": gpu_pid, "tid": stream, "ts": tsv(ts), "cat": "ac2g",
                           "name": "ac2g", "bp": "e"})

    captured: list[str] = []  # the kernels of the captured step (each replay runs them, allocating nothing)
    capture_at = steps - 1 if graph_replays else None
    for step in range(steps):
        frame = FRAMES[step % len(FRAMES)]
        f_start = t + 1
        ops_here = []
        t = f_start + 2
        if step == capture_at:  # cudaStreamBeginCapture: the step's kernels are recorded, not run
            capturing = True
            launch(t, f"{runtime}StreamBeginCapture", op_no)
            t += 3
        for k in range(ops_per_step):
            name = OPS[int(rng.integers(len(OPS)))]
            o_start = t
            dur = float(rng.integers(40, 90))
            kernel = KERNELS[OPS.index(name)]
            k_start, k_dur = o_start + 5, dur - 10
            c = launch(o_start + 1, f"{runtime}LaunchKernel", op_no, kernel)
            if capturing:
                captured.append(kernel)
                kernel = None  # nothing runs on the GPU during capture
            else:
                gpu_span(k_start, k_dur, kernel, c)
            # allocations inside the kernel's run, each at its own microsecond
            if big_alloc and op_no == 0:
                memory(k_start + 1, dev, big_alloc, gpu_addr(big_alloc), name, frame, kernel)
            n = int(rng.integers(1, 4))
            for j in range(n):
                size = int(rng.choice([512, 4096, 1 << 20, 3 << 20, 6 << 20]))
                addr = gpu_addr(size)
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
        if capturing:  # cudaStreamEndCapture, cudaGraphInstantiate: the graph and its pool exist from here
            launch(t, f"{runtime}StreamEndCapture", op_no)
            launch(t + 3, f"{runtime}GraphInstantiate", op_no)
            t += 10
            capturing = False
        if world_size and world_size > 1:  # a collective on the GPU after each step, with one allocation in it
            c_start = t + 1
            coll = RCCL_COLLECTIVE if hip and full else COLLECTIVE
            events.append({"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": pid, "tid": tid,
                           "ts": tsv(c_start), "dur": 40, "args": {"External id": op_no}})
            op = "c10d::allreduce_"
            comms = {}
            if full:  # torch's record_param_comms op around it (ParamCommsUtils), with the collective's params
                comms = {"Collective name": "allreduce", "dtype": "Float", "In msg nelems": 2 << 20,
                         "Out msg nelems": 2 << 20, "In split size": "[]", "Out split size": "[]",
                         "Global rank start": 0, "Global rank stride": 1, "Group size": world_size,
                         "Process Group Name": "0", "Process Group Description": "default_pg",
                         "Process Group Ranks": str(list(range(world_size))), "Rank": rank or 0}
                events.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": pid, "tid": tid,
                               "ts": tsv(c_start + 1), "dur": 36, "args": {"External id": op_no + 1, **comms}})
                op = "record_param_comms (allreduce)"  # as the reader names it: the op and its collective
            truth.collectives += 1
            c = launch(c_start + 2, f"{runtime}LaunchKernel", op_no, coll)
            gpu_span(c_start + 2, 30, coll, c, stream=9, **comms)
            size = 8 << 20
            if caching is not None:
                addr = gpu_addr(size)
            else:
                addr = next_addr
                next_addr += size + 512
            memory(c_start + 5, dev, size, addr, op, frame, coll)
            memory(c_start + 30, dev, -size, addr, op, frame, coll)
            op_no += 1 + bool(full)
            t = c_start + 45
        events.append({"ph": "X", "cat": "python_function", "name": frame, "pid": pid, "tid": tid,
                       "ts": tsv(f_start), "dur": tsv(t - f_start), "args": {"Python id": 2 + step,
                                                                              "Python parent id": 1}})
        t += 5
    for _ in range(graph_replays):  # each replay: one graph launch, the captured kernels, no allocation
        c = launch(t, f"{runtime}GraphLaunch", op_no)
        truth.graph_launches += 1
        k_at = t + 4
        for kernel in captured:
            gpu_span(k_at, 6, kernel, c, **({"graph id": 1} if full else {}))
            k_at += 7
        t = k_at + 2
    top["dur"] = tsv(t - ts0_us)
    top["ts"] = tsv(ts0_us)
    mem.sort(key=lambda m: (m[0], m[1]))
    truth.events = [m[3] for m in mem]
    events.extend(m[2] for m in mem)
    if full:  # Kineto's order (as the shared real files hold it): CPU ops, the [memory] events, Python frames,
        # runtime calls, then the GPU's spans: a file cut mid-write loses the end of that order
        rank_of = {"cpu_op": 0, "cpu_instant_event": 1, "python_function": 2, "cuda_runtime": 3, "ac2g": 4}
        body = sorted(events, key=lambda e: (rank_of.get(e.get("cat"), 5) if e.get("pid") != gpu_pid or
                                             e.get("cat") != "ac2g" else 5, e["ts"]))
    else:
        order = rng.permutation(len(events))  # the profiler writes spans and instants in its own order
        body = [events[i] for i in order]
    body.append({"name": "process_name", "ph": "M", "ts": tsv(ts0_us), "pid": pid, "tid": 0, "args": {"name": "python"}})
    if full:  # Kineto's own span of the whole trace and its iteration mark (string pids)
        body.append({"ph": "X", "cat": "Trace", "ts": tsv(ts0_us), "dur": tsv(t - ts0_us), "pid": "Spans",
                     "tid": "PyTorch Profiler", "name": "PyTorch Profiler (0)", "args": {"Op count": 0}})
        body.append({"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g", "pid": "Traces",
                     "tid": "Trace PyTorch Profiler", "ts": tsv(ts0_us)})
    props = gpu if full else {"name": gpu["name"], "totalGlobalMem": gpu["totalGlobalMem"]}
    truth.device_name, truth.capacity = gpu["name"], gpu["totalGlobalMem"]
    listed = range(max(world_size or 1, device_id + 1)) if nodes_gpus is None else range(nodes_gpus)
    head = {"schemaVersion": 1, "deviceProperties": [{"id": i, **props} for i in listed]}  # the node's GPUs
    if rank is not None:
        head["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world_size or 1}
        if full:
            w = world_size or 1
            head["distributedInfo"].update({"pg_count": 1, "pg_config": [
                {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": w,
                 "ranks": list(range(w))}], "nccl_version": "2.21.5"})
    if not old_format:
        head.update({"record_shapes": 1, "with_stack": 1, "profile_memory": 1})
    if full:
        head.update({"trace_id": f"{seed:032X}", "baseTimeNanoseconds": 1_767_189_312_000_000_000})
        if hip:
            head.update({"roctracer_version": 4.1, "hip_runtime_version": 70051831, "hip_driver_version": 70051831})
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


def write_ranks(folder: Path, seed: int = 0, *, world_size: int = 2, device_type: int = 1,
                cut: dict | None = None, **kw) -> list[KinetoTruth]:
    """A folder of one trace per rank (rank r on device r, as one node runs them): their truths in rank order.
    ``cut``: {rank: share of its bytes kept} for ranks whose file was cut mid-write (the job killed); their
    truth still holds every event generated (what a reader finds is the complete part: see ``cut_events``)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    truths = []
    for r in range(world_size):
        trace, truth = profiler_trace(seed + r, rank=r, world_size=world_size, device_id=r, device_type=device_type, **kw)
        write_trace(folder / f"rank{r}.pt.trace.json", trace, cut=(cut or {}).get(r))
        truths.append(truth)
    return truths


def cut_events(path: Path) -> tuple[int, int]:
    """(the [memory] events complete in a file cut mid-write, the byte just past the last of them): the answer a
    reader of the cut file must give, found here by parsing each complete event of Kineto's layout alone."""
    data = Path(path).read_bytes()
    if data[:2] == b"\x1f\x8b":
        import zlib

        data = zlib.decompressobj(31).decompress(data)
    text = data.decode()
    start = text.index('"traceEvents": [') + len('"traceEvents": [')
    dec = json.JSONDecoder()
    n, end, i = 0, start, start
    while True:
        j = text.find("{", i)
        if j < 0:
            break
        try:
            obj, stop = dec.raw_decode(text, j)
        except ValueError:
            break
        if obj.get("name") == "[memory]":
            n, end = n + 1, stop
        i = stop
    return n, end


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
