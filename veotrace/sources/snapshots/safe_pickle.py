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


def loads_plain(data: bytes, *, path: str | Path | None = None) -> object:
    """Unpickle ``data`` allowing only plain containers and scalars.

    Raises:
        TraceFormatError: the pickle names a class or callable (nothing is executed), or is
            truncated or corrupt.
    """
    depth, offset = nesting(data)
    if depth < 0:
        raise scan_error(depth, offset, path, data=data)
    try:
        return _PlainUnpickler(io.BytesIO(data)).load()
    except _RefusedGlobal as exc:
        raise _refused(str(exc), path) from None
    except (EOFError, pickle.UnpicklingError, ValueError, IndexError, KeyError, TypeError, AttributeError,
            OverflowError, MemoryError, UnicodeDecodeError, RecursionError) as exc:
        # Truncated files end in EOFError or "pickle data was truncated"; corrupt ones in the rest
        # (AttributeError: APPEND on a dict, 'add' on a list: opcodes applied to the wrong container).
        detail = str(exc) or type(exc).__name__
        raise TraceFormatError(
            f"the pickle is truncated or corrupt ({detail[:200]})",
            path=path,
            hint="Re-copy the file, or dump the snapshot again",
        ) from None


def scan_error(depth: int, offset: int, path: str | Path | None, window: bytes = b"", *,
               data: bytes | None = None) -> TraceFormatError:
    """The error for a negative result of the opcode walk (:func:`nesting`, or the chunked walk of the
    streaming read, which passes the bytes from ``offset`` as ``window`` instead of the whole ``data``)."""
    hint = "Only load pickles from torch.cuda.memory._dump_snapshot() or memory_snapshot()"
    if depth == -2:
        if data is not None:
            return _refused(_named_at(data, offset), path)
        return _refused(_named_in(window), path, offset)
    if depth == -6:
        return TraceFormatError(f"the pickle is corrupt (a memo index far out of sequence at byte {offset})",
                                path=path, hint="Re-copy the file, or dump the snapshot again")
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


def nesting(data: bytes, limit: int = MAX_NESTING, int_bytes: int = MAX_PICKLE_INT_BYTES) -> tuple[int, int]:
    """(deepest container nesting, -1) of a pickle without unpickling it; (-1, offset) when deeper
    than ``limit``, (-2, offset) at the first opcode that names a class or callable, (-5, offset) at a
    bytearray or out-of-band buffer, (-6, offset) at a memo index far out of sequence, (-7, offset) at
    an integer wider than ``int_bytes`` bytes."""
    if _picklescan is not None:
        return _picklescan.depth(data, limit, int_bytes)
    return _nesting_py(data, limit, int_bytes)


_SCALARS = frozenset({"BININT", "BININT1", "BININT2", "BINFLOAT", "NONE", "NEWTRUE", "NEWFALSE",
                      "LONG1", "LONG4", "SHORT_BINSTRING", "BINSTRING", "SHORT_BINUNICODE", "BINUNICODE",
                      "BINUNICODE8", "SHORT_BINBYTES", "BINBYTES", "BINBYTES8", "INT", "LONG",
                      "FLOAT", "STRING", "UNICODE"})
_CALLABLES = frozenset({"GLOBAL", "STACK_GLOBAL", "INST", "OBJ", "REDUCE", "BUILD", "NEWOBJ", "NEWOBJ_EX",
                        "EXT1", "EXT2", "EXT4", "PERSID", "BINPERSID"})


def _wide_int(data: bytes, pos: int, int_bytes: int) -> bool:
    """Whether the opcode at ``pos`` is an integer wider than ``int_bytes`` (as ``_picklescan.c`` decides:
    LONG1/LONG4 by their byte count, INT/LONG text by its digits), judged from the raw bytes."""
    op = data[pos:pos + 1]
    if op == b"\x8a":
        return len(data) > pos + 1 and data[pos + 1] > int_bytes
    if op == b"\x8b":
        return len(data) >= pos + 5 and int.from_bytes(data[pos + 1:pos + 5], "little", signed=True) > int_bytes
    if op in (b"I", b"L"):
        end = data.find(b"\n", pos + 1)
        return end >= 0 and end - (pos + 1) > int_bytes * 8 * 30103 // 100000 + 4
    return False


def _nesting_py(data: bytes, limit: int, int_bytes: int = MAX_PICKLE_INT_BYTES) -> tuple[int, int]:
    """The same walk as ``_picklescan.c`` (see its comment), with ``pickletools.genops``."""
    import pickletools

    stack: list[int] = []
    marks: list[int] = []
    memo: dict[int, int] = {}
    deepest = 0
    stream = io.BytesIO(data)
    at = 0  # where the next opcode starts: genops fails inside an opcode before yielding it
    try:
        for op, arg, pos in pickletools.genops(stream):
            name = op.name
            if _wide_int(data, pos, int_bytes):
                return -7, pos
            at = stream.tell()
            if name in _SCALARS:
                stack.append(0)
            elif name in _CALLABLES:
                return -2, pos
            elif name in ("BYTEARRAY8", "NEXT_BUFFER", "READONLY_BUFFER"):
                return -5, pos
            elif name == "MARK":
                marks.append(len(stack))
            elif name == "DUP":
                stack.append(stack[-1])
            elif name == "POP":
                if marks and marks[-1] == len(stack):
                    marks.pop()
                else:
                    stack.pop()
            elif name == "POP_MARK":
                del stack[marks.pop():]
            elif name in ("EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "EMPTY_SET"):
                stack.append(1)
            elif name == "APPEND":
                stack[-2] = max(stack[-2], stack.pop() + 1)
            elif name == "SETITEM":
                value, key = stack.pop(), stack.pop()
                stack[-1] = max(stack[-1], max(key, value) + 1)
            elif name in ("APPENDS", "SETITEMS", "ADDITEMS"):
                base = marks.pop()
                items = stack[base:]
                del stack[base:]
                stack[-1] = max(stack[-1], max(items, default=0) + 1)
            elif name in ("LIST", "TUPLE", "DICT", "FROZENSET"):
                base = marks.pop()
                items = stack[base:]
                del stack[base:]
                stack.append(max(items, default=0) + 1)
            elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
                k = int(name[-1])
                items = stack[-k:]
                del stack[-k:]
                stack.append(max(items) + 1)
            elif name in ("MEMOIZE", "PUT", "BINPUT", "LONG_BINPUT"):
                index = len(memo) if name == "MEMOIZE" else int(arg)
                if index > len(memo) + 4096 or index > 1 << 26:  # see MEMO_SLACK in _picklescan.c
                    return -6, pos
                memo[index] = stack[-1]
            elif name in ("GET", "BINGET", "LONG_BINGET"):
                stack.append(memo[int(arg)])
            elif name == "STOP":
                break
            if stack and stack[-1] > deepest:
                deepest = stack[-1]
                if deepest > limit:
                    return -1, pos
    except (ValueError, IndexError, KeyError, TypeError):
        if _wide_int(data, at, int_bytes):  # INT/LONG text past Python's digit bound fails in genops itself
            return -7, at
        # corrupt from here on: the unpickler fails at this same point
    return deepest, -1


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
