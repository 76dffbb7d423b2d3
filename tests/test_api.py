"""The Python API: ``veotrace.<command>(...)`` gives what the command prints, for every command on the samples."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

import veotrace
from tests.conftest import SAMPLES, run_cli
from veotrace import registry
from veotrace.errors import UsageError, VeotraceError
from veotrace.render.export import dumps_json

LOGS = SAMPLES / "alloc_logs"
SNAP = SAMPLES / "snapshots" / "memory_snapshot.pickle"
SIM = SAMPLES / "simulate" / "training_log.csv"
ARR = SAMPLES / "arrays"

#: (API function, positional args, keyword args, the same as command-line words).
CASES = [
    ("entropy", [LOGS], {}, ["entropy", LOGS]),
    ("entropy", [LOGS], {"window": "1h", "step": "30m", "segments": "48,120"},
     ["entropy", LOGS, "--window", "1h", "--step", "30m", "--segments", "48,120"]),
    ("entropy", [LOGS], {"by": "device", "ops": "alloc,free"}, ["entropy", LOGS, "--by", "device", "--ops", "alloc,free"]),
    ("entropy", [LOGS], {"jobs": 2}, ["entropy", LOGS, "--jobs", "2"]),
    ("bursts", [SAMPLES / "alloc_logs_bursty"], {}, ["bursts", SAMPLES / "alloc_logs_bursty"]),
    ("bursts", [LOGS], {"gap": "20ms", "min_events": 3}, ["bursts", LOGS, "--gap", "20ms", "--min-events", "3"]),
    ("bursts", [SAMPLES / "nsys" / "cuda_gpu_trace.csv"], {"events": "kernels"},
     ["bursts", SAMPLES / "nsys" / "cuda_gpu_trace.csv", "--events", "kernels"]),
    ("fragmentation", [SAMPLES / "alloc_addr" / "alloc_addr.csv"], {},
     ["fragmentation", SAMPLES / "alloc_addr" / "alloc_addr.csv"]),
    ("fragmentation", [SNAP], {"at": "end"}, ["fragmentation", SNAP, "--at", "end"]),
    ("fragmentation", [SAMPLES / "alloc_addr" / "alloc_addr.csv"], {"at": "1s", "bins": "4KiB-1MiB,1MiB-"},
     ["fragmentation", SAMPLES / "alloc_addr" / "alloc_addr.csv", "--at", "1s", "--bins", "4KiB-1MiB,1MiB-"]),
    ("fragmentation", [ARR / "addrs.npy"], {}, ["fragmentation", ARR / "addrs.npy"]),
    ("simulate", [SIM], {}, ["simulate", SIM]),
    ("simulate", [SNAP], {"policy": ["torch", "ideal"], "capacity": "1GiB"},
     ["simulate", SNAP, "--policy", "torch", "--policy", "ideal", "--capacity", "1GiB"]),
    ("sites", [SNAP], {"site_depth": 2}, ["sites", SNAP, "--site-depth", "2"]),
    ("l2_breakpoints", [SAMPLES / "ncu" / "l2_details.csv"], {}, ["l2-breakpoints", SAMPLES / "ncu" / "l2_details.csv"]),
    ("l2_breakpoints", [SAMPLES / "ncu" / "l2_details.csv"], {"min_jump": "10%"},
     ["l2-breakpoints", SAMPLES / "ncu" / "l2_details.csv", "--min-jump", "10%"]),
    ("correlate", [ARR / "addrs.npy", ARR / "epe.npy"], {"max_lag": 2, "resamples": 200},
     ["correlate", ARR / "addrs.npy", ARR / "epe.npy", "--max-lag", "2", "--resamples", "200"]),
    ("correlate", [ARR / "run.npz", ARR / "run.npz"], {"addrs_name": "addrs", "epe_name": "epe", "resamples": 200},
     ["correlate", ARR / "run.npz", ARR / "run.npz", "--addrs-name", "addrs", "--epe-name", "epe", "--resamples", "200"]),
    ("coherence", [SAMPLES / "frames" / "frames.csv"], {}, ["coherence", SAMPLES / "frames" / "frames.csv"]),
    ("coherence", [SAMPLES / "frames" / "generation.json"], {"persist": 2},
     ["coherence", SAMPLES / "frames" / "generation.json", "--persist", "2"]),
    ("info", [SAMPLES], {}, ["info", SAMPLES]),
    ("banks", [], {"stride": 2}, ["banks", "--stride", "2"]),
    ("banks", [], {"elem_bytes": 8, "stride": 33, "base": "0x1000"},
     ["banks", "--elem-bytes", "8", "--stride", "33", "--base", "0x1000"]),
]


def _plain(obj) -> object:
    """What the JSON text of ``obj`` parses back to (NaN -> null, tuples -> lists), as the CLI writes it."""
    return json.loads(dumps_json(obj))


@pytest.mark.parametrize("name,args,kwargs,words", CASES, ids=lambda c: str(c) if isinstance(c, str) else None)
def test_api_to_dict_equals_the_commands_json(name, args, kwargs, words):
    res = run_cli(*words, "-f", "json")
    assert res.exit_code == 0, res.stderr
    result = getattr(veotrace, name)(*args, **kwargs)
    assert _plain(result.to_dict()) == json.loads(res.stdout)
    assert result.exit_code == 0
    # what the command prints on stderr is the result's messages (progress bars aside)
    assert [ln for ln in res.stderr.splitlines() if ln] == [*result.messages, *result.closing]


def test_every_api_function_is_a_registered_command_and_every_command_has_one():
    names = {e.api_name for e in registry.commands()}
    assert set(veotrace.__all__) == names
    assert all(callable(getattr(veotrace, n)) for n in names)
    assert "entropy" in dir(veotrace)
    with pytest.raises(AttributeError):
        veotrace.no_such_command  # noqa: B018


def test_gate_api_gives_the_commands_verdict_and_exit_code(tmp_path):
    base = tmp_path / "b.json"
    veotrace.entropy(LOGS, save_baseline=base)
    res = run_cli("gate", LOGS, "--baseline", base, "-f", "json")
    result = veotrace.gate(LOGS, baseline=base)
    got, want = _plain(result.to_dict()), json.loads(res.stdout)
    assert got == want and result.exit_code == res.exit_code
    bursty = run_cli("gate", SAMPLES / "alloc_logs_bursty", "--baseline", base, "--window", "300s")
    assert bursty.exit_code == 1  # too short to test: the API raises the same error
    with pytest.raises(VeotraceError, match="too short"):
        veotrace.gate(SAMPLES / "alloc_logs_bursty", baseline=base)


def test_convert_api_writes_what_the_command_writes(tmp_path):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    res = run_cli("convert", SNAP, "-o", a)
    assert res.exit_code == 0, res.stderr
    result = veotrace.convert(SNAP, b)
    assert pq.read_table(a).equals(pq.read_table(b))
    assert result.to_dict()["written"]["alloc_events"]["rows"] == pq.read_table(b).num_rows
    assert set(result.to_dict()["written"]) == {"alloc_events", "segments", "blocks", "keys"}
    assert res.stderr.splitlines()[-1] == result.closing[0].replace(str(tmp_path / "b."), str(tmp_path / "a."))


def test_formats_api_text_is_the_commands_output():
    assert veotrace.formats().text() == run_cli("formats").stdout


def test_report_api_writes_the_page_and_names_its_sections(tmp_path):
    out = tmp_path / "r.html"
    result = veotrace.report(SAMPLES / "alloc_logs", out)
    assert out.read_text().startswith("<!doctype html>")
    titles = [s["title"] for s in result.to_dict()["sections"]]
    assert titles == ["Size-class entropy over time", "Allocation bursts"]  # as info lists for these logs
    assert result.closing[-1].startswith(f"Wrote {out}")


def test_results_give_tables_pandas_a_plot_and_a_notebook_view(tmp_path):
    pytest.importorskip("pandas")
    r = veotrace.fragmentation(SNAP)
    assert list(r.tables()) == ["windows", "bins", "zones", "state"]
    assert r.to_arrow().equals(r.value.windows)
    assert r.to_arrow("state").num_rows > 0
    assert len(r.to_pandas("bins")) == r.value.bins.num_rows
    html = r._repr_html_()
    assert "veotrace fragmentation" in html and "device 1" in html and "reserved" in html  # two devices: per device
    png = tmp_path / "f.png"
    assert r.plot(png) == png.stat().st_size > 0
    with pytest.raises(UsageError, match="no table 'nope'"):
        r.to_arrow("nope")
    with pytest.raises(UsageError, match="no table output"):
        veotrace.banks().to_arrow()
    with pytest.raises(UsageError, match="draws no picture"):
        veotrace.banks().plot(tmp_path / "b.png")


def test_headline_is_the_reports_first_numbers():
    r = veotrace.entropy(LOGS)
    labels = [k for k, _ in r.headline()]
    assert labels[:3] == ["events counted", "windows", "mean H (bits)"] and labels[3].startswith("slope (")
    assert dict(r.headline())["events counted"] == r.to_dict()["summary"]["events_counted"]


def test_api_refuses_impossible_options_before_any_work():
    with pytest.raises(UsageError, match="--window-events counts events"):
        veotrace.entropy(LOGS, window="1h", window_events=10)
    with pytest.raises(UsageError, match="--events must be alloc or kernels"):
        veotrace.bursts(LOGS, events="launches")
    with pytest.raises(UsageError, match="--jobs"):
        veotrace.entropy(LOGS, engine="dask", jobs=2)
