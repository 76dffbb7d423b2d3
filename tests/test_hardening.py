"""Hostile and broken inputs (issue 14): the corpus in tests/bad_inputs with the exact message each
gives, exact --skip-bad-rows counts, bounded memory on decompression bombs, and safe outputs."""

from __future__ import annotations

import gzip
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import real_trace, run_cli
from veotrace.errors import VeotraceError
from veotrace.sources import ReadOptions, ReadReport, iter_alloc_events

BAD = Path(__file__).parent / "bad_inputs"
LOG = Path(__file__).parents[1] / "sample_traces" / "alloc_logs" / "alloc.log.1.csv"
CASES = [line.split("\t") for line in (BAD / "EXPECTED.tsv").read_text().splitlines()
         if line.strip() and not line.startswith("#")]


def _case_args(name: str, command: str) -> list:
    path = BAD / name
    command, *extra = command.split()
    if "{path}" in extra:  # the file goes where the command names it ({log}: a sample log), e.g. gate's --baseline
        args = [command, *(path if a == "{path}" else LOG if a == "{log}" else a for a in extra)]
    else:
        args = [command, path, path] if command == "correlate" else [command, *extra, path]
    if command == "entropy" and not {"--follow", "--window", "--window-events"} & set(extra):
        args += ["--window-events", "10"]
    return args


@pytest.mark.parametrize("name, command, code, message", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gives_its_one_error_line(monkeypatch, name, command, code, message):
    path = BAD / name
    r = run_cli(*_case_args(name, command))
    assert r.exit_code == int(code), r.stderr
    if int(code) == 0:  # a file that is now read as it should be: what it shows, and no error
        assert message in r.stdout and "Error:" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    else:
        assert r.stdout == ""
        lines = r.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: " if int(code) == 2 else f"Error: {path}"), r.stderr
        assert message in lines[0]
        assert len(lines[0]) < 400
    if name.endswith(".pickle") and "--follow" not in command:  # one reading: the streamed read says the same
        monkeypatch.setenv("VEOTRACE_SNAPSHOT_STREAM_BYTES", "1")
        streamed = run_cli(*_case_args(name, command))
        assert (streamed.exit_code, streamed.stdout, streamed.stderr) == (r.exit_code, r.stdout, r.stderr)


def test_deep_tuple_pickle_does_not_kill_the_process():
    """Unpickled by CPython's C unpickler this file dies with SIGSEGV; veotrace refuses it first."""
    code = "from veotrace.sources.snapshots.safe_pickle import load_plain; from pathlib import Path; import sys\n" \
           "try: load_plain(Path(sys.argv[1]))\nexcept Exception as e: print(type(e).__name__)"
    out = subprocess.run([sys.executable, "-c", code, str(BAD / "deep_tuple_key.pickle")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "TraceFormatError"


def test_pure_python_nesting_walk_agrees_with_the_c_one():
    from veotrace.sources.snapshots import safe_pickle

    for name in ("deep_tuple_key.pickle", "deep_list.pickle", "names_a_callable.pickle", "pickle_int_5000_digits.pickle",
                 "binbytes_claim_4gib.pickle", "frame_length_lies.pickle"):
        data = (BAD / name).read_bytes()
        assert safe_pickle._nesting_py(data, 100) == safe_pickle.nesting(data)
    for name in ("muduard_memory_snapshot.pkl",):
        try:
            data = real_trace(name).read_bytes()
        except Exception:  # noqa: BLE001 - skipped below when the real traces are absent
            continue
        assert safe_pickle.nesting(data) == safe_pickle._nesting_py(data, 100) == (6, len(data), 1)


def test_the_two_walks_agree_opcode_for_opcode_on_mutated_pickles():
    """Result, offset and how the walk stopped: the pure-Python walk is a port of the C one, so a build without
    the C parts refuses (and cuts) the same pickles at the same bytes."""
    import random

    from fuzz.mutate import mutate
    from fuzz.pickles import mutate_ops
    from veotrace.sources.snapshots import safe_pickle

    if safe_pickle._picklescan is None:
        pytest.skip("the C walk is not built")
    seeds = [pickle.dumps({"segments": [{"address": 1, "total_size": 2, "t": (0, 0)}], "device_traces": [[
        {"action": "alloc", "addr": 2**63 + i, "size": 4096, "frames": [{"name": "f", "line": i}]} for i in range(6)]]},
        protocol=p) for p in (2, 4, 5)]
    rng = random.Random(40)
    for _ in range(2000):
        data = rng.choice(seeds)
        data = (mutate_ops if rng.random() < 0.5 else mutate)(data, rng)
        assert safe_pickle.nesting(data) == safe_pickle._nesting_py(data, 100), data


def _log(tmp_path, bad_lines: dict[int, str], n: int = 1001) -> Path:
    lines = ["timestamp,op_type,size_bytes"] + [f"{i * 1000},alloc,4096" for i in range(n)]
    for lineno, text in bad_lines.items():
        lines[lineno - 1] = text
    path = tmp_path / "log.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("bad", ['101000,"alloc,4096', "101000,al\0loc,4096", "101000,alloc", "101000,alloc,4096,7",
                                 "101000,alloc,12.5", "101000,alloc,-1"])
def test_skip_bad_rows_is_exact_and_errors_name_the_line(tmp_path, bad):
    path = _log(tmp_path, {102: bad, 500: bad})
    with pytest.raises(VeotraceError) as exc:
        list(iter_alloc_events([path]))
    assert exc.value.line == 102
    report = ReadReport()
    rows = sum(b.num_rows for b in iter_alloc_events([path], options=ReadOptions(skip_bad_rows=True), report=report))
    assert (rows, report.skipped_rows) == (999, 2)
    assert [ln for _, ln, _ in report.first_skipped] == [102, 500]


def test_jsonl_refuses_floats_bools_and_huge_values_like_csv(tmp_path):
    for value, shown in (("12345.9", "12345.9"), ("true", "true"), ("18446744073709551616", "outside the 64-bit")):
        path = tmp_path / "log.jsonl"
        path.write_text('{"timestamp": 1, "op_type": "alloc", "size_bytes": 1}\n'
                        f'{{"timestamp": 2, "op_type": "alloc", "size_bytes": {value}}}\n')
        with pytest.raises(VeotraceError, match=shown) as exc:
            list(iter_alloc_events([path]))
        assert exc.value.line == 2


def _rss_run(code: str, *args: str) -> tuple[str, int]:
    """Run ``code`` in a fresh interpreter; its stdout and peak RSS in MiB."""
    wrapped = code + "\nimport resource; print('RSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)"
    out = subprocess.run([sys.executable, "-c", wrapped, *args], capture_output=True, text=True, timeout=300,
                         cwd=Path(__file__).parents[1])
    rss = int(out.stdout.split("RSS")[-1])
    return out.stdout + out.stderr, rss


def _bomb(path: Path, head: bytes, fill: bytes, total: int) -> Path:
    """``head`` then ``fill`` repeated to ``total`` bytes, gzip'd as repeated members (a ~1 MB bomb)."""
    member = min(16 << 20, total)
    block = gzip.compress(fill * (member // len(fill)), compresslevel=9, mtime=0)
    with path.open("wb") as fh:
        fh.write(gzip.compress(head, mtime=0))
        for _ in range(total // member):
            fh.write(block)
    return path


READ = ("import sys; from pathlib import Path; from veotrace.errors import VeotraceError\n"
        "from fuzz.targets import run\n"
        "try: run(sys.argv[1], Path(sys.argv[2])); print('READ')\n"
        "except VeotraceError as e: print('ERROR', e)")


BOMBS = [
    ("alloc_events", b"timestamp,op_type,size_bytes\n1,alloc,", b"1", "a line is longer than"),
    ("segments", b"\x80\x04", b"N0", "larger than"),  # NONE POP: opcodes of a pickle to the end
    ("ncu_metrics", b'"ID","Process ID","Process Name"\n', b"x", "larger than"),
    ("gpu_activity", b"Start (ns),Duration (ns),CorrId,Name\n", b"x", "larger than"),
    ("frames", b'{"frames": [', b"0,", "larger than"),  # blank space is refused at the head (issue 25)
]


@pytest.mark.parametrize("target, head, fill, expect", BOMBS, ids=[b[0] for b in BOMBS])
def test_small_bombs_are_refused_at_the_limit(tmp_path, monkeypatch, target, head, fill, expect):
    """The same bombs at 8 MiB with 1 MiB / 64 KiB limits (fast); the 1 GiB ones with RSS are marked slow."""
    from fuzz.targets import run

    monkeypatch.setenv("VEOTRACE_MAX_FILE_BYTES", "1M")
    monkeypatch.setenv("VEOTRACE_MAX_LINE_BYTES", "64K")
    path = _bomb(tmp_path / "bomb.gz", head, fill, 8 << 20)
    with pytest.raises(VeotraceError, match=expect):
        run(target, path)


@pytest.mark.slow
@pytest.mark.parametrize("target, head, fill, expect", BOMBS, ids=[b[0] for b in BOMBS])
def test_decompression_bombs_stay_bounded(tmp_path, target, head, fill, expect):
    """1 GiB after decompression, ~1 MB on disk: refused with memory well under the bomb's size."""
    path = _bomb(tmp_path / "bomb.gz", head, fill, 1 << 30)
    assert path.stat().st_size < 4 << 20
    env_code = f"import os; os.environ['VEOTRACE_MAX_FILE_BYTES'] = '256M'\n{READ}"
    out, rss = _rss_run(env_code, target, str(path))
    assert "ERROR" in out and expect in out, out
    assert rss - _baseline_rss(target, tmp_path) < 400, f"peak RSS {rss} MiB"  # limit 256 MiB, + one block


def _baseline_rss(target: str, tmp_path: Path) -> int:
    """Peak RSS of the same interpreter reading a small valid file (imports dominate it)."""
    from fuzz.targets import SEED_TARGETS, seeds

    name = next(n for n, targets in SEED_TARGETS.items() if target in targets)
    path = tmp_path / f"baseline-{name}"
    path.write_bytes(seeds(tmp_path)[name])
    out, rss = _rss_run(READ, target, str(path))
    assert "READ" in out, out
    return rss


def test_declared_array_size_is_not_allocated(tmp_path):
    out, rss = _rss_run(READ, "arrays", str(BAD / "huge_shape.npy"))
    assert "header declares 1,000,000,000,000 elements" in out
    assert rss - _baseline_rss("arrays", tmp_path) < 100, f"peak RSS {rss} MiB"


def test_limits_are_configurable(tmp_path, monkeypatch):
    path = tmp_path / "log.csv"
    path.write_text("timestamp,op_type,size_bytes\n" + "1,alloc," + "1" * 5000 + "\n")
    monkeypatch.setenv("VEOTRACE_MAX_LINE_BYTES", "1K")
    with pytest.raises(VeotraceError, match="longer than 1 KiB"):
        list(iter_alloc_events([path], options=ReadOptions(block_bytes=1024)))
    monkeypatch.setenv("VEOTRACE_MAX_LINE_BYTES", "lots")
    r = run_cli("entropy", BAD / "long_field.csv")
    assert r.exit_code == 2 and "VEOTRACE_MAX_LINE_BYTES='lots' is not a positive byte count" in r.stderr


# ----------------------------------------------------------------------------- outputs
SAMPLE = Path(__file__).parents[1] / "sample_traces" / "alloc_logs" / "alloc.log.1.csv"


def test_output_never_overwrites_an_input(tmp_path):
    log = tmp_path / "in.csv"
    log.write_bytes(SAMPLE.read_bytes())
    for args in (("entropy", log, "-f", "csv", "-o", log), ("convert", log, "-o", log)):
        r = run_cli(*args)
        assert r.exit_code == 2 and "refusing to write the output over an input of this command" in r.stderr
        assert log.read_bytes() == SAMPLE.read_bytes()
    link = tmp_path / "link.csv"
    link.symlink_to(log)
    r = run_cli("entropy", log, "-f", "json", "-o", link)
    assert r.exit_code == 2 and log.read_bytes() == SAMPLE.read_bytes()


def test_output_to_a_full_disk_is_one_error_line_and_no_file(tmp_path):
    r = run_cli("entropy", SAMPLE, "-f", "csv", "-o", "/dev/full")
    assert r.exit_code == 1 and r.stderr.startswith("Error: /dev/full: cannot write the output: No space left on device")
    assert len(r.stderr.splitlines()) == 1


def test_output_in_an_unwritable_place(tmp_path):
    for target in (tmp_path / "missing" / "out.csv", Path("/proc/out.csv")):
        r = run_cli("entropy", SAMPLE, "-f", "csv", "-o", target)
        assert r.exit_code == 1 and r.stderr.startswith(f"Error: {target}: cannot write the output"), r.stderr
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    r = run_cli("entropy", SAMPLE, "-f", "csv", "-o", loop)
    assert r.exit_code == 1 and "Too many levels of symbolic links" in r.stderr


def test_symlink_output_is_written_through_and_no_partial_is_left(tmp_path):
    real = tmp_path / "real.csv"
    real.write_text("old")
    link = tmp_path / "out.csv"
    link.symlink_to(real)
    r = run_cli("entropy", SAMPLE, "-f", "csv", "-o", link)
    assert r.exit_code == 0 and link.is_symlink() and real.read_text().startswith('"window"')
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv", "real.csv"]


def test_failed_convert_leaves_no_output(tmp_path):
    out = tmp_path / "out.parquet"
    r = run_cli("convert", BAD / "stray_quote.csv", "-o", out)
    assert r.exit_code == 1 and ":102:" in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_convert_segment_only_snapshot_writes_segments_and_blocks(tmp_path):
    path = real_trace("muduard_memory_snapshot.pkl")
    out = tmp_path / "out.parquet"
    r = run_cli("convert", path, "-o", out)
    assert r.exit_code == 0, r.stderr
    assert "holds 255 segments (2,140 blocks) and no trace events" in r.stderr
    assert "255 segments to" in r.stderr and "2,140 blocks to" in r.stderr
    import pyarrow.parquet as pq

    assert pq.read_table(tmp_path / "out.segments.parquet").num_rows == 255
    assert pq.read_table(tmp_path / "out.blocks.parquet").num_rows == 2140
    r = run_cli("entropy", path)
    assert r.exit_code == 1 and "holds 255 segments (2,140 blocks) and no trace events" in r.stderr


def test_folder_lists_fifos_and_symlink_loops(tmp_path):
    (tmp_path / "a.csv").write_bytes(SAMPLE.read_bytes())
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    r = run_cli("entropy", tmp_path, "--window", "3600")
    assert r.exit_code == 0
    assert "skipped 2 folder entries that are not a regular file" in r.stderr
    assert "pipe (a FIFO)" in r.stderr and "loop (a symlink loop)" in r.stderr
    r = run_cli("entropy", tmp_path / "pipe")
    assert r.exit_code == 1 and "not a regular file (a FIFO)" in r.stderr


def test_missing_path_wording():
    r = run_cli("entropy", "/nonexistent/log.csv")
    assert r.exit_code == 1 and r.stderr == "Error: /nonexistent/log.csv: No such file or directory. Check the path and permissions.\n"


def test_bursts_refuse_timestamps_that_would_wrap(tmp_path):
    path = tmp_path / "wrap.csv"
    path.write_text("timestamp,op_type,size_bytes\n-9000000000000000000,alloc,1\n-8999999999999999999,alloc,1\n"
                    "9000000000000000000,alloc,1\n9000000000000000001,alloc,1\n")
    r = run_cli("bursts", path)
    assert r.exit_code == 1 and "more than 2**63 ns" in r.stderr


@pytest.mark.parametrize("sql, kind, message", [
    ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'abc' WHERE start = 300", "gpu_activity",
     "CUPTI_ACTIVITY_KIND_KERNEL.start holds string values where integers belong"),
    ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 300.5 WHERE start = 300", "gpu_activity",
     "CUPTI_ACTIVITY_KIND_KERNEL.start holds double values where integers belong"),
    ("UPDATE CUDA_GPU_MEMORY_USAGE_EVENTS SET bytes = -1024", "alloc_events",
     "CUDA_GPU_MEMORY_USAGE_EVENTS.bytes holds a negative byte count (-1024)"),
    ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = 5000000000", "gpu_activity",
     "CUPTI_ACTIVITY_KIND_KERNEL.deviceId holds ids past the 32-bit range"),
    ("UPDATE EXPORT_META_DATA SET value = CAST(X'FFFE41' AS TEXT)", "gpu_activity", "Could not decode to UTF-8"),
])
def test_nsys_sqlite_types_are_checked(tmp_path, sql, kind, message):
    import sqlite3

    from fuzz.targets import _sqlite

    path = tmp_path / "export.sqlite"
    path.write_bytes(_sqlite(tmp_path))
    con = sqlite3.connect(path)
    con.execute(sql)
    con.commit()
    con.close()
    from veotrace.sources import read_table

    with pytest.raises(VeotraceError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        if kind == "alloc_events":
            list(iter_alloc_events([path]))
        else:
            read_table([path], kind)


@pytest.mark.parametrize("name, target, message", [
    ("fuzz_tagged_parquet_missing_column.parquet", "alloc_events", "tagged alloc_events/1 but column 'stream' is missing"),
    ("fuzz_duplicate_column.csv", "info", None),
    ("fuzz_zip_version.npz", "arrays", "zip file version 25.5"),
    ("fuzz_memo_index_far.pickle", "segments", "a memo index far out of sequence"),
])
def test_fuzz_findings_stay_fixed(name, target, message):
    """Inputs fuzz/fuzz_readers.py found crashing a reader (a traceback or 18 s of page faults)."""
    from fuzz.targets import run

    if message is None:
        run(target, BAD / name)  # info reports the refusal as a problem line, no exception
        return
    with pytest.raises(VeotraceError, match=message):
        run(target, BAD / name)


# ----------------------------------------------------------------------------- issue 25
@pytest.mark.parametrize("change, message", [
    ({"windows.entropy_bits": ["x", 1.0, 1.0]}, "windows.entropy_bits[0] = \"x\" is not a non-negative number of bits"),
    ({"max_class": 400}, "params.max_class = 400 is not a size class from 0 to 42"),
    ({"ops": 5}, "params.ops = 5 is not a list of op names"),
    ({"window_events": 0, "window_s": None}, "params.window_events = 0 is not a whole number of events"),
    ({"step_s": True}, "params.step_s = true is not a duration"),
    ({"windows.start_ns": [-(2**62), 0, 2**62]}, "windows.start_ns spans more than 2**63 ns"),
    ({"windows.window": [0, 1.5, 2]}, "windows.window[1] = 1.5 is not a window number"),
])
def test_baseline_fields_are_checked_on_load(tmp_path, change, message):
    from tests.bad_inputs.make_issue25 import _baseline
    from veotrace.gating.baseline import read_baseline

    path = tmp_path / "b.json"
    path.write_text(_baseline(**change))
    with pytest.raises(VeotraceError, match=re.escape(message)) as exc:
        read_baseline(path)
    assert str(exc.value).startswith(f"{path}: baseline is damaged: metrics.entropy.")


@pytest.mark.parametrize("text, message", [
    ("{\"schema\": \"veotrace-baseline/1\", \"x\": " + "9" * 5000 + "}", "Exceeds the limit (4300 digits)"),
    ("[" * 100000 + "]" * 100000, "JSON nested too deeply"),
])
def test_baseline_json_python_cannot_hold(tmp_path, text, message):
    from veotrace.gating.baseline import read_baseline

    path = tmp_path / "b.json"
    path.write_text(text)
    with pytest.raises(VeotraceError, match=re.escape(message)):
        read_baseline(path)


@pytest.mark.parametrize("settings, message", [
    ({"roundup_power2_divisions": {"1": 3}}, "['roundup_power2_divisions']['1'] = 3 must be a power of 2 or 0"),
    ({"roundup_power2_divisions": {"3": 2}}, "['roundup_power2_divisions'] key = '3' must be an interval in MiB"),
    ({"roundup_power2_divisions": [1, "2"]}, "['roundup_power2_divisions'][1] = '2' must be a power of 2 or 0"),
    ({"garbage_collection_threshold": "0.5"}, "['garbage_collection_threshold'] = '0.5' must be a number in [0.0, 1.0)"),
    ({"max_split_size": 1.5}, "['max_split_size'] = 1.5 must be a byte count (a size_t: at most 2^64-1), or -1 for no limit"),
    ({"expandable_segments": "yes"}, "['expandable_segments'] = 'yes' must be True or False"),
    (["max_split_size"], "allocator_settings = list must be a dict"),
])
def test_snapshot_allocator_settings_are_input(settings, message):
    from veotrace.allocators.conf import from_settings

    with pytest.raises(VeotraceError, match=re.escape(message)) as exc:
        from_settings(settings, path="snap.pickle")
    assert str(exc.value).startswith("snap.pickle: allocator_settings")


def test_real_allocator_settings_still_read():
    from veotrace.allocators.conf import NO_LIMIT, from_settings

    table = {str(1 << i): 0 for i in range(16)} | {"64": 4}
    conf = from_settings({"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1, "garbage_collection_threshold": 0.0,
                          "expandable_segments": False, "pinned_num_register_threads": 1,
                          "roundup_power2_divisions": table})
    assert conf.max_split_size == NO_LIMIT and conf.roundup_power2_divisions[6] == 4 and not conf.expandable_segments
    assert from_settings({"max_split_size": 200 << 20, "roundup_power2_divisions": [2] * 20}).roundup_power2_divisions == (2,) * 16


@pytest.mark.parametrize("data, wide", [
    (b"\x80\x02]I" + b"9" * 5000 + b"\na.", True),  # INT text past Python's 4,300-digit bound
    (b"\x80\x02]L" + b"9" * 100 + b"L\na.", True),
    (b"\x80\x02]I12345\na.", False),
    (pickle.dumps([10**100], protocol=2), True),  # LONG1
    (pickle.dumps({10**5000: 1}, protocol=4), True),  # LONG4
    (pickle.dumps({"addr": 2**64 - 1, "t": -(2**63), "big": 2**200}, protocol=4), False),
])
def test_wide_integers_are_refused_alike_by_the_c_and_python_walks(data, wide):
    from veotrace.sources.snapshots import safe_pickle

    c, py = safe_pickle.nesting(data), safe_pickle._nesting_py(data, 100)
    assert c == py and (c[0] == -7) == wide
    if wide:
        with pytest.raises(VeotraceError, match="an integer wider than 256 bits"):
            safe_pickle.loads_plain(data, path="x.pickle")


def _compressed(path: Path, kind: str, head: bytes, fill: bytes, total: int) -> Path:
    import pyarrow as pa

    with pa.CompressedOutputStream(str(path), kind) as out:
        out.write(head)
        block = fill * ((1 << 20) // len(fill))
        for _ in range(total // len(block)):
            out.write(block)
    return path


@pytest.mark.parametrize("kind", ["gzip", "zstd"])
@pytest.mark.parametrize("target, head, fill, expect", [
    ("segments", b"\x80\x04\x95", b"\x00", "not a pickle: byte 11 holds 0x00, which is no pickle opcode"),
    ("segments", b"", b"\x00", "not a format veotrace reads"),  # detection, on the same first bytes
    ("ncu_metrics", b'"ID","Process ID","Process Name"\n', b"\x00", "holds a NUL byte at byte 33"),
    ("frames", b'{"frames": [', b"\x00", "holds a NUL byte at byte 12"),
    ("frames", b'{"frames": [', b" ", "holds 32 KiB of blank space from byte 12, which no exporter writes"),
])
def test_what_cannot_be_the_format_is_refused_at_its_first_bytes(tmp_path, monkeypatch, kind, target, head, fill,
                                                                  expect):
    """A compressed file whose first bytes cannot be the format is refused there (issue 25: a gzip'd 1 GiB of
    zeros took info 19 s): with a 1 MiB limit and 8 MiB inside, reading to the limit would say 'larger than'."""
    from fuzz.targets import run

    monkeypatch.setenv("VEOTRACE_MAX_FILE_BYTES", "1M")
    path = _compressed(tmp_path / f"bomb.{kind}", kind, head, fill, 8 << 20)
    with pytest.raises(VeotraceError, match=re.escape(expect)):
        run(target, path)
    if target == "segments" and head:  # info says the same, as the problem of each table
        r = run_cli("info", path)
        assert r.exit_code == 0 and expect in r.stdout


def test_one_size_bound_for_every_command(tmp_path):
    """An event past 16 TiB (defaults.MAX_BLOCK_BYTES) is refused by every reader of alloc events, or left out
    and counted with --skip-bad-rows; entropy, convert and report said nothing of it before (issue 25)."""
    path = tmp_path / "log.csv"
    path.write_text("timestamp,op_type,size_bytes,address\n" + "".join(
        f"{i},alloc,{4611686018427387904 if i in (3, 7) else 4096},{4096 * (i + 1)}\n" for i in range(10)))
    for args in (("entropy", "--window-events", "2"), ("bursts",), ("fragmentation",), ("simulate", "-p", "bestfit")):
        r = run_cli(*args, path)
        assert r.exit_code == 1 and r.stderr.startswith(f"Error: {path}: column 'size_bytes': an event's size_bytes"), r.stderr
        r = run_cli(*args, "--skip-bad-rows", path)
        assert r.exit_code in (0, 1) and "Traceback" not in r.stderr
        assert "Warning: skipped 2 bad rows (--skip-bad-rows); first: " in r.stderr, r.stderr
        assert "(size_bytes 4,611,686,018,427,387,904 above 2**44 (16 TiB))" in r.stderr
    out = tmp_path / "out.parquet"
    r = run_cli("convert", "--skip-bad-rows", path, "-o", out)
    import pyarrow.parquet as pq

    assert r.exit_code == 0 and pq.read_table(out).num_rows == 8


def test_snapshot_time_running_backwards_is_a_counted_warning(tmp_path):
    """As the logs' out-of-order events are counted: entropy and simulate said nothing before (issue 25)."""
    path = BAD / "snapshot_time_backwards.pickle"
    for args in (("entropy", "--window-events", "1"), ("simulate", "-p", "bestfit"), ("fragmentation",)):
        r = run_cli(*args, path)
        assert "Traceback" not in r.stderr
        warned = [ln for ln in r.stderr.splitlines() if "go back in time" in ln]
        assert warned == [f"Warning: {path}: 2 trace entries go back in time (a time_us below one before it on its "
                          "device; first device_traces[0][2], 991 us back); time windows hold such an entry where "
                          "its time falls, not where the trace recorded it"], r.stderr
    doc = pickle.loads(path.read_bytes())
    doc["device_traces"][0][2]["time_us"] = 1002
    doc["device_traces"][0][3]["time_us"] = 1003
    path = tmp_path / "forwards.pickle"
    path.write_bytes(pickle.dumps(doc, protocol=4))
    assert "back in time" not in run_cli("entropy", "--window-events", "1", path).stderr


@pytest.mark.parametrize("name, args", [
    ("fuzz_trend_all_ties.csv", ("entropy",)),  # Theil-Sen's variance went negative: math domain error
    ("fuzz_trend_all_ties.csv", ("report", "-o", "{out}")),
    ("fuzz_kernel_names_null.sqlite", ("bursts", "--events", "kernels")),  # kernel names all null: IndexError
])
def test_command_fuzz_findings_now_run(tmp_path, name, args):
    """Inputs the command targets of fuzz/ found crashing a run (issue 25); they are valid and now run."""
    args = [str(tmp_path / "r.html") if a == "{out}" else a for a in args]
    r = run_cli(args[0], BAD / name, *args[1:])
    assert r.exit_code == 0 and "Traceback" not in r.stderr, r.stderr


# ----------------------------------------------------------------------------- issue 40
def test_sites_refuses_a_window_count_past_fragmentations_bound_before_the_work():
    """sites on the sample with --window 1ns ran past a minute (2.6 million 1 us windows); now fragmentation's
    bound and words, at once."""
    import time

    t = time.perf_counter()
    r = run_cli("sites", SAMPLE_SNAPSHOT, "--window", "1ns")
    assert r.exit_code == 1 and r.stdout == "" and time.perf_counter() - t < 10
    assert r.stderr.startswith(f"Error: {SAMPLE_SNAPSHOT}: the trace spans more than 200,000 windows (counted per device)")
    assert run_cli("sites", SAMPLE_SNAPSHOT, "--window", "100ms", "-f", "json").exit_code == 0  # 27 windows: fine


SAMPLE_SNAPSHOT = Path(__file__).parents[1] / "sample_traces" / "snapshots" / "memory_snapshot.pickle"


def _jobs_log(path: Path, gap_ns: int = 0) -> Path:
    """3,000 rows 1 ms apart (a gap of ``gap_ns`` half way), a first row whose size does not parse (its
    timestamp 1 ns) and a few bad rows further on."""
    rows = ["timestamp,op_type,size_bytes", "1,alloc,abc"]
    for i in range(3000):
        t = 5_000_000_000 + i * 1_000_000 + (gap_ns if i >= 1500 else 0)
        rows.append(f"{t},alloc,12.5" if i % 701 == 5 else f"{t},{'alloc' if i % 3 else 'free'},{4096 << (i % 5)}")
    path.write_text("\n".join(rows) + "\n")
    return path


def _every_n(monkeypatch, *args) -> list[tuple]:
    """(exit, stdout, stderr without the --jobs advice) of ``args`` with --jobs 1, 2, 3 on pieces of ~8 KB."""
    from veotrace import engine

    monkeypatch.setattr(engine, "SPLIT_BYTES", 8000)
    out = []
    for n in (1, 2, 3):
        r = run_cli(*args, "--jobs", str(n))
        out.append((r.exit_code, r.stdout, "\n".join(ln for ln in r.stderr.splitlines() if not ln.startswith("note: --jobs"))))
    return out


def test_jobs_with_skip_bad_rows_give_one_output_for_every_n(monkeypatch, tmp_path):
    """The skipped first row's timestamp set --jobs 2's window origin (window 0 at 1 ns); the origin probe now
    reads the task's columns, so it leaves out the rows the task leaves out."""
    path = _jobs_log(tmp_path / "log.csv")
    runs = _every_n(monkeypatch, "entropy", path, "--skip-bad-rows", "--window", "100ms", "-f", "json")
    assert runs[0] == runs[1] == runs[2] and runs[0][0] == 0
    import json

    windows = json.loads(runs[0][1])["windows"]
    assert windows[0]["start_ns"] == 5_000_000_000 and len(windows) == 30
    assert "Warning: skipped 6 bad rows (--skip-bad-rows)" in runs[0][2]


def test_the_run_span_warning_is_said_of_the_whole_run_for_every_n(monkeypatch, tmp_path):
    """The span warning was judged batch by batch: one process read the gap inside a batch and warned, the
    pieces each saw no gap and did not. It is now the run's, said once, the same for every --jobs."""
    path = _jobs_log(tmp_path / "log.csv", gap_ns=1100 * 10**9)
    runs = _every_n(monkeypatch, "entropy", path, "--skip-bad-rows", "--window", "10ms", "-f", "csv", "-o",
                    tmp_path / "w.csv")
    assert runs[0] == runs[1] == runs[2] and runs[0][0] == 0
    assert runs[0][2].count("Warning: the run spans 18.38 min (110,300 windows for 2,995 rows read)") == 1


def test_a_checkpoint_past_the_whole_file_bound_is_refused_unread(monkeypatch, tmp_path):
    from fuzz.checkpoints import seed_states

    state = tmp_path / "big.state"
    state.write_bytes(seed_states(tmp_path)["entropy.state"])
    monkeypatch.setenv("VEOTRACE_MAX_FILE_BYTES", "1K")
    r = run_cli("entropy", "--follow", tmp_path / "follow.csv", "--state", state, "--window", "1s", "--idle-timeout", "0.1s")
    assert r.exit_code == 1 and r.stderr.startswith(f"Error: {state}: the checkpoint is damaged: is ")
    assert "bytes, more than the 1,024 of a file read whole" in r.stderr


def test_gate_follow_resumes_from_its_own_checkpoint(tmp_path):
    """Its options held a tuple, which the checkpoint holds as a list: a restarted gate --follow always refused
    its own checkpoint ('the checkpoint is of params ...')."""
    from fuzz.checkpoints import resume, seed_states

    state = tmp_path / "gate.state"
    state.write_bytes(seed_states(tmp_path)["gate.state"])
    notes = []
    assert resume("gate", state) in ("pass", "fail")
    from veotrace.runs.follow_gate import follow_gate

    follow_gate(tmp_path / "follow.csv", baseline=tmp_path / "follow-baseline.json", emit=lambda r: None,
                note=notes.append, idle_timeout=0.1, poll=0.05, state=state, resamples=99)
    assert any(n.startswith("Resuming from") for n in notes)
