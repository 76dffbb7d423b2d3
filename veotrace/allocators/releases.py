"""Recorded releases: why PyTorch returned each run of cached segments, read from the trace, and how it is replayed.

PyTorch's ``DeviceCachingAllocator`` (``c10/cuda/CUDACachingAllocator.cpp``) frees cached segments
(``release_block``: a ``segment_free`` entry; ``unmap_block``: ``segment_unmap``) in four places:

- ``emptyCache()`` -> ``release_cached_blocks``: the program's ``torch.cuda.empty_cache()``, outside any
  malloc: every unsplit free block of both pools (free pages of expandable segments unmapped);
- ``malloc``, after ``alloc_block`` failed (cudaMalloc out of memory): ``release_available_cached_blocks``
  (with ``max_split_size`` set: oversize blocks only, enough for the request), retried, then
  ``release_cached_blocks``, retried (the OOM retry);
- ``malloc``, before ``alloc_block``, when a memory fraction is set and ``garbage_collection_threshold``
  too: ``garbage_collect_cached_blocks`` (old unsplit large blocks);
- and when that last retry fails, the ``oom`` entry follows the releases.

Every release inside a malloc comes after ``get_free_block`` found no cached block that fits, and is
followed in the trace by that malloc's ``segment_alloc``/``segment_map`` (or its ``oom``). So a run of
releases is inside a malloc only when a device allocation or an OOM of its device follows it before
any other request, and none of the segments it frees would have served that malloc's request (same
stream and pool, large enough, within the ``max_split_size`` rules of the recorded settings): the
recorded sizes say which blocks were free. Any other run is an ``empty_cache()``.

How each kind is replayed (:data:`REPLAYED_AS`): an ``empty_cache()`` is part of the program, so every
policy and every candidate setting releases its cache at that point; the releases inside a malloc
belong to the recorded setting and the device's memory, so the recorded setting replays them as
recorded (the very segments, for the partial releases) and another setting as what its own malloc
would do there (see :class:`veotrace.allocators.torch.TorchAllocator`).
"""

from __future__ import annotations

from collections import Counter

from veotrace.allocators.blocks import kSmallBuffer, kSmallSize, round_size
from veotrace.allocators.conf import TorchConf

#: Release kinds (the ``size`` of a REQ_RELEASE request): the program's empty_cache(), the last retry of a
#: malloc whose cudaMalloc failed (release_cached_blocks), the first retry with max_split_size set
#: (release_available_cached_blocks), garbage collection, and an OOM retry after which the malloc failed.
REL_EMPTY_CACHE, REL_OOM_RETRY, REL_SPLIT_RETRY, REL_GC, REL_OOM = range(5)
KINDS = ("empty_cache", "oom_retry", "split_retry", "gc", "oom")
#: Kinds that happen inside a malloc (dropped by --no-recorded-releases, which keeps the program's own calls).
IN_MALLOC = frozenset({REL_OOM_RETRY, REL_SPLIT_RETRY, REL_GC, REL_OOM})
#: What the replay does with each kind: with the recorded setting, and with any other.
REPLAYED_AS = {
    "empty_cache": "release_cached_blocks at that point, by every policy and setting (the program's call)",
    "oom_retry": "release_cached_blocks inside the next malloc if no cached block fits; another setting retries "
                 "as PyTorch's malloc does (release_available_cached_blocks with max_split_size, else "
                 "release_cached_blocks)",
    "split_retry": "the recorded segments released inside the next malloc if no cached block fits; another setting "
                   "retries as PyTorch's malloc does",
    "gc": "the recorded segments released inside the next malloc if no cached block fits; another setting runs "
          "its own garbage collection (only with a memory fraction)",
    "oom": "release_cached_blocks at that point (the malloc that followed failed and allocated nothing)",
}


def would_serve(seg_size: int, seg_stream: int, unmap: bool, req_size: int, req_stream: int, conf: TorchConf) -> bool:
    """Would a free cached segment of ``seg_size`` bytes have served a malloc of ``req_size`` under ``conf``
    (``get_free_block``: same stream and pool, large enough, not oversize for a request under
    max_split_size, within max_non_split_rounding over it)? ``unmap``: the bytes are unmapped pages of an
    expandable segment (their pool is not known from the size)."""
    size = round_size(req_size, conf)
    if seg_stream != req_stream or seg_size < size:
        return False
    if not unmap and (seg_size == kSmallBuffer) != (size <= kSmallSize):
        return False
    mss = conf.max_split_size
    if size < mss <= seg_size:
        return False
    return not (size >= mss and seg_size >= size + conf.max_non_split_rounding_size)


def classify(segs: list[tuple[int, int, int, bool]], next_alloc: tuple[int, int] | None, then_oom: bool,
             conf: TorchConf, could_fail: bool = True) -> int:
    """The kind of a run of releases inside a malloc candidate (followed by a device allocation or an OOM of
    its device): ``segs`` (address, bytes, stream, unmapped pages?), ``next_alloc`` (requested bytes,
    stream) of the malloc that followed, or None; ``conf`` the recorded settings; ``could_fail``: False when
    that malloc's cudaMalloc, tried before the releases, would have left the device below a level the
    trace reached elsewhere (so it did not fail for want of memory: no retry ran)."""
    if next_alloc is not None and any(would_serve(s, st, un, *next_alloc, conf) for _, s, st, un in segs):
        return REL_EMPTY_CACHE  # a free block that fits: get_free_block would have taken it, no retry ran
    if then_oom:
        return REL_OOM
    if not could_fail:  # garbage collection runs before cudaMalloc, whatever the level
        gc = conf.garbage_collection_threshold > 0 and all(s != kSmallBuffer and not un for _, s, _, un in segs)
        return REL_GC if gc else REL_EMPTY_CACHE
    if any(un for *_, un in segs):
        return REL_OOM_RETRY  # only release_cached_blocks unmaps pages
    if conf.max_split_size != (1 << 64) - 1 and all(s >= conf.max_split_size for _, s, _, _ in segs):
        return REL_SPLIT_RETRY
    if conf.garbage_collection_threshold > 0 and all(s != kSmallBuffer for _, s, _, _ in segs):
        return REL_GC
    return REL_OOM_RETRY


def summary(kinds: list[int], segments: list[int]) -> dict:
    """``recorded_releases`` of the JSON: runs and segments in all and by kind, with how each is replayed
    (``kinds``: the kind of every run; ``segments``: its number of segment_free/segment_unmap entries)."""
    runs, segs = Counter(), Counter()
    for k, n in zip(kinds, segments, strict=True):
        runs[KINDS[k]] += 1
        segs[KINDS[k]] += n
    return {"runs": len(kinds), "segments": sum(segments),
            "by_kind": {k: {"runs": runs[k], "segments": segs[k], "replayed_as": REPLAYED_AS[k]}
                        for k in KINDS if runs[k]}}
