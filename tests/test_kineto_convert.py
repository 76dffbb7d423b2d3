"""``convert`` of PyTorch profiler traces (issue 45): the Parquet file carries the traces' totals, ops and checks
beside its events (``sources.kineto.converted``), so every command gives it the traces' own answer: the JSON of
fragmentation, sites, simulate, tune, diagnose and info's profiler summary equal the trace route's; a side table
gone or damaged gets one Error line naming the file."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import run_cli
from veotrace.synth.kineto import profiler_trace, write_ranks, write_trace


def _json(*args, names=()) -> dict:
    r = run_cli(*args, "-f", "json")
    assert r.exit_code == 0, r.stderr
    text = r.stdout
    for name in names:  # the inputs' names (the Parquet file, its side tables, the traces) are not the answer
        text = text.replace(json.dumps(str(name))[1:-1], "X")
    return json.loads(text)


def _converted(tmp_path, source) -> tuple:
    out = tmp_path / "out" / "t.parquet"
    out.parent.mkdir()
    r = run_cli("convert", source, "-o", out)
    assert r.exit_code == 0, r.stderr
    sides = sorted(out.parent.glob("t.profiler-*.parquet"))
    return out, sides


@pytest.mark.parametrize("device_type", [1, 6])
def test_every_profiler_analysis_of_the_parquet_file_is_the_traces(tmp_path, device_type):
    trace, truth = profiler_trace(31, steps=8, device_type=device_type)
    path = write_trace(tmp_path / "t.json", trace)
    out, sides = _converted(tmp_path, path)
    assert [s.name for s in sides] == ["t.profiler-0.ops.parquet", "t.profiler-0.parquet"]
    names = (out, *sides, path)
    for command in (("fragmentation",), ("sites", "--by", "frame"), ("simulate",), ("tune",),
                    ("diagnose",)):
        got = _json(*command, out, names=names)
        want = _json(*command, path, names=names)
        assert got == want, command
    frag = _json("fragmentation", out)
    dev = (device_type, 0)
    assert max(w["reserved_bytes_peak"] for w in frag["windows"]) == truth.peak_reserved[dev]
    info = _json("info", out)["files"][0]
    trace_info = _json("info", path)["files"][0]
    assert info["details"]["profiler_memory"]["lanes"] == trace_info["details"]["profiler_memory"]["lanes"]
    assert "sites --by op" in info["supports"]


def test_a_folder_of_ranks_converts_to_one_file_with_a_table_per_rank(tmp_path):
    truths = write_ranks(tmp_path / "run", 19, world_size=2)
    out, sides = _converted(tmp_path, tmp_path / "run")
    assert len([s for s in sides if not s.name.endswith(".ops.parquet")]) == 2
    names = (out, *sides, *sorted((tmp_path / "run").iterdir()))
    for command in (("fragmentation",), ("sites",)):
        assert _json(*command, out, names=names) == _json(*command, tmp_path / "run", names=names), command
    growth = _json("sites", out)["reserved_growth"]
    assert [g["rises"] for g in growth.values()] == [t.rises[(1, k)] for k, t in enumerate(truths)]


def test_a_side_table_gone_gets_one_line_naming_the_file(tmp_path):
    trace, _ = profiler_trace(3, steps=3)
    out, sides = _converted(tmp_path, write_trace(tmp_path / "t.json", trace))
    (memory,) = [s for s in sides if not s.name.endswith(".ops.parquet")]
    memory.unlink()
    r = run_cli("fragmentation", out)
    assert r.exit_code == 1 and "Traceback" not in r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert re.match(rf"Error: {re.escape(str(out))}: converted from a profiler trace, but its table t.profiler-0.parquet "
                    "is not beside it", line)


def test_a_trace_of_cpu_events_only_is_refused_as_before_and_writes_nothing(tmp_path):
    args = {"Addr": 4096, "Bytes": 64, "Total Allocated": 64, "Total Reserved": 0, "Device Type": 0, "Device Id": -1}
    event = {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 1.0, "args": args}
    path = tmp_path / "cpu.pt.trace.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": [event, dict(event, ts=2.0)]}))
    out = tmp_path / "out" / "t.parquet"
    out.parent.mkdir()
    r = run_cli("convert", path, "-o", out)
    assert r.exit_code == 1 and "Traceback" not in r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"Error: {path}: the trace holds no GPU memory events")
    assert list(out.parent.iterdir()) == []
