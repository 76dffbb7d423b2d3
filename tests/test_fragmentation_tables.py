"""fragmentation's window numbers and tables (issue 39): on a timed snapshot the JSON's window numbers were
epoch-based (175,725,325,521); they count from 0 as for a log. The window table mixed a window's peak
(live) with its end value (reserved): one kind per table, each named."""

from __future__ import annotations

import json

from tests.conftest import SAMPLES, run_cli

SNAPSHOT = SAMPLES / "snapshots" / "memory_snapshot.pickle"


def test_window_numbers_count_from_zero_on_a_timed_snapshot():
    out = json.loads(run_cli("fragmentation", SNAPSHOT, "-f", "json").stdout)
    ks = sorted({w["window"] for w in out["windows"]})
    assert ks[0] == 0 and ks == list(range(len(ks)))
    assert out["windows"][0]["start_ns"] > 10**18  # the absolute time stays in start_ns
    w = out["params"]["window_s"] * 1e9
    assert all(round((r["start_ns"] - out["windows"][0]["start_ns"]) / w) == r["window"] for r in out["windows"])
    import veotrace

    bins = veotrace.fragmentation(SNAPSHOT).value.bins.column("window").to_pylist()
    assert min(bins) == 0 and max(bins) == ks[-1]


def test_each_window_table_holds_one_kind_and_says_which():
    text = run_cli("fragmentation", SNAPSHOT, "--rows", "0").stdout
    end_t = text.index("Windows: the state at each window's end")
    peak_t = text.index("Windows: the peaks within each window")
    end_table, peak_table = text[end_t:peak_t], text[peak_t:text.index("Hot zones")]
    assert "live peak" not in end_table and "reserved" in end_table and "live" in end_table
    assert "live peak" in peak_table and "reserved peak" in peak_table and "free" not in peak_table


def test_by_site_reads_a_snapshot_without_times_at_its_event_windows(tmp_path):
    """``fragmentation --by site`` exited 2 ('with times') on an untimed snapshot that ``sites`` reads: its
    stranded bytes are now given at the end of each event window, and the last equals sites' end state."""
    import pickle

    from veotrace.synth.torch import synthetic_snapshot

    snap, _ = synthetic_snapshot(seed=3, n_allocs=400, with_time=False)
    path = tmp_path / "untimed.pickle"
    path.write_bytes(pickle.dumps(snap))
    r = run_cli("fragmentation", path, "--by", "site", "--window-events", "100", "-f", "json")
    assert r.exit_code == 0, r.stderr
    series = json.loads(r.stdout)["pinning"]["devices"]["0"]
    entries = len(snap["device_traces"][0])
    assert [w["end_entry"] for w in series] == [*range(100, entries, 100), entries]
    sites = json.loads(run_cli("sites", path, "-f", "json").stdout)["devices"]["0"]["pinning"]
    assert series[-1]["stranded_bytes"] == sites["stranded_bytes"]
    text = " ".join(run_cli("fragmentation", path, "--by", "site", "--window-events", "100").stdout.split())
    assert "windows of 100 trace entries" in text and "end (entry)" in text
