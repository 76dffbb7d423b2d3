"""Reader of PyTorch profiler traces (Kineto chrome-trace JSON, plain or gzip): the ``[memory]`` events.

Tables: ``alloc_events`` (the GPU events in the common schema: ``Bytes`` > 0 an ``alloc``, < 0 a ``free`` of
``|Bytes|``, ``mem_kind`` the device type, ``device`` the lane :func:`lane`), ``profiler_memory``
(``KINETO_MEMORY``: every memory event, CPU ones included, with the totals and, when asked, the enclosing
op, Python frame and GPU kernel) and :func:`read_ops` (``KINETO_OPS``). Events are ordered by ``ts`` then
``Ev Idx``. What the reader checks, and reports as counted warnings (never silently): the running sum of
``Bytes`` per device against ``Total Allocated`` (from the bytes live before profiling, which the first
event gives), a file cut mid-write (read up to its last complete event, the byte said), bytes that are no
UTF-8. A bad ``[memory]`` event (no ``ts``, a size that is no 64-bit integer, NaN, a key twice) is one
``Error:`` line naming its byte, or skipped and counted under ``--skip-bad-rows``.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from veotrace.errors import TraceFormatError
from veotrace.schemas.kineto import CPU, KINETO_MEMORY, KINETO_OPS, device_name
from veotrace.sources.base import ReadOptions, ReadReport, open_decompressed
from veotrace.sources.kineto import scan

#: Rows per alloc_events batch.
BATCH_ROWS = 1 << 18
#: Memory events parsed at once on the fast path (one JSON array; a bad one sends its batch to the slow path).
BATCH_EVENTS = 20_000
#: A multi-node run's lanes: rank x LANE_STRIDE + Device Id (device ids repeat on every node).
LANE_STRIDE = 1000
#: Mismatches of the running-sum check listed by event.
LISTED = 5
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
NONE = I64_MIN  # the sentinel of an absent value in the columns below
NO_ADDR = (1 << 64) - 1
#: GPU span kinds a memory event may fall in (the kernel, copy or collective running on its device).
GPU_KINDS = ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset")  # the 2021 names capitalised
CPU_KINDS = ("cpu_op", "python_function", "user_annotation", "Operator")


class _Bad(Exception):
    pass


@dataclass
class MemoryRead:
    """One file's memory events (``table``, ``KINETO_MEMORY`` in order) and what the read found."""

    path: str
    table: pa.Table
    rank: int | None
    world_size: int | None
    devices: list = field(default_factory=list)  # deviceProperties names
    head: dict = field(default_factory=dict)
    cut: dict | None = None  # {"at_byte", "read_to_byte", "reason"} when the file ends early
    checks: dict = field(default_factory=dict)  # the running-sum check per lane
    bad_utf8: int = 0
    ops: pa.Table | None = None
    lanes_multi_node: bool = False


def _int(v, what: str, *, optional: bool = False) -> int:
    if v is None:
        if optional:
            return NONE
        raise _Bad(f"has no {what}")
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _Bad(f"{what} is not a number ({str(v)[:40]!r})")
    if isinstance(v, float):
        if not math.isfinite(v) or v != int(v):
            raise _Bad(f"{what} is not an integer ({v!r})")
        v = int(v)
    if not I64_MIN < v <= I64_MAX:
        raise _Bad(f"{what} {v} is past the 64-bit range")
    return v


def _ts_ns(v) -> int:
    if v is None:
        raise _Bad("has no ts")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise _Bad(f"ts is not a finite number ({str(v)[:40]!r})")
    ns = round(v * 1000) if isinstance(v, float) else v * 1000
    if not I64_MIN < ns <= I64_MAX:
        raise _Bad(f"ts {v} is past the 64-bit range")
    return ns


class _Columns:
    """Compact columns of the memory events (8 bytes a value: 2M events hold ~110 MB, not Python objects)."""

    def __init__(self, tid: bool = True) -> None:
        self.keep_tid = tid  # the thread is needed only to find the ops around each event
        self.ts, self.ev, self.dtype, self.did = array("q"), array("q"), array("b"), array("i")
        self.addr, self.nbytes, self.ta, self.tr, self.tid = array("Q"), array("q"), array("q"), array("q"), array("q")

    def add(self, obj, raw: bytes | None, offset: int = 0) -> bool:
        """Append one event; False when ``obj`` is no memory event (a string that merely held the name)."""
        if not isinstance(obj, dict) or obj.get("name") != "[memory]":
            return False
        args = obj.get("args")
        if not isinstance(args, dict):
            raise _Bad("has no args")
        if raw is not None and raw.count(b'":') > len(obj) + len(args):
            raise _Bad("has a key twice")
        ts = _ts_ns(obj.get("ts"))
        nbytes = _int(args.get("Bytes"), "Bytes")
        dtype = _int(args.get("Device Type"), "Device Type")
        did = _int(args.get("Device Id"), "Device Id")
        if not -128 <= dtype < 128 or not -(1 << 31) <= did < (1 << 31):
            raise _Bad(f"Device Type {dtype} / Device Id {did} out of range")
        addr = args.get("Addr")
        if addr is not None:
            addr = _int(addr, "Addr") if not (isinstance(addr, int) and 0 <= addr < NO_ADDR) else addr
            if addr < 0:
                raise _Bad(f"Addr {addr} is negative")
        ta = _int(args.get("Total Allocated"), "Total Allocated", optional=True)
        tr = _int(args.get("Total Reserved"), "Total Reserved", optional=True)
        ev = _int(args.get("Ev Idx"), "Ev Idx", optional=True)
        tid = _id(obj.get("tid"))
        self.ts.append(ts)
        self.ev.append(ev)
        self.dtype.append(dtype)
        self.did.append(did)
        self.addr.append(NO_ADDR if addr is None else addr)
        self.nbytes.append(nbytes)
        self.ta.append(ta)
        self.tr.append(tr)
        if self.keep_tid:
            self.tid.append(NONE if tid is None else tid)
        return True

    def __len__(self) -> int:
        return len(self.ts)

    def add_batch(self, raws: list[bytes], offsets: list[int]) -> bool:
        """Append many events parsed as one JSON array, the columns checked as arrays (the fast path); False,
        with nothing appended, when any event needs the per-event path (which names what is wrong)."""
        if scan._fast_loads is None or not raws:
            return False
        joined = b"[" + b",".join(raws) + b"]"
        try:
            objs = scan._fast_loads(joined)
            if any(o.get("name") != "[memory]" for o in objs):
                return False
            args = [o["args"] for o in objs]
            if joined.count(b'":') != sum(len(o) + len(a) for o, a in zip(objs, args)):
                return False  # a key twice (the parser keeps the last): the per-event path says which
            if joined.count(b"true") + joined.count(b"false") > joined.count(b'"finished"'):
                return False  # a boolean where a number belongs
            ts = np.array([o["ts"] for o in objs])
            cols = [np.array([a[k] for a in args]) for k in ("Bytes", "Device Type", "Device Id")]
            opt = []
            for k in ("Addr", "Total Allocated", "Total Reserved", "Ev Idx"):
                vals = [a.get(k) for a in args]
                missing = vals.count(None)
                if missing not in (0, len(vals)):
                    return False
                opt.append(None if missing else np.array(vals))
            tids = [o.get("tid") for o in objs]
            tid = np.array(tids) if None not in tids else None
        except (KeyError, TypeError, AttributeError, ValueError, OverflowError):
            return False
        if ts.dtype.kind == "f":
            if not np.isfinite(ts).all():
                return False
            ts_ns = np.round(ts * 1000).astype(np.int64)
        elif ts.dtype.kind == "i":
            if (np.abs(ts) > I64_MAX // 1000).any():
                return False
            ts_ns = ts.astype(np.int64) * 1000
        else:
            return False
        nbytes, dtype, did = cols
        if any(c.dtype.kind != "i" for c in cols) or (dtype < -128).any() or (dtype > 127).any() \
                or (np.abs(did) >= 1 << 31).any():
            return False
        addr, ta, tr, ev = opt
        if addr is not None and (addr.dtype.kind not in "iu" or (addr < 0).any() or (addr == NO_ADDR).any()):
            return False
        if any(c is not None and c.dtype.kind != "i" for c in (ta, tr, ev)):
            return False
        if tid is not None and tid.dtype.kind != "i":
            tid = None  # strings ("25738" in 2021 traces): the per-event rule, one by one
            tids = [_id(t) for t in tids]
            tid_arr = np.array([NONE if t is None else t for t in tids], np.int64)
        else:
            tid_arr = tid.astype(np.int64) if tid is not None else np.full(len(objs), NONE, np.int64)
        n = len(objs)
        self.ts.frombytes(ts_ns.tobytes())
        self.ev.frombytes((ev.astype(np.int64) if ev is not None else np.full(n, NONE, np.int64)).tobytes())
        self.dtype.frombytes(dtype.astype(np.int8).tobytes())
        self.did.frombytes(did.astype(np.int32).tobytes())
        self.addr.frombytes((addr.astype(np.uint64) if addr is not None else np.full(n, NO_ADDR, np.uint64)).tobytes())
        self.nbytes.frombytes(nbytes.astype(np.int64).tobytes())
        self.ta.frombytes((ta.astype(np.int64) if ta is not None else np.full(n, NONE, np.int64)).tobytes())
        self.tr.frombytes((tr.astype(np.int64) if tr is not None else np.full(n, NONE, np.int64)).tobytes())
        if self.keep_tid:
            self.tid.frombytes(tid_arr.tobytes())
        return True


def _bad(path, offset: int, why: str, options: ReadOptions, report: ReadReport) -> None:
    if options.skip_bad_rows:
        report.skip_row(path, None, f"byte {offset:,}: [memory] event {why}")
        return
    raise TraceFormatError(f"byte {offset:,}: a [memory] event {why}", path=path,
                           hint="Fix or remove that event, or pass --skip-bad-rows to skip and count such events")


def read_memory(path: Path, *, options: ReadOptions = ReadOptions(), report: ReadReport | None = None,
                context: bool = False, on_progress: Callable[[int], None] | None = None) -> MemoryRead:
    """Every ``[memory]`` event of ``path`` in (ts, Ev Idx) order, checked; ``context``: also the spans
    (``read.ops``) and each event's enclosing op, frame and kernel (a second, full scan).

    The cyclic garbage collector is paused while reading: the parsed events are dicts and lists without
    cycles, and its passes over every block's new objects cost about a third of the parse (measured on a
    20 MB block of the benchmark's trace: orjson 0.29-0.33 s with it, 0.18-0.20 s without)."""
    import gc

    enabled = gc.isenabled()
    gc.disable()
    try:
        return _read_memory(path, options=options, report=report, context=context, on_progress=on_progress)
    finally:
        if enabled:
            gc.enable()


def _read_memory(path: Path, *, options: ReadOptions, report: ReadReport | None, context: bool,
                 on_progress: Callable[[int], None] | None) -> MemoryRead:
    report = report if report is not None else ReadReport()
    cols = _Columns(tid=context)
    state = scan.ScanState()
    fh, raw = _open(path)
    with fh:
        for batch in scan.memory_events(fh, state, block=scan.MEMORY_BLOCK):
            if not cols.add_batch([t for _, t in batch], [o for o, _ in batch]):
                for offset, text in batch:
                    try:
                        cols.add(scan._loads(text), text, offset)
                    except _Bad as exc:
                        _bad(path, offset, str(exc), options, report)
                    except ValueError as exc:
                        _bad(path, offset, f"is not valid JSON ({str(exc).splitlines()[0][:80]})", options, report)
            if on_progress is not None:
                on_progress(raw.tell())
    if not state.has_events_key:
        raise TraceFormatError("no traceEvents list: a profiler trace holds its events there", path=path,
                               hint="Export the trace with prof.export_chrome_trace(...) or tensorboard_trace_handler")
    head = {**state.tail, **state.head}
    dist = head.get("distributedInfo") if isinstance(head.get("distributedInfo"), dict) else {}
    rank = dist.get("rank") if isinstance(dist.get("rank"), int) else None
    world = dist.get("world_size") if isinstance(dist.get("world_size"), int) else None
    props = head.get("deviceProperties") if isinstance(head.get("deviceProperties"), list) else []
    names = [str(p.get("name")) for p in props if isinstance(p, dict)]
    result = MemoryRead(str(path), KINETO_MEMORY.empty_table(), rank, world, names, head, bad_utf8=state.bad_utf8)
    result.lanes_multi_node = bool(world and rank is not None and world > max(len(names), 1))
    n = len(cols)
    if state.cut:
        result.cut = {"at_byte": state.size, "read_to_byte": state.last_complete_end, "reason": state.cut_reason}
        report.warnings.append(  # the same words on either scan (the reason, which depends on it, is in ``cut``)
            f"Warning: {path}: the file stops at {'decompressed ' if raw is not fh else ''}byte {state.size:,} "
            f"(cut mid-write?): read the {n:,} [memory] events complete before byte {state.last_complete_end:,}")
    if state.bad_utf8:
        report.warnings.append(f"Warning: {path}: {state.bad_utf8:,} bytes that are no UTF-8 in names, read as U+FFFD")
    result.table = _table(cols, path, rank)
    del cols
    release_unused()  # the scan's blocks and parsed batches
    if context:
        spans, gpu_keys, span_state = enclosing_spans(path, result.table, block=scan.MEMORY_BLOCK)
        result.bad_utf8 = span_state.bad_utf8  # the full scan decodes every byte: names included
        if span_state.bad_utf8:
            report.warnings.append(f"Warning: {path}: {span_state.bad_utf8:,} bytes that are no UTF-8 in names, read "
                                   "as U+FFFD")
        release_unused()  # the full scan's blocks
        result.ops, ids = _context(result.table, spans, path, rank, gpu_keys=gpu_keys)
        del spans
        for name, col in zip(("op_id", "frame_id", "kernel_id", "module_id"), ids):
            result.table = result.table.set_column(KINETO_MEMORY.get_field_index(name), name, col)
    result.checks = running_sum_check(result.table)
    pairing_check(result.table, result.checks)
    release_unused()  # the checks' and the context's temporaries
    for text in check_lines(path, result.checks):
        report.warnings.append(text)
    return result


def release_unused() -> None:
    """Give the memory freed so far back to the system: Arrow's pool (mimalloc keeps what it freed) and glibc's
    heap (freed numpy blocks in the middle of the heap stay resident; ``malloc_trim`` returns their pages). On a
    2M-event trace this lowers what the read leaves resident by ~80-190 MB (measured, /proc/self/status VmRSS),
    memory the next step (the replay, the analysis) would otherwise add to."""
    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def _malloc_trim():
    global _TRIM
    if _TRIM is False:
        try:
            import ctypes
            import ctypes.util

            _TRIM = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
        except (OSError, AttributeError, TypeError):  # not glibc (macOS, musl): nothing to trim
            _TRIM = None
    return _TRIM


_TRIM = False


def _open(path: Path):
    """(decompressed stream, raw file): a local gzip through Python's zlib (its buffers are freed as read; Arrow's
    stream kept ~15 MB more resident on a 2M-event trace), anything else as every reader opens it."""
    from veotrace.sources.base import compression_of

    if isinstance(path, Path):
        raw = open(path, "rb")  # noqa: SIM115 - closed with the stream below
        if compression_of(raw.read(4)) == "gzip":
            import gzip

            raw.seek(0)
            return gzip.GzipFile(fileobj=raw, mode="rb"), raw
        raw.close()
    return open_decompressed(path)


def _id(v) -> int | None:
    """A pid/tid: an integer, or the 2021 format's digits in a string ("25738"); None otherwise ("stream 7")."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v if I64_MIN < v <= I64_MAX else None
    if isinstance(v, str) and v.isdigit() and len(v) < 19:
        return int(v)
    return None


#: The span kinds a memory event's context is found among, in the order of the ops table's ``kind`` codes.
SPAN_KINDS = CPU_KINDS + GPU_KINDS


#: The GPU spans :func:`_innermost` looks back over: a memory event's GPU span is the latest-starting one that
#: holds it among the LOOK_BACK latest to start by then (GPU spans of several streams overlap; nested they are not).
LOOK_BACK = 16
#: GPU spans held per device before the held ones are cut down to those that can still answer.
GPU_PRUNE = 1 << 18


class _GpuHeld:
    """One GPU device's spans (of ``enclosing_spans``) that can answer :func:`_innermost` for its memory events
    at times ``q`` (sorted): of the spans starting in each interval (q[i-1], q[i]], the LOOK_BACK latest in the
    spans' order (start, longer first, file order); the others never come within any event's look-back."""

    def __init__(self, q: np.ndarray) -> None:
        self.q = q
        self.parts: list[dict] = []
        self.n = 0
        self.cap = GPU_PRUNE

    def add(self, cols: dict) -> None:
        keep = cols["ts"] <= self.q[-1] if self.q.size else np.zeros(cols["ts"].size, bool)
        if not keep.all():
            cols = {k: v[keep] for k, v in cols.items()}
        if cols["ts"].size:
            self.parts.append(cols)
            self.n += cols["ts"].size
        if self.n > self.cap:
            self.prune()
            self.cap = max(GPU_PRUNE, 2 * self.n)

    def prune(self) -> dict:
        if not self.parts:
            return {}
        cols = {k: np.concatenate([p[k] for p in self.parts]) for k in self.parts[0]}
        order = np.lexsort((cols["seq"], -cols["dur"], cols["ts"]))
        bucket = np.searchsorted(self.q, cols["ts"][order], side="left")
        last = np.searchsorted(bucket, bucket, side="right") - 1
        order = np.sort(order[last - np.arange(order.size) < LOOK_BACK])
        cols = {k: v[order] for k, v in cols.items()}
        self.parts, self.n = [cols], order.size
        return cols


#: cpu_op / python_function spans held before those that hold events are cut down to those that answer (the
#: bound then grows to 4x what is left: each cut walks every memory event of the thread, so on a trace where
#: nearly every span answers, cuts at 2x cost ~15 s more of sites' ~70 s CPU on the 1.2 GiB bench trace).
CPU_PRUNE = 1 << 20
OP_KINDS = ("cpu_op", "user_annotation", "Operator")


class _CpuHeld:
    """The cpu_op / python_function spans (of ``enclosing_spans``) that hold a memory event of their thread,
    cut down, whenever they pass a bound that doubles, to those that are the innermost for some event seen so
    far (an op, a frame, an ``nn.Module`` frame: :func:`_innermost` over what is held). A span that is no
    event's innermost now never becomes one: a later span can only take an event from the one holding it. So
    at most one span per memory event and kind is held, whatever the length of the trace."""

    def __init__(self, by_tid: dict) -> None:
        self.by_tid = by_tid
        self.parts: list[dict] = []
        self.n = 0
        self.cap = CPU_PRUNE

    def add(self, cols: dict, module_name: bytearray) -> None:
        self.parts.append(cols)
        self.n += cols["ts"].size
        if self.n > self.cap:
            self.prune(module_name)
            self.cap = max(CPU_PRUNE, 4 * self.n)

    def prune(self, module_name: bytearray) -> dict:
        if not self.parts:
            return {}
        cols = {k: np.concatenate([p.pop(k) for p in self.parts]) for k in list(self.parts[0])}
        kinds = {c: i for i, c in enumerate(SPAN_KINDS)}
        kind = cols["kind"]
        frame = kind == kinds["python_function"]
        module = frame & np.frombuffer(bytes(module_name), bool)[cols["name"]]
        order = np.lexsort((cols["seq"], -cols["dur"], cols["ts"]))  # _context's order
        keep = np.zeros(kind.size, bool)
        for members in (np.isin(kind, [kinds[c] for c in OP_KINDS]), frame, module):
            sel = order[members[order]]
            tids = cols["tid"][sel]
            for t in np.unique(tids).tolist():
                q = self.by_tid.get(t)
                if q is None:
                    continue
                rows = sel[tids == t]
                got = _innermost(cols["ts"][rows], cols["ts"][rows] + cols["dur"][rows], rows, q, nested=True)
                keep[got[got >= 0]] = True
        cols = {k: v[keep] for k, v in cols.items()}
        self.parts, self.n = [cols], int(keep.sum())
        return cols


def enclosing_spans(path, table: pa.Table, *, block: int = scan.BLOCK) -> tuple[dict, set, scan.ScanState]:
    """The spans :func:`_context` needs for the memory events of ``table``, from a full scan of ``path`` that
    holds only those (memory bounded by the memory events, not by the trace): a cpu_op / python_function /
    user_annotation span when it holds (ts <= t <= ts + dur) a memory event of its thread; of a GPU device's spans
    those :class:`_GpuHeld` keeps (the events of its own device, or all GPU events for spans of a device no event
    names: the lone-GPU rule). Returns (the spans' columns in file order with ``names``, every GPU device key
    seen (NONE for spans without one), the scan's state). The answer is the one all the spans give: the
    innermost span holding an event holds an event, so it is kept (tests/test_kineto.py compares both).

    Raises:
        TraceFormatError: the event list is no valid JSON.
    """
    ts = table.column("ts_ns").to_numpy()
    tid = table.column("tid").fill_null(NONE).to_numpy()
    did = table.column("device_id").to_numpy()
    gpu = table.column("device_type").to_numpy() != CPU
    by_tid: dict = {}
    if ts.size:
        order = np.lexsort((ts, tid))
        st, tt = tid[order], ts[order]
        del order
        cuts = (np.flatnonzero(np.diff(st)) + 1).tolist()
        for lo, hi in zip([0, *cuts], [*cuts, st.size]):
            if st[lo] != NONE:
                by_tid[int(st[lo])] = tt[lo:hi]
        del st
    gpu_all = np.sort(ts[gpu])
    by_dev = {int(d): np.sort(ts[gpu & (did == d)]) for d in np.unique(did[gpu]).tolist()}
    del ts, tid, did, gpu
    kinds = {c: i for i, c in enumerate(SPAN_KINDS)}
    n_cpu = len(CPU_KINDS)
    names: dict[str, int] = {}
    module_name = bytearray()  # per name id: an nn.Module frame's name
    cpu = _CpuHeld(by_tid)
    held: dict[int, _GpuHeld] = {}
    seq = 0
    state = scan.ScanState()
    fh, _ = _open(path)
    try:
        with fh:
            for values in scan.event_blocks(fh, state, block=block):
                objs = [o for o in values if isinstance(o, dict) and o.get("ph") == "X"
                        and o.get("name") != "[memory]" and o.get("cat") in SPAN_KINDS]
                del values
                got = _span_columns(objs, kinds)
                if got is None:
                    continue
                cols, name = got
                n = len(name)
                cols["seq"] = np.arange(seq, seq + n, dtype=np.int64)
                seq += n
                is_cpu = cols["kind"] < n_cpu
                keep = np.zeros(n, bool)
                for t in np.unique(cols["tid"][is_cpu]).tolist():
                    q = by_tid.get(t)
                    if q is None:
                        continue
                    m = np.flatnonzero(is_cpu & (cols["tid"] == t))
                    s0, e0 = cols["ts"][m], cols["ts"][m] + cols["dur"][m]
                    keep[m] = np.searchsorted(q, s0, side="left") < np.searchsorted(q, e0, side="right")
                gpu_rows = np.flatnonzero(~is_cpu)
                wanted = np.flatnonzero(keep)
                ids = np.zeros(n, np.int32)
                for i in np.concatenate([wanted, gpu_rows]).tolist():
                    nid = names.get(name[i])
                    if nid is None:
                        nid = names[name[i]] = len(names)
                        module_name.append(name[i].startswith("nn.Module: "))
                    ids[i] = nid
                cols["name"] = ids
                if wanted.size:
                    cpu.add({k: v[wanted] for k, v in cols.items()}, module_name)
                if gpu_rows.size:
                    g = {k: v[gpu_rows] for k, v in cols.items()}
                    for key in np.unique(g["dev"]).tolist():
                        h = held.get(key)
                        if h is None:
                            h = held[key] = _GpuHeld(by_dev.get(key, gpu_all))
                        m = g["dev"] == key
                        h.add({k: v[m] for k, v in g.items()})
    except ValueError as exc:
        raise TraceFormatError(f"the event list is not valid JSON ({exc})", path=path,
                               hint="Re-export the trace; a file cut mid-write reads up to its last event") from None
    parts = [c for c in [cpu.prune(module_name), *(h.prune() for h in held.values())] if c]
    gpu_keys = set(held)
    del cpu, held
    if parts:  # column by column, each part's column let go once joined (``seq`` keeps the file order)
        cols = {k: np.concatenate([p.pop(k) for p in parts]) for k in list(parts[0])}
    else:
        cols = {"kind": np.zeros(0, np.int8), "name": np.zeros(0, np.int32),
                **{k: np.zeros(0, np.int64) for k in ("seq", "ts", "dur", "pid", "tid", "dev", "stream")}}
    cols["names"] = list(names)
    return cols, gpu_keys, state


def _span_columns(objs: list, kinds: dict) -> tuple[dict, list] | None:
    """The spans of ``objs`` (span events of the wanted kinds) as columns (kind, ts, dur, pid, tid, dev, stream)
    and their names, as :func:`_span` makes them one by one (those it refuses left out), field by field over
    the block: a field of one type throughout (float or int times, int ids, dict args) is converted as an
    array; a block with anything else goes through :func:`_span` (about 4x slower per span)."""
    if not objs:
        return None
    n = len(objs)
    ok = np.ones(n, bool)
    times = []
    for key in ("ts", "dur"):
        vals = [o.get(key) for o in objs]
        types = set(map(type, vals))
        if types == {float}:
            a = np.round(np.array(vals, np.float64) * 1000)
            good = np.isfinite(a) & (a > -9.223372036854775808e18) & (a < 9.223372036854775808e18)
            ok &= good
            times.append(np.where(good, a, 0).astype(np.int64))
        elif types == {int}:
            try:
                a = np.array(vals, np.int64)
            except OverflowError:
                return _span_rows(objs, kinds)
            if (np.abs(a) > I64_MAX // 1000).any():
                return _span_rows(objs, kinds)
            times.append(a * 1000)
        else:
            return _span_rows(objs, kinds)
    ts_ns, dur_ns = times[0], np.maximum(times[1], 0)
    ok &= (ts_ns > I64_MIN) & (ts_ns <= I64_MAX - dur_ns)
    args = [o.get("args") for o in objs]
    if set(map(type, args)) != {dict}:
        return _span_rows(objs, kinds)
    cols = {"kind": np.array([kinds[o["cat"]] for o in objs], np.int8), "ts": ts_ns, "dur": dur_ns}
    for key, src in (("pid", objs), ("tid", objs), ("dev", args), ("stream", args)):
        vals = [o.get({"dev": "device"}.get(key, key)) for o in src]
        types = set(map(type, vals))
        try:
            if types == {int}:
                a = np.array(vals, np.int64)
            elif key in ("dev", "stream"):
                a = np.array([v if isinstance(v, int) else NONE for v in vals], np.int64)
            else:
                a = np.array([NONE if v is None else v for v in map(_id, vals)], np.int64)
        except OverflowError:
            return _span_rows(objs, kinds)
        cols[key] = a
    names = [o.get("name") for o in objs]
    if set(map(type, names)) != {str}:
        names = [str(x) if x is not None else "" for x in names]
    if "record_param_comms" in names:  # torch's op of every collective, named by its collective (as _span does)
        names = [_span_name(x, a) if x == "record_param_comms" else x for x, a in zip(names, args)]
    if not ok.all():
        keep = np.flatnonzero(ok)
        cols = {k: v[keep] for k, v in cols.items()}
        names = [names[i] for i in keep.tolist()]
    return (cols, names) if names else None


def _span_rows(objs: list, kinds: dict) -> tuple[dict, list] | None:
    """:func:`_span_columns` one span at a time (a block with mixed or unusual field types)."""
    rows = [r for r in map(_span, objs) if r is not None]
    if not rows:
        return None
    cat, name, start, dur, pid, tid_s, dev, stream = zip(*rows)
    n = len(rows)
    cols = {"kind": np.fromiter((kinds[c] for c in cat), np.int8, n),
            "ts": np.fromiter(start, np.int64, n), "dur": np.fromiter(dur, np.int64, n)}
    for k, v in (("pid", pid), ("tid", tid_s), ("dev", dev), ("stream", stream)):
        cols[k] = np.fromiter((NONE if x is None else x for x in v), np.int64, n)
    return cols, list(name)


def _span_name(name, args: dict):
    """A span's name; ``record_param_comms`` (torch's op of every collective) with its collective, so that
    ``sites --by op`` tells allreduce from allgather."""
    if name == "record_param_comms" and isinstance(args.get("Collective name"), str):
        return f"record_param_comms ({args['Collective name'][:64]})"
    return name


def _span(obj: dict) -> tuple | None:
    ts, dur = obj.get("ts"), obj.get("dur")
    if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)) or isinstance(ts, bool):
        return None
    if not (math.isfinite(ts) and math.isfinite(dur)):
        return None
    args = obj.get("args") if isinstance(obj.get("args"), dict) else {}
    name = obj.get("name")
    name = _span_name(name, args)
    pid, tid = _id(obj.get("pid")), _id(obj.get("tid"))
    dev, stream = args.get("device"), args.get("stream")
    ts_ns, dur_ns = round(ts * 1000), max(round(dur * 1000), 0)
    if not I64_MIN < ts_ns <= ts_ns + dur_ns <= I64_MAX:
        return None
    return (obj["cat"], str(name) if name is not None else "", ts_ns, dur_ns,
            pid, tid,
            dev if isinstance(dev, int) and I64_MIN < dev <= I64_MAX else None,
            stream if isinstance(stream, int) and I64_MIN < stream <= I64_MAX else None)


def _masked(values: np.ndarray, sentinel: int | None, typ) -> pa.Array:
    """An Arrow array over ``values``' own memory (no copy), null where it holds ``sentinel``."""
    values = np.ascontiguousarray(values)
    validity, nulls = None, 0
    if sentinel is not None:
        mask = values == sentinel
        nulls = int(mask.sum())
        if nulls:
            validity = pa.py_buffer(np.packbits(~mask, bitorder="little"))
    return pa.Array.from_buffers(typ, len(values), [validity, pa.py_buffer(values)], null_count=nulls)


def _nulls(n: int, typ) -> pa.Array:
    """``n`` nulls over zeroed buffers that take no memory until read (calloc): ``pa.nulls`` writes its zeros."""
    values = np.zeros(n, typ.to_pandas_dtype())
    validity = np.zeros((n + 7) // 8, np.uint8)
    return pa.Array.from_buffers(typ, n, [pa.py_buffer(validity), pa.py_buffer(values)], null_count=n)


def _table(cols: _Columns, path, rank: int | None) -> pa.Table:
    from veotrace.schemas.base import repeated

    n = len(cols)
    if not n:
        return KINETO_MEMORY.empty_table()
    ts = np.frombuffer(cols.ts, np.int64)
    ev = np.frombuffer(cols.ev, np.int64)
    order = None
    if n > 1:  # already in (ts, Ev Idx) order, as the profiler writes it? (booleans only: no copy of a column)
        key_ev = np.where(ev == NONE, 0, ev) if (ev == NONE).any() else ev
        back = ts[1:] < ts[:-1]
        back |= (ts[1:] == ts[:-1]) & (key_ev[1:] < key_ev[:-1])
        if back.any():  # a stable sort: file order breaks the remaining ties
            order = np.lexsort((key_ev, ts))
        del back, key_ev

    def col(buf, dtype):
        a = np.frombuffer(buf, dtype)
        return a if order is None else a[order]

    arrays = [
        _masked(col(cols.ts, np.int64), None, pa.int64()),
        _masked(col(cols.ev, np.int64), NONE, pa.int64()),
        _masked(np.arange(n, dtype=np.int64), None, pa.int64()),
        _nulls(n, pa.int32()) if rank is None else _masked(np.full(n, rank, np.int32), None, pa.int32()),
        _masked(col(cols.dtype, np.int8), None, pa.int8()),
        _masked(col(cols.did, np.int32), None, pa.int32()),
        _masked(col(cols.addr, np.uint64), NO_ADDR, pa.uint64()),
        _masked(col(cols.nbytes, np.int64), None, pa.int64()),
        _masked(col(cols.ta, np.int64), NONE, pa.int64()),
        _masked(col(cols.tr, np.int64), NONE, pa.int64()),
        _masked(col(cols.tid, np.int64), NONE, pa.int64()) if len(cols.tid) == n else _nulls(n, pa.int64()),
        _nulls(n, pa.int64()), _nulls(n, pa.int64()), _nulls(n, pa.int64()), _nulls(n, pa.int64()),
        repeated(str(path), n),
    ]
    return pa.Table.from_arrays(arrays, schema=KINETO_MEMORY)


def _lane_columns(table: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    dtype = table.column("device_type").to_numpy()
    did = table.column("device_id").to_numpy()
    rc = table.column("rank")
    rank = None if rc.null_count == len(rc) else rc.fill_null(-1).to_numpy()
    return dtype, did, rank


def lanes(table: pa.Table) -> list[tuple]:
    """The (rank, device type, device id) of the table's devices, in order (no copy of a column when the
    table holds one device, the common case)."""
    if not table.num_rows:
        return []
    dtype, did, rank = _lane_columns(table)
    ranks = [None] if rank is None else sorted(set(np.unique(rank).tolist()))
    out = []
    for r in ranks:
        rows = None if r is None or len(ranks) == 1 else rank == r
        dt = dtype if rows is None else dtype[rows]
        ids = did if rows is None else did[rows]
        for t in ([int(dt[0])] if dt.min() == dt.max() else np.unique(dt).tolist()):
            sel = ids if dt.min() == dt.max() else ids[dt == t]
            for d in ([int(sel[0])] if sel.min() == sel.max() else np.unique(sel).tolist()):
                out.append((None if r is None or r < 0 else r, t, d))
    return sorted(out, key=lambda k: (k[0] is not None, k[0] or 0, k[1], k[2]))


def lane_masks(table: pa.Table) -> Iterator[tuple[tuple, np.ndarray]]:
    """((rank, device type, device id), row mask) per device of ``table``."""
    dtype, did, rank = _lane_columns(table)
    keys = lanes(table)
    for key in keys:
        if len(keys) == 1:
            yield key, np.ones(len(dtype), bool)
            continue
        m = (dtype == key[1]) & (did == key[2])
        if rank is not None:
            m &= rank == (-1 if key[0] is None else key[0])
        yield key, m


def device_memory(head: dict) -> dict:
    """Device Id -> (its name, its memory in bytes) from the header's ``deviceProperties`` (Kineto's ``name``
    and ``totalGlobalMem``; either None when absent or not a positive integer)."""
    out = {}
    props = head.get("deviceProperties") if isinstance(head.get("deviceProperties"), list) else []
    for p in props:
        if isinstance(p, dict) and isinstance(p.get("id"), int):
            mem = p.get("totalGlobalMem")
            out[p["id"]] = (str(p["name"]) if p.get("name") is not None else None,
                            mem if isinstance(mem, int) and not isinstance(mem, bool) and mem > 0 else None)
    return out


def lane_text(key: tuple) -> str:
    """``rank 1 cuda:1``, ``cpu``, ``hip:0``."""
    rank, dtype, did = key
    dev = device_name(dtype) if dtype == CPU else f"{device_name(dtype)}:{did}"
    return dev if rank is None else f"rank {rank} {dev}"


def _ints(table: pa.Table, name: str) -> np.ndarray | None:
    """A column as int64 (zero-copy when it has no nulls), or None when it has any."""
    col = table.column(name)
    return None if col.null_count else col.to_numpy()


def running_sum_check(table: pa.Table) -> dict:
    """Per device: whether the running sum of ``Bytes`` from the first event's ``Total Allocated - Bytes``
    (the bytes live before profiling) equals ``Total Allocated`` at every event, the events where it stops
    holding (each mismatch re-anchors, so one bad event is one mismatch), and the device's totals. A device's
    rows are taken by mask only when the table holds several (one device: its columns as they are)."""
    out = {}
    if not table.num_rows:
        return out
    nbytes = table.column("bytes").to_numpy()
    ts = table.column("ts_ns").to_numpy()
    ev_col = table.column("ev_idx")
    ta_all, tr_all = _ints(table, "total_allocated_bytes"), _ints(table, "total_reserved_bytes")
    some_totals = table.column("total_allocated_bytes").null_count < table.num_rows
    if some_totals and (ta_all is None or tr_all is None):  # totals on some rows only: those rows are checked
        ta_all = table.column("total_allocated_bytes").fill_null(NONE).to_numpy()
        tr_all = table.column("total_reserved_bytes").fill_null(NONE).to_numpy()
    all_lanes = list(lane_masks(table))
    for key, mask in all_lanes:
        whole = len(all_lanes) == 1

        def pick(a, whole=whole, mask=mask):
            return a if whole else a[mask]

        b = pick(nbytes)
        entry = {"device": lane_text(key), "events": int(b.size), "allocs": int((b > 0).sum()),
                 "frees": int((b < 0).sum()), "has_totals": bool(some_totals)}
        csum = np.cumsum(b)
        if not some_totals:
            entry.update({"live_before_bytes": None, "peak_allocated_bytes": None, "peak_reserved_bytes": None,
                          "checked": 0, "mismatches": 0, "first_mismatches": [],
                          "running_sum_peak_bytes": int(max(csum.max(), 0))})
            out[lane_text(key)] = entry
            continue
        ta, tr = pick(ta_all), pick(tr_all)
        present = ta != NONE
        every = bool(present.all())
        checked = None if every else np.flatnonzero(present)  # None: every row (no index array of the size)
        n_checked = ta.size if every else checked.size
        offset = np.subtract(ta, csum, out=csum)  # constant while the running sum holds (in place: no copy)
        if every:
            bad = np.flatnonzero(offset[1:] != offset[:-1]) + 1
        else:
            bad = checked[1:][np.diff(offset[checked]) != 0] if checked.size > 1 else checked[:0]
        trv = tr if (tr != NONE).all() else tr[tr != NONE]
        first = 0 if every or not n_checked else int(checked[0])
        rows = np.flatnonzero(mask) if not whole else None

        def row(i, rows=rows):
            return int(i if rows is None else rows[i])

        mism = []
        for i in bad[:LISTED].tolist():
            ev = ev_col[row(i)].as_py()
            mism.append({"ts_ns": int(ts[row(i)]), "ev_idx": ev, "bytes": int(b[i]), "total_allocated_bytes": int(ta[i]),
                         "expected_bytes": (int(ta[i - 1] + b[i]) if every else
                                            int(ta[checked[np.searchsorted(checked, i) - 1]] + b[i])) if i else None})
        entry.update({
            "live_before_bytes": int(ta[first] - b[first]) if n_checked else None,
            "peak_allocated_bytes": (int(ta.max()) if every else int(ta[checked].max())) if n_checked else None,
            "peak_reserved_bytes": int(trv.max()) if trv.size else None,
            "reserved_rises": int((trv[1:] > trv[:-1]).sum()) if trv.size else 0,
            "reserved_falls": int((trv[1:] < trv[:-1]).sum()) if trv.size else 0,
            "first_reserved_bytes": int(trv[0]) if trv.size else None,
            "checked": int(n_checked), "mismatches": int(bad.size), "first_mismatches": mism,
        })
        out[lane_text(key)] = entry
    return out


def pairing_check(table: pa.Table, checks: dict) -> None:
    """Per device with addresses, into ``checks[lane]["pairing"]``: frees of an address the trace has not
    allocated (blocks live before profiling), frees whose size is not their block's, and allocations at an
    address still live (a free the trace misses). Walked in chunks, holding only the live blocks."""
    if not table.num_rows or table.column("address").null_count == table.num_rows:
        return
    addr_all = table.column("address").fill_null(NO_ADDR).to_numpy()
    b_all = table.column("bytes").to_numpy()
    ev_col = table.column("ev_idx")
    all_lanes = list(lane_masks(table))
    for key, mask in all_lanes:
        whole = len(all_lanes) == 1
        addr = addr_all if whole else addr_all[mask]
        b = b_all if whole else b_all[mask]
        rows = None if whole else np.flatnonzero(mask)
        live: dict = {}
        unknown = unknown_bytes = mismatched = at_live = 0
        first: list = []
        for lo in range(0, b.size, 1 << 16):
            for j, (a, n) in enumerate(zip(addr[lo:lo + (1 << 16)].tolist(), b[lo:lo + (1 << 16)].tolist())):
                if a == NO_ADDR:
                    continue
                if n > 0:
                    if a in live:
                        at_live += 1
                        if len(first) < LISTED:
                            first.append(("alloc at a live address", lo + j, n))
                    live[a] = n
                elif n < 0:
                    size = live.pop(a, None)
                    if size is None:
                        unknown += 1
                        unknown_bytes -= n
                    elif size != -n:
                        mismatched += 1
                        if len(first) < LISTED:
                            first.append((f"free of {-n:,} bytes of a {size:,}-byte block", lo + j, n))
        checks[lane_text(key)]["pairing"] = {
            "frees_of_unknown": unknown, "frees_of_unknown_bytes": unknown_bytes, "size_mismatches": mismatched,
            "allocs_at_live_address": at_live,
            "first": [{"what": w, "ev_idx": ev_col[int(i if rows is None else rows[i])].as_py(), "bytes": n}
                      for w, i, n in first]}


def check_lines(path, checks: dict) -> list[str]:
    """The warnings of the running-sum check (one per device where it fails)."""
    out = []
    for dev, c in checks.items():
        pair = c.get("pairing") or {}
        if pair.get("size_mismatches") or pair.get("allocs_at_live_address"):
            f = pair["first"][0]
            out.append(f"Warning: {path}: {dev}: {pair['size_mismatches']:,} frees whose size is not their block's and "
                       f"{pair['allocs_at_live_address']:,} allocations at an address still live (first: {f['what']}, "
                       f"Ev Idx {f['ev_idx']}): events are missing, or Bytes is not the block's")
        if c.get("mismatches"):
            m = c["first_mismatches"][0]
            out.append(f"Warning: {path}: {dev}: at {c['mismatches']:,} of {c['checked']:,} [memory] events the running "
                       f"sum of Bytes differs from Total Allocated (first: Ev Idx {m['ev_idx']}, ts {m['ts_ns']:,} ns, "
                       f"Bytes {m['bytes']:,}, Total Allocated {m['total_allocated_bytes']:,}, expected "
                       f"{m['expected_bytes']:,}): events are missing or the totals are another allocator's")
    return out


def lane(read: MemoryRead, device_id: np.ndarray) -> np.ndarray:
    """The ``device`` of the common table: the Device Id, or rank x LANE_STRIDE + Device Id in a multi-node
    run (the world is larger than the devices one trace lists, so device ids repeat across ranks)."""
    if read.lanes_multi_node:
        return (read.rank * LANE_STRIDE + device_id).astype(np.int32)
    return device_id.astype(np.int32)


def alloc_batches(read: MemoryRead, columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
    """``ALLOC_EVENTS`` batches of the GPU events of ``read`` (CPU events are kept apart)."""
    from veotrace.schemas import ALLOC_EVENTS
    from veotrace.schemas.base import repeated
    from veotrace.schemas.events import alloc_events_schema

    t = read.table
    gpu = pc_not_cpu(t)
    schema = alloc_events_schema(columns)
    t = t.filter(gpu) if gpu is not None else t
    ops_dict = pa.array(["alloc", "free"], pa.string())
    kinds = np.unique(t.column("device_type").to_numpy()).tolist()  # not a list of every event's type (16 MB at 2M)
    kind_dict = pa.array([device_name(k) for k in kinds], pa.string())
    for start in range(0, t.num_rows, BATCH_ROWS):
        part = t.slice(start, BATCH_ROWS)
        n = part.num_rows
        b = part.column("bytes").to_numpy()
        dt = part.column("device_type").to_numpy()
        cols = {
            "ts_ns": part.column("ts_ns").combine_chunks(),
            "seq": part.column("seq").combine_chunks(),
            "op": pa.DictionaryArray.from_arrays(pa.array((b < 0).astype(np.int32)), ops_dict),
            "size_bytes": pa.array(np.abs(b)),
            "address": part.column("address").combine_chunks(),
            "stream": pa.nulls(n, pa.int64()),
            "device": pa.array(lane(read, part.column("device_id").to_numpy())),
            "mem_kind": pa.DictionaryArray.from_arrays(pa.array(np.searchsorted(kinds, dt).astype(np.int32)), kind_dict),
            "source_file": repeated(read.path, n),
        }
        yield pa.RecordBatch.from_arrays([cols[f.name] for f in schema], schema=schema)
    release_unused()  # the batches' and their consumer's temporaries, before the next step
    del ALLOC_EVENTS


def pc_not_cpu(t: pa.Table):
    """The mask of the GPU rows (None when every row is one)."""
    import pyarrow.compute as pc

    mask = pc.not_equal(t.column("device_type"), CPU)
    return None if pc.all(mask).as_py() in (True, None) else mask


# --- the format module's entry points (veotrace.sources dispatches here) ---

def iter_alloc_events(path: Path, *, options: ReadOptions, report: ReadReport, columns=None,
                      on_progress=None) -> Iterator[pa.RecordBatch]:
    read = cached_read(path, options, report, on_progress=on_progress)
    t = read.table
    gpu = int((t.column("device_type").to_numpy() != CPU).sum()) if t.num_rows else 0
    if not gpu:
        if t.num_rows:
            raise TraceFormatError(f"the trace holds no GPU memory events: its {t.num_rows:,} [memory] events are the "
                                   "CPU's (Device Type 0), which are kept apart from a GPU's numbers", path=path,
                                   hint="'veotrace info FILE' describes them; profile a run on a GPU for the analyses")
        raise TraceFormatError("the trace holds no [memory] events", path=path,
                               hint="Record with torch.profiler.profile(profile_memory=True, ...)")
    yield from alloc_batches(read, columns)


def read_profiler_memory(path: Path, *, options: ReadOptions, report: ReadReport) -> pa.Table:
    read = cached_read(path, options, report)
    return read.table.replace_schema_metadata({**KINETO_MEMORY.metadata, **_meta(read)})


def _meta(read: MemoryRead) -> dict:
    import json

    return {b"veotrace.kineto": json.dumps({"path": read.path, "rank": read.rank, "world_size": read.world_size,
                                           "devices": read.devices, "cut": read.cut, "checks": read.checks,
                                           "device_memory": {str(k): v for k, v in device_memory(read.head).items()},
                                           "bad_utf8": read.bad_utf8, "schema_version": read.head.get("schemaVersion"),
                                           "with_stack": read.head.get("with_stack"),
                                           "profile_memory": read.head.get("profile_memory"),
                                           "lanes_multi_node": read.lanes_multi_node}).encode()}


def read_meta(table: pa.Table) -> list[dict]:
    """The read notes ``read_profiler_memory`` put on its table (one per file; several after a concat)."""
    import json

    meta = table.schema.metadata or {}
    raw = meta.get(b"veotrace.kineto")
    return [json.loads(raw)] if raw else []


_CACHE: dict = {}


def _cache_key(path, options: ReadOptions, context: bool) -> tuple | None:
    try:
        st = Path(path).stat()
        return (str(path), st.st_size, st.st_mtime_ns, options.skip_bad_rows, context)
    except (OSError, TypeError):
        return None


def is_cached(path, options: ReadOptions, *, context: bool = False) -> bool:
    """Whether :func:`cached_read` has ``path`` read already in this process (a read elsewhere would redo it)."""
    key = _cache_key(path, options, context)
    return key is not None and (key in _CACHE or (not context and (*key[:4], True) in _CACHE))


def cached_read(path: Path, options: ReadOptions, report: ReadReport, *, context: bool = False,
                on_progress=None) -> MemoryRead:
    """``read_memory`` once per (file, size, mtime, options) within a process: info, the analyses and the
    report read a trace's memory events many times; its warnings go to every report that asks."""
    key = _cache_key(path, options, context)
    hit = _CACHE.get(key) if key is not None else None
    if hit is None and key is not None and not context:  # a read with context serves one without
        hit = _CACHE.get((*key[:4], True))
    if hit is not None:
        read, warnings, skipped = hit
        for w in warnings:
            if w not in report.warnings:
                report.warnings.append(w)
        for p, ln, why in skipped:
            report.skip_row(p, ln, why)
        return read
    mine = ReadReport()
    from veotrace.sources.kineto.converted import is_side, read_side

    if is_side(path):  # a trace ``convert`` wrote to Parquet: read back as the trace, its warnings again
        fields, mine.warnings[:] = read_side(path, context=context)
        read = MemoryRead(**fields)
    else:
        read = read_memory(path, options=options, report=mine, context=context, on_progress=on_progress)
    report.merge(mine)
    if key is not None:
        if len(_CACHE) >= 4:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = (read, list(mine.warnings), list(mine.first_skipped) * 0 + list(mine.first_skipped))
    return read


def _context(table: pa.Table, cols: dict, path, rank, *, gpu_keys: set | None = None) -> tuple[pa.Table, tuple]:
    """For each memory event, the ids of the innermost cpu_op, python_function and ``nn.Module`` frame enclosing
    it on its thread and of the GPU span running on its device then, and the ops table of the spans they point
    at. ``cols``: span columns (kind, name, ts, dur, pid, tid, dev, stream as arrays, ``names`` the names the
    name codes index; optionally ``seq``, the file order), as :func:`enclosing_spans` gives those that can
    answer, with ``gpu_keys`` the GPU device keys of every GPU span of the trace (a key whose spans were
    all left out still answers "none" for its events, as all its spans would)."""
    from veotrace.schemas.base import repeated

    names = cols["names"]
    # by start, the longer (the enclosing) first, then file order; only the columns the search reads are
    # sorted here, the others are taken for the spans the events point at
    keys = (-cols["dur"], cols["ts"]) if "seq" not in cols else (cols["seq"], -cols["dur"], cols["ts"])
    order = np.lexsort(keys)
    del keys
    kind, start, dur = cols["kind"][order], cols["ts"][order], cols["dur"][order]
    tid_s, dev = cols["tid"][order], cols["dev"][order]
    m = table.num_rows
    ts = table.column("ts_ns").to_numpy()
    tid = table.column("tid").fill_null(NONE).to_numpy()
    did = table.column("device_id").to_numpy()
    dtype = table.column("device_type").to_numpy()
    found = [np.full(m, -1, np.int64) for _ in range(4)]
    k = {c: i for i, c in enumerate(SPAN_KINDS)}
    is_op = np.isin(kind, [k[c] for c in OP_KINDS])
    is_frame = kind == k["python_function"]
    module_name = np.array([x.startswith("nn.Module: ") for x in names] or [False], bool)
    is_module = is_frame & module_name[cols["name"]][order] if order.size else is_frame
    is_gpu = np.isin(kind, [k[c] for c in GPU_KINDS])
    if gpu_keys is None:
        gpu_keys = set(np.unique(dev[is_gpu]).tolist())
    gpu_devices = set(gpu_keys) - {NONE}
    lone = next(iter(gpu_devices)) if len(gpu_devices) == 1 else None
    for which, members, key_col in ((0, is_op, tid_s), (1, is_frame, tid_s), (2, is_gpu, dev), (3, is_module, tid_s)):
        keys = sorted(gpu_keys) if which == 2 else np.unique(key_col[members]).tolist()
        for key in keys:
            idx = np.flatnonzero(members & (key_col == key))
            if which != 2:
                rows = np.flatnonzero(tid == key) if key != NONE else idx[:0]
            else:  # the GPU's own id; a ROCm trace may number its GPU spans otherwise: the lone GPU then
                same = (dtype != CPU) & (did == key)
                if lone is not None and not same.any():
                    same = dtype != CPU
                rows = np.flatnonzero(same)
            if not rows.size:
                continue
            if not idx.size:  # a device whose spans all start after its events (left out): none holds them
                found[which][rows] = -1
                continue
            found[which][rows] = _innermost(start[idx], start[idx] + dur[idx], idx, ts[rows], nested=which != 2)
    used = np.unique(np.concatenate(found))
    used = used[used >= 0]  # the ops table holds the spans the events point at, in the spans' order
    ids = tuple(np.searchsorted(used, f) for f in found)
    n = used.size
    del kind, start, dur, tid_s, dev, is_op, is_frame, is_module, is_gpu
    at = order[used]
    kind, name, start, dur, pid, tid_s, dev, stream = (cols[c][at] for c in ("kind", "name", "ts", "dur", "pid", "tid",
                                                                            "dev", "stream"))
    kinds = pa.array(list(SPAN_KINDS), pa.string())
    ops = pa.Table.from_arrays([
        _masked(np.arange(n, dtype=np.int64), None, pa.int64()),
        pa.DictionaryArray.from_arrays(pa.array(kind.astype(np.int32)), kinds),
        pa.DictionaryArray.from_arrays(pa.array(name), pa.array(names, pa.string())),
        _masked(start, None, pa.int64()), _masked(dur, None, pa.int64()),
        _masked(pid, NONE, pa.int64()), _masked(tid_s, NONE, pa.int64()),
        _masked(np.where(dev == NONE, -1, dev).astype(np.int32), -1, pa.int32()), _masked(stream, NONE, pa.int64()),
        _nulls(n, pa.int32()) if rank is None else _masked(np.full(n, rank, np.int32), None, pa.int32()),
        repeated(str(path), n)], schema=KINETO_OPS)
    out = tuple(pa.array(i, pa.int64(), mask=f < 0) for i, f in zip(ids, found))
    return ops, out


def _innermost(starts: np.ndarray, ends: np.ndarray, ids: np.ndarray, t: np.ndarray, *, nested: bool,
               look_back: int = LOOK_BACK) -> np.ndarray:
    """For each time ``t``, the id of the latest-starting span (sorted by start) that holds it, -1 for none.
    Nested spans (one thread's ops): the latest-starting that holds it; GPU spans: looking back over the last
    ``look_back`` only (every time at once, one array step per span looked at)."""
    res = np.full(t.size, -1, np.int64)
    at = np.searchsorted(starts, t, side="right") - 1
    if nested:  # the latest-starting span (by ``at``) whose end reaches the time: a stack of the spans no
        # later one outlasts (ends falling from bottom to top), grown span by span up to each time's ``at``
        # (times in ``at`` order) and searched by bisection: O(log) a time where walking up the parents of
        # spans that overlap without nesting could take as many steps as the trace has spans
        from bisect import bisect_right

        order = np.argsort(at, kind="stable")
        stack: list[int] = []
        neg_ends: list[int] = []  # -end of each stacked span: rising, for bisect
        p = 0
        chunk: list[int] = []
        base = 0
        for q, a, tq in zip(order.tolist(), at[order].tolist(), t[order].tolist()):
            while p <= a:
                if p - base >= len(chunk):
                    base = p
                    chunk = ends[p:p + (1 << 16)].tolist()
                e = chunk[p - base]
                while neg_ends and -neg_ends[-1] <= e:
                    neg_ends.pop()
                    stack.pop()
                stack.append(p)
                neg_ends.append(-e)
                p += 1
            k = bisect_right(neg_ends, -tq) - 1
            if k >= 0:
                res[q] = ids[stack[k]]
        return res
    left = np.flatnonzero(at >= 0)
    for k in range(look_back):  # the k-th latest to start by then, for those not answered yet
        j = at[left] - k
        left = left[j >= 0]
        j = j[j >= 0]
        holds = ends[j] >= t[left]
        res[left[holds]] = ids[j[holds]]
        left = left[~holds]
        if not left.size:
            break
    return res


def read_ops(path: Path, *, options: ReadOptions = ReadOptions(), report: ReadReport | None = None) -> pa.Table:
    """The ``KINETO_OPS`` spans of ``path`` (a full scan)."""
    report = report if report is not None else ReadReport()
    return cached_read(path, options, report, context=True).ops
