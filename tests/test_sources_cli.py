"""Every source through `entropy`/`convert`: snapshots work, refused or unread formats get one Error: line."""

from __future__ import annotations

import json
import os
import pickle

from tests.conftest import real_trace, run_cli


class _Evil:
    def __reduce__(self):
        return (open, ("/tmp/veotrace-pwned-by-test", "w"))


def test_malicious_pickle_is_refused_and_runs_nothing(tmp_path):
    target = "/tmp/veotrace-pwned-by-test"
    if os.path.exists(target):
        os.remove(target)
    path = tmp_path / "evil.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [[_Evil()]]}, protocol=4))
    r = run_cli("entropy", path, "--window-events", "10")
    assert r.exit_code == 1 and r.stderr.startswith("Error: ") and "refused" in r.stderr
    assert not os.path.exists(target)


def test_snapshot_without_time_says_use_window_events():
    r = run_cli("entropy", real_trace("cranberrii_memory_snapshot.pickle"))
    # entropy now chooses event-count windows itself for untimed input (issue 12) and says so on stderr
    assert (r.exit_code == 1 and "Use --window-events" in r.stderr) or (r.exit_code == 0 and "--window-events" in r.stderr)


def test_snapshot_event_windows_and_convert(tmp_path):
    snap = real_trace("cranberrii_memory_snapshot.pickle")
    r = run_cli("entropy", snap, "--window-events", "500", "-f", "json")
    out = json.loads(r.stdout)
    assert r.exit_code == 0 and out["summary"]["events_counted"] == 3505  # alloc actions (FORMATS.md C.4)
    assert len(out["windows"]) == 3505 // 500
    pq = tmp_path / "snap.parquet"
    assert run_cli("convert", snap, "-o", pq).exit_code == 0
    again = json.loads(run_cli("entropy", pq, "--window-events", "500", "-f", "json").stdout)
    assert again["windows"] == out["windows"]


def test_nsys_sqlite_without_memory_events_is_refused_clearly():
    path = real_trace("lianhang_report1.sqlite")
    r = run_cli("entropy", path)
    assert r.exit_code == 1 and "no GPU memory events" in r.stderr and str(path) in r.stderr
    assert "Traceback" not in r.stderr


def test_ncu_file_is_not_an_alloc_log():
    r = run_cli("entropy", real_trace("andrewxu_nsight_cfd_097K.log"))
    assert r.exit_code == 1 and "holds no alloc/free events" in r.stderr
