"""Live layer: the helper a PyTorch job imports to be followed (issue 29); veotrace does not depend on torch.

Every ``every_s`` seconds it takes ``torch.cuda.memory._snapshot()`` and re-arms
``_record_memory_history(..., clear_history=True)``, so each dump holds the allocator's state at the
dump (segments and blocks) and its history since the dump before: a *snapshot piece*, which starts in
the state the piece before ended in. Each piece is pickled, as ``torch.cuda.memory._dump_snapshot``
writes it, into ``folder`` (``snapshot-000001.pickle``, ...: names sort in dump order), under a
dot-name first and then renamed, so a follower never sees half a piece. The folder is a rotated
snapshot series (``frag.series``): ``veotrace fragmentation FOLDER --follow`` (and entropy, bursts,
gate) reads each piece as it appears, and ``veotrace fragmentation FOLDER`` reads the folder as one
run, seeded from the first piece's state: the windows one snapshot holding the whole history gives.

    from veotrace.live.torch_dump import SnapshotDumper
    dumper = SnapshotDumper("/scratch/run42/alloc", every_s=60).start()   # in the training script
    ...
    dumper.stop()                                                         # last dump

Entries between a snapshot and the re-arm are lost (PyTorch has no atomic snapshot-and-clear); with
dumps a minute apart that is microseconds of history per minute, and a piece that then does not start
where the one before ended is counted and warned about. Time windows need ``time_us`` on the entries
(torch 2.2 and later). It was tested against a fake module with the same functions
(``tests/test_live_torch_dump.py``), not on a GPU.
"""

from __future__ import annotations

import os
import pickle
import re
import threading
from pathlib import Path
from typing import Any

#: History entries PyTorch keeps between two dumps (its ring buffer; older entries are dropped).
MAX_ENTRIES = 1_000_000
#: The name of piece N (N from 1, six digits: names sort in dump order).
PIECE_NAME = "snapshot-{:06d}.pickle"
_PIECE = re.compile(r"snapshot-(\d+)\.pickle")


class SnapshotDumper:
    """Dump the CUDA allocator's state and history into ``folder`` every ``every_s`` seconds, on a daemon thread.

    Args:
        folder: where the snapshot pieces go (created).
        every_s: seconds between dumps.
        memory: the module with ``_snapshot`` and ``_record_memory_history`` (default ``torch.cuda.memory``).
        max_entries: PyTorch's history ring buffer, per dump.
    """

    def __init__(self, folder: str | os.PathLike, *, every_s: float = 60.0, memory: Any = None,
                 max_entries: int = MAX_ENTRIES) -> None:
        if every_s <= 0:
            raise ValueError("every_s must be positive")
        self.folder = Path(folder)
        self.every_s, self.max_entries = every_s, max_entries
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
        self.n = max([self.n, *(piece_number(p.name) for p in self.folder.iterdir())])  # a restarted job numbers on
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
        """Snapshot, re-arm with the history cleared, and write the snapshot as the next piece (None: no
        entry was recorded since the last dump, so the state is the one the last piece ended in)."""
        with self._lock:
            snap = self.memory._snapshot()
            self.arm(clear=True)
            n_entries = sum(len(t) for t in snap.get("device_traces") or [])
            if not n_entries:
                return None
            self.n += 1
            self.folder.mkdir(parents=True, exist_ok=True)
            path = self.folder / PIECE_NAME.format(self.n)
            tmp = self.folder / f".{path.name}.tmp"  # a dot-name: readers and followers skip it
            with open(tmp, "wb") as fh:
                pickle.dump(snap, fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
            self.entries += n_entries
            return path


def piece_number(name: str) -> int:
    """N of a piece named ``snapshot-N.pickle``, else 0."""
    m = _PIECE.fullmatch(name)
    return int(m.group(1)) if m else 0
