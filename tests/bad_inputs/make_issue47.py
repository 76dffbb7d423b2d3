"""Write the issue 47 reproducers in this folder (small, deterministic): ``python3 tests/bad_inputs/make_issue47.py``.

Snapshots with an addressed entry that has no ``addr`` (sites, view and diagnose ended in a TypeError,
fragmentation warned), a frame ``line`` that is NaN or infinite (view and report failed writing JSON), and
frame strings holding a lone surrogate (report failed in matplotlib, convert encoding). The message (or, for
a file now read, what stdout shows) of each is in EXPECTED.tsv; the commands not run there (view, report,
diagnose, convert) are in tests/test_hardening_issue47.py. Names that are not UTF-8 cannot be files of the
repository: those tests make them in a temporary folder.
"""

from __future__ import annotations

import math
import pickle
from pathlib import Path

HERE = Path(__file__).resolve().parent
T0 = 1_700_000_000_000_000


def snapshot(entries: list[dict] | None = None, frames: list[dict] | None = None) -> dict:
    """One segment of 2 MiB, and an alloc / free of a block in it with ``frames``, then ``entries``."""
    frames = frames if frames is not None else [{"filename": "train.py", "line": 12, "name": "step"}]
    seg = {"device": 0, "address": 1 << 40, "total_size": 2 << 20, "allocated_size": 4096, "active_size": 4096,
           "requested_size": 4096, "stream": 0, "segment_type": "small", "segment_pool_id": (0, 0),
           "is_expandable": False, "frames": frames,
           "blocks": [{"address": 1 << 40, "size": 4096, "requested_size": 4096, "state": "active_allocated",
                       "frames": frames},
                      {"address": (1 << 40) + 4096, "size": (2 << 20) - 4096, "requested_size": 0, "state": "inactive"}]}
    trace = [{"action": "segment_alloc", "addr": 1 << 40, "size": 2 << 20, "stream": 0, "time_us": T0, "frames": frames},
             {"action": "alloc", "addr": (1 << 40) + 8192, "size": 4096, "stream": 0, "time_us": T0 + 10, "frames": frames},
             {"action": "free_completed", "addr": (1 << 40) + 8192, "size": 4096, "stream": 0, "time_us": T0 + 20,
              "frames": frames},
             {"action": "alloc", "addr": 1 << 40, "size": 4096, "stream": 0, "time_us": T0 + 30, "frames": frames}]
    return {"segments": [seg], "device_traces": [trace + (entries or [])]}


def _baselines() -> dict[str, bytes]:
    """Gate baselines of the sample log's first 25 windows (enough for the gate to reach its comparison, as the
    issue's did) with a fingerprint that is a string or a number (an AttributeError), files of the wrong type,
    and a window entropy of 1e308 bits (numpy overflow warnings on stderr, FAIL on the slope)."""
    import json
    import sys
    import tempfile

    sys.path.insert(0, str(HERE.parents[1]))
    from veotrace.runs.entropy import entropy

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "b.json"
        entropy([HERE.parents[1] / "sample_traces" / "alloc_logs" / "alloc.log.1.csv"], save_baseline=out)
        base = json.loads(out.read_text())
    base["recorded_at"] = "2026-12-07T00:00:00.000000Z"
    windows = base["metrics"]["entropy"]["windows"]
    for key in windows:
        windows[key] = windows[key][:25]

    def changed(change) -> bytes:
        doc = json.loads(json.dumps(base))
        change(doc)
        return (json.dumps(doc) + "\n").encode()

    def entropy_bits(doc):
        doc["metrics"]["entropy"]["windows"]["entropy_bits"][1] = 1e308

    return {"baseline_fingerprint_string.json": changed(lambda d: d.update(fingerprint="abc")),
            "baseline_fingerprint_number.json": changed(lambda d: d.update(fingerprint=7)),
            "baseline_fingerprint_files_wrong.json": changed(lambda d: d["fingerprint"].update(files=[{"name": 3}])),
            "baseline_entropy_1e308.json": changed(entropy_bits)}


def files() -> dict[str, bytes]:
    no_addr = snapshot([{"action": "alloc", "size": 4096, "stream": 0, "time_us": T0 + 40,
                         "frames": [{"filename": "train.py", "line": 13, "name": "step"}]}])
    return {
        "snapshot_alloc_without_addr.pickle": pickle.dumps(no_addr, protocol=4),
        "snapshot_frame_line_nan.pickle": pickle.dumps(snapshot(frames=[
            {"filename": "train.py", "line": math.nan, "name": "step"}]), protocol=4),
        "snapshot_frame_line_inf.pickle": pickle.dumps(snapshot(frames=[
            {"filename": "train.py", "line": math.inf, "name": "step"},
            {"filename": "main.py", "line": -math.inf, "name": "main"}]), protocol=4),
        "snapshot_frame_lone_surrogate.pickle": pickle.dumps(snapshot(frames=[
            {"filename": "tra\ud800in.py", "line": 12, "name": "st\udcffep"}]), protocol=4),
    }


if __name__ == "__main__":
    for name, data in {**files(), **_baselines()}.items():
        (HERE / name).write_bytes(data)
        print(f"{name}: {len(data):,} bytes")
