"""veotrace diff: no difference against itself and its Parquet conversion, planted changes found with their size
and sign, no false alarm between runs of one process, the single-run commands' numbers on real snapshots, the
outputs agreeing, and every bad input one Error line."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from tests.conftest import SAMPLES, real_trace, run_cli
from veotrace.comparison.run import diff
from veotrace.schemas.diff import DELTA_NAMES
from veotrace.synth.diff import class_pair, segments_pair
from veotrace.synth.gate import gate_log

LOG = SAMPLES / "alloc_addr" / "alloc_addr.csv"
ROTATED = SAMPLES / "alloc_logs"
A, B = "constructorsun_memory_snapshot.pickle", "magma27_memory_snapshot.pickle"


def _deltas(result, name: str) -> list[dict]:
    return [d for d in result.value.deltas if d["name"] == name]


def _all_zero(result) -> None:
    assert result.value.same
    for d in result.value.deltas:
        assert d["change"] in (0, None), d
        assert d["before"] == d["after"], d
    assert not any(d["significant"] for d in result.value.deltas)


@pytest.mark.parametrize("path", [LOG, ROTATED], ids=["log", "rotated-folder"])
def test_a_log_against_itself_and_its_parquet_conversion_has_no_difference(path, tmp_path):
    _all_zero(diff(path, path))
    out = tmp_path / "conv.parquet"
    assert run_cli("convert", path, "-o", out).exit_code == 0
    result = diff(path, out)
    _all_zero(result)
    assert {d["name"] for d in result.value.deltas} >= {"entropy_mean", "peak_allocated", "bursts"}


def test_a_snapshot_against_itself_and_its_parquet_conversion_says_no_difference(tmp_path):
    snap = real_trace(A)
    r = run_cli("diff", snap, snap)
    assert r.exit_code == 0, r.stderr
    assert "No difference: every delta is zero" in r.stderr
    assert "no difference: every delta is zero" in r.stdout
    out = tmp_path / "conv.parquet"
    assert run_cli("convert", snap, "-o", out).exit_code == 0
    result = diff(snap, out)
    _all_zero(result)
    assert result.value.sites is None  # sites read the snapshot's stacks: only one side has them
    assert "Note: sites not compared (AFTER" in "\n".join(result.messages)
    assert len(_deltas(result, "peak_reserved")) == 3  # every device of the 3-device snapshot compared


def test_entropy_up_0_2_bits_from_hour_100_is_found_with_its_size_and_sign(tmp_path):
    gate_log(seed=1).write_csv(tmp_path / "b.csv")
    gate_log(seed=2, shift_bits=0.2, shift_from_hour=100).write_csv(tmp_path / "a.csv")
    result = diff(tmp_path / "b.csv", tmp_path / "a.csv")
    (mean,) = _deltas(result, "entropy_mean")
    assert mean["significant"] and mean["test"]["ci_low"] > 0
    assert mean["change"] == pytest.approx(0.2 * 140 / 240, abs=0.03)  # the step covers 140 of the 240 hours
    rows = [r for r in result.value.series.to_pylist() if r["metric"] == "entropy_bits" and r["value"] is not None]
    for lo, hi, step in ((0, 100, 0.0), (100, 240, 0.2)):  # the aligned series: the step, from hour 100
        side = {s: [r["value"] for r in rows if r["side"] == s and lo * 3600 <= r["x"] < hi * 3600]
                for s in ("before", "after")}
        gap = sum(side["after"]) / len(side["after"]) - sum(side["before"]) / len(side["before"])
        assert gap == pytest.approx(step, abs=0.05)


def test_a_30_percent_larger_activation_class_is_the_class_that_moved_most(tmp_path):
    pair = class_pair(activation_class=9, factor=1.3)
    result = diff(*pair.write(tmp_path))
    sc = result.value.size_classes
    top = sc["moved_most"][0]
    assert (top["class"], top["before"], top["after"]) == (9, 1000, 1300)
    assert top["count_ratio"] == pytest.approx(1.3) and top["share_change"] > 0
    assert 0 < sc["js_distance"] < 0.1
    (js,) = _deltas(result, "size_class_js")
    assert js["change"] == sc["js_distance"]


def test_ten_percent_more_device_allocations_is_found(tmp_path):
    pair = segments_pair(segments=500, factor=1.1)
    result = diff(*pair.write(tmp_path), fail_on="device_allocs>+5%")
    (d,) = _deltas(result, "device_allocs")
    assert (d["before"], d["after"], d["change"]) == (500, 550, 50)
    assert d["relative"] == pytest.approx(0.10)
    assert result.exit_code == 3 and result.value.fail_on[0]["failed"]


@pytest.mark.slow  # several seeded runs (about 4 s), run by .ci/run's slow step
def test_runs_of_one_process_with_different_seeds_show_no_significant_change(tmp_path):
    flagged = 0
    for i in range(20):
        gate_log(seed=2 * i + 100, windows=120, events_per_window=150).write_csv(tmp_path / "b.csv")
        gate_log(seed=2 * i + 101, windows=120, events_per_window=150).write_csv(tmp_path / "a.csv")
        result = diff(tmp_path / "b.csv", tmp_path / "a.csv")
        assert any(d["test"] for d in result.value.deltas)  # the tests ran
        flagged += any(d["significant"] for d in result.value.deltas)
    assert flagged <= 1


def _single(*args) -> dict:
    r = run_cli(*args, "-f", "json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def test_on_two_real_snapshots_each_number_is_the_single_run_commands():
    a, b = real_trace(A), real_trace(B)
    r = run_cli("diff", a, b, "-f", "json")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["schema"] == "diff/1" and not d["same"]
    assert d["devices"] == {"compared": [0], "only_before": [1, 2], "only_after": []}
    assert "Note: devices 1, 2 only in BEFORE: not compared (compared: 0)" in r.stderr
    by = {(x["name"], x["device"]): x for x in d["deltas"]}
    for side, path in (("before", a), ("after", b)):
        ent, bur, frag, sites = (_single(c, path) for c in ("entropy", "bursts", "fragmentation", "sites"))
        assert by[("entropy_mean", None)][side] == ent["summary"]["mean_entropy_bits"]
        assert by[("entropy_slope", None)][side] == ent["trend"]["display"]["slope"]
        assert by[("bursts", None)][side] == bur["summary"]["bursts"]
        assert by[("burst_share", None)][side] == bur["summary"]["share_in_bursts"]
        assert by[("ooms", None)][side] == len(frag["summary"]["recorded_ooms"])
        w = [x for x in frag["windows"] if x["device"] == 0]
        peak = max(w, key=lambda x: x["live_bytes_peak"])
        assert by[("peak_allocated", 0)][side] == peak["live_bytes_peak"]
        assert by[("frag_at_peak", 0)][side] == peak["external_frag"]
        assert by[("peak_reserved", 0)][side] == max(x["reserved_bytes_peak"] for x in w)
        assert by[("device_allocs", 0)][side] == sum(x["device_allocs"] for x in w)
        assert by[("frag_at_end", 0)][side] == frag["end"]["devices"]["0"]["external_frag"]
        peak_sites = {s["site"]: s["bytes"] for s in sites["devices"]["0"]["peaks"]["allocated"]["sites"]}
        for row in [*d["sites"]["0"]["changed"], *d["sites"]["0"][f"only_{side}"]]:
            assert row[f"{side}_bytes"] == peak_sites[row["site"]]
    assert {s["setting"] for s in d["settings"]["differ"]} >= {"expandable_segments"}


def test_json_csv_markdown_and_table_say_the_same_numbers(tmp_path):
    a, b = real_trace(A), real_trace(B)
    d = json.loads(run_cli("diff", a, b, "-f", "json").stdout)
    rows = list(csv.DictReader(io.StringIO(run_cli("diff", a, b, "-f", "csv").stdout)))
    assert [(r["name"], r["device"] or None) for r in rows] == [(x["name"], None if x["device"] is None else str(x["device"]))
                                                                 for x in d["deltas"]]
    for r, x in zip(rows, d["deltas"]):
        assert (float(r["change"]) if r["change"] else None) == pytest.approx(x["change"])
    md = run_cli("diff", a, b, "-f", "markdown").stdout
    table = run_cli("diff", a, b, "--rows", "0").stdout
    from veotrace.render.diff import delta_cells

    for x in d["deltas"]:
        cells = delta_cells(x)
        assert f"| {cells[0]} | {cells[1]} | {cells[2]} |" in md
        assert cells[2] in table
    assert md.startswith("### veotrace diff") and "Size classes that moved most" in md


def test_fail_on_exits_3_and_a_condition_that_does_not_parse_exits_2_listing_the_names():
    a, b = real_trace(A), real_trace(B)
    r = run_cli("diff", a, b, "--fail-on", "peak_reserved>+5%")
    assert r.exit_code == 3
    assert "--fail-on peak_reserved>+5%: failed (peak_reserved (device 0))" in r.stderr
    assert run_cli("diff", a, b, "--fail-on", "peak_reserved>+500%").exit_code == 0
    assert run_cli("diff", a, b, "--fail-on", "peak_allocated>1GiB").exit_code == 3  # +5.1 GiB on device 0
    for bad in ("peak_reservd>+5%", "peak_reserved>>5", "peak_reserved", "peak_reserved>+5x", "entropy_mean>1GiB"):
        r = run_cli("diff", LOG, LOG, "--fail-on", bad)
        assert r.exit_code == 2
        errors = [ln for ln in r.stderr.splitlines() if ln.startswith("Error: ")]
        assert len(errors) == 1 and ", ".join(DELTA_NAMES) in errors[0]


def test_bad_inputs_are_one_error_naming_each_side(tmp_path):
    missing = tmp_path / "nope.csv"
    r = run_cli("diff", LOG, missing)
    assert r.exit_code == 1 and "Traceback" not in r.stderr
    assert f"Error: AFTER {missing} does not exist (BEFORE {LOG} holds alloc/free event log, CSV" in r.stderr
    ncu = SAMPLES / "ncu" / "l2_details.csv"
    r = run_cli("diff", ncu, LOG)
    assert r.exit_code == 1
    assert f"Error: BEFORE {ncu} holds Nsight Compute CSV" in r.stderr and "a snapshot against a log" in r.stderr
    nsys = SAMPLES / "nsys" / "synthetic_memory.sqlite"
    r = run_cli("diff", nsys, SAMPLES / "snapshots" / "memory_snapshot.pickle")
    assert r.exit_code == 1
    assert "(an Nsight Systems SQLite export) and AFTER" in r.stderr and "(a PyTorch memory snapshot) do not compare" in r.stderr
    r = run_cli("diff", LOG, LOG, "--align", "step")
    assert r.exit_code == 2 and "--align step needs record_function steps" in r.stderr
    for r in (run_cli("diff", LOG, missing), run_cli("diff", ncu, LOG)):
        assert len([ln for ln in r.stderr.splitlines() if ln.startswith("Error: ")]) == 1


def test_a_log_against_a_snapshot_compares_what_both_hold():
    snap = SAMPLES / "snapshots" / "memory_snapshot.pickle"
    result = diff(LOG, snap)
    assert result.value.before.side.kind == "log" and result.value.after.side.kind == "snapshot"
    (peak,) = _deltas(result, "peak_allocated")
    assert peak["before"] is not None and peak["after"] is not None
    assert result.value.settings["differ"] == []  # a log records no settings: not compared, and said
    assert any("allocator settings not compared (BEFORE" in m for m in result.messages)


def test_align_events_and_the_plot_and_series_table(tmp_path):
    result = diff(LOG, ROTATED, align="events")
    s = result.value.series
    assert s.schema.metadata[b"veotrace.schema"] == b"diff_series/1"
    assert set(s.column("side").to_pylist()) == {"before", "after"}
    ent = [r for r in s.to_pylist() if r["metric"] == "entropy_bits" and r["side"] == "before"]
    assert ent[-1]["x"] == result.value.before.value("entropy").summary["events_counted"]
    assert result.plot(tmp_path / "d.png") > 1000
    assert result.to_dict()["series"]["x_unit"] == "events"


def test_report_of_two_runs_has_a_diff_section(tmp_path):
    from veotrace.reporting.run import build_report

    report = build_report([LOG, ROTATED])
    (section,) = [s for s in report.sections if s.title == "Two runs compared"]
    assert section.error is None and section.figure_svg
    assert section.command == f"veotrace diff {LOG} {ROTATED}"
    expected = diff(LOG, ROTATED).value.deltas
    assert [r[0] for r in section.rows] == [d["label"] for d in expected]
    single = build_report([LOG])
    assert not [s for s in single.sections if s.title == "Two runs compared"]  # one PATH: nothing to compare


def test_a_reader_error_on_one_side_is_the_readers_own_error(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("timestamp,op_type,size_bytes\n1,alloc,10\n2,alloc,oops\n")
    r = run_cli("diff", bad, LOG)
    assert r.exit_code == 1
    assert r.stderr.startswith(f"Error: {bad}:3: column 'size_bytes': expected a non-negative integer byte count")


def _stepped_snapshot(path: Path, step_us: int, steps: int = 12) -> Path:
    """A snapshot of ``steps`` training steps of ``step_us`` each (ProfilerStep#k annotations), each step
    allocating and freeing the same three blocks in one 8 MiB segment."""
    import pickle

    t0, seg, mib = 1_700_000_000_000_000, 0x7F0000000000, 1 << 20
    trace = [{"action": "segment_alloc", "addr": seg, "size": 8 * mib, "stream": 0, "time_us": t0}]
    notes = []
    for k in range(steps):
        t = t0 + k * step_us + 1
        notes.append({"stage": "START", "name": f"ProfilerStep#{k}", "device": 0, "time_us": t})
        for i, size in enumerate((mib, 2 * mib, 512 << 10)):
            trace.append({"action": "alloc", "addr": seg + i * 3 * mib, "size": size, "stream": 0,
                          "time_us": t + 1 + i * step_us // 8})
        for i, size in enumerate((mib, 2 * mib, 512 << 10)):
            for action in ("free_requested", "free_completed"):
                trace.append({"action": action, "addr": seg + i * 3 * mib, "size": size, "stream": 0,
                              "time_us": t + step_us // 2 + i * step_us // 8})
        notes.append({"stage": "END", "name": f"ProfilerStep#{k}", "device": 0, "time_us": t + step_us - 2})
    segments = [{"device": 0, "address": seg, "total_size": 8 * mib, "stream": 0, "segment_type": "large",
                 "allocated_size": 0, "active_size": 0,
                 "blocks": [{"address": seg, "size": 8 * mib, "requested_size": 0, "state": "inactive"}]}]
    path.write_bytes(pickle.dumps({"segments": segments, "device_traces": [trace], "external_annotations": notes}))
    return path


def test_align_step_puts_a_slower_run_on_the_same_steps(tmp_path):
    fast = _stepped_snapshot(tmp_path / "fast.pickle", 100_000)
    slow = _stepped_snapshot(tmp_path / "slow.pickle", 200_000)  # the same steps, twice as long each
    result = diff(fast, slow, align="step")
    assert result.value.align == "step" and result.value.to_dict()["series"]["x_unit"] == "steps"
    rows = [r for r in result.value.series.to_pylist() if r["metric"] == "live_bytes_peak"]
    for side in ("before", "after"):
        xs = [r["x"] for r in rows if r["side"] == side]
        assert min(xs) < 0.5 and 11 <= max(xs) <= 12.5  # 12 steps on both sides, whatever their length
    by_time = diff(fast, slow)
    span = {s: max(r["x"] for r in by_time.value.series.to_pylist() if r["side"] == s) for s in ("before", "after")}
    assert span["after"] == pytest.approx(2 * span["before"], rel=0.1)
