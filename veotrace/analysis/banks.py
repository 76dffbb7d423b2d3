"""Bank conflicts and sector use of one warp's memory request, from per-thread byte addresses.

Shared memory: bank = (address // bank_bytes) % banks (32 banks x 4 bytes by default;
``bank_bytes=32`` gives the ``(addr >> 5) & 31`` mapping some texts use for global memory). Threads
reading the same word are served together (broadcast), so a bank's load is the number of
*distinct words* it must deliver; the request takes as many wavefronts as the busiest bank's load.
An element wider than a bank spans several words, so even a conflict-free request of 8-byte
elements needs ceil(words / banks) wavefronts: the conflict degree is wavefronts over that ideal.

Global memory: the request fetches every 32-byte sector that holds a byte it reads; efficiency is
bytes used (distinct bytes read) over bytes fetched (32 x sectors).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from veotrace.defaults import BANKS_BANK_BYTES as DEFAULT_BANK_BYTES
from veotrace.defaults import BANKS_COUNT as DEFAULT_BANKS
from veotrace.defaults import BANKS_MAX_OPTION
from veotrace.defaults import BANKS_WARP as DEFAULT_WARP
from veotrace.errors import AnalysisError, UsageError

SECTOR_BYTES = 32
LINE_BYTES = 128


def pattern_addresses(*, elem_bytes: int, stride: int, offset: int = 0, warp: int = DEFAULT_WARP,
                      base: int = 0) -> np.ndarray:
    """Byte address of thread t reading ``a[offset + t * stride]`` of ``elem_bytes`` elements at ``base``."""
    check_sizes(elem_bytes=elem_bytes, warp=warp)
    if base < 0:
        raise UsageError("--base must not be negative")
    lo, hi = offset + min(0, stride * (warp - 1)), offset + max(0, stride * (warp - 1))  # exact, in Python ints
    if lo < 0:
        raise UsageError("offset + stride * thread must not be negative for any thread")
    if base + (hi + 1) * elem_bytes > ADDRESS_END:
        raise UsageError(f"--base {base:#x} with element {hi:,} of {elem_bytes} bytes reaches past 2**64, the end of "
                         "the 64-bit address space", hint="Give a smaller --base, --offset or --stride")
    return np.array([base + (offset + stride * t) * elem_bytes for t in range(warp)], dtype=np.uint64)


#: One past the last byte address (addresses are uint64).
ADDRESS_END = 1 << 64


def check_sizes(**sizes: int) -> None:
    """Refuse a --warp, --banks, --bank-bytes or --elem-bytes outside 1 .. BANKS_MAX_OPTION (memory grows with them)."""
    for name, value in sizes.items():
        if not 1 <= value <= BANKS_MAX_OPTION:
            raise UsageError(f"--{name.replace('_', '-')} {value} is outside 1 .. {BANKS_MAX_OPTION:,}",
                             hint="A warp has 32 threads, shared memory 32 banks of 4 bytes")


@dataclass
class WarpAccess:
    """One warp request: shared-memory banks and global-memory sectors."""

    threads: int
    wavefronts: int  # passes the busiest bank needs (distinct words in it)
    ideal_wavefronts: int  # ceil(distinct words / banks): the least any layout needs
    conflict_degree: float  # wavefronts / ideal (1 = conflict-free; 2 = 2-way ...)
    bank_threads: list[int]  # threads touching each bank
    bank_words: list[int]  # distinct words each bank delivers
    sectors: int  # 32-byte sectors fetched from global memory
    lines: int  # 128-byte cache lines touched
    bytes_used: int  # distinct bytes read
    bytes_fetched: int  # 32 * sectors
    efficiency: float  # bytes_used / bytes_fetched

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def warp_access(addresses: np.ndarray, *, elem_bytes: int, banks: int = DEFAULT_BANKS,
                bank_bytes: int = DEFAULT_BANK_BYTES) -> WarpAccess:
    """Bank map, conflict degree and sectors of one warp reading ``elem_bytes`` at each address.

    Raises:
        UsageError: no address, or banks / bank_bytes / elem_bytes below 1.
    """
    check_sizes(banks=banks, bank_bytes=bank_bytes, elem_bytes=elem_bytes)
    a = np.asarray(addresses, dtype=np.uint64)
    if a.size == 0:
        raise UsageError("no thread addresses were given")
    top = int(a.max())
    if top > ADDRESS_END - elem_bytes:  # the element would wrap past 2**64 (uint64 sums below would too)
        raise AnalysisError(f"the address {top:#x} with {elem_bytes}-byte elements reaches past 2**64, the end of the "
                            "64-bit address space", hint="Check the addresses, or give the right --elem-bytes")
    first = a // np.uint64(bank_bytes)
    last = (a + np.uint64(elem_bytes - 1)) // np.uint64(bank_bytes)
    span = (last - first).astype(np.int64) + 1
    thread = np.repeat(np.arange(a.size), span)
    words = np.repeat(first, span) + (np.arange(span.sum()) - np.repeat(np.cumsum(span) - span, span)).astype(np.uint64)
    bank = (words % np.uint64(banks)).astype(np.int64)
    uniq_words = np.unique(words)
    word_bank = (uniq_words % np.uint64(banks)).astype(np.int64)
    bank_words = np.bincount(word_bank, minlength=banks)
    pairs = np.unique(np.stack([bank, thread]), axis=1)
    bank_threads = np.bincount(pairs[0], minlength=banks)
    wavefronts = int(bank_words.max())
    ideal = max(1, -(-int(uniq_words.size) // banks))
    sectors = _cover(a, elem_bytes, SECTOR_BYTES)
    lines = _cover(a, elem_bytes, LINE_BYTES)
    used = _distinct_bytes(a, elem_bytes)
    return WarpAccess(int(a.size), wavefronts, ideal, wavefronts / ideal, bank_threads.tolist(), bank_words.tolist(),
                      sectors, lines, used, sectors * SECTOR_BYTES, used / (sectors * SECTOR_BYTES))


def _cover(a: np.ndarray, elem_bytes: int, unit: int) -> int:
    """Distinct ``unit``-byte blocks holding any byte of [a, a + elem_bytes)."""
    lo = a // np.uint64(unit)
    hi = (a + np.uint64(elem_bytes - 1)) // np.uint64(unit)
    span = (hi - lo).astype(np.int64) + 1
    ids = np.repeat(lo, span) + (np.arange(span.sum()) - np.repeat(np.cumsum(span) - span, span)).astype(np.uint64)
    return int(np.unique(ids).size)


def _distinct_bytes(a: np.ndarray, elem_bytes: int) -> int:
    """Bytes in the union of [a, a + elem_bytes) over threads.

    Intervals of one length sorted by start have sorted ends, so each adds elem_bytes minus what it
    shares with the one before it.
    """
    s = np.unique(a)
    gap = (s[1:] - s[:-1]).astype(np.uint64)  # no sum that could wrap at the top of the address space
    shared = np.where(gap < np.uint64(elem_bytes), elem_bytes - np.minimum(gap, np.uint64(elem_bytes)).astype(np.int64), 0)
    return int(s.size * elem_bytes - shared.sum())


def warps(addresses: np.ndarray, *, warp: int = DEFAULT_WARP, **kw) -> list[WarpAccess]:
    """``warp_access`` of each consecutive group of ``warp`` addresses (the last may be short)."""
    a = np.asarray(addresses, dtype=np.uint64).ravel()
    return [warp_access(a[i : i + warp], **kw) for i in range(0, a.size, warp)]


def summarise(results: list[WarpAccess], *, params: dict) -> dict:
    """Per-warp results and the totals: worst and mean conflict degree, sectors vs bytes used."""
    if not results:
        raise UsageError("no thread addresses were given")
    fetched = sum(r.bytes_fetched for r in results)
    used = sum(r.bytes_used for r in results)
    degrees = [r.conflict_degree for r in results]
    return {"params": params,
            "summary": {"warps": len(results), "max_conflict_degree": max(degrees),
                        "mean_conflict_degree": sum(degrees) / len(degrees),
                        "sectors": sum(r.sectors for r in results), "bytes_used": used, "bytes_fetched": fetched,
                        "efficiency": used / fetched},
            "warps": [r.to_dict() for r in results]}
