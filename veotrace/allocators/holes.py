"""Free ranges (holes) of address space with coalescing, searched best-fit or first-fit.

Shared by the one-arena policies and the tiered pools. A hole never merges across a gap, so regions
placed apart (separate segments) stay apart.
"""

from __future__ import annotations

from bisect import bisect_left, insort


class Holes:
    """Holes keyed by start; ``take(n)`` returns the start of a fitting hole (best or first fit) or None."""

    __slots__ = ("by_start", "by_end", "keys", "best")

    def __init__(self, best: bool = True) -> None:
        self.by_start: dict[int, int] = {}
        self.by_end: dict[int, int] = {}
        self.keys: list = []  # (size, start) for best fit, start for first fit
        self.best = best

    def __len__(self) -> int:
        return len(self.by_start)

    def _add(self, start: int, size: int) -> None:
        self.by_start[start] = size
        self.by_end[start + size] = start
        insort(self.keys, (size, start) if self.best else start)

    def remove(self, start: int) -> int:
        size = self.by_start.pop(start)
        del self.by_end[start + size]
        key = (size, start) if self.best else start
        del self.keys[bisect_left(self.keys, key)]
        return size

    def put(self, start: int, size: int) -> tuple[int, int]:
        """Return ``[start, start+size)`` to the free ranges, merged with touching holes; returns the hole."""
        before = self.by_end.get(start)
        if before is not None:
            size += self.remove(before)
            start = before
        if start + size in self.by_start:
            size += self.remove(start + size)
        self._add(start, size)
        return start, size

    def take(self, n: int) -> int | None:
        """Carve ``n`` bytes from the start of the best (smallest) or first (lowest) fitting hole."""
        if self.best:
            i = bisect_left(self.keys, (n, -1))
            if i == len(self.keys):
                return None
            start = self.keys[i][1]
        else:
            start = next((s for s in self.keys if self.by_start[s] >= n), None)
            if start is None:
                return None
        size = self.remove(start)
        if size > n:
            self._add(start + n, size - n)
        return start

    def ending_at(self, end: int) -> int | None:
        """Start of the hole that ends exactly at ``end`` (e.g. at the top of an arena), if any."""
        return self.by_end.get(end)
