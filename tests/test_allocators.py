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
    per_interval = parse_conf("roundup_power2_divisions:[256:1,512:2,>:8]")
    # as parseRoundUpPower2Divisions does: '>' fills from the last named interval on, so 512 MiB gets 8 too
    assert per_interval.divisions_for(300 * MiB) == 1 and per_interval.divisions_for(600 * MiB) == 8
    assert per_interval.divisions_for(8 << 30) == 8 and per_interval.divisions_for(2 * MiB) == 1


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
    m = model("garbage_collection_threshold:0.5", capacity=100 * MiB)
    m.free(m.malloc(12 * MiB, 0))
    m.malloc(40 * MiB, 0)  # reserved 12 MiB <= 50 MiB: no collection yet
    m.malloc(14 * MiB, 0)  # 52 MiB > 50 MiB: the unused 12 MiB block goes back first
    assert ("segment_free", 12 * MiB) in device_events(m)
    assert device_events(m)[-1] == ("segment_alloc", 14 * MiB)


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
    ("expandable:True", "unknown option 'expandable'"),
    ("max_split_size_mb:10", "too small, must be >= 20"),
    ("garbage_collection_threshold:1.5", "in (0.0, 1.0)"),
    ("roundup_power2_divisions:3", "power of 2"),
    ("expandable_segments:yes", "True or False"),
    ("max_split_size_mb", "needs a value"),
])
def test_parse_conf_refuses_what_pytorch_refuses(text, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_conf(text)
