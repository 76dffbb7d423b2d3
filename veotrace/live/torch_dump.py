"""Live layer: the helper a PyTorch job imports to be followed (issue 29); veotrace does not depend on torch.

Every ``every_s`` seconds it takes ``torch.cuda.memory._snapshot()`` and re-arms
``_record_memory_history(..., clear_history=True)``, so each dump holds the allocator's history since
the one before (each piece follows on from the previous one), and writes that history as one JSON Lines
alloc/free log in ``folder`` (``trace-000001.jsonl``, ...; one line per trace entry: timestamp in ns from
``time_us``, op_type the entry's action as the snapshot reader keeps it, size_bytes, address, stream,
device), written under a dot-name and renamed, so a follower never sees half a file. The folder is then
a series of rotated logs: ``veotrace entropy FOLDER --follow`` follows it and ``veotrace entropy FOLDER``
reads it whole (names sort in dump order). ``keep_snapshots`` also keeps each raw snapshot in
``FOLDER/.snapshots/`` (a dot-folder: readers skip it) for ``fragmentation`` and ``sites`` afterwards.

    from veotrace.live.torch_dump import SnapshotDumper
    dumper = SnapshotDumper("/scratch/run42/alloc", every_s=60).start()   # in the training script
    ...
    dumper.stop()                                                         # last dump

Entries between a snapshot and the re-arm are lost (PyTorch has no atomic snapshot-and-clear); with
dumps a minute apart that is microseconds of history per minute. Entries without ``time_us`` (torch
before 2.2) get the time of the dump. It was tested against a fake module with the same functions
(``tests/test_live_torch_dump.py``), not on a GPU.
"""

from __future__ import annotations

import json
import os
import pickle
import threading
import time
from pathlib import Path
from typing import Any

#: History entries PyTorch keeps between two dumps (its ring buffer; older entries are dropped).
MAX_ENTRIES = 1_000_000


class SnapshotDumper:
    """Dump the CUDA allocator's history into ``folder`` every ``every_s`` seconds, on a daemon thread.

    Args:
        folder: where the logs go (created).
        every_s: seconds between dumps.
        memory: the module with ``_snapshot`` and ``_record_memory_history`` (default ``torch.cuda.memory``).
        max_entries: PyTorch's history ring buffer, per dump.
        keep_snapshots: also pickle each raw snapshot into ``folder/.snapshots/``.
    """

    def __init__(self, folder: str | os.PathLike, *, every_s: float = 60.0, memory: Any = None,
                 max_entries: int = MAX_ENTRIES, keep_snapshots: bool = False) -> None:
        if every_s <= 0:
            raise ValueError("every_s must be positive")
        self.folder = Path(folder)
        self.every_s, self.max_entries, self.keep_snapshots = every_s, max_entries, keep_snapshots
        self._memory = memory
        self.n = 0
        self.entries = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def memory(self) -> Any:
        if self._memory is None:
            import torch.cuda.memory  # the job's own torch: never a dependency of veotrace

            self._memory = torch.cuda.memory
        return self._memory

    def arm(self, *, clear: bool) -> None:
        """Start (or re-arm) recording the allocator's history with stacks; ``clear`` drops what was recorded."""
        self.memory._record_memory_history(enabled="all", context="all", stacks="all", max_entries=self.max_entries,
                                           clear_history=clear)

    def start(self) -> SnapshotDumper:
        """Arm the history (cleared) and dump every ``every_s`` seconds until ``stop()``."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self.n = max([self.n, *(_number(p.name) for p in self.folder.glob("trace-*.jsonl"))])  # a restarted job
        self.arm(clear=True)
        self._thread = threading.Thread(target=self._loop, name="veotrace-snapshot-dumper", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self.dump()

    def stop(self) -> Path | None:
        """Stop the thread, dump what was recorded since the last dump, and stop recording."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        path = self.dump()
        self.memory._record_memory_history(enabled=None)
        return path

    def dump(self) -> Path | None:
        """Snapshot, re-arm with the history cleared, and write the entries as the next log (None: no entry)."""
        with self._lock:
            snap = self.memory._snapshot()
            self.arm(clear=True)
            now_ns = time.time_ns()
            rows = sorted((_row(e, d, now_ns) for d, trace in enumerate(snap.get("device_traces") or []) for e in trace),
                          key=lambda r: r["timestamp"])  # devices interleaved in time, as one log is written
            lines = [json.dumps(r) + "\n" for r in rows]
            if not lines:
                return None
            self.n += 1
            self.folder.mkdir(parents=True, exist_ok=True)
            if self.keep_snapshots:
                raw = self.folder / ".snapshots"
                raw.mkdir(exist_ok=True)
                with open(raw / f"snapshot-{self.n:06d}.pickle", "wb") as fh:
                    pickle.dump(snap, fh)
            path = self.folder / f"trace-{self.n:06d}.jsonl"
            tmp = self.folder / f".{path.name}.tmp"
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.writelines(lines)
            os.replace(tmp, path)
            self.entries += len(lines)
            return path


def _row(e: dict, device: int, now_ns: int) -> dict:
    t = e.get("time_us")
    return {"timestamp": int(t) * 1000 if t is not None else now_ns, "op_type": e.get("action"),
            "size_bytes": int(e.get("size") or 0), "address": e.get("addr"), "stream": e.get("stream"),
            "device": device}


def _number(name: str) -> int:
    digits = name.removeprefix("trace-").removesuffix(".jsonl")
    return int(digits) if digits.isdigit() else 0
