"""A snapshot's recorded settings reach the replay (its fields, and what only its PYTORCH_CUDA_ALLOC_CONF string
holds), read as the torch release that wrote it parses them, with every option read, not understood or
contradicted said once. Expected outcomes are worked from CUDACachingAllocator.cpp and each release's parser."""

from __future__ import annotations

import json
import pickle

import pytest
from conftest import real_trace, run_cli

from veotrace.allocators.conf import MB, from_settings
from veotrace.runs.simulate import simulate

MiB = 1 << 20
BASE = 0x7F00_0000_0000
T0 = 1_760_000_000_000_000


def settings(text: str = "", **fields) -> dict:
    out = {"PYTORCH_CUDA_ALLOC_CONF": text, "max_split_size": -1, "garbage_collection_threshold": 0.0,
           "expandable_segments": False, "pinned_num_register_threads": 1, "release_lock_on_cudamalloc": False,
           "pinned_use_cuda_host_register": False, "roundup_power2_divisions": {str(1 << i): 0 for i in range(16)}}
    out.update(fields)
    return out


def write(tmp_path, trace: list[tuple], segments: list[dict], allocator_settings: dict, **top) -> object:
    entries = [{"action": a, "addr": addr, "size": size, "stream": 0, "time_us": T0 + i}
               for i, (a, addr, size) in enumerate(trace)]
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps({"segments": segments, "device_traces": [entries],
                                   "allocator_settings": allocator_settings, **top}, protocol=4))
    return path


def segment(addr: int, size: int, used: int, requested: int) -> dict:
    return {"device": 0, "address": addr, "total_size": size, "allocated_size": used, "active_size": used,
            "requested_size": requested, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
            "is_expandable": False, "frames": [],
            "blocks": [{"address": addr, "size": used, "requested_size": requested, "state": "active_allocated",
                        "frames": []}]}


@pytest.mark.parametrize("string, reproduced", [("max_split_size_mb:64,max_non_split_rounding_mb:100", (1, 0)),
                                                ("max_split_size_mb:64", (1, 1))])
def test_an_option_only_the_string_holds_reaches_the_replay(tmp_path, string, reproduced):
    """max_split_size 64 MiB (a field) and max_non_split_rounding_mb 100 (only in the string). A 100 MiB segment A
    is allocated and freed; malloc(80 MiB): get_free_block's lower bound is A; 80 >= max_split_size, so the
    oversize rule asks A.size >= 80 MiB + max_non_split_rounding: 100 >= 180 is false, A is taken whole
    (should_split: 80 is not under max_split_size): one device allocation. Under the default rounding (20 MiB),
    100 >= 100 refuses A and a second segment of 80 MiB follows: the trace recorded one, so that model makes
    one extra."""
    trace = [("segment_alloc", BASE, 100 * MiB), ("alloc", BASE, 100 * MiB), ("free_requested", BASE, 100 * MiB),
             ("free_completed", BASE, 100 * MiB), ("alloc", BASE, 80 * MiB)]
    path = write(tmp_path, trace, [segment(BASE, 100 * MiB, 100 * MiB, 80 * MiB)],
                 settings(string, max_split_size=64 * MiB), external_annotations=[])
    run = simulate([path], policy=["torch"])
    v = run.value.validation
    assert (v["reproduced"], v["extra"]) == reproduced
    conf = run.value.params["torch_conf"]
    assert conf["max_non_split_rounding_size"] == (100 if reproduced == (1, 0) else 20) * MiB
    assert "PYTORCH_CUDA_ALLOC_CONF" in conf["recorded"]["read"]


def test_options_not_understood_and_contradictions_are_said_once(tmp_path):
    """The fields are the allocator's values when the snapshot was taken: a string that says otherwise loses,
    and says so; an option the model does not follow is named in one warning."""
    conf = from_settings(settings("max_split_size_mb:128,large_segment_size_mb:40,pinned_use_cuda_host_register:True",
                                  max_split_size=256 * MiB), torch_release="2.11")
    assert conf.max_split_size == 256 * MB
    (odd,) = conf.recorded["not_understood"]
    assert odd.startswith("large_segment_size_mb (not modelled")
    (contra,) = conf.recorded["contradictions"]
    assert "max_split_size to 128 MiB but the field holds 256 MiB: the field wins" in contra
    assert conf.notes and conf.notes[0].startswith("pinned_use_cuda_host_register:True: accepted")
    trace = [("segment_alloc", BASE, 20 * MiB), ("alloc", BASE, 2 * MiB)]
    path = write(tmp_path, trace, [segment(BASE, 20 * MiB, 2 * MiB, 2 * MiB)],
                 settings("max_split_size_mb:128,bogus_option:1"), external_annotations=[])
    r = run_cli("simulate", path, "-p", "torch", "-f", "json")
    assert r.exit_code == 0, r.stderr
    assert r.stderr.count("bogus_option") == 1 and "Warning: the recorded PYTORCH_CUDA_ALLOC_CONF" in r.stderr
    assert r.stderr.count("contradicts") == 0 and "the field wins" in r.stderr  # 128 MiB in the string, -1 the field


@pytest.mark.parametrize("name, release", [("constructorsun_memory_snapshot.pickle", "2.8"),
                                           ("magma27_memory_snapshot.pickle", "2.13"),
                                           ("cranberrii_memory_snapshot.pickle", "2.1")])
def test_the_release_comes_from_the_snapshots_keys(name, release):
    """Keys each release writes from its first on (time_us 2.2, allocator_settings 2.3, external_annotations
    2.5, graph_capture_record_stream_reuse 2.9, user_metadata 2.10, host_segments 2.14): constructorsun has
    allocator_settings and annotations but no graph_capture_record_stream_reuse (2.5-2.8), magma27 has
    user_metadata and no host_segments (2.10-2.13), cranberrii no time_us (2.0-2.1): the last is assumed."""
    d = json.loads(run_cli("simulate", real_trace(name), "-p", "torch", "-f", "json").stdout)
    conf = d["params"]["torch_conf"]
    assert conf["torch_release"] == release and "the snapshot's keys" in conf["recorded"]["release_from"]
    given = json.loads(run_cli("simulate", real_trace(name), "-p", "torch", "-f", "json", "--torch-version",
                               "2.10.1+cu128").stdout)["params"]["torch_conf"]
    assert given["torch_release"] == "2.10" and given["recorded"]["release_from"] == "--torch-version"


def test_a_fraction_needs_the_devices_memory_and_then_limits_the_replay(tmp_path):
    """--fraction 0.5 on a 100 MiB device: 50 MiB allowed. A 40 MiB segment is kept; malloc(20 MiB): 40 + 20 > 50
    (alloc_block refuses it before cudaMalloc), nothing cached to release: an OOM, which the device's 100 MiB
    alone would have served."""
    trace = [("segment_alloc", BASE, 40 * MiB), ("alloc", BASE, 40 * MiB), ("segment_alloc", BASE + 40 * MiB, 20 * MiB),
             ("alloc", BASE + 40 * MiB, 20 * MiB)]
    path = write(tmp_path, trace, [segment(BASE, 40 * MiB, 40 * MiB, 40 * MiB),
                                   segment(BASE + 40 * MiB, 20 * MiB, 20 * MiB, 20 * MiB)], settings(),
                 external_annotations=[])
    r = run_cli("simulate", path, "-p", "torch", "--fraction", "0.5", "-f", "json")
    assert r.exit_code == 2 and "a fraction with no device memory to apply it to" in r.stderr
    limited = json.loads(run_cli("simulate", path, "-p", "torch", "--fraction", "0.5", "--capacity", "100MiB",
                                 "-f", "json").stdout)["policies"][0]
    free = json.loads(run_cli("simulate", path, "-p", "torch", "--capacity", "100MiB", "-f", "json").stdout)["policies"][0]
    assert (limited["ooms"], free["ooms"]) == (1, 0)


def _oom_snapshot(tmp_path, device_free: int):
    """One 10 MiB allocation (a 10 MiB segment: get_allocation_size rounds >= 10 MiB to 2 MiB), kept; then a
    malloc of 20 MiB that failed (the oom entry: device_free as cudaMemGetInfo said, the rounded size)."""
    entries = [{"action": "segment_alloc", "addr": BASE, "size": 10 * MiB, "stream": 0, "time_us": T0},
               {"action": "alloc", "addr": BASE, "size": 10 * MiB, "stream": 0, "time_us": T0 + 1},
               {"action": "oom", "device_free": device_free, "size": 20 * MiB, "stream": 0, "time_us": T0 + 2}]
    path = tmp_path / "oom.pickle"
    path.write_bytes(pickle.dumps({"segments": [segment(BASE, 10 * MiB, 10 * MiB, 10 * MiB)],
                                   "device_traces": [entries], "allocator_settings": settings(),
                                   "external_annotations": []}, protocol=4))
    return path


def test_a_recorded_oom_counts_for_the_settings_in_use(tmp_path):
    """device_free 5 MiB: the budget is the 10 MiB the model holds plus 5 MiB; the 20 MiB request needs a new
    segment (nothing cached), 30 > 15: the model reproduces the OOM. The settings in use count it in
    simulate's row (the request failed) and no tune candidate serves it: no recommendation."""
    path = _oom_snapshot(tmp_path, 5 * MiB)
    sim = json.loads(run_cli("simulate", path, "-p", "torch", "-f", "json").stdout)
    (row,) = sim["policies"]
    assert row["in_use"] and row["ooms"] == 1 and row["recorded_ooms"]["counted"] == 1
    assert sim["params"]["recorded_ooms"][0]["what_if"]["reproduced"] is True
    out = json.loads(run_cli("tune", path, "-f", "json").stdout)
    assert out["recommendation"]["conf"] is None
    assert "serves the request that ran out of memory" in out["recommendation"]["why"]
    in_use = [c for c in out["candidates"] if c.get("in_use")]
    assert len(in_use) == 1 and in_use[0]["ooms"] >= 1


def test_an_oom_the_model_does_not_reproduce_gets_no_fix(tmp_path):
    """device_free 100 MiB: 10 + 20 MiB fits the 110 MiB budget, so the model serves what the real run could not
    (another process, the CUDA context...): the row still counts the recorded OOM (it happened), the verdict
    says it is not reproduced, and tune recommends nothing as a fix, naming what the model leaves out."""
    path = _oom_snapshot(tmp_path, 100 * MiB)
    sim = json.loads(run_cli("simulate", path, "-p", "torch", "-p", "ideal", "-f", "json").stdout)
    by = {r["policy"]: r for r in sim["policies"]}
    assert by["torch"]["ooms"] == 1 and by["torch"]["in_use"] and by["ideal"]["ooms"] == 0
    w = sim["params"]["recorded_ooms"][0]["what_if"]
    assert w["reproduced"] is False and "other processes" in w["note"]
    text = run_cli("simulate", path, "-p", "torch").stdout
    assert "not reproduced" in text and "avoided by torch" not in text
    rec = json.loads(run_cli("tune", path, "-f", "json").stdout)["recommendation"]
    assert rec["conf"] is None and "is not reproduced" in rec["why"] and "other processes" in rec["why"]


def test_on_constructorsun_no_output_says_the_setting_in_use_would_help():
    """Recorded with expandable_segments:True, it ran out of memory on device 1 (4.94 GiB asked, 91 MiB free).
    Before: simulate's torch row said 'ooms 0' beside a what-if that torch does not avoid it, and tune
    recommended expandable_segments:True ('OOMs 0')."""
    path = real_trace("constructorsun_memory_snapshot.pickle")
    sim = json.loads(run_cli("simulate", path, "-p", "torch", "--capacity", "84298432512", "-f", "json").stdout)
    (row,) = sim["policies"]
    assert row["in_use"] and row["ooms"] == 1 and row["per_device"]["1"]["ooms"] == 1
    out = json.loads(run_cli("tune", path, "-f", "json").stdout)
    rec = out["recommendation"]
    assert rec["conf"] != "expandable_segments:True"
    assert all(c["ooms"] >= 1 for c in out["candidates"] if c.get("in_use"))
    text = run_cli("tune", path).stdout
    assert "expandable_segments:True (in use)" in text and "Recommended" not in text.split("Candidates")[0]


def test_the_recommendation_says_which_knobs_the_recording_exercised():
    """maphsge4 ran with PyTorch's defaults (no allocator_settings): a recommendation that turns
    expandable_segments on is predicted on that knob and validated on the knobs it leaves as they ran."""
    out = json.loads(run_cli("tune", real_trace("maphsge4_snapshot.pickle"), "-f", "json").stdout)
    rec = out["recommendation"]
    knobs = rec["trust"]["knobs"]
    changed = [k for k, v in out["candidates"][rec["id"]]["settings"].items() if v is not None]
    assert knobs["predicted"] == changed and not set(knobs["validated"]) & set(changed)
    assert rec["trust"]["model_does_not_know"] and rec["savings"][0]["baseline"].startswith("the settings in use")


def test_the_settings_in_use_are_kept_not_sold_as_a_saving():
    rec = json.loads(run_cli("tune", real_trace("kkaitlyn_memory_ctx256_forward_.pickle"), "-f", "json").stdout)[
        "recommendation"]
    assert rec["in_use"] and rec["export"] is None and rec["savings"] == [] and "keep them" in rec["why"]


@pytest.mark.parametrize("release, in_string", [("2.10", True), ("2.9", False)])
def test_a_gc_threshold_is_recommended_with_the_fraction_it_needs(release, in_string):
    """garbage_collection_threshold acts only under a memory fraction: the export line carries it as
    per_process_memory_fraction where the release accepts that option (2.10+), else the one Python line."""
    from dataclasses import replace

    from veotrace.allocators.conf import parse_conf
    from veotrace.tuning.space import export_lines

    conf = replace(parse_conf("garbage_collection_threshold:0.8", torch_release=release), per_process_memory_fraction=0.9)
    got = export_lines(conf, "garbage_collection_threshold:0.8")
    if in_string:
        assert {k: got[k] for k in ("export", "python")} == {
            "export": "export PYTORCH_ALLOC_CONF=garbage_collection_threshold:0.8,per_process_memory_fraction:0.9",
            "python": None}
    else:
        assert got["export"] == "export PYTORCH_ALLOC_CONF=garbage_collection_threshold:0.8"
        assert got["python"].startswith("torch.cuda.set_per_process_memory_fraction(0.9)")


def test_the_fidelity_page_names_tests_that_exist():
    """docs/concepts/allocator-fidelity.md: every rule's test is a test of the suite."""
    import ast
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    page = (root / "docs" / "concepts" / "allocator-fidelity.md").read_text()
    named = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", page)
    assert len(named) >= 20
    for file, name in named:
        tree = ast.parse((root / file).read_text())
        assert name in {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}, (file, name)
