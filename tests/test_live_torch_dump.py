"""live.torch_dump against a fake torch.cuda.memory (same functions; no GPU here): each dump re-arms the
history cleared, the logs it writes follow on, and following the folder equals reading it whole."""

from __future__ import annotations

import json
import pickle

import numpy as np

from veotrace.live.torch_dump import SnapshotDumper
from veotrace.runs.entropy import entropy
from veotrace.runs.follow import follow_entropy
from veotrace.synth.live import FeedClock


class FakeMemory:
    """torch.cuda.memory's _record_memory_history and _snapshot over a history the test appends to."""

    def __init__(self):
        self.calls = []
        self.history = [[], []]
        self.enabled = False

    def _record_memory_history(self, enabled="all", context="all", stacks="all", max_entries=0, clear_history=False):
        self.calls.append((enabled, max_entries, clear_history))
        self.enabled = enabled is not None
        if clear_history:
            self.history = [[], []]

    def _snapshot(self):
        return {"segments": [], "device_traces": [list(t) for t in self.history]}

    def run(self, rng, t0_us, n):
        for i in range(n):
            d = int(rng.integers(0, 2))
            self.history[d].append({"action": "alloc" if i % 3 else "free_completed", "addr": 4096 * i,
                                    "size": int(4096 << rng.integers(0, 10)), "stream": 0,
                                    "time_us": t0_us + i * 20_000 + d, "frames": []})


def test_dumps_follow_on_and_re_arm(tmp_path):
    mem, rng = FakeMemory(), np.random.default_rng(0)
    folder = tmp_path / "alloc"
    dumper = SnapshotDumper(folder, every_s=3600, memory=mem, keep_snapshots=True)
    dumper.start()
    paths = []
    for k in range(4):
        mem.run(rng, 1_700_000_000_000_000 + k * 2_000 * 20_000, 2_000)
        paths.append(dumper.dump())
    assert dumper.dump() is None  # nothing recorded since the last dump
    dumper.stop()
    assert [p.name for p in paths] == [f"trace-{i:06d}.jsonl" for i in range(1, 5)]
    assert mem.calls[0] == ("all", 1_000_000, True) and mem.calls[-1] == (None, 0, False)
    assert all(c[2] for c in mem.calls[:-1]) and len(mem.calls) == 1 + 6 + 1  # start, each dump and stop's, then off
    rows = [json.loads(line) for p in paths for line in p.read_text().splitlines()]
    ts = [r["timestamp"] for r in rows]
    assert len(rows) == 8_000 and ts == sorted(ts) and len(set(ts)) == 8_000  # each entry once, in time order
    assert rows[0] == {"timestamp": 1_700_000_000_000_000_000 + 1000 * rows[0]["device"], "op_type": "free_completed",
                       "size_bytes": rows[0]["size_bytes"], "address": 0, "stream": 0, "device": rows[0]["device"]}
    assert len(pickle.loads((folder / ".snapshots" / "snapshot-000004.pickle").read_bytes())["device_traces"][0]) > 0
    out = []
    follow_entropy(folder, emit=out.append, note=lambda m: None, window="60s", poll=1, idle_timeout=2,
                   clock=FeedClock(None, []))
    whole = entropy([folder], window="60s").to_dict()
    keys = list(whole["windows"][0])
    assert [{k: r[k] for k in keys} for r in out if r["record"] == "window"] == whole["windows"]
    assert out[-1]["events_read"] == 8_000


def test_a_restarted_job_numbers_on(tmp_path):
    mem = FakeMemory()
    (tmp_path / "trace-000007.jsonl").write_text("")
    dumper = SnapshotDumper(tmp_path, every_s=3600, memory=mem).start()
    mem.run(np.random.default_rng(1), 0, 10)
    assert dumper.stop().name == "trace-000008.jsonl"
