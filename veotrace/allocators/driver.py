"""The driver's cudaMalloc addresses: the recorded ones where the recording made the device allocation, and a
rule learned from the trace for the ones it never made.

PyTorch's best fit (``get_free_block``: ``pool.blocks.lower_bound(&p.search_key)``, the search key's ``ptr``
null) walks the free blocks in ``BlockComparatorSize`` order: stream, then size, then the address
(``(uintptr_t)a->ptr < (uintptr_t)b->ptr``). Of two free blocks of the same size, the one at the lower
address serves the request, and a block's address is its segment's ``cudaMalloc`` pointer plus its offset.
So where two equal free blocks lie in different segments, the driver's addresses decide which one is
split or reused, and what fits later.

- **Recorded addresses.** A model ``cudaMalloc`` while serving trace allocation ``r`` (the request every
  ``segment_alloc`` entry precedes), of the size the trace recorded there, gets the recorded pointer
  (``segment_alloc``'s ``addr``), when that range is free in the model (it always is under the recorded
  settings while the replay follows the trace).
- **Assumed addresses** (a cudaMalloc the recording never made: another setting, a candidate of ``tune``,
  or an extra one): the rule :func:`learn` reads from the trace's own segment entries, per device:
  the *direction* (each fresh ``segment_alloc`` below the one before it, or above) and the *reuse* of
  freed ranges (a ``segment_alloc`` inside a range a ``segment_free`` returned). The driver then hands
  out the first free range from its end of the address space: from the top (descending) or the bottom
  (ascending) of the ranges used so far, gaps included when it reuses freed ranges, else always past
  the extreme. With no evidence: ascending, reusing (the model's old bump allocator ascended).
- Expandable segments reserve their address range above everything (``cuMemAddressReserve``; not
  recorded as a ``segment_alloc``), and seeded segments (live when recording began) keep their recorded
  addresses.

:class:`Driver` counts the ``cudaMalloc`` calls given an assumed address (``assumed_addresses``) and the
best-fit ties an assumed address decided (``assumed_ties``: the block chosen and an equal one behind it
lie in different segments, at least one of them at an assumed address). Where that count is not 0, the
prediction depends on the rule. ``_torchcore.c`` implements the same (``drv_*``).
"""

from __future__ import annotations

from bisect import bisect_right, insort
from dataclasses import dataclass

from veotrace.allocators.base import VA_ALIGN, VA_BASE

ASCENDING, DESCENDING = 1, -1
#: Where a descending driver starts when nothing fixes its top (far above VA_BASE, inside int64).
DESCENDING_TOP = VA_BASE + (1 << 44)
#: Equal free blocks behind the one chosen that the tie check looks at (ties are short runs).
TIE_WALK = 32
#: segment_alloc entries each candidate rule is scored on (the first ones: the rule is read, not fitted).
LEARN_MAX = 4000
#: Ranges freed last that a same-size cudaMalloc may be handed again (``DriverRule.same_size``).
FREED_KEEP = 64


@dataclass(frozen=True)
class DriverRule:
    """The addresses the driver hands out to a cudaMalloc the recording never made (see the module docstring)."""

    direction: int = ASCENDING
    reuse: bool = True
    #: a cudaMalloc of the size of a range freed lately gets that range again (the newest first)
    same_size: bool = False
    fresh_down: int = 0
    fresh_up: int = 0
    reused: int = 0
    not_reused: int = 0
    #: segment_alloc entries this rule places where the trace did among the live segments (what decides a
    #: best-fit tie), and the addresses it names exactly, run along the trace (of ``checked``)
    placed: int = 0
    named: int = 0
    checked: int = 0

    @property
    def learned(self) -> bool:
        return bool(self.fresh_down or self.fresh_up or self.reused or self.not_reused)

    def to_dict(self) -> dict:
        return {"direction": "descending" if self.direction == DESCENDING else "ascending", "reuse_freed": self.reuse,
                "same_size_again": self.same_size,
                "evidence": {"fresh_segment_allocs_below_the_last": self.fresh_down,
                             "fresh_segment_allocs_above_the_last": self.fresh_up,
                             "segment_allocs_in_freed_ranges": self.reused,
                             "segment_allocs_past_a_freed_range_that_fit": self.not_reused,
                             "segment_allocs_the_rule_places_among_the_live_segments": self.placed,
                             "segment_alloc_addresses_the_rule_names": self.named,
                             "segment_alloc_addresses_checked": self.checked},
                "learned_from": "the trace's segment_alloc/segment_free addresses" if self.learned else
                "no evidence in the trace: ascending, reusing freed ranges (assumed)"}

    def describe(self) -> str:
        d = "descending" if self.direction == DESCENDING else "ascending"
        how = "learned from the trace's segment addresses" if self.learned else "assumed: the trace shows none"
        same = ", a freed range again for the same size" if self.same_size else ""
        return f"{d} addresses, {'reusing' if self.reuse else 'never reusing'} freed ranges{same}, {how}"


def learn(entries, seeded=()) -> DriverRule:
    """The rule of one device from its segment entries in trace order: ``(op, address, bytes)``, ``op`` one of
    ``segment_alloc``/``segment_free`` (others are ignored); ``seeded``: ``(address, bytes)`` of the segments
    live before the trace began.

    Each of the eight rules (descending or ascending; reusing freed ranges or not; handing a range freed
    lately to a cudaMalloc of its size or not) is run along the trace: before every ``segment_alloc`` it
    names the address it would hand out given the ranges then live (as recorded). The rule that places the
    most of them where the trace did among the live segments (what decides a best-fit tie), then names the
    most exactly, wins. Ties go to the direction most fresh ``segment_alloc`` entries took (each against
    the one before it, outside any range a ``segment_free`` returned), to reuse when a ``segment_alloc``
    landed in a freed range or none could have, and to no same-size preference."""
    freed: list[tuple[int, int]] = []  # (start, end) of ranges returned and not handed out again
    down = up = reused = not_reused = 0
    last = None
    allocs = [(op, a, s) for op, a, s in entries if a is not None and s > 0 and op in ("segment_alloc", "segment_free")]
    for op, addr, size in allocs:
        if op == "segment_free":
            freed.append((addr, addr + size))
            continue
        hit = next((k for k, (a, b) in enumerate(freed) if a <= addr and addr + size <= b), None)
        if hit is not None:
            reused += 1
            a, b = freed.pop(hit)
            freed.extend(r for r in ((a, addr), (addr + size, b)) if r[1] > r[0])
            continue
        if any(b - a >= size for a, b in freed):
            not_reused += 1
        if last is not None and addr != last:
            if addr < last:
                down += 1
            else:
                up += 1
        last = addr
    direction = DESCENDING if down > up else ASCENDING
    reuse = reused > 0 or not_reused == 0
    best, best_key = (direction, reuse, False, 0, 0, 0), None
    for cand_dir in (direction, -direction):
        for cand_reuse in (reuse, not reuse):
            for same in (False, True):
                placed, named, n = _named(DriverRule(cand_dir, cand_reuse, same), allocs, seeded)
                key = (placed, named)  # the first candidate (the counts' choice) wins a tie: only a gain moves
                if best_key is None or key > best_key:
                    best, best_key = (cand_dir, cand_reuse, same, placed, named, n), key
    return DriverRule(best[0], best[1], best[2], down, up, reused, not_reused, best[3], best[4], best[5])


def _named(rule: DriverRule, allocs, seeded) -> tuple[int, int, int]:
    """(how many recorded segment_allocs ``rule`` places where the trace did among the live segments, how many
    addresses it names exactly, of how many), run along the trace."""
    d = Driver(rule)
    for a, s in seeded:
        if d._free(a, a + s):
            d.reserve(a, s)
    placed = hits = n = 0
    for op, addr, size in allocs:
        if n >= LEARN_MAX:
            break
        if op == "segment_free":
            d.release(addr)
            continue
        n += 1
        guess = d.assumed(size)
        hits += guess == addr
        placed += bisect_right(d.starts, guess) == bisect_right(d.starts, addr)
        if d._free(addr, addr + size):
            d.reserve(addr, size)
    return placed, hits, n


class Driver:
    """One device's address space as the driver hands it out: the recorded pointers, else :class:`DriverRule`'s.

    Args:
        rule: the learned rule. recorded: {request index: [(bytes, address), ...]} of the trace's own
            segment_alloc entries on this device. counters: where ``assumed_addresses`` and
            ``assumed_ties`` are counted (a ``PolicyCounters``).
    """

    __slots__ = ("rule", "recorded", "c", "starts", "seg", "lo", "hi", "start", "assumed_live", "freed")

    def __init__(self, rule: DriverRule | None = None, recorded: dict | None = None, counters=None,
                 start: int = VA_BASE) -> None:
        self.rule = rule or DriverRule()
        self.recorded = {r: list(v) for r, v in (recorded or {}).items()}
        self.c = counters
        self.starts: list[int] = []  # the live ranges' starts, sorted
        self.seg: dict[int, tuple[int, bool]] = {}  # start -> (end, assumed)
        self.lo = self.hi = None  # the lowest start and highest end ever used
        self.assumed_live = 0  # live ranges at an assumed address (no tie can be the driver's while 0)
        self.freed: list[tuple[int, int]] = []  # (address, bytes) of the last FREED_KEEP ranges freed, oldest first
        self.start = -(-start // VA_ALIGN) * VA_ALIGN

    # -- the ranges ---------------------------------------------------------------------------------
    def _free(self, a: int, b: int) -> bool:
        i = bisect_right(self.starts, a) - 1
        if i >= 0 and self.seg[self.starts[i]][0] > a:
            return False
        return i + 1 >= len(self.starts) or self.starts[i + 1] >= b

    def reserve(self, addr: int, size: int, assumed: bool = False) -> int:
        """Mark ``[addr, addr + size)`` used (a segment), as recorded or assumed."""
        insort(self.starts, addr)
        self.seg[addr] = (addr + size, assumed)
        self.assumed_live += assumed
        self.lo = addr if self.lo is None else min(self.lo, addr)
        self.hi = addr + size if self.hi is None else max(self.hi, addr + size)
        return addr

    def release(self, addr: int) -> None:
        """cudaFree of the segment at ``addr``."""
        gone = self.seg.pop(addr, None)
        if gone is not None:
            del self.starts[bisect_right(self.starts, addr) - 1]
            self.assumed_live -= gone[1]
            self.freed.append((addr, gone[0] - addr))
            if len(self.freed) > FREED_KEEP:
                del self.freed[0]

    def segment_of(self, addr: int) -> int | None:
        """The start of the segment holding ``addr``."""
        i = bisect_right(self.starts, addr) - 1
        return self.starts[i] if i >= 0 and self.seg[self.starts[i]][0] > addr else None

    # -- cudaMalloc ------------------------------------------------------------------------------------
    def take(self, size: int, req: int) -> int:
        """The address of a cudaMalloc of ``size`` bytes while serving request ``req``."""
        for k, (s, a) in enumerate(self.recorded.get(req, ())):
            if s == size and self._free(a, a + size):
                del self.recorded[req][k]
                return self.reserve(a, size)
        if self.c is not None:
            self.c.assumed_addresses += 1
        return self.reserve(self.assumed(size), size, True)

    def take_high(self, span: int) -> int:
        """An address range above every one used (an expandable segment's reservation)."""
        top = max(self.hi or self.start, self.start)
        if self.c is not None:
            self.c.assumed_addresses += 1
        return self.reserve(-(-top // VA_ALIGN) * VA_ALIGN, span, True)

    def assumed(self, size: int) -> int:
        """The rule's address for ``size`` bytes (a whole number of VA_ALIGN steps)."""
        n = -(-max(size, 1) // VA_ALIGN) * VA_ALIGN
        if self.rule.same_size:  # a range freed lately, of this size, the newest first
            for a, s in reversed(self.freed):
                if s == size and self._free(a, a + size):
                    return a
        starts, seg = self.starts, self.seg
        if self.rule.direction == ASCENDING:
            base = self.start if self.lo is None else self.lo
            if self.rule.reuse:
                pos = base
                for s in starts:
                    if s >= pos + n:
                        return pos
                    pos = max(pos, -(-seg[s][0] // VA_ALIGN) * VA_ALIGN)
                return pos
            return -(-max(self.hi or base, base) // VA_ALIGN) * VA_ALIGN
        top = DESCENDING_TOP if self.hi is None else self.hi
        if self.rule.reuse:
            pos = top // VA_ALIGN * VA_ALIGN
            for s in reversed(starts):
                end = seg[s][0]
                if end <= pos - n:
                    return pos - n
                pos = min(pos, s // VA_ALIGN * VA_ALIGN)
            addr = pos - n
        else:
            addr = (self.lo if self.lo is not None else top) // VA_ALIGN * VA_ALIGN - n
        if addr < VA_ALIGN:  # no room below: above everything instead
            addr = -(-(self.hi or VA_BASE) // VA_ALIGN) * VA_ALIGN
        return addr

    # -- best-fit ties ------------------------------------------------------------------------------
    def tie(self, chosen: int, other: int) -> bool:
        """Did an assumed address decide between equal free blocks at ``chosen`` (taken) and ``other`` (behind
        it in address order)? Only when they lie in different segments, one of them assumed."""
        a, b = self.segment_of(chosen), self.segment_of(other)
        if a == b or a is None or b is None:
            return False
        return self.seg[a][1] or self.seg[b][1]



def summary(assumed: int, ties: int, rules: dict, devices=()) -> dict:
    """The ``addresses`` object of a torch row (simulate) or a recommendation's trust (tune): the device
    allocations (cudaMalloc calls, expandable segments' reservations) given an assumed address, the best-fit ties those decided, whether the prediction depends on them,
    each device's rule, and ``said``: the sentence the text output prints."""
    devs = sorted(set(devices) | set(rules))
    by_dev = {str(d): (rules.get(d) or DriverRule()) for d in devs} or {"0": DriverRule()}
    rule = next(iter(by_dev.values()))
    said = (f"{assumed:,} device allocation{'' if assumed == 1 else 's'} (cudaMalloc, or an expandable segment's "
            f"reserved range) the recording never made got an assumed address ({rule.describe()}); {ties:,} best-fit "
            f"tie{' was' if ties == 1 else 's were'} decided by one")
    if ties:
        said += ": the prediction depends on the addresses assumed"
    elif not assumed:
        said = ("every device allocation got the address the recording gave it: no best-fit tie was decided by an "
                "assumed one")
    return {"assumed_device_allocations": assumed, "best_fit_ties_decided": ties, "depends_on_assumed_addresses": ties > 0,
            "rule": {d: r.to_dict() for d, r in by_dev.items()}, "said": said}
