"""Reader support: a restricted unpickler that builds only plain containers and scalars.

PyTorch memory snapshots are pickles, and ``pickle.load`` on an untrusted pickle can run any code.
Snapshots hold only dicts, lists, tuples, str, bytes, int, float, bool and None (FORMATS.md C.1), so
every opcode that would name a class or callable (GLOBAL, STACK_GLOBAL, INST, OBJ, the copyreg
extension opcodes) is refused before anything is called: ``find_class`` is the only way to reach a
callable, and here it always raises. ``REDUCE``/``BUILD``/``NEWOBJ`` need such a callable first.

Before unpickling, the opcode stream is walked (``_picklescan``, or ``pickletools`` without the C
build) to refuse containers nested deeper than ``limits.MAX_NESTING``: CPython's unpickler hashes
a deeply nested tuple key without a recursion guard and dies with SIGSEGV. Files are read whole, up
to ``limits.max_file_bytes()`` after decompression; large snapshots are streamed instead (``stream``:
the same walk, fed in chunks, and the same errors from ``scan_error``).
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path

from veotrace.errors import TraceFormatError
from veotrace.sources.limits import MAX_NESTING, MAX_PICKLE_INT_BYTES, read_bounded

try:
    from veotrace.sources.snapshots import _picklescan
except ImportError:  # built without a C compiler: the pure-Python walk below
    _picklescan = None

#: Pickle protocols a snapshot may use (4 from ``_dump_snapshot`` before Python 3.14, 5 after).
PROTOCOLS = (2, 3, 4, 5)


class _RefusedGlobal(Exception):
    def __init__(self, module: str, name: str) -> None:
        super().__init__(f"{module}.{name}")
        self.module = module
        self.name = name


class _PlainUnpickler(pickle.Unpickler):
    """Unpickler whose ``find_class`` refuses everything, so no object but plain data is built."""

    def find_class(self, module: str, name: str):
        raise _RefusedGlobal(module, name)

    def persistent_load(self, pid):
        raise _RefusedGlobal("<persistent id>", repr(pid)[:40])


class CorruptPickle(TraceFormatError):
    """A pickle cut short or corrupt: one the unpickler itself cannot read to its STOP. A snapshot's trace
    entries before the point are kept under ``--skip-bad-rows`` (``snapshots.large.salvage``)."""


def loads_plain(data: bytes, *, path: str | Path | None = None) -> object:
    """Unpickle ``data`` allowing only plain containers and scalars.

    The opcode walk (:func:`nesting`) refuses first, without unpickling: what names a class or callable, a
    buffer, a wide integer, deep nesting, a far memo index, a FRAME that lies, and data cut short (so that
    a length claimed past the end, which the unpickler would allocate, never is).

    Raises:
        TraceFormatError: the pickle names a class or callable (nothing is executed), or is hostile.
        CorruptPickle: it is cut short or corrupt.
    """
    depth, offset, stopped = nesting(data)
    if depth < 0:
        raise scan_error(depth, offset, path, data=data)
    if stopped == 2:
        raise cut_short(len(data), offset, path)
    try:
        return _PlainUnpickler(io.BytesIO(data)).load()
    except _RefusedGlobal as exc:
        raise _refused(str(exc), path) from None
    except (EOFError, pickle.UnpicklingError, ValueError, IndexError, KeyError, TypeError, AttributeError,
            OverflowError, MemoryError, UnicodeDecodeError, RecursionError) as exc:
        # Truncated files end in EOFError or "pickle data was truncated"; corrupt ones in the rest
        # (AttributeError: APPEND on a dict, 'add' on a list: opcodes applied to the wrong container).
        detail = str(exc) or type(exc).__name__
        raise CorruptPickle(f"the pickle is truncated or corrupt ({detail[:200]})", path=path,
                            hint="Re-copy the file, or dump the snapshot again") from None


def cut_short(size: int, end: int, path: str | Path | None, after: str = "") -> CorruptPickle:
    """The error of a pickle whose ``size`` bytes end before its STOP (the last whole opcode ends at ``end``),
    from either read of a snapshot; ``after`` adds what was read before it."""
    return CorruptPickle(f"the snapshot is cut short: its {size:,} bytes end before the pickle's STOP (the last complete "
                         f"opcode ends at byte {end:,}){after}", path=path,
                         hint="Re-copy the file (a partial download?), or --skip-bad-rows to use the entries before the cut")


def scan_error(depth: int, offset: int, path: str | Path | None, window: bytes = b"", *,
               data: bytes | None = None) -> TraceFormatError:
    """The error for a negative result of the opcode walk (:func:`nesting`, or the chunked walk of the
    streaming read, which passes the bytes from ``offset`` as ``window`` instead of the whole ``data``)."""
    hint = "Only load pickles from torch.cuda.memory._dump_snapshot() or memory_snapshot()"
    if depth == -2:
        return _refused(_named_at(data, offset) if data is not None else _named_in(window), path, offset)
    if depth == -6:
        return TraceFormatError(f"the pickle is corrupt (a memo index far out of sequence at byte {offset})",
                                path=path, hint="Re-copy the file, or dump the snapshot again")
    if depth == -9:
        return TraceFormatError(f"the pickle is corrupt: the FRAME at byte {offset:,} gives a length that does not end "
                                "where an opcode ends (pickle itself would read its bytes differently)", path=path,
                                hint="Re-copy the file, or dump the snapshot again")
    if depth == -5:
        return TraceFormatError(f"the pickle holds a bytearray or an out-of-band buffer (at byte {offset}), which a "
                                "memory snapshot never does", path=path, hint=hint)
    if depth == -7:
        return TraceFormatError(f"the pickle holds an integer wider than {MAX_PICKLE_INT_BYTES * 8} bits (at byte "
                                f"{offset}); a memory snapshot's numbers fit in 64 bits", path=path, hint=hint)
    return TraceFormatError(
        f"the pickle nests containers more than {MAX_NESTING} deep (at byte {offset}); a memory "
        "snapshot nests about 6 deep, and unpickling this one could crash the interpreter", path=path, hint=hint)


def _named_in(window: bytes) -> str:
    """What the opcode at the start of ``window`` names, from its own bytes (GLOBAL and INST carry it;
    STACK_GLOBAL's strings came before it, so it is named by its opcode)."""
    import pickletools

    op = window[:1]
    if op in (b"c", b"i"):
        parts = window[1:].split(b"\n")[:2]
        return ".".join(x.decode("latin-1") for x in parts)[:120]
    names = {o.code.encode("latin-1"): o.name for o in pickletools.opcodes}
    return f"<{names.get(op, 'unknown')} opcode>"


def _refused(name: str, path: str | Path | None, offset: int | None = None) -> TraceFormatError:
    at = "" if offset is None else f" at byte {offset:,}"
    return TraceFormatError(
        f"refused to load a pickle that names the class or callable '{name}'{at}; a memory snapshot "
        "holds only plain data, and loading this one could run code",
        path=path,
        hint="Only load pickles from torch.cuda.memory._dump_snapshot() or memory_snapshot()",
    )


def nesting(data: bytes, limit: int = MAX_NESTING, int_bytes: int = MAX_PICKLE_INT_BYTES) -> tuple[int, int, int]:
    """The opcode walk of a pickle, without unpickling it: (deepest container nesting, offset the walk
    ended at, how: 1 after STOP, 2 the data ends inside an opcode or before STOP (cut short), 0 at an
    opcode the unpickler fails at); or, with the offset of the opcode and 0, -1 when deeper than ``limit``,
    -2 at the first opcode that names a class or callable, -5 at a bytearray or out-of-band buffer, -6 at
    a memo index far out of sequence, -7 at an integer wider than ``int_bytes`` bytes, -9 at a FRAME whose
    length does not end with an opcode."""
    if _picklescan is not None:
        return _picklescan.depth(data, limit, int_bytes)
    return _nesting_py(data, limit, int_bytes)


#: Opcodes that reach a class or callable (-2), and the protocol 5 buffer opcodes (-5), as _picklescan.c lists them.
_CALLABLE_OPS = frozenset(b"c\x93ioRb\x81\x92\x82\x83\x84PQ")
_BUFFER_OPS = frozenset(b"\x96\x97\x98")
_MEMO_MAX, _MEMO_SLACK = 1 << 26, 4096  # as MEMO_MAX and MEMO_SLACK in _picklescan.c
#: The length-prefixed opcodes: (bytes of the length, whether it is signed): LONG1 SHORT_BINSTRING SHORT_BINUNICODE
#: SHORT_BINBYTES, LONG4 BINSTRING BINUNICODE BINBYTES, BINUNICODE8 BINBYTES8.
_COUNTED = {0x8A: (1, False), 0x55: (1, False), 0x8C: (1, False), 0x43: (1, False), 0x8B: (4, True), 0x54: (4, True),
            0x58: (4, False), 0x42: (4, False), 0x8D: (8, False), 0x8E: (8, False)}
#: The memo opcodes' index argument: bytes of a little-endian integer, or None for decimal text (PUT, GET).
_MEMO_ARG = {0x71: 1, 0x72: 4, 0x70: None, 0x68: 1, 0x6A: 4, 0x67: None}


def _nesting_py(data: bytes, limit: int, int_bytes: int = MAX_PICKLE_INT_BYTES) -> tuple[int, int, int]:
    """``_picklescan.depth`` in Python, opcode for opcode (see its comment): the same result, offset and stop."""
    n_data = len(data)
    stack: list[int] = []
    marks: list[int] = []
    memo: list[int] = []
    deepest = 0
    frame_at = frame_end = -1
    pos = 0
    digits = int_bytes * 8 * 30103 // 100000 + 4

    def le(at: int, k: int) -> int:
        return int.from_bytes(data[at:at + k], "little")

    def text_number(at: int, nl: int) -> int:
        head = data[at:nl].lstrip()
        j = 0
        while j < len(head) and head[j:j + 1].isdigit():
            j += 1
        return int(head[:j]) if j else 0

    def memo_arg(at: int, width: int | None) -> tuple[int, int] | None:
        """A memo index at ``at`` and where the opcode ends: ``width`` bytes little-endian, or decimal text to a
        newline (None); None when the data ends inside it."""
        if width is not None:
            return None if n_data - at < width else (le(at, width), at + width)
        nl = data.find(b"\n", at)
        return None if nl < 0 else (text_number(at, nl), nl + 1)

    def depth(x: int) -> bool:
        nonlocal deepest
        deepest = max(deepest, x)
        return x > limit

    while pos < n_data:
        op_at = pos
        if frame_end >= 0:
            if op_at == frame_end:
                frame_end = -1
            elif op_at > frame_end:
                return -9, frame_at, 0
        op = data[pos]
        p = pos + 1
        if op in (0x4A, 0x4B, 0x4D, 0x47):  # BININT BININT1 BININT2 BINFLOAT
            k = {0x4A: 4, 0x4B: 1, 0x4D: 2, 0x47: 8}[op]
            if n_data - p < k:
                return deepest, op_at, 2
            pos = p + k
            stack.append(0)
        elif op in (0x4E, 0x88, 0x89):
            pos = p
            stack.append(0)
        elif op in _BUFFER_OPS:
            return -5, op_at, 0
        elif op in _COUNTED:  # LONG1/4, strings and bytes: a length of ``width`` bytes, then that many bytes
            width, signed = _COUNTED[op]
            if n_data - p < width:
                return deepest, op_at, 2
            k = int.from_bytes(data[p:p + width], "little", signed=signed)
            if not 0 <= k <= 1 << 62:  # a negative length (LONG4, BINSTRING): the unpickler refuses it
                return deepest, op_at, 0
            if op in (0x8A, 0x8B) and k > int_bytes:
                return -7, op_at, 0
            if n_data - p < width + k:
                return deepest, op_at, 2
            pos = p + width + k
            stack.append(0)
        elif op in b"ILFSV":  # newline-terminated text
            nl = data.find(b"\n", p)
            if nl < 0:
                return deepest, op_at, 2
            if op in b"IL" and nl - p > digits:
                return -7, op_at, 0
            pos = nl + 1
            stack.append(0)
        elif op == 0x80:  # PROTO
            if n_data - p < 1:
                return deepest, op_at, 2
            pos = p + 1
        elif op == 0x95:  # FRAME
            if n_data - p < 8:
                return deepest, op_at, 2
            k = le(p, 8)
            pos = p + 8
            if frame_end >= 0 or k > 1 << 62:
                return -9, op_at, 0
            if k:
                frame_at, frame_end = op_at, pos + k
        elif op == 0x2E:  # STOP
            if frame_end >= 0 and frame_end != p:
                return -9, frame_at, 0
            return deepest, p, 1
        elif op == 0x28:  # MARK
            marks.append(len(stack))
            pos = p
        elif op == 0x32:  # DUP
            if not stack:
                return deepest, op_at, 0
            stack.append(stack[-1])
            pos = p
        elif op == 0x30:  # POP
            if marks and marks[-1] == len(stack):
                marks.pop()
            elif stack:
                stack.pop()
            else:
                return deepest, op_at, 0
            pos = p
        elif op == 0x31:  # POP_MARK
            if not marks:
                return deepest, op_at, 0
            del stack[marks.pop():]
            pos = p
        elif op in (0x7D, 0x5D, 0x29, 0x8F):  # EMPTY_DICT EMPTY_LIST EMPTY_TUPLE EMPTY_SET
            stack.append(1)
            pos = p
            if depth(1):
                return -1, op_at, 0
        elif op == 0x61:  # APPEND
            if len(stack) < 2:
                return deepest, op_at, 0
            x = stack.pop() + 1
            stack[-1] = max(stack[-1], x)
            pos = p
            if depth(stack[-1]):
                return -1, op_at, 0
        elif op == 0x73:  # SETITEM
            if len(stack) < 3:
                return deepest, op_at, 0
            x = max(stack[-1], stack[-2]) + 1
            del stack[-2:]
            stack[-1] = max(stack[-1], x)
            pos = p
            if depth(stack[-1]):
                return -1, op_at, 0
        elif op in (0x65, 0x75, 0x90):  # APPENDS SETITEMS ADDITEMS
            if not marks or not 1 <= marks[-1] <= len(stack):
                return deepest, op_at, 0
            b = marks.pop()
            m = max(stack[b:], default=0)
            del stack[b:]
            stack[-1] = max(stack[-1], m + 1)
            pos = p
            if depth(stack[-1]):
                return -1, op_at, 0
        elif op in (0x6C, 0x74, 0x64, 0x91):  # LIST TUPLE DICT FROZENSET
            if not marks or marks[-1] > len(stack):
                return deepest, op_at, 0
            b = marks.pop()
            m = max(stack[b:], default=0)
            del stack[b:]
            stack.append(m + 1)
            pos = p
            if depth(m + 1):
                return -1, op_at, 0
        elif op in (0x85, 0x86, 0x87):  # TUPLE1 TUPLE2 TUPLE3
            k = op - 0x84
            if len(stack) < k:
                return deepest, op_at, 0
            m = max(stack[-k:])
            del stack[-k:]
            stack.append(m + 1)
            pos = p
            if depth(m + 1):
                return -1, op_at, 0
        elif op in (0x94, 0x71, 0x72, 0x70):  # MEMOIZE BINPUT LONG_BINPUT PUT
            arg = (len(memo), p) if op == 0x94 else memo_arg(p, _MEMO_ARG[op])
            if arg is None:
                return deepest, op_at, 2
            k, pos = arg
            if not stack:
                return deepest, op_at, 0
            if k > len(memo) + _MEMO_SLACK or k > _MEMO_MAX:
                return -6, op_at, 0
            memo.extend([-1] * (k + 1 - len(memo)))
            memo[k] = min(stack[-1], 127)
        elif op in (0x68, 0x6A, 0x67):  # BINGET LONG_BINGET GET
            arg = memo_arg(p, _MEMO_ARG[op])
            if arg is None:
                return deepest, op_at, 2
            k, pos = arg
            if k >= len(memo) or memo[k] < 0:
                return deepest, op_at, 0
            stack.append(memo[k])
        elif op in _CALLABLE_OPS:
            return -2, op_at, 0
        else:
            return deepest, op_at, 0  # no such opcode: the unpickler refuses it here too
    return deepest, pos, 2  # the data ends between opcodes, before STOP


def _named_at(data: bytes, offset: int) -> str:
    """What the opcode at ``offset`` names (GLOBAL's argument, STACK_GLOBAL's two strings), for messages."""
    import pickletools

    strings: list[str] = []
    try:
        for op, arg, pos in pickletools.genops(data):
            if isinstance(arg, str):
                strings.append(arg)
            if pos == offset:
                if op.name in ("GLOBAL", "INST"):
                    return str(arg).replace(" ", ".")
                if op.name == "STACK_GLOBAL" and len(strings) >= 2:
                    return f"{strings[-2]}.{strings[-1]}"
                return f"<{op.name} opcode>"
    except (ValueError, IndexError, KeyError, TypeError):
        pass
    return "<unknown>"


def load_plain(path: Path) -> object:
    """Read ``path`` (gzip/zstd decompressed by content) and unpickle it with :func:`loads_plain`."""
    from veotrace.sources.base import open_decompressed

    stream, _raw = open_decompressed(path)
    try:
        data = read_bounded(path, stream, "the snapshot", head_check=lambda head: pickle_head(head, path))
    finally:
        stream.close()
    return loads_plain(data, path=path)


def pickle_head(head: bytes, path: str | Path | None = None) -> None:
    """Refuse what cannot be a snapshot pickle from its first bytes (``limits.HEAD_BYTES``), before the
    rest is decompressed: no PROTO 2-5 opcode first, or an opcode no pickle has within them."""
    import pickletools

    if len(head) < 2 or head[0] != 0x80 or head[1] not in PROTOCOLS:
        raise TraceFormatError(
            "not a pickle (protocol 2-5)", path=path, hint="Use --format-hint to read it as another format"
        )
    stream = io.BytesIO(head)
    at = 0
    try:
        for _op, _arg, _pos in pickletools.genops(stream):
            at = stream.tell()
    except ValueError:
        if head[at:at + 1] and head[at] not in _OPCODE_BYTES:  # not a cut-off argument: an opcode that does not exist
            raise TraceFormatError(f"not a pickle: byte {at:,} holds {head[at]:#04x}, which is no pickle opcode",
                                   path=path, hint="Re-copy the file, or dump the snapshot again") from None


_OPCODE_BYTES = frozenset(op.code.encode("latin-1")[0] for op in __import__("pickletools").opcodes)
