"""`veotrace simulate`: replay pairing, reference policies, the CLI, bad input and the real-trace validation."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
from conftest import SAMPLES, real_trace, run_cli

from veotrace.allocators import base
from veotrace.allocators import replay as rp
from veotrace.allocators.arena import ArenaAllocator, IdealAllocator
from veotrace.allocators.builder import build_requests
from veotrace.allocators.conf import TorchConf
from veotrace.allocators.requests import REQ_FREE, REQ_MALLOC, Requests
from veotrace.allocators.reuse import ReuseAllocator
from veotrace.allocators.simulate import simulate
from veotrace.errors import EXIT_CHECK_FAILED, AnalysisError
from veotrace.schemas import ALLOC_EVENTS, conform
from veotrace.synth.training import training_log

MiB = 1 << 20
SAMPLE = SAMPLES / "simulate" / "training_log.csv"


def events(rows: list[tuple]) -> pa.Table:
    """ALLOC_EVENTS from (ts_ns, op, size, address[, stream])."""
    cols = list(zip(*[r if len(r) == 5 else (*r, 0) for r in rows]))
    n = len(rows)
    return conform(pa.table({
        "ts_ns": pa.array(cols[0], pa.int64()), "seq": pa.array(range(n), pa.int64()),
        "op": pa.array(cols[1]).dictionary_encode(), "size_bytes": pa.array(cols[2], pa.int64()),
        "address": pa.array(cols[3], pa.uint64()), "stream": pa.array(cols[4], pa.int64()),
        "device": pa.array([0] * n, pa.int32()), "source_file": pa.array(["t"] * n).dictionary_encode(),
    }), ALLOC_EVENTS)


def run(policy, req: Requests):
    return rp.replay(lambda d: policy(rec=base.Recorder()), req)[0]


def test_pairs_by_address_and_counts_what_it_skips():
    req = build_requests(events([(0, "alloc", 100, 1), (1, "alloc", 0, 2), (2, "free", 100, 1),
                                    (3, "defrag", 0, 0), (4, "alloc", 50, 1)]))
    assert list(req.kind) == [REQ_MALLOC, REQ_FREE, REQ_MALLOC] and req.pair[1] == 0
    assert req.counts["zero_size_allocs"] == 1 and req.counts["ignored_ops"] == 1


def test_torch_traces_free_at_free_completed():
    req = build_requests(events([(0, "alloc", 100, 1), (1, "free_requested", 100, 1), (2, "alloc", 100, 2),
                                    (3, "free_completed", 100, 1)]))
    assert list(req.kind) == [REQ_MALLOC, REQ_MALLOC, REQ_FREE]  # the block was reusable only after free_completed


def test_too_many_unknown_frees_is_an_error_and_a_few_are_counted():
    rows = [(0, "alloc", 100, 1), (1, "free", 100, 9), (2, "free", 100, 1)]
    with pytest.raises(AnalysisError, match=r"1 of 2 frees \(50.0%\) name no live allocation"):
        build_requests(events(rows))
    req = build_requests(events(rows), max_unknown_frees=0.6)
    assert req.counts["unknown_frees"] == 1 and "1 of 2 frees" in req.notes[0]


def test_no_sizes_is_an_error():
    with pytest.raises(AnalysisError, match="no allocation with a size"):
        build_requests(events([(0, "alloc", 0, 1), (1, "free", 0, 1)]))


def test_ideal_reserves_exactly_the_live_peak():
    log = training_log(seed=3, steps=5, layers=6)
    t = log.table
    table = conform(pa.table({"ts_ns": t["timestamp"], "seq": pa.array(range(t.num_rows), pa.int64()),
                              "op": t["op_type"].dictionary_encode(), "size_bytes": t["size_bytes"],
                              "address": t["address"].cast(pa.uint64()), "stream": t["stream"],
                              "device": t["device"].cast(pa.int32()),
                              "source_file": pa.array(["x"] * t.num_rows).dictionary_encode()}), ALLOC_EVENTS)
    req = build_requests(table)
    assert run(IdealAllocator, req).c.peak_reserved == log.peak_live_bytes
    result = simulate(req, policies=["torch", "bestfit", "ideal"], conf=TorchConf())
    peaks = {p["policy"]: p["peak_reserved_bytes"] for p in result.policies}
    assert result.whatif[0]["policy"] == "ideal" and peaks["ideal"] == log.peak_live_bytes
    assert all(v >= log.peak_live_bytes for v in peaks.values())
    assert set(result.windows.column("policy").to_pylist()) == {"torch", "bestfit", "ideal"}


def test_bestfit_and_firstfit_choose_different_holes():
    # holes of 3 KiB (low address) and 1 KiB (high address); a 1 KiB request
    rows = [(0, "alloc", 3072, 1), (1, "alloc", 512, 2), (2, "alloc", 1024, 3), (3, "alloc", 512, 4),
            (4, "free", 3072, 1), (5, "free", 1024, 3), (6, "alloc", 1024, 5)]
    req = build_requests(events(rows))
    best = run(lambda rec: ArenaAllocator(best=True, rec=rec), req)
    first = run(lambda rec: ArenaAllocator(best=False, rec=rec), req)
    last_alloc = [e for e in best.rec.events if e[1] == base.EV_ALLOC][-1][2]
    assert last_alloc == best.base + 3072 + 512  # the 1 KiB hole
    assert [e for e in first.rec.events if e[1] == base.EV_ALLOC][-1][2] == first.base  # the lowest hole
    assert best.c.peak_reserved == first.c.peak_reserved == 3072 + 512 + 1024 + 512


def test_reuse_takes_the_oldest_retained_buffer_of_the_size():
    rows = [(0, "alloc", 4096, 1), (1, "alloc", 4096, 2), (2, "free", 4096, 2), (3, "free", 4096, 1),
            (4, "alloc", 4096, 3), (5, "alloc", 8192, 4)]
    req = build_requests(events(rows))
    m = run(ReuseAllocator, req)
    allocs = [e[2] for e in m.rec.events if e[1] == base.EV_ALLOC]
    assert allocs[2] == allocs[1]  # buffer 2 was retained first
    assert m.c.device_allocs == 3 and m.c.peak_reserved == 2 * 4096 + 8192


def test_tiered_oracle_puts_short_lives_in_the_small_tier():
    rows = [(0, "alloc", 1000, 1), (1_000_000, "free", 1000, 1), (2_000_000, "alloc", 1000, 2),
            (900_000_000, "free", 1000, 2), (901_000_000, "alloc", 1000, 3), (902_000_000, "free", 1000, 3)]
    req = build_requests(events(rows))
    result = simulate(req, policies=["tiered-oracle", "tiered"], conf=TorchConf())
    oracle, predicted = result.policies
    assert oracle["tiers"]["per_tier_allocs"] == [2, 0, 1]
    # predicted from the last lifetime of the same (stream, size): none yet -> long; then 1 ms; then 898 ms
    assert predicted["tiers"]["per_tier_allocs"] == [1, 0, 2] and predicted["tiers"]["no_history"] == 1
    assert predicted["tiers"]["predicted_with_truth"] == 3 and predicted["tiers"]["predicted_tier_right"] == 0


# -- command line ------------------------------------------------------------------------------------

def test_cli_sample_json_has_policies_params_and_windows():
    r = run_cli("simulate", SAMPLE, "-p", "torch", "-p", "ideal", "-p", "tiered", "--format", "json")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert [p["policy"] for p in d["policies"]] == ["torch", "ideal", "tiered"]
    ideal = next(p for p in d["policies"] if p["policy"] == "ideal")
    assert ideal["peak_reserved_bytes"] == training_log(seed=0, steps=20, layers=12).peak_live_bytes
    assert d["whatif"][0]["policy"] == "ideal" and d["validation"] is None
    assert {"torch_conf", "capacity_bytes", "tiers", "window_ns"} <= set(d["params"])


def test_cli_capacity_oom_is_a_finding_unless_fail_on_oom():
    r = run_cli("simulate", SAMPLE, "-p", "torch", "--capacity", "256MiB")
    assert r.exit_code == 0 and "torch: an allocation did not fit --capacity 256MiB" in r.stderr
    assert "What-if" in r.stdout
    r = run_cli("simulate", SAMPLE, "-p", "torch", "--capacity", "256MiB", "--fail-on-oom", "--format", "json")
    assert r.exit_code == EXIT_CHECK_FAILED
    first = json.loads(r.stdout)["policies"][0]["first_oom"]
    assert first["size_bytes"] > 0 and first["reserved_bytes"] <= 256 * MiB


def test_cli_conf_changes_the_torch_model():
    a = json.loads(run_cli("simulate", SAMPLE, "-p", "torch", "-f", "json").stdout)["policies"][0]
    b = json.loads(run_cli("simulate", SAMPLE, "-p", "torch", "--conf", "expandable_segments:True",
                           "-f", "json").stdout)["policies"][0]
    assert b["peak_reserved_bytes"] < a["peak_reserved_bytes"]


@pytest.mark.parametrize("args, message, code", [
    (["-p", "buddy"], "Error: unknown policy 'buddy'", 2),
    (["--conf", "expandable:True"], "unknown option 'expandable'", 2),
    (["--capacity", "lots"], "--capacity expects a size", 2),
    (["--tiers", "10ms"], "--tiers expects LIFETIME:GRANULARITY", 2),
])
def test_cli_bad_options(args, message, code):
    r = run_cli("simulate", SAMPLE, *args)
    assert r.exit_code == code and r.stdout == ""
    assert r.stderr.startswith("Error:") and message in r.stderr and r.stderr.count("\n") == 1


def test_cli_bad_traces(tmp_path):
    nosize = tmp_path / "nosize.csv"
    pacsv.write_csv(pa.table({"timestamp": [1, 2], "op_type": ["alloc", "free"], "size_bytes": [0, 0],
                              "address": [1, 1]}), str(nosize))
    r = run_cli("simulate", nosize)
    assert r.exit_code == 1 and r.stderr.startswith(f"Error: {nosize}: ") and "no allocation with a size" in r.stderr
    unknown = tmp_path / "unknown.csv"
    pacsv.write_csv(pa.table({"timestamp": [1, 2, 3], "op_type": ["alloc", "free", "free"],
                              "size_bytes": [10, 10, 10], "address": [1, 2, 3]}), str(unknown))
    r = run_cli("simulate", unknown)
    assert r.exit_code == 1 and "2 of 2 frees (100.0%) name no live allocation" in r.stderr
    assert r.stderr.startswith(f"Error: {unknown}: ")  # the file whose frees do not pair
    r = run_cli("simulate", unknown, "--max-unknown-frees", "1", "-f", "json")
    assert r.exit_code == 0 and json.loads(r.stdout)["params"]["counts"]["unknown_frees"] == 2


def test_cli_snapshot_listing_a_segment_twice_is_an_error_not_a_crash(tmp_path):
    """Overlapping seeded segments would share free-list keys (the C core's treap lost a block: a segfault)."""
    import pickle

    seg = {"device": 0, "address": 1 << 40, "total_size": 20 * MiB, "stream": 0, "segment_type": "large",
           "blocks": [{"address": 1 << 40, "size": 20 * MiB, "requested_size": 0, "state": "inactive"}]}
    trace = [{"action": "alloc", "addr": 1 << 32, "size": 4 * MiB, "stream": 0, "time_us": 1},
             {"action": "free_completed", "addr": 1 << 32, "size": 4 * MiB, "stream": 0, "time_us": 2}]
    path = tmp_path / "dup.pickle"
    path.write_bytes(pickle.dumps({"segments": [seg, seg], "device_traces": [trace]}))
    for core in ("auto", "python"):
        r = run_cli("simulate", path, "-p", "torch", "--torch-core", core)
        assert r.exit_code == 1 and r.stdout == ""
        assert r.stderr.startswith("Error: the snapshot's segments overlap on device 0"), r.stderr


# -- real traces: the torch model must reproduce the recorded device allocations ----------------------

@pytest.mark.parametrize("name", ["cranberrii_memory_snapshot.pickle", "maphsge4_snapshot.pickle",
                                  "constructorsun_memory_snapshot.pickle"])
def test_torch_model_reproduces_recorded_segments(name):
    path = real_trace(name)
    r = run_cli("simulate", path, "-p", "torch", "--format", "json")
    assert r.exit_code == 0, r.stderr
    v = json.loads(r.stdout)["validation"]
    assert v["recorded_segment_allocs"] > 100
    assert v["share"] >= 0.95 and v["extra"] <= 0.05 * v["recorded_segment_allocs"], v["first_mismatches"]
    alone = v["without_recorded_releases"]
    assert alone["share"] >= 0.95 and alone["extra"] <= 0.05 * alone["recorded_segment_allocs"]


def test_validation_fails_for_a_model_that_never_splits_large_blocks(monkeypatch):
    from veotrace.allocators.torch import TorchAllocator

    path = real_trace("cranberrii_memory_snapshot.pickle")
    monkeypatch.setattr(TorchAllocator, "should_split", lambda self, b, size: b.pool.is_small and b.size - size >= 512)
    v = json.loads(run_cli("simulate", path, "-p", "torch", "-f", "json", "--torch-core", "python").stdout)["validation"]
    assert not v["meets_targets"] and v["extra"] > 0.5 * v["recorded_segment_allocs"]
    assert v["first_mismatches"] and v["explanations"]


def test_part_way_trace_says_it_was_seeded():
    path = real_trace("maphsge4_snapshot.pickle")
    d = json.loads(run_cli("simulate", path, "-p", "torch", "-f", "json").stdout)
    assert d["validation"]["seeded"] and "seeded from the final snapshot" in d["params"]["seed"]
    releases = d["validation"]["recorded_releases"]
    assert releases["segments"] == 579 and releases["by_kind"]["oom_retry"]["runs"] == 39 == releases["runs"]
    assert d["params"]["recorded_releases"] == releases  # one name, one meaning, in both places


def test_cli_csv_writes_the_per_policy_windows_and_window_options_are_checked():
    r = run_cli("simulate", SAMPLE, "-p", "torch", "-p", "ideal", "--window", "500ms", "--format", "csv")
    assert r.exit_code == 0, r.stderr
    header, *lines = r.stdout.strip().splitlines()
    assert header.startswith('"window","device","start_ns"') and header.endswith('"policy"')
    assert {ln.rsplit(",", 1)[1].strip('"') for ln in lines} == {"torch", "ideal"}
    assert len(lines) == 2 * 5  # 2.1 s of trace in 500 ms windows, per policy
    r = run_cli("simulate", SAMPLE, "--window-requests", "10")
    assert r.exit_code == 2 and "--window-requests is for traces without timestamps" in r.stderr


def test_expandable_request_larger_than_the_capacity_is_an_oom_not_a_crash(tmp_path):
    """A request past the whole reserved range (capacity x 1.125) gets its own range on the forced OOM path."""
    from typer.testing import CliRunner

    from veotrace.cli import app

    log = tmp_path / "big.csv"
    log.write_text("timestamp,op_type,size_bytes,address\n"
                   "0,alloc,1048576,4096\n"
                   f"1000,alloc,{2 << 30},8192\n"
                   f"2000,free,{2 << 30},8192\n"
                   "3000,free,1048576,4096\n")
    res = CliRunner().invoke(app, ["simulate", str(log), "-p", "torch", "--conf", "expandable_segments:True",
                                   "--capacity", "1GiB", "-f", "json"])
    assert res.exit_code == 0, res.stderr
    import json

    torch = next(p for p in json.loads(res.stdout)["policies"] if p["policy"] == "torch") \
        if isinstance(json.loads(res.stdout)["policies"], list) else json.loads(res.stdout)["policies"]["torch"]
    assert torch["ooms"] == 1
    assert torch["peak_reserved_bytes"] >= 2 << 30
    assert "did not fit --capacity 1GiB" in res.stderr


def test_several_devices_show_each_policys_peak_per_device():
    """Issue 24: 'peak reserved 106.8 GiB' summed three GPUs' peaks next to a per-GPU capacity of 79 GiB."""
    import veotrace
    from tests.conftest import real_trace, run_cli
    from veotrace.render.console import fmt_bytes

    path = real_trace("constructorsun_memory_snapshot.pickle")
    r = veotrace.simulate(path, policy=["torch", "ideal"], capacity="79GiB")
    text = run_cli("simulate", path, "-p", "torch", "-p", "ideal", "--capacity", "79GiB").stdout
    assert "Peak reserved per device (capacity 79.0 GiB each)" in " ".join(text.split())  # the title may wrap
    torch = next(p for p in r.value.policies if p["policy"] == "torch")
    row = next(ln for ln in text.splitlines() if ln.startswith("│ torch ") and "device" not in ln and ln.count("│") == 5)
    for d in ("0", "1", "2"):
        assert fmt_bytes(torch["per_device"][d]["peak_reserved_bytes"]) in row
    one = run_cli("simulate", SAMPLES / "simulate" / "training_log.csv").stdout
    assert "Peak reserved per device" not in one
