"""PyTorch profiler traces (issue 45): the reader on generated traces with known answers (CUDA, HIP, the 2021
format, another writer's layout, ranks, cut files, CPU events), the ops around each event, the growth of
reserved memory by op, the replay's validation, bad input; and on the real files in ../shared/profiler_traces,
numbers checked against an independent computation with json (running sums, peaks, rises)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REAL_TRACES, run_cli
from veotrace.errors import TraceFormatError
from veotrace.sources.base import ReadOptions, ReadReport
from veotrace.sources.detect import sniff
from veotrace.sources.kineto.trace import read_memory
from veotrace.synth.kineto import kineto_text, memory_timeline_rows, profiler_trace, write_ranks, write_trace

PROFILER = REAL_TRACES.parent / "profiler_traces"


def _real(name: str) -> Path:
    path = PROFILER / name
    if not path.exists():
        pytest.skip(f"real trace {name} not present in {PROFILER}")
    return path


def _rows(table, gpu: bool | None = None) -> list[dict]:
    rows = table.to_pylist()
    if gpu is not None:
        rows = [r for r in rows if (r["device_type"] != 0) == gpu]
    return rows


@pytest.mark.parametrize("device_type", [1, 6])
@pytest.mark.parametrize("layout", ["kineto", "compact", "gzip"])
def test_generated_trace_reads_every_event_in_order_with_its_values(tmp_path, device_type, layout):
    trace, truth = profiler_trace(3, device_type=device_type)
    path = write_trace(tmp_path / ("t.json.gz" if layout == "gzip" else "t.json"), trace, compact=layout == "compact")
    assert sniff(path).name == "kineto"
    report = ReadReport()
    read = read_memory(path, report=report)
    rows = read.table.to_pylist()
    assert len(rows) == len(truth.events)
    for got, want in zip(rows, truth.events):
        assert (got["device_type"], got["device_id"], got["bytes"], got["address"], got["total_allocated_bytes"],
                got["total_reserved_bytes"]) == (want["device_type"], want["device_id"], want["bytes"], want["address"],
                                                 want["total_allocated"], want["total_reserved"])
    assert read.cut is None and not report.messages()
    lane = "hip:0" if device_type == 6 else "cuda:0"
    check = read.checks[lane]
    assert check["mismatches"] == 0 and check["live_before_bytes"] == truth.live_before[(device_type, 0)]
    assert check["peak_allocated_bytes"] == truth.peak_allocated[(device_type, 0)]
    assert check["peak_reserved_bytes"] == truth.peak_reserved[(device_type, 0)]
    assert check["reserved_rises"] == truth.rises[(device_type, 0)]
    assert read.checks["cpu"]["events"] == len(truth.cpu_events)


def test_both_scans_agree_and_the_context_is_the_truth(tmp_path):
    trace, truth = profiler_trace(5, rank=0, world_size=2, device_type=6)
    path = write_trace(tmp_path / "t.json", trace)
    fast = read_memory(path)
    full = read_memory(path, context=True)
    cols = [c for c in fast.table.column_names if not c.endswith("_id") and c != "tid"]  # the thread: with the ops
    assert fast.table.select(cols).equals(full.table.select(cols))
    names = full.ops.column("name").to_pylist()
    for row, want in zip(full.table.to_pylist(), truth.events):
        assert names[row["op_id"]] == want["op"]
        assert names[row["frame_id"]] == want["frame"]
        assert (names[row["kernel_id"]] if row["kernel_id"] is not None else None) == want["kernel"]


def test_sites_by_op_and_the_growth_of_reserved_memory_are_the_truth(tmp_path):
    trace, truth = profiler_trace(7, steps=8)
    path = write_trace(tmp_path / "t.json", trace)
    r = run_cli("sites", path, "--by", "op", "-f", "json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    growth = out["reserved_growth"]["cuda:0"]
    assert growth["rises"] == truth.rises[(1, 0)]
    assert {row["op"]: row["bytes"] for row in growth["by_op"]} == truth.rise_bytes_by_op
    top = max(truth.rise_bytes_by_op.items(), key=lambda kv: kv[1])
    assert out["finding"]["op"] == top[0] and out["finding"]["bytes"] == top[1]
    peak = out["devices"]["cuda:0"]
    assert peak["peak_bytes"] == truth.peak_allocated[(1, 0)]
    assert sum(row["bytes"] for row in peak["at_peak"]) == peak["peak_bytes"]  # every live byte has an owner


def test_old_format_has_no_addresses_and_says_what_it_lacks(tmp_path):
    trace, truth = profiler_trace(2, old_format=True)
    path = write_trace(tmp_path / "old.json", trace)
    read = read_memory(path)
    assert read.table.column("address").null_count == read.table.num_rows
    gpu = [e["bytes"] for e in truth.gpu_events]
    assert read.checks["cuda:0"]["running_sum_peak_bytes"] == max(np.cumsum(gpu).max(), 0)
    r = run_cli("info", path, "-f", "json")
    info = json.loads(r.stdout)["files"][0]
    assert any("2021 format" in x for x in info["details"]["profiler_memory"]["lacks"])
    assert "fragmentation" not in info["supports"] and "simulate" not in info["supports"]


@pytest.mark.parametrize("gz", [False, True])
def test_a_cut_file_reads_to_its_last_complete_event_and_says_where(tmp_path, gz):
    trace, truth = profiler_trace(4)
    text = kineto_text(trace).encode()
    path = write_trace(tmp_path / ("cut.json.gz" if gz else "cut.json"), trace, cut=0.6)
    report = ReadReport()
    read = read_memory(path, report=report)
    full = read_memory(write_trace(tmp_path / "whole.json", trace))
    n = read.table.num_rows
    assert 0 < n < full.table.num_rows and read.cut is not None
    # exactly the memory events that lie wholly in the kept bytes
    kept = text[: int(len(text) * 0.6)]
    assert n == sum(1 for e in trace["traceEvents"] if e.get("name") == "[memory]"
                    and kept.find(kineto_text({"traceEvents": [e]}).split('"traceEvents": [')[1].rsplit("]", 1)[0]
                                  .strip().encode()) >= 0)
    (warning,) = [m for m in report.messages() if "cut mid-write" in m]
    assert f"byte {read.cut['read_to_byte']:,}" in warning
    r = run_cli("info", path)  # info describes it in its table
    assert r.exit_code == 0 and "read up to byte" in r.stdout
    r = run_cli("entropy", path)  # the analyses say it on stderr
    assert r.exit_code == 0 and "Traceback" not in r.stderr and "cut mid-write" in r.stderr


def test_a_folder_of_ranks_is_one_run_with_a_lane_per_rank(tmp_path):
    truths = write_ranks(tmp_path / "run", 11, world_size=2)
    r = run_cli("info", tmp_path / "run", "-f", "json")
    assert r.exit_code == 0, r.stderr
    files = json.loads(r.stdout)["files"]
    assert [f["details"]["profiler_memory"]["ranks"] for f in files] == [[0], [1]]
    r = run_cli("fragmentation", tmp_path / "run", "-f", "json")
    assert r.exit_code == 0, r.stderr
    rec = json.loads(r.stdout)["recorded_totals"]["devices"]
    for rank, truth in enumerate(truths):
        lane = rec[f"rank {rank} cuda:{rank}"]
        assert lane["peak_reserved_bytes"] == truth.peak_reserved[(1, rank)]
        assert lane["peak_allocated_bytes"] == truth.peak_allocated[(1, rank)]
    r = run_cli("sites", tmp_path / "run", "-f", "json")
    growth = json.loads(r.stdout)["reserved_growth"]
    assert sorted(growth) == [f"rank {k} cuda:{k}" for k in range(2)]
    assert all(g["rises"] == t.rises[(1, k)] for k, (g, t) in enumerate(zip(growth.values(), truths)))


@pytest.mark.slow  # starts a process pool
def test_ranks_read_in_parallel_give_the_answer_of_one_process(tmp_path):
    write_ranks(tmp_path / "run", 13, world_size=2)
    one, two = (json.loads(run_cli("entropy", tmp_path / "run", "--window", "1ms", "--jobs", j, "-f", "json").stdout)
                for j in ("1", "2"))
    assert one["windows"] == two["windows"] and one["summary"] == two["summary"]


def test_simulate_validates_against_the_rises_of_total_reserved(tmp_path):
    trace, truth = profiler_trace(9, steps=10)
    path = write_trace(tmp_path / "t.json", trace)
    r = run_cli("simulate", path, "-p", "torch", "-f", "json")
    assert r.exit_code == 0, r.stderr
    v = json.loads(r.stdout)["validation"]
    assert v["recorded_segment_allocs"] == truth.rises[(1, 0)]
    assert any("profiler trace records no segments" in a for a in v["assumptions"])
    assert v["seed"].startswith("seeded from the first events' totals")


def test_the_export_line_of_a_rocm_trace_names_the_variable_its_release_reads():
    from veotrace.allocators.conf import TorchConf
    from veotrace.tuning.space import export_lines

    assert export_lines(TorchConf(torch_release="2.8"), "expandable_segments:True", rocm=True)["export"] == \
        "export PYTORCH_HIP_ALLOC_CONF=expandable_segments:True"
    assert export_lines(TorchConf(torch_release="2.9"), "expandable_segments:True", rocm=True)["export"] == \
        "export PYTORCH_ALLOC_CONF=expandable_segments:True"
    assert export_lines(TorchConf(torch_release="2.9"), "x:1")["export"] == "export PYTORCH_ALLOC_CONF=x:1"
    assert export_lines(TorchConf(torch_release="2.8"), "x:1")["export"] == "export PYTORCH_CUDA_ALLOC_CONF=x:1"


# --- bad input ---

def _mem(**args) -> str:
    base = {"Total Reserved": 2097152, "Total Allocated": 512, "Bytes": 512, "Addr": 4096, "Device Id": 0,
            "Device Type": 1, "Ev Idx": 1}
    base.update(args)
    return json.dumps({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 10,
                       "args": base})


@pytest.mark.parametrize("event, message", [
    (_mem().replace('"ts": 10, ', ""), "has no ts"),
    (_mem().replace('"Bytes": 512', '"Bytes": NaN'), "Bytes is not an integer"),
    (_mem().replace('"Bytes": 512', '"Bytes": 99999999999999999999999'), "past the 64-bit range"),
    (_mem().replace('"Bytes": 512', '"Bytes": 512, "Bytes": 1024'), "has a key twice"),
    (_mem().replace('"Bytes": 512', '"Bytes": "512"'), "Bytes is not a number"),
])
def test_a_bad_memory_event_is_one_error_naming_its_byte_or_a_counted_skip(tmp_path, event, message):
    good = _mem()
    text = '{"schemaVersion": 1, "traceEvents": [' + good + ", " + event + "]}"
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(TraceFormatError, match=message) as exc:
        read_memory(path)
    assert f"byte {text.index(event):,}" in str(exc.value)
    report = ReadReport()
    read = read_memory(path, options=ReadOptions(skip_bad_rows=True), report=report)
    assert read.table.num_rows == 1 and report.skipped_rows == 1
    r = run_cli("info", path)
    assert "Traceback" not in r.stderr


def test_running_sum_mismatches_are_reported_by_event(tmp_path):
    events = [_mem(**{"Bytes": 512, "Total Allocated": 512, "Ev Idx": 1}),
              _mem(**{"Bytes": 512, "Total Allocated": 1024, "Ev Idx": 2}).replace('"ts": 10', '"ts": 11'),
              _mem(**{"Bytes": 512, "Total Allocated": 4096, "Ev Idx": 3}).replace('"ts": 10', '"ts": 12'),
              _mem(**{"Bytes": -512, "Total Allocated": 3584, "Ev Idx": 4}).replace('"ts": 10', '"ts": 13')]
    path = tmp_path / "sum.json"
    path.write_text('{"traceEvents": [' + ", ".join(events) + "]}")
    report = ReadReport()
    read = read_memory(path, report=report)
    c = read.checks["cuda:0"]
    assert c["mismatches"] == 1 and c["first_mismatches"][0]["ev_idx"] == 3  # one bad event, not a cascade
    assert any("running sum of Bytes differs" in m for m in report.messages())


def test_non_utf8_names_are_counted_and_read(tmp_path):
    trace, _ = profiler_trace(1, steps=1, ops_per_step=2)
    data = kineto_text(trace).encode().replace(b"aten::", b"aten\xff:", 1)
    path = tmp_path / "bytes.json"
    path.write_bytes(data)
    report = ReadReport()
    read = read_memory(path, report=report, context=True)
    assert read.bad_utf8 == 1 and any("no UTF-8" in m for m in report.messages())


def test_not_a_trace_and_no_event_list(tmp_path):
    path = tmp_path / "head.json"
    path.write_text('{"schemaVersion": 1, "deviceProperties": []}')
    r = run_cli("info", path, "-f", "json")
    info = json.loads(r.stdout)["files"][0]
    assert info["format"] == "kineto" and any("no traceEvents" in p for p in info["problems"])


def test_memory_timeline_raw_and_html(tmp_path):
    rows, end = memory_timeline_rows(4)
    raw = tmp_path / "timeline.raw.json.gz"
    raw.write_bytes(gzip.compress(json.dumps(rows).encode()))
    r = run_cli("info", raw, "-f", "json")
    info = json.loads(r.stdout)["files"][0]
    assert info["format"] == "memory-timeline" and info["tables"]["memory_timeline"] == len(rows)
    got = info["details"]["memory_timeline"]["end"]
    from veotrace.schemas.kineto import TIMELINE_CATEGORIES

    assert got == {TIMELINE_CATEGORIES[k]: v for k, v in end.items() if v}
    page = tmp_path / "timeline.html"
    page.write_text('<html>\n<head><meta charset="utf-8" /><title>GPU Memory Timeline HTML</title></head>\n'
                    "<body>\n  <img src='data:image/png;base64,AAAA'>\n</body>\n</html>")
    r = run_cli("entropy", page)
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("Error:")]
    assert r.exit_code == 1 and len(errors) == 1 and "export the raw form" in errors[0].lower().replace("export the raw", "export the raw")


# --- the real files, checked against json ---

def _independent(path: Path) -> dict:
    """Per (device type, device id): events, peaks and rises, and whether the running sum holds, from json."""
    with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as fh:
        events = [e for e in json.load(fh)["traceEvents"] if e.get("name") == "[memory]"]
    events.sort(key=lambda e: (e["ts"], e["args"].get("Ev Idx", 0)))
    out: dict = {}
    for e in events:
        a = e["args"]
        d = out.setdefault((a["Device Type"], a["Device Id"]), {"events": 0, "sum": None, "ok": True, "peak_ta": None,
                                                               "peak_tr": None, "rises": 0, "last_tr": None})
        d["events"] += 1
        if "Total Allocated" in a:
            if d["sum"] is None:
                d["sum"] = a["Total Allocated"] - a["Bytes"]
            d["sum"] += a["Bytes"]
            d["ok"] &= d["sum"] == a["Total Allocated"]
            d["peak_ta"] = max(d["peak_ta"] or 0, a["Total Allocated"])
            d["peak_tr"] = max(d["peak_tr"] or 0, a["Total Reserved"])
            if d["last_tr"] is not None and a["Total Reserved"] > d["last_tr"]:
                d["rises"] += 1
            d["last_tr"] = a["Total Reserved"]
    return out


@pytest.mark.parametrize("name", ["switchtransformers_trace.json", "tracelens_normalization_layer_test.json.gz",
                                  pytest.param("kineto_resnet50_worker0.pt.trace.json.gz", marks=pytest.mark.slow),
                                  "dtu_mlops_trace.json", "unsloth_puzzels_trace.json"])
def test_real_traces_match_an_independent_computation(name):
    path = _real(name)
    want = _independent(path)
    read = read_memory(path)
    from veotrace.schemas.kineto import device_name

    assert read.table.num_rows == sum(d["events"] for d in want.values())
    for (dtype, did), d in want.items():
        lane = device_name(dtype) if dtype == 0 else f"{device_name(dtype)}:{did}"
        c = read.checks[lane]
        assert c["events"] == d["events"]
        if d["sum"] is not None:
            assert d["ok"] and c["mismatches"] == 0
            assert (c["peak_allocated_bytes"], c["peak_reserved_bytes"], c["reserved_rises"]) == \
                (d["peak_ta"], d["peak_tr"], d["rises"])


def test_real_switchtransformers_numbers_and_replay():
    path = _real("switchtransformers_trace.json")
    c = read_memory(path).checks["cuda:0"]
    assert (c["events"], c["reserved_rises"], c["peak_reserved_bytes"]) == (1030, 164, 23_616_028_672)
    r = run_cli("simulate", path, "-p", "torch", "-f", "json")
    v = json.loads(r.stdout)["validation"]
    assert v["recorded_segment_allocs"] == 164 and v["reproduced"] >= 0.95 * 164 and v["extra"] <= 0.05 * 164


def test_real_rocm_and_cpu_only_traces():
    hip = read_memory(_real("tracelens_normalization_layer_test.json.gz")).checks
    assert (hip["hip:0"]["events"], hip["cpu"]["events"], hip["hip:0"]["reserved_rises"]) == (415, 60, 3)
    r = run_cli("info", _real("dtu_mlops_trace.json"), "-f", "json")
    info = json.loads(r.stdout)["files"][0]
    assert "alloc_events" not in info["tables"] and info["details"]["profiler_memory"]["cpu_events"] == 496
    assert any("no GPU memory events" in p for p in info["problems"])
    assert any("CPU memory only" in x for x in info["details"]["profiler_memory"]["lacks"])
    assert read_memory(_real("unsloth_puzzels_trace.json")).table.num_rows == 20


def test_real_memory_timeline():
    path = _real("hta_memory_timeline.raw.gz")
    from veotrace.sources.kineto.timeline import categories, read_timeline

    table = read_timeline(path)
    rows = json.loads(gzip.open(path).read())
    assert table.num_rows == len(rows) == 16_845
    got = categories(table)
    assert got["before_profiling_bytes"] == sum(r[2] for r in rows if r[0] == -1)
    assert sum(got["end"].values()) == sum(r[2] for r in rows)


def test_real_trace_both_scans_agree_and_fragmentation_shows_the_recorded_peaks():
    path = _real("tracelens_normalization_layer_test.json.gz")
    fast, full = read_memory(path), read_memory(path, context=True)
    cols = [c for c in fast.table.column_names if not c.endswith("_id") and c != "tid"]
    assert fast.table.select(cols).equals(full.table.select(cols))
    want = _independent(path)[(6, 0)]
    r = run_cli("fragmentation", path, "-f", "json")
    rec = json.loads(r.stdout)["recorded_totals"]
    assert (rec["devices"]["hip:0"]["peak_allocated_bytes"], rec["devices"]["hip:0"]["peak_reserved_bytes"]) == \
        (want["peak_ta"], want["peak_tr"])
    assert "segments" in rec["note"]


def test_pairing_counts_frees_of_blocks_from_before_profiling_and_flags_a_free_of_the_wrong_size(tmp_path):
    trace, truth = profiler_trace(6, steps=5)
    read = read_memory(write_trace(tmp_path / "t.json", trace))
    pair = read.checks["cuda:0"]["pairing"]
    assert (pair["frees_of_unknown"], pair["size_mismatches"], pair["allocs_at_live_address"]) == \
        (truth.frees_of_unknown, 0, 0)
    events = [_mem(**{"Bytes": 4096, "Total Allocated": 4096, "Addr": 8192, "Ev Idx": 1}),
              _mem(**{"Bytes": -512, "Total Allocated": 3584, "Addr": 8192, "Ev Idx": 2}).replace('"ts": 10', '"ts": 11')]
    path = tmp_path / "wrong.json"
    path.write_text('{"traceEvents": [' + ", ".join(events) + "]}")
    report = ReadReport()
    pair = read_memory(path, report=report).checks["cuda:0"]["pairing"]
    assert pair["size_mismatches"] == 1 and pair["first"][0]["ev_idx"] == 2
    assert any("frees whose size is not their block's" in m for m in report.messages())
