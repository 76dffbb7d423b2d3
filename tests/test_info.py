"""`veotrace info`: counts, spans, devices and versions of every input form, JSON shape, bad input."""

from __future__ import annotations

import gzip
import json
import pickle
import sqlite3
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from tests.conftest import SAMPLES, real_trace, run_cli
from veotrace.synth.bursts import planted_bursts_log
from veotrace.synth.torch import synthetic_snapshot

FILE_KEYS = {"path", "format", "description", "version", "tables", "span", "devices", "streams", "details",
             "supports", "problems", "error"}


def _info(*paths: Path, code: int = 0) -> list[dict]:
    r = run_cli("info", *paths, "--format", "json")
    assert r.exit_code == code, r.stderr
    out = json.loads(r.stdout)
    assert set(out) == {"files", "skipped_files"}
    for f in out["files"]:
        assert set(f) == FILE_KEYS
    return out["files"]


def _one(path: Path) -> dict:
    (f,) = _info(path)
    return f


def test_sample_alloc_logs_folder(tmp_path):
    files = _info(SAMPLES / "alloc_logs")
    assert [Path(f["path"]).name for f in files] == ["alloc.log.1.csv", "alloc.log.2.csv.gz", "alloc.log.10.csv.zst"]
    assert [f["version"]["compression"] for f in files] == [None, "gzip", "zstd"]
    for f in files:
        assert f["format"] == "alloc-csv" and f["tables"] == {"alloc_events": 10_000}
        assert f["supports"] == ["entropy", "convert", "bursts", "diff"] and f["problems"] == []
        d = f["details"]["alloc_events"]
        assert sum(d["ops"].values()) == 10_000 and d["streams"] == [0, 1, 2, 3] and d["devices"] == [0]
    first = files[0]["span"]
    assert (first["first_ns"], first["last_ns"]) == (330_044, 284_370_005_252_903)
    assert first["duration_s"] == pytest.approx((284_370_005_252_903 - 330_044) / 1e9)
    assert files[0]["devices"] == [0] and files[0]["streams"] == [0, 1, 2, 3]


def _planted(tmp_path: Path):
    truth = planted_bursts_log(seed=2, bursts=10, frees=30)
    t = truth.table
    ops = Counter(t.column("op_type").to_pylist())
    sizes = t.filter(pa.compute.equal(t.column("op_type"), "alloc")).column("size_bytes")
    expected = {"rows": t.num_rows, "ops": dict(ops), "first": pa.compute.min(t.column("timestamp")).as_py(),
                "last": pa.compute.max(t.column("timestamp")).as_py(),
                "sizes": (pa.compute.min(sizes).as_py(), pa.compute.max(sizes).as_py())}
    return t, expected


@pytest.mark.parametrize("form", ["csv", "gz", "jsonl", "parquet"])
def test_every_log_form_gives_the_same_counts(tmp_path, form):
    table, exp = _planted(tmp_path)
    csv_path = tmp_path / "log.csv"
    pacsv.write_csv(table, csv_path)
    if form == "csv":
        path = csv_path
    elif form == "gz":
        path = tmp_path / "log.csv.gz"
        path.write_bytes(gzip.compress(csv_path.read_bytes()))
    elif form == "jsonl":
        path = tmp_path / "log.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in table.to_pylist()))
    else:
        path = tmp_path / "log.parquet"
        assert run_cli("convert", csv_path, "-o", path).exit_code == 0
    f = _one(path)
    d = f["details"]["alloc_events"]
    assert f["tables"] == {"alloc_events": exp["rows"]} and d["ops"] == exp["ops"]
    assert (d["first_ns"], d["last_ns"]) == (exp["first"], exp["last"])
    assert (d["alloc_size_bytes"]["min"], d["alloc_size_bytes"]["max"]) == exp["sizes"]
    assert d["streams"] == sorted(set(table.column("stream").to_pylist())) and d["events_without_time"] == 0
    if form == "parquet":
        assert f["format"] == "parquet" and f["version"]["schema"] == "alloc_events/1"


def test_synthetic_snapshot_on_two_devices(tmp_path):
    snap, truth = synthetic_snapshot(seed=4, devices=2, n_allocs=60)
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps(snap, protocol=5))
    f = _one(path)
    assert f["format"] == "torch-snapshot" and f["version"]["device_traces"] == 2
    assert f["tables"] == {"alloc_events": len(truth.events), "segments": truth.segments,
                           "blocks": sum(truth.block_states.values())}
    assert f["details"]["alloc_events"]["ops"] == dict(Counter(e["op"] for e in truth.events))
    assert f["details"]["alloc_events"]["devices"] == [0, 1]
    assert f["details"]["blocks"]["states"] == truth.block_states
    assert f["details"]["alloc_events"]["first_ns"] == min(e["ts_ns"] for e in truth.events)
    assert "bursts" in f["supports"]


def test_real_snapshot_without_time_us():
    f = _one(real_trace("cranberrii_memory_snapshot.pickle"))
    assert f["version"]["layout"].startswith("snapshot without time_us") and f["version"]["has_time_us"] is False
    assert f["tables"] == {"alloc_events": 10_307, "segments": 215, "blocks": 1079}
    d = f["details"]["alloc_events"]
    assert d["ops"] == {"alloc": 3505, "free_requested": 3325, "free_completed": 3325, "segment_alloc": 152}
    assert d["events_without_time"] == 10_307 and d["first_ns"] is None
    assert f["details"]["blocks"]["states"] == {"active_allocated": 802, "inactive": 277}
    # untimed, but its frees pair with its allocs: fragmentation and simulate window by events
    assert f["supports"] == ["entropy --window-events N", "convert", "fragmentation", "simulate", "tune", "sites", "view", "diff"]


def test_real_snapshots_of_other_layouts():
    magma = _one(real_trace("magma27_memory_snapshot.pickle"))
    assert magma["version"]["allocator_settings"] is True and "bursts" in magma["supports"]
    assert magma["details"]["blocks"]["states"] == {"active_allocated": 229, "inactive": 226}
    assert magma["details"]["alloc_events"]["first_ns"] % 1000 == 0  # time_us scaled to ns
    muduard = _one(real_trace("muduard_memory_snapshot.pkl"))
    assert muduard["version"]["layout"].startswith("segment list")
    assert "alloc_events" not in muduard["tables"] and muduard["devices"] == [1]
    assert "holds 255 segments (2,140 blocks) and no trace events" in muduard["problems"][0]
    assert muduard["details"]["blocks"]["states"] == {"active_allocated": 1938, "inactive": 202}
    yiyi = _one(real_trace("yiyi_oom_snapshot.pickle"))
    assert yiyi["version"]["layout"].startswith("legacy") and yiyi["details"]["alloc_events"]["ops"] == {"snapshot": 1}
    # no alloc event in its trace: entropy and bursts (which count allocs) would find nothing to count
    assert not any(c.startswith(("entropy", "bursts")) for c in yiyi["supports"] + muduard["supports"])
    # segments and blocks alone feed fragmentation (the state at the snapshot); no alloc to simulate
    assert muduard["supports"] == ["fragmentation", "sites", "view", "diff"] and "simulate" not in yiyi["supports"]
    r = run_cli("entropy", real_trace("yiyi_oom_snapshot.pickle"), "--window-events", "10")
    assert r.exit_code != 0


def test_real_npy_files():
    f = _one(real_trace("numpy_win64python2.npy"))  # Python 2 header "(2L,)"
    assert f["version"] == {"container": "npy", "npy_version": "1.0", "dtype": "<f8", "shape": [2],
                            "fortran_order": False}
    # two frames make one pair: correlate needs MIN_PAIRS (3), so info no longer lists it (issue 39)
    assert f["tables"] == {"arrays": 2} and f["supports"] == []
    obj = _one(real_trace("numpy_py3-objarr.npy"))
    assert obj["version"]["dtype"] == "|O" and obj["tables"] == {} and obj["supports"] == []
    assert any("dtype object" in p and "never unpickles" in p for p in obj["problems"])


def test_npz_lists_every_array(tmp_path):
    path = tmp_path / "run.npz"
    np.savez(path, addrs=np.arange(5, dtype=np.uint64), epe=np.array([0.5, np.nan, 2.0]))
    f = _one(path)
    assert f["version"]["container"] == "npz" and set(f["version"]["arrays"]) == {"addrs", "epe"}
    arrays = f["details"]["arrays"]["arrays"]
    assert arrays["addrs"]["shape"] == [5] and arrays["addrs"]["max"] == 4
    assert arrays["epe"]["nonfinite"] == 1 and arrays["epe"]["max"] == 2.0 and f["tables"] == {"arrays": 8}


def test_real_ncu_csv():
    f = _one(real_trace("andrewxu_nsight_cfd_097K.log"))
    assert f["format"] == "ncu-csv" and f["version"]["page"] == "details"
    assert f["version"]["generation"].startswith("2020-era") and f["version"]["preamble_lines"] == 11
    assert f["tables"] == {"ncu_metrics": 2600} and f["details"]["ncu_metrics"]["launches"] == 100
    assert f["streams"] == [7] and f["devices"] == [] and f["supports"] == ["l2-breakpoints"]
    assert f["details"]["ncu_metrics"]["kernels"] == [
        {"name": "cuda_compute_flux(int,int*,float*,float*,float*)", "launches": 43},
        {"name": "cuda_time_step(int,int,float*,float*,float*,float*)", "launches": 42},
        {"name": "cuda_compute_step_factor(int,float*,float*,float*)", "launches": 15}]
    assert f["details"]["ncu_metrics"]["has_l2_hit_rate"] is False  # 2020-era: SOL L2 (throughput) only


def test_real_ncu_report():
    pytest.importorskip("ncu_report")
    f = _one(real_trace("tanvisharma_3136_64_64_rtx2080ti_sgemm.ncu-rep"))
    assert f["tables"] == {"ncu_metrics": 698}
    assert f["details"]["ncu_metrics"]["kernels"] == [{"name": "volta_sgemm_32x128_nn", "launches": 1}]
    assert f["details"]["ncu_metrics"]["has_l2_hit_rate"] is True
    # one launch: l2-breakpoints runs (exit 0) but can only show the per-kernel picture
    assert f["supports"] == ["l2-breakpoints (per-kernel picture only)"]
    r = run_cli("info", real_trace("tanvisharma_3136_64_64_rtx2080ti_sgemm.ncu-rep"))
    assert "volta_sgemm_32x128_nn (1 launch)" in r.stdout and "1 launches" not in r.stdout


def test_real_nsys_sqlite_version_and_source_rows():
    path = real_trace("lianhang_report1.sqlite")
    before = path.read_bytes()
    f = _one(path)
    assert f["format"] == "nsys-sqlite"
    assert (f["version"]["nsys_version"], f["version"]["schema_version"]) == ("2022.4.2.1", "3.0.0")
    assert f["version"]["source_rows"]["CUPTI_ACTIVITY_KIND_KERNEL"] == 1
    # the reader may not exist yet: then the reason is reported instead of an error
    assert "gpu_activity" in f["tables"] or any(p.startswith("gpu_activity") for p in f["problems"])
    assert path.read_bytes() == before
    casio = _one(real_trace("casio_output-file.sqlite"))
    assert casio["version"]["schema_version"] == "2.7.0" and casio["version"]["source_rows"]["CUPTI_ACTIVITY_KIND_KERNEL"] == 1106


def test_real_nsys_stats_stdout_lists_reports():
    f = _one(real_trace("chukonu_nsys_stats.csv"))
    assert f["format"] == "nsys-csv" and len(f["version"]["reports"]) == 20
    assert "osrt_sum" not in f["version"]["empty_reports"] and len(f["version"]["empty_reports"]) == 19


def test_sqlite_that_is_not_an_nsys_export(tmp_path):
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE t (x INTEGER)")
    f = _one(path)
    assert f["format"] == "nsys-sqlite"
    assert any("not an Nsight Systems export" in p for p in f["problems"])


def test_table_and_csv_views(tmp_path):
    r = run_cli("info", SAMPLES / "alloc_logs" / "alloc.log.1.csv", real_trace("andrewxu_nsight_cfd_097K.log"))
    assert r.exit_code == 0 and "alloc-csv" in r.stdout and "10,000" in r.stdout and "l2-breakpoints" in r.stdout
    r = run_cli("info", SAMPLES / "alloc_logs", "--format", "csv")
    rows = list(pacsv.read_csv(pa.py_buffer(r.stdout.encode())).to_pylist())
    assert [row["alloc_events"] for row in rows] == [10_000] * 3 and rows[0]["supports"] == "entropy; convert; bursts; diff"


# -- bad input ------------------------------------------------------------------------------------

def test_empty_file(tmp_path):
    (tmp_path / "empty.csv").write_bytes(b"")
    r = run_cli("info", tmp_path / "empty.csv")
    assert r.exit_code == 1 and r.stdout == ""
    assert r.stderr.startswith("Error: ") and "empty.csv: the file is empty" in r.stderr


def test_junk_file_among_good_ones(tmp_path):
    junk = tmp_path / "junk.bin"
    junk.write_bytes(bytes(range(256)) * 4)
    r = run_cli("info", junk, SAMPLES / "alloc_logs" / "alloc.log.1.csv", "--format", "json")
    assert r.exit_code == 1
    assert r.stderr.count("Error:") == 1 and "junk.bin: not a format veotrace reads" in r.stderr
    files = json.loads(r.stdout)["files"]
    assert files[0]["error"].startswith("not a format veotrace reads") and files[1]["tables"] == {"alloc_events": 10_000}


def test_folder_skips_files_that_are_not_traces(tmp_path):
    (tmp_path / "README.txt").write_text("notes\n")
    pacsv.write_csv(_planted(tmp_path)[0], tmp_path / "log.csv")
    r = run_cli("info", tmp_path, "--format", "json")
    assert r.exit_code == 0 and "skipped 1 file that is not a trace" in r.stderr
    out = json.loads(r.stdout)
    assert out["skipped_files"] == [str(tmp_path / "README.txt")] and len(out["files"]) == 1


def test_truncated_pickle_reports_the_reason(tmp_path):
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps(synthetic_snapshot(seed=1)[0], protocol=4)[:500])
    f = _one(path)
    assert f["format"] == "torch-snapshot" and f["tables"] == {}
    assert len(f["problems"]) == 1 and "is cut short: its 500 bytes end before" in f["problems"][0]


def test_bad_rows_are_a_problem_not_a_crash(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("timestamp,op_type,size_bytes\n1,alloc,10\n2,alloc,abc\n")
    f = _one(path)
    assert f["tables"] == {} and f["problems"][0].startswith("alloc_events: line 3: column 'size_bytes': ")
    r = run_cli("info", path, "--skip-bad-rows", "--format", "json")
    assert json.loads(r.stdout)["files"][0]["tables"] == {"alloc_events": 1} and "skipped 1 bad row" in r.stderr


def test_missing_path():
    r = run_cli("info", "/nonexistent/trace.csv")
    assert r.exit_code == 1 and "No such file or directory" in r.stderr


def test_nsys_kernels_with_launch_counts(tmp_path):
    f = _one(SAMPLES / "nsys" / "synthetic_memory.sqlite")
    kernels = f["details"]["gpu_activity"]["kernels"]
    assert sum(k["launches"] for k in kernels) == f["details"]["gpu_activity"]["kinds"]["kernel"] == 300
    assert [k["launches"] for k in kernels] == sorted((k["launches"] for k in kernels), reverse=True)
    assert f["details"]["gpu_activity"]["kernel_names"] == len(kernels)


def test_frame_tables_are_recognised_for_coherence(tmp_path):
    files = _info(SAMPLES / "frames" / "frames.csv", SAMPLES / "frames" / "generation.json")
    assert [f["format"] for f in files] == ["frames", "frames"]
    assert [f["supports"] for f in files] == [["coherence"], ["coherence"]]
    csv = files[0]
    assert csv["tables"] == {"frames": 48} and csv["version"]["container"] == "csv"
    assert csv["details"]["frames"]["first_frame"] == 0 and csv["details"]["frames"]["last_frame"] == 47
    assert set(csv["details"]["frames"]["metrics"]) == {"id_match_rate", "flow_l2_px", "clip_entropy_bits",
                                                         "coherence_score"}
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "frames.csv").write_bytes((SAMPLES / "frames" / "frames.csv").read_bytes())
    (folder / "notes.txt").write_text("nothing here\n")
    r = run_cli("info", folder, "--format", "json")
    doc = json.loads(r.stdout)
    assert [f["format"] for f in doc["files"]] == ["frames"] and doc["skipped_files"] == [str(folder / "notes.txt")]
    r = run_cli("info", SAMPLES / "frames" / "frames.csv", "--format", "csv")
    assert r.exit_code == 0
    rows = list(pacsv.read_csv(pa.py_buffer(r.stdout.encode())).to_pylist())
    assert rows[0]["frames"] == 48 and rows[0]["supports"] == "coherence"


@pytest.mark.parametrize("path, addressed, checked, paired, listed", [
    ("alloc_addr/alloc_addr.csv", 1514, 1486, 1486, ["fragmentation", "simulate", "tune"]),
    ("simulate/training_log.csv", 756, 720, 720, ["fragmentation", "simulate", "tune"]),
    # the snapshot pairs free_completed (314), not free_requested (370), with its 600 allocs
    ("snapshots/memory_snapshot.pickle", 600, 314, 314, ["fragmentation", "simulate", "tune"]),
    ("nsys/synthetic_memory.sqlite", 2000, 2000, 2000, ["fragmentation", "simulate", "tune"]),
    # addresses that no free names again (per-tensor views): every free unknown, so neither runs usefully
    ("alloc_logs/alloc.log.1.csv", 5213, 4786, 0, []),
])
def test_fragmentation_and_simulate_follow_free_pairing(path, addressed, checked, paired, listed):
    f = _one(SAMPLES / path)
    assert f["details"]["alloc_events"]["addresses"] == {"addressed_allocs": addressed, "frees_checked": checked,
                                                         "frees_paired": paired}
    assert [c for c in f["supports"] if c.startswith(("fragmentation", "simulate", "tune"))] == listed
    for cmd in listed:  # what info lists runs
        r = run_cli(cmd, SAMPLES / path, "--format", "json")
        assert r.exit_code == 0, r.stderr
    if not listed:
        r = run_cli("simulate", SAMPLES / path)
        assert r.exit_code != 0 and "name no live allocation" in r.stderr


def test_unknown_frees_above_the_simulate_limit(tmp_path):
    # 100 allocs; of 100 frees, 94 pair (6% unknown > 5%): fragmentation yes, simulate no
    lines = ["timestamp,op_type,size_bytes,address,stream,device"]
    lines += [f"{i},alloc,512,{4096 * (i + 1)},0,0" for i in range(100)]
    lines += [f"{100 + i},free,512,{4096 * (i + 1) if i < 94 else 7},0,0" for i in range(100)]
    (tmp_path / "a.csv").write_text("\n".join(lines) + "\n")
    f = _one(tmp_path / "a.csv")
    assert f["details"]["alloc_events"]["addresses"]["frees_paired"] == 94
    assert "fragmentation" in f["supports"] and "simulate" not in f["supports"]
    assert run_cli("simulate", tmp_path / "a.csv").exit_code != 0


def test_address_arrays_feed_fragmentation_strides():
    addrs, epe = _one(SAMPLES / "arrays" / "addrs.npy"), _one(SAMPLES / "arrays" / "epe.npy")
    assert addrs["supports"] == ["fragmentation (address strides)", "correlate"]
    assert epe["supports"] == ["correlate"]  # float error values: fragmentation refuses them
    assert run_cli("fragmentation", SAMPLES / "arrays" / "addrs.npy").exit_code == 0
    assert run_cli("fragmentation", SAMPLES / "arrays" / "epe.npy").exit_code != 0


def test_alloc_sizes_count_only_allocations_on_a_snapshot_without_any():
    """Issue 24: info said "alloc sizes 11.0 GiB .. 11.0 GiB", taken from the snapshot's one `snapshot` entry."""
    from tests.conftest import real_trace, run_cli

    res = run_cli("info", real_trace("yiyi_oom_snapshot.pickle"))
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("alloc sizes"))
    assert "none (no alloc events)" in line and "GiB" not in line
    ops = next(ln for ln in res.stdout.splitlines() if ln.startswith("ops"))
    assert "snapshot" in ops and "alloc" not in ops.replace("alloc sizes", "")


def test_alloc_sizes_are_the_allocations_range_on_a_log():
    from tests.conftest import SAMPLES, run_cli

    res = run_cli("info", SAMPLES / "simulate" / "training_log.csv", "-f", "json")
    import json

    alloc = json.loads(res.stdout)["files"][0]["details"]["alloc_events"]["alloc_size_bytes"]
    text = run_cli("info", SAMPLES / "simulate" / "training_log.csv").stdout
    from veotrace.render.console import fmt_bytes

    assert f"{fmt_bytes(alloc['min'])} .. {fmt_bytes(alloc['max'])}" in text


_SNAPSHOTS = ["constructorsun_memory_snapshot.pickle", "cranberrii_memory_snapshot.pickle", "magma27_memory_snapshot.pickle",
              "maphsge4_snapshot.pickle", "muduard_memory_snapshot.pkl", "yiyi_oom_snapshot.pickle"]


@pytest.mark.parametrize("name", ["sample", *_SNAPSHOTS])
def test_info_shows_a_snapshots_reserved_allocated_and_largest_free_as_fragmentation_finds_them(name):
    """Issue 24: info on a snapshot showed none of the numbers an engineer wants first."""
    import veotrace
    from tests.conftest import SAMPLES, real_trace, run_cli
    from veotrace.render.console import fmt_bytes

    path = SAMPLES / "snapshots" / "memory_snapshot.pickle" if name == "sample" else real_trace(name)
    details = veotrace.info(path).value[0].details
    end = veotrace.fragmentation(path).value.end["total"]
    assert details["segments"]["reserved_bytes"] == end["reserved_bytes"]
    assert details["blocks"]["allocated_bytes"] == end["allocated_bytes"]
    assert details["blocks"]["largest_free_bytes"] == end["largest_free_bytes"]
    import re

    text = run_cli("info", path).stdout
    assert re.search(rf"^reserved +{re.escape(fmt_bytes(end['reserved_bytes']))} ", text, re.M)
    assert re.search(rf"^allocated +{re.escape(fmt_bytes(end['allocated_bytes']))} ", text, re.M)
    assert re.search(rf"^largest free block +{re.escape(fmt_bytes(end['largest_free_bytes']))} ", text, re.M)


def test_info_does_not_list_the_replays_past_their_device_bound(tmp_path):
    """Issue 25 (seen by the device/stream work): info listed fragmentation and simulate for a trace
    past the 1,024 devices they replay, and both then refused it."""
    rows = ["timestamp,op_type,size_bytes,address,device"]
    rows += [f"{i * 1000},alloc,4096,{0x1000 + i * 4096},{i}" for i in range(1100)]
    rows += [f"{2_000_000 + i * 1000},free,4096,{0x1000 + i * 4096},{i}" for i in range(1100)]
    log = tmp_path / "many.csv"
    log.write_text("\n".join(rows) + "\n")
    f = _one(log)
    assert "fragmentation" not in f["supports"] and "simulate" not in f["supports"] and "entropy" in f["supports"]
    assert any("1,100 devices, past the 1,024" in p for p in f["problems"])
    assert run_cli("fragmentation", log).exit_code == 1
