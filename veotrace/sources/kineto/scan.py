"""Streaming scans of a profiler trace's bytes: the ``[memory]`` events alone (a byte-level prefilter), or every
event (a JSON decoder walking the ``traceEvents`` array one event at a time), in flat memory either way.

Why a prefilter of our own for the memory events: in a long run's trace almost every byte belongs to other
events (ops, kernels, Python frames). ``bytes.find`` of the event name runs at memory speed in C, and only the
few hundred bytes of each memory event are handed to the JSON parser, so the read costs a fraction of a full
parse (``json.load`` of the whole file, or an event-by-event streaming parser such as ijson, decodes every
byte into Python objects first; benchmarks/bench_kineto.py measures the difference). Every object found is
still parsed by a real JSON parser and checked (``name`` is ``[memory]``), so a layout other than Kineto's
(keys sorted, no spaces) reads the same; ``tests/test_kineto.py`` checks both scans agree.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO

import numpy as np

NEEDLE = b'"[memory]"'
#: Decompressed bytes per read of the full scan.
BLOCK = 8 << 20
#: Decompressed bytes per read of the memory-event scan: 1 MiB blocks keep the heap from fragmenting as the
#: columns grow (8 MiB blocks left ~2.5x the columns' bytes resident on a 2M-event trace; measured with
#: benchmarks/bench_kineto.py), at no measurable cost in time.
MEMORY_BLOCK = 1 << 20
#: Bytes of the stream's end kept to read the keys after ``traceEvents`` and to tell a cut file.
TAIL = 64 << 10
#: The largest single event the full scan accepts (a kernel's name can be long, not this long).
MAX_EVENT = 64 << 20

try:  # orjson parses the blocks of memory events about twice as fast as json (a dependency; json without it)
    from orjson import JSONDecodeError as _OrjsonError
    from orjson import loads as _fast_loads
except ImportError:  # pragma: no cover - an install without orjson reads the same, slower
    _fast_loads, _OrjsonError = json.loads, ValueError


@dataclass
class ScanState:
    """What a scan saw besides the events: where the stream ended, whether it ended early (a cut file), the
    keys before and after ``traceEvents``, and the bytes that were no valid UTF-8."""

    size: int = 0  # decompressed bytes read
    cut: bool = False  # the stream ended inside the event list, or the compressed stream ended early
    cut_reason: str | None = None
    last_complete_end: int = 0  # byte just past the last complete event the scan used
    head: dict = field(default_factory=dict)
    tail: dict = field(default_factory=dict)
    bad_utf8: int = 0
    has_events_key: bool = False


def _read(fh: IO[bytes], n: int, state: ScanState) -> bytes:
    """Read up to ``n`` bytes; a compressed stream that ends early (EOFError, zlib error) is a cut file."""
    try:
        return fh.read(n)
    except (EOFError, OSError) as exc:  # gzip: "Compressed file ended before the end-of-stream marker"
        import zlib

        if isinstance(exc, (EOFError, zlib.error)) or "ompress" in str(exc) or "truncated" in str(exc).lower():
            state.cut, state.cut_reason = True, "the compressed stream ends early"
            return b""
        raise


def parse_head(block: bytes, state: ScanState) -> None:
    """The keys before ``traceEvents`` (deviceProperties, distributedInfo, schemaVersion, ...)."""
    at = block.find(b'"traceEvents"')
    if at < 0:
        return
    state.has_events_key = True
    head = block[:at].lstrip().rstrip()
    if head.endswith(b","):
        head = head[:-1]
    try:
        value = json.loads(head + b"}")
    except ValueError:
        return
    if isinstance(value, dict):
        state.head = value


def parse_tail(tail: bytes, state: ScanState) -> None:
    """The keys after the event list (traceName, displayTimeUnit, baseTimeNanoseconds...), and whether the
    JSON closes (a cut file does not)."""
    end = tail.rstrip()
    if not end.endswith(b"}"):
        state.cut = True
        state.cut_reason = state.cut_reason or "the file ends inside the event list"
        return
    close = end.rfind(b"]")
    if close < 0:
        return
    rest = end[close + 1:].lstrip()
    if rest.startswith(b","):
        rest = rest[1:]
    try:
        value = json.loads(b"{" + rest)
    except ValueError:
        return
    if isinstance(value, dict):
        state.tail = value


def _loads(raw: bytes) -> object:
    """One event's JSON (orjson when present; json for what orjson refuses, e.g. NaN, integers past 64 bits)."""
    if _fast_loads is not None:
        try:
            return _fast_loads(raw)
        except _OrjsonError:
            pass
    return json.loads(raw.decode("utf-8", "replace"))


def _simple(buf: bytes, hits: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For hits of the name in ``buf``: (start, end, mask) of those laid out as Kineto writes them (the name
    before ``args``: no brace between the event's opening brace and the name, one opening brace (args) before
    the first closing one, none between the two closing ones), found with array operations over the block's
    braces. The rest go through :func:`_widen` one by one."""
    arr = np.frombuffer(buf, np.uint8)
    opens = np.flatnonzero(arr == 0x7B)
    closes = np.flatnonzero(arr == 0x7D)
    n = hits.size
    if not n or not opens.size or closes.size < 2:
        return np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, bool)
    io = np.searchsorted(opens, hits) - 1
    ok = io >= 0
    start = opens[np.clip(io, 0, None)]
    ic0 = np.searchsorted(closes, start)
    ok &= (ic0 >= closes.size) | (closes[np.clip(ic0, 0, closes.size - 1)] > hits)
    ic1 = np.searchsorted(closes, hits)
    ok &= ic1 + 1 < closes.size
    c1 = closes[np.clip(ic1, 0, closes.size - 1)]
    c2 = closes[np.clip(ic1 + 1, 0, closes.size - 1)]
    o_hit, o_c1, o_c2 = (np.searchsorted(opens, x) for x in (hits, c1, c2))
    ok &= (o_c1 - o_hit == 1) & (o_c2 - o_c1 == 0)
    return start, c2 + 1, ok


def _widen(buf: bytes, hit: int, done: int) -> tuple[int, int] | None:
    """(start, end) of the object around the name at ``hit`` for any layout; (start, -1) when it continues past
    ``buf``; None when the name is inside no object we can see (a string that merely holds it)."""
    start = buf.rfind(b"{", 0, hit)
    if start >= 0 and buf.find(b"}", start, hit) >= 0:  # args before the name (keys sorted): one level up
        start = buf.rfind(b"{", 0, start)
    if start < done:
        return None
    need = buf.count(b"{", start, hit) - buf.count(b"}", start, hit)
    e = hit
    while need > 0:
        close = buf.find(b"}", e)
        if close < 0:
            return start, -1
        need += buf.count(b"{", e, close) - 1
        e = close + 1
    return start, e


def memory_events(fh: IO[bytes], state: ScanState, block: int = BLOCK) -> Iterator[list[tuple[int, bytes]]]:
    """Yield, block by block, lists of ``(byte offset, raw JSON of the event)`` for the ``[memory]`` events, in
    file order.

    Each hit of ``"[memory]"`` is widened to the object around it: back to its opening brace (one more when its
    ``args`` came before its name, as with sorted keys), forward to the brace that closes it. A memory event
    holds no string with a brace, so counting braces is exact for it; the caller parses the slices and checks
    each name. Kineto's own layout is widened with array operations over the block (:func:`_simple`), any
    other one event by event. A hit whose object does not close before the stream ends marks the file as cut.
    """
    carry, base = b"", 0  # base: absolute offset of carry[0]
    first = True
    tail = b""
    while True:
        chunk = _read(fh, block, state)
        eof = not chunk
        if first:
            parse_head(chunk, state)
            first = False
        if chunk:
            tail = (tail + chunk)[-TAIL:]
            state.size += len(chunk)
        buf = carry + chunk
        hits = []
        p = buf.find(NEEDLE)
        while p >= 0:
            hits.append(p)
            p = buf.find(NEEDLE, p + len(NEEDLE))
        h = np.array(hits, np.int64)
        starts, ends, ok = _simple(buf, h)
        out: list[tuple[int, bytes]] = []
        done, pending = 0, -1
        okl = ok.tolist()
        sl, el = starts.tolist(), ends.tolist()
        for k, hit in enumerate(hits):
            if okl[k] and sl[k] >= done:
                s, e = sl[k], el[k]
            else:
                got = _widen(buf, hit, done)
                if got is None:
                    continue
                s, e = got
                if e < 0:  # the object continues past buf
                    pending = s
                    break
            out.append((base + s, buf[s:e]))
            done = e
        if out:
            state.last_complete_end = out[-1][0] + len(out[-1][1])
            yield out
        if eof:
            if pending >= 0:
                state.cut = True
                state.cut_reason = state.cut_reason or "the file ends inside a [memory] event"
            break
        if pending >= 0:
            keep = pending
        else:  # a name that straddles the end: its object starts at most two braces back
            c1 = buf.rfind(b"{", done)
            c2 = buf.rfind(b"{", done, c1) if c1 > done else -1
            keep = max(done, c2 if c2 >= 0 else (c1 if c1 >= 0 else len(buf) - len(NEEDLE) + 1))
        if len(buf) - keep > MAX_EVENT:
            keep = len(buf) - len(NEEDLE) + 1
        carry = buf[keep:]
        base += keep
    parse_tail(tail, state)


#: Where one event ends and the next begins in any layout (``}`` ``,`` ``{`` with any whitespace): the cut of a
#: block handed to orjson. A cut that falls inside a string or a nested object only makes that parse fail.
_BETWEEN = re.compile(rb"\}\s*,\s*\{")


class _Utf8Count:
    """Counts the bytes of a stream that are no valid UTF-8 (an incremental decoder: every maximal invalid
    sequence counted by its bytes), decoding only the blocks that are not ASCII."""

    def __init__(self) -> None:
        self.bad = 0
        self._dec = codecs.getincrementaldecoder("utf-8")("surrogateescape")

    def feed(self, chunk: bytes, final: bool = False) -> None:
        if chunk.isascii() and not self._dec.getstate()[0] and not final:
            return
        text = self._dec.decode(chunk, final=final)
        if not text.isascii():
            self.bad += sum(1 for c in text if "\udc80" <= c <= "\udcff")


def _fix_text(obj):
    """Strings decoded with surrogateescape (the bytes that are no UTF-8 kept one by one) as an incremental UTF-8
    decoder that replaces gives them: each invalid sequence one U+FFFD."""
    if isinstance(obj, str):
        return obj.encode("utf-8", "surrogateescape").decode("utf-8", "replace") if not obj.isascii() else obj
    if isinstance(obj, dict):
        return {_fix_text(k): _fix_text(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_fix_text(v) for v in obj]
    return obj


def event_blocks(fh: IO[bytes], state: ScanState, block: int = BLOCK) -> Iterator[list]:
    """Yield, block by block, the values of ``traceEvents`` (event dicts), in file order, holding nothing but the
    current block.

    How: each block is cut at the last place where one event ends and the next begins (``}`` ``,`` ``{``) and
    parsed by orjson as one array (``[`` + block + ``]``), several times faster than decoding event by event. A
    cut inside a string or a nested object, NaN, an integer past 64 bits or bytes that are no UTF-8 make orjson
    refuse the block: that block goes through ``json.JSONDecoder.raw_decode`` event by event (bytes that are no
    UTF-8 become U+FFFD), so the values are the same either way. The file's bytes that are no UTF-8 are counted in
    ``state.bad_utf8`` over the whole stream.
    A file cut mid-write ends the scan at its last complete event (``state.cut``); a syntax error inside the
    list raises ValueError with its byte offset.
    """
    dec = json.JSONDecoder()
    utf8 = _Utf8Count()
    tail = b""
    buf, pos, base = b"", 0, 0  # base: absolute offset of buf[0]
    first, inside, eof, slow = True, False, False, False

    def more() -> None:
        nonlocal buf, pos, base, tail, first, eof
        chunk = _read(fh, block, state)
        if first:
            parse_head(chunk, state)
            first = False
        utf8.feed(chunk, final=not chunk)
        if chunk:
            tail = (tail + chunk)[-TAIL:]
            state.size += len(chunk)
        base += pos
        buf = buf[pos:] + chunk
        pos = 0
        eof = not chunk

    more()
    while not inside:  # find the list
        at = buf.find(b'"traceEvents"')
        if at >= 0:
            open_at = buf.find(b"[", at)
            if open_at >= 0:
                pos, inside = open_at + 1, True
                break
        if eof:
            break
        pos = max(len(buf) - 32, 0)
        more()
    while inside:
        n = len(buf)
        while pos < n and buf[pos] in b" \t\r\n,":
            pos += 1
        if pos >= n:
            if eof:
                state.cut = True
                state.cut_reason = state.cut_reason or "the file ends inside the event list"
                break
            more()
            continue
        if buf[pos] == 0x5D:  # "]"
            break
        cut = -1
        if not slow and _fast_loads is not json.loads:  # the last boundary of the buffer (its last 64 KiB first)
            for m in _BETWEEN.finditer(buf, max(pos, n - (1 << 16))):
                cut = m.start()
            if cut < 0 and n - (1 << 16) > pos:
                for m in _BETWEEN.finditer(buf, pos):
                    cut = m.start()
            if cut < 0 and not eof and n - pos < MAX_EVENT:  # no boundary yet: read on
                more()
                continue
            if cut >= 0:
                try:
                    values = _fast_loads(b"[" + buf[pos:cut + 1] + b"]")
                except _OrjsonError:
                    values = None
                if values is not None:
                    yield values
                    state.last_complete_end = base + cut + 1
                    pos = cut + 1
                    continue
        # one event at a time (raw_decode), up to the cut (then orjson again) or, in slow mode, to the buffer's end
        text = buf[pos:].decode("utf-8", "surrogateescape")
        stop = len(text) if cut < 0 else len(buf[pos:cut + 1].decode("utf-8", "surrogateescape"))
        i, out, failed = 0, [], None
        while i < stop:
            while i < stop and text[i] in " \t\r\n,":
                i += 1
            if i >= stop or text[i] == "]":
                break
            try:
                obj, end = dec.raw_decode(text, i)
            except ValueError as exc:
                failed = exc
                break
            if end >= len(text) and not eof:  # a number cut at the buffer's end parses short: read on
                failed = ValueError("cut")
                break
            out.append(_fix_text(obj))
            i = end
        consumed = len(text[:i].encode("utf-8", "surrogateescape"))
        if out:
            yield out
            state.last_complete_end = base + pos + consumed
        pos += consumed
        if failed is None:
            slow = False
            if i < len(text) and text[i] == "]":
                break
            if cut < 0 and eof and pos >= len(buf):
                state.cut = True
                state.cut_reason = state.cut_reason or "the file ends inside the event list"
                break
            if cut < 0:
                if eof:
                    continue
                more()
            continue
        if eof:
            state.cut = True
            state.cut_reason = state.cut_reason or "the file ends inside an event"
            break
        if len(buf) - pos >= MAX_EVENT:
            raise ValueError(f"byte {base + pos:,}: {getattr(failed, 'msg', str(failed))}") from None
        slow = True  # an event continues past the buffer (or is broken): read on, one event at a time
        more()
    while not eof:  # the rest, for the keys after the list
        pos = len(buf)
        more()
    state.bad_utf8 = utf8.bad
    parse_tail(tail, state)
