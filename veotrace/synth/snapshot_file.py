"""Synthetic data: a PyTorch memory snapshot pickle of any size, written as it is generated, with ground truth.

The file has PyTorch's layout (FORMATS.md C; ``_dump_snapshot`` of torch ~2.10: ``segments``,
``device_traces`` entries with ``time_us``, ``compile_context``, ``user_metadata`` and ``frames``,
``allocator_settings``, ``external_annotations``) and pickle protocol 4 as ``pickle.dump`` writes it:
strings and frame dicts pickled once and referred to by the memo afterwards, as PyTorch's snapshot
shares them; each entry's frames list new; appends and setitems in batches of 1,000; 64 KiB frames. It
is written entry by entry, so a 4 GB file costs the memory of one frame of it.

The trace is a training loop per device: weights allocated first and kept, then steps that each
allocate a seeded number of activations (a seeded stack from ``torch.stack_shapes`` each) and free them
in reverse order (free_requested, free_completed), until the file reaches ``target_bytes`` or
``steps`` steps. Every ``annotate_every`` steps, a record_function range ``ProfilerStep#k`` covers
the step. ``SnapshotFileTruth`` is what any reader must recover.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from veotrace.synth.torch import BASE_ADDRESS, T0_US, stack_shapes

#: Size of each device's one segment (the weights at its start, the steps' activations after them).
SEGMENT_BYTES = 1 << 34
#: Sizes an activation is drawn from (512-byte multiples, as the caching allocator rounds).
SIZES = np.array([512, 4096, 65536, 1 << 20, 2 << 20, 8 << 20, 20 << 20, 64 << 20], np.int64)
_FRAME_TARGET = 64 << 10
_BATCH = 1000  # pickle's _BATCHSIZE
SETTINGS = {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1, "garbage_collection_threshold": 0.0,
            "expandable_segments": False, "pinned_num_register_threads": 1, "release_lock_on_cudamalloc": False,
            "pinned_use_cuda_host_register": False, "graph_capture_record_stream_reuse": False,
            "roundup_power2_divisions": {str(1 << k): 0 for k in range(16)}}


@dataclass
class SnapshotFileTruth:
    """What a reader must recover from the written file."""

    entries: int = 0
    actions: dict[str, int] = field(default_factory=dict)
    alloc_bytes: int = 0  # sum of the alloc entries' sizes
    peak_live_bytes: list[int] = field(default_factory=list)  # per device: weights and the largest step
    final_live_bytes: int = 0  # all devices: the weights, the active_allocated blocks of the segments
    final_live_blocks: int = 0
    steps: int = 0
    devices: int = 1
    stacks_used: int = 0  # distinct stacks the alloc entries carry
    annotations: int = 0  # START and END marks
    bytes: int = 0


class _Pickler:
    """The opcodes ``pickle.dump(obj, protocol=4)`` writes, emitted piece by piece into 64 KiB frames."""

    def __init__(self, out) -> None:
        self.out, self.buf, self.memo_n, self.bytes = out, bytearray(), 0, 0
        self.strings: dict[str, int] = {}
        self.ids: dict[int, int] = {}  # id(obj) of the shared frame dicts -> memo index
        self.keep: list = []  # the objects behind self.ids, alive while their ids are keys

    def memoize(self) -> int:
        self.buf += b"\x94"
        self.memo_n += 1
        return self.memo_n - 1

    def ref(self, index: int) -> bytes:
        return b"h" + bytes([index]) if index < 256 else b"j" + struct.pack("<I", index)

    def commit(self, force: bool = False) -> None:
        if self.buf and (force or len(self.buf) >= _FRAME_TARGET):
            self.out.write(b"\x95" + struct.pack("<Q", len(self.buf)) + bytes(self.buf))
            self.bytes += 9 + len(self.buf)
            self.buf.clear()

    def save(self, obj) -> None:
        buf = self.buf
        if obj is None or isinstance(obj, bool):
            buf += {None: b"N", True: b"\x88", False: b"\x89"}[obj]
        elif isinstance(obj, int):
            buf += int_bytes(obj)
        elif isinstance(obj, float):
            buf += b"G" + struct.pack(">d", obj)
        elif isinstance(obj, str):
            if obj in self.strings:
                buf += self.ref(self.strings[obj])
                return
            raw = obj.encode("utf-8", "surrogatepass")
            buf += (b"\x8c" + bytes([len(raw)]) if len(raw) < 256 else b"X" + struct.pack("<I", len(raw))) + raw
            self.strings[obj] = self.memoize()
        elif isinstance(obj, tuple):
            for item in obj:
                self.save(item)
            buf += {0: b")", 1: b"\x85", 2: b"\x86", 3: b"\x87"}.get(len(obj), b"")  # snapshots hold pairs only
            self.memoize()
        elif id(obj) in self.ids:
            buf += self.ref(self.ids[id(obj)])
        elif isinstance(obj, dict):
            buf += b"}"
            index = self.memoize()
            if obj.get("__shared__"):
                self.ids[id(obj)] = index
                self.keep.append(obj)
            self.items([(k, v) for k, v in obj.items() if k != "__shared__"], pairs=True)
        elif isinstance(obj, list):
            buf += b"]"
            self.memoize()
            self.items(obj, pairs=False)

    def items(self, items: list, *, pairs: bool) -> None:
        for start in range(0, len(items), _BATCH):
            batch = items[start:start + _BATCH]
            if len(batch) > 1:
                self.buf += b"("
            for item in batch:
                if pairs:
                    self.save(item[0])
                    self.save(item[1])
                else:
                    self.save(item)
            self.buf += (b"u" if pairs else b"e") if len(batch) > 1 else (b"s" if pairs else b"a")


def int_bytes(v: int) -> bytes:
    """``pickle``'s encoding of an int (protocol 2+): BININT1, BININT2, BININT or LONG1."""
    if 0 <= v <= 0xFF:
        return b"K" + bytes([v])
    if 0 <= v <= 0xFFFF:
        return b"M" + struct.pack("<H", v)
    if -0x80000000 <= v <= 0x7FFFFFFF:
        return b"J" + struct.pack("<i", v)
    raw = v.to_bytes((v.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(raw)]) + raw


def _steps(rng: np.random.Generator, base: int, weights: np.ndarray, t: int, per_step: tuple[int, int], stacks: int):
    """Endless steps of one device: (entries as (action, addr, size, time_us, stack), step time range)."""
    cursor0 = base + int(weights.sum())
    while True:
        m = int(rng.integers(per_step[0], per_step[1] + 1))
        sizes = SIZES[rng.integers(0, SIZES.size, m)]
        ks = rng.integers(0, stacks, m)
        times = t + np.cumsum(rng.integers(1, 50, 3 * m))
        addrs = cursor0 + np.concatenate(([0], np.cumsum(sizes)[:-1]))
        entries = [("alloc", int(addrs[i]), int(sizes[i]), int(times[i]), int(ks[i])) for i in range(m)]
        for j, i in enumerate(range(m - 1, -1, -1)):
            entries.append(("free_requested", int(addrs[i]), int(sizes[i]), int(times[m + 2 * j]), int(ks[i])))
            entries.append(("free_completed", int(addrs[i]), int(sizes[i]), int(times[m + 2 * j + 1]), int(ks[i])))
        yield entries, (t, int(times[-1]))
        t = int(times[-1])


def _entry(action: str, addr: int, size: int, t: int, frames: list | None) -> dict:
    e = {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t, "compile_context": "N/A",
         "user_metadata": ""}
    if frames is not None:
        e["frames"] = list(frames)  # a new list each entry, of the shared frame dicts
    return e


def _shared_shapes(depth: int, stacks: int) -> list[list[dict]]:
    """``stack_shapes``, each distinct frame dict marked to be pickled once and referred to afterwards."""
    shapes = stack_shapes(depth, stacks)
    seen: dict[int, dict] = {}
    for shape in shapes:
        for f in shape:
            seen.setdefault(id(f), f)["__shared__"] = True
    return shapes


def write_snapshot(path: str | Path, *, target_bytes: int | None = None, steps: int | None = None, seed: int = 0,
                   devices: int = 1, depth: int = 20, stacks: int = 200, weights: int = 50,
                   per_step: tuple[int, int] = (20, 60), annotate_every: int = 100) -> SnapshotFileTruth:
    """Write the snapshot to ``path`` (stopping at the first step boundary past ``target_bytes`` or after
    ``steps`` steps per device, whichever comes first) and return its ground truth.

    Raises:
        ValueError: neither ``target_bytes`` nor ``steps``, or a parameter out of range.
    """
    if target_bytes is None and steps is None:
        raise ValueError("give target_bytes or steps")
    if devices < 1 or depth < 1 or stacks < 1 or weights < 1 or not 1 <= per_step[0] <= per_step[1]:
        raise ValueError("devices, depth, stacks, weights and per_step must be positive")
    rng = np.random.default_rng(seed)
    truth = SnapshotFileTruth(devices=devices)
    shapes = _shared_shapes(depth, stacks)
    per_device = target_bytes // devices if target_bytes is not None else None
    weight_sizes = [SIZES[rng.integers(0, SIZES.size, weights)] for _ in range(devices)]
    bases = [BASE_ADDRESS + d * (1 << 36) for d in range(devices)]
    with open(path, "wb") as out:
        out.write(b"\x80\x04")  # PROTO, before the first frame as pickle writes it
        pk = _Pickler(out)
        pk.bytes = 2
        pk.buf += b"}"
        pk.memoize()
        pk.buf += b"("
        pk.save("segments")
        pk.save([_segment(d, bases[d], weight_sizes[d]) for d in range(devices)])
        pk.save("device_traces")
        pk.buf += b"]"
        pk.memoize()
        if devices > 1:
            pk.buf += b"("
        notes: list[dict] = []
        used: set[int] = set()
        for d in range(devices):
            _device_trace(pk, rng, d, bases[d], weight_sizes[d], shapes, per_step, stacks, steps, per_device,
                          annotate_every, notes, used, truth)
            if devices == 1:
                pk.buf += b"a"
        if devices > 1:
            pk.buf += b"e"
        pk.save("allocator_settings")
        pk.save(SETTINGS)
        pk.save("external_annotations")
        pk.save(notes)
        pk.buf += b"u."
        pk.commit(force=True)
        truth.bytes = pk.bytes
    truth.stacks_used = len(used)
    truth.annotations = len(notes)
    return truth


def _device_trace(pk: _Pickler, rng, d: int, base: int, weight_sizes: np.ndarray, shapes, per_step, stacks: int,
                  steps: int | None, per_device: int | None, annotate_every: int, notes: list, used: set,
                  truth: SnapshotFileTruth) -> None:
    """One device's list of entries: the segment, the weights, then steps until the bound."""
    pk.buf += b"]"
    pk.memoize()
    start_bytes = pk.bytes + len(pk.buf)
    t = T0_US + d
    head = [("segment_alloc", base, SEGMENT_BYTES, t, -1)]
    cursor = base
    for size in weight_sizes:
        t += 7
        head.append(("alloc", cursor, int(size), t, int(rng.integers(0, stacks))))
        cursor += int(size)
    weights_live = int(weight_sizes.sum())
    truth.final_live_bytes += weights_live
    truth.final_live_blocks += len(weight_sizes)
    truth.peak_live_bytes.append(weights_live)
    batch: list[tuple] = []

    def put(entries) -> None:
        batch.extend(entries)
        while len(batch) >= _BATCH:
            _flush(pk, batch[:_BATCH], shapes, used, truth)
            del batch[:_BATCH]
            pk.commit()

    put(head)
    done = 0
    for entries, (t0, t1) in _steps(rng, base, weight_sizes, t, per_step, stacks):
        if (steps is not None and done >= steps) or (per_device is not None and pk.bytes + len(pk.buf) - start_bytes
                                                     >= per_device):
            break
        put(entries)
        step_bytes = sum(e[2] for e in entries if e[0] == "alloc")
        truth.peak_live_bytes[d] = max(truth.peak_live_bytes[d], weights_live + step_bytes)
        if done % annotate_every == 0:
            notes += [{"name": f"ProfilerStep#{done}", "stage": "START", "device": d, "time_us": t0 + 1},
                      {"name": f"ProfilerStep#{done}", "stage": "END", "device": d, "time_us": t1}]
        done += 1
    truth.steps = max(truth.steps, done)
    if batch:
        _flush(pk, batch, shapes, used, truth)


def _flush(pk: _Pickler, batch: list[tuple], shapes, used: set, truth: SnapshotFileTruth) -> None:
    """One batch of entries (MARK ... APPENDS, or one entry and APPEND), counted in ``truth``. An entry whose
    strings and frames the memo holds already is the same bytes as ``save`` writes, from a template."""
    if len(batch) > 1:
        pk.buf += b"("
    templates = pk.__dict__.setdefault("templates", {})
    for action, addr, size, t, k in batch:
        parts = templates.get((action, k))
        if parts is None:
            pk.save(_entry(action, addr, size, t, shapes[k] if k >= 0 else None))
            templates[(action, k)] = _template(pk, action, shapes[k] if k >= 0 else None)
        else:
            pk.buf += parts[0] + int_bytes(addr) + parts[1] + int_bytes(size) + parts[2] + int_bytes(t) + parts[3]
            pk.memo_n += 2 if k >= 0 else 1  # the entry dict's MEMOIZE and its frames list's
        truth.entries += 1
        truth.actions[action] = truth.actions.get(action, 0) + 1
        if action == "alloc":
            truth.alloc_bytes += size
            used.add(k)
    pk.buf += b"e" if len(batch) > 1 else b"a"


def _template(pk: _Pickler, action: str, frames: list | None) -> tuple[bytes, bytes, bytes, bytes]:
    """The bytes of an entry around its addr, size and time_us, once ``save`` memoised all it refers to."""
    r, s = pk.ref, pk.strings
    tail = r(s["compile_context"]) + r(s["N/A"]) + r(s["user_metadata"]) + r(s[""])
    if frames is not None:
        refs = b"".join(r(pk.ids[id(f)]) for f in frames)
        tail += r(s["frames"]) + b"]\x94" + ((b"(" + refs + b"e") if len(frames) > 1 else refs + b"a" if frames else b"")
    return (b"}\x94(" + r(s["action"]) + r(s[action]) + r(s["addr"]), r(s["size"]),
            r(s["stream"]) + b"K\x00" + r(s["time_us"]), tail + b"u")


def _segment(d: int, base: int, weight_sizes: np.ndarray) -> dict:
    """The device's segment at the end: the weights active, the rest one inactive block."""
    blocks, at = [], base
    for size in weight_sizes:
        blocks.append({"address": at, "size": int(size), "requested_size": int(size), "state": "active_allocated",
                       "frames": []})
        at += int(size)
    blocks.append({"address": at, "size": base + SEGMENT_BYTES - at, "requested_size": 0, "state": "inactive",
                   "frames": []})
    live = int(weight_sizes.sum())
    return {"device": d, "address": base, "total_size": SEGMENT_BYTES, "allocated_size": live, "active_size": live,
            "requested_size": live, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
            "is_expandable": False, "frames": [], "blocks": blocks}
