"""entropy --follow on the command line: exit codes, stdout (records only) and stderr (one Error line) apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from veotrace.cli import app

runner = CliRunner()
LOGS = Path(__file__).resolve().parent.parent / "sample_traces" / "alloc_logs"
FAST = ["--idle-timeout", "0.2s", "--poll", "0.02"]


def test_jsonl_equals_the_offline_windows():
    res = runner.invoke(app, ["entropy", str(LOGS), "--follow", *FAST, "--window", "60s", "-f", "jsonl"])
    assert res.exit_code == 0, res.stderr
    recs = [json.loads(line) for line in res.stdout.splitlines()]
    off = json.loads(runner.invoke(app, ["entropy", str(LOGS), "--window", "60s", "-f", "json"]).stdout)
    keys = list(off["windows"][0])
    assert [{k: r[k] for k in keys} for r in recs if r["record"] == "window"] == off["windows"]
    assert recs[-1] == {"format": "veotrace.follow/1", "record": "end", "command": "entropy", "reason": "idle",
                        "events_read": 30000, "events_counted": off["summary"]["events_counted"],
                        "windows": len(off["windows"]), "late_rows": 0, "skipped_rows": 0}
    assert res.stderr == ""


def test_table_rows_say_the_same_numbers():
    res = runner.invoke(app, ["entropy", str(LOGS), "--follow", *FAST, "--window", "60s"])
    assert res.exit_code == 0
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["window", "start_ns", "hours", "events", "classes", "H", "(bits)"]
    off = json.loads(runner.invoke(app, ["entropy", str(LOGS), "--window", "60s", "-f", "json"]).stdout)["windows"]
    w = off[1]
    assert lines[2].split() == [str(w["window"]), str(w["start_ns"]), f"{w['hours']:.3f}", f"{w['events']:,}",
                                str(w["classes_present"]), "-" if w["entropy_bits"] is None else f"{w['entropy_bits']:.4f}"]
    assert lines[-2].endswith("*") and lines[-1].startswith("# stopped (idle): 14,220 windows, 30,000 events read")


@pytest.mark.parametrize("args, message", [
    (["--follow", str(LOGS), str(LOGS)], "Error: --follow follows one file or folder, got 2 inputs"),
    (["--until", "1h", str(LOGS)], "Error: --until only applies with --follow"),
    (["-f", "jsonl", str(LOGS)], "Error: --format jsonl is the output of --follow. Use --format json for one object"),
    (["--follow", "-f", "csv", str(LOGS)], "Error: --follow prints a table or JSON Lines, not --format csv. Use -f jsonl"),
    (["--follow", "--by", "device", str(LOGS)],
     "Error: --by cannot be used with --follow. Run the command again on the finished log for those"),
    (["--follow", "--poll", "0", str(LOGS)], "Error: --poll must be a positive duration, got '0'"),
])
def test_usage_errors(args, message):
    res = runner.invoke(app, ["entropy", *args])
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.strip() == message


def test_target_not_there(tmp_path):
    missing = tmp_path / "run.csv"
    res = runner.invoke(app, ["entropy", str(missing), "--follow", "--idle-timeout", "0.1s", "--poll", "0.02"])
    assert res.exit_code == 1 and res.stdout == ""
    assert res.stderr.splitlines() == [
        f"Waiting for {missing} to appear (up to --idle-timeout 0.1 s)",
        f"Error: {missing}: the follow target did not appear within --idle-timeout 0.1 s. "
        "Check the path, or give a longer --idle-timeout"]


def test_state_of_another_input(tmp_path):
    state = tmp_path / "s.json"
    args = ["--follow", *FAST, "--window", "60s", "-f", "jsonl", "--state", str(state)]
    assert runner.invoke(app, ["entropy", str(LOGS), *args]).exit_code == 0
    other = tmp_path / "other"
    other.mkdir()
    res = runner.invoke(app, ["entropy", str(other), *args])
    assert res.exit_code == 1 and res.stdout == ""
    assert res.stderr.strip() == (
        f'Error: {state}: the checkpoint is of input "{LOGS}", this run\'s is "{other}". '
        "Give another --state file, or remove this one to start from the beginning")
    again = runner.invoke(app, ["entropy", str(LOGS), *args])  # resumed: nothing new, the last window again
    assert again.exit_code == 0 and again.stderr.startswith(f"Resuming from {state}: 30,000 events read before")
    recs = [json.loads(line) for line in again.stdout.splitlines()]
    assert [r["record"] for r in recs] == ["window", "end"] and recs[0]["complete"] is False


def _written_in_read_order(tmp_path) -> Path:
    """The sample logs copied with modification times in the order an offline read takes them (.1, .2, .10):
    a follower reads a folder's files oldest first, and a checkout stamps them in whatever order it writes."""
    import os
    import shutil

    from veotrace.sources import ReadReport, resolve_inputs
    from veotrace.sources.base import ReadOptions

    folder = tmp_path / "alloc_logs"
    shutil.copytree(LOGS, folder)
    order = resolve_inputs([folder], "alloc_events", options=ReadOptions(), report=ReadReport())
    for k, (path, _) in enumerate(order):
        os.utime(path, ns=(1_700_000_000 * 10**9 + k * 10**9,) * 2)
    return folder


def test_fragmentation_follow_jsonl_equals_offline(tmp_path):
    logs = _written_in_read_order(tmp_path)
    res = runner.invoke(app, ["fragmentation", str(logs), "--follow", *FAST, "-f", "jsonl", "--window", "1h"])
    assert res.exit_code == 0, res.stderr
    recs = [json.loads(line) for line in res.stdout.splitlines()]
    off = json.loads(runner.invoke(app, ["fragmentation", str(logs), "--window", "1h", "-f", "json"]).stdout)["windows"]
    keys = list(off[0])
    got = [{k: r[k] for k in keys} for r in recs if r["record"] == "window"]
    assert got == [{k: (pytest.approx(v, rel=1e-12) if isinstance(v, float) else v) for k, v in row.items()}
                   for row in off]
    assert recs[-1]["reason"] == "idle" and recs[-1]["windows"] == 237
    bad = runner.invoke(app, ["fragmentation", str(LOGS), "--follow", "--at", "end"])
    assert bad.exit_code == 2 and bad.stderr.strip() == (
        "Error: --at cannot be used with --follow. Run the command again on the finished log for those")
