"""entropy --follow: the windows printed as a rotated log grows equal one read of the finished log (seeded,
simulated time fed fast: the loop's sleep writes the next step of the log)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from veotrace.runs.entropy import entropy
from veotrace.runs.follow import follow_entropy
from veotrace.synth.live import FeedClock, RotatingWriter, feed_rows, steps

ROW_KEYS = ("window", "start_ns", "end_ns", "hours", "events", "classes_present", "entropy_bits",
            "normalized_entropy", "start_s")


def _follow(target, clock, **kw):
    out, notes = [], []
    reason = follow_entropy(target, emit=out.append, note=notes.append, poll=0.5, idle_timeout=3, clock=clock, **kw)
    return reason, out, notes


def _rows(records, complete=None):
    return [{k: r[k] for k in ROW_KEYS} for r in records if r["record"] == "window"
            and (complete is None or r["complete"] is complete)]


@pytest.mark.parametrize("jsonl", [False, True])
def test_windows_equal_one_read_of_the_finished_folder(tmp_path, jsonl):
    rows = feed_rows(seconds=300, seed=7)
    writer = RotatingWriter(tmp_path / "logs", rotate_bytes=40_000, jsonl=jsonl)
    clock = FeedClock(writer, steps(rows, seconds_per_step=0.5, jsonl=jsonl))
    reason, out, notes = _follow(writer.folder, clock, window="10s")
    assert reason == "idle" and writer.n >= 8  # every kind of rotation, twice
    offline = entropy(writer.files(), window="10s").to_dict()
    assert _rows(out) == offline["windows"]
    assert len(_rows(out, True)) == len(offline["windows"]) - 1  # the last one is printed at the end
    end = out[-1]
    assert end["record"] == "end" and end["events_read"] == len(rows) and end["late_rows"] == 0
    assert end["events_counted"] == offline["summary"]["events_counted"]
    assert json.loads(json.dumps(out[0]))["format"] == "veotrace.follow/1"


def test_a_window_is_printed_when_the_next_event_is_read(tmp_path):
    rows = feed_rows(seconds=60, seed=1, burst_every_s=1000)
    writer = RotatingWriter(tmp_path / "logs", rotate_bytes=1 << 30)
    clock = FeedClock(writer, steps(rows, seconds_per_step=0.5))
    seen = []

    def emit(rec):
        if rec["record"] == "window" and rec["complete"]:
            seen.append((rec["end_ns"], clock.t))

    follow_entropy(writer.folder, emit=emit, note=lambda m: None, window="5s", poll=0.5, idle_timeout=2, clock=clock)
    t0 = int(rows[0, 0])
    for end_ns, printed_at in seen[1:]:
        # written by simulated time (end - t0) at the latest; printed at the poll after it (one step later)
        assert printed_at - (end_ns - t0) / 1e9 <= 0.5 + 0.5 + 1e-9


def test_until_stops_at_that_time_of_the_log(tmp_path):
    rows = feed_rows(seconds=120, seed=2)
    writer = RotatingWriter(tmp_path / "logs")
    reason, out, _ = _follow(writer.folder, FeedClock(writer, steps(rows, seconds_per_step=0.5)), window="10s",
                             until="60s")
    wins = _rows(out)
    assert reason == "until" and [w["window"] for w in wins] == list(range(6))
    assert all(r["complete"] for r in out if r["record"] == "window")


def test_checkpoint_resume_gives_the_same_windows(tmp_path):
    rows = feed_rows(seconds=200, seed=3)
    writer = RotatingWriter(tmp_path / "logs", rotate_bytes=30_000)
    parts = list(steps(rows, seconds_per_step=0.5))
    state = tmp_path / "follow.state"
    first = _follow(writer.folder, FeedClock(writer, parts[:150]), window="10s", state=state)[1]
    assert state.exists()
    clock = FeedClock(writer, parts[150:])
    reason, second, notes = _follow(writer.folder, clock, window="10s", state=state)
    assert any(n.startswith("Resuming from") for n in notes)
    offline = entropy(writer.files(), window="10s").to_dict()["windows"]
    done = _rows(first, True)
    assert done + _rows(second) == offline


def test_checkpoint_of_another_run_is_refused(tmp_path):
    rows = feed_rows(seconds=60, seed=4)
    writer = RotatingWriter(tmp_path / "logs")
    state = tmp_path / "s.json"
    _follow(writer.folder, FeedClock(writer, steps(rows, seconds_per_step=0.5)), window="10s", state=state)
    from veotrace.errors import VeotraceError

    with pytest.raises(VeotraceError, match=r'window_ns') as exc:
        _follow(writer.folder, FeedClock(writer, []), window="20s", state=state)
    assert "params" in str(exc.value) and "20000000000" in str(exc.value) and "10000000000" in str(exc.value)
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(VeotraceError, match="input"):
        _follow(other, FeedClock(writer, []), window="10s", state=state)


def test_target_that_never_appears(tmp_path):
    from veotrace.errors import VeotraceError

    notes = []
    with pytest.raises(VeotraceError, match="did not appear within --idle-timeout 3 s"):
        follow_entropy(tmp_path / "nope.csv", emit=lambda r: None, note=notes.append, poll=1, idle_timeout=3,
                       clock=FeedClock(None, []))
    assert notes == [f"Waiting for {tmp_path / 'nope.csv'} to appear (up to --idle-timeout 3 s)"]


def test_bad_line_in_a_live_file(tmp_path):
    from veotrace.errors import TraceFormatError

    log = tmp_path / "a.csv"
    log.write_bytes(b"timestamp,op_type,size_bytes\n1,alloc,4096\n2,alloc,x4\n3,alloc,4096\n")
    with pytest.raises(TraceFormatError) as exc:
        _follow(log, FeedClock(None, []), window="1s")
    with pytest.raises(TraceFormatError) as offline:
        entropy([log], window="1s")
    assert str(exc.value) == str(offline.value) == (
        f"{log}:3: column 'size_bytes': expected a non-negative integer byte count, got 'x4'. "
        "Fix the row, or pass --skip-bad-rows to skip and count bad rows")
    reason, out, notes = _follow(log, FeedClock(None, []), window="1s", skip_bad_rows=True)
    assert out[-1]["skipped_rows"] == 1 and out[-1]["events_read"] == 2
    assert any("1 bad row" in n or "skipped 1" in n.lower() for n in notes), notes


def test_time_going_backwards_is_counted(tmp_path):
    log = tmp_path / "logs"
    log.mkdir()
    body = b"".join(b"%d,alloc,4096\n" % (i * 10**8) for i in range(1, 2000))
    (log / "a.csv").write_bytes(b"timestamp,op_type,size_bytes\n" + body)
    clock = FeedClock(None, [])
    out, notes = [], []

    def sleep(s):
        clock.t += s
        if not (log / "b.csv").exists():
            (log / "b.csv").write_bytes(b"timestamp,op_type,size_bytes\n" + b"%d,alloc,4096\n" % 5 * 3)

    clock.sleep = sleep
    follow_entropy(log, emit=out.append, note=notes.append, window="1s", poll=1, idle_timeout=3, clock=clock)
    assert out[-1]["late_rows"] == 3
    assert any("3 rows were earlier than windows already printed" in n for n in notes)


def test_bursts_equal_one_read_of_the_finished_folder(tmp_path):
    from veotrace.runs.bursts import bursts
    from veotrace.runs.follow import follow_bursts

    rows = feed_rows(seconds=200, seed=11)
    writer = RotatingWriter(tmp_path / "logs", rotate_bytes=40_000)
    out, state = [], tmp_path / "b.state"
    parts = list(steps(rows, seconds_per_step=0.5))
    reason = follow_bursts(writer.folder, emit=out.append, note=lambda m: None, gap="20ms", poll=0.5,
                           idle_timeout=3, state=state, clock=FeedClock(writer, parts[:200]))
    first = [r for r in out if r["record"] == "burst" and r["complete"]]
    out2 = []
    follow_bursts(writer.folder, emit=out2.append, note=lambda m: None, gap="20ms", poll=0.5, idle_timeout=3,
                  state=state, clock=FeedClock(writer, parts[200:]))
    offline = bursts(writer.files(), gap="20ms").to_dict()
    keys = list(offline["bursts"][0])
    got = [{k: r[k] for k in keys} for r in first + out2 if r["record"] == "burst"]
    assert reason == "idle" and len(offline["bursts"]) > 20 and got == offline["bursts"]
    assert out2[-1]["events_counted"] == offline["summary"]["events_counted"]


def test_checkpoint_of_another_version_or_not_json(tmp_path):
    from veotrace.errors import VeotraceError

    rows = feed_rows(seconds=30, seed=5)
    writer = RotatingWriter(tmp_path / "logs")
    state = tmp_path / "s.json"
    _follow(writer.folder, FeedClock(writer, steps(rows, seconds_per_step=0.5)), window="10s", state=state)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # the temporary file was renamed
    saved = json.loads(state.read_text())
    assert saved["format"] == "veotrace.follow_state/2" and saved["command"] == "entropy"
    from veotrace.live.contract import digest_of

    edited = {**saved, "veotrace": "0.0.9"}
    state.write_text(json.dumps({**edited, "digest": digest_of(edited)}))
    with pytest.raises(VeotraceError) as exc:
        _follow(writer.folder, FeedClock(writer, []), window="10s", state=state)
    from veotrace import __version__

    assert str(exc.value) == (f'{state}: the checkpoint is of veotrace "0.0.9", this run\'s is "{__version__}". '
                              "Give another --state file, or remove this one to start from the beginning")
    state.write_text("{not json")
    with pytest.raises(VeotraceError, match="not a follow checkpoint"):
        _follow(writer.folder, FeedClock(writer, []), window="10s", state=state)


def test_fragmentation_windows_equal_one_read_of_the_finished_folder(tmp_path):
    from veotrace.runs.follow import follow_fragmentation
    from veotrace.runs.fragmentation import fragmentation

    sample = Path(__file__).resolve().parent.parent / "sample_traces" / "alloc_logs" / "alloc.log.1.csv"
    header, *body = sample.read_bytes().splitlines(keepends=True)
    writer = RotatingWriter(tmp_path / "logs", rotate_bytes=60_000, csv_header=header)
    parts = [(i, b"".join(body[i:i + 250])) for i in range(0, len(body), 250)]
    out = []
    reason = follow_fragmentation(writer.folder, emit=out.append, note=lambda m: None, window="1h", poll=0.5,
                                  idle_timeout=3, clock=FeedClock(writer, parts))
    offline = fragmentation(writer.files(), window="1h").to_dict()["windows"]
    keys = list(offline[0])
    assert reason == "idle" and writer.n >= 4 and len(offline) > 50
    got = [{k: r[k] for k in keys} for r in out if r["record"] == "window"]
    # live_bytes_mean is a float time integral summed batch by batch: the batches of a follower end elsewhere,
    # so it may differ in the last bit (14808052.08174853 vs ...528); every other value is equal
    assert got == [{k: (pytest.approx(v, rel=1e-12) if isinstance(v, float) else v) for k, v in row.items()}
                   for row in offline]
    assert out[-1]["events_read"] == len(body)
