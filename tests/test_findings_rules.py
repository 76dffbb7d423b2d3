"""The rules that turn each command's JSON into findings (issue 39): each finding says what its command
says, in the command's words and units, with the bytes at stake; built on hand-made JSON with a known
answer, so every case is cheap."""

from __future__ import annotations

import numpy as np
import pytest

from veotrace.findings.rules import Context, fragmentation

CTX = Context("run.csv", "veotrace fragmentation run.csv", t0_ns=0, first_ns=0)


def _frag_json(fracs: list[float], threshold: float = 0.65, free: int = 1 << 30) -> dict:
    """A fragmentation JSON of one device whose windows have these external fragmentations."""
    from veotrace.frag.metrics import fragmented_when

    rows = []
    for k, x in enumerate(fracs):
        largest = round(free * (1 - x))
        rows.append({"window": k, "device": 0, "start_ns": k * 10**9, "end_ns": (k + 1) * 10**9,
                     "external_frag": x, "fragmented": largest < threshold * free, "free_bytes": free,
                     "largest_free_bytes": largest, "reserved_bytes": 4 * free, "live_bytes": 2 * free})
    return {"params": {"threshold": threshold, "fragmented_when": fragmented_when(threshold)}, "windows": rows}


def test_the_fragmentation_finding_names_the_threshold_as_the_command_defines_it():
    """Windows at external fragmentation 0.40-0.56 are flagged at --threshold 0.65: the finding says
    external fragmentation above 0.35 (never 'crosses 0.65'), as the command's params and plot do."""
    d = _frag_json([0.1, 0.2, 0.40, 0.45, 0.56, 0.50])
    (f,) = fragmentation(d, CTX)
    assert "0.65" not in f.title and "crosses" not in f.title
    assert d["params"]["fragmented_when"] in f.title
    assert "largest free block under 65% of the free bytes, i.e. external fragmentation above 0.35" in f.title
    assert f.evidence["external_frag_above"] == pytest.approx(0.35)
    lo, hi = f.evidence["external_frag_range"]
    assert (lo, hi) == (0.40, 0.56) and lo > f.evidence["external_frag_above"]
    assert f.evidence["windows_in_a_row"] == 4 and f.evidence["stays"]


def _sites_json(devices: dict) -> dict:
    """A sites JSON: per device (peak reserved, cached free at it, top site's stranded bytes, end reserved)."""
    out = {}
    for dev, (peak, cached, pinned, reserved) in devices.items():
        out[dev] = {"peaks": {"reserved": {"bytes": peak, "cached_free_bytes": cached, "t_s": 0.0},
                              "allocated": {"bytes": peak - cached}},
                    "end": {"reserved_bytes": reserved},
                    "pinning": {"sites": [{"site": "/work/train/model.py:10 forward", "stranded_bytes": pinned,
                                           "sole_bytes": pinned, "segments": 2, "blocks": 3, "block_bytes": 1 << 20}]}}
    return {"devices": out}


def test_severity_weighs_the_bytes_at_stake_not_percentages_alone():
    """90% of a 0.02 GiB peak cached but free ranked high above a site pinning 19.80 GiB: impact is now the
    bytes against the device's peak (never under weigh.MIN_SCALE_BYTES), and every finding shows its bytes."""
    from veotrace.findings.model import rank
    from veotrace.findings.rules import sites
    from veotrace.findings.weigh import MIN_SCALE_BYTES

    small = sites(_sites_json({"0": (20 << 20, 18 << 20, 0, 20 << 20)}), CTX)
    big = sites(_sites_json({"1": (80 << 30, 1 << 30, round(19.8 * (1 << 30)), 78 << 30)}), CTX)
    (cached,) = [f for f in small if f.kind == "cached_free_at_peak"]
    (pin,) = [f for f in big if f.kind == "pinning_site"]
    assert cached.bytes_at_stake == 18 << 20 and "18.0 MiB" in cached.title
    assert pin.bytes_at_stake == round(19.8 * (1 << 30)) and "19.80 GiB" in pin.title
    assert cached.impact == pytest.approx((18 << 20) / MIN_SCALE_BYTES) and cached.severity == "low"
    assert pin.impact == pytest.approx(19.8 / 80) and rank([cached, pin])[0] is pin
    assert all(f.to_dict()["bytes_at_stake"] is not None for f in small + big)


def _entropy_json(span_s: float, windows: int, empty: int, phases: int, slope_per_h: float) -> dict:
    from veotrace.analysis.timescale import slope_unit

    name, hours_per = slope_unit(span_s)
    return {"trend": {"x": "hours", "slope": slope_per_h, "kendall": {"p_value": 0.001},
                      "theil_sen": {"slope": slope_per_h, "low": slope_per_h / 2, "high": slope_per_h * 2},
                      "display": {"unit": f"bits/{name}", "theil_sen_slope": slope_per_h * hours_per}},
            "summary": {"span_s": span_s, "windows": windows, "empty_windows": empty,
                        "phases": [{"start_s": 0.0}] * phases,
                        "notes": ["Note: the run is idle for 1.5 s of its 1.9 s (2 gaps)"]},
            "windows": []}


def test_the_entropy_finding_uses_the_commands_units_phases_and_notes():
    """'rises 0.72 bits over 0 h (1367.9 bits/h)' on a 1.9 s trace with 1,772 of 1,885 windows empty: the
    span in words that fit it, the slope in the command's unit, the phases, and less confidence."""
    from veotrace.findings.rules import entropy

    d = _entropy_json(1.9, 1885, 1772, 3, 1367.9)
    (f,) = entropy(d, CTX)
    assert "over 1.9 s across its 3 phases" in f.title and "bits/second" in f.title and "0 h" not in f.title
    assert f"{1367.9 / 3600:.3g} bits/second" in f.title and "113 of 1,885 windows" in f.title
    assert f.confidence == pytest.approx(0.999 * 2 * 113 / 1885)
    assert f.evidence["slope_unit"] == "bits/second" and f.evidence["rise_bits"] == pytest.approx(1367.9 * 1.9 / 3600)
    long = _entropy_json(237 * 3600, 2844, 0, 1, 0.01)
    (g,) = entropy(long, CTX)
    assert "over 237.0 h (" in g.title and "phases" not in g.title and g.confidence == pytest.approx(0.999)


def test_bursts_need_a_contrast_against_evenly_spread_arrivals(tmp_path):
    """Every trace under 3 s had '100% of allocations come in N bursts': with 1,721 allocations over 0.25 s
    and a 5 ms gap, evenly spread arrivals would all be in bursts too, so there is no finding; 200
    allocations in 10 tight clumps over an hour are one."""
    from veotrace.findings.rules import bursts

    def run(share, counted, span_s, n=10):
        return {"params": {"gap_ms": 5.0, "events": "alloc"},
                "summary": {"share_in_bursts": share, "bursts": n, "events_counted": counted,
                            "events_in_bursts": round(share * counted), "first_ns": 0, "last_ns": round(span_s * 1e9),
                            "bytes_in_bursts": 1 << 30},
                "bursts": [{"start_ns": k * 10**9, "end_ns": k * 10**9 + 10**6, "events": 20} for k in range(n)]}

    assert bursts(run(1.0, 1721, 0.248), CTX) == []
    (f,) = bursts(run(1.0, 200, 3600.0), CTX)
    assert f.evidence["expected_share_if_even"] == pytest.approx(1 - np.exp(-2 * 200 / 3600 * 0.005))
    assert "against 0% if the same 200 were spread evenly over 1.0 h" in f.title and "1.00 GiB" in f.title
    assert f.impact == pytest.approx(f.evidence["excess"] / 4)
