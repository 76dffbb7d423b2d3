"""Write the issue 25 reproducers in this folder (small, deterministic): ``python3 tests/bad_inputs/make_issue25.py``.

Each is a valid file with one hostile value, built from the fuzz seeds (``fuzz/targets.py``) so that only
that value is wrong; the message each gives is in EXPECTED.tsv.
"""

from __future__ import annotations

import gzip
import json
import pickle
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))


def _snapshot(**extra) -> dict:
    from fuzz.targets import _snapshot_dict

    return {**pickle.loads(_snapshot_dict()), **extra}


def _backwards() -> dict:
    doc = _snapshot()
    doc["device_traces"][0][2]["time_us"] = 10
    doc["device_traces"][0][3]["time_us"] = 5
    return doc


def _baseline(**change) -> str:
    """A three-window entropy baseline (as 'entropy --save-baseline' writes it), with ``change`` applied
    to its params (keys as in params) or windows (``windows.<column>``: a list)."""
    params = {"window_s": 300.0, "step_s": 300.0, "window_events": None, "ops": ["alloc"], "min_class": 2,
              "max_class": 12, "classes": 11, "time_unit": "ns", "segments_hours": []}
    windows = {"window": [0, 1, 2], "start_ns": [0, 300000000000, 600000000000],
               "hours": [0.0, 1 / 12, 1 / 6], "events": [7, 7, 6], "entropy_bits": [1.45, 1.38, 0.92]}
    for key, value in change.items():
        (windows if key.startswith("windows.") else params)[key.removeprefix("windows.")] = value
    doc = {"schema": "veotrace-baseline/1", "veotrace_version": "0.1.0", "recorded_at": "2026-12-04T00:00:00.000000Z",
           "source": {}, "fingerprint": {"files": [{"name": "alloc.log.1.csv", "size_bytes": 492233}],
                                         "first_ns": 0, "last_ns": 900000000000, "digest": "0"},
           "metrics": {"entropy": {"params": params, "windows": windows, "x_unit": "hours", "trend": {},
                                   "segments": [], "summary": {"windows": 3, "nonempty_windows": 3}}}}
    return json.dumps(doc) + "\n"


def files() -> dict[str, bytes]:
    import numpy as np

    out = {
        # a dict key (and a value) of 5,000 digits: Python refuses to print it (4,300-digit bound)
        "pickle_int_5000_digits.pickle": pickle.dumps({10**5000: 1, "segments": [], "device_traces": []}, protocol=4),
        # the snapshot's own settings hold garbage
        "snapshot_settings_garbage.pickle": pickle.dumps(
            _snapshot(allocator_settings={"max_split_size": -1, "roundup_power2_divisions": "x"}), protocol=4),
        # trace entries 2 and 3 of device 0 go back in time (a Warning, counted: test_hardening.py)
        "snapshot_time_backwards.pickle": pickle.dumps(_backwards(), protocol=4),
        "baseline_start_1e30.json": _baseline(**{"windows.start_ns": [0, 10**30, 600000000000]}).encode(),
        "baseline_window_1e30.json": _baseline(window_s=1e30).encode(),
        "baseline_time_unit.json": _baseline(time_unit="fortnights").encode(),
    }
    # uint64 addresses of the top half of the address space; the last thread's 8 bytes would pass 2**64
    top = np.array([2**63 + 4 * i for i in range(31)] + [2**64 - 4], dtype=np.uint64)
    buf = __import__("io").BytesIO()
    np.save(buf, top)
    out["addresses_past_2_64.npy"] = buf.getvalue()
    # what cannot be a snapshot, compressed: PROTO 4 then zeros (refused at its first bytes, not at 1 GiB)
    out["zeros.pickle.gz"] = gzip.compress(b"\x80\x04\x95" + bytes(4 << 20), compresslevel=9, mtime=0)
    return out


if __name__ == "__main__":
    for name, data in files().items():
        (HERE / name).write_bytes(data)
        print(f"{name}: {len(data):,} bytes")
