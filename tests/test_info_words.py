"""`info` says only what the commands do (issue 39): a 2-element array does not 'support correlate' (which
needs 4 frames for 3 pairs), and a snapshot whose segments hold more than their listed blocks does not
show 'free in segments 0 B' without a word."""

from __future__ import annotations

import json
import pickle

import numpy as np

from tests.conftest import run_cli
from veotrace.analysis.frames.correlation import MIN_PAIRS


def test_an_array_too_short_to_correlate_does_not_support_correlate(tmp_path):
    short, long = tmp_path / "short.npy", tmp_path / "long.npy"
    np.save(short, np.array([1.0, 2.0]))
    np.save(long, np.arange(MIN_PAIRS + 1, dtype=np.float64))
    assert "correlate" not in json.loads(run_cli("info", short, "-f", "json").stdout)["files"][0]["supports"]
    assert run_cli("correlate", short, short).exit_code == 1  # what info now agrees with
    assert "correlate" in json.loads(run_cli("info", long, "-f", "json").stdout)["files"][0]["supports"]


def test_segment_bytes_in_no_listed_block_are_said(tmp_path):
    seg = {"device": 0, "address": 1 << 40, "total_size": 250 << 20, "allocated_size": 8704, "active_size": 8704,
           "requested_size": 8704, "stream": 0, "segment_type": "large",
           "blocks": [{"address": 1 << 40, "size": 8704, "requested_size": 8704, "state": "active_allocated", "frames": []}]}
    path = tmp_path / "part.pickle"
    path.write_bytes(pickle.dumps({"segments": [seg], "device_traces": [[]]}))
    (info,) = json.loads(run_cli("info", path, "-f", "json").stdout)["files"]
    assert info["details"]["blocks"]["unlisted_bytes"] == (250 << 20) - 8704
    text = " ".join(run_cli("info", path).stdout.split())
    assert "free in segments 0 B in inactive blocks; 250.0 MiB of the segments is in no listed block" in text
