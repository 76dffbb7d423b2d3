"""diagnose's clocks (issue 39): files that merely all start near t=0 are on relative clocks, which share an
axis only when aligned on shared allocations or placed by --align; every source's mapping is said in
words (a Python None was printed for inputs without time)."""

from __future__ import annotations

from tests.conftest import SAMPLES, run_cli
from veotrace.findings.model import Finding, link
from veotrace.reporting.timeline import _map_clocks


def _src(name: str, first_ns: int, **kw) -> dict:
    return {"name": name, "first_ns": first_ns, "matched": None, "offset_s": 0.0, "auto": False, "axis": "time", **kw}


def test_relative_clocks_starting_at_zero_are_not_one_clock():
    sources = {n: _src(n, first) for n, first in (("a.csv", 0), ("b.sqlite", 2_000_000))}
    _map_clocks(sources, {})
    a, b = sources["a.csv"], sources["b.sqlite"]
    assert a["mapping"] == "the shared clock" and a["clock"] != b["clock"]
    assert "relative clock" in b["mapping"] and "--align" in b["mapping"]
    found = [Finding("k", t, n, "time", 1.0, None, 0.5, 1.0, {}, "cmd", clock=str(s["clock"]))
             for t, n, s in (("A", "a.csv", a), ("B", "b.sqlite", b))]
    link(found)
    assert all(not f.links for f in found)  # never "0 ms before" across clocks


def test_a_relative_clock_placed_by_align_shares_the_axis():
    sources = {"a.csv": _src("a.csv", 0), "b.sqlite": _src("b.sqlite", 5, matched="b.sqlite", offset_s=12.0)}
    _map_clocks(sources, {})
    assert sources["b.sqlite"]["clock"] == sources["a.csv"]["clock"]
    assert "placed on the shared clock by --align" in sources["b.sqlite"]["mapping"]


def test_wall_clocks_of_one_week_still_share_the_axis():
    day = 86400 * 10**9
    sources = {"a.csv": _src("a.csv", 1_700_000_000 * 10**9), "b.csv": _src("b.csv", 1_700_000_000 * 10**9 + day)}
    _map_clocks(sources, {})
    assert sources["a.csv"]["clock"] == sources["b.csv"]["clock"] and sources["b.csv"]["mapping"] == "the shared clock"


def test_every_mapping_is_words_even_without_a_timed_input():
    r = run_cli("diagnose", SAMPLES / "ncu" / "l2_details.csv")
    assert r.exit_code == 0 and "None" not in r.stdout
    assert "its own axis: launch order" in r.stdout
