"""gate --follow: the verdict at every completed window equals the offline gate on the log cut at that window's
end; none before the gate has enough windows; --on-fail gets the verdict JSON on stdin."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from veotrace.defaults import GATE_MIN_WINDOWS
from veotrace.errors import AnalysisError
from veotrace.runs.entropy import entropy
from veotrace.runs.follow_gate import follow_gate, run_hook
from veotrace.runs.gate import gate
from veotrace.synth.gate import gate_log
from veotrace.synth.live import HEADER, FeedClock, RotatingWriter, lines, steps

T0 = 1_700_000_000_000_000_000
W = 60.0
RESAMPLES = 300


def _rows(log, offset_windows=0) -> np.ndarray:
    t = log.table
    ts = np.asarray(t.column("ts_ns")) + T0 + int(offset_windows * W * 1e9)
    rows = np.stack([ts, np.zeros(ts.size, np.int64), np.asarray(t.column("size_bytes"))], axis=1)
    return rows[np.argsort(rows[:, 0], kind="stable")]


@pytest.fixture(scope="module")
def feed(tmp_path_factory):
    """A baseline of 40 windows, and a run that regresses (+0.6 bits) from window 24 on."""
    d = tmp_path_factory.mktemp("gate")
    base_log = d / "base.csv"
    base_log.write_bytes(HEADER + lines(_rows(gate_log(seed=1, windows=40, window_s=W))))
    baseline = d / "base.json"
    entropy([base_log], window="60s", save_baseline=baseline)
    # seed 3: no false alarm before the shift (others flap on the slope of a short prefix, as the offline gate does)
    run = np.concatenate([_rows(gate_log(seed=3, windows=24, window_s=W)),
                          _rows(gate_log(seed=103, windows=16, window_s=W, shift_bits=0.6), 24)])
    return d, baseline, run


def _offline(d, baseline, run, end_ns):
    prefix = d / f"prefix-{end_ns}.csv"
    prefix.write_bytes(HEADER + lines(run[run[:, 0] < end_ns]))
    try:
        return gate([prefix], baseline=baseline, resamples=RESAMPLES).value.verdict
    except AnalysisError:
        return None  # too short to test


def test_verdicts_equal_the_offline_gate_on_each_prefix(feed, tmp_path):
    d, baseline, run = feed
    writer = RotatingWriter(tmp_path / "logs", rotate_bytes=50_000)
    out, hooked = [], []
    verdict = follow_gate(writer.folder, baseline=baseline, emit=out.append, note=lambda m: None,
                          on_fail=hooked.append, resamples=RESAMPLES, poll=0.5, idle_timeout=3,
                          clock=FeedClock(writer, steps(run, seconds_per_step=5)))
    wins = [r for r in out if r["record"] == "window"]
    changes = {r["window"]: r["verdict"] for r in out if r["record"] == "verdict"}
    first = min(changes)
    assert first == GATE_MIN_WINDOWS - 1  # every window has events: the first verdict at the 20th
    assert changes[first] == "pass" and verdict == "fail"
    fail_at = min(k for k, v in changes.items() if v == "fail")
    assert 24 <= fail_at < 40 and list(changes.values()) == ["pass", "fail"]
    now = None
    for w in wins:
        now = changes.get(w["window"], now)
        assert now == _offline(d, baseline, run, w["end_ns"]), w["window"]
    assert len(hooked) == 1 and hooked[0]["window"] == fail_at and hooked[0]["verdict"] == "fail"
    assert hooked[0]["reason"].startswith("mean rose by")


def test_exit_on_fail_stops_at_the_failing_window(feed, tmp_path):
    d, baseline, run = feed
    log = tmp_path / "run.csv"
    log.write_bytes(HEADER + lines(run))
    out = []
    follow_gate(log, baseline=baseline, emit=out.append, note=lambda m: None, exit_on_fail=True,
                resamples=RESAMPLES, poll=0.5, idle_timeout=3, clock=FeedClock(None, []))
    fail = [r for r in out if r["record"] == "verdict" and r["verdict"] == "fail"][0]
    assert out[-1]["record"] == "end" and out[-1]["reason"] == "failed"
    assert [r for r in out if r["record"] == "window"][-1]["window"] == fail["window"]


def test_on_fail_command_gets_the_verdict_on_stdin(tmp_path):
    got = tmp_path / "got.json"
    notes = []
    hook = run_hook(f"{sys.executable} -c \"import sys; open({str(got)!r}, 'w').write(sys.stdin.read())\"",
                    notes.append)
    hook({"record": "verdict", "verdict": "fail", "window": 3})
    assert json.loads(got.read_text()) == {"record": "verdict", "verdict": "fail", "window": 3} and notes == []
    run_hook("exit 4", notes.append)({"verdict": "fail"})
    assert notes == ["Warning: --on-fail exited with code 4"]


def test_cli_exit_3_and_on_fail(feed, tmp_path):
    from typer.testing import CliRunner

    from veotrace.cli import app

    d, baseline, run = feed
    log = tmp_path / "run.csv"
    log.write_bytes(HEADER + lines(run))
    got = tmp_path / "alert.json"
    res = CliRunner().invoke(app, ["gate", str(log), "--baseline", str(baseline), "--follow", "--idle-timeout", "0.1s",
                                   "--poll", "0.02", "--resamples", str(RESAMPLES), "-f", "jsonl", "--exit-on-fail",
                                   "--on-fail", f"cat > {got}"])
    assert res.exit_code == 3, res.stderr
    recs = [json.loads(line) for line in res.stdout.splitlines()]
    fail = [r for r in recs if r["record"] == "verdict"][-1]
    assert fail["verdict"] == "fail" and json.loads(got.read_text()) == fail
    table = CliRunner().invoke(app, ["gate", str(log), "--baseline", str(baseline), "--follow", "--idle-timeout",
                                     "0.1s", "--poll", "0.02", "--resamples", str(RESAMPLES)])
    assert table.exit_code == 3
    verdicts = [ln for ln in table.stdout.splitlines() if ln.startswith("gate at window")]
    assert verdicts[0] == "gate at window 19: PASS" and verdicts[1].startswith(f"gate at window {fail['window']}: FAIL (mean rose by")
    bad = CliRunner().invoke(app, ["gate", str(log), "--baseline", str(baseline), "--on-fail", "true"])
    assert bad.exit_code == 2 and bad.stderr.strip() == "Error: --on-fail only applies with --follow"
