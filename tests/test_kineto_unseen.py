"""Issue 45's unseen shapes, generated with their answers (``synth.kineto``: ``full=True`` writes what a real run's
file carries, ``graph_replays`` a CUDA/HIP graph capture, ``reserve_share`` a device reserved almost whole, ``cut``
a rank killed mid-write): multi-rank training with NCCL collectives and ``record_param_comms``, ROCm graph
capture near the MI300X's memory, and the same model on an H100 and an MI300X; every command over them, and the
words diagnose, tune and diff say of a profiler trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REAL_TRACES, run_cli
from veotrace.sources.base import ReadReport
from veotrace.sources.kineto.trace import read_memory
from veotrace.synth.kineto import MI300X, cut_events, profiler_trace, write_ranks, write_trace

PROFILER = REAL_TRACES.parent / "profiler_traces"
SWITCH = PROFILER / "switchtransformers_trace.json"
TRACELENS = PROFILER / "tracelens_normalization_layer_test.json.gz"


def _real(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"real trace {path.name} not present in {PROFILER}")
    return path


def _json(*args) -> dict:
    r = run_cli(*args, "-f", "json")
    assert r.exit_code == 0, r.stderr
    assert "Traceback" not in r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def unseen(tmp_path_factory) -> dict:
    """The shapes, written once: {name: (path, truth or truths)}."""
    d = tmp_path_factory.mktemp("unseen")
    out = {"ranks": (d / "ranks", write_ranks(d / "ranks", 3, world_size=4, full=True)),
           "cut": (d / "cut", write_ranks(d / "cut", 3, world_size=4, full=True, cut={2: 0.6}))}
    trace, truth = profiler_trace(7, device_type=6, full=True, graph_replays=20, reserve_share=0.97)
    out["graph"] = (write_trace(d / "graph.pt.trace.json.gz", trace), truth)
    for dt, name in ((1, "h100"), (6, "mi300x")):
        trace, truth = profiler_trace(11, device_type=dt, full=True)
        out[name] = (write_trace(d / f"{name}.pt.trace.json", trace), truth)
    return out


# --- the reader on the full shapes: every event, op, frame and kernel as generated ---

@pytest.mark.parametrize("kw", [dict(rank=1, world_size=4, device_id=1, full=True),
                                dict(rank=1, world_size=2, device_id=1, device_type=6, full=True),
                                dict(device_type=6, full=True, graph_replays=5, reserve_share=0.97)],
                         ids=["nccl", "rccl", "hip-graph"])
def test_full_traces_read_every_event_with_its_op_frame_and_kernel(tmp_path, kw):
    trace, truth = profiler_trace(5, **kw)
    path = write_trace(tmp_path / "t.pt.trace.json", trace)
    report = ReadReport()
    read = read_memory(path, report=report, context=True)
    assert not report.messages()  # the string pids of Kineto's Trace span and runtime events read quietly
    names = read.ops.column("name").to_pylist()
    rows = read.table.to_pylist()
    assert len(rows) == len(truth.events)
    for row, want in zip(rows, truth.events):
        assert (row["bytes"], row["total_allocated_bytes"], row["total_reserved_bytes"]) == (
            want["bytes"], want["total_allocated"], want["total_reserved"])
        assert names[row["op_id"]] == want["op"]
        assert names[row["frame_id"]] == want["frame"]
        assert (names[row["kernel_id"]] if row["kernel_id"] is not None else None) == want["kernel"], want
    dev = (kw.get("device_type", 1), kw.get("device_id", 0))
    lane = ("rank 1 " if kw.get("rank") else "") + ("hip" if dev[0] == 6 else "cuda") + f":{dev[1]}"
    check = read.checks[lane]
    assert check["mismatches"] == 0
    assert (check["peak_allocated_bytes"], check["peak_reserved_bytes"], check["reserved_rises"]) == (
        truth.peak_allocated[dev], truth.peak_reserved[dev], truth.rises[dev])
    assert read.rank == kw.get("rank")


def test_graph_capture_allocates_from_its_own_pool_and_replays_allocate_nothing():
    trace, truth = profiler_trace(7, device_type=6, full=True, graph_replays=20, reserve_share=0.97)
    launches = [e for e in trace["traceEvents"] if e.get("name") == "hipGraphLaunch"]
    assert len(launches) == truth.graph_launches == 20
    assert truth.graph_pool_rises > 0  # the pool's own segments: Total Reserved rose though the cache held free bytes
    last = max(e["ts_us"] for e in truth.events)
    assert all(e["ts"] > last for e in launches)  # no [memory] event during the replays
    assert 0.95 < truth.peak_reserved[(6, 0)] / MI300X["totalGlobalMem"] < 1


# --- every command over every shape: no traceback, exit 0 ---

COMMANDS = [("info",), ("entropy",), ("bursts",), ("fragmentation",), ("sites", "--by", "op"), ("sites", "--by", "frame"),
            ("sites", "--by", "module"), ("sites", "--by", "kernel"), ("simulate",), ("tune",), ("diagnose",)]


@pytest.mark.parametrize("shape", ["ranks", "cut", "graph"])
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: "-".join(c))
def test_every_command_reads_every_shape(unseen, shape, command):
    path, _ = unseen[shape]
    r = run_cli(*command, path)
    assert r.exit_code == 0, r.stderr
    assert "Traceback" not in r.stderr + r.stdout


@pytest.mark.parametrize("command", ["view", "convert"])
def test_every_command_that_writes_a_file_reads_every_shape(unseen, tmp_path, command):
    for shape in ("ranks", "cut", "graph"):
        path, _ = unseen[shape]
        r = run_cli(command, path, "-o", tmp_path / f"{shape}.{'html' if command == 'view' else 'parquet'}")
        assert r.exit_code == 0, r.stderr
        assert "Traceback" not in r.stderr


# --- item 6: a rank cut mid-write: the complete part read, the file and byte said once on stderr ---

@pytest.mark.slow  # report runs every analysis of the folder (about 4 s)
def test_report_reads_a_folder_of_ranks_as_one_run_and_says_the_cut_once(unseen, tmp_path):
    path, _ = unseen["cut"]
    r = run_cli("report", path, "-o", tmp_path / "r.html")
    assert r.exit_code == 0, r.stderr
    assert r.stderr.count("rank2.pt.trace.json: the file stops at byte") == 1
    assert "rank0.pt.trace.json" not in r.stderr  # the folder is one run: its analyses name the folder


@pytest.mark.parametrize("command", [("info",), ("entropy",), ("fragmentation",), ("sites", "--by", "op"), ("simulate",),
                                     ("diagnose",)], ids=lambda c: "-".join(c))
def test_a_cut_rank_is_read_to_its_last_complete_event_and_said_once(unseen, command):
    path, truths = unseen["cut"]
    cut = path / "rank2.pt.trace.json"
    n, end = cut_events(cut)
    r = run_cli(*command, path)
    assert r.exit_code == 0, r.stderr
    said = [line for line in r.stderr.splitlines() if "cut mid-write" in line]
    assert said == [f"Warning: {cut}: the file stops at byte {cut.stat().st_size:,} (cut mid-write?): read the {n:,} "
                    f"[memory] events complete before byte {end:,}"]
    assert 0 < n < len(truths[2].events)


def test_the_complete_part_of_a_cut_rank_is_its_first_events(unseen):
    path, truths = unseen["cut"]
    read = read_memory(path / "rank2.pt.trace.json")
    rows = read.table.to_pylist()
    assert [(r["bytes"], r["total_allocated_bytes"]) for r in rows] == [
        (e["bytes"], e["total_allocated"]) for e in truths[2].events[:len(rows)]]
    assert all(c["mismatches"] == 0 for c in read.checks.values())  # Kineto's order: the cut loses the end


# --- item 7: a device reserved almost whole, its memory from deviceProperties ---

def test_info_and_diagnose_say_how_close_to_full_the_device_ran(unseen):
    path, truth = unseen["graph"]
    lane = _json("info", path)["files"][0]["details"]["profiler_memory"]["lanes"]["hip:0"]
    peak = truth.peak_reserved[(6, 0)]
    assert lane["peak_reserved_bytes"] == peak  # no overflow near 192 GiB
    assert (lane["capacity_bytes"], lane["device_name"]) == (truth.capacity, truth.device_name)
    assert lane["peak_reserved_share"] == pytest.approx(peak / truth.capacity)
    assert lane["headroom_bytes"] == truth.capacity - peak
    r = run_cli("info", path)
    assert f"{peak / truth.capacity:.1%} of the AMD Instinct MI300X's" in r.stdout
    found = [f for f in _json("diagnose", path)["findings"] if f["kind"] == "near_capacity"]
    assert len(found) == 1 and found[0]["evidence"]["peak_reserved_bytes"] == peak
    assert found[0]["title"].startswith("hip:0: Total Reserved peaked at") and found[0]["severity"] in ("medium", "high")


def test_a_device_far_from_full_has_no_capacity_finding_but_info_says_its_share(unseen):
    path, truths = unseen["ranks"]
    lanes = {k: v for f in _json("info", path)["files"] for k, v in f["details"]["profiler_memory"]["lanes"].items()}
    assert lanes["rank 1 cuda:1"]["capacity_bytes"] == truths[1].capacity
    assert lanes["rank 1 cuda:1"]["peak_reserved_bytes"] == truths[1].peak_reserved[(1, 1)]
    assert not [f for f in _json("diagnose", path)["findings"] if f["kind"] == "near_capacity"]


# --- items 1 and 4: one name for a lane in every finding; inferred free blocks said ---

def test_diagnose_names_a_profiler_traces_devices_by_their_lanes(unseen):
    path, _ = unseen["ranks"]
    findings = _json("diagnose", path)["findings"]
    assert findings and not [f["title"] for f in findings if f["title"].startswith("device ")]
    lanes = {f["title"].split(":")[0] + ":" + f["title"].split(":")[1] for f in findings
             if f["kind"] in ("fragmentation_crossing", "reserved_growth_op")}
    assert lanes <= {f"rank {r} cuda:{r}" for r in range(4)}
    frag = [f for f in findings if f["kind"] == "fragmentation_crossing"]
    assert frag and all("free blocks inferred from the addresses" in f["title"]
                        and f["evidence"]["free_blocks_inferred_from_addresses"] for f in frag)


def test_real_trace_one_lane_name_inferred_free_blocks_and_tune_validated():
    path = _real(SWITCH)
    d = _json("diagnose", path)
    titles = [f["title"] for f in d["findings"]]
    assert not [t for t in titles if t.startswith("device ")]
    assert any(t.startswith("cuda:0: fragmented") and "inferred from the addresses" in t for t in titles)
    tune = [f for f in d["findings"] if f["kind"] == "allocator_setting"]
    # item 2: diagnose validates the torch model as simulate and tune do (158 of 164 rises reproduced)
    assert tune and tune[0]["evidence"]["validated"] is True and "not validated" not in tune[0]["title"]
    notes = [n for f in d["findings"] for n in f["notes"]]
    assert not [n for n in notes if "not validated" in n]
    v = _json("simulate", path, "-p", "torch")["validation"]
    assert (v["reproduced"], v["recorded_segment_allocs"]) == (158, 164)


# --- item 3: tune's words on a profiler trace ---

def test_tune_on_a_profiler_trace_says_its_seed_and_baseline_and_names_the_export_variable(unseen):
    path, _ = unseen["mi300x"]
    d = _json("tune", path, "--torch-version", "2.5")
    assert d["params"]["seed"].startswith("seeded from the first events' totals (assumed layout)")
    assert d["params"]["variable"] == "PYTORCH_HIP_ALLOC_CONF"
    assert "the snapshot records none" not in json.dumps(d)
    r = run_cli("tune", path, "--torch-version", "2.5")
    assert "PYTORCH_HIP_ALLOC_CONF" in r.stdout and "PYTORCH_CUDA_ALLOC_CONF " not in r.stdout.split("Candidates")[1]
    assert "snapshot" not in r.stdout.split("Candidates")[0]
    h100, _ = unseen["h100"]
    assert _json("tune", h100, "--torch-version", "2.5")["params"]["variable"] == "PYTORCH_CUDA_ALLOC_CONF"


# --- item 5: the same model on an H100 and an MI300X; ranks against ranks ---

def test_diff_of_an_h100_and_an_mi300x_pairs_the_lanes_and_says_the_devices_differ(unseen):
    (h100, th), (mi300x, tm) = unseen["h100"], unseen["mi300x"]
    d = _json("diff", h100, mi300x)
    assert d["devices"]["compared"] == [0]
    assert d["devices"]["lanes"]["before"]["0"]["lane"] == "cuda:0" and d["devices"]["lanes"]["after"]["0"]["lane"] == "hip:0"
    assert d["devices"]["hardware_differs"] is True
    assert any(n.startswith("Note: the devices differ: BEFORE cuda:0 (NVIDIA H100") and "AMD Instinct MI300X" in n
               for n in d["notes"])
    peaks = {x["name"]: (x["before"], x["after"]) for x in d["deltas"] if x["device"] == 0}
    # the recorded totals (bytes live before profiling included), not the address replay's
    assert peaks["peak_reserved"] == (th.peak_reserved[(1, 0)], tm.peak_reserved[(6, 0)])
    assert peaks["peak_allocated"] == (th.peak_allocated[(1, 0)], tm.peak_allocated[(6, 0)])
    assert peaks["device_allocs"] == (th.rises[(1, 0)], tm.rises[(6, 0)])
    r = run_cli("diff", h100, mi300x)
    assert "peak reserved (cuda:0 vs hip:0)" in r.stdout and "on two different devices" in r.stdout


def test_diff_of_ranks_against_ranks_pairs_them_by_rank(unseen, tmp_path):
    path, truths = unseen["ranks"]
    other = tmp_path / "rocm"
    rocm = write_ranks(other, 3, world_size=2, full=True, device_type=6)
    d = _json("diff", path, other)
    assert d["devices"]["compared"] == [0, 1] and d["devices"]["only_before"] == [2, 3]
    assert [d["devices"]["lanes"]["after"][str(r)]["lane"] for r in (0, 1)] == ["rank 0 hip:0", "rank 1 hip:1"]
    assert any("rank 2 cuda:2, rank 3 cuda:3 only in BEFORE" in n for n in d["notes"])
    peaks = {x["device"]: (x["before"], x["after"]) for x in d["deltas"] if x["name"] == "peak_reserved"}
    assert peaks[1] == (truths[1].peak_reserved[(1, 1)], rocm[1].peak_reserved[(6, 1)])


# --- the replay on ranks: traces whose totals follow PyTorch's rules (synth.caching) ---

def _caching_ranks(folder: Path, shape: str) -> list:
    if shape in ("multi-node", "visible-devices"):
        # ranks 0 and 9 of 16 on nodes of 8 GPUs (device ids repeat across nodes), or 4 ranks that each see one
        # GPU as device 0 (CUDA_VISIBLE_DEVICES per rank: every trace lists one device)
        folder.mkdir()
        truths = []
        for r in ((0, 9) if shape == "multi-node" else range(4)):
            trace, truth = profiler_trace(3 + r, rank=r, world_size=16 if shape == "multi-node" else 4,
                                          device_id=r % 8 if shape == "multi-node" else 0,
                                          nodes_gpus=8 if shape == "multi-node" else 1, full=True,
                                          allocator="caching", steps=10)
            write_trace(folder / f"rank{r}.pt.trace.json", trace)
            truths.append(truth)
        return truths
    return write_ranks(folder, 3, full=True, allocator="caching", steps=10,
                       **(dict(world_size=2, device_type=6) if shape == "rocm" else dict(world_size=4)))


@pytest.mark.parametrize("shape", ["nccl", "rocm", "multi-node", "visible-devices"])
def test_simulate_on_ranks_reproduces_every_rise_of_every_rank(tmp_path, shape):
    truths = _caching_ranks(tmp_path / "run", shape)
    v = _json("simulate", tmp_path / "run", "-p", "torch")["validation"]
    rises = sum(sum(t.rises.values()) for t in truths)
    assert rises > len(truths)
    assert (v["recorded_segment_allocs"], v["reproduced"], v["extra"]) == (rises, rises, 0)
    assert v["allocator"]["pytorch_cuda_caching"] is True


def test_tune_on_ranks_is_validated_and_says_a_profiler_traces_seed(tmp_path):
    _caching_ranks(tmp_path / "run", "nccl")
    d = _json("tune", tmp_path / "run")
    assert d["recommendation"]["trust"]["validated"] is True
    assert d["params"]["seed"].startswith("seeded from the first events' totals (assumed layout)")


def test_diagnose_says_which_op_grew_reserved_memory_on_every_rank(unseen):
    path, truths = unseen["ranks"]
    found = {f["evidence"]["device"]: f["evidence"] for f in _json("diagnose", path)["findings"]
             if f["kind"] == "reserved_growth_op"}
    assert set(found) == {f"rank {r} cuda:{r}" for r, t in enumerate(truths) if t.rise_bytes_by_op}
    for r, t in enumerate(truths):
        if t.rise_bytes_by_op:
            top = max(t.rise_bytes_by_op.values())
            got = found[f"rank {r} cuda:{r}"]
            assert got["bytes"] == top and t.rise_bytes_by_op[got["op"]] == top


# --- CUDA/HIP graphs: the private pool the torch model does not keep apart, said as the cause ---

@pytest.mark.parametrize("device_type", [1, 6])
def test_a_graph_capture_that_misses_the_replay_is_explained_by_its_private_pool(tmp_path, device_type):
    trace, truth = profiler_trace(7, device_type=device_type, full=True, graph_replays=10, allocator="caching", steps=8)
    path = write_trace(tmp_path / "g.pt.trace.json", trace)
    assert truth.graph_pool_rises > 0
    v = _json("simulate", path, "-p", "torch")["validation"]
    assert v["recorded_segment_allocs"] == truth.rises[(device_type, 0)]
    assert not v["meets_targets"]  # the model serves the capture from the general cache
    assert v["graphs"] == {"capture": 1, "launch": truth.graph_launches}
    assert v["explanations"][0].startswith("the trace records CUDA/HIP graphs (1 stream captures, 10 graph launches)")
    why = _json("tune", path)["recommendation"]["why"]
    assert "misses its validation targets" in why and "graph's private memory pool" in why


def test_graph_marks_are_counted_once_across_the_reads_edges(tmp_path):
    from veotrace.runs.profiler import graph_marks

    for n in (1, 7, 17, 30, 41):  # a mark cut by the 1 MiB read at each place
        path = tmp_path / f"m{n}.json"
        path.write_bytes(b" " * ((1 << 20) - n) + b'"hipGraphLaunch", "cudaStreamBeginCapture", "cudaGraphLaunch"')
        assert graph_marks([path]) == {"capture": 1, "launch": 2}


def test_gate_says_when_the_baseline_ran_on_other_gpus(unseen, tmp_path):
    (h100, _), (mi300x, _) = unseen["h100"], unseen["mi300x"]
    base = tmp_path / "base.json"
    assert run_cli("entropy", h100, "--save-baseline", base).exit_code == 0
    assert json.loads(base.read_text())["source"]["devices"] == ["cuda:0 (NVIDIA H100 80GB HBM3)"]
    r = run_cli("gate", mi300x, "-b", base)
    assert r.exit_code == 0, r.stderr
    assert ("the baseline ran on cuda:0 (NVIDIA H100 80GB HBM3), this run on hip:0 (AMD Instinct MI300X)"
            in " ".join(r.stdout.split()))
    assert "the baseline ran on" not in run_cli("gate", h100, "-b", base).stdout


def test_diff_of_profiler_traces_counts_device_allocations_as_rises(unseen):
    (h100, th), (mi300x, _) = unseen["h100"], unseen["mi300x"]
    (row,) = [x for x in _json("diff", h100, mi300x)["deltas"] if x["name"] == "device_allocs"]
    assert row["label"] == "device allocations (rises of Total Reserved)" and row["before"] == th.rises[(1, 0)]


@pytest.mark.parametrize("layout", ["compact", "gzip"])
def test_full_traces_read_the_same_in_any_layout(tmp_path, layout):
    trace, truth = profiler_trace(9, rank=2, world_size=4, device_id=2, device_type=6, full=True, graph_replays=3)
    kineto = read_memory(write_trace(tmp_path / "k.json", trace), context=True)
    other = read_memory(write_trace(tmp_path / ("o.json.gz" if layout == "gzip" else "o.json"), trace,
                                    compact=layout == "compact"), context=True)
    cols = [c for c in kineto.table.column_names if c != "source_file"]
    assert other.table.select(cols).equals(kineto.table.select(cols))
    assert other.table.num_rows == len(truth.events) and other.rank == 2


def test_diff_pairs_a_multi_node_run_with_a_one_node_run_by_rank(unseen, tmp_path):
    path, truths = unseen["ranks"]  # ranks 0-3 on one node: lanes numbered by Device Id 0-3
    multi = tmp_path / "multi"
    multi.mkdir()
    other = {}
    for r in range(4):  # the same ranks on two nodes of 2 GPUs: Device Ids 0, 1, 0, 1 (lanes rank x 1000 + id)
        trace, other[r] = profiler_trace(3 + r, rank=r, world_size=4, device_id=r % 2, nodes_gpus=2, full=True)
        write_trace(multi / f"rank{r}.pt.trace.json", trace)
    d = _json("diff", path, multi)
    assert d["devices"]["compared"] == [0, 1, 2, 3] and not d["devices"]["only_after"]
    assert [d["devices"]["lanes"]["after"][str(r)]["lane"] for r in range(4)] == [f"rank {r} cuda:{r % 2}" for r in range(4)]
    peaks = {x["device"]: (x["before"], x["after"]) for x in d["deltas"] if x["name"] == "peak_reserved"}
    assert peaks == {r: (truths[r].peak_reserved[(1, r)], other[r].peak_reserved[(1, r % 2)]) for r in range(4)}


def test_info_says_the_collectives_library_of_a_rank(unseen):
    path, _ = unseen["ranks"]
    version = _json("info", path / "rank1.pt.trace.json")["files"][0]["version"]
    assert (version["rank"], version["world_size"], version["backend"], version["nccl_version"]) == (1, 4, "nccl", "2.21.5")


def test_lane_names_come_from_the_descriptions_without_reading_the_traces_again(unseen, monkeypatch):
    import veotrace.sources.kineto.trace as trace
    from veotrace.runs.info import info
    from veotrace.runs.profiler import lane_names

    path, truths = unseen["ranks"]
    read = lane_names([path])
    infos = info([path]).value

    def no_read(*a, **k):
        raise AssertionError("read again")

    monkeypatch.setattr(trace, "cached_read", no_read)
    assert lane_names([path], None, infos) == read
    assert {d: f["lane"] for d, f in read.items()} == {r: f"rank {r} cuda:{r}" for r in range(4)}
    assert read[1]["peak_reserved_bytes"] == truths[1].peak_reserved[(1, 1)]


def test_an_allocation_past_4_gib_goes_through_sites_and_the_replay_exactly(tmp_path):
    trace, truth = profiler_trace(5, device_type=6, full=True, big_alloc=150 << 30, allocator="caching")
    path = write_trace(tmp_path / "big.pt.trace.json", trace)
    peak = _json("sites", path, "--by", "op")["devices"]["hip:0"]
    assert peak["peak_bytes"] == truth.peak_allocated[(6, 0)] > 150 << 30
    v = _json("simulate", path, "-p", "torch")
    assert (v["validation"]["reproduced"], v["validation"]["extra"]) == (truth.rises[(6, 0)], 0)
    assert v["policies"][0]["peak_reserved_bytes"] == truth.peak_reserved[(6, 0)]


def test_diagnose_says_when_rankless_traces_of_a_folder_claim_one_device(tmp_path, unseen):
    (tmp_path / "run").mkdir()
    for r in range(2):  # no distributedInfo, each process on its device 0
        trace, _ = profiler_trace(3 + r, device_id=0, full=True, steps=2, ops_per_step=3)
        write_trace(tmp_path / "run" / f"worker{r}.pt.trace.json", trace)
    notes = _json("diagnose", tmp_path / "run")["notes"]
    assert [n for n in notes if "worker0.pt.trace.json and " in n and "both record cuda:0" in n]
    r = run_cli("simulate", tmp_path / "run", "-p", "torch")  # the replay says it too, once
    assert r.stderr.count("both record cuda:0") == 1  # a warning, or the hint of the pairing's Error it causes
    from veotrace.runs.profiler import lane_clashes

    path, _ = unseen["ranks"]  # ranks name themselves: no clash
    assert lane_clashes([path]) == []


def test_rankless_traces_one_after_the_other_are_one_devices_time_line(tmp_path):
    """tensorboard_trace_handler writes one file per profiling cycle of one process: no rank, one device, spans
    one after the other. That is one time line, not two processes on one device: no clash is said."""
    from veotrace.runs.profiler import lane_clashes

    (tmp_path / "cycles").mkdir()
    first, _ = profiler_trace(3, device_id=0, steps=2, ops_per_step=3)
    write_trace(tmp_path / "cycles" / "w.1.pt.trace.json", first)
    later, _ = profiler_trace(4, device_id=0, steps=2, ops_per_step=3, ts0_us=1_717_000_000_000_000.0 + 60e6)
    write_trace(tmp_path / "cycles" / "w.2.pt.trace.json", later)
    assert lane_clashes([tmp_path / "cycles"]) == []
    r = run_cli("simulate", tmp_path / "cycles", "-p", "torch")
    assert "both record" not in r.stderr
    (tmp_path / "cycles" / "w.2.pt.trace.json").unlink()  # the same span twice: a clash, said
    write_trace(tmp_path / "cycles" / "w.3.pt.trace.json", profiler_trace(5, device_id=0, steps=2, ops_per_step=3)[0])
    (line,) = lane_clashes([tmp_path / "cycles"])
    assert "both record cuda:0 over the same time" in line
