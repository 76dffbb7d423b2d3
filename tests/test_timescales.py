"""Issue 12 (part A): time scales from the data, units on durations, outlier rows, --by/--device, kernel
names in bursts, --ops that never occur, event windows' left-out events, Kendall on rounded entropies,
segment labels and plurals. On the real snapshots where they concern them (skipped when absent)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
from scipy import stats

from tests.conftest import real_trace, run_cli
from veotrace.analysis.bursts.bursts import compute_kernel_bursts
from veotrace.analysis.entropy.entropy import COLUMNS, compute_entropy, entropy_bits, size_classes
from veotrace.analysis.timescale import plural
from veotrace.analysis.trend import fit_trend
from veotrace.sources import iter_alloc_events, read_table

SNAP = "constructorsun_memory_snapshot.pickle"  # epoch time_us, 2.735 s, devices 0, 1, 2
MAGMA = "magma27_memory_snapshot.pickle"  # 248 ms, one device


def _json(*args) -> tuple[dict, str]:
    r = run_cli(*args, "--format", "json", "--no-progress")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout), r.stderr


def _csv(path: Path, ts, sizes, extra: dict | None = None) -> Path:
    cols = {"timestamp": pa.array(ts, pa.int64()), "op_type": ["alloc"] * len(ts), "size_bytes": sizes}
    pacsv.write_csv(pa.table({**cols, **(extra or {})}), path)
    return path


# --- 1. time scales -------------------------------------------------------------------------------

def test_short_snapshot_gets_a_window_from_the_data_and_says_so():
    out, err = _json("entropy", real_trace(SNAP))
    p, s, t = out["params"], out["summary"], out["trend"]
    assert p["window_choice"]["auto"] and p["window_choice"]["mode"] == "time"
    assert p["window_s"] == 0.01 and s["windows"] == 274 and s["windows"] >= 20
    assert "the default 5 min window gives 1 window over the 2.735 s span" in p["window_choice"]["reason"]
    assert err.count("Note: using windows of 10 ms (274 windows)") == 1 and "Error" not in err
    assert s["notes"] == err.strip().splitlines() and "3 phases of activity" in s["notes"][1]  # the idle gaps, said
    w = out["windows"]
    assert [x["window"] for x in w[:3]] == [0, 1, 2]  # from the first window, not from 1970
    assert w[0]["start_ns"] == s["first_ns"] == 1_757_253_255_215_904_000  # absolute time kept in JSON
    assert w[0]["start_s"] == 0 and w[1]["start_s"] == pytest.approx(0.01)  # window 0 starts at the first event
    assert t["display"]["unit"] == "bits/second" and t["slope_bits_per_hour"] == t["slope"]
    assert t["display"]["slope"] == pytest.approx(t["slope"] / 3600)


def test_explicit_window_stays_exact():
    out, err = _json("entropy", real_trace(SNAP), "--window", "300")
    assert out["summary"]["windows"] == 1 and out["params"]["window_s"] == 300.0
    assert out["params"]["window_choice"] == {"auto": False, "mode": "given"}
    # no note of a window chosen; only the size classes' (56% of its allocations are above 2 MiB, issue 39)
    assert err.startswith("Note: of the 3,025 counted allocations, 56% in the top class") and err.count("\n") == 1


def test_magma_snapshot_gets_a_usable_series():
    out, _ = _json("entropy", real_trace(MAGMA))
    assert out["params"]["window_choice"]["auto"] and out["trend"]["n"] >= 20  # non-empty windows in the fit


def test_auto_window_ground_truth(tmp_path):
    # 2,000 allocs evenly over 10 s of epoch time: 100 non-empty windows wanted -> 100 ms (200 ms gives 50)
    ts = 1_700_000_000_000_000_000 + np.arange(2000) * 5_000_000
    path = _csv(tmp_path / "a.csv", ts, [4096] * 2000)
    res = compute_entropy(iter_alloc_events([path], columns=COLUMNS))
    assert res.params["window_s"] == 0.1 and res.summary["windows"] == 100
    assert res.windows.column("events").to_pylist() == [20] * 100
    assert res.windows.column("window").to_pylist() == list(range(100))


def test_untimed_snapshot_gets_event_windows():
    out, err = _json("entropy", real_trace("cranberrii_memory_snapshot.pickle"))
    c = out["params"]["window_choice"]
    assert c["mode"] == "events" and c["reason"] == "the events have no timestamps"
    assert out["params"]["window_events"] == 3505 // 100 and out["summary"]["windows"] == 100
    assert out["trend"]["display"]["unit"] == "bits/window"


# --- 2. units on durations ------------------------------------------------------------------------

def test_window_and_step_units_equal_bare_seconds():
    a, _ = _json("entropy", real_trace(SNAP), "--window", "20ms", "--step", "10ms")
    b, _ = _json("entropy", real_trace(SNAP), "--window", "0.02", "--step", "0.01")
    assert a["windows"] == b["windows"] and a["params"]["window_s"] == 0.02 and a["params"]["step_s"] == 0.01
    c, _ = _json("entropy", real_trace(SNAP), "--window", "5m")
    assert c["params"]["window_s"] == 300.0


def test_gap_units_equal_bare_milliseconds():
    a, _ = _json("bursts", real_trace(SNAP), "--gap", "5")
    b, _ = _json("bursts", real_trace(SNAP), "--gap", "5000us")
    assert a["bursts"] == b["bursts"] and a["params"]["gap_ms"] == b["params"]["gap_ms"] == 5.0


@pytest.mark.parametrize("cmd, args, message", [
    ("entropy", ["--window", "5 fortnights"], "Error: --window: unknown unit 'fortnights'"),
    ("entropy", ["--step", "-1"], "Error: --step expects a duration"),
    ("entropy", ["--window-events", "10", "--window", "1s"], "Error: --window-events counts events, not time"),
    ("bursts", ["--gap", "0ms"], "Error: --gap must be a positive duration"),
])
def test_bad_durations_exit_2(cmd, args, message):
    r = run_cli(cmd, real_trace(SNAP), *args)
    assert r.exit_code == 2 and r.stdout == "" and r.stderr.startswith(message) and r.stderr.count("\n") == 1


# --- 3. outlier timestamps ------------------------------------------------------------------------

def test_one_epoch_row_in_a_log_of_small_numbers_is_named(tmp_path):
    ts = list(range(0, 1000 * 1_000_000, 1_000_000))  # 1,000 rows over 1 s
    ts[600] = 1_757_253_255_215_904_000  # one epoch-ns row
    path = _csv(tmp_path / "log.csv", ts, [4096] * 1000)
    r = run_cli("entropy", path, "--window", "1ms")
    assert r.exit_code == 1 and r.stdout == "" and r.stderr.count("\n") == 1
    assert r.stderr.startswith(f"Error: {path}: row 601 has timestamp 1,757,253,255,215,904,000 ns, far outside")
    assert "(0 .. 999,000,000 ns)" in r.stderr and "--time-unit" in r.stderr


def test_implausible_span_without_one_outlier_warns_and_shows_the_span(tmp_path):
    ts = np.arange(11) * 10_100_000_000  # 11 rows 10.1 s apart: 101 s in 1 ms windows = 101,001 windows
    path = _csv(tmp_path / "log.csv", ts, [4096] * 11)
    r = run_cli("entropy", path, "--window", "1ms", "--format", "csv", "-o", tmp_path / "w.csv")
    assert r.exit_code == 0 and pacsv.read_csv(tmp_path / "w.csv").num_rows == 101_001
    assert r.stderr.startswith("Warning: the run spans 1.683 min (101,001 windows for 11 rows read); check --time-unit "
                               "or use a longer --window\n")
    # and the size classes' note: every 4 KiB allocation is in the bottom class (issue 39)
    assert r.stderr.count("\n") == 2 and "100% in the bottom class (≤ 4 KiB, --min-class 2" in r.stderr


# --- 4. --by device|stream and --device ----------------------------------------------------------

def test_by_stream_ground_truth(tmp_path):
    # stream 0: always 4 KiB (H = 0); stream 1: 4 KiB and 8 KiB alternating (H = 1); pooled: 3/4, 1/4
    n = 400
    ts = np.arange(n) * 1_000_000_000
    stream = np.arange(n) % 2
    sizes = np.where(stream == 0, 4096, np.where((np.arange(n) // 2) % 2 == 0, 4096, 8192))
    path = _csv(tmp_path / "log.csv", ts, sizes, {"stream": stream})
    out, _ = _json("entropy", path, "--by", "stream", "--window", "40s")
    groups = {g["group"]: g for g in out["groups"]}
    assert set(groups) == {"0", "1"}
    assert {w["entropy_bits"] for w in groups["0"]["windows"]} == {0.0}
    assert {w["entropy_bits"] for w in groups["1"]["windows"]} == {1.0}
    pooled = -(0.75 * np.log2(0.75) + 0.25 * np.log2(0.25))
    assert all(abs(w["entropy_bits"] - pooled) < 1e-12 for w in out["windows"])
    assert groups["0"]["summary"]["events_counted"] == groups["1"]["summary"]["events_counted"] == 200


def test_by_device_on_the_real_snapshot_matches_device_filters():
    out, _ = _json("entropy", real_trace(SNAP), "--by", "device", "--window", "50ms")
    table = pa.Table.from_batches(list(iter_alloc_events([real_trace(SNAP)])))
    allocs = table.filter(pa.compute.equal(table.column("op"), "alloc"))
    counts = dict(zip(*np.unique(allocs.column("device").to_numpy(), return_counts=True)))
    assert {g["group"]: g["summary"]["events_counted"] for g in out["groups"]} == {str(k): int(v) for k, v in counts.items()}
    for g in out["groups"]:
        one, _ = _json("entropy", real_trace(SNAP), "--device", g["group"], "--window", "50ms")
        assert one["summary"]["events_counted"] == g["summary"]["events_counted"]
        # same windows (the group keeps the pooled span), same entropies where the device has events
        mine = {w["start_ns"]: w["entropy_bits"] for w in g["windows"] if w["events"]}
        theirs = {w["start_ns"]: w["entropy_bits"] for w in one["windows"] if w["events"]}
        assert mine == theirs


def test_by_device_csv_has_a_group_column(tmp_path):
    out = tmp_path / "w.csv"
    r = run_cli("entropy", real_trace(SNAP), "--by", "device", "--window", "100ms", "-f", "csv", "-o", out)
    assert r.exit_code == 0
    t = pacsv.read_csv(out)
    assert t.column_names[:2] == ["by", "group"]
    assert sorted(set(t.column("group").cast(pa.string()).to_pylist())) == ["0", "1", "2", "all"]
    assert t.num_rows == 4 * 28  # 2.735 s in 100 ms windows, per series


def test_bursts_by_device_sum_to_the_device_runs():
    out, _ = _json("bursts", real_trace(SNAP), "--by", "device")
    for g in out["groups"]:
        one, _ = _json("bursts", real_trace(SNAP), "--device", g["group"])
        assert one["bursts"] == [dict(b) for b in g["bursts"]]
        assert one["summary"]["events_counted"] == g["summary"]["events_counted"]
    assert sum(g["summary"]["events_counted"] for g in out["groups"]) == out["summary"]["events_counted"]


def test_device_that_is_not_there():
    r = run_cli("entropy", real_trace(SNAP), "--device", "7")
    assert r.exit_code == 1 and r.stderr == "Error: no events with op alloc were read on device 7. Check --ops and --device\n"


# --- 5. kernel bursts name their kernels ----------------------------------------------------------

def test_kernel_bursts_name_their_kernels():
    names = ["gemm", "gemm", "relu", "gemm", "copy", "relu", "relu", "relu", "solo"]
    start = [0, 10, 20, 30, 10_000_000, 10_000_010, 10_000_020, 10_000_030, 50_000_000]
    n = len(names)
    table = pa.table({"kind": pa.array(["kernel"] * n).dictionary_encode(),
                      "name": pa.array(names).dictionary_encode(), "start_ns": pa.array(start, pa.int64()),
                      "end_ns": pa.array(start, pa.int64()), "device": pa.array([0] * n, pa.int32())})
    res = compute_kernel_bursts(table, gap_ms=1)
    assert res.bursts.column("top_kernels").to_pylist() == ["gemm (3), relu (1)", "relu (3), copy (1)"]
    assert res.burst_kernels[1] == [{"name": "relu", "launches": 3}, {"name": "copy", "launches": 1}]
    top = {k["name"]: k for k in res.summary["top_kernels"]}
    assert top["relu"] == {"name": "relu", "launches": 4, "launches_in_bursts": 4, "bursts": 2}
    assert top["solo"]["launches_in_bursts"] == 0 and res.summary["kernels"] == 4
    assert res.to_dict()["bursts"][0]["kernels"][0] == {"name": "gemm", "launches": 3}


def test_kernel_bursts_on_a_real_nsys_export():
    path = real_trace("casio_output-file.sqlite")
    out, _ = _json("bursts", path, "--events", "kernels")
    launches = read_table([path], "gpu_activity")
    kernels = launches.filter(pa.compute.equal(launches.column("kind").cast(pa.string()), "kernel"))
    names, counts = np.unique(np.asarray(kernels.column("name").cast(pa.string()).to_pylist(), dtype=object),
                              return_counts=True)
    truth = dict(zip(names.tolist(), counts.tolist()))
    for k in out["summary"]["top_kernels"]:
        assert k["launches"] == truth[k["name"]] and k["launches_in_bursts"] <= k["launches"]
    assert out["summary"]["kernels"] == len(truth)
    for b in out["bursts"]:
        assert 1 <= len(b["kernels"]) <= 3 and sum(k["launches"] for k in b["kernels"]) <= b["events"]
    table = run_cli("bursts", path, "--events", "kernels")
    assert table.exit_code == 0 and "Top kernels (116 kernels launched)" in table.stdout


# --- 6. --ops that never occur --------------------------------------------------------------------

@pytest.mark.parametrize("cmd", ["entropy", "bursts"])
def test_ops_that_never_occur_list_those_that_do(cmd):
    r = run_cli(cmd, real_trace(MAGMA), "--ops", "alloc,bogus")
    assert r.exit_code == 1 and r.stdout == ""
    assert r.stderr == ("Error: --ops bogus: no such op in the input; the ops that occur are: alloc, "
                        "free_completed, free_requested\n")


# --- 7. the trailing partial event window ---------------------------------------------------------

def test_window_events_reports_the_events_left_out():
    out, err = _json("entropy", real_trace("cranberrii_memory_snapshot.pickle"), "--window-events", "1000")
    assert out["summary"]["windows"] == 3 and out["summary"]["events_left_out"] == 505  # 3,505 allocs
    assert "Note: the last 505 counted events do not fill a window of 1,000 events and are left out" in err


# --- 8. Kendall's tau on rounded entropies --------------------------------------------------------

def test_kendall_equals_scipy_on_windows_with_ties():
    rng = np.random.default_rng(0)
    low, high = np.array([3, 7, 1, 0, 5, 2, 9, 4, 6, 8, 11]), np.array([9, 9, 8, 7, 9, 8, 9, 9, 8, 7, 9])
    rows = [rng.permutation(high if i > 25 and rng.random() < 0.7 else low) for i in range(60)]
    h = entropy_bits(np.array(rows))
    x = np.arange(60, dtype=np.float64)
    assert len(set(h.tolist())) > len(set(np.round(h, 12).tolist())) == 2  # last-bit noise hides the ties
    fit = fit_trend(x, h)
    ref = stats.kendalltau(x, np.round(h, 12))
    assert fit["kendall"]["tau"] == pytest.approx(ref.statistic, abs=1e-15)
    assert fit["kendall"]["p_value"] == pytest.approx(ref.pvalue, rel=1e-12)


# --- 9. segments ----------------------------------------------------------------------------------

def test_segment_labels_from_the_requested_bounds_and_beyond_the_end_warns():
    out, err = _json("entropy", real_trace(SNAP), "--segments", "1s,2s,5s")
    assert [s["label"] for s in out["segments"]] == ["0-1 s", "1-2 s", "2-5 s", "5 s-end"]
    assert [s["windows"] for s in out["segments"]][-1] == 0
    assert "Warning: --segments 5 s lies beyond the end of the run (2.735 s); its segment holds no windows" in err


def test_hour_segments_keep_their_labels():
    from veotrace.analysis.trend import segment_labels

    assert segment_labels([48, 120]) == ["0-48 h", "48-120 h", "120 h-end"]


# --- 10. wording --------------------------------------------------------------------------------

def test_plurals_and_one_bytes_style():
    assert plural(1, "window") == "1 window" and plural(2, "burst") == "2 bursts"
    assert plural(1, "kernel launch", "kernel launches") == "1 kernel launch"
    r = run_cli("entropy", real_trace(SNAP), "--window", "300")
    assert "1 window of 5 min" in r.stdout and "1 windows" not in r.stdout
    b = run_cli("bursts", real_trace(SNAP))
    assert "45 bursts hold 3,013 of 3,025 events (99.6%)" in b.stdout
    assert "179.0 GiB" in b.stdout and "855.3 MiB" in b.stdout  # summary and distribution in one style


def test_size_classes_unchanged():  # the definition the windows above rely on
    assert size_classes(np.array([4096, 8192])).tolist() == [2, 3]


# --- partial -> merge -> finish, and the hard cap ---------------------------------------------------

def _batches(ts, sizes, device, chunk):
    table = pa.table({"ts_ns": pa.array(ts, pa.int64()), "op": pa.array(["alloc"] * len(ts)).dictionary_encode(),
                      "size_bytes": pa.array(sizes, pa.int64()), "device": pa.array(device, pa.int32())})
    return table.to_batches(max_chunksize=chunk)


@pytest.mark.parametrize("seed, span_ns, window_events", [
    (1, 3_000_000_000, None),  # 3 s: the window is chosen from the data after the merge
    (2, 40 * 3600 * 10**9, None),  # 40 h: the default window holds, the buffers are dropped
    (3, 3_000_000_000, 25),
])
def test_partials_merged_in_any_split_equal_one_pass(seed, span_ns, window_events):
    from veotrace.analysis.entropy.entropy import entropy_partial, finish_entropy
    from veotrace.analysis.entropy.entropy_series import origin_of

    rng = np.random.default_rng(seed)
    n = 3000
    ts = 1_700_000_000_000_000_000 + rng.integers(0, span_ns, n)
    sizes = 2 ** rng.integers(10, 24, n)
    device = rng.integers(0, 3, n)
    kw = {"by": "device", "window_events": window_events}
    one = finish_entropy(entropy_partial(_batches(ts, sizes, device, 512), **kw))
    kw["origin_ns"] = origin_of(_batches(ts, sizes, device, 512))  # what the engines give every piece
    order = rng.permutation(n)
    parts = [entropy_partial(_batches(ts[idx], sizes[idx], device[idx], 256), **kw)
             for idx in np.array_split(order, [700, 2100])]
    merged = parts[2].merge(parts[0]).merge(parts[1])
    many = finish_entropy(merged)
    assert many.params == one.params
    if window_events is None:  # event windows follow timestamp order; equal timestamps may swap
        assert many.windows.equals(one.windows)
        for a, b in zip(many.groups, one.groups):
            assert a["group"] == b["group"] and a["windows"].equals(b["windows"])
    assert many.summary["events_counted"] == one.summary["events_counted"] == n


def test_hard_cap_stays(tmp_path):
    # 30 rows spread evenly over 10 days in 1 us windows: no single outlier, 8.6e11 windows
    path = _csv(tmp_path / "log.csv", np.linspace(0, 10 * 86400 * 10**9, 30).astype(np.int64), [4096] * 30)
    r = run_cli("entropy", path, "--window", "1us")
    assert r.exit_code == 1 and "864,000,000,001 windows of 1 us for 30 rows read, nearly all empty" in r.stderr


def test_a_sparse_log_is_refused_before_millions_of_empty_windows(tmp_path):
    """Issue 25 (found by the device/stream benchmark): two rows 28 years apart made 2.9 million 5-min
    windows, 16 s and 2.9 GB; now one Error naming the span, the windows and what to check."""
    path = _csv(tmp_path / "sparse.csv", np.array([0, 883 * 10**15], np.int64), [4096, 8192])
    r = run_cli("entropy", path)
    assert r.exit_code == 1 and len(r.stderr.splitlines()) == 1
    assert "2,943,334 windows of 5 min for 2 rows read, nearly all empty" in r.stderr and "--time-unit" in r.stderr


def test_by_stream_on_an_untimed_snapshot_names_stream_handles_in_hex():
    out, err = _json("entropy", real_trace("maphsge4_snapshot.pickle"), "--by", "stream", "--window-events", "30")
    table = pa.Table.from_batches(list(iter_alloc_events([real_trace("maphsge4_snapshot.pickle")])))
    allocs = table.filter(pa.compute.equal(table.column("op"), "alloc"))
    keys, counts = np.unique(allocs.column("stream").to_numpy(), return_counts=True)
    want = {(hex(int(k)) if k >= 1 << 20 else str(int(k))): int(c) for k, c in zip(keys, counts)}
    got = {g["group"]: g["summary"]["events_counted"] for g in out["groups"]}
    assert got == want and got["0x759c4b0"] == 2625
    for g in out["groups"]:  # each group's own windows of 30 consecutive events, the rest left out
        assert g["summary"]["windows"] == want[g["group"]] // 30
        assert g["summary"]["events_left_out"] == want[g["group"]] % 30


def test_kernel_bursts_by_stream_and_device_filter():
    path = Path(__file__).resolve().parents[1] / "sample_traces" / "nsys" / "synthetic_memory.sqlite"
    if not path.exists():
        pytest.skip("sample nsys export not bundled")
    out, _ = _json("bursts", path, "--events", "kernels", "--by", "stream", "--gap", "2ms")
    launches = read_table([path], "gpu_activity")
    for g in out["groups"]:
        sub = launches.filter(pa.compute.equal(launches.column("stream"), int(g["group"])))
        alone = compute_kernel_bursts(sub, gap_ms=2)
        assert [b["events"] for b in g["bursts"]] == alone.bursts.column("events").to_pylist()
        assert [b["top_kernels"] for b in g["bursts"]] == alone.bursts.column("top_kernels").to_pylist()
    assert sum(g["summary"]["events_counted"] for g in out["groups"]) == out["summary"]["events_counted"]
    r = run_cli("bursts", path, "--events", "kernels", "--device", "5")
    assert r.exit_code == 1 and r.stderr.startswith("Error: the input holds no kernel launches on device 5")


def test_window_events_wins_over_a_pinned_window_in_the_library():
    # the gate pins every baseline parameter, window_s included, also for event-window baselines
    t = pa.table({"ts_ns": pa.array([None] * 10, pa.int64()), "op": pa.array(["alloc"] * 10).dictionary_encode(),
                  "size_bytes": [4096, 8192] * 5})
    res = compute_entropy(t.to_batches(), window_s=300, window_events=4)
    assert res.params["window_events"] == 4 and res.params["window_s"] is None
    assert res.summary["windows"] == 2 and res.summary["events_left_out"] == 2
    assert res.windows.column("entropy_bits").to_pylist() == [1.0, 1.0]


def test_segments_of_untimed_event_windows_are_labelled_in_windows():
    out, err = _json("entropy", real_trace("cranberrii_memory_snapshot.pickle"), "--window-events", "30",
                     "--segments", "40,80,200")
    assert [(s["label"], s["windows"]) for s in out["segments"]] == [
        ("0-40 windows", 40), ("40-80 windows", 40), ("80-200 windows", 36), ("200 windows-end", 0)]
    assert "Warning: --segments window 200 lies beyond the end of the run (window 115)" in err


def test_windows_start_at_the_first_event_on_every_route(tmp_path, monkeypatch):
    """Issue 24: entropy's windows were aligned to multiples of the window since the epoch, so window 0
    started before the first event (``-9.168e-08 h`` in the README's main command). Window 0 now starts
    at the run's first event, on one process and on pieces (``--jobs``), and the table says 0."""
    from veotrace import engine

    rng = np.random.default_rng(7)
    first, w = 1_700_000_123_456_789_123, 60 * 10**9
    ts = np.sort(first + np.concatenate([[0], rng.integers(1, 40 * w, 4999)]))
    sizes = 2 ** rng.integers(10, 22, ts.size)
    path = _csv(tmp_path / "log.csv", ts, sizes)
    k = (ts - first) // w  # the windows, from the first event
    cls = size_classes(sizes)
    want = [stats.entropy(np.bincount(cls[k == i]), base=2) for i in range(k.max() + 1)]
    one, _ = _json("entropy", path, "--window", "60s")
    monkeypatch.setattr(engine, "SPLIT_BYTES", 20_000)
    par, _ = _json("entropy", path, "--window", "60s", "--jobs", "2")
    for out in (one, par):
        win = out["windows"]
        assert win[0]["start_ns"] == first and win[0]["start_s"] == 0
        assert [x["start_ns"] for x in win] == [first + i * w for i in range(len(want))]
        assert [x["entropy_bits"] for x in win] == pytest.approx(want, abs=1e-12)
    assert par["windows"] == one["windows"] and par["trend"] == one["trend"]
    r = run_cli("entropy", path, "--window", "60s", "--no-progress")
    row0 = next(line for line in r.stdout.splitlines() if line.startswith("│  0 "))
    assert row0.split("│")[2].strip() == "0"  # start (min since the first event)


def test_out_of_order_rows_count_before_window_zero(tmp_path):
    """The origin is the earliest of the first 1,024 timestamps read (the first event of a log written
    in time order); a row later in the file but earlier in time falls in a window before it, counted."""
    ts = np.array([10_000, 10_500, 11_000, 12_500] * 300 + [9_000], np.int64) * 10**6  # one late row at 9 s
    path = _csv(tmp_path / "late.csv", ts, [4096] * ts.size)
    out, _ = _json("entropy", path, "--window", "1s")
    assert out["summary"]["events_counted"] == ts.size and out["summary"]["first_ns"] == 9_000 * 10**6
    assert [x["start_ns"] for x in out["windows"]] == [9_000 * 10**6, 10_000 * 10**6, 11_000 * 10**6, 12_000 * 10**6]
    assert [x["events"] for x in out["windows"]] == [1, 600, 300, 300]


def test_one_slope_unit_in_every_output_of_a_short_run(tmp_path):
    """Issue 24: one slope was shown in four units (bits/second in the table, bits/ms in the report
    figure, bits/hour in the report's trend table and in the gate). A 3-second run now says bits/second
    in the table, the JSON display, the report's trend table and figure, and the gate."""
    import matplotlib

    matplotlib.use("Agg")
    import veotrace
    from veotrace.plot.entropy import plot_entropy

    rng = np.random.default_rng(3)
    ts = np.sort(rng.integers(0, 3 * 10**9, 3000))
    ts[0] = 0
    path = _csv(tmp_path / "short.csv", ts, 2 ** (10 + (rng.random(3000) * (1 + ts / 1e9)).astype(int)))
    out, _ = _json("entropy", path)
    d = out["trend"]["display"]
    assert d["unit"] == "bits/second" and d["slope"] == pytest.approx(out["trend"]["slope"] / 3600)
    text = run_cli("entropy", path, "--segments", "1s,2s", "--no-progress").stdout
    assert "slope (bits/second)" in text and "bits/hour" not in text and "bits/h " not in text
    run = veotrace.entropy(path, segments="1s,2s")
    fig = plot_entropy(run.value, size=(800, 400))
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()] + [t.get_text() for t in fig.axes[0].texts]
    assert any(f"{d['slope']:+.3g} bits/second" in s for s in labels)
    assert all("bits/" not in s or "bits/second" in s for s in labels) and len(fig.axes[0].texts) == 3
    html = tmp_path / "r.html"
    assert run_cli("report", path, "-o", html).exit_code == 0
    import re

    assert set(re.findall(r"bits/[a-z]+", html.read_text())) == {"bits/second"}
    base = tmp_path / "b.json"
    assert run_cli("entropy", path, "--save-baseline", base, "-o", tmp_path / "e.txt").exit_code == 0
    r = run_cli("gate", path, "--baseline", base, "-f", "json")
    assert {c["unit"] for c in json.loads(r.stdout)["checks"]} == {"bits", "bits/second"}


def test_phases_are_the_stretches_between_long_idle_gaps():
    from veotrace.analysis.timescale import phases

    ev = np.array([3, 1, 0, 2] + [0] * 12 + [1, 1, 0, 0, 5] + [0] * 3 + [4] + [0] * 2)
    assert phases(ev) == [(0, 4), (16, 25)]  # the 12-window gap splits; gaps of 2 and 3 do not; edges trimmed
    assert phases(np.array([0, 0, 1, 1, 0])) == [(2, 4)] and phases(np.zeros(5)) == []


def test_two_phases_around_an_idle_gap_are_said_with_their_own_trends(tmp_path):
    """Issue 24: a 'significant' trend that was two phases around a gap. A log of one class mix, an idle
    second, then a wider mix: the whole-run trend is significant, each phase is flat, and both are said."""
    rng = np.random.default_rng(5)
    a = np.sort(rng.integers(0, 10**9, 1500))
    b = np.sort(rng.integers(2 * 10**9, 3 * 10**9, 1500))
    a[0] = 0
    sizes = np.r_[2 ** rng.integers(12, 14, a.size), 2 ** rng.integers(12, 20, b.size)]  # 2 classes, then 8
    path = _csv(tmp_path / "phases.csv", np.r_[a, b], sizes)
    out, err = _json("entropy", path)
    ph = out["summary"]["phases"]
    assert len(ph) == 2 and out["trend"]["kendall"]["p_value"] < 1e-6
    assert ph[0]["start_s"] == 0 and ph[0]["end_s"] <= 1.0 + 1e-9 and 2.0 - 0.05 <= ph[1]["start_s"] <= 2.0
    assert 0.85 < ph[0]["mean_entropy_bits"] <= 1.0 and 2.6 < ph[1]["mean_entropy_bits"] <= 3.0  # log2 2, log2 8, sampled
    assert all(p["kendall"]["p_value"] > 0.01 for p in ph) and ph[0]["slope_unit"] == "bits/second"
    assert "Note: the run is idle for" in err and "2 phases of activity" in err and err.count("idle") == 1
    assert any("2 phases" in n for n in out["summary"]["notes"])
    text = run_cli("entropy", path, "--no-progress").stdout
    assert "Phases of activity (between idle gaps)" in text


def test_magma27s_significant_trend_is_two_phases_around_its_gap():
    out, err = _json("entropy", real_trace(MAGMA))
    ph = out["summary"]["phases"]
    assert out["trend"]["kendall"]["p_value"] < 0.05 and len(ph) == 2
    assert all(p["kendall"]["p_value"] > 0.05 for p in ph)  # neither phase trends alone
    assert "idle for 112.5 ms of its 248.2 ms" in err


def test_one_window_rule_for_entropy_fragmentation_and_simulate_on_a_short_log(tmp_path):
    """Issue 24: fragmentation kept 300 s windows on a 3 s log (one window) and simulate cut every trace
    into ~50 windows: every timed analysis now takes the same rule, said on stderr and in the JSON."""
    rng = np.random.default_rng(2)
    ts = np.sort(rng.integers(0, 3 * 10**9, 2000))
    ts[0] = 0
    path = tmp_path / "short.csv"
    rows = ["timestamp,op_type,size_bytes,address"] + [f"{t},alloc,4096,{0x10000 + i * 4096}" for i, t in enumerate(ts)]
    path.write_text("\n".join(rows) + "\n")
    ent, e_err = _json("entropy", path)
    frag, f_err = _json("fragmentation", path)
    sim, s_err = _json("simulate", path, "-p", "ideal")
    w = ent["params"]["window_s"]
    assert w == frag["summary"]["window_choice"]["window_s"] == sim["params"]["window_choice"]["window_s"] == 0.02
    assert frag["summary"]["windows"] == 150 and sim["params"]["window_ns"] == 20_000_000
    why = "Note: using windows of 20 ms{}: the default 5 min window gives 1 window over the 3 s span; give --window"
    assert why.format(" (150 windows)") in e_err and why.format("") in f_err and why.format("") in s_err
    for args in (("fragmentation", path, "--window", "1s"), ("simulate", path, "-p", "ideal", "--window", "1s")):
        given, err = _json(*args)
        assert "default 5 min window" not in err  # a window asked for is kept
