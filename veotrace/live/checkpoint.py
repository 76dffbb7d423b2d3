"""Live layer: the checkpoint file read back as untrusted input, every field checked against its schema before use.

A ``--state`` file is rewritten by the follower, but it is a file on disk: copied, edited, truncated or
crafted, it must not resume a run from nonsense (a negative count, a window before the origin, live blocks
out of address order) nor end in a traceback. ``read`` parses it with the bounds of every input (its size
within ``VEOTRACE_MAX_FILE_BYTES``, UTF-8, JSON without NaN/Infinity or duplicate keys, nested at most
``limits.MAX_NESTING`` deep) and ``check`` walks it against a schema built from the small checkers below
(types, ranges, lengths, base64 arrays of whole items), naming the first bad field by its path:
``windows.replay.states.0.size``. Each analysis' open windows declare their schema beside ``to_state``
(``STATE``); the tail's generations, the identity and the gate's verdicts are here.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Callable
from pathlib import Path

from veotrace.errors import VeotraceError
from veotrace.sources.limits import MAX_NESTING, max_file_bytes

INT64 = 1 << 63
#: A check: (value, where) -> the value as used, or raises ``Bad`` naming what is wrong with it.
Check = Callable[[object, str], object]


class Bad(Exception):
    """A field that is not what the schema says: where it is, and what is wrong."""

    def __init__(self, where: str, what: str) -> None:
        super().__init__(f"{where or 'the top level'} {what}")


def _show(value: object) -> str:
    text = json.dumps(value) if isinstance(value, (int, float, str, bool, type(None))) else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def integer(lo: int = -INT64, hi: int = INT64 - 1) -> Check:
    """An integer in [lo, hi] (not a bool, not a float)."""
    def check(v, where):
        if type(v) is not int:
            raise Bad(where, f"= {_show(v)} is not an integer")
        if not lo <= v <= hi:
            raise Bad(where, f"= {_show(v)} is outside {lo:,} .. {hi:,}")
        return v
    return check


COUNT = integer(0)  # a count or a total: never negative
TIME = integer()  # int64 nanoseconds


def number(lo: float = 0.0, hi: float = math.inf) -> Check:
    """A finite number (int or float) in [lo, hi]."""
    def check(v, where):
        if type(v) not in (int, float) or not math.isfinite(v):
            raise Bad(where, f"= {_show(v)} is not a finite number")
        if not lo <= v <= hi:
            raise Bad(where, f"= {_show(v)} is outside {lo:g} .. {hi:g}")
        return v
    return check


def span(v, where):
    """A (first, last) time pair, both null or first <= last."""
    lo, hi = fixed(optional(TIME), optional(TIME))(v, where)
    if (lo is None) != (hi is None) or (lo is not None and lo > hi):
        raise Bad(where, f"= {_show(v)} is not a span (first <= last, or both null)")
    return [lo, hi]


def ascending(inner: Check) -> Check:
    """A list of ``inner`` in non-decreasing order (window starts, runs)."""
    def check(v, where):
        out = items(inner)(v, where)
        for i in range(1, len(out)):
            if out[i] < out[i - 1]:
                raise Bad(f"{where}[{i}]", f"= {_show(out[i])} comes before the item before it")
        return out
    return check


def text(max_len: int = 4096) -> Check:
    def check(v, where):
        if not isinstance(v, str):
            raise Bad(where, f"= {_show(v)} is not a string")
        if len(v) > max_len:
            raise Bad(where, f"is a string of {len(v):,} characters, more than {max_len:,}")
        return v
    return check


def flag(v, where):
    if not isinstance(v, bool):
        raise Bad(where, f"= {_show(v)} is not true or false")
    return v


def one_of(*choices) -> Check:
    def check(v, where):
        if v not in choices or isinstance(v, bool) != isinstance(choices[0], bool):
            raise Bad(where, f"= {_show(v)} is not one of {', '.join(map(json.dumps, choices))}")
        return v
    return check


def optional(inner: Check) -> Check:
    def check(v, where):
        return None if v is None else inner(v, where)
    return check


def items(inner: Check, max_len: int = 10_000_000, length: int | None = None) -> Check:
    """A list of ``inner`` (exactly ``length`` of them when given)."""
    def check(v, where):
        if not isinstance(v, list):
            raise Bad(where, f"= {_show(v)} is not a list")
        if length is not None and len(v) != length:
            raise Bad(where, f"holds {len(v):,} items, not {length:,}")
        if len(v) > max_len:
            raise Bad(where, f"holds {len(v):,} items, more than {max_len:,}")
        return [inner(x, f"{where}[{i}]") for i, x in enumerate(v)]
    return check


def fixed(*parts: Check) -> Check:
    """A list of exactly these items, each its own check (a pair, a triple)."""
    def check(v, where):
        if not isinstance(v, list) or len(v) != len(parts):
            raise Bad(where, f"= {_show(v)} is not a list of {len(parts)}")
        return [p(x, f"{where}[{i}]") for i, (p, x) in enumerate(zip(parts, v))]
    return check


def record(fields: dict[str, Check], optional_keys: tuple[str, ...] = ()) -> Check:
    """An object with exactly these keys (those in ``optional_keys`` may be absent)."""
    def check(v, where):
        if not isinstance(v, dict):
            raise Bad(where, f"= {_show(v)} is not an object")
        unknown = sorted(set(v) - set(fields))
        if unknown:
            raise Bad(where, f"has a key {json.dumps(unknown[0])} no checkpoint has")
        out = {}
        for key, inner in fields.items():
            sub = f"{where}.{key}" if where else key
            if key not in v:
                if key in optional_keys:
                    continue
                raise Bad(sub, "is missing")
            out[key] = inner(v[key], sub)
        return out
    return check


def mapping(key: Check, value: Check, max_len: int = 1 << 20) -> Check:
    """An object whose keys are integers in decimal (devices), ``key`` checking each."""
    def check(v, where):
        if not isinstance(v, dict):
            raise Bad(where, f"= {_show(v)} is not an object")
        if len(v) > max_len:
            raise Bad(where, f"holds {len(v):,} keys, more than {max_len:,}")
        out = {}
        for k, x in v.items():
            sub = f"{where}.{k}"
            if not (k.isascii() and k.lstrip("-").isdigit()):
                raise Bad(sub, "has a key that is not an integer")
            key(int(k), sub)
            out[k] = value(x, sub)
        return out
    return check


def packed(itemsize: int, max_bytes: int = 1 << 30, each: Callable[[bytes], str | None] | None = None) -> Check:
    """Base64 of whole little-endian items of ``itemsize`` bytes (``frag.state._pack``); ``each(raw)``: a
    further check of the decoded bytes, returning what is wrong (or None)."""
    def check(v, where):
        if not isinstance(v, str):
            raise Bad(where, f"= {_show(v)} is not base64 text")
        if len(v) > max_bytes * 4 // 3 + 4:
            raise Bad(where, f"is {len(v):,} characters of base64, more than {max_bytes:,} bytes")
        try:
            raw = base64.b64decode(v, validate=True)
        except (binascii.Error, ValueError):
            raise Bad(where, "is not base64 (a length that is not a multiple of 4, or a character outside it)") from None
        if len(raw) % itemsize:
            raise Bad(where, f"decodes to {len(raw):,} bytes, not whole {itemsize}-byte items")
        bad = each(raw) if each is not None else None
        if bad:
            raise Bad(where, bad)
        return v
    return check


def read(path: Path) -> dict | None:
    """The checkpoint at ``path`` parsed with the bounds of any input (None when there is none yet).

    Raises:
        VeotraceError: larger than the whole-file bound, not UTF-8, not a JSON object, NaN or Infinity,
            a key given twice, or nested deeper than MAX_NESTING.
    """
    limit = max_file_bytes()
    try:
        size = Path(path).stat().st_size
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise damaged(path, f"cannot be read ({exc.strerror})") from None
    if size > limit:
        raise damaged(path, f"is {size:,} bytes, more than the {limit:,} of a file read whole")
    try:
        raw = Path(path).read_bytes()
        doc = json.loads(raw.decode("utf-8"), parse_constant=_no_constant, parse_float=_finite,
                         object_pairs_hook=_no_duplicates)
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as exc:
        raise damaged(path, f"is not UTF-8 text (byte {exc.start:,})") from None
    except RecursionError:
        raise damaged(path, f"nests JSON more than {MAX_NESTING} deep") from None
    except Bad as exc:
        raise damaged(path, str(exc)) from None
    except ValueError as exc:  # JSONDecodeError, an integer past Python's digit bound
        raise VeotraceError(f"not a follow checkpoint (not JSON: {str(exc)[:120]})", path=path, hint=_HINT) from None
    if not isinstance(doc, dict):
        raise VeotraceError("not a follow checkpoint (not a JSON object)", path=path, hint=_HINT)
    depth = _depth(doc)
    if depth > MAX_NESTING:
        raise damaged(path, f"nests JSON {depth} deep, more than {MAX_NESTING}")
    return doc


def check(doc: dict, schema: Check, path: Path) -> dict:
    """``doc`` checked against ``schema``: every field's type, range and size, before any of it is used.

    Raises:
        VeotraceError: naming the checkpoint and the first bad field.
    """
    try:
        return schema(doc, "")
    except Bad as exc:
        raise damaged(path, str(exc)) from None


_HINT = "Give another --state file, or remove this one to start from the beginning"


def damaged(path: Path, what: str) -> VeotraceError:
    return VeotraceError(f"the checkpoint is damaged: {what}", path=path, hint=_HINT)


def _no_constant(name: str):
    raise Bad("a value", f"is {name}, which no checkpoint holds")


def _finite(text: str) -> float:
    """A JSON number with a fraction or exponent, refused when past a double's range (1e999 reads as inf)."""
    v = float(text)
    if not math.isfinite(v):
        raise Bad("a value", f"= {text[:40]} is past the range of a 64-bit float, which no checkpoint holds")
    return v


def _no_duplicates(pairs: list[tuple]) -> dict:
    out = {}
    for key, value in pairs:
        if key in out:
            raise Bad(f"the key {json.dumps(key)[:40]}", "is given twice in one object")
        out[key] = value
    return out


def _depth(v, level: int = 1) -> int:
    """How deep ``v`` nests (an iterative walk: a deep document must not recurse here either)."""
    deepest, todo = level, [(v, level)]
    while todo:
        x, n = todo.pop()
        deepest = max(deepest, n)
        if n > MAX_NESTING:
            return n
        if isinstance(x, dict):
            todo.extend((y, n + 1) for y in x.values())
        elif isinstance(x, list):
            todo.extend((y, n + 1) for y in x)
    return deepest
