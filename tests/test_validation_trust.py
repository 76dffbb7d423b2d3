"""What the validation says about itself (issue 46 item 4): tune's trust says 'ran' and 'met' apart, and a
trace from another vendor's port of the allocator is named as such from the signs it gives."""

from __future__ import annotations

from veotrace.allocators.validation import port_signs
from veotrace.runs.tune import _trust


def test_trust_says_ran_and_met_apart():
    failed = {"recorded_segment_allocs": 41, "share": 0.244, "extra": 3, "extra_share": 0.07, "meets_targets": False,
              "allocator": {"pytorch_cuda_caching": True}}
    t = _trust(failed)
    assert (t["validated"], t["ran"], t["met"], t["validation"]) == (False, True, False, "failed")
    assert "ran and failed" in t["note"]
    ok = _trust(dict(failed, share=1.0, extra=0, meets_targets=True))
    assert (ok["validated"], ok["ran"], ok["met"], ok["validation"]) == (True, True, True, "met")
    none = _trust({"recorded_segment_allocs": 0})
    assert (none["validated"], none["ran"], none["met"], none["validation"]) == (False, False, None, "not run")


class _Req:
    def __init__(self, streams):
        from array import array

        self.kind = array("q", [0] * len(streams))
        self.stream = array("q", streams)
        self.recorded = [(0, 0, "segment_alloc", 1 << 21)]


def test_a_port_is_named_from_pointer_streams_and_a_failure_from_the_first_request():
    check = {"pytorch_cuda_caching": True, "checked": 8, "off_sizes": 2, "why": "6 of 8"}
    failing = {"meets_targets": False, "first_mismatches": [{"request": 0}]}
    port = port_signs(_Req([0x5581_2000_0000, 0x5581_2000_0400]), failing, check)
    assert port["pytorch_cuda_caching"] is False and "another vendor's port" in port["why"]
    assert port["signs"]["stream_ids_all_pointers"] and port["signs"]["fails_from_first_device_allocation"]
    # PyTorch's own traces: the default stream 0, or a replay that does not fail from the start
    assert port_signs(_Req([0, 0x5581_2000_0000]), failing, check)["pytorch_cuda_caching"] is True
    assert port_signs(_Req([0x5581_2000_0000]), {"meets_targets": True, "first_mismatches": []},
                      check)["pytorch_cuda_caching"] is True
