"""The rules that turn each command's JSON into findings (issue 39): each finding says what its command
says, in the command's words and units, with the bytes at stake; built on hand-made JSON with a known
answer, so every case is cheap."""

from __future__ import annotations

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
    assert "largest free block under 65% of the free bytes (external fragmentation above 0.35)" in f.title
    assert f.evidence["external_frag_above"] == pytest.approx(0.35)
    lo, hi = f.evidence["external_frag_range"]
    assert (lo, hi) == (0.40, 0.56) and lo > f.evidence["external_frag_above"]
    assert f.evidence["windows_in_a_row"] == 4 and f.evidence["stays"]
