"""Fuzz targets: every reader, and the commands added since the readers were fuzzed (fragmentation,
simulate, banks, gate's baselines, report), behind one call ``run(target, path)``; small valid seed files.

Shared by the property tests (tests/test_hardening_fuzz.py) and the coverage-guided script
(fuzz/fuzz_readers.py). A target either returns (a correct read) or raises ``VeotraceError``;
anything else, a traceback or a signal, is a bug.
"""

from __future__ import annotations

import gzip
import io
import json
import pickle
import sqlite3
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_traces"


def _consume_alloc(path: Path) -> None:
    from veotrace.sources import ReadOptions, ReadReport, iter_alloc_events

    for skip in (False, True):
        report = ReadReport()
        for _batch in iter_alloc_events([path], options=ReadOptions(skip_bad_rows=skip), report=report):
            pass


def _table(kind: str) -> Callable[[Path], None]:
    def run(path: Path) -> None:
        from veotrace.sources import read_table

        read_table([path], kind)

    return run


def _arrays(path: Path) -> None:
    from veotrace.errors import VeotraceError
    from veotrace.sources.arrays import read_array

    try:
        read_array(path)
    except VeotraceError as exc:  # several arrays or columns: read the first by name
        if "arrays:" not in str(exc) and "columns:" not in str(exc):
            raise
        name = str(exc).split(":")[-1].split(".")[0].split(",")[0].strip()
        read_array(path, name=name)


def _frames(path: Path) -> None:
    from veotrace.sources.frames import read_frame_metrics

    read_frame_metrics(path)


def _info(path: Path) -> None:
    from veotrace.sources.probe import probe

    result = probe(path)
    if result.error is not None:
        return
    for kind in result.kinds:
        try:
            loaded = result.load(kind)
            if kind == "alloc_events":
                for _b in loaded:
                    pass
        except Exception as exc:  # noqa: BLE001 - only VeotraceError may escape a reader
            from veotrace.errors import VeotraceError

            if not isinstance(exc, VeotraceError):
                raise


# ----------------------------------------------------------------------------- commands (issue 25)
def _fragmentation(path: Path) -> None:
    from veotrace.runs.fragmentation import fragmentation

    fragmentation([path]).to_dict()


def _simulate(path: Path) -> None:
    from veotrace.runs.simulate import simulate

    simulate([path], policy=["torch", "bestfit", "ideal"]).to_dict()


def _banks(path: Path) -> None:
    from veotrace.runs.banks import banks

    banks(addresses=path, elem_bytes=8).to_dict()


def _gate_baseline(path: Path) -> None:
    """A baseline file (mutated) judged against a small log: reading, checking and the comparison."""
    from veotrace.runs.gate import gate

    log = path.with_name(path.name + ".log.csv")
    if not log.exists():
        log.write_bytes(GATE_LOG)
    gate([log], baseline=path, resamples=99).to_dict()


def _report(path: Path) -> None:
    from veotrace.reporting.run import report

    out = path.with_name(path.name + ".html")
    try:
        report([path], out)
    finally:
        out.unlink(missing_ok=True)


# ----------------------------------------------------------------------------- issue 40
def _snapshot_stream(path: Path) -> None:
    """The streamed decoder against the whole read on the same file: one verdict and one answer, or a bug."""
    from fuzz.pickles import both, difference

    whole, streamed, _clean = both(path, sites=path.stat().st_size < 1 << 16)
    diff = difference(whole, streamed)
    if diff is not None:
        raise AssertionError(f"the whole and the streamed read differ: {diff}")
    if isinstance(whole["events"], str) and "CorruptPickle" in whole["events"]:
        whole, streamed, _clean = both(path, sites=False, skip=True, events_only=True)  # --skip-bad-rows' rows
        diff = difference(whole, streamed)
        if diff is not None:
            raise AssertionError(f"the whole and the streamed read keep different rows: {diff}")


def _checkpoint(command: str) -> Callable[[Path], None]:
    """The follower of ``command`` resumed from a (mutated) checkpoint, over the log beside it, to its end."""
    def run(path: Path) -> None:
        from fuzz.checkpoints import resume

        resume(command, path)
    return run


def _hostile(name: str) -> Callable[[Path], None]:
    """Issue 47's targets (``fuzz.hostile``)."""
    def run(path: Path) -> None:
        from fuzz import hostile

        getattr(hostile, f"run_{name}")(path)
    return run


#: target name -> the reader call it exercises.
TARGETS: dict[str, Callable[[Path], None]] = {
    "alloc_events": _consume_alloc,
    "gpu_activity": _table("gpu_activity"),
    "segments": _table("segments"),
    "blocks": _table("blocks"),
    "ncu_metrics": _table("ncu_metrics"),
    "arrays": _arrays,
    "frames": _frames,
    "info": _info,
    # whole commands on the file, through their run functions (the CLI's path without the printing)
    "fragmentation": _fragmentation,
    "simulate": _simulate,
    "banks": _banks,
    "gate_baseline": _gate_baseline,
    "report": _report,
    # issue 40: the streamed snapshot decoder (against the whole read), and the --state checkpoint loader
    "snapshot_stream": _snapshot_stream,
    "checkpoint_entropy": _checkpoint("entropy"),
    "checkpoint_bursts": _checkpoint("bursts"),
    "checkpoint_fragmentation": _checkpoint("fragmentation"),
    "checkpoint_gate": _checkpoint("gate"),
    # issue 47: names as bytes, NaN/inf in a snapshot's numbers (both routes), Unicode digits on the command line
    "names": _hostile("names"),
    "snapshot_numbers": _hostile("snapshot_numbers"),
    "cli_numbers": _hostile("cli_numbers"),
}
#: Issue 47's targets: inputs of their own (``fuzz.hostile``).
HOSTILE_TARGETS = ("names", "snapshot_numbers", "cli_numbers")
#: The targets fed their own seeds and mutations (fuzz.pickles, fuzz.checkpoints), not the readers' files.
STATE_TARGETS = ("checkpoint_entropy", "checkpoint_bursts", "checkpoint_fragmentation", "checkpoint_gate")
#: The command targets: slower per input than the readers (a run each), fuzzed on fewer seeds.
COMMAND_TARGETS = ("fragmentation", "simulate", "banks", "gate_baseline", "report")


def run(target: str, path: Path) -> None:
    """Run ``target`` on ``path``; raises VeotraceError for a refused file, anything else is a bug."""
    TARGETS[target](path)


# ----------------------------------------------------------------------------- seeds
def _snapshot_dict() -> bytes:
    seg = {"device": 0, "address": 1 << 20, "total_size": 2 << 20, "allocated_size": 1 << 20,
           "active_size": 1 << 20, "requested_size": 1000000, "stream": 0, "segment_type": "large",
           "segment_pool_id": (0, 0), "is_expandable": False,
           "blocks": [{"address": 1 << 20, "size": 1 << 20, "requested_size": 1000000, "state": "active_allocated"},
                      {"address": 2 << 20, "size": 1 << 20, "state": "inactive"}]}
    trace = [{"action": a, "addr": 1 << 20, "size": 1 << 20, "stream": 0, "time_us": 1000 + i,
              "frames": [{"filename": "x.py", "line": 3, "name": "f"}]}
             for i, a in enumerate(["segment_alloc", "alloc", "free_requested", "free_completed", "alloc"])]
    return pickle.dumps({"segments": [seg], "device_traces": [trace]}, protocol=4)


def _snapshot_list() -> bytes:
    seg = {"device": 1, "address": 1 << 21, "total_size": 1 << 21, "allocated_size": 512, "active_size": 512,
           "stream": 0, "segment_type": "small",
           "blocks": [{"size": 512, "state": "active_allocated", "history": [{"addr": 1 << 21, "real_size": 500}]},
                      {"size": (1 << 21) - 512, "state": "inactive"}]}
    return pickle.dumps([seg, dict(seg, address=1 << 23)], protocol=4)


def _npz() -> bytes:
    import numpy as np

    buf = io.BytesIO()
    np.savez(buf, addrs=np.arange(6, dtype=np.uint64) * 4096, epe=np.linspace(0, 1, 6))
    return buf.getvalue()


def _npy() -> bytes:
    import numpy as np

    buf = io.BytesIO()
    np.save(buf, np.arange(8, dtype=np.int64) * 512)
    return buf.getvalue()


def _parquet_events() -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from veotrace.schemas import ALLOC_EVENTS, conform

    table = pa.table({"ts_ns": [1, 2, 3], "seq": [0, 1, 2], "op": ["alloc", "free", "alloc"],
                      "size_bytes": [4096, 4096, 512], "address": pa.array([16, 16, 32], pa.uint64()),
                      "stream": [0, 0, 0], "device": pa.array([0, 0, 0], pa.int32()),
                      "source_file": ["x", "x", "x"]})
    buf = io.BytesIO()
    pq.write_table(conform(table, ALLOC_EVENTS), buf)
    return buf.getvalue()


def _parquet_frames() -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.table({"frame": [0, 1, 2, 3], "coherence_score": [0.9, 0.8, 0.1, 0.01]}), buf)
    return buf.getvalue()


def _sqlite(tmp: Path) -> bytes:
    """A tiny nsys-shaped export (kernels, strings, memory events)."""
    path = tmp / "seed.sqlite"
    path.unlink(missing_ok=True)
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE EXPORT_META_DATA (name TEXT, value TEXT);
        INSERT INTO EXPORT_META_DATA VALUES ('EXPORT_SCHEMA_VERSION_MAJOR', '3'), ('EXPORT_SCHEMA_VERSION_MINOR', '0');
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO StringIds VALUES (1, 'sgemm'), (2, 'relu');
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId INTEGER, streamId INTEGER,
            correlationId INTEGER, shortName INTEGER, demangledName INTEGER, gridX INTEGER, blockX INTEGER);
        INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (100, 200, 0, 7, 1, 1, 1, 1, 1), (300, 450, 0, 7, 2, 2, 2, 1, 1);
        CREATE TABLE CUDA_GPU_MEMORY_USAGE_EVENTS (start INTEGER, globalPid INTEGER, deviceId INTEGER,
            contextId INTEGER, address INTEGER, pc INTEGER, bytes INTEGER, memKind INTEGER,
            memoryOperationType INTEGER, name INTEGER, correlationId INTEGER, streamId INTEGER);
        INSERT INTO CUDA_GPU_MEMORY_USAGE_EVENTS VALUES (10, 1, 0, 1, 4096, 0, 1024, 1, 0, NULL, 1, 7),
            (20, 1, 0, 1, 4096, 0, 1024, 1, 1, NULL, 2, 7);
    """)
    con.commit()
    con.close()
    data = path.read_bytes()
    path.unlink()
    return data


ALLOC_CSV = (b"timestamp,op_type,size_bytes,address,stream,device\n"
             b"1000,alloc,4096,0x1000,0,0\n2000,alloc,8192,0x2000,0,0\n3000,free,4096,0x1000,0,0\n"
             b"4000,alloc,512,4096,1,0\n5000,defrag,0,,0,0\n")
ALLOC_JSONL = (b'{"timestamp": 1000, "op_type": "alloc", "size_bytes": 4096, "address": "0x1000"}\n'
               b'{"timestamp": 2000, "op_type": "free", "size_bytes": 4096, "address": 4096}\n'
               b'{"timestamp": 3000, "op_type": "alloc", "size_bytes": 64}\n')
FRAMES_CSV = b"frame,id_match_rate,flow_l2_px,clip_entropy_bits,coherence_score\n0,0.9,1.0,2.0,0.5\n1,0.8,1.5,2.1,0.4\n2,0.3,9.0,3.5,0.01\n"
FRAMES_JSON = json.dumps({"frames": [{"frame": i, "coherence_score": 0.9 - i / 10} for i in range(4)]}).encode()
FRAMES_JSONL = b'{"frame": 0, "id_match_rate": 0.9}\n{"frame": 1, "id_match_rate": 0.5}\n'


#: A log of 400 allocations over 40 s (gate's run against a baseline seed needs enough 1 s windows).
GATE_LOG = b"timestamp,op_type,size_bytes\n" + b"".join(
    b"%d,alloc,%d\n" % (i * 100_000_000, 4096 << (i * 7 % 9)) for i in range(400))


def _baseline(tmp: Path) -> bytes:
    """An entropy baseline of GATE_LOG with 1 s windows (as 'entropy --save-baseline' writes it)."""
    from veotrace.runs.entropy import entropy

    log, out = tmp / "gate-seed.csv", tmp / "gate-seed.json"
    log.write_bytes(GATE_LOG)
    entropy([log], window="1s", save_baseline=out)
    data = out.read_bytes()
    log.unlink()
    out.unlink()
    return data


def _addresses() -> bytes:
    import numpy as np

    buf = io.BytesIO()
    np.save(buf, (np.arange(64, dtype=np.uint64) * 8 + np.uint64(2**63)) ^ np.uint64(0x40))
    return buf.getvalue()


def seeds(tmp: Path) -> dict[str, bytes]:
    """Small valid files of every input kind, by a descriptive name (tmp: scratch folder for SQLite)."""
    out = {
        "alloc.csv": ALLOC_CSV,
        "alloc.csv.gz": gzip.compress(ALLOC_CSV, mtime=0),
        "alloc.jsonl": ALLOC_JSONL,
        "snapshot.pickle": _snapshot_dict(),
        "segments.pkl": _snapshot_list(),
        "arrays.npz": _npz(),
        "array.npy": _npy(),
        "events.parquet": _parquet_events(),
        "frames.parquet": _parquet_frames(),
        "frames.csv": FRAMES_CSV,
        "frames.json": FRAMES_JSON,
        "frames.jsonl": FRAMES_JSONL,
        "nsys.sqlite": _sqlite(tmp),
        "baseline.json": _baseline(tmp),
        "addresses.npy": _addresses(),
    }
    for name in ("nsys/cuda_gpu_trace.csv", "ncu/l2_details.csv"):
        path = SAMPLES / name
        if path.exists():
            data = path.read_bytes()
            out[path.name] = data[: data.rfind(b"\n", 0, 6000) + 1] if len(data) > 6000 else data
    return out


#: Which targets each seed feeds (a mutated file is also run through ``info``).
SEED_TARGETS = {
    "alloc.csv": ("alloc_events",), "alloc.csv.gz": ("alloc_events",), "alloc.jsonl": ("alloc_events",),
    "snapshot.pickle": ("alloc_events", "segments", "blocks"), "segments.pkl": ("segments", "blocks"),
    "arrays.npz": ("arrays",), "array.npy": ("arrays",), "events.parquet": ("alloc_events",),
    "frames.parquet": ("frames",), "frames.csv": ("frames",), "frames.json": ("frames",), "frames.jsonl": ("frames",),
    "nsys.sqlite": ("gpu_activity", "alloc_events"), "cuda_gpu_trace.csv": ("gpu_activity",),
    "l2_details.csv": ("ncu_metrics",), "baseline.json": (), "addresses.npy": ("arrays",),
}
#: Which command targets each seed feeds (a subset of the seeds: a command run costs more than a read).
SEED_COMMANDS = {
    "alloc.csv": ("fragmentation", "simulate", "report"), "snapshot.pickle": ("fragmentation", "simulate", "report"),
    "alloc.jsonl": ("fragmentation",), "events.parquet": ("simulate",), "nsys.sqlite": ("report",),
    "addresses.npy": ("banks",), "array.npy": ("banks",), "arrays.npz": ("report",), "frames.csv": ("report",),
    "baseline.json": ("gate_baseline",), "l2_details.csv": ("report",),
}
