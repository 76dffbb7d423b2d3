"""Reader support: a restricted unpickler that builds only plain containers and scalars.

PyTorch memory snapshots are pickles, and ``pickle.load`` on an untrusted pickle can run any code.
Snapshots hold only dicts, lists, tuples, str, bytes, int, float, bool and None (FORMATS.md C.1), so
every opcode that would name a class or callable (GLOBAL, STACK_GLOBAL, INST, OBJ, the copyreg
extension opcodes) is refused before anything is called: ``find_class`` is the only way to reach a
callable, and here it always raises. ``REDUCE``/``BUILD``/``NEWOBJ`` need such a callable first.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path

from veotrace.errors import TraceFormatError

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
    try:
        return _PlainUnpickler(io.BytesIO(data)).load()
    except _RefusedGlobal as exc:
        raise TraceFormatError(
            f"refused to load a pickle that names the class or callable '{exc}'; a memory snapshot "
            "holds only plain data, and loading this one could run code",
            path=path,
            hint="Only load pickles from torch.cuda.memory._dump_snapshot() or memory_snapshot()",
        ) from None
    except (EOFError, pickle.UnpicklingError, ValueError, IndexError, KeyError, TypeError,
            OverflowError, MemoryError, UnicodeDecodeError) as exc:
        # Truncated files end in EOFError or "pickle data was truncated"; corrupt ones in the rest.
        detail = str(exc) or type(exc).__name__
        raise TraceFormatError(
            f"the pickle is truncated or corrupt ({detail})",
            path=path,
            hint="Re-copy the file, or dump the snapshot again",
        ) from None


def load_plain(path: Path) -> object:
    """Read ``path`` (gzip/zstd decompressed by content) and unpickle it with :func:`loads_plain`."""
    from veotrace.sources.base import open_decompressed

    stream, _raw = open_decompressed(path)
    try:
        data = stream.read()
    except OSError as exc:
        raise TraceFormatError(f"cannot decompress the file ({exc})", path=path) from None
    finally:
        stream.close()
    data = bytes(data)
    if len(data) < 2 or data[0] != 0x80 or data[1] not in PROTOCOLS:
        raise TraceFormatError(
            "not a pickle (protocol 2-5)", path=path, hint="Use --format-hint to read it as another format"
        )
    return loads_plain(data, path=path)
