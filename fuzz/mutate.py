"""Structured mutations of valid files: what a bad day or an attacker does to a trace.

``mutate(data, rng)`` applies one to three of: truncation, byte flips, inserted/deleted bytes, swapped
or duplicated lines, numbers replaced by huge, negative, fractional, NaN/inf or non-ASCII digits,
stray quotes, NULs, CR-only line ends, re-encoding as UTF-16 or gzip, and a gzip stream cut short.
"""

from __future__ import annotations

import gzip
import random
import re

_NUMBER = re.compile(rb"-?\d+(\.\d+)?")
_REPLACEMENTS = (b"99999999999999999999", b"18446744073709551616", b"9223372036854775808", b"-1", b"-4096",
                 b"12345.9", b"4096.0", b"1e400", b"1e20", b"nan", b"inf", b"-inf", b"true", b"null",
                 b'""', b"\xc2\xb9\xc2\xb2", b"0x", b"\x00", b"3" * 200)


def _flip(data: bytes, rng: random.Random) -> bytes:
    if not data:
        return data
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(b))
        b[i] ^= 1 << rng.randrange(8)
    return bytes(b)


def _insert(data: bytes, rng: random.Random) -> bytes:
    i = rng.randint(0, len(data))
    junk = rng.choice([b'"', b"\x00", b"\r", b",", b"\n", b"{", b"[" * 50, bytes(rng.randrange(256) for _ in range(8))])
    return data[:i] + junk + data[i:]


def _delete(data: bytes, rng: random.Random) -> bytes:
    if not data:
        return data
    i = rng.randrange(len(data))
    return data[:i] + data[i + rng.randint(1, 16):]


def _truncate(data: bytes, rng: random.Random) -> bytes:
    return data[: rng.randint(0, max(len(data) - 1, 0))]


def _lines(data: bytes, rng: random.Random) -> bytes:
    lines = data.split(b"\n")
    if len(lines) < 3:
        return data
    i, j = rng.randrange(1, len(lines)), rng.randrange(1, len(lines))
    if rng.random() < 0.5:
        lines[i], lines[j] = lines[j], lines[i]
    else:
        lines.insert(i, lines[j])
    return b"\n".join(lines)


def _number(data: bytes, rng: random.Random) -> bytes:
    found = list(_NUMBER.finditer(data))
    if not found:
        return _flip(data, rng)
    m = rng.choice(found)
    return data[: m.start()] + rng.choice(_REPLACEMENTS) + data[m.end():]


def _encoding(data: bytes, rng: random.Random) -> bytes:
    choice = rng.randrange(4)
    if choice == 0:
        return data.replace(b"\n", b"\r")
    if choice == 1:
        try:
            return data.decode("utf-8").encode("utf-16")
        except UnicodeDecodeError:
            return data
    if choice == 2:
        return gzip.compress(data, mtime=0)
    z = gzip.compress(data, mtime=0)
    return z[: rng.randint(10, max(len(z) - 1, 10))]


MUTATORS = (_flip, _insert, _delete, _truncate, _lines, _number, _number, _encoding)


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One to three random mutations of ``data``."""
    for _ in range(rng.randint(1, 3)):
        data = rng.choice(MUTATORS)(data, rng)
    return data
