"""`diagnose` on every real file and on the samples (issue 39): each finding's numbers are checked against
the JSON of its own command, run on its own (the command line the finding names), and its words against
what that JSON means: the threshold as the command defines it, the units it uses, the bytes at stake, the
notes it printed. A real file that is absent is skipped (tests/conftest.py says how many)."""

from __future__ import annotations

import json
import math
import shlex
from functools import lru_cache

import numpy as np
import pytest

import veotrace
from tests.conftest import REAL_TRACES, SAMPLES, real_trace, run_cli
from veotrace.findings.weigh import command_notes, impact
from veotrace.frag.metrics import fragmented_when

#: Every real file diagnose takes (the others feed no analysis: it says so and exits 1, tested below).
REAL = ["constructorsun_memory_snapshot.pickle", "cranberrii_memory_snapshot.pickle",
        "kkaitlyn_memory_ctx128_fullstep_.pickle", "kkaitlyn_memory_ctx256_forward_.pickle",
        "magma27_memory_snapshot.pickle", "maphsge4_snapshot.pickle", "muduard_memory_snapshot.pkl",
        "yiyi_oom_snapshot.pickle", "casio_output-file.sqlite", "lianhang_report1.sqlite",
        "andrewxu_nsight_cfd_097K.log", "tanvisharma_3136_64_64_rtx2080ti_sgemm.ncu-rep"]
NOTHING = ["chukonu_nsys_stats.csv", "numpy_python3.npy", "numpy_win64python2.npy", "numpy_py3-objarr.npy"]
#: The samples, diagnosed together (one axis: the nsys export's session clock, the ncu launches, the frames).
SAMPLE_INPUTS = [SAMPLES / "alloc_logs_bursty", SAMPLES / "snapshots" / "memory_snapshot.pickle",
                 SAMPLES / "nsys" / "synthetic_memory.sqlite", SAMPLES / "ncu" / "l2_details.csv",
                 SAMPLES / "frames" / "frames.csv", SAMPLES / "simulate" / "training_log.csv"]


@lru_cache(maxsize=None)
def _run(command: str) -> tuple[dict, tuple[str, ...]]:
    """The JSON and the stderr lines of a finding's own command line, run on its own."""
    args = shlex.split(command)
    assert args[0] == "veotrace"
    r = run_cli(*args[1:], "-f", "json")
    assert r.exit_code in (0, 3), r.stderr
    return json.loads(r.stdout), tuple(r.stderr.splitlines())


def _check(f: dict, read: list[str]) -> None:
    d, stderr = _run(f["command"])
    ev = f["evidence"]
    # every note and warning the command printed, and those its JSON carries, go with the finding, and
    # the warnings of reading its source (``read``: diagnose reads each input once, for every analysis)
    said = [line for line in stderr if line.startswith(("Note:", "note:", "Warning:"))]
    assert set(command_notes("", {}, said)) <= set(f["notes"])
    assert set(f["notes"]) <= set(command_notes(f["command"].split()[1], d, stderr)) | set(command_notes("", {}, read))
    check = CHECKS[f["kind"]]
    check(f, ev, d)
    assert 0 <= f["impact"] <= 1 and 0 <= f["confidence"] <= 1
    assert math.isclose(f["score"], f["impact"] * f["confidence"], abs_tol=2e-4)


def _fragmentation(f, ev, d):
    p = d["params"]
    assert ev["threshold"] == p["threshold"] and ev["fragmented_when"] == p["fragmented_when"] == fragmented_when(p["threshold"])
    assert ev["fragmented_when"] in f["title"] and "crosses" not in f["title"]
    ws = [w for w in d["windows"] if w["device"] == ev["device"]]
    k = [w["window"] for w in ws].index(ev["first_window"])
    run = ws[k:k + ev["windows_in_a_row"]]
    # windows during the program's own empty_cache() count as not fragmented (its release, not the run's state)
    runs = ev["program_empty_cache_runs"]  # the program's own empty_cache() calls (tune's JSON, when there are some)
    assert not runs or runs == _releases(f["command"], ev["device"])
    gave = _released_windows(ws, runs)
    assert sum(gave) == ev["windows_in_program_empty_cache"]
    flags = [w["fragmented"] and not g for w, g in zip(ws, gave)]
    assert all(flags[k:k + len(run)]) and (k + len(run) == len(ws) or not flags[k + len(run)])
    assert all(w["external_frag"] > 1 - p["threshold"] for w in run)  # what "fragmented" means, window by window
    assert ev["external_frag_range"] == [min(w["external_frag"] for w in run), max(w["external_frag"] for w in run)]
    worst = next(w for w in run if w["window"] == ev["worst_window"])
    assert f["bytes_at_stake"] == worst["free_bytes"] - worst["largest_free_bytes"] == max(
        w["free_bytes"] - w["largest_free_bytes"] for w in run)
    assert ev["stays"] == all(flags[k:])
    assert ("from then to the end" in f["title"]) == (ev["stays"] and f["axis"] == "time")
    assert f["impact"] == pytest.approx(impact(f["bytes_at_stake"], ev["device_peak_bytes"]), abs=1e-4)


def _cached(f, ev, d):
    peak = d["devices"][ev["device"]]["peaks"]["reserved"]
    if ev.get("after_program_empty_cache"):  # the run's own peak once the program's empty_cache() gave its cache back
        peak = peak["after_largest_release"]
        assert peak["release"]["first_entry"] == ev["after_program_empty_cache"]["first_entry"]
    assert (ev["peak_reserved_bytes"], ev["cached_free_bytes"]) == (peak["bytes"], peak["cached_free_bytes"])
    assert f["bytes_at_stake"] == peak["cached_free_bytes"]
    gave = ev.get("program_empty_cache")
    if gave:  # the program's own empty_cache() released the state of the peak: a note, with that call's numbers
        assert f["severity"] == "note" and gave in _releases(f["command"], ev["device"])
        assert gave["prev_device_event_entry"] <= peak["at_entry"] < gave["first_entry"]


def _releases(command: str, device) -> list[dict]:
    """The program's own empty_cache() runs on ``device`` that tune (on the same file) lists."""
    d, _ = _run("veotrace tune " + shlex.join(shlex.split(command)[2:]))
    return [r for r in d["params"]["program_releases"]["listed"] if str(r["device"]) == str(device)]


def _released_windows(ws: list[dict], releases: list[dict]) -> list[bool]:
    """Which windows hold one of the program's own empty_cache() runs (by time, else by their events)."""
    out, first = [], 0
    for w in ws:
        last = first + w["events"] - 1
        out.append(any((r["first_ts_ns"] < w["end_ns"] and r["last_ts_ns"] >= w["start_ns"]) if w["start_ns"] is not None
                       else (r["first_entry"] <= last and r["last_entry"] >= first) for r in releases))
        first = last + 1
    for i in range(len(out) - 1):  # the window just before the call: its end state is what the call released
        starts = sum(w["events"] for w in ws[:i + 1])
        if not out[i] and out[i + 1] and any(r["prev_device_event_entry"] <= starts - 1 < r["first_entry"] and (
                (r["first_ts_ns"] < ws[i + 1]["end_ns"] and r["last_ts_ns"] >= ws[i + 1]["start_ns"])
                if ws[i + 1]["start_ns"] is not None else r["first_entry"] <= starts + ws[i + 1]["events"] - 1)
                for r in releases):
            out[i] = True
    return out


def _released(f, ev, d):
    w = next(w for w in d["windows"] if w["device"] == ev["device"] and w["window"] == ev["window"])
    assert f["severity"] == "note" and f["bytes_at_stake"] == w["free_bytes"] - w["largest_free_bytes"]
    assert ev["program_empty_cache"] in _releases(f["command"], ev["device"])


def _held(f, ev, d):
    v = d["devices"][str(ev["device"])]
    assert v["peaks"]["allocated"]["trace_own"]["bytes"] == 0  # the trace allocates nothing: the end is all there is
    assert f["bytes_at_stake"] == ev["allocated_bytes"] == v["end"]["allocated_bytes"]
    named = [r for r in v["end"]["sites"] if not r["site"].startswith("(")]
    assert ev["sites"][0] == named[0] and named[0]["site"].split("/")[-1] in f["title"]


def _contradiction(f, ev, d):
    rec = d["recommendation"]
    assert rec["conf"] is None and rec["contradiction"] == ev and ev["peak_live_bytes"] > ev["reserved_bytes"]


def _pinning(f, ev, d):
    top = d["devices"][ev["device"]]["pinning"]["sites"][0]
    assert (ev["site"], ev["stranded_bytes"], ev["segments"]) == (top["site"], top["stranded_bytes"], top["segments"])
    peaks = d["devices"][ev["device"]]["peaks"]
    kind = "reserved" if (peaks.get("reserved") or {}).get("bytes") else "allocated"
    assert f["bytes_at_stake"] == top["stranded_bytes"] and ev["against_bytes"] == peaks[kind]["bytes"]
    assert ev["against"] == f"peak {kind}" and f"of the peak {kind}" in f["title"]


def _oom(f, ev, d):
    assert {k: ev[k] for k in ("device", "ts_ns", "request_bytes", "device_free_bytes")} in [
        {k: o.get(k) for k in ("device", "ts_ns", "request_bytes", "device_free_bytes")} for o in d["params"]["recorded_ooms"]]
    assert f["bytes_at_stake"] == ev["request_bytes"]


def _setting(f, ev, d):
    rec = d["recommendation"]
    assert ev["conf"] == rec["conf"] and ev["saving"] in rec["savings"]
    assert f["bytes_at_stake"] == ev["saving"]["peak_reserved_bytes"]


def _entropy(f, ev, d):
    t, s = d["trend"], d["summary"]
    assert ev["slope_bits_per_hour"] == t["theil_sen"]["slope"] and ev["kendall_p"] == t["kendall"]["p_value"]
    assert ev["slope_unit"] == t["display"]["unit"] and ev["slope_unit"] in f["title"]
    assert ev["rise_bits"] == pytest.approx(t["theil_sen"]["slope"] * s["span_s"] / 3600)
    assert (ev["windows"], ev["empty_windows"], ev["span_s"]) == (s["windows"], s["empty_windows"], s["span_s"])
    assert " 0 h " not in f["title"]


def _bursts(f, ev, d):
    s, p = d["summary"], d["params"]
    assert (ev["bursts"], ev["share_in_bursts"], ev["events_counted"]) == (s["bursts"], s["share_in_bursts"], s["events_counted"])
    span = (s["last_ns"] - s["first_ns"]) / 1e9
    expected = 1 - np.exp(-2 * s["events_counted"] / span * p["gap_ms"] / 1e3)
    assert ev["expected_share_if_even"] == pytest.approx(expected) and s["share_in_bursts"] > expected


def _l2(f, ev, d):
    assert {k: ev[k] for k in ("kernel", "metric", "launch_index", "jump")} in [
        {k: b[k] for k in ("kernel", "metric", "launch_index", "jump")} for b in d["breakpoints"]]


def _correlate(f, ev, d):
    assert ev["r"] == d["pearson"]["r"] and ev["perm_p"] == d["pearson"]["perm_p"]


def _coherence(f, ev, d):
    assert ev["onset_frame"] == d["onset_frame"] and ev["n_frames"] == d["n_frames"]


CHECKS = {"fragmentation_crossing": _fragmentation, "cached_free_at_peak": _cached, "pinning_site": _pinning,
          "recorded_oom": _oom, "allocator_setting": _setting, "entropy_trend": _entropy, "burst_cluster": _bursts,
          "l2_break": _l2, "address_flow_correlation": _correlate, "coherence_onset": _coherence,
          "fragmentation_released": _released, "held_at_snapshot": _held, "input_contradiction": _contradiction}


def _diagnosed(paths) -> dict:
    run = veotrace.diagnose(paths)
    out = run.to_dict()
    assert all(s.get("mapping") and "None" not in s["mapping"] for s in out["sources"])
    for f in out["findings"]:
        _check(f, run.messages)
    return out


@pytest.mark.parametrize("name", REAL)
def test_every_finding_on_a_real_file_says_what_its_command_says(name):
    out = _diagnosed([real_trace(name)])
    memory = [f for f in out["findings"] if f["kind"] in ("fragmentation_crossing", "cached_free_at_peak", "pinning_site",
                                                          "recorded_oom", "allocator_setting")]
    assert all(f["bytes_at_stake"] for f in memory)
    # no burst finding on a trace of a few seconds: evenly spread allocations would be as bursty
    assert not [f for f in out["findings"] if f["kind"] == "burst_cluster" and f["evidence"]["span_s"] < 3]
    _acted_on(name, out)


#: Site labels that name no line of code a person could change.
UNACTIONABLE_SITES = ("(no stack recorded)", "(only internal frames)", "(allocated before the trace)", "??:", ".o:")


def _acted_on(name: str, out: dict) -> None:
    """The top finding is one a person would act on (issue 49). Judged by these rules, each from the
    finding's JSON and the JSON of the commands it names:
    - it is not a note (a trend over one pass, the state before the program's own ``empty_cache()``), nor
      about a state the program released itself (``program_empty_cache`` in its evidence);
    - it says what to try (a suggestion);
    - a site it names is a line of code (``file:line function``, or the backward pass), never a label
      for no stack, internal frames only, or a C/C++ frame;
    - an allocator setting it names (in its title or suggestion) is the one ``tune`` recommends on the same
      file (never one tune keeps out: a tie, a gain under the margin, an unreadable trace);
    - a trend or burst on top spans at least FINDING_MIN_SPAN_S.
    A PyTorch snapshot always has a top finding (an OOM dump without a trace included)."""
    from veotrace.defaults import FINDING_MIN_SPAN_S

    if name.endswith((".pickle", ".pkl")):
        assert out["findings"], f"{name}: no finding"
    if not out["findings"]:
        return
    top = out["findings"][0]
    assert top["severity"] != "note" and not top["evidence"].get("program_empty_cache"), top["title"]
    assert top["suggestion"], top["title"]
    site = top["evidence"].get("site") or ((top["evidence"].get("sites") or [{}])[0]).get("site")
    if site is not None:
        assert not any(bad in site for bad in UNACTIONABLE_SITES), site
    said = f"{top['title']} {top['suggestion']}"
    if "PYTORCH_CUDA_ALLOC_CONF" in said:
        rec = _run("veotrace tune " + shlex.join(shlex.split(top["command"])[2:]))[0]["recommendation"]
        assert rec["export"] and not rec.get("keep") and rec["export"] in said
    if top["kind"] in ("entropy_trend", "burst_cluster"):
        assert top["evidence"]["span_s"] >= FINDING_MIN_SPAN_S


@pytest.mark.parametrize("name", NOTHING)
def test_a_real_file_that_feeds_no_analysis_is_refused_with_why(name):
    r = run_cli("diagnose", real_trace(name))
    # the line names the file and its problem (issue 40), or says it feeds no analysis
    assert r.exit_code == 1 and r.stderr.count("Error:") == 1 and "none of the inputs feeds an analysis" in r.stderr
    assert f"{name} (" in r.stderr


def test_every_finding_on_the_samples_says_what_its_command_says():
    out = _diagnosed(SAMPLE_INPUTS)
    assert {f["kind"] for f in out["findings"]} >= {"l2_break", "coherence_onset"}


def test_the_real_files_are_all_listed():
    if not REAL_TRACES.exists():
        pytest.skip("no real traces")
    present = {p.name for p in REAL_TRACES.iterdir() if p.suffix != ".md"}
    assert present <= set(REAL) | set(NOTHING), sorted(present - set(REAL) - set(NOTHING))
