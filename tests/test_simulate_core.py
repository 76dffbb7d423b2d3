"""The compiled torch core (_torchcore.c) against the Python reference model: same events, same counters.

Both cores replay the same requests; every event (request, op, model address, size, stream, block bytes)
and every counter must be equal, on the real traces and on seeded random traces with frees, several
streams and devices, recorded releases, a capacity (retries, flushes, OOMs), max_split_size,
max_non_split_rounding_size and roundup_power2_divisions, expandable segments (pages mapped and unmapped)
and garbage_collection_threshold under a memory fraction.
"""

from __future__ import annotations

import dataclasses
import json
import random

import numpy as np
import pytest
from conftest import SAMPLES, real_trace, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from veotrace.allocators import replay as rp
from veotrace.allocators.base import EV_SEGMENT_ALLOC, EV_SEGMENT_MAP, EV_SEGMENT_UNMAP, Recorder
from veotrace.allocators.builder import build_requests
from veotrace.allocators.conf import TorchConf, parse_conf
from veotrace.allocators.requests import REQ_FREE, REQ_MALLOC, REQ_RELEASE, Requests
from veotrace.allocators.simulate import make_policy
from veotrace.allocators.torch import get_allocation_size, round_size
from veotrace.allocators.torchcore import CoreRecorder, _torchcore, choose_core

MiB = 1 << 20
SAMPLE = SAMPLES / "simulate" / "training_log.csv"
needs_c = pytest.mark.skipif(_torchcore is None, reason="the compiled core is not built (no C compiler at install)")

CONFS = ["", "max_split_size_mb:20", "max_split_size_mb:64,max_non_split_rounding_mb:100",
         "roundup_power2_divisions:4", "roundup_power2_divisions:[1:1,64:8,256:4,>:2]",
         "max_split_size_mb:40,roundup_power2_divisions:[2:16,>:1],max_non_split_rounding_mb:20"]
ES_CONFS = ["expandable_segments:True", "expandable_segments:True,max_split_size_mb:20",
            "expandable_segments:True,roundup_power2_divisions:4",
            "expandable_segments:True,max_split_size_mb:64,max_non_split_rounding_mb:100,"
            "roundup_power2_divisions:[1:1,64:8,>:2]"]
GC_CONFS = ["garbage_collection_threshold:0.5,per_process_memory_fraction:1.0",
            "garbage_collection_threshold:0.8,max_split_size_mb:20,per_process_memory_fraction:0.9",
            "garbage_collection_threshold:0.6,roundup_power2_divisions:4,per_process_memory_fraction:0.7",
            "garbage_collection_threshold:0.7,expandable_segments:True,per_process_memory_fraction:0.8",
            "per_process_memory_fraction:0.6", "expandable_segments:True,per_process_memory_fraction:0.5"]


def replay_core(req: Requests, conf: TorchConf, capacity, core: str, seed=None):
    """(events as an (n, 6) array, {device: PolicyCounters}) of the torch policy on one core."""
    rec = CoreRecorder() if core == "c" else Recorder()
    models, parts = {}, []
    for _ in rp.iter_replay(lambda d: make_policy("torch", d, req, rec, conf=conf, capacity=capacity, seed=seed,
                                                  tiers=None, core=core), req, models):
        parts.append(rec.drain())
    return np.concatenate(parts), {d: m.c for d, m in models.items()}


def assert_same(req: Requests, conf: TorchConf, capacity=None, seed=None) -> dict:
    ev_c, counters_c = replay_core(req, conf, capacity, "c", seed)
    ev_py, counters_py = replay_core(req, conf, capacity, "python", seed)
    assert ev_c.shape == ev_py.shape
    diff = np.flatnonzero((ev_c != ev_py).any(axis=1))
    assert not len(diff), f"first differing event {diff[0]}: c {ev_c[diff[0]].tolist()} python {ev_py[diff[0]].tolist()}"
    assert counters_c == counters_py
    return counters_c


def random_requests(seed: int, n: int, streams: int, devices: int, releases: bool) -> Requests:
    """A seeded alloc/free sequence: sizes from 1 B to 300 MiB (some repeated exactly), frees of random live
    blocks, and optionally recorded releases (empty_cache and OOM retries)."""
    rng = random.Random(seed)
    req = Requests()
    live: dict[int, list[int]] = {d: [] for d in range(devices)}
    seen: list[int] = []
    for i in range(n):
        d = rng.randrange(devices)
        r = rng.random()
        if live[d] and r < 0.45:
            j = live[d].pop(rng.randrange(len(live[d])))
            req.add(REQ_FREE, 0, req.stream[j], d, j, 0, i, i)
        elif releases and r < 0.48:
            # every kind of recorded release (allocators.releases), some not followed (negative), the partial
            # ones with the segments they freed: sizes of segments the model makes, on any stream
            kind = rng.choice([0, 1, 2, 3, 4, -2, -4])
            at = req.add(REQ_RELEASE, kind, 0, d, -1, 0, i, i)
            if kind in (2, 3):
                for _ in range(rng.randint(1, 3)):
                    size = get_allocation_size(round_size(rng.choice(seen), TorchConf())) if seen else 2 * MiB
                    req.rel.extend((at, rng.randrange(1 << 40), size, rng.randrange(streams)))
        else:
            band = rng.random()
            if seen and band < 0.25:
                size = rng.choice(seen)
            elif band < 0.5:
                size = rng.randint(1, MiB)
            elif band < 0.75:
                size = rng.randint(MiB + 1, 10 * MiB)
            elif band < 0.95:
                size = rng.randint(10 * MiB, 120 * MiB)
            else:
                size = rng.randint(120 * MiB, 300 * MiB)
            seen.append(size)
            live[d].append(req.add(REQ_MALLOC, size, rng.randrange(streams), d, -1, 0, i, i))
    return req


@needs_c
@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32), n=st.integers(1, 1500), streams=st.integers(1, 3), devices=st.integers(1, 5),
       releases=st.booleans(), conf=st.sampled_from(CONFS),
       capacity=st.sampled_from([None, 64 * MiB, 300 * MiB, 1 << 30]), exact=st.booleans())
def test_random_traces_give_the_same_events_on_both_cores(seed, n, streams, devices, releases, conf, capacity, exact):
    conf = parse_conf(conf) if conf else TorchConf()
    req = random_requests(seed, n, streams, devices, releases)
    req.release_conf = conf if exact else None  # the recorded settings replay partial releases as recorded
    assert_same(req, conf, capacity)


@needs_c
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32), n=st.integers(1, 1500), streams=st.integers(1, 3), devices=st.integers(1, 4),
       releases=st.booleans(), conf=st.sampled_from(ES_CONFS),
       capacity=st.sampled_from([None, 64 * MiB, 300 * MiB, 1 << 30]))
def test_random_traces_with_expandable_segments_give_the_same_events_on_both_cores(seed, n, streams, devices,
                                                                                  releases, conf, capacity):
    assert_same(random_requests(seed, n, streams, devices, releases), parse_conf(conf), capacity)


@needs_c
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32), n=st.integers(1, 1500), streams=st.integers(1, 3), devices=st.integers(1, 4),
       releases=st.booleans(), conf=st.sampled_from(GC_CONFS), capacity=st.sampled_from([64 * MiB, 300 * MiB, 1 << 30]),
       exact=st.booleans())
def test_random_traces_with_a_gc_threshold_give_the_same_events_on_both_cores(seed, n, streams, devices, releases,
                                                                             conf, capacity, exact):
    req = random_requests(seed, n, streams, devices, releases)
    req.release_conf = parse_conf(conf) if exact else None
    assert_same(req, parse_conf(conf), capacity)


@needs_c
@pytest.mark.slow
def test_many_seeded_traces_with_expandable_segments_and_gc_give_the_same_events_on_both_cores():
    """A longer sweep (about 40 s): 2,000 seeded cases over every expandable and GC setting and some
    mixed ones, growing and steady-state sequences, capacities from 32 MiB (requests past the segment's
    range) to none, some seeded with snapshot segments on two devices."""
    from veotrace.allocators.seed import Seed

    rng = random.Random(27)
    confs = ES_CONFS + GC_CONFS + ["expandable_segments:True,garbage_collection_threshold:0.5,max_split_size_mb:20,"
                                   "per_process_memory_fraction:0.9",
                                   "garbage_collection_threshold:0.9,max_split_size_mb:100,max_non_split_rounding_mb:40,"
                                   "roundup_power2_divisions:[1:2,16:4,>:8],per_process_memory_fraction:0.95"]
    seeded = Seed(segments=[(0, 1 << 40, 20 * MiB, 0, False), (0, (1 << 40) + 64 * MiB, 2 * MiB, 1, True),
                            (1, 1 << 41, 40 * MiB, 0, False)])
    for _ in range(2000):
        conf = parse_conf(rng.choice(confs))
        cap = rng.choice([None, 32 * MiB, 64 * MiB, 200 * MiB, 512 * MiB, 1 << 30, 3 << 30])
        s = rng.randrange(2**32)
        if rng.random() < 0.5:
            req = random_requests(s, rng.randint(1, 4000), rng.randint(1, 4), rng.randint(1, 4), rng.random() < 0.5)
        else:
            req = bounded_requests(s, rng.randint(1, 4000), rng.randint(1, 40), rng.randint(1, 3))
        assert_same(req, conf, cap, seed=seeded if rng.random() < 0.2 else None)


@needs_c
@pytest.mark.parametrize("conf", ["", "max_split_size_mb:20", "expandable_segments:True",
                                  "expandable_segments:True,max_split_size_mb:20,roundup_power2_divisions:4",
                                  "garbage_collection_threshold:0.5,per_process_memory_fraction:0.9",
                                  "garbage_collection_threshold:0.6,expandable_segments:True,per_process_memory_fraction:0.9"])
def test_capacity_paths_are_exercised_and_equal(conf):
    """The fixed cases that must reach every capacity path: retries, flushes, released (or unmapped)
    segments and OOMs; with expandable segments, pages mapped (several per request) and unmapped."""
    totals = {"alloc_retries": 0, "flushes": 0, "device_frees": 0, "ooms": 0}
    ops = set()
    for seed in range(6):
        req = random_requests(seed, 3000, 2, 1, True)
        counters = assert_same(req, parse_conf(conf) if conf else TorchConf(), 256 * MiB)
        for k in totals:
            totals[k] += getattr(counters[0], k)
        ops |= set(replay_core(req, parse_conf(conf) if conf else TorchConf(), 256 * MiB, "c")[0][:, 1].tolist())
    assert all(v > 0 for v in totals.values()), totals
    expandable = "expandable" in conf
    assert ({EV_SEGMENT_MAP, EV_SEGMENT_UNMAP} <= ops) == expandable
    assert (EV_SEGMENT_ALLOC in ops) != expandable


def bounded_requests(seed: int, n: int, live_max: int, streams: int) -> Requests:
    """A seeded steady-state sequence on one device: 2-60 MiB allocations, at most ``live_max`` live."""
    rng = random.Random(seed)
    req, live = Requests(), []
    for i in range(n):
        if len(live) >= live_max or (live and rng.random() < 0.4):
            j = live.pop(rng.randrange(len(live)))
            req.add(REQ_FREE, 0, req.stream[j], 0, j, 0, i, i)
        else:
            live.append(req.add(REQ_MALLOC, rng.randint(2 * MiB, 60 * MiB), rng.randrange(streams), 0, -1, 0, i, i))
    return req


@needs_c
@pytest.mark.parametrize("conf", ["garbage_collection_threshold:0.5,per_process_memory_fraction:0.99",
                                  "garbage_collection_threshold:0.5,max_split_size_mb:20,per_process_memory_fraction:0.99"])
def test_the_gc_threshold_frees_blocks_on_both_cores(conf):
    """garbage_collection_threshold changes the run (it frees old cached segments before a new one, so the
    capacity is never reached and nothing is flushed), and both cores do it the same."""
    gc = parse_conf(conf)
    base = dataclasses.replace(gc, garbage_collection_threshold=0.0, per_process_memory_fraction=None)
    for seed in range(3):
        req = bounded_requests(seed, 3000, 16, 2)
        with_gc, without = assert_same(req, gc, 1 << 30)[0], assert_same(req, base, 1 << 30)[0]
        assert with_gc.device_frees > 2 * without.device_frees
        assert with_gc.flushes == 0 < without.flushes
        assert with_gc.peak_reserved < without.peak_reserved


@needs_c
def test_expandable_segments_past_capacity_and_seeded_segments_are_equal():
    """Expandable segments next to seeded (non-expandable) segments of a part-way trace, on two devices:
    best fit walks from pages of an expandable segment to a seeded block (the Python model once erased the
    wrong entry there); and requests past the capacity (each OOM maps pages anyway)."""
    from veotrace.allocators.seed import Seed

    seed = Seed(segments=[(0, 1 << 40, 20 * MiB, 0, False), (0, (1 << 40) + 64 * MiB, 2 * MiB, 0, True),
                          (1, 1 << 41, 40 * MiB, 1, False)])
    conf = parse_conf("expandable_segments:True")
    for s in range(4):
        assert_same(random_requests(s, 800, 2, 2, True), conf, seed=seed)
        assert assert_same(random_requests(s, 800, 2, 2, True), conf, 128 * MiB, seed=seed)[0].ooms > 0


@needs_c
def test_seeded_devices_give_the_same_events_on_both_cores():
    """Seeding events of several devices (requests -1, -2) come in the order the models were made."""
    from veotrace.allocators.seed import Seed

    seed = Seed(segments=[(0, 1 << 40, 20 * MiB, 0, False), (1, 1 << 41, 20 * MiB, 0, False)])
    assert_same(random_requests(1, 200, 1, 2, False), TorchConf(), seed=seed)


@needs_c
def test_max_split_size_past_2_63_is_no_limit_on_both_cores():
    """A max_split_size_mb whose bytes pass 2^63 (but not 2^64) must not wrap to a negative int64 in C."""
    conf = parse_conf("max_split_size_mb:9000000000000")
    assert 1 << 63 < conf.max_split_size < (1 << 64) - 1
    for seed in range(3):
        assert assert_same(random_requests(seed, 2000, 2, 1, True), conf, 256 * MiB)[0].device_frees > 0


@needs_c
@pytest.mark.parametrize("name", ["cranberrii_memory_snapshot.pickle", "maphsge4_snapshot.pickle",
                                  "constructorsun_memory_snapshot.pickle", "magma27_memory_snapshot.pickle"])
def test_real_traces_give_the_same_events_on_both_cores(name):
    """Replays of the real traces seeded as simulate seeds them, and unseeded (frees of unknown blocks
    ignored), with and without recorded releases, under the snapshot's settings (constructorsun's:
    expandable segments, on 3 devices, ending in an OOM), the defaults, and options and a capacity that make
    the model split, round, release, map and unmap pages and garbage collect (expandable segments next to a
    seeded snapshot's segments, too)."""
    from veotrace.runs.simulate import load_trace
    from veotrace.sources import ReadOptions, ReadReport

    table, conf, _, seed = load_trace([real_trace(name)], ReadOptions(), ReadReport(), None)
    seeds = [(d, a, s, st) for d, a, s, st, _ in seed.live]
    others = [parse_conf(c) for c in ("max_split_size_mb:20,roundup_power2_divisions:4", "expandable_segments:True",
                                      "expandable_segments:True,max_split_size_mb:64,roundup_power2_divisions:4",
                                      "garbage_collection_threshold:0.6,per_process_memory_fraction:0.9",
                                      "garbage_collection_threshold:0.8,max_split_size_mb:100,expandable_segments:True,"
                                      "per_process_memory_fraction:0.9")]
    for with_seed in (True, False):
        for use_releases in (True, False):
            req = build_requests(table, seeds=seeds if with_seed else [], max_unknown_frees=1.0,
                                    use_releases=use_releases)
            s = seed if with_seed else None
            for c in (TorchConf(), conf):
                assert_same(req, c, seed=s)
            for other in others:
                peak = assert_same(req, other, seed=s)[0].peak_reserved
                assert_same(req, other, peak // 2, seed=s)


def test_validation_with_a_gc_threshold_gives_the_same_result_on_both_cores():
    """Validation's run without recorded releases has a capacity (the trace's peaks), which with a memory
    fraction turns garbage_collection_threshold on: the compiled core runs it, with the Python model's result."""
    from veotrace.allocators.validation import validate
    from veotrace.runs.simulate import load_trace
    from veotrace.sources import ReadOptions, ReadReport

    table, conf, _, seed = load_trace([real_trace("maphsge4_snapshot.pickle")], ReadOptions(), ReadReport(), None)
    gc = parse_conf("garbage_collection_threshold:0.5,per_process_memory_fraction:0.9", base=conf)
    auto, python = validate(table, seed, gc, torch_core="auto"), validate(table, seed, gc, torch_core="python")
    assert python["torch_core"] == "python"
    assert auto["torch_core"] == ("c" if _torchcore is not None else "python")
    assert {**auto, "torch_core": None} == {**python, "torch_core": None}


def test_choose_core_is_the_one_decision():
    assert choose_core(TorchConf(), None, "python") == ("python", "asked for (--torch-core python)")
    expected = "c" if _torchcore is not None else "python"
    es, gc = parse_conf("expandable_segments:True"), parse_conf("garbage_collection_threshold:0.5")
    for conf, capacity in ((es, None), (es, 80 << 30), (gc, 1 << 30), (gc, None), (TorchConf(), None)):
        assert choose_core(conf, capacity)[0] == choose_core(conf, capacity, "c")[0] == expected
    far = choose_core(es, (1 << 50) + 1)
    assert far[0] == "python" and "2^50" in far[1]
    assert choose_core(gc, (1 << 50) + 1)[0] == expected  # only expandable segments take address space
    assert choose_core(es, {0: 1 << 30, 1: (1 << 50) + 1})[0] == "python"  # validation's capacity per device
    assert choose_core(es, {0: 1 << 30})[0] == expected


def test_cli_says_which_core_ran_and_both_give_the_same_result():
    runs = {}
    for core in ("auto", "python"):
        r = run_cli("simulate", SAMPLE, "-p", "torch", "--capacity", "200MiB", "-f", "json", "--torch-core", core)
        assert r.exit_code == 0, r.stderr
        runs[core] = json.loads(r.stdout)
    assert runs["python"]["params"]["torch_core"] == "python"
    assert runs["auto"]["params"]["torch_core"] == ("c" if _torchcore is not None else "python")
    assert runs["auto"]["policies"] == runs["python"]["policies"]
    assert runs["auto"]["windows"] == runs["python"]["windows"]
    runs = {}
    for core in ("auto", "python"):
        r = run_cli("simulate", SAMPLE, "-p", "torch", "-f", "json", "--conf",
                    "expandable_segments:True,garbage_collection_threshold:0.5,per_process_memory_fraction:0.9",
                    "--capacity", "200MiB",
                    "--torch-core", core)
        assert r.exit_code == 0, r.stderr
        runs[core] = json.loads(r.stdout)
    assert runs["auto"]["params"]["torch_core"] == ("c" if _torchcore is not None else "python")
    assert runs["auto"]["policies"] == runs["python"]["policies"]
    assert runs["auto"]["windows"] == runs["python"]["windows"]


@needs_c
def test_cli_on_the_expandable_snapshot_with_its_oom_is_the_same_on_both_cores():
    """constructorsun was recorded with expandable_segments:True on 3 devices and ends in an OOM: simulate
    under its own settings (validation, the recorded OOM's what-if, windows) runs compiled and prints what
    the Python model prints."""
    runs = {}
    for core in ("auto", "python"):
        r = run_cli("simulate", real_trace("constructorsun_memory_snapshot.pickle"), "-p", "torch", "-f", "json",
                    "--torch-core", core)
        assert r.exit_code == 0, r.stderr
        runs[core] = json.loads(r.stdout)
    auto, python = runs["auto"], runs["python"]
    assert auto["params"]["torch_conf"]["expandable_segments"] is True
    assert auto["params"]["torch_core"] == auto["validation"]["torch_core"] == "c"
    assert python["params"]["torch_core"] == python["validation"]["torch_core"] == "python"
    assert auto["params"]["recorded_ooms"] and auto["params"]["recorded_ooms"] == python["params"]["recorded_ooms"]
    for key in ("policies", "whatif", "windows", "notes"):
        assert auto[key] == python[key], key
    assert {**auto["validation"], "torch_core": None} == {**python["validation"], "torch_core": None}


def test_cli_unknown_core_is_one_error_line():
    r = run_cli("simulate", SAMPLE, "--torch-core", "gpu")
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines()[0] == "Error: unknown --torch-core 'gpu'. Cores are auto, c, python"


def test_divisions_beyond_a_c_int_run_the_python_core():
    import dataclasses

    from veotrace.allocators.conf import TorchConf
    from veotrace.allocators.torchcore import C_INT_MAX, choose_core

    big = dataclasses.replace(TorchConf(), roundup_power2_divisions=(C_INT_MAX + 1,) + (0,) * 15)
    assert choose_core(big, None)[0] == "python"
    fits = dataclasses.replace(TorchConf(), roundup_power2_divisions=(C_INT_MAX,) + (0,) * 15)
    assert choose_core(fits, None)[0] == ("c" if choose_core(TorchConf(), None)[0] == "c" else "python")


def test_python_model_keeps_its_pools_whole_with_seeded_and_expandable_segments():
    """Best fit with expandable segments may walk from the first fitting block to a later one; the Python
    model then erased the first one's entry instead (KeyError later) when the later block was a seeded,
    non-expandable one. Every cached block stays listed once, under its own (size, address)."""
    from veotrace.allocators.seed import Seed

    seed = Seed(segments=[(0, 1 << 40, 20 * MiB, 0, False), (0, (1 << 40) + 64 * MiB, 2 * MiB, 0, True)])
    conf = parse_conf("expandable_segments:True")
    for s in range(4):
        req = random_requests(s, 800, 2, 1, True)
        models, rec = {}, Recorder()
        for _ in rp.iter_replay(lambda d, req=req, rec=rec: make_policy("torch", d, req, rec, conf=conf, capacity=None,
                                                                        seed=seed, tiers=None, core="python"),
                                req, models):
            rec.drain()
        for pool in (models[0].large_blocks, models[0].small_blocks):
            listed = sorted(a for lst in pool.keys.values() for _, a in lst)
            assert listed == sorted(pool.free)
            assert all((b.size, b.addr) in pool.keys[b.stream] for b in pool.free.values())
