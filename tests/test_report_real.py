"""The HTML report on every real file: no traceback, a clear answer (issue 25's magma27 KeyError: 'share')."""

from __future__ import annotations

import pytest

from tests.conftest import REAL_TRACES, real_trace, run_cli

_REAL = sorted(p.name for p in REAL_TRACES.glob("*") if p.name != "SOURCES.md") if REAL_TRACES.is_dir() else []


@pytest.mark.parametrize("name", _REAL)
def test_report_on_each_real_file_ends_cleanly(name, tmp_path):
    out = tmp_path / "r.html"
    res = run_cli("report", real_trace(name), "-o", out)
    assert "Traceback" not in res.stderr
    if res.exit_code == 0:
        assert out.read_text().startswith("<!doctype html>") and res.stderr.splitlines()[-1].startswith(f"Wrote {out}")
    else:  # no analysis applies: one Error: line
        assert res.exit_code == 1 and res.stderr.splitlines()[-1].startswith("Error: ")


def test_a_snapshot_without_segment_events_gets_a_simulate_section_saying_there_is_nothing_to_validate(tmp_path):
    out = tmp_path / "r.html"
    res = run_cli("report", real_trace("magma27_memory_snapshot.pickle"), "-o", out)
    assert res.exit_code == 0, res.stderr
    html = out.read_text()
    assert "Allocator what-if" in html and "nothing to validate against" in html
    assert "Allocator settings recommended (tune)" in html  # tune's section: the same replay, per setting
    assert res.stderr.splitlines()[-1].endswith(" 7 of 7 analyses)")  # view is one of them
