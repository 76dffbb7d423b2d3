"""ncu CSV reader: every quirk of FORMATS.md B.1/B.2 (preamble, BOM, CRLF, separators, n/a, units, headers)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import real_trace
from veotrace.errors import MissingDependencyError, TraceFormatError
from veotrace.sources import ReadOptions, ReadReport, read_table
from veotrace.sources.detect import sniff
from veotrace.sources.nsight.ncu import normalise_unit, read_metrics

H2020 = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Kernel Time", "Context", "Stream",
         "Section Name", "Metric Name", "Metric Unit", "Metric Value")
H2025 = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
         "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit", "Metric Value")
H_MIN = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
         "Section Name", "Metric Name", "Metric Unit", "Metric Value")
PREAMBLE = ["Starting...", "0.0159346 seconds per iteration", "==PROF== Connected to process 58960 (C:\\app.exe)",
            "==WARNING== Found outstanding GPU clock reset", "==PROF== Disconnected from process 58960"]


def _q(fields) -> str:
    return ",".join(f'"{f}"' for f in fields)


def _lead(header, launch: int, kernel: str) -> list[str]:
    values = {"ID": str(launch), "Process ID": "58960", "Process Name": "app", "Host Name": "127.0.0.1",
              "Kernel Name": kernel, "Kernel Time": "2020-Apr-16 17:54:38", "Context": "1", "Stream": "7",
              "Block Size": "(256, 1, 1)", "Grid Size": "(65536, 1, 1)", "Device": "0", "CC": "12.0"}
    return [values[h] for h in header if h in values]


def _details(header, rows: list[tuple[int, str, str, str, str, str]]) -> list[str]:
    """Lines of a details page; rows are (launch, kernel, section, metric, unit, value)."""
    return [_q(header)] + [_q(_lead(header, i, k) + [s, m, u, v]) for i, k, s, m, u, v in rows]


def _write(tmp_path: Path, lines: list[str], *, bom: bool = False, crlf: bool = False, name="ncu.csv") -> Path:
    text = ("\r\n" if crlf else "\n").join(lines) + ("\r\n" if crlf else "\n")
    path = tmp_path / name
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode())
    return path


def _by(table, metric: str) -> list:
    return [r for r in table.to_pylist() if r["metric"] == metric]


ROWS = [
    (0, "saxpy", "Command line profiler metrics", "dram__bytes_op_read.sum", "byte", "134,221,568"),
    (0, "saxpy", "Command line profiler metrics", "gpu__time_duration.sum", "ns", "292,928"),
    (0, "saxpy", "Command line profiler metrics", "lts__t_sector_hit_rate.pct", "%", "33.26"),
    (0, "saxpy", "Command line profiler metrics", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum", "", "0"),
    (1, "saxpy", "Command line profiler metrics", "dram__bytes_op_read.sum", "byte", "n/a"),
    (1, "saxpy", "Command line profiler metrics", "gpu__time_duration.sum", "ns", "1,000"),
    (1, "saxpy", "Command line profiler metrics", "lts__t_sector_hit_rate.pct", "%", "40"),
    (1, "saxpy", "Command line profiler metrics", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum", "", "6,400"),
]


@pytest.mark.parametrize("header", [H2020, H2025, H_MIN], ids=["2020-kernel-time", "2025-block-grid-device-cc", "minimal"])
@pytest.mark.parametrize(("bom", "crlf"), [(False, False), (True, True), (True, False), (False, True)])
def test_details_page_every_header_generation_with_preamble_bom_crlf(tmp_path, header, bom, crlf):
    path = _write(tmp_path, PREAMBLE + _details(header, ROWS) + ["==PROF== Report: done"], bom=bom, crlf=crlf)
    assert sniff(path).name == "ncu-csv"
    t = read_metrics(path)
    assert t.num_rows == len(ROWS)
    assert [r["value"] for r in _by(t, "dram__bytes_op_read.sum")] == [134221568.0, None]  # separators, n/a
    assert [r["value"] for r in _by(t, "gpu__time_duration.sum")] == [292928.0, 1000.0]
    assert [r["value"] for r in _by(t, "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum")] == [0.0, 6400.0]
    assert [r["unit"] for r in _by(t, "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum")] == [None, None]
    first = t.to_pylist()[0]
    assert first["launch_id"] == 0 and first["kernel"] == "saxpy" and first["stream"] == 7
    assert first["section"] == "Command line profiler metrics" and first["label"] is None
    has_launch_cols = "Block Size" in header
    assert first["block_size"] == ("(256, 1, 1)" if has_launch_cols else None)
    assert first["grid_size"] == ("(65536, 1, 1)" if has_launch_cols else None)
    assert first["device"] == (0 if has_launch_cols else None)
    assert first["cc"] == ("12.0" if has_launch_cols else None)


@pytest.mark.parametrize(("unit", "value", "want_unit", "want"), [
    ("nsecond", "8,992", "ns", 8992.0), ("ns", "5", "ns", 5.0), ("usecond", "1.5", "ns", 1500.0),
    ("msecond", "2", "ns", 2e6), ("second", "1", "ns", 1e9), ("byte", "1,024", "byte", 1024.0),
    ("Kbyte", "1.5", "byte", 1500.0), ("Mbyte", "2", "byte", 2e6), ("Gbyte", "1", "byte", 1e9),
    ("cycle/second", "795,373,665.48", "cycle/s", 795373665.48), ("cycle/nsecond", "1.5", "cycle/s", 1.5e9),
    ("Gbyte/second", "2", "byte/s", 2e9), ("Mbyte/second", "3", "byte/s", 3e6), ("byte/s", "7", "byte/s", 7.0),
    ("%", "43.86", "%", 43.86), ("sector", "90,113", "sector", 90113.0), ("Ksector", "2", "sector", 2000.0),
    ("Msector", "1", "sector", 1e6), ("request", "61,302", "request", 61302.0), ("byte/block", "0", "byte/block", 0.0),
    ("Kbyte/block", "16", "byte/block", 16000.0), ("register/thread", "20", "register/thread", 20.0),
    ("warp/cycle", "1.5", "warp/cycle", 1.5), ("hz", "10", "cycle/s", 10.0), ("GHz", "1.2", "cycle/s", 1.2e9),
    ("cycle", "10,608", "cycle", 10608.0),
])
def test_units_of_every_generation_are_normalised(tmp_path, unit, value, want_unit, want):
    path = _write(tmp_path, _details(H2025, [(0, "k", "S", "x__metric.sum", unit, value)]))
    row = read_metrics(path).to_pylist()[0]
    assert row["unit"] == want_unit
    assert row["value"] == pytest.approx(want)


def test_normalise_unit_leaves_unknown_units_alone():
    assert normalise_unit("inst/warp") == ("inst/warp", 1.0)
    assert normalise_unit("furlong") == ("furlong", 1.0)
    assert normalise_unit("") == ("", 1.0)


def test_labels_map_to_metric_names_including_2020_sol_labels(tmp_path):
    rows = [(0, "k", "GPU Speed Of Light", "SOL L2", "%", "13.22"),
            (0, "k", "GPU Speed Of Light Throughput", "L2 Cache Throughput", "%", "15.38"),
            (0, "k", "Memory Workload Analysis", "L2 Hit Rate", "%", "85.47"),
            (0, "k", "GPU Speed Of Light Throughput", "Memory Throughput", "%", "40"),
            (0, "k", "Memory Workload Analysis", "Memory Throughput", "Gbyte/second", "269"),
            (0, "k", "Launch Statistics", "Registers Per Thread", "register/thread", "20")]
    t = read_metrics(_write(tmp_path, _details(H2020, rows)))
    got = [(r["metric"], r["label"]) for r in t.to_pylist()]
    assert got == [("lts__throughput.avg.pct_of_peak_sustained_elapsed", "SOL L2"),
                   ("lts__throughput.avg.pct_of_peak_sustained_elapsed", "L2 Cache Throughput"),
                   ("lts__t_sector_hit_rate.pct", "L2 Hit Rate"),
                   ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", "Memory Throughput"),
                   ("dram__bytes.sum.per_second", "Memory Throughput"),
                   ("Registers Per Thread", None)]
    assert t.column("value").to_pylist()[4] == pytest.approx(2.69e11)


RAW_HEADER = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
              "Grid Size", "Device", "CC", "dram__bytes_read.sum", "gpu__time_duration.sum", "lts__t_sector_hit_rate.pct",
              "device__attribute_display_name"]
RAW_UNITS = [""] * 11 + ["Kbyte", "usecond", "%", ""]


def _raw_lines(values: list[tuple[str, str, str, str]]) -> list[str]:
    out = [_q(RAW_HEADER), _q(RAW_UNITS)]
    for i, (a, b, c, d) in enumerate(values):
        out.append(_q(_lead(H2025, i, "ampere_fp16_gemm") + [a, b, c, d]))
    return out


@pytest.mark.parametrize(("bom", "crlf"), [(False, False), (True, True)])
def test_raw_page_with_units_row(tmp_path, bom, crlf):
    lines = PREAMBLE + _raw_lines([("2,000,000", "2,000", "85.5", "NVIDIA A30"), ("n/a", "1.5", "90", "NVIDIA A30")])
    report = ReadReport()
    t = read_metrics(_write(tmp_path, lines, bom=bom, crlf=crlf), report=report)
    assert sniff(tmp_path / "ncu.csv").name == "ncu-csv"
    assert [r["value"] for r in _by(t, "dram__bytes_read.sum")] == [2e9, None]
    assert {r["unit"] for r in _by(t, "dram__bytes_read.sum")} == {"byte"}
    assert [r["value"] for r in _by(t, "gpu__time_duration.sum")] == [2e6, 1500.0]
    assert [r["launch_id"] for r in _by(t, "lts__t_sector_hit_rate.pct")] == [0, 1]
    assert _by(t, "device__attribute_display_name") == []  # a text attribute: left out, with a warning
    assert any("device__attribute_display_name" in w for w in report.warnings)
    row = _by(t, "lts__t_sector_hit_rate.pct")[0]
    assert (row["block_size"], row["grid_size"], row["device"], row["cc"]) == ("(256, 1, 1)", "(65536, 1, 1)", 0, "12.0")


def test_details_text_valued_metric_is_left_out_with_a_warning(tmp_path):
    rows = [(i, "k", "Launch Statistics", "Function Cache Configuration", "", "CachePreferNone") for i in range(3)]
    rows += [(i, "k", "Memory Workload Analysis", "L2 Hit Rate", "%", "50") for i in range(3)]
    report = ReadReport()
    t = read_metrics(_write(tmp_path, _details(H2025, rows)), report=report)
    assert set(t.column("metric").to_pylist()) == {"lts__t_sector_hit_rate.pct"}
    assert report.warnings and "Function Cache Configuration" in report.warnings[0]


def test_bad_value_among_numbers_is_an_error_naming_line_and_metric(tmp_path):
    rows = [(i, "k", "S", "lts__t_sector_hit_rate.pct", "%", "abc" if i == 2 else "50") for i in range(4)]
    path = _write(tmp_path, PREAMBLE + _details(H2025, rows))
    with pytest.raises(TraceFormatError) as exc:
        read_metrics(path)
    text = str(exc.value)
    assert f"ncu.csv:{len(PREAMBLE) + 4}:" in text and "lts__t_sector_hit_rate.pct" in text and "'abc'" in text
    report = ReadReport()
    t = read_metrics(path, options=ReadOptions(skip_bad_rows=True), report=report)
    assert t.num_rows == 3 and report.skipped_rows == 1


def test_bad_value_on_raw_page_is_an_error(tmp_path):
    path = _write(tmp_path, _raw_lines([("1", "2", "50", "A30"), ("1", "2", "5O", "A30")]))
    with pytest.raises(TraceFormatError, match="'5O' is not a number"):
        read_metrics(path)


def test_not_an_ncu_csv(tmp_path):
    path = _write(tmp_path, ["a,b,c", "1,2,3"])
    with pytest.raises(TraceFormatError, match="no ncu CSV header"):
        read_metrics(path)


def test_ncu_rep_without_the_module_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ncu_report", None)  # import fails as if not installed
    path = tmp_path / "r.ncu-rep"
    path.write_bytes(b"NVR\x00\x02\x00\x00\x00" + b"\x00" * 64)
    with pytest.raises(MissingDependencyError, match=r"veotrace\[ncu\]"):
        read_metrics(path)


def test_real_2020_details_page():
    path = real_trace("andrewxu_nsight_cfd_097K.log")
    t = read_table([path], "ncu_metrics")
    rows = t.to_pylist()
    assert len({r["launch_id"] for r in rows}) == 100
    assert len({r["kernel"] for r in rows}) == 3
    sol = _by(t, "lts__throughput.avg.pct_of_peak_sustained_elapsed")
    assert len(sol) == 100 and sol[0]["label"] == "SOL L2" and sol[0]["value"] == 13.22
    freq = _by(t, "dram__cycles_elapsed.avg.per_second")[0]
    assert (freq["unit"], freq["value"]) == ("cycle/s", 795373665.48)
    assert _by(t, "gpu__time_duration.sum")[0]["value"] == 8992.0


def _equivalence_files(tmp_path: Path) -> list[Path]:
    from veotrace.synth.ncu import planted_l2

    files = [_write(tmp_path, PREAMBLE + _details(h, ROWS), bom=True, crlf=True, name=f"d{i}.csv")
             for i, h in enumerate((H2020, H2025, H_MIN))]
    files.append(_write(tmp_path, _raw_lines([("2,000", "1", "85.5", "A30"), ("n/a", "1.5", "90", "A30")]), name="r.csv"))
    rows = [(i, "k", "Launch Statistics", "Function Cache Configuration", "", "CachePreferNone") for i in range(3)]
    rows += [(i, "k", "GPU Speed Of Light", "SOL L2", "%", "1,5") for i in range(3)]
    files.append(_write(tmp_path, _details(H2020, rows), name="text.csv"))
    truth = planted_l2(seed=1, kernels=3, launches=50, breaks=1, sigma=1.0)
    files += [truth.write_details(tmp_path / "sd.csv"), truth.write_raw(tmp_path / "sr.csv")]
    from tests.conftest import REAL_TRACES

    real = REAL_TRACES / "andrewxu_nsight_cfd_097K.log"
    return files + ([real] if real.exists() else [])


def test_vectorised_path_equals_the_row_reader(tmp_path, monkeypatch):
    import veotrace.sources.nsight.ncu_fast as fast

    for path in _equivalence_files(tmp_path):
        r1, r2 = ReadReport(), ReadReport()
        a = read_metrics(path, report=r1)
        with monkeypatch.context() as m:
            m.setattr(fast, "read_fast", lambda *a, **k: None)
            b = read_metrics(path, report=r2)
        assert a.schema == b.schema
        assert a.to_pylist() == b.to_pylist(), path.name
        assert r1.warnings == r2.warnings
