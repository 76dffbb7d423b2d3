"""`veotrace report`: one self-contained HTML file with every analysis that applies, its numbers and figure."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import SAMPLES, run_cli
from veotrace import __version__
from veotrace.reporting.html import fmt


class Refs(HTMLParser):
    """Every resource reference of a page: src/href/xlink:href attributes, url(...) and @import in CSS."""

    def __init__(self):
        super().__init__()
        self.refs: list[str] = []
        self.tags: set[str] = set()
        self.ids: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        for k, v in attrs:
            if k in ("src", "href", "xlink:href", "srcset", "poster", "data", "action"):
                self.refs.append(v or "")
            if k == "id":
                self.ids.append(v)

    handle_startendtag = handle_starttag


def outside_refs(html: str) -> list[str]:
    """References that would make the browser fetch something: anything but data: URIs and #fragments."""
    p = Refs()
    p.feed(html)
    refs = p.refs + re.findall(r"url\(\s*['\"]?([^'\")]*)", html) + re.findall(r"@import\s+['\"]?([^'\";]+)", html)
    return [r for r in refs if not (r.startswith("#") or r.startswith("data:"))]


@pytest.fixture(scope="session")
def sample_report(tmp_path_factory):
    """The report over the sample log folder, an ncu export and a frames table (shared with test_browser)."""
    out = tmp_path_factory.mktemp("report") / "report.html"
    res = run_cli("report", SAMPLES / "alloc_logs", SAMPLES / "ncu" / "l2_details.csv", SAMPLES / "frames" / "frames.csv",
                  "-o", out)
    return res, out


def test_report_over_the_samples(sample_report):
    res, out = sample_report
    assert res.exit_code == 0, res.stderr
    assert res.stdout == ""
    assert res.stderr.strip().splitlines()[-1].startswith(f"Wrote {out}")
    html = out.read_text(encoding="utf-8")
    p = Refs()
    p.feed(html)
    assert "script" not in p.tags and "iframe" not in p.tags and "link" not in p.tags  # readable with JavaScript off
    assert outside_refs(html) == []
    assert len(p.ids) == len(set(p.ids))  # figure ids made unique per figure
    for title in ("Size-class entropy over time", "Allocation bursts", "L2 breakpoints per kernel", "Coherence collapse"):
        assert f"<h2>{title} <small>" in html
    # the findings' timeline on the first page, then entropy, l2, coherence; the sample log has no burst at 5 ms
    assert html.count("<figure") == 4 and html.index('id="findings"') < html.index('id="inputs"')
    assert f"veotrace {__version__}" in html
    assert "prefers-color-scheme: dark" in html and "@media print" in html
    assert "<code>veotrace entropy sample_traces/alloc_logs/</code>" in html.replace(str(SAMPLES.parent) + "/", "")


def test_report_numbers_are_the_analyses_numbers(sample_report):
    from veotrace.analysis.entropy.entropy import COLUMNS, compute_entropy
    from veotrace.analysis.frames.coherence import detect_collapse
    from veotrace.analysis.l2.l2 import find_breakpoints
    from veotrace.sources import iter_alloc_events, read_table
    from veotrace.sources.frames import read_frame_metrics

    html = sample_report[1].read_text(encoding="utf-8")
    ent = compute_entropy(iter_alloc_events([SAMPLES / "alloc_logs"], columns=COLUMNS))
    assert f"<li><b>{fmt(ent.summary['mean_entropy_bits'])}</b><span>mean H (bits)</span></li>" in html
    shown = ent.trend.get("display") or {"unit": "bits/hour", "slope": ent.trend["slope"]}
    assert f"<li><b>{fmt(shown['slope'])}</b><span>slope ({shown['unit']})</span></li>" in html
    l2 = find_breakpoints(read_table([SAMPLES / "ncu" / "l2_details.csv"], "ncu_metrics"))
    assert f"<li><b>{l2.breakpoints.num_rows}</b><span>breakpoints</span></li>" in html
    frames = read_frame_metrics(SAMPLES / "frames" / "frames.csv")
    onset = detect_collapse(frames.frame, frames.metrics).onset_frame
    assert onset == 18 and f"<li><b>{onset}</b><span>onset frame</span></li>" in html


def test_report_correlates_an_npz_with_addrs_and_epe(tmp_path):
    from veotrace.analysis.frames.correlation import align_pairs, correlate
    from veotrace.synth.frames import address_epe_series

    addrs, epe, _ = address_epe_series(60, rho=0.8, seed=3)
    np.savez(tmp_path / "run.npz", addrs=addrs, epe=epe)
    out = tmp_path / "r.html"
    res = run_cli("report", tmp_path / "run.npz", "-o", out)
    assert res.exit_code == 0, res.stderr
    html = out.read_text(encoding="utf-8")
    want = correlate(*(lambda p: (p.jump_bytes, p.epe_px))(align_pairs(addrs, np.ones(addrs.shape, bool), epe)),
                     max_lag=3)
    assert want.headline() in html
    assert "--addrs-name addrs --epe-name epe" in html and "<figure" in html


def test_a_refused_analysis_is_a_section_saying_why(tmp_path):
    np.savez(tmp_path / "flat.npz", addrs=np.full(20, 4096, np.uint64), epe=np.linspace(1, 2, 19))
    np.save(tmp_path / "lonely.npy", np.arange(10.0))
    (tmp_path / "frames.csv").write_text((SAMPLES / "frames" / "frames.csv").read_text())
    out = tmp_path / "r.html"
    res = run_cli("report", tmp_path, "-o", out)
    assert res.exit_code == 0, res.stderr
    html = out.read_text(encoding="utf-8")
    assert html.count('class="error">Not available:') == 2
    assert "address jumps are constant" in html and "correlate needs an ADDRS and an EPE" in html
    assert html.count("<figure") == 2  # the findings' timeline, and coherence still drawn
    assert res.stderr.count("Warning: Address jumps vs optical-flow error not available") == 2


def test_report_over_inputs_no_analysis_accepts(tmp_path):
    (tmp_path / "notes.txt").write_text("hello\n")
    res = run_cli("report", tmp_path / "notes.txt", "-o", tmp_path / "r.html")
    assert res.exit_code == 1 and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: none of the inputs feeds an analysis: ")
    assert "notes.txt" in lines[0] and not (tmp_path / "r.html").exists()


def test_report_to_an_unwritable_place(tmp_path):
    res = run_cli("report", SAMPLES / "frames" / "frames.csv", "-o", tmp_path / "missing" / "r.html")
    assert res.exit_code == 1 and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "does not exist" in lines[0]


def test_plan_groups_rotated_logs_and_pairs_arrays(tmp_path):
    from veotrace.analysis.info import FileInfo
    from veotrace.reporting.plan import plan

    logs = [FileInfo(f"d/log.{i}.csv", "alloc-csv", None, supports=["entropy", "convert", "bursts"],
                     details={"alloc_events": {"first_ns": 0, "last_ns": 10**15 * i, "events_without_time": 0}})
            for i in (1, 2)]
    arrays = [FileInfo("a/x_addrs.npy", "npy", None, supports=["correlate"]),
              FileInfo("a/x_epe.npy", "npy", None, supports=["correlate"]),
              FileInfo("a/other.npy", "npy", None, supports=["correlate"])]
    other = [FileInfo("x.log", "alloc-csv", None, supports=["convert", "gate", "fragmentation (address strides)"])]
    jobs = plan(logs + arrays + other, [[0, 1], [2, 3, 4], [5]])
    cmds = [(j.command, [str(p) for p in j.paths], j.note is None) for j in jobs]
    assert "x.log" not in str(cmds)  # commands the report has no runner for (and array strides) are left out
    assert ("entropy", ["d/log.1.csv", "d/log.2.csv"], True) in cmds
    assert ("bursts", ["d/log.1.csv", "d/log.2.csv"], True) in cmds
    assert ("correlate", ["a/x_addrs.npy", "a/x_epe.npy"], True) in cmds
    assert ("correlate", ["a/other.npy"], False) in cmds
    assert jobs[0].cli == "veotrace entropy d/"  # spans 2e6 s: the default window gives enough windows
    short = plan([FileInfo("s.csv", "alloc-csv", None, supports=["entropy"], details={"alloc_events": {
        "first_ns": 0, "last_ns": 3 * 10**9, "events_without_time": 0}})], [[0]])
    assert short[0].params == {}  # the window is the analysis' own choice, as for `veotrace entropy s.csv`


def _li(value, label: str) -> str:
    return f"<li><b>{fmt(value)}</b><span>{label}</span></li>"


@pytest.fixture(scope="module")
def replay_report(tmp_path_factory):
    """The report over an alloc log with addresses and a PyTorch snapshot (both feed fragmentation and simulate)."""
    out = tmp_path_factory.mktemp("replay") / "report.html"
    res = run_cli("report", SAMPLES / "alloc_addr" / "alloc_addr.csv", SAMPLES / "snapshots" / "memory_snapshot.pickle",
                  "-o", out)
    assert res.exit_code == 0, res.stderr
    return re.split(r"<h2>", out.read_text(encoding="utf-8"))


def _section(parts: list[str], title: str, name: str) -> str:
    (found,) = [p for p in parts if p.startswith(f"{title} <small>{name}</small>")]
    return found


@pytest.mark.parametrize("path", ["alloc_addr/alloc_addr.csv", "snapshots/memory_snapshot.pickle"])
def test_report_fragmentation_and_simulate_numbers(replay_report, path):
    import json

    frag = json.loads(run_cli("fragmentation", SAMPLES / path, "--format", "json").stdout)
    sec = _section(replay_report, "Fragmentation over time", Path(path).name)
    end = frag["end"]["total"]
    if len(frag["end"]["devices"]) > 1:  # each device's own state, none pooled (issue 24)
        from veotrace.render.console import fmt_bytes

        for d, v in frag["end"]["devices"].items():
            assert f"<span>device {d}</span>" in sec and f"{fmt_bytes(v['reserved_bytes'])} reserved" in sec
        assert "reserved at end" not in sec
    else:
        for key, label in (("reserved_bytes", "reserved at end"), ("allocated_bytes", "allocated at end"),
                           ("largest_free_bytes", "largest free block"), ("external_frag", "external fragmentation")):
            assert _li(end[key], label) in sec
    s = frag["summary"]
    assert _li(f"{s['fragmented_windows']} of {s['windows']}", "fragmented windows") in sec
    assert "<figure" in sec and "threshold" in sec

    sim = json.loads(run_cli("simulate", SAMPLES / path, "--policy", "torch", "--policy", "bestfit", "--policy",
                             "ideal", "--format", "json").stdout)
    sec = _section(replay_report, "Allocator what-if", Path(path).name)
    peaks = {p["policy"]: p["peak_reserved_bytes"] for p in sim["policies"]}
    assert _li(sim["whatif"][0]["policy"], "best policy") in sec
    for p in sim["policies"]:
        if p["policy"] not in ("torch", "ideal"):
            continue
        if len(p.get("per_device") or {}) > 1:  # several GPUs: each one's peak, never their sum (issue 24)
            from veotrace.render.console import fmt_bytes

            text = ", ".join(f"device {d}: {fmt_bytes(x['peak_reserved_bytes'])}" for d, x in sorted(p["per_device"].items()))
            assert _li(text, f"{p['policy']} peak reserved per device") in sec
        else:
            assert _li(peaks[p["policy"]], f"{p['policy']} peak reserved") in sec
    assert [w["policy"] for w in sim["whatif"]] == re.findall(r"<tr><td class=n>\d+</td><td>(\w+)</td>", sec)
    assert "torch, bestfit, ideal (the report&#x27;s subset" in sec or "torch, bestfit, ideal (the report's subset" in sec
    v = sim["validation"]
    if path.endswith(".pickle"):  # the snapshot's recorded segment allocs check the torch model
        assert _li(f"{100 * v['share']:.1f}%", "segment allocs reproduced") in sec
    else:
        assert v is None and "segment allocs reproduced" not in sec


def test_report_leaves_out_replays_of_logs_whose_frees_do_not_pair(sample_report):
    html = sample_report[1].read_text(encoding="utf-8")  # sample_traces/alloc_logs: every free unknown
    assert "Fragmentation over time" not in html and "Allocator what-if" not in html


@pytest.mark.slow
def test_long_log_report_is_small(tmp_path):
    """A bursty 237-hour log of 10M events (the benchmark's realistic log) gives a report under 5 MB."""
    from veotrace.synth.alloc import write_realistic_log

    log = tmp_path / "long.csv"
    write_realistic_log(log, events=10_000_000, hours=237)
    out = tmp_path / "r.html"
    res = run_cli("report", log, "-o", out)
    assert res.exit_code == 0, res.stderr
    assert out.stat().st_size < 5_000_000


def test_every_line_info_lists_maps_to_its_report_section():
    from veotrace.reporting.plan import _base

    assert _base("entropy --window-events N") == "entropy"
    assert _base("bursts --events kernels") == "bursts --events kernels"
    assert _base("l2-breakpoints --metric NAME (per-kernel picture only)") == "l2-breakpoints"
    assert _base("convert") is None


def test_report_embeds_the_interactive_view_with_its_still_figure_for_no_script(replay_report):
    """A snapshot's report holds veotrace view's own element and data (one lane per input, as the command
    draws them), the page's scripts once and inline only, and the still figure inside <noscript>."""
    import json

    from veotrace.viewer.page import CSP

    html = "<h2>".join(replay_report)
    sec = _section(replay_report, "Memory timeline (interactive)", "memory_snapshot.pickle")
    assert 'class="vt-view"' in sec and "<noscript><figure" in sec
    (data,) = re.findall(r'<script type="application/json" class="vt-data"[^>]*>(.*?)</script>', sec, re.S)
    page = json.loads(data)
    import veotrace

    own = veotrace.view(SAMPLES / "snapshots" / "memory_snapshot.pickle").value.page_data()
    assert [lane["peaks"] for lane in page["lanes"]] == [lane["peaks"] for lane in own["lanes"]]
    assert html.count(f'content="{CSP}"') == 1 and html.count("uPlot 1.6.32, vendored") == 1
    assert not re.search(r"<script[^>]*\bsrc=", html) and outside_refs(html) == []
