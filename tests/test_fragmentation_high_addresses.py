"""Addresses in [2**63, 2**64) (issue 47 item 12: unsigned 64-bit wherever they are held).

The same seeded snapshot is written twice, once at its own addresses (below 2**63) and once shifted by
2**63: every figure fragmentation gives (free bytes, largest free block, segments, the free blocks of
``--at end``'s state table) must be the same, only the addresses move by the shift.
"""

from __future__ import annotations

import json
import pickle
import re

import pytest

from tests.conftest import run_cli

SHIFT = 1 << 63


def _shift(o, d: int):
    """The snapshot with every address (trace ``addr``, segment and block ``address``) moved by ``d``."""
    if isinstance(o, dict):
        return {k: (v + d if k in ("addr", "address") and isinstance(v, int) and v else _shift(v, d)) for k, v in o.items()}
    if isinstance(o, list):
        return [_shift(x, d) for x in o]
    return o


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from veotrace.synth.torch import synthetic_snapshot

    snap, _ = synthetic_snapshot(n_allocs=200, seed=1)
    d = tmp_path_factory.mktemp("high")
    lo, hi = d / "lo.pickle", d / "hi.pickle"
    lo.write_bytes(pickle.dumps(snap))
    hi.write_bytes(pickle.dumps(_shift(snap, SHIFT)))
    addrs = [b["address"] for s in _shift(snap, SHIFT)["segments"] for b in s["blocks"]]
    assert min(addrs) >= SHIFT and max(addrs) < 1 << 64
    return lo, hi


def _json(path, *args):
    r = run_cli("fragmentation", path, *args, "-f", "json")
    assert r.exit_code == 0, r.stderr
    assert "Traceback" not in r.stderr
    return json.loads(r.stdout)


def _unshift_zones(out: dict) -> dict:
    """``out`` with the addresses it reports (zones, and ``--at``'s state rows) moved back by the shift."""
    for z in out.get("zones") or []:
        z["zone_start"] -= SHIFT
    for row in (out.get("at") or {}).get("state") or []:
        assert row["address"] >= SHIFT
        row["address"] -= SHIFT
    return out


FIGURES = ("free_bytes", "largest_free_bytes", "free_blocks", "segments", "reserved_bytes", "live_bytes", "external_frag")


def test_at_end_json_is_the_same_above_2_63(pair):
    lo, hi = (_json(p, "--at", "end") for p in pair)
    for key in FIGURES:
        assert hi["at"]["total"][key] == lo["at"]["total"][key], key
    assert lo["at"]["total"]["free_bytes"] > 0 and lo["at"]["total"]["segments"] == 1
    assert _unshift_zones(hi) == lo


def test_whole_run_json_is_the_same_above_2_63(pair):
    lo, hi = (_json(p) for p in pair)
    for key in FIGURES:
        assert hi["end"]["total"][key] == lo["end"]["total"][key], key
    assert hi["windows"] == lo["windows"]
    assert _unshift_zones(hi) == lo


def test_state_table_holds_the_high_addresses(pair):
    import numpy as np

    from veotrace.frag.metrics import free_blocks
    from veotrace.frag.result import state_table
    from veotrace.frag.state import DeviceState

    st = DeviceState()
    st.addr = np.array([SHIFT + 4096, SHIFT + 12288], np.uint64)
    st.size = np.array([4096, 4096], np.int64)
    st.req = st.size.copy()
    st.segmented = True
    from veotrace.frag.state import Segment
    st.segments = [Segment(SHIFT, SHIFT + 32768, False)]
    fb = free_blocks(st)
    assert fb.address.tolist() == [SHIFT, SHIFT + 8192, SHIFT + 16384]
    assert fb.size.tolist() == [4096, 4096, 16384]
    t = state_table({0: st}, max_gap=1 << 21).to_pylist()
    assert [(r["kind"], r["address"], r["size_bytes"]) for r in t if r["kind"] == "free"] == [
        ("free", SHIFT, 4096), ("free", SHIFT + 8192, 4096), ("free", SHIFT + 16384, 16384)]


def _figures(text: str) -> dict:
    return {k: re.search(rf"^{k}\s+(\S+( \S+)?)", text, re.M).group(1).strip()
            for k in ("free blocks", "free bytes", "largest free block", "reserved")}


def test_table_is_the_same_above_2_63(pair):
    lo, hi = (run_cli("fragmentation", p, "--at", "end") for p in pair)
    assert lo.exit_code == 0 and hi.exit_code == 0, hi.stderr
    assert _figures(hi.stdout) == _figures(lo.stdout)


def test_sites_gives_no_traceback_above_2_63(pair):
    lo, hi = (run_cli("sites", p) for p in pair)
    assert lo.exit_code == 0, lo.stderr
    assert hi.exit_code == 0, hi.stderr
    assert "Traceback" not in hi.stderr


@pytest.mark.parametrize("command", ["simulate", "tune"])
def test_the_replay_refuses_addresses_above_2_63_in_one_line(pair, command):
    """The allocator model (both cores) holds addresses as signed 64-bit: a snapshot past 2**63 is refused with
    one Error line naming why and what reads it, never an OverflowError (the low copy replays)."""
    lo, hi = (run_cli(command, p) for p in pair)
    assert lo.exit_code == 0, lo.stderr
    assert hi.exit_code == 1, hi.stderr
    lines = [line for line in hi.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error:") and "2**63" in lines[0], hi.stderr


def test_segment_zones_are_the_same_above_2_63(pair):
    """``--zone-bytes segment`` placed each row in its segment with int64 addresses (the segments of the
    high copy all turned negative and the zone table's uint64 column raised OverflowError)."""
    lo, hi = (_json(p, "--zone-bytes", "segment") for p in pair)
    assert [z["zone_kind"] for z in lo["zones"]] == ["segment"] and lo["zones"][0]["events"] > 0
    assert _unshift_zones(hi) == lo


@pytest.mark.parametrize("base", [1 << 40, SHIFT, (1 << 64) - (1 << 30)])
def test_address_ranges_outside_segments_hold_high_addresses(base):
    """Range zones (addresses no segment holds) group the same extents at any base up to the top of the
    address space: two ranges 1 MiB apart under a 64 KiB max gap, counts and sizes as at a low base."""
    import numpy as np

    from veotrace.frag.zones import _Ranges

    off = np.array([0, 4096, 8192, 1 << 20, (1 << 20) + 512], np.uint64)
    r = _Ranges()
    r.add_events(np.uint64(base) + off, np.array([1, 1, 0, 1, 1], bool), np.full(5, 4096, np.int64), None, 1 << 16)
    r.add(np.array([base + (1 << 21)], np.uint64), np.array([base + (1 << 21) + 100], np.uint64),
          np.array([[1, 0, 100]], np.int64), None, 1 << 16)
    assert r.start.dtype == np.uint64
    assert [int(x) - base for x in r.start] == [0, 1 << 20, 1 << 21]
    assert [int(e - s) for s, e in zip(r.start, r.end)] == [12288, 4608, 100]
    assert r.counts.tolist() == [[2, 1, 12288], [2, 0, 8192], [1, 0, 100]]
