"""The release classifier reads the stack recorded with a run of segment_free (issue 46 item 2): emptyCache
gathers its own context (``maybeGatherContext(RecordContext::ALL)``: frames naming ``empty_cache``), a retry
inside malloc carries the malloc's (``RecordContext::STATE``: the allocating op's). Numbers worked from
CUDACachingAllocator.cpp."""

from __future__ import annotations

import pickle

import pytest
from test_releases import BASE, T0, MiB

from veotrace.allocators import releases as rl
from veotrace.runs.simulate import simulate

EMPTY = [{"name": "empty_cache", "filename": "torch/cuda/memory.py", "line": 222},
         {"name": "step", "filename": "train.py", "line": 9}]
OP = [{"name": "forward", "filename": "model.py", "line": 3}]


def program(tmp_path, frames: list | None):
    """Default settings recorded. a, b, c = malloc(600, 500, 120 MiB): three cudaMalloc; all freed (cached).
    The program calls empty_cache(): three segment_free (frames: ``frames``). Then L = malloc(1,100 MiB),
    n = malloc(200 MiB), m = malloc(30 MiB): three more cudaMalloc. The run of releases is followed by L's
    segment_alloc and none of the freed blocks could serve 1,100 MiB, and 1,220 + 1,100 MiB passes the
    trace's peak (1,330): by the entries alone it reads as an OOM retry inside L's malloc."""
    a, b, c = BASE, BASE + 1024 * MiB, BASE + 2048 * MiB
    big, n, m = BASE + 4096 * MiB, BASE + 6144 * MiB, BASE + 7168 * MiB
    acts = []
    for addr, size in ((a, 600), (b, 500), (c, 120)):
        acts += [("segment_alloc", addr, size * MiB, None), ("alloc", addr, size * MiB, OP)]
    for addr, size in ((a, 600), (b, 500), (c, 120)):
        acts += [("free_requested", addr, size * MiB, OP), ("free_completed", addr, size * MiB, OP)]
    acts += [("segment_free", addr, size * MiB, frames) for addr, size in ((a, 600), (b, 500), (c, 120))]
    for addr, size in ((big, 1100), (n, 200), (m, 30)):
        acts += [("segment_alloc", addr, size * MiB, None), ("alloc", addr, size * MiB, OP)]
    trace = []
    for i, (act, addr, size, fr) in enumerate(acts):
        e = {"action": act, "addr": addr, "size": size, "stream": 0, "time_us": T0 + i}
        if fr is not None:
            e["frames"] = fr
        trace.append(e)
    segments = [{"device": 0, "address": addr, "total_size": size * MiB, "allocated_size": size * MiB,
                 "active_size": size * MiB, "requested_size": size * MiB, "stream": 0, "segment_type": "large",
                 "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
                 "blocks": [{"address": addr, "size": size * MiB, "requested_size": size * MiB,
                             "state": "active_allocated", "frames": []}]}
                for addr, size in ((big, 1100), (n, 200), (m, 30))]
    path = tmp_path / "p.pickle"
    path.write_bytes(pickle.dumps({"segments": segments, "device_traces": [trace]}, protocol=4))
    return path


@pytest.mark.parametrize("core", ["c", "python"])
def test_empty_cache_told_by_its_frames_frees_everything_under_max_split_size(tmp_path, core):
    """Replayed with max_split_size_mb:128. PyTorch: the program's emptyCache -> release_cached_blocks frees
    all three; L, n and m each cudaMalloc (1,100 + 200 + 30 = 1,330 MiB peak; 6 device allocations). Taken
    for an OOM retry, the run becomes release_available_cached_blocks(1,100 MiB): the oversize blocks
    largest first, 600 + 500 >= 1,100, so the 120 MiB block stays; m splits it (30 < 128 MiB, 90 MiB left >
    kSmallSize): 120 + 1,100 + 200 = 1,420 MiB, 5 device allocations."""
    res = simulate([program(tmp_path, EMPTY)], policy=["torch"], conf="max_split_size_mb:128", torch_core=core).value
    row = res.policies[0]
    assert (row["peak_reserved_bytes"], row["device_allocs"]) == (1330 * MiB, 6)
    rel = res.validation["recorded_releases"]
    assert rel["by_kind"] == {"empty_cache": rel["by_kind"]["empty_cache"]} and rel["decided_by"]["frames"] == 1
    without = simulate([program(tmp_path, None)], policy=["torch"], conf="max_split_size_mb:128",
                       torch_core=core).value
    assert (without.policies[0]["peak_reserved_bytes"], without.policies[0]["device_allocs"]) == (1420 * MiB, 5)
    assert without.validation["recorded_releases"]["decided_by"] == {**without.validation["recorded_releases"]["decided_by"],
                                                                    "frames": 0, "rule": 1}
    assert "oom_retry" in without.validation["recorded_releases"]["by_kind"]


def test_a_malloc_s_frames_keep_the_run_inside_the_malloc(tmp_path):
    """The same run with the allocating op's frames: a retry inside L's malloc, as the rule says."""
    res = simulate([program(tmp_path, OP)], policy=["torch"]).value
    rel = res.validation["recorded_releases"]
    assert "oom_retry" in rel["by_kind"] and rel["decided_by"]["frames"] == 1
    assert res.validation["reproduced"] == 6


def test_frames_verdict():
    assert rl.frames_verdict(EMPTY) == "empty_cache"
    assert rl.frames_verdict([{"name": "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::emptyCache()"}]) \
        == "empty_cache"
    assert rl.frames_verdict(OP) == "malloc"
    assert rl.frames_verdict([]) is None and rl.frames_verdict(None) is None


@pytest.mark.parametrize("program", [{"headroom": 0.9}, {"headroom": 0.7, "empty_cache_p": 0.6},
                                     {"headroom": 1.2, "settings": "gc"}])
def test_programs_with_frames_are_classified_exactly_as_made(tmp_path, program):
    """The reference allocator (veotrace.synth.caching) recording the stacks PyTorch gathers: every run of
    releases is classified as the program made it, including the runs the entries alone cannot tell
    (an empty_cache() right before a malloc that needs a new segment past the trace's peak reads as an
    OOM retry without frames)."""
    from collections import Counter

    from test_releases import kinds, validation

    from veotrace.synth.caching import Program, Settings, run_program

    if program.get("settings") == "gc":
        program = dict(program, settings=Settings(gc_threshold=0.5, fraction=0.8))
    for seed in range(4):
        snap, truth = run_program(Program(seed=seed, frames=True, **program))
        path = tmp_path / f"p{seed}.pickle"
        path.write_bytes(pickle.dumps(snap, protocol=4))
        v = validation(path)
        assert Counter(kinds(v)) == Counter(truth.releases), seed
        assert v["recorded_releases"]["decided_by"]["rule"] == 0 and v["meets_targets"], seed
