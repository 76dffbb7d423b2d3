"""The driver's cudaMalloc addresses (issue 46 item 1), worked from CUDACachingAllocator.cpp: best fit walks
free blocks in BlockComparatorSize order (stream, size, then ``ptr``), so of two equal free blocks the one
at the lower address serves. Under the recorded settings a device allocation the recording made gets its
recorded pointer; one it never made gets the rule :func:`driver.learn` reads from the trace."""

from __future__ import annotations

import pytest
from test_releases import BASE, MiB, snapshot

from veotrace.allocators import driver as dv
from veotrace.allocators.builder import build_requests
from veotrace.allocators.conf import TorchConf
from veotrace.allocators.replay import replay
from veotrace.allocators.simulate import make_policy
from veotrace.allocators.torchcore import recorder_for
from veotrace.runs.simulate import simulate
from veotrace.sources.snapshots.torch_snapshot import events_table, load_snapshot


def freed(a: int, s: int) -> list[tuple]:
    return [("free_requested", a, s), ("free_completed", a, s)]


def minimal(tmp_path, descending: bool):
    """The issue's program (one device, stream 0, default settings): a = malloc(400 MiB) -> cudaMalloc X; free
    a; b, c = malloc(200 MiB) twice (b splits X, c takes the rest); d = malloc(200 MiB) -> cudaMalloc Y;
    free b, free d; e = malloc(200 MiB): two free 200 MiB blocks, get_free_block's lower_bound takes the one
    at the lower address; free c; f = malloc(400 MiB).
    - Y below X: e takes Y; freeing c merges X's halves into one free 400 MiB block (try_merge_blocks);
      f takes it. 2 cudaMalloc, 600 MiB peak reserved.
    - Y above X: e takes X's first half; c's free half cannot merge with it; f needs a third cudaMalloc Z.
      3 cudaMalloc, 1,000 MiB."""
    x = BASE + 4096 * MiB
    y = x - 1024 * MiB if descending else x + 1024 * MiB
    acts = [("segment_alloc", x, 400 * MiB), ("alloc", x, 400 * MiB), *freed(x, 400 * MiB),
            ("alloc", x, 200 * MiB), ("alloc", x + 200 * MiB, 200 * MiB),
            ("segment_alloc", y, 200 * MiB), ("alloc", y, 200 * MiB),
            *freed(x, 200 * MiB), *freed(y, 200 * MiB)]
    if descending:
        acts += [("alloc", y, 200 * MiB), *freed(x + 200 * MiB, 200 * MiB), ("alloc", x, 400 * MiB)]
        live = [(x, 400 * MiB, 400 * MiB), (y, 200 * MiB, 200 * MiB)]
    else:
        z = y + 1024 * MiB
        acts += [("alloc", x, 200 * MiB), *freed(x + 200 * MiB, 200 * MiB), ("segment_alloc", z, 400 * MiB),
                 ("alloc", z, 400 * MiB)]
        live = [(x, 400 * MiB, 200 * MiB), (y, 200 * MiB, 0), (z, 400 * MiB, 400 * MiB)]
    return snapshot(tmp_path, acts, live)


@pytest.mark.parametrize("core", ["c", "python"])
@pytest.mark.parametrize("descending, allocs, peak", [(True, 2, 600), (False, 3, 1000)])
def test_the_recorded_addresses_decide_the_tie_as_pytorch(tmp_path, core, descending, allocs, peak):
    res = simulate([minimal(tmp_path, descending)], policy=["torch"], torch_core=core).value
    v, row = res.validation, res.policies[0]
    assert (v["recorded_segment_allocs"], v["reproduced"], v["extra"]) == (allocs, allocs, 0)
    assert (row["device_allocs"], row["peak_reserved_bytes"]) == (allocs, peak * MiB)
    assert row["addresses"]["assumed_device_allocations"] == 0  # every cudaMalloc got its recorded pointer
    assert row["addresses"]["rule"]["0"]["direction"] == ("descending" if descending else "ascending")


def _replay(path, core: str, keep_recorded: bool):
    table = events_table(load_snapshot(path), "t")
    req = build_requests(table)
    if not keep_recorded:  # a what-if: none of the cudaMalloc calls is the recording's
        req.seg_addr = []
    rec = recorder_for("torch", core)
    models = replay(lambda d: make_policy("torch", d, req, rec, conf=TorchConf(), capacity=None, seed=None,
                                          tiers=None, core=core), req)
    return models[0].c


@pytest.mark.parametrize("core", ["c", "python"])
@pytest.mark.parametrize("descending, allocs", [(True, 2), (False, 3)])
def test_the_learned_direction_gives_assumed_addresses_and_counts_the_tie(tmp_path, core, descending, allocs):
    """Without the recorded pointers, the rule learned from the trace (Y below X: descending) places the
    second cudaMalloc below the first, and e's choice between the two equal 200 MiB blocks is a tie an
    assumed address decided: counted once."""
    c = _replay(minimal(tmp_path, descending), core, keep_recorded=False)
    assert c.device_allocs == allocs
    assert c.assumed_addresses == allocs
    assert c.assumed_ties == 1
    assert _replay(minimal(tmp_path, descending), core, keep_recorded=True).assumed_ties == 0


def test_learn_reads_the_direction_and_the_reuse_of_freed_ranges():
    down = dv.learn([("segment_alloc", 10 << 30, 2 << 20), ("segment_alloc", 9 << 30, 2 << 20),
                     ("segment_alloc", 8 << 30, 2 << 20)])
    assert (down.direction, down.fresh_down, down.fresh_up) == (dv.DESCENDING, 2, 0)
    up = dv.learn([("segment_alloc", 1 << 30, 2 << 20), ("segment_alloc", 2 << 30, 2 << 20)])
    assert up.direction == dv.ASCENDING
    reuse = dv.learn([("segment_alloc", 1 << 30, 4 << 20), ("segment_free", 1 << 30, 4 << 20),
                      ("segment_alloc", 1 << 30, 2 << 20)])
    assert (reuse.reuse, reuse.reused) == (True, 1)
    never = dv.learn([("segment_alloc", 1 << 30, 4 << 20), ("segment_free", 1 << 30, 4 << 20),
                      ("segment_alloc", 2 << 30, 2 << 20)])
    assert (never.reuse, never.not_reused) == (False, 1)
    assert dv.learn([]) == dv.DriverRule()


def test_a_same_size_driver_hands_a_range_freed_lately_again():
    d = dv.Driver(dv.DriverRule(dv.DESCENDING, False, True))
    a, b, c = d.take(4 << 20, 0), d.take(2 << 20, 1), d.take(4 << 20, 2)
    d.release(a)
    d.release(c)
    assert d.take(4 << 20, 3) == c  # the newest freed range of that size
    assert d.take(4 << 20, 4) == a
    assert d.take(2 << 20, 5) < min(a, b, c)  # no freed range of that size: the rule's direction


def test_the_rule_hands_out_ranges_from_its_end():
    d = dv.Driver(dv.DriverRule(dv.DESCENDING, True))
    a = d.take(4 << 20, 0)
    b = d.take(2 << 20, 1)
    assert b == a - (2 << 20)
    d.release(a)
    assert d.take(2 << 20, 2) == a + (2 << 20)  # the freed range, from its top
    up = dv.Driver(dv.DriverRule(dv.ASCENDING, False))
    p, q = up.take(2 << 20, 0), up.take(2 << 20, 1)
    up.release(p)
    assert up.take(2 << 20, 2) == q + (2 << 20)  # never reused: past the highest


def _driver_programs(tmp_path, driver: str, seeds, monkeypatch=None) -> list[dict]:
    """Validation of seeded programs on ``driver``; with ``monkeypatch``, the replay is given no recorded
    pointer (every cudaMalloc gets the rule's address, learned from the trace, as a what-if would)."""
    import pickle

    from test_releases import validation

    import veotrace.allocators.builder as builder
    from veotrace.synth.caching import Program, Settings, run_program

    if monkeypatch is not None:
        finish = builder.RequestBuilder.finish

        def rule_only(self, *a, **k):
            req = finish(self, *a, **k)
            req.seg_addr = []
            return req

        monkeypatch.setattr(builder.RequestBuilder, "finish", rule_only)
    out = []
    for seed in seeds:
        snap, truth = run_program(Program(seed=seed, headroom=1.5, empty_cache_p=0.5, ties=0.8,
                                          jitter=0.0 if seed % 2 else 0.25, settings=Settings(driver=driver)))
        addrs = [e["addr"] for e in snap["device_traces"][0] if e["action"] == "segment_alloc"]
        path = tmp_path / f"{driver}{seed}.pickle"
        path.write_bytes(pickle.dumps(snap, protocol=4))
        v = validation(path)
        assert v["recorded_segment_allocs"] == truth.device_allocs
        out.append({"v": v, "addrs": addrs})
    return out


def _check_driver_programs(runs: list[dict], driver: str) -> None:
    for r in runs:
        v = r["v"]
        assert v["share"] >= 0.95 and v["extra"] <= 0.05 * v["recorded_segment_allocs"], v
        rule = dv.learn([("segment_alloc", a, 1) for a in r["addrs"]])  # the trace's addresses go the driver's way
        assert (rule.fresh_down > rule.fresh_up) == (driver == "descending") or len(r["addrs"]) < 3


@pytest.mark.parametrize("driver", ["descending", "ascending"])
def test_the_rule_alone_reproduces_programs_on_either_driver(tmp_path, driver, monkeypatch):
    """The same programs with every address assumed (the rule learned from the trace's own segment entries,
    no recorded pointer used): the rule names the driver's addresses, so the targets hold too."""
    runs = _driver_programs(tmp_path, driver, range(2), monkeypatch)
    _check_driver_programs(runs, driver)
    assert all(r["v"]["assumed_addresses"]["device_allocations"] >= r["v"]["recorded_segment_allocs"] for r in runs)


@pytest.mark.slow
@pytest.mark.parametrize("driver", ["descending", "ascending"])
def test_twenty_seeds_with_the_rule_alone_meet_the_targets(tmp_path, driver, monkeypatch):
    _check_driver_programs(_driver_programs(tmp_path, driver, range(20), monkeypatch), driver)


@pytest.mark.parametrize("driver", ["descending", "ascending"])
def test_programs_on_either_driver_are_reproduced(tmp_path, driver):
    """Two seeds of the reference allocator (veotrace.synth.caching) on a device whose cudaMalloc hands out
    descending or ascending addresses and reuses freed ranges, with empty_cache() at random steps and the
    issue's tie in most steps. Before this issue (the model's own ascending addresses) the 20 seeds gave
    0 of 20 (descending: 508 of 536 reproduced, 80 extra) and 15 of 20 (ascending: 567 of 573, 15 extra)."""
    _check_driver_programs(_driver_programs(tmp_path, driver, range(2)), driver)


@pytest.mark.slow
@pytest.mark.parametrize("driver", ["descending", "ascending"])
def test_twenty_seeds_on_either_driver_meet_the_targets(tmp_path, driver):
    """The issue's bar: >= 95% reproduced and <= 5% extra on 20 seeds, for each direction."""
    _check_driver_programs(_driver_programs(tmp_path, driver, range(20)), driver)


def random_requests(seed: int, n: int, streams: int, devices: int, releases: bool):
    """A seeded alloc/free sequence with equal sizes repeated (ties), every pool, some empty_cache() calls."""
    import random

    from veotrace.allocators.requests import REQ_FREE, REQ_MALLOC, REQ_RELEASE, Requests

    rng = random.Random(seed)
    req = Requests()
    live: dict[int, list[int]] = {d: [] for d in range(devices)}
    seen: list[int] = []
    for i in range(n):
        d, r = rng.randrange(devices), rng.random()
        if live[d] and r < 0.45:
            j = live[d].pop(rng.randrange(len(live[d])))
            req.add(REQ_FREE, 0, req.stream[j], d, j, 0, i, i)
        elif releases and r < 0.47:
            req.add(REQ_RELEASE, rng.choice([0, 1]), 0, d, -1, 0, i, i)
        else:
            size = rng.choice(seen) if seen and rng.random() < 0.4 else rng.choice(
                [rng.randint(1, MiB), rng.randint(MiB, 10 * MiB), rng.randint(10 * MiB, 200 * MiB)])
            seen.append(size)
            live[d].append(req.add(REQ_MALLOC, size, rng.randrange(streams), d, -1, 0, i, i))
    return req


def assert_same(req, conf, capacity):
    """The torch model's events and counters on both cores."""
    import numpy as np

    from veotrace.allocators import replay as rp

    out = []
    for core in ("c", "python"):
        rec, models, parts = recorder_for("torch", core), {}, []
        for _ in rp.iter_replay(lambda d, rec=rec, core=core: make_policy(
                "torch", d, req, rec, conf=conf, capacity=capacity, seed=None, tiers=None, core=core), req, models):
            parts.append(rec.drain())
        out.append((np.concatenate(parts), {d: m.c for d, m in models.items()}))
    (ev_c, c_c), (ev_py, c_py) = out
    assert ev_c.shape == ev_py.shape and (ev_c == ev_py).all()
    assert c_c == c_py
    return c_c


@pytest.mark.skipif(__import__("veotrace.allocators.torchcore", fromlist=["_torchcore"])._torchcore is None,
                    reason="the compiled core is not built")
@pytest.mark.parametrize("seed", range(8))
def test_the_driver_gives_the_same_events_on_both_cores(seed):
    """Random traces with recorded pointers (some at ranges the model still holds) and every rule, under
    settings that make cudaMalloc calls the recording never made: the same events and counters (ties too)."""
    import random

    from veotrace.allocators.base import VA_ALIGN
    from veotrace.allocators.blocks import get_allocation_size, round_size
    from veotrace.allocators.conf import parse_conf
    from veotrace.allocators.requests import REQ_MALLOC

    rng = random.Random(seed)
    req = random_requests(seed, 600, rng.randint(1, 2), rng.randint(1, 3), seed % 2 == 0)
    for i, k in enumerate(req.kind):
        if k == REQ_MALLOC and rng.random() < 0.4:
            size = get_allocation_size(round_size(req.size[i], TorchConf()))
            req.seg_addr.append((req.device[i], i, size, dv.VA_BASE + rng.randrange(1 << 12) * VA_ALIGN))
    req.driver_rules = {d: dv.DriverRule(rng.choice([dv.ASCENDING, dv.DESCENDING]), rng.random() < 0.5,
                                         rng.random() < 0.5) for d in range(3) if rng.random() < 0.8}
    for conf in ("", "max_split_size_mb:40", "expandable_segments:True"):
        counters = assert_same(req, parse_conf(conf) if conf else TorchConf(), rng.choice([None, 600 * MiB]))
        assert sum(c.assumed_addresses for c in counters.values()) > 0  # cudaMalloc calls or reserved ranges


def test_the_explanation_names_ties_decided_by_assumed_addresses(tmp_path, monkeypatch):
    """The descending program replayed with no recorded pointers and an ascending rule: e takes X's half (the
    lower assumed address), c's half cannot merge, f needs a cudaMalloc the trace never made. The
    validation's explanation names the assumed addresses, not the blocks live before recording."""
    import veotrace.allocators.builder as builder

    finish = builder.RequestBuilder.finish

    def without_pointers(self, *a, **k):
        req = finish(self, *a, **k)
        req.seg_addr, req.driver_rules = [], {0: dv.DriverRule(dv.ASCENDING, True)}
        return req

    monkeypatch.setattr(builder.RequestBuilder, "finish", without_pointers)
    v = simulate([minimal(tmp_path, True)], policy=["torch"]).value.validation
    assert not v["meets_targets"] and v["extra"] == 1
    assert v["assumed_addresses"]["best_fit_ties_decided"] == 1
    assert any("best-fit tie between equal free blocks was decided by addresses the recording never made" in w
               for w in v["explanations"])
    assert not any("live before recording" in w for w in v["explanations"])
