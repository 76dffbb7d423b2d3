"""The torch model against PyTorch's rules, on hand-made request sequences with known outcomes."""

from __future__ import annotations

import pytest

from veotrace.allocators import base
from veotrace.allocators.conf import TorchConf, from_settings, parse_conf
from veotrace.allocators.torch import TorchAllocator, get_allocation_size, round_size, roundup_power2_next_division
from veotrace.errors import UsageError

MiB = 1 << 20


def model(conf: str | None = None, capacity: int | None = None) -> TorchAllocator:
    return TorchAllocator(parse_conf(conf) if conf else TorchConf(), capacity=capacity, rec=base.Recorder())


def device_events(m: TorchAllocator) -> list[tuple[str, int]]:
    return [(base.EV_NAMES[op], size) for _, op, _, size, _, _ in m.rec.events if op >= base.EV_SEGMENT_ALLOC]


def test_round_size_512_and_power2_divisions():
    conf = TorchConf()
    assert round_size(1, conf) == 512 and round_size(512, conf) == 512
    assert round_size(600, conf) == 1024
    assert roundup_power2_next_division(1200, 4) == 1280  # PyTorch's own example
    assert roundup_power2_next_division(4096, 4) == 4096
    four = parse_conf("roundup_power2_divisions:4")
    assert round_size(5 * MiB + 1, four) == 6 * MiB  # 4..8 MiB in steps of 1 MiB



@pytest.mark.parametrize("release, table", [
    # what each release's parseRoundUpPower2Divisions makes of the list (measured on the release builds): the
    # first named value fills the intervals before it; up to 2.9 '>' fills from the last named interval
    # (overwriting 512 MiB's 2), from 2.10 from the interval after it
    ("2.9", (1,) * 9 + (8,) * 7), ("2.10", (1,) * 9 + (2,) + (8,) * 6), ("2.0", (1,) * 9 + (8,) * 7)])
def test_roundup_power2_divisions_list_form_by_release(release, table):
    per_interval = parse_conf("roundup_power2_divisions:[256:1,512:2,>:8]", torch_release=release)
    assert per_interval.roundup_power2_divisions == table
    assert per_interval.divisions_for(300 * MiB) == 1 and per_interval.divisions_for(600 * MiB) == table[9]
    docs = parse_conf("roundup_power2_divisions:[64:8,256:4,1024:4,>:1]", torch_release=release).roundup_power2_divisions
    assert docs == ((8,) * 7 + (0, 4, 0) + ((1,) * 6 if release != "2.10" else (4,) + (1,) * 5))
    only = parse_conf("roundup_power2_divisions:[>:8]", torch_release=release).roundup_power2_divisions
    assert only == ((8,) * 16 if release != "2.10" else (0,) + (8,) * 15)


def test_get_allocation_size_pools():
    assert get_allocation_size(MiB) == 2 * MiB  # small pool: 2 MiB segments
    assert get_allocation_size(MiB + 512) == 20 * MiB  # 1-10 MiB: a 20 MiB segment
    assert get_allocation_size(10 * MiB) == 10 * MiB
    assert get_allocation_size(11 * MiB + 1) == 12 * MiB  # larger: rounded up to 2 MiB


def test_one_mib_plus_one_goes_to_the_large_pool_from_a_20_mib_segment():
    m = model()
    a = m.malloc(MiB + 1, 0)
    assert a.pool is m.large_blocks and a.size == MiB + 512
    b = m.malloc(MiB + 1, 0)  # served by the split remainder, no new segment
    assert device_events(m) == [("segment_alloc", 20 * MiB)]
    assert b.addr == a.addr + a.size


def test_small_request_packs_into_a_2_mib_segment():
    m = model()
    a = m.malloc(600, 0)
    assert a.size == 1024 and a.pool is m.small_blocks
    assert device_events(m) == [("segment_alloc", 2 * MiB)]
    assert m.c.allocated == 1024 and m.c.reserved == 2 * MiB


def test_best_fit_and_remainder_below_threshold_not_split():
    m = model()
    blocks = [m.malloc(s * MiB, 0) for s in (12, 16, 14)]
    for b in blocks:
        m.free(b)
    got = m.malloc(13 * MiB, 0)  # best fit: the 14 MiB block, not the 16 MiB one
    assert got.addr == blocks[2].addr
    assert got.size == 14 * MiB  # 1 MiB left is not > kSmallSize: not split
    assert len(device_events(m)) == 3


def test_streams_do_not_share_cached_blocks():
    m = model()
    m.free(m.malloc(12 * MiB, 0))
    m.malloc(12 * MiB, 7)
    assert [e for e in device_events(m)] == [("segment_alloc", 12 * MiB)] * 2


def test_free_merges_neighbours_and_empty_cache_releases_the_segment():
    m = model()
    a, b = m.malloc(2 * MiB, 0), m.malloc(2 * MiB, 0)
    m.free(a)
    m.release_cached_blocks()  # the segment is split (b still live): nothing to release
    assert device_events(m) == [("segment_alloc", 20 * MiB)]
    m.free(b)
    assert len(m.large_blocks.free) == 1  # merged back into one 20 MiB block
    m.release_cached_blocks()
    assert device_events(m)[-1] == ("segment_free", 20 * MiB) and m.c.reserved == 0


def test_max_split_size_oversize_rules():
    m = model("max_split_size_mb:20")
    m.free(m.malloc(40 * MiB, 0))
    m.malloc(12 * MiB, 0)  # smaller than max_split_size: must not take the 40 MiB oversize block
    assert device_events(m)[-1] == ("segment_alloc", 12 * MiB)
    m2 = model("max_split_size_mb:20")
    m2.free(m2.malloc(60 * MiB, 0))
    m2.malloc(30 * MiB, 0)  # 60 >= 30 + kLargeBuffer: not reused
    assert device_events(m2)[-1] == ("segment_alloc", 30 * MiB)
    m3 = model("max_split_size_mb:20")
    m3.free(m3.malloc(40 * MiB, 0))
    got = m3.malloc(30 * MiB, 0)  # within kLargeBuffer: reused whole, not split
    assert got.size == 40 * MiB and len(device_events(m3)) == 1


def test_capacity_frees_cached_blocks_and_retries_then_reports_oom():
    m = model(capacity=40 * MiB)
    m.free(m.malloc(24 * MiB, 0))
    live = m.malloc(30 * MiB, 0)  # 24 + 30 > 40: release_cached_blocks, then the retry fits
    assert device_events(m) == [("segment_alloc", 24 * MiB), ("segment_free", 24 * MiB), ("segment_alloc", 30 * MiB)]
    assert m.c.flushes == 1 and m.c.ooms == 0
    m.rec.req = 9
    m.malloc(30 * MiB, 0)
    assert m.c.ooms == 1 and m.c.first_oom["request"] == 9 and live.allocated


def test_garbage_collection_threshold_frees_old_cached_blocks():
    """malloc runs garbage_collect_cached_blocks only under a memory fraction (set_fraction); its threshold is
    garbage_collection_threshold x allowed_memory_maximum: 0.5 x (0.5 x 200 MiB) = 50 MiB."""
    m = model("garbage_collection_threshold:0.5,per_process_memory_fraction:0.5", capacity=200 * MiB)
    m.free(m.malloc(12 * MiB, 0))
    m.malloc(40 * MiB, 0)  # reserved 12 MiB <= 50 MiB: no collection yet
    m.malloc(14 * MiB, 0)  # 52 MiB > 50 MiB: the unused 12 MiB block goes back first
    assert ("segment_free", 12 * MiB) in device_events(m)
    assert device_events(m)[-1] == ("segment_alloc", 14 * MiB)


def test_garbage_collection_threshold_alone_does_nothing():
    """The same program with the threshold and a device's memory but no fraction: PyTorch's malloc tests
    set_fraction first, so nothing is collected (only the 12 MiB block is reused, never released)."""
    m = model("garbage_collection_threshold:0.5", capacity=100 * MiB)
    m.free(m.malloc(12 * MiB, 0))
    m.malloc(40 * MiB, 0)
    m.malloc(14 * MiB, 0)
    assert [e for e in device_events(m) if e[0] == "segment_free"] == []
    assert m.gc_on is False


@pytest.mark.parametrize("release, fraction, limited", [("2.9", 1.0, True), ("2.10", 1.0, False), ("2.10", 0.5, True)])
def test_a_fraction_of_one_limits_only_up_to_2_9(release, fraction, limited):
    """setMemoryFraction: up to 2.9 any fraction sets set_fraction (and GC with it); from 2.10 a fraction of
    1.0 leaves allowed_memory_maximum empty."""
    from dataclasses import replace

    conf = replace(TorchConf(torch_release=release), per_process_memory_fraction=fraction,
                   garbage_collection_threshold=0.6)
    assert (conf.allowed_maximum(100 * MiB) is not None) == limited
    assert (conf.gc_threshold_bytes(100 * MiB) == int(0.6 * int(fraction * 100 * MiB))) == limited


def test_the_allowed_maximum_is_checked_against_alloc_size_before_pages_are_mapped():
    """alloc_block: ``set_fraction && total_allocated_memory + p.alloc_size > allowed_memory_maximum`` comes before
    try_allocate_expandable_block, and map_block checks nothing. Device 1 GiB, fraction 115/1024: 115 MiB
    allowed. 90 MiB live maps five 20 MiB pages (100 MiB), 10 MiB of the last one free. malloc(12 MiB)
    misses (10 < 12); 100 + alloc_size 12 MiB = 112 <= 115: allowed; the segment then maps a whole 20 MiB
    page: 120 MiB reserved, past the allowed maximum, as PyTorch lets it. malloc(30 MiB) misses (18 MiB
    free); 120 + 30 > 115: refused, the retries unmap nothing (no whole free page) and it is an OOM. With
    the device's memory alone both fit (140 MiB)."""
    limited = model(f"expandable_segments:True,per_process_memory_fraction:{115 / 1024}", capacity=1 << 30)
    limited.malloc(90 * MiB, 0)
    limited.malloc(12 * MiB, 0)
    assert limited.c.ooms == 0 and limited.c.reserved == 120 * MiB
    limited.malloc(30 * MiB, 0)
    assert limited.c.ooms == 1
    free = model("expandable_segments:True", capacity=1 << 30)
    for size in (90, 12, 30):
        free.malloc(size * MiB, 0)
    assert free.c.ooms == 0 and free.c.reserved == 140 * MiB


def test_expandable_segments_map_20_mib_pages_like_the_real_trace():
    m = model("expandable_segments:True")
    a, b = m.malloc(16 * MiB, 0), m.malloc(16 * MiB, 0)
    assert device_events(m) == [("segment_map", 20 * MiB), ("segment_map", 20 * MiB)]
    assert b.addr == a.addr + 16 * MiB  # one segment that grows
    m.malloc(600, 0)
    assert device_events(m)[-1] == ("segment_map", 2 * MiB)
    m.free(a)
    m.free(b)
    m.release_cached_blocks()
    assert [e for e in device_events(m) if e[0] == "segment_unmap"] == [("segment_unmap", 40 * MiB)]
    assert m.c.reserved == 2 * MiB


def test_parse_conf_and_settings():
    c = parse_conf("expandable_segments:True, max_split_size_mb:128,garbage_collection_threshold:0.6")
    assert c.expandable_segments and c.max_split_size == 128 * MiB and c.garbage_collection_threshold == 0.6
    s = from_settings({"max_split_size": -1, "expandable_segments": True, "garbage_collection_threshold": 0.0,
                       "roundup_power2_divisions": {"1": 0, "2": 4, "4": 0}})
    assert s.expandable_segments and s.roundup_power2_divisions[1] == 4 and s.max_split_size == (1 << 64) - 1


@pytest.mark.parametrize("text, message", [
    ("expandable:True", "unknown option 'expandable' (torch 2.15: Unrecognized key 'expandable' in CUDA allocator"),
    ("max_split_size_mb:10", "too small, must be >= 20"),
    ("per_process_memory_fraction:1.5", "per_process_memory_fraction is invalid, set it in"),
    ("large_segment_size_mb:40", "option 'large_segment_size_mb': not modelled: it changes the 20 MiB segment"),
    ("garbage_collection_threshold:1.5", "in (0.0, 1.0)"),
    ("roundup_power2_divisions:3", "power of 2"),
    ("expandable_segments:yes", "True or False"),
    ("max_split_size_mb", "needs a value"),
])
def test_parse_conf_refuses_what_pytorch_refuses(text, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_conf(text)


@pytest.mark.parametrize("text, release, message", [
    ("max_split_size_mb:20", "2.9", "too small, must be > 20"),
    ("max_non_split_rounding_mb:64", "2.5", "first accepted by torch 2.6"),
    ("per_process_memory_fraction:0.9", "2.9", "first accepted by torch 2.10"),
    ("expandable_segments:True", "2.0", "first accepted by torch 2.1"),
    ("bogus:1", "2.4", "unknown option 'bogus' (torch 2.4: Unrecognized CachingAllocator option: bogus)"),
    ("roundup_power2_divisions:[256:0,>:2]", "2.3", "must be a power of 2"),
])
def test_parse_conf_refuses_what_each_release_refuses(text, release, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_conf(text, torch_release=release)
    parse_conf(text.replace(":20", ":21"), torch_release="2.15") if "bogus" not in text else None


def test_options_that_do_not_change_device_memory_are_accepted_and_named():
    conf = parse_conf("pinned_use_cuda_host_register:True,release_lock_on_cudamalloc:True,max_split_size_mb:64")
    assert conf.max_split_size == 64 * MiB
    assert [n.split(":")[0] for n in conf.notes] == ["pinned_use_cuda_host_register", "release_lock_on_cudamalloc"]
