"""Seeded synthetic Nsight Systems SQLite exports with known contents (FORMATS.md A.4-A.5).

The tables, columns and metadata follow real exports of three schema generations:

- ``"2021.5"``: schema 2.7.0, ``EXPORT_META_DATA``, no ENUM_* tables (like casio_output-file.sqlite);
- ``"2022.4"``: schema 3.0.0, ``EXPORT_META_DATA`` and ENUM_* tables (like lianhang_report1.sqlite);
- ``"2024.6"``: schema 3.16.1, ``META_DATA_EXPORT`` / ``META_DATA_CAPTURE``, kernels with
  ``greenContextId``, memory events with ``streamId`` and memory-pool columns.

``write_export(path, ...)`` returns the ground truth: every kernel, memcpy, memset and memory event
as written, in numpy arrays. Memory events are allocations at random times, each freed later or
never, on two devices; they are stored shuffled unless ``time_ordered``. ``python -m
veotrace.synth.nsys OUT.sqlite`` writes the sample in ``sample_traces/nsys/``.
"""

from __future__ import annotations

import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

GENERATIONS = {"2021.5": ("2021.5.2.53", "2.7.0"), "2022.4": ("2022.4.2.1", "3.0.0"),
               "2024.6": ("2024.6.2.225", "3.16.1")}
KERNEL_NAMES = (  # (demangled, short, mangled)
    ("vecAdd(double *, double *, double *, int)", "vecAdd", "_Z6vecAddPdS_S_i"),
    ("void gemm_kernel<float, 128>(const float *, const float *, float *, int)", "gemm_kernel",
     "_Z11gemm_kernelIfLi128EEvPKfS1_Pfi"),
    ("void reduce_sum<256>(const float *, float *, int)", "reduce_sum", "_Z10reduce_sumILi256EEvPKfPfi"),
)
BASE_ADDRESS = 0x7F00_0000_0000
_MEMCPY_ENUM = ["Unknown", "Host-to-Device", "Device-to-Host", "Host-to-Array", "Array-to-Host", "Array-to-Array",
                "Array-to-Device", "Device-to-Array", "Device-to-Device", "Host-to-Host", "Peer-to-Peer",
                "Unified Host-to-Device", "Unified Device-to-Host", "Unified Device-to-Device"]
_MEM_KIND_ENUM = ["Pageable", "Pinned", "Device", "Array", "Managed", "Device Static", "Managed Static", "Unknown"]


@dataclass
class NsysExport:
    """What ``write_export`` wrote. Arrays are in the order of the file's rows (``memory`` too)."""

    path: Path
    generation: str
    kernels: dict[str, np.ndarray]  # start, end, device, stream, corr, name (demangled), grid*, block*
    memcpy: dict[str, np.ndarray]  # start, end, device, stream, corr, bytes, copy_kind (code)
    memset: dict[str, np.ndarray]  # start, end, device, stream, corr, bytes
    memory: dict[str, np.ndarray] | None  # start, op (0/1), bytes, address, device, stream, mem_kind (code)


def _kernel_ddl(generation: str) -> str:
    green = "greenContextId INTEGER, " if generation == "2024.6" else ""
    return ("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, "
            f"deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, {green}streamId INTEGER NOT NULL, "
            "correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, "
            "mangledName INTEGER, launchType INTEGER, cacheConfig INTEGER, registersPerThread INTEGER NOT NULL, "
            "gridX INTEGER NOT NULL, gridY INTEGER NOT NULL, gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, "
            "blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL, staticSharedMemory INTEGER NOT NULL, "
            "dynamicSharedMemory INTEGER NOT NULL, localMemoryPerThread INTEGER NOT NULL, "
            "localMemoryTotal INTEGER NOT NULL, gridId INTEGER NOT NULL, sharedMemoryExecuted INTEGER, "
            "graphNodeId INTEGER, sharedMemoryLimitConfig INTEGER)")


_MEMCPY_DDL = ("CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL, "
               "deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, "
               "globalPid INTEGER, bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL, deprecatedSrcId INTEGER, "
               "srcKind INTEGER, dstKind INTEGER, srcDeviceId INTEGER, srcContextId INTEGER, dstDeviceId INTEGER, "
               "dstContextId INTEGER, migrationCause INTEGER, graphNodeId INTEGER, virtualAddress INTEGER)")
_MEMSET_DDL = ("CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL, "
               "deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, "
               "globalPid INTEGER, value INTEGER NOT NULL, bytes INTEGER NOT NULL, graphNodeId INTEGER, memKind INTEGER)")


def _memory_ddl(generation: str) -> str:
    newer = (", streamId INTEGER, localMemoryPoolAddress INTEGER, localMemoryPoolReleaseThreshold INTEGER, "
             "localMemoryPoolSize INTEGER, localMemoryPoolUtilizedSize INTEGER, importedMemoryPoolAddress INTEGER, "
             "importedMemoryPoolProcessId INTEGER" if generation == "2024.6" else "")
    return ("CREATE TABLE CUDA_GPU_MEMORY_USAGE_EVENTS (start INTEGER NOT NULL, globalPid INTEGER NOT NULL, "
            "deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, address INTEGER NOT NULL, pc INTEGER NOT NULL, "
            "bytes INTEGER NOT NULL, memKind INTEGER NOT NULL, memoryOperationType INTEGER NOT NULL, name TEXT, "
            f"correlationId INTEGER{newer})")


def _metadata(con: sqlite3.Connection, generation: str, path: Path) -> None:
    product, schema = GENERATIONS[generation]
    major, minor, micro = schema.split(".")
    if generation == "2024.6":
        con.execute("CREATE TABLE META_DATA_EXPORT (name TEXT NOT NULL, value TEXT)")
        con.execute("CREATE TABLE META_DATA_CAPTURE (name TEXT NOT NULL, value TEXT)")
        rows = [("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"), ("EXPORT_PRODUCT_VERSION", product),
                ("EXPORT_SCHEMA_VERSION", schema), ("EXPORT_PARAM_INPUT_FILE", "report1.nsys-rep"),
                ("EXPORT_PARAM_OUTPUT_FILE", path.name)]
        con.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)", rows)
        con.executemany("INSERT INTO META_DATA_CAPTURE VALUES (?, ?)", [("CAPTURE_DURATION_NS", "2000000000")])
        return
    con.execute("CREATE TABLE EXPORT_META_DATA (name TEXT NOT NULL, value TEXT)")
    rows = [("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"), ("EXPORT_PRODUCT_VERSION", product),
            ("EXPORT_PRODUCT_DATE", generation), ("EXPORT_SCHEMA_VERSION", schema),
            ("EXPORT_SCHEMA_VERSION_MAJOR", major), ("EXPORT_SCHEMA_VERSION_MINOR", minor),
            ("EXPORT_SCHEMA_VERSION_MICRO", micro), ("EXPORT_INPUT_FILE", "report1.nsys-rep"),
            ("EXPORT_OUTUPT_FILE", path.name)]  # sic: old exports misspell it
    con.executemany("INSERT INTO EXPORT_META_DATA VALUES (?, ?)", rows)


def _target_info(con: sqlite3.Connection, devices: int) -> None:
    con.execute("CREATE TABLE TARGET_INFO_GPU (vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT, "
                "busLocation TEXT, isDiscrete INTEGER, l2CacheSize INTEGER, totalMemory INTEGER, "
                "memoryBandwidth INTEGER, clockRate INTEGER, smCount INTEGER, chipName TEXT)")
    con.executemany("INSERT INTO TARGET_INFO_GPU VALUES (?,?,?,?,?,?,?,?,?,?,?)", [
        (281474976710656, d, "NVIDIA A100-PCIE-40GB", f"0000:{0x81 + d:02x}:00.0", 1, 41943040, 42358472704,
         1555200000000, 1410000000, 108, "GA100") for d in range(devices)])
    con.execute("CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT)")
    con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (1700000000000000000, "
                "'2023-11-14T22:13:20', '2023-11-14T22:13:20')")


def _enums(con: sqlite3.Connection) -> None:
    tables = {"ENUM_CUDA_MEMCPY_OPER": _MEMCPY_ENUM, "ENUM_CUDA_MEM_KIND": _MEM_KIND_ENUM,
              "ENUM_CUDA_DEV_MEM_EVENT_OPER": ["Allocation", "Deallocation"]}
    for table, labels in tables.items():
        con.execute(f"CREATE TABLE {table} (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT)")
        con.executemany(f"INSERT INTO {table} VALUES (?, ?, ?)",
                        [(i, label.upper().replace(" ", "_").replace("-", "_"), label) for i, label in enumerate(labels)])


def _activity(rng: np.random.Generator, n: int, span_ns: int, devices: int) -> dict[str, np.ndarray]:
    start = np.sort(rng.integers(1_000_000, span_ns, n))
    return {"start": start, "end": start + rng.integers(2_000, 900_000, n), "device": rng.integers(0, devices, n),
            "stream": rng.integers(7, 12, n), "corr": np.arange(n) * 3 + 100}


def memory_events(rng: np.random.Generator, n_events: int, span_ns: int, devices: int = 2,
                  time_ordered: bool = False) -> dict[str, np.ndarray]:
    """``n_events`` alloc/free rows: each allocation freed later, or never when it comes last."""
    n_alloc = (n_events + 1) // 2
    n_free = n_events - n_alloc
    alloc_t = rng.integers(1_000_000, span_ns, n_alloc)
    size = (rng.integers(1, 1 << 14, n_alloc) * 512).astype(np.int64)
    address = BASE_ADDRESS + np.cumsum(size + 4096) - size
    device = rng.integers(0, devices, n_alloc)
    stream = rng.integers(7, 12, n_alloc)
    kind = rng.choice([2, 2, 2, 2, 1, 4], n_alloc)  # mostly device memory, some pinned and managed
    freed = rng.permutation(n_alloc)[:n_free]
    free_t = alloc_t[freed] + rng.integers(1_000, 50_000_000, n_free)

    def both(a: np.ndarray) -> np.ndarray:
        return np.concatenate((a, a[freed]))

    ev = {"start": np.concatenate((alloc_t, free_t)), "op": np.concatenate((np.zeros(n_alloc, np.int64),
                                                                            np.ones(n_free, np.int64))),
          "bytes": both(size), "address": both(address), "device": both(device), "stream": both(stream),
          "mem_kind": both(kind)}
    order = np.argsort(ev["start"], kind="stable") if time_ordered else rng.permutation(n_events)
    return {k: v[order] for k, v in ev.items()}


def _insert(con: sqlite3.Connection, table: str, columns: list[np.ndarray | list]) -> None:
    rows = zip(*[c.tolist() if isinstance(c, np.ndarray) else c for c in columns])
    con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(columns))})", rows)


def write_export(path: Path, *, seed: int = 0, generation: str = "2022.4", kernels: int = 200, memcpys: int = 20,
                 memsets: int = 10, memory: int | None = 2_000, devices: int = 2, time_ordered: bool = False,
                 span_ns: int = 2_000_000_000, memory_rows: dict[str, np.ndarray] | None = None) -> NsysExport:
    """Write a synthetic nsys export to ``path`` (replaced if it exists); ``memory=None``: no memory table;
    ``memory_rows``: these memory events (``memory_events``' arrays: start, op, bytes, address, device,
    stream, mem_kind) instead of random ones."""
    if generation not in GENERATIONS:
        raise ValueError(f"generation must be one of {sorted(GENERATIONS)}")
    rng = np.random.default_rng(seed)
    path.unlink(missing_ok=True)
    con = sqlite3.connect(path)
    try:
        con.execute("PRAGMA journal_mode = OFF")
        con.execute("PRAGMA synchronous = OFF")
        _metadata(con, generation, path)
        _target_info(con, devices)
        if generation != "2021.5":
            _enums(con)
        strings = ["[Unknown]", "[kernel.kallsyms]", "cudaMalloc_v3020", "cudaFree_v3020"]
        name_ids = []
        for demangled, short, mangled in KERNEL_NAMES:
            name_ids.append(tuple(len(strings) + i for i in range(3)))
            strings += [demangled, short, mangled]
        con.execute("CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL)")
        con.executemany("INSERT INTO StringIds VALUES (?, ?)", list(enumerate(strings)))

        k = _activity(rng, kernels, span_ns, devices)
        which = rng.integers(0, len(KERNEL_NAMES), kernels)
        k["name"] = np.array([KERNEL_NAMES[w][0] for w in which], dtype=object)
        for axis, hi in (("grid_x", 40_000), ("grid_y", 4), ("grid_z", 2), ("block_x", 1025), ("block_y", 2),
                         ("block_z", 2)):
            k[axis] = rng.integers(1, hi, kernels)
        ids = np.array([name_ids[w] for w in which]).reshape(-1, 3)
        none, zero, gid = [None] * kernels, np.zeros(kernels, np.int64), np.arange(kernels)
        con.execute(_kernel_ddl(generation))
        cols = [k["start"], k["end"], k["device"], np.ones(kernels, np.int64)]
        cols += [none] if generation == "2024.6" else []
        cols += [k["stream"], k["corr"], np.full(kernels, 282087194099712), ids[:, 0], ids[:, 1], ids[:, 2],
                 np.ones(kernels, np.int64), zero, np.full(kernels, 32), k["grid_x"], k["grid_y"], k["grid_z"],
                 k["block_x"], k["block_y"], k["block_z"], zero, zero, zero, zero, gid, none, none, zero]
        _insert(con, "CUPTI_ACTIVITY_KIND_KERNEL", cols)

        c = _activity(rng, memcpys, span_ns, devices)
        c["bytes"] = rng.integers(4, 80_000_000, memcpys)
        c["copy_kind"] = rng.choice([1, 2, 8, 10], memcpys)
        none = [None] * memcpys
        con.execute(_MEMCPY_DDL)
        _insert(con, "CUPTI_ACTIVITY_KIND_MEMCPY", [
            c["start"], c["end"], c["device"], np.ones(memcpys, np.int64), c["stream"], c["corr"],
            np.full(memcpys, 282087194099712), c["bytes"], c["copy_kind"], none, np.zeros(memcpys, np.int64),
            np.full(memcpys, 2), none, none, none, none, none, none, none])

        s = _activity(rng, memsets, span_ns, devices)
        s["bytes"] = rng.integers(8, 1 << 20, memsets)
        con.execute(_MEMSET_DDL)
        _insert(con, "CUPTI_ACTIVITY_KIND_MEMSET", [
            s["start"], s["end"], s["device"], np.ones(memsets, np.int64), s["stream"], s["corr"],
            np.full(memsets, 282087194099712), np.zeros(memsets, np.int64), s["bytes"], [None] * memsets,
            np.full(memsets, 2)])

        m = None
        if memory is not None:
            m = memory_rows if memory_rows is not None else memory_events(rng, memory, span_ns, devices, time_ordered)
            n = len(m["start"])
            con.execute(_memory_ddl(generation))
            cols = [m["start"], np.full(n, 282087194099712), m["device"], np.ones(n, np.int64), m["address"],
                    np.full(n, 0x4005D0), m["bytes"], m["mem_kind"], m["op"], [None] * n, np.arange(n) + 10_000]
            if generation == "2024.6":
                cols += [m["stream"]] + [[None] * n] * 6
            else:
                m["stream"] = np.full(n, -1)  # older schemas have no streamId: read as null
            _insert(con, "CUDA_GPU_MEMORY_USAGE_EVENTS", cols)
        con.commit()
    finally:
        con.close()
    return NsysExport(path, generation, k, c, s, m)


SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "nsys" / "synthetic_memory.sqlite"
SAMPLE_ARGS = {"seed": 3, "generation": "2024.6", "kernels": 300, "memcpys": 24, "memsets": 12, "memory": 4_000}


def write_sample(path: Path = SAMPLE) -> NsysExport:
    """The committed sample ``sample_traces/nsys/synthetic_memory.sqlite`` (deterministic)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_export(path, **SAMPLE_ARGS)


if __name__ == "__main__":
    out = write_sample(Path(sys.argv[1]) if len(sys.argv) > 1 else SAMPLE)
    print(f"wrote {out.path} ({out.path.stat().st_size} bytes)")
