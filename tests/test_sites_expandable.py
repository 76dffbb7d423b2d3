"""``sites``' reserved ranges follow fragmentation's segment rules (``frag.state.DeviceState.apply_segment``):
the mapped pages of an expandable segment that touch are one range, so the free layout and the pinning at
an instant equal ``fragmentation --at``'s. Before, each ``segment_map`` was its own range: a free gap across
two pages was two blocks, and one segment counted as several."""

from __future__ import annotations

import json
import pickle

import pytest

from tests.conftest import real_trace, run_cli

MIB = 1 << 20
T0 = 1_738_780_408_000_000  # µs


def _entry(action, addr, size, t):
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": T0 + t,
            "frames": [{"name": "forward", "filename": "model.py", "line": 54}]}


def expandable_snapshot(base: int) -> dict:
    """Pages of one expandable segment mapped one after another; blocks at both ends leave a 2 MiB free gap
    across the page boundary; a later unmap cuts the top pages off and a map puts them back.
    Known answer at t=4 (after the second block): one range of 4 MiB, one free block of 2 MiB."""
    trace = [
        _entry("segment_map", base, 2 * MIB, 1),
        _entry("alloc", base, MIB, 2),
        _entry("segment_map", base + 2 * MIB, 2 * MIB, 3),
        _entry("alloc", base + 3 * MIB, MIB, 4),
        _entry("free_requested", base + 3 * MIB, MIB, 5),
        _entry("free_completed", base + 3 * MIB, MIB, 6),
        _entry("segment_unmap", base + 2 * MIB, 2 * MIB, 7),
        _entry("segment_map", base + 2 * MIB, 2 * MIB, 8),
        _entry("segment_map", base + 4 * MIB, 2 * MIB, 9),
        _entry("alloc", base + 5 * MIB, MIB // 2, 10),
    ]
    blocks = [{"address": base, "size": MIB, "requested_size": MIB, "state": "active_allocated", "frames": []},
              {"address": base + MIB, "size": 4 * MIB, "requested_size": 4 * MIB, "state": "inactive", "frames": []},
              {"address": base + 5 * MIB, "size": MIB // 2, "requested_size": MIB // 2, "state": "active_allocated",
               "frames": []},
              {"address": base + 5 * MIB + MIB // 2, "size": MIB // 2, "requested_size": MIB // 2, "state": "inactive",
               "frames": []}]
    seg = {"device": 0, "address": base, "total_size": 6 * MIB, "allocated_size": 3 * MIB // 2,
           "active_size": 3 * MIB // 2, "requested_size": 3 * MIB // 2, "stream": 0, "segment_type": "large",
           "segment_pool_id": (0, 0), "is_expandable": True, "frames": [], "blocks": blocks}
    return {"segments": [seg], "device_traces": [trace]}


def _frag_at(path, at_us: int, device: int = 0) -> tuple[dict, int]:
    """fragmentation --at ``at_us`` after the first event: device's figures, and the instant (absolute µs)."""
    r = run_cli("fragmentation", path, "--at", f"{at_us / 1e6:.6f}s", "-f", "json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    return out["at"]["devices"][str(device)], out["params"]["at_ns"] // 1000


def _sweep_at(path, cut_us: int, device: int = 0):
    """The sites sweep's (free layout, pinning, ranges) after the entries at or before ``cut_us`` (absolute µs)."""
    from veotrace.attribution.attribute import device_sweep, final_blocks
    from veotrace.attribution.stacks import Interner, SiteRule
    from veotrace.attribution.sweep import free_layout, spans, states_at, stranded
    from veotrace.attribution.traces import traces_of

    traces = traces_of(path)
    names = Interner(SiteRule())
    final = final_blocks(traces.snap, names)
    sweep = device_sweep(traces, device, names, final.get(device, {}))
    _, ranges, blocks = next(states_at(sweep, [cut_us + 1]))
    return free_layout(ranges, blocks), stranded(ranges, blocks, names), spans(ranges)


@pytest.fixture(params=[0x7F00_0000_0000, (1 << 63) + (1 << 40)], ids=["low", "above_2_63"])
def snap(request, tmp_path):
    path = tmp_path / "expandable.pickle"
    path.write_bytes(pickle.dumps(expandable_snapshot(request.param)))
    return path, request.param


def test_pages_that_touch_are_one_range_with_one_free_block(snap):
    path, base = snap
    layout, pin, ranges = _sweep_at(path, T0 + 4)
    assert ranges == [(base, base + 4 * MIB)]
    assert layout == {"free_bytes": 2 * MIB, "largest_free_bytes": 2 * MIB, "external_frag": 0.0}
    assert pin["segments"] == 1 and pin["stranded_bytes"] == 2 * MIB


@pytest.mark.parametrize("t", [2, 4, 6, 7, 9, 10])
def test_free_layout_at_each_instant_is_fragmentations(snap, t):
    path, _base = snap
    frag, cut_us = _frag_at(path, t - 1)  # --at counts from the first event (t=1)
    assert cut_us == T0 + t
    layout, _pin, ranges = _sweep_at(path, cut_us)
    assert len(ranges) == frag["segments"], (ranges, frag)
    assert layout["free_bytes"] == frag["free_bytes"]
    assert layout["largest_free_bytes"] == frag["largest_free_bytes"]
    assert sum(b - a for a, b in ranges) == frag["reserved_bytes"]


def test_constructorsun_free_layout_at_an_instant_is_fragmentations():
    """The real expandable case: fragmentation --at 2.052990s on device 0 says 2 segments, 85,210,112 bytes
    free in 25 blocks, the largest 44,142,592."""
    path = real_trace("constructorsun_memory_snapshot.pickle")
    r = run_cli("fragmentation", path, "--at", "2.052990s", "-f", "json")
    assert r.exit_code == 0, r.stderr
    at = json.loads(r.stdout)
    cut_us = at["params"]["at_ns"] // 1000
    for d, frag in at["at"]["devices"].items():
        layout, _pin, ranges = _sweep_at(path, cut_us, int(d))
        assert (len(ranges), layout["free_bytes"], layout["largest_free_bytes"]) == (
            frag["segments"], frag["free_bytes"], frag["largest_free_bytes"]), d
    dev0 = at["at"]["devices"]["0"]
    assert (dev0["segments"], dev0["free_bytes"], dev0["free_blocks"], dev0["largest_free_bytes"]) == (
        2, 85_210_112, 25, 44_142_592)
