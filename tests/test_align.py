"""Clocks aligned on shared allocations (findings.align, diagnose's mapping): a known offset is found
from the allocations two sources both recorded, with jitter; nothing shared, too few, or an ambiguous
pattern gives no offset (never a guess); diagnose places the scenario's nsys export inside the run by it."""

from __future__ import annotations

import numpy as np
import pytest

import veotrace
from tests.conftest import run_cli
from veotrace.findings.align import MIN_VOTES, Allocs, shared_offset
from veotrace.synth.scenario import write_scenario


def _allocs(rng, n, *, addresses=True):
    t = np.sort(rng.integers(0, 3600 * 10**9, n))
    size = rng.integers(1, 1 << 20, n)
    return Allocs(t, size, (0x7F00_0000_0000 + np.cumsum(size) - size).astype(np.uint64) if addresses else None)


@pytest.mark.parametrize("addresses", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_known_offset_is_found_from_a_subset_with_jitter(seed, addresses):
    rng = np.random.default_rng(seed)
    ref = _allocs(rng, 5000, addresses=addresses)
    pick = np.sort(rng.choice(5000, 300, replace=False))
    offset = int(rng.integers(-10**18, 10**18))
    jitter = rng.integers(-200_000, 200_000, pick.size)  # the two tools stamp each allocation up to 0.2 ms apart
    src = Allocs(ref.ts_ns[pick] - offset + jitter, ref.size[pick], None if ref.address is None else ref.address[pick])
    found = shared_offset(ref, src)
    assert found is not None and abs(found["offset_ns"] - offset) < 200_000
    assert found["votes"] == 300 and found["of"] == 300
    assert found["by"] == ("size and address" if addresses else "size")


def test_nothing_shared_too_few_or_ambiguous_gives_no_offset():
    rng = np.random.default_rng(5)
    ref = _allocs(rng, 2000)
    assert shared_offset(ref, _allocs(np.random.default_rng(6), 200)) is None  # different allocations
    few = Allocs(ref.ts_ns[:MIN_VOTES - 1] + 7, ref.size[:MIN_VOTES - 1], ref.address[:MIN_VOTES - 1])
    assert shared_offset(ref, few) is None
    # a step that repeats every second: every whole-second shift explains as many allocations
    t = np.arange(60) * 10**9
    periodic = Allocs(np.concatenate([t, t + 10**8]), np.tile([4096, 8192], 60)[np.r_[0:120:2, 1:120:2]], None)
    assert shared_offset(periodic, Allocs(periodic.ts_ns[:20] + 5 * 10**9, periodic.size[:20], None)) is None


def test_diagnose_aligns_the_nsys_export_on_the_log_and_finds_the_planted_burst_in_place(tmp_path):
    s = write_scenario(tmp_path / "run", seed=2)
    out = veotrace.diagnose(s.folder).to_dict()
    nsys = next(x for x in out["sources"] if x["name"].endswith("profile.sqlite"))
    assert nsys["aligned"]["offset_ns"] == s.nsys_offset_ns  # the two tools stamp each shared allocation alike
    assert nsys["aligned"]["votes"] == nsys["aligned"]["of"] and "aligned on" in nsys["mapping"]
    (burst,) = [f for f in out["findings"] if f["kind"] == "burst_cluster" and f["source"] == nsys["name"]]
    assert abs(burst["start"] - s.burst_at_s) <= 3600  # within one window of the planted burst, on the log's axis
    assert burst["start"] < s.burst_at_s + 1 and burst["end"] >= s.burst_at_s  # it overlaps the planted second
    (ent,) = [f for f in out["findings"] if f["kind"] == "entropy_trend"]
    assert any(burst["title"] in link for link in ent["links"])  # one clock: linked by time order
    explicit = veotrace.diagnose(s.folder, align=["profile.sqlite=auto"]).to_dict()
    assert next(x for x in explicit["sources"] if x["name"] == nsys["name"])["aligned"] == nsys["aligned"]


def test_align_auto_with_nothing_to_align_on_is_refused(tmp_path):
    s = write_scenario(tmp_path / "run", seed=0)
    other = write_scenario(tmp_path / "other", seed=9, nsys_hour=None)
    r = run_cli("diagnose", other.log, s.nsys, "--align", "profile.sqlite=auto")
    assert r.exit_code == 2 and r.stderr.count("Error:") == 1 and "line up" in r.stderr and "=SECONDS" in r.stderr
    r = run_cli("diagnose", s.folder, "--align", "frames.csv=auto")
    assert r.exit_code == 2 and r.stderr.count("Error:") == 1 and "no allocations in time" in r.stderr
    plain = veotrace.diagnose([other.log, s.nsys]).to_dict()  # unasked: left on its own clock, and said why
    nsys = next(x for x in plain["sources"] if x["name"].endswith("profile.sqlite"))
    assert "aligned" not in nsys and "none of its allocations line up" in nsys["mapping"]
