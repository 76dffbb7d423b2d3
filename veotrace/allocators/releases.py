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

**The stacks decide first.** PyTorch records a context with each release: ``emptyCache`` gathers its own
(``auto context = maybeGatherContext(RecordContext::ALL); ... release_cached_blocks(context)``: frames
naming ``empty_cache``), while a release inside ``malloc`` carries the malloc's
(``maybeGatherContext(RecordContext::STATE)``: the allocating op's frames). Where the trace recorded frames
with a run's ``segment_free`` entries (:func:`frames_verdict`), they say which it was; only where none were
recorded does the rule above decide. ``summary`` says how many runs each decided.

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


#: What a run's recorded frames say: emptyCache's own context, or a malloc's (an op's) context.
BY_EMPTY_CACHE, BY_MALLOC = "empty_cache", "malloc"


def frames_verdict(frames) -> str | None:
    """What the frames recorded with a release say (None: no frames recorded): ``"empty_cache"`` when a frame
    names ``empty_cache`` (torch.cuda.empty_cache; ``emptyCache`` in C++ stacks), else ``"malloc"``."""
    if not frames:
        return None
    for f in frames:
        name = f.get("name", "") if isinstance(f, dict) else str(f)
        if "empty_cache" in str(name) or "emptyCache" in str(name):
            return BY_EMPTY_CACHE
    return BY_MALLOC


def release_frames(snap) -> dict[int, str]:
    """``{seq: verdict}`` of every segment_free/segment_unmap entry of a snapshot that recorded frames, with
    ``seq`` as ``torch_snapshot.events_table`` numbers the rows (devices merged by time when timed)."""
    entries = [(e.get("time_us"), d, k, e) for d, trace in enumerate(snap.device_traces) for k, e in enumerate(trace)]
    if snap.has_time and len(snap.device_traces) > 1:
        big = 1 << 62
        entries = sorted(entries, key=lambda x: x[0] if isinstance(x[0], int) else big)
    out = {}
    for seq, (_, _, _, e) in enumerate(entries):
        if e.get("action") in ("segment_free", "segment_unmap"):
            v = frames_verdict(e.get("frames"))
            if v is not None:
                out[seq] = v
    return out


def release_frames_streamed(stacks: list, actions: list, merge: bool, batches) -> dict[int, str]:
    """:func:`release_frames` of a snapshot the reader streams (``sources.snapshots.large.Rows``): each row's
    action and stack ids, numbered as the streamed reader numbers the rows (merged by time, nulls last, when
    ``merge``), so that the streamed and the whole read of one file classify its releases alike."""
    import numpy as np

    releasing = np.array([a in ("segment_free", "segment_unmap") for a in actions] + [False], dtype=bool)
    said = [frames_verdict(frames) for frames in stacks]
    big = np.iinfo(np.int64).max
    parts = [(b.column("action").to_numpy(zero_copy_only=False), b.column("stack").to_numpy(zero_copy_only=False),
              b.column("time_us").fill_null(big).to_numpy() if merge else None) for b in batches()]  # one pass
    action = np.concatenate([a for a, _, _ in parts] or [np.zeros(0)]).astype(np.int64)
    stack = np.concatenate([k for _, k, _ in parts] or [np.zeros(0)]).astype(np.int64)
    seq = np.arange(action.size, dtype=np.int64)
    if merge and action.size:
        when = np.concatenate([t for _, _, t in parts])
        seq[np.argsort(when, kind="stable")] = np.arange(action.size, dtype=np.int64)
    out = {}
    for row in np.flatnonzero(releasing[np.where(action >= 0, action, len(actions))] & (stack >= 0)):
        v = said[stack[row]]
        if v is not None:
            out[int(seq[row])] = v
    return out


def snapshot_release_frames(path) -> dict[int, str]:
    """The verdicts of the frames recorded with the releases of the snapshot at ``path``, on the read its
    reader takes (whole or streamed): what simulate seeds and what ``convert`` keeps for the Parquet route."""
    from veotrace.sources.snapshots.large import row_batches, use_stream
    from veotrace.sources.snapshots.torch_snapshot import load_snapshot

    if use_stream(path):
        return release_frames_streamed(*row_batches(path)[1:])
    return release_frames(load_snapshot(path))


def classify_by_frames(verdicts: set[str], segs, next_alloc, then_oom: bool, conf: TorchConf) -> int | None:
    """The kind of a run whose entries recorded frames (``verdicts``), or None to leave it to :func:`classify`:
    emptyCache's frames make it the program's call; a malloc's make it a release inside that malloc."""
    if BY_EMPTY_CACHE in verdicts:
        return REL_EMPTY_CACHE
    if BY_MALLOC not in verdicts:
        return None
    if then_oom:
        return REL_OOM
    if any(un for *_, un in segs):
        return REL_OOM_RETRY
    if conf.max_split_size != (1 << 64) - 1 and all(s >= conf.max_split_size for _, s, _, _ in segs):
        return REL_SPLIT_RETRY
    if conf.garbage_collection_threshold > 0 and all(s != kSmallBuffer for _, s, _, _ in segs):
        return REL_GC
    return REL_OOM_RETRY


def summary(kinds: list[int], segments: list[int], decided: list[str] | None = None) -> dict:
    """``recorded_releases`` of the JSON: runs and segments in all and by kind, with how each is replayed
    (``kinds``: the kind of every run; ``segments``: its number of segment_free/segment_unmap entries;
    ``decided``: "frames" or "rule" for each run: what told its kind)."""
    runs, segs = Counter(), Counter()
    for k, n in zip(kinds, segments, strict=True):
        runs[KINDS[k]] += 1
        segs[KINDS[k]] += n
    told = Counter(decided or [])
    return {"runs": len(kinds), "segments": sum(segments),
            "decided_by": {"frames": told["frames"], "rule": len(kinds) - told["frames"],
                           "why": "frames: the stack recorded with the release (emptyCache's names empty_cache, a "
                                  "malloc's the allocating op); rule: the entries around the run (no frames recorded)"},
            "by_kind": {k: {"runs": runs[k], "segments": segs[k], "replayed_as": REPLAYED_AS[k]}
                        for k in KINDS if runs[k]}}
