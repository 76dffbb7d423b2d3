"""live.torch_dump against a fake torch.cuda.memory (the same two functions over a small caching allocator; no
GPU here): each dump re-arms the history cleared and writes a snapshot piece; the folder of pieces read as one
run gives the windows of one snapshot holding the whole history, and following the folder gives them too."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from veotrace.live.torch_dump import SnapshotDumper
from veotrace.runs.entropy import entropy
from veotrace.runs.follow import follow_entropy, follow_fragmentation
from veotrace.runs.fragmentation import fragmentation
from veotrace.sources.snapshots.torch_snapshot import load_snapshot
from veotrace.synth.live import FeedClock

SEG = 2 << 20
FRAMES = [{"name": "forward", "filename": "model.py", "line": 54}, {"name": "train_step", "filename": "train.py", "line": 9}]


class FakeMemory:
    """torch.cuda.memory's ``_record_memory_history`` and ``_snapshot`` over a caching allocator the test drives:
    2 MiB segments (more for a large request) split into blocks first-fit, freed blocks merged with free
    neighbours, frees requested then completed a few steps later (pending in between), two devices.
    ``whole()`` is the snapshot had the history never been cleared after the first arm."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.calls: list[tuple] = []
        self.enabled = False
        self.t_us = 1_738_780_408_000_000
        self.segs: dict[int, list[dict]] = {0: [], 1: []}  # per device: segments with blocks covering them
        self.trace = [[], []]
        self.full = [[], []]
        self.live: dict[int, list[int]] = {0: [], 1: []}
        self.pending: list[tuple[int, int, int]] = []  # (device, address, step to complete at)
        self.next_addr = {0: 0x7F00_0000_0000, 1: 0x7E00_0000_0000}
        self.step = 0

    def _record_memory_history(self, enabled="all", context="all", stacks="all", max_entries=0, clear_history=False):
        self.calls.append((enabled, max_entries, clear_history))
        if clear_history:
            if not self.enabled:
                self.full = [[], []]
            self.trace = [[], []]
        self.enabled = enabled is not None

    def _snapshot(self):
        return {"segments": self._segments(), "device_traces": [list(t) for t in self.trace],
                "allocator_settings": {"expandable_segments": False}, "external_annotations": []}

    def whole(self):
        return {"segments": self._segments(), "device_traces": [list(t) for t in self.full]}

    def _segments(self):
        out = []
        for d, segs in self.segs.items():
            for s in segs:
                blocks = [dict(b, frames=FRAMES if b["state"] != "inactive" else []) for b in s["blocks"]]
                active = sum(b["size"] for b in blocks if b["state"] != "inactive")
                out.append({"device": d, "address": s["address"], "total_size": s["total_size"],
                            "allocated_size": active, "active_size": active,
                            "requested_size": sum(b["requested_size"] for b in blocks if b["state"] != "inactive"),
                            "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
                            "frames": FRAMES, "blocks": blocks})
        return out

    def _entry(self, d, action, addr, size):
        self.t_us += int(self.rng.integers(200, 20_000))
        e = {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": self.t_us,
             "compile_context": "N/A", "user_metadata": "", "frames": FRAMES}
        if self.enabled:
            self.trace[d].append(e)
            self.full[d].append(e)

    def malloc(self, d, size):
        need = -(-size // 512) * 512
        for s in self.segs[d]:
            for i, b in enumerate(s["blocks"]):
                if b["state"] == "inactive" and b["size"] >= need:
                    rest = b["size"] - need
                    s["blocks"][i:i + 1] = [{"address": b["address"], "size": need, "requested_size": size,
                                             "state": "active_allocated"}] + (
                        [{"address": b["address"] + need, "size": rest, "requested_size": 0, "state": "inactive"}]
                        if rest else [])
                    self._entry(d, "alloc", b["address"], size)
                    self.live[d].append(b["address"])
                    return
        total = max(SEG, -(-need // SEG) * SEG)
        addr = self.next_addr[d]
        self.next_addr[d] += total + SEG
        self.segs[d].append({"address": addr, "total_size": total,
                             "blocks": [{"address": addr, "size": total, "requested_size": 0, "state": "inactive"}]})
        self._entry(d, "segment_alloc", addr, total)
        self.malloc(d, size)

    def _block(self, d, addr):
        for s in self.segs[d]:
            for i, b in enumerate(s["blocks"]):
                if b["address"] == addr:
                    return s, i, b
        raise KeyError(addr)

    def free(self, d, addr):
        s, i, b = self._block(d, addr)
        b["state"] = "active_pending_free"
        self._entry(d, "free_requested", addr, b["requested_size"])
        self.live[d].remove(addr)
        self.pending.append((d, addr, self.step + int(self.rng.integers(0, 6))))

    def _complete(self, d, addr):
        s, i, b = self._block(d, addr)
        self._entry(d, "free_completed", addr, b["requested_size"])
        b["state"], b["requested_size"] = "inactive", 0
        blocks = s["blocks"]
        if i + 1 < len(blocks) and blocks[i + 1]["state"] == "inactive":
            b["size"] += blocks.pop(i + 1)["size"]
        if i > 0 and blocks[i - 1]["state"] == "inactive":
            blocks[i - 1]["size"] += blocks.pop(i)["size"]

    def run(self, n: int) -> None:
        """``n`` steps of a training loop: allocations of 1 KiB .. 3 MiB, frees of live blocks."""
        for _ in range(n):
            self.step += 1
            for p in [p for p in self.pending if p[2] <= self.step]:
                self.pending.remove(p)
                self._complete(p[0], p[1])
            d = int(self.rng.integers(0, 2))
            if self.live[d] and self.rng.uniform() < 0.47:
                self.free(d, self.live[d][int(self.rng.integers(0, len(self.live[d])))])
            else:
                self.malloc(d, int(self.rng.choice([1000, 4096, 70_000, 300_000, 1_500_000, 3_000_000])
                                   + self.rng.integers(0, 512)))


def _dumped(tmp_path, pieces=5, steps=900):
    """A fake job: some blocks allocated before the dumper starts, then ``pieces`` dumps of ``steps`` steps each."""
    mem = FakeMemory(29)
    mem.run(150)  # the model's weights: live before recording starts, in the first piece's state
    folder = tmp_path / "alloc"
    dumper = SnapshotDumper(folder, every_s=3600, memory=mem).start()
    paths = []
    for _ in range(pieces):
        mem.run(steps)
        paths.append(dumper.dump())
    whole = tmp_path / "whole.pickle"
    whole.write_bytes(pickle.dumps(mem.whole()))
    return mem, dumper, folder, paths, whole


def test_dumps_are_snapshot_pieces_that_follow_on(tmp_path):
    mem, dumper, folder, paths, whole = _dumped(tmp_path)
    assert dumper.dump() is None  # nothing recorded since the last dump: no piece
    dumper.stop()
    assert [p.name for p in paths] == [f"snapshot-{i:06d}.pickle" for i in range(1, 6)]
    assert sorted(p.name for p in folder.iterdir()) == [p.name for p in paths]  # no temporary file left
    assert mem.calls[0] == ("all", 1_000_000, True) and mem.calls[-1] == (None, 0, False)
    assert all(c[2] for c in mem.calls[:-1]) and len(mem.calls) == 1 + 7 + 1  # start, 7 dumps (5, the empty one, stop's), off
    snaps = [load_snapshot(p) for p in paths]
    assert sum(len(t) for s in snaps for t in s.device_traces) == dumper.entries == sum(len(t) for t in mem.full)
    # each piece holds the entries since the one before, in order: together, the whole history
    for d in (0, 1):
        assert [e for s in snaps for e in s.device_traces[d]] == mem.full[d]
    assert snaps[0].layout == "snapshot with user_metadata (torch ~2.10+)"  # read as a real dump
    states = {b["state"] for s in snaps for seg in s.segments for b in seg["blocks"]}
    assert states == {"active_allocated", "active_pending_free", "inactive"}


def test_a_restarted_job_numbers_on(tmp_path):
    mem = FakeMemory(1)
    (tmp_path / "snapshot-000007.pickle").write_bytes(b"")
    dumper = SnapshotDumper(tmp_path, every_s=3600, memory=mem).start()
    mem.run(10)
    assert dumper.stop().name == "snapshot-000008.pickle"


def _windows(records, keys):
    return [{k: r[k] for k in keys} for r in records if r["record"] == "window"]


def _approx(rows):
    return [{k: (pytest.approx(v, rel=1e-12) if isinstance(v, float) else v) for k, v in r.items()} for r in rows]


def test_the_folder_read_whole_equals_one_snapshot_of_the_whole_history(tmp_path):
    mem, dumper, folder, paths, whole = _dumped(tmp_path)
    one = fragmentation([whole], window="2s")
    series = fragmentation([folder], window="2s")
    a, b = one.to_dict(), series.to_dict()
    assert len(a["windows"]) > 40 and {w["device"] for w in a["windows"]} == {0, 1}
    assert any(w["device_allocs"] for w in a["windows"]) and any(w["free_blocks"] for w in a["windows"])
    assert b["windows"] == _approx(a["windows"])
    assert b["counters"] == a["counters"] and b["counters"]["pre_existing_blocks"] > 0
    assert b["end"] == a["end"]
    assert not [m for m in series.messages if "does not start" in m]
    # the window chosen from every piece's timestamps is the one chosen for the whole snapshot
    assert fragmentation([folder]).to_dict()["summary"]["window_choice"] == \
        fragmentation([whole]).to_dict()["summary"]["window_choice"]
    e1, e2 = entropy([whole], window="2s").to_dict(), entropy([folder], window="2s").to_dict()
    assert e2["windows"] == e1["windows"] and len(e1["windows"]) > 20


def test_a_missing_piece_is_warned_about(tmp_path):
    mem, dumper, folder, paths, whole = _dumped(tmp_path)
    paths[2].unlink()
    warning = f"Warning: {paths[3]}: this piece does not start in the state {paths[1].name} ended in ("
    messages = fragmentation([folder], window="2s").messages
    assert [m for m in messages if "does not start" in m] == [m for m in messages if m.startswith(warning)] != []
    notes = []
    follow_fragmentation(folder, emit=lambda r: None, note=notes.append, window="2s", poll=1, idle_timeout=1,
                         clock=FeedClock(None, []))
    assert [m for m in notes if "does not start" in m] == [m for m in messages if "does not start" in m]


def test_a_folder_of_logs_and_pieces_is_refused(tmp_path):
    from veotrace.errors import VeotraceError

    mem, dumper, folder, paths, whole = _dumped(tmp_path, pieces=1, steps=200)
    log = folder / "zz.csv"
    log.write_text("timestamp,op_type,size_bytes,address\n1738780500000000000,alloc,4096,4096\n")
    with pytest.raises(VeotraceError) as exc:
        follow_fragmentation(folder, emit=lambda r: None, note=lambda m: None, window="2s", poll=1, idle_timeout=1,
                             clock=FeedClock(None, []))
    assert str(exc.value) == (f"{log}: the folder holds both alloc/free logs and PyTorch snapshot pieces, which do not "
                              "replay as one run. Follow a folder of logs, or one of snapshot pieces "
                              "(veotrace.live.torch_dump)")
    # the offline read refuses it by the one rule every command's inputs go through (sources.resolve_inputs)
    with pytest.raises(VeotraceError, match="the folder holds 2 kinds of trace"):
        fragmentation([folder], window="2s")


class DumpClock(FeedClock):
    """Simulated time whose every sleep runs the fake job on and dumps a piece (``steps`` times)."""

    def __init__(self, mem, dumper, steps):
        super().__init__(None, [])
        self.mem, self.dumper, self.left = mem, dumper, steps

    def sleep(self, s):
        self.t += s
        if self.left:
            self.left -= 1
            self.mem.run(300)
            self.dumper.dump()


def test_following_the_folder_gives_the_windows_of_one_read(tmp_path):
    mem = FakeMemory(29)
    mem.run(150)
    folder = tmp_path / "alloc"
    dumper = SnapshotDumper(folder, every_s=3600, memory=mem).start()
    out, state = [], tmp_path / "f.state"
    follow_fragmentation(folder, emit=out.append, note=lambda m: None, window="2s", poll=1, idle_timeout=2,
                         state=state, clock=DumpClock(mem, dumper, 7))
    mem.run(300)
    dumper.dump()  # written while no follower runs
    out2, notes = [], []
    follow_fragmentation(folder, emit=out2.append, note=notes.append, window="2s", poll=1, idle_timeout=2,
                         state=state, clock=DumpClock(mem, dumper, 5))  # resumed from the checkpoint
    assert dumper.n == 13 and any(n.startswith("Resuming from") for n in notes)
    whole = tmp_path / "whole.pickle"
    whole.write_bytes(pickle.dumps(mem.whole()))
    offline = fragmentation([whole], window="2s").to_dict()["windows"]
    keys = list(offline[0])
    done = [r for r in out if r["record"] == "window" and r["complete"]]
    assert _windows(done + out2, keys) == _approx(offline) and len(offline) > 40
    assert out2[-1]["events_read"] == sum(len(t) for t in mem.full)
    ent = []
    follow_entropy(folder, emit=ent.append, note=lambda m: None, window="2s", poll=1, idle_timeout=2,
                   clock=FeedClock(None, []))
    off = entropy([folder], window="2s").to_dict()["windows"]
    assert _windows(ent, list(off[0])) == off


def test_a_truncated_piece_is_one_error(tmp_path):
    from veotrace.errors import VeotraceError

    mem, dumper, folder, paths, whole = _dumped(tmp_path, pieces=2, steps=200)
    paths[1].write_bytes(paths[1].read_bytes()[:500])
    with pytest.raises(VeotraceError) as exc:
        follow_fragmentation(folder, emit=lambda r: None, note=lambda m: None, window="2s", poll=1, idle_timeout=1,
                             clock=FeedClock(None, []))
    assert str(exc.value).startswith(f"{paths[1]}: ") and "\n" not in str(exc.value)
