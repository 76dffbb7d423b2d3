"""Size classes in words (issue 39): by default the classes stop at 4 MiB (the seed's page-level symbols),
so on GPU traces most bytes fall in the top class, labelled '12 (4.0 MiB)' though it holds every size
above 2 MiB. The bottom and top classes are named for what they hold, a note names the option when more
than a quarter of the allocations pile into either, and --auto-classes takes the classes from the data
(the same classes on both sides of a diff or a gate)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import run_cli
from veotrace.analysis.entropy.entropy import size_classes
from veotrace.analysis.entropy.entropy_notes import EDGE_CLASS_SHARE, class_label

MIB = 1 << 20


def _log(path, sizes, seed=0):
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.integers(10**8, 2 * 10**9, len(sizes)))
    path.write_text("timestamp,op_type,size_bytes,address,stream,device\n"
                    + "".join(f"{ts},alloc,{s},{hex(0x7F0000000000 + i * 2**30)},0,0\n" for i, (ts, s) in enumerate(zip(t, sizes))))
    return path


def test_the_bottom_and_top_classes_are_named_for_what_they_hold():
    assert class_label(12, 2, 12) == "> 2 MiB" and class_label(2, 2, 12) == "≤ 4 KiB"
    assert class_label(11, 2, 12) == "1 MiB-2 MiB"
    # what the labels say is what size_classes does: 2 MiB + 1 B and 1 GiB are both in the top class
    assert size_classes(np.array([2 * MIB + 1, 1 << 30, 2 * MIB, 1]), 2, 12).tolist() == [12, 12, 11, 2]


def test_a_note_names_the_option_when_a_quarter_piles_into_the_top_class(tmp_path):
    sizes = [8 * MIB] * 60 + [64 << 10] * 40  # 60% above 2 MiB
    r = run_cli("entropy", _log(tmp_path / "big.csv", sizes), "--window", "20s", "-f", "json")
    out = json.loads(r.stdout)
    (note,) = [n for n in out["summary"]["notes"] if "top class" in n]
    assert "60% in the top class (> 2 MiB, --max-class 12" in note and "--auto-classes" in note
    assert "top class" in r.stderr  # and on stderr, as every note
    assert out["params"]["class_labels"] == {"bottom": "≤ 4 KiB", "top": "> 2 MiB"}
    few = [8 * MIB] * 20 + [64 << 10] * 80
    out = json.loads(run_cli("entropy", _log(tmp_path / "few.csv", few), "--window", "20s", "-f", "json").stdout)
    assert 20 / 100 <= EDGE_CLASS_SHARE and not [n for n in out["summary"]["notes"] if "top class" in n]


def test_auto_classes_tell_the_large_sizes_apart_and_match_on_both_sides(tmp_path):
    sizes = [8 * MIB, 64 * MIB, 512 * MIB, 64 << 10] * 25
    path = _log(tmp_path / "big.csv", sizes)
    fixed = json.loads(run_cli("entropy", path, "--window", "20s", "-f", "json").stdout)
    auto = json.loads(run_cli("entropy", path, "--window", "20s", "--auto-classes", "-f", "json").stdout)
    assert auto["params"]["classes_seen"] == [6, 19] and auto["params"]["auto_classes"] is True
    assert not [n for n in auto["summary"]["notes"] if "top class" in n]
    # three sizes above 2 MiB were one class; now four classes, so more entropy in every full window
    assert auto["summary"]["mean_entropy_bits"] > fixed["summary"]["mean_entropy_bits"]
    assert auto["summary"]["mean_entropy_bits"] == pytest.approx(2.0, abs=0.3)
    other = _log(tmp_path / "other.csv", [8 * MIB] * 100, seed=1)
    diff = json.loads(run_cli("diff", path, other, "-f", "json").stdout)
    labels = {c["class"]: c["label"] for c in diff["size_classes"]["classes"]}
    assert labels[13] == "4 MiB-8 MiB" and labels[19] == "256 MiB-512 MiB" and min(labels) == 6
    assert all(c["before"] + c["after"] >= 0 for c in diff["size_classes"]["classes"])
