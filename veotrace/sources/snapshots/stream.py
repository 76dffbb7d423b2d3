"""Reader support: a PyTorch snapshot pickle of any size, read in two passes over its bytes in flat memory.

Pass 1 (``_picklescan.stream_*``) walks every opcode of the file in chunks and refuses what the whole
read refuses (a class or callable, a buffer, a wide integer, deep nesting) before anything is decoded or
printed, and notes which memo entries some later opcode reads again. Pass 2 (``_snapstream.Decoder``)
decodes the file in chunks: the segments, ``allocator_settings`` and ``external_annotations`` become
Python objects as in the whole read (they are small: the end state), while each ``device_traces`` entry
is decoded straight into columns and never built as a dict; only the memo entries read again (the
strings and frames PyTorch pickles once and refers to) are kept. The columns go to an anonymous
temporary Arrow file (about 50 bytes an entry), read back as ``ALLOC_EVENTS`` batches once the file
ended well: in file order, or merged by time when several devices have entries with ``time_us`` (that
merge holds those columns in memory, as ``torch_snapshot.events_table`` does).

The whole-file bound (``limits.max_file_bytes``) does not apply; a single opcode's argument is bounded
by ``limits.MAX_OPCODE_BYTES``. Entries are checked by ``torch_snapshot``'s own rules, with the same
messages.

One reading of every pickle: the streamed answer is the whole read's (what pickle's C unpickler builds,
checked by ``model``), or not given. Pass 2 is *clean* when it reached the STOP pass 1 saw with every
entry decoded as pickle would place it (``_snapstream.c`` stops with -10 where it cannot, saying why).
When it is not clean (cut short, corrupt, an odd entry, a layout or opcode pickle builds otherwise),
``Decoded.error`` says why and ``large`` hands the file to the whole read when it is within its bound,
so that its verdict and message are the answer; past the bound that error is the answer. The entries
complete before the point where a not-clean read stopped are still in the spill: ``--skip-bad-rows``
keeps them with a counted warning (on both routes: ``large.salvage``).
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from veotrace.errors import TraceFormatError
from veotrace.sources.base import open_decompressed
from veotrace.sources.limits import HEAD_BYTES, MAX_NESTING, MAX_OPCODE_BYTES, MAX_PICKLE_INT_BYTES, human
from veotrace.sources.snapshots import model, safe_pickle

try:
    from veotrace.sources.snapshots import _snapstream
except ImportError:  # built without a C compiler: snapshots are read whole
    _snapstream = None

#: Bytes read from the (decompressed) file per step of either pass.
CHUNK_BYTES = 8 << 20
_RAW = pa.schema([("device", pa.int32()), ("time_us", pa.int64()), ("size", pa.int64()), ("addr", pa.uint64()),
                  ("stream", pa.int64()), ("action", pa.int32()), ("stack", pa.int32())])


def available() -> bool:
    """Whether this build can stream snapshots (both C parts compiled)."""
    return _snapstream is not None and safe_pickle._picklescan is not None


@dataclass
class Pass1:
    """What the first pass learnt: which memo entries are read again, and where the pickle ends."""

    needed: bytes
    memo_count: int
    end: int  # offset where the walk stopped: after STOP, or at the opcode the file is cut or corrupt at
    stopped: bool
    size: int  # decompressed bytes read
    cut: bool = False  # the data ended before STOP (a partial copy), not at a corrupt opcode


@dataclass
class Decoded:
    """The end of pass 2: the top-level object with its device lists emptied, and what the entries told."""

    top: object
    devices: int
    rows: int
    has_time: bool
    has_user_metadata: bool
    time_back: int = 0
    first_back: tuple[int, int, int] | None = None
    oom_free: dict = field(default_factory=dict)
    stacks: list = field(default_factory=list)  # each stack id's frames (interned while streaming)
    actions: list = field(default_factory=list)  # the action strings by id
    devices_with_rows: int = 0
    untimed_rows: int = 0  # rows without time_us
    #: Why the decoded rows are not the whole read's answer (None: they are): the file is cut short or
    #: corrupt (a ``CorruptPickle``), an entry is refused, or pickle would build it otherwise. The rows
    #: complete before that point (``rows`` of them) were passed on.
    error: TraceFormatError | None = None
    stop: int = 0  # the offset where a not-clean read stopped


def _chunks(path: Path) -> Iterator[bytes]:
    stream, _raw = open_decompressed(path)
    try:
        while True:
            try:  # read_buffer: pyarrow's read(n) keeps its n-byte bytes when a gzip stream turns out truncated
                chunk = stream.read_buffer(CHUNK_BYTES).to_pybytes()
            except (OSError, EOFError) as exc:
                from veotrace.sources.base import detail

                raise TraceFormatError(f"the compressed stream is truncated or corrupt ({detail(exc)})", path=path,
                                       hint="Re-copy the file, or decompress what remains and read that") from None
            if not chunk:
                return
            yield chunk
    finally:
        stream.close()


def _fed(path: Path, step: Callable[[bytes, int, bool], tuple[int, bool]], *, head: bool = False) -> int:
    """Feeds the file's chunks to ``step(data, base, final) -> (offset to resume from, done)``, keeping the
    bytes of an opcode cut by a chunk's end for the next; returns the bytes read. ``head``: refuse what cannot
    be a snapshot from its first bytes first (``safe_pickle.pickle_head``)."""
    pending, base, total = b"", 0, 0
    chunks = _chunks(path)
    chunk = next(chunks, b"")
    if chunk and head:
        safe_pickle.pickle_head(chunk[:HEAD_BYTES], path)
    while chunk:
        total += len(chunk)
        nxt = next(chunks, b"")
        data = pending + chunk if pending else chunk
        at, done = step(data, base, not nxt)
        if done:
            return total
        pending = data[at - base:]
        if len(pending) > MAX_OPCODE_BYTES:
            raise TraceFormatError(f"one opcode at byte {at:,} runs past {human(MAX_OPCODE_BYTES)}, the bound of a "
                                   "single value in a snapshot read in chunks", path=path,
                                   hint="A memory snapshot's values are numbers and short strings; is the file damaged?")
        base, chunk = at, nxt
    return total


def scan(path: Path) -> Pass1:
    """Pass 1: refuse the file (``safe_pickle``'s errors, with the byte offset) or say what pass 2 needs."""
    scan_mod = safe_pickle._picklescan
    state = scan_mod.stream_new(MAX_NESTING, MAX_PICKLE_INT_BYTES)
    out = {"end": 0, "stopped": 0}

    def step(data: bytes, base: int, final: bool) -> tuple[int, bool]:
        result, at, stopped = scan_mod.stream_feed(state, data, base, final)
        if result == -8:
            return at, False
        if result < 0:
            raise safe_pickle.scan_error(result, at, path, data[at - base:at - base + 512])
        out.update(end=at, stopped=stopped)
        return at, True

    size = _fed(path, step, head=True)
    needed, count = scan_mod.stream_needed(state)
    return Pass1(needed, count, out["end"], out["stopped"] == 1, size, cut=out["stopped"] == 2)


def decode(path: Path, first: Pass1, on_rows: Callable[[dict], None] | None = None) -> Decoded:
    """Pass 2: the entries' columns to ``on_rows`` (a dict of numpy arrays) as they are decoded; when the read is
    not clean, those complete where it stopped too, and ``error`` says why (see the module docstring)."""
    dec = _snapstream.Decoder(first.needed, first.memo_count)
    state = {"status": 0, "at": 0}
    tracker = _Tracker()

    def step(data: bytes, base: int, final: bool) -> tuple[int, bool]:
        status, at = dec.feed(data, base)
        state.update(status=status, at=at)
        tracker.take(dec, on_rows)
        return at, status != 0

    _fed(path, step)
    status, at = state["status"], state["at"]
    flags = dec.flags
    error = None
    if not (status == 1 and first.stopped and at == first.end):
        error = _why(dec, status, at, first, path)
        dec.flush()
        tracker.take(dec, on_rows)
    if tracker.no_addr is not None:  # before any later stop: the whole read meets this entry first
        d, i, action = tracker.no_addr
        error = _entry_error({"action": action}, d, i, path)
    return Decoded(dec.result, flags["devices"], tracker.rows, flags["has_time"], flags["has_user_metadata"],
                   tracker.back, tracker.first_back, tracker.oom, dec.stacks, list(dec.actions), error=error,
                   stop=at, devices_with_rows=len(tracker.per_device), untimed_rows=tracker.untimed)


def _why(dec, status: int, at: int, first: Pass1, path: Path) -> TraceFormatError:
    """The error of a pass 2 that did not end clean (the first reason, in file order)."""
    if status == -9:
        obj, d, i = dec.odd
        return _entry_error(obj, d, i, path)
    if status == -10 and (first.stopped or at < first.end):  # before where pass 1 stopped, or it saw STOP
        return TraceFormatError(f"byte {at:,} holds what the streaming read cannot build as pickle does ({dec.why})",
                                path=path, hint="Only load pickles from torch.cuda.memory._dump_snapshot() or "
                                                "memory_snapshot()")
    if first.cut:
        return safe_pickle.cut_short(first.size, first.end, path)
    return safe_pickle.CorruptPickle(f"the snapshot is corrupt at byte {first.end:,} (no pickle can go on from there)",
                                     path=path, hint="Re-copy the file, or dump the snapshot again")


def _entry_error(obj, d: int, i: int, path: Path) -> TraceFormatError:
    """The whole read's error for the entry the decoder stopped at (its refused fields and action)."""
    where = f"device_traces[{d}][{i}]"
    if not isinstance(obj, dict) or "action" not in obj:
        return model._shape_error(path, f"{where} has no 'action'")
    try:
        model._check_entry(obj, lambda: where, path)
    except TraceFormatError as exc:
        return exc
    # the decoder refused what the model accepts: it cannot build this entry as pickle does (the whole read decides)
    return TraceFormatError(f"{where} holds what the streaming read cannot build as pickle does ({obj!r:.120})",
                            path=path)


class _Tracker:
    """Running counts over the decoded rows: entries per device, entries back in time, the OOMs' free bytes."""

    def __init__(self) -> None:
        self.rows = 0
        self.per_device: dict[int, int] = {}
        self.latest: dict[int, int] = {}
        self.back = 0
        self.first_back: tuple[int, int, int] | None = None
        self.oom: dict = {}
        self.actions: list[str] = []
        self.untimed = 0
        #: The first entry of an action on an address without its addr: (device, index, action) (the whole
        #: read's ``model._check_entry`` refuses it; so does this read, at the same entry).
        self.no_addr: tuple[int, int, str] | None = None

    def take(self, dec, on_rows) -> None:
        if not dec.rows:
            return
        raw = dec.take()
        cols = {
            "device": np.frombuffer(raw["device"], np.int32),
            "time_us": np.frombuffer(raw["time_us"], np.int64),
            "time_valid": np.frombuffer(raw["time_valid"], np.bool_),
            "size": np.frombuffer(raw["size"], np.int64),
            "addr": np.frombuffer(raw["addr"], np.uint64),
            "addr_valid": np.frombuffer(raw["addr_valid"], np.bool_),
            "stream": np.frombuffer(raw["stream"], np.int64),
            "stream_valid": np.frombuffer(raw["stream_valid"], np.bool_),
            "action": np.frombuffer(raw["action"], np.int32),
            "stack": np.frombuffer(raw["stack"], np.int32),
        }
        self.actions = dec.actions
        if self.no_addr is None:
            self._addressed(cols)
        self._times(cols)
        free_valid = np.frombuffer(raw["device_free_valid"], np.bool_)
        if "oom" in self.actions:
            free = np.frombuffer(raw["device_free"], np.int64)
            for k in np.flatnonzero(cols["action"] == self.actions.index("oom")):
                t = int(cols["time_us"][k]) if cols["time_valid"][k] else None
                key = (int(cols["device"][k]), None if t is None else t * 1000, int(cols["size"][k]))
                self.oom[key] = int(free[k]) if free_valid[k] else None
        self.rows += len(cols["device"])
        self.untimed += int(len(cols["device"]) - np.count_nonzero(cols["time_valid"]))
        if on_rows is not None:
            on_rows(cols)

    def _addressed(self, cols: dict) -> None:
        ids = [k for k, a in enumerate(self.actions) if a in model.ADDRESSED_ACTIONS]
        bad = np.flatnonzero(np.isin(cols["action"], ids) & ~cols["addr_valid"]) if ids else ()
        if len(bad):
            k = int(bad[0])
            d = int(cols["device"][k])
            index = self.per_device.get(d, 0) + int(np.count_nonzero(cols["device"][:k] == d))
            self.no_addr = (d, index, self.actions[int(cols["action"][k])])

    def _times(self, cols: dict) -> None:
        """``torch_snapshot._time_back`` over the rows so far: entries whose time_us is below the latest before
        them on their device, and the first (device, index in its trace, microseconds back)."""
        device = cols["device"]
        for d in np.unique(device):
            d = int(d)
            rows = np.flatnonzero(device == d)
            start = self.per_device.get(d, 0)
            self.per_device[d] = start + rows.size
            valid = cols["time_valid"][rows]
            t = cols["time_us"][rows][valid]
            if not t.size:
                continue
            index = np.flatnonzero(valid) + start
            before = np.maximum.accumulate(np.concatenate(([self.latest.get(d, t[0])], t)))[:-1]
            back = t < before
            if back.any():
                self.back += int(back.sum())
                if self.first_back is None:
                    k = int(np.argmax(back))
                    self.first_back = (d, int(index[k]), int(before[k] - t[k]))
            self.latest[d] = int(max(before[-1], t[-1]))


def raw_batch(cols: dict) -> pa.RecordBatch:
    """The decoded columns as one batch of the spill file (nulls where a value was absent or None)."""
    def masked(values, valid, typ):
        return pa.array(values, typ, mask=~valid)

    return pa.RecordBatch.from_arrays([
        pa.array(cols["device"], pa.int32()),
        masked(cols["time_us"], cols["time_valid"], pa.int64()),
        pa.array(cols["size"], pa.int64()),
        masked(cols["addr"], cols["addr_valid"], pa.uint64()),
        masked(cols["stream"], cols["stream_valid"], pa.int64()),
        pa.array(cols["action"], pa.int32()),
        pa.array(cols["stack"], pa.int32()),
    ], schema=_RAW)


class _ReadAt(io.RawIOBase):
    """A file descriptor read from offset 0 with ``os.pread``: a position of its own, never the descriptor's."""

    def __init__(self, fd: int) -> None:
        self._fd, self._pos = fd, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        data = os.pread(self._fd, len(b), self._pos)
        b[:len(data)] = data
        self._pos += len(data)
        return len(data)


class Spill:
    """The decoded columns in an anonymous temporary Arrow stream file, read back (in order) as often as needed."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile(prefix="veotrace-snapshot-")
        self._writer = pa.ipc.new_stream(pa.PythonFile(self._file, mode="w"), _RAW)

    def write(self, cols: dict) -> None:
        self._writer.write_batch(raw_batch(cols))

    def finish(self) -> None:
        self._writer.close()
        self._file.flush()

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The columns from the start, read at offsets of their own (``os.pread``): the file's offset is shared
        with every process forked after the read (diagnose's analyses), so a ``seek(0)`` and read in one of
        them moved the others' reads (a streamed snapshot's simulate saw an empty stream)."""
        yield from pa.ipc.open_stream(pa.PythonFile(io.BufferedReader(_ReadAt(self._file.fileno()), 1 << 20),
                                                    mode="r"))

    def close(self) -> None:
        self._file.close()
