"""`veotrace diagnose` (issue 31): findings from every analysis on one time axis, ranked.

A seeded scenario (synth.scenario: an alloc log whose entropy steps up at a known hour, an nsys export of
one hour on its own clock with a planted allocation burst, an ncu export with planted L2 breaks, a frame
table that loses coherence at a known frame): every planted event is
found in the right place, a clean scenario gives nothing above low severity, a larger step ranks
higher. Every real file's findings against their own commands' JSON: tests/test_diagnose_real.py."""

from __future__ import annotations

import numpy as np
import pytest

import veotrace
from tests.conftest import run_cli
from veotrace.synth.scenario import write_scenario


def _findings(path, **kw) -> list[dict]:
    return veotrace.diagnose(path, **kw).to_dict()["findings"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_planted_event_is_found_in_its_place(tmp_path, seed):
    s = write_scenario(tmp_path / "run", seed=seed)
    found = _findings(s.folder)
    (ent,) = [f for f in found if f["kind"] == "entropy_trend"]
    assert ent["axis"] == "time" and abs(ent["start"] - s.step_hour * 3600) <= 3600  # within one window
    assert ent["evidence"]["slope_bits_per_hour"] > 0
    breaks = {(f["evidence"]["kernel"], f["start"]) for f in found if f["kind"] == "l2_break"}
    assert breaks == {(k, p) for k, ps in s.l2_breaks.items() for p in ps}
    (coh,) = [f for f in found if f["kind"] == "coherence_onset"]
    assert coh["axis"] == "frame" and coh["start"] == s.onset_frame
    (burst,) = [f for f in found if f["kind"] == "burst_cluster"]  # the nsys export's, on the log's axis
    assert burst["source"].endswith("profile.sqlite") and abs(burst["start"] - s.burst_at_s) <= 3600


@pytest.mark.slow  # 20 seeded scenarios (about 20 s): a rate over seeds, run by .ci/run's slow step
def test_a_clean_scenario_gives_nothing_above_low_in_19_of_20_seeds(tmp_path):
    noisy = 0
    for seed in range(20):
        s = write_scenario(tmp_path / f"clean{seed}", seed=seed, step_hour=None, l2_breaks=0, onset_frame=None)
        if any(f["severity"] != "low" for f in _findings(s.folder)):
            noisy += 1
    assert noisy <= 1


def test_the_ranking_follows_the_planted_sizes(tmp_path):
    small = write_scenario(tmp_path / "small", seed=3, entropy_step_bits=0.2, l2_breaks=0, onset_frame=None)
    large = write_scenario(tmp_path / "large", seed=3, entropy_step_bits=0.6, l2_breaks=0, onset_frame=None)
    s, lg = _findings(small.folder), _findings(large.folder)
    assert s[0]["kind"] == lg[0]["kind"] == "entropy_trend" and lg[0]["score"] > s[0]["score"]
    # ranked: scores never rise down the list
    both = _findings(write_scenario(tmp_path / "both", seed=3).folder)
    assert [f["score"] for f in both] == sorted((f["score"] for f in both), reverse=True)


def test_align_puts_the_frames_on_the_time_axis_and_links_by_time_only(tmp_path):
    s = write_scenario(tmp_path / "run", seed=0, l2_breaks=0)
    out = veotrace.diagnose(s.folder, align=["frames.csv=101h"], frame_period="1h").to_dict()
    (coh,) = [f for f in out["findings"] if f["kind"] == "coherence_onset"]
    assert coh["axis"] == "time" and coh["start"] == pytest.approx((101 + s.onset_frame) * 3600)
    (ent,) = [f for f in out["findings"] if f["kind"] == "entropy_trend"]
    assert any(link.endswith(coh["title"]) and " before: " in link for link in ent["links"])
    assert all("cause" not in link for f in out["findings"] for link in f["links"])
    frames = next(x for x in out["sources"] if x["name"].endswith("frames.csv"))
    assert frames["offset_s"] == 101 * 3600


def test_fail_on_markdown_and_bad_options(tmp_path):
    s = write_scenario(tmp_path / "run", seed=0)
    r = run_cli("diagnose", s.folder, "--fail-on", "high")
    assert r.exit_code == 3 and "--fail-on" in r.stderr
    assert run_cli("diagnose", write_scenario(tmp_path / "clean", seed=0, step_hour=None, l2_breaks=0,
                                               onset_frame=None).folder, "--fail-on", "medium").exit_code == 0
    md = run_cli("diagnose", s.folder, "-f", "markdown").stdout
    assert md.startswith("### veotrace diagnose") and "| 1 | high | frame 17 |" in md
    table = run_cli("diagnose", s.folder, "-f", "csv").stdout
    assert table.splitlines()[0].replace('"', "").startswith("rank,kind,severity,score")
    for args, text in ((["--fail-on", "bad"], "--fail-on must be one of"), (["--align", "nothing.csv=1s"], "not one of the inputs"),
                       (["--align", "frames.csv"], "expected SOURCE=OFFSET")):
        r = run_cli("diagnose", s.folder, *args)
        assert r.exit_code == 2 and r.stderr.count("Error:") == 1 and text in r.stderr


def test_the_reports_first_page_says_what_diagnose_says(tmp_path):
    """The report's findings come from its own sections' runs: the same ranked findings as diagnose, first
    on the page, with their timeline."""
    s = write_scenario(tmp_path / "run", seed=0)
    out = tmp_path / "r.html"
    rep = veotrace.report(s.folder, out)
    assert [(f["kind"], f["title"], f["severity"]) for f in rep.to_dict()["findings"]] == \
        [(f["kind"], f["title"], f["severity"]) for f in _findings(s.folder)]
    html = out.read_text()
    assert html.index('id="findings"') < html.index('id="inputs"') and 'aria-label="Findings by time"' in html


def _count_reads(monkeypatch) -> dict:
    """Count each file's alloc/free reads (every reader is reached through sources.iter_alloc_events' _module)."""
    from veotrace import sources

    reads: dict = {}
    real = sources._module

    def counted(fmt, path=None):
        mod = real(fmt, path)

        class Counting:
            def __getattr__(self, name):
                attr = getattr(mod, name)
                if name != "iter_alloc_events":
                    return attr

                def read(p, **kw):
                    reads[str(p)] = reads.get(str(p), 0) + 1
                    return attr(p, **kw)
                return read
        return Counting()

    monkeypatch.setattr(sources, "_module", counted)
    return reads


def test_diagnose_reads_each_inputs_events_once_for_all_its_analyses(monkeypatch):
    """The rotated logs and the nsys export each feed several analyses (entropy, bursts, fragmentation,
    simulate, tune): their events are read once, by the description that plans the analyses, and every
    analysis runs from that read; past the hold budget they are read again, with the same findings."""
    from tests.conftest import SAMPLES
    from veotrace.reporting import diagnose as dg

    inputs = [SAMPLES / "alloc_logs", SAMPLES / "nsys" / "synthetic_memory.sqlite"]
    reads = _count_reads(monkeypatch)
    once = veotrace.diagnose(inputs).to_dict()
    ran = [a["command"].split()[1] for a in once["analyses"] if a["status"] == "ran"]
    assert {"entropy", "bursts", "fragmentation", "simulate", "tune"} <= set(ran)
    assert len(reads) == 4 and set(reads.values()) == {1}, reads  # three rotated logs and the export
    reads.clear()
    monkeypatch.setattr(dg, "DIAGNOSE_HOLD_BYTES", 1)  # nothing kept: each input read again, once for all
    again = veotrace.diagnose(inputs).to_dict()
    assert again["findings"] == once["findings"] and set(reads.values()) == {2}, reads


def test_each_timed_analysis_has_a_lane_with_its_own_series(tmp_path):
    """The timeline's lanes (JSON ``lanes``, one per source and analysis) carry each analysis' series on the
    common axis: the planted entropy step shows in the log's entropy lane, at its hour."""
    from veotrace.findings.lanes import LANE_POINTS
    from veotrace.plot.findings import plot_findings

    s = write_scenario(tmp_path / "run", seed=4)
    result = veotrace.diagnose(s.folder).value
    lanes = {(lane["source"], lane["analysis"]): lane for lane in result.lanes}
    ent = next(v for (src, a), v in lanes.items() if a == "entropy" and src.endswith("alloc.log.csv"))
    t, v = np.array(ent["t_s"]), np.array(ent["value"])
    assert 0 < len(t) <= LANE_POINTS and t.min() >= 0 and t.max() <= 240 * 3600
    step = s.step_hour * 3600
    assert v[t >= step].mean() - v[t < step].mean() > s.entropy_step_bits / 2
    assert all(len(lane["t_s"]) == len(lane["value"]) for lane in result.lanes)
    timed = [f for f in result.findings if f.axis == "time"]
    assert timed and all(any(lane["command"] == f.command for lane in result.lanes) for f in timed)
    fig = plot_findings(result, size=(900, 500))
    assert len(fig.axes[0].get_yticks()) == len(result.lanes)


def test_the_analyses_on_one_worker_per_core_give_what_one_process_gives(monkeypatch, tmp_path):
    """diagnose runs its analyses on forked workers, one per core: the same findings, lanes and analyses
    as running them one after another in this process."""
    import os

    s = write_scenario(tmp_path / "run", seed=1)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    forked = veotrace.diagnose(s.folder).to_dict()
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    alone = veotrace.diagnose(s.folder).to_dict()
    assert forked == alone and len(forked["analyses"]) >= 6 and forked["findings"]
