"""Settings at their edges (issues 46 item 3 and 47 item 2): numbers read as each release's C++ reads them
(``std::stoi`` up to 2.9, ``std::stoull`` from 2.10, ``std::stod``: ASCII digits only, the digits before the
first other character, a number past the type refused), the same from ``--conf``, a recorded string and a
snapshot field; a fraction of 0; the release inferred named when an option is absent from it; the variable
each release reads; what is echoed cut. Expected values are worked from c10/core/AllocatorConfig.cpp and
c10/cuda/CUDAAllocatorConfig.cpp, not from the model."""

from __future__ import annotations

import json
import pickle

import pytest
from conftest import run_cli

from veotrace.allocators.conf import MB, NO_LIMIT, alloc_conf_variable, from_settings, parse_conf, release
from veotrace.errors import TraceFormatError, UsageError

LOG = "sample_traces/simulate/training_log.csv"


def _settings(text: str = "", **fields) -> dict:
    out = {"PYTORCH_CUDA_ALLOC_CONF": text, "max_split_size": -1, "garbage_collection_threshold": 0.0,
           "expandable_segments": False, "roundup_power2_divisions": {str(1 << i): 0 for i in range(16)}}
    out.update(fields)
    return out


@pytest.mark.parametrize("text, rel, words", [
    ("max_split_size_mb:١٢٨", "2.15", "'١٢٨' is not a number to PyTorch (std::stoull reads ASCII digits only"),
    ("max_split_size_mb:１２８", "2.9", "is not a number to PyTorch (std::stoi reads ASCII digits only"),
    ("max_split_size_mb:1_000", "2.15", "max_split_size_mb too small, must be >= 20 (PyTorch reads '1_000' as 1)"),
    (f"max_split_size_mb:{2**64}", "2.15", "past the range of std::stoull (a 64-bit unsigned integer"),
    (f"max_split_size_mb:{2**31}", "2.9", "past the range of std::stoi (a 32-bit int"),
    (f"roundup_power2_divisions:[1024:{2**70}]", "2.15", "past the range of std::stoull"),
    (f"roundup_power2_divisions:{2**70}", "2.4", "past the range of std::stoi"),
    ("garbage_collection_threshold:٠.٥", "2.15", "'٠.٥' is not a number to PyTorch (std::stod"),
    ("garbage_collection_threshold:1e400", "2.15", "past the range of a double"),
    ("garbage_collection_threshold:nan", "2.15", "garbage_collection_threshold must be in (0.0, 1.0)"),
    ("per_process_memory_fraction:1.5", "2.12", "per_process_memory_fraction is invalid, set it in [0.0, 1.0]"),
])
def test_numbers_pytorch_refuses_are_refused(text, rel, words):
    with pytest.raises(UsageError) as exc:
        parse_conf(text, torch_release=rel)
    assert words in exc.value.message


@pytest.mark.parametrize("text, rel, mss, note", [
    ("max_split_size_mb:128abc", "2.15", 128 * MB, "PyTorch reads 128 and ignores 'abc'"),
    ("max_split_size_mb:\t128", "2.15", 128 * MB, None),  # ConfigTokenizer drops every isspace character
    ("max_split_size_mb:+64", "2.9", 64 * MB, None),
    # a negative number wraps to a huge size_t, then std::min(val, SIZE_MAX / kMB): no split limit in effect
    ("max_split_size_mb:-5", "2.15", (NO_LIMIT // MB) * MB, "reads the negative number as 18,446,744,073,709,551,611"),
    ("max_split_size_mb:-5", "2.9", (NO_LIMIT // MB) * MB, "a size_t: it wraps"),
])
def test_numbers_read_as_the_release_reads_them(text, rel, mss, note):
    conf = parse_conf(text, torch_release=rel)
    assert conf.max_split_size == mss
    assert (note is None and not conf.notes) or any(note in n for n in conf.notes)


def test_a_fraction_read_to_its_first_other_character_is_said():
    """Found by the cli_numbers fuzz target: std::stod reads '0._9' as 0.0 (it stops at '_'), which torch 2.10+
    accepts (nothing can be allocated); the note says what PyTorch read."""
    conf = parse_conf("per_process_memory_fraction:0._9", torch_release="2.12")
    assert conf.per_process_memory_fraction == 0.0
    assert any("PyTorch reads 0. and ignores '_9'" in n for n in conf.notes)


def test_a_hexadecimal_fraction_is_a_double_to_stod():
    assert parse_conf("garbage_collection_threshold:0x1p-1", torch_release="2.10").garbage_collection_threshold == 0.5


@pytest.mark.parametrize("version", ["２.９", "2.9.9.9.9", "2.9.x", "٢.٩", "2", ""])
def test_torch_versions_not_in_ascii_digits_or_not_a_release_are_refused(version):
    with pytest.raises(UsageError):
        release(version)


@pytest.mark.parametrize("version, got", [("2.9.0+cu128", (2, 9)), ("2.10.0a0+git12ab", (2, 10)),
                                          ("2.11.0.dev20260101+cu130", (2, 11)), (" 2.15 ", (2, 15))])
def test_torch_version_strings_torch_prints_are_read(version, got):
    assert release(version) == got


@pytest.mark.parametrize("value", ["٠.٥", "0_5", "nan", "inf", "1.5", "-0.1", "０.５"])
def test_fraction_in_other_digits_or_out_of_range_is_refused(value):
    r = run_cli("simulate", LOG, "-p", "torch", "--capacity", "80GiB", "--fraction", value)
    assert r.exit_code == 2 and r.stderr.startswith("Error: --fraction ") and "[0, 1] in ASCII digits" in r.stderr


def test_fraction_zero_is_accepted_and_nothing_can_be_allocated():
    """set_per_process_memory_fraction(0) is accepted (``fraction < 0 or fraction > 1`` is refused): the allowed
    maximum is 0 bytes, so every cudaMalloc of the replay is an OOM."""
    r = run_cli("simulate", LOG, "-p", "torch", "--capacity", "80GiB", "--fraction", "0", "-f", "json")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    (torch,) = d["policies"]
    assert d["params"]["torch_conf"]["per_process_memory_fraction"] == 0.0
    assert torch["device_allocs"] > 0 and torch["ooms"] == torch["device_allocs"]


@pytest.mark.parametrize("rel", ["2.10", "2.12", "2.14"])
def test_per_process_memory_fraction_zero_is_accepted_from_2_10(rel):
    conf = parse_conf("per_process_memory_fraction:0", torch_release=rel)
    assert conf.per_process_memory_fraction == 0.0 and conf.allowed_maximum(80 << 30) == 0


def test_an_option_absent_from_the_inferred_release_names_the_inference():
    """A snapshot whose keys say torch 2.0-2.1 (no time_us) and a --conf option of 2.10: the Error line says
    which release was inferred from what, and that --torch-version overrides it."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "old.pickle"
        path.write_bytes(pickle.dumps({"segments": [], "device_traces": [[
            {"action": "alloc", "addr": 1 << 40, "size": 4 << 20, "stream": 0},
            {"action": "free_completed", "addr": 1 << 40, "size": 4 << 20, "stream": 0}]]}, protocol=4))
        r = run_cli("simulate", path, "-p", "torch", "--conf", "per_process_memory_fraction:0.5")
    assert r.exit_code == 2, r.stderr
    (line,) = r.stderr.splitlines()
    assert "first accepted by torch 2.10" in line and "was inferred from the snapshot's keys" in line
    assert "--torch-version overrides it" in line


@pytest.mark.parametrize("rel, rocm, var", [("2.0", False, "PYTORCH_CUDA_ALLOC_CONF"),
                                            ("2.8", False, "PYTORCH_CUDA_ALLOC_CONF"),
                                            ("2.9", False, "PYTORCH_ALLOC_CONF"),
                                            ("2.15", False, "PYTORCH_ALLOC_CONF"),
                                            ("2.8", True, "PYTORCH_HIP_ALLOC_CONF"),
                                            ("2.1", True, "PYTORCH_CUDA_ALLOC_CONF"),
                                            ("2.9", True, "PYTORCH_ALLOC_CONF")])
def test_the_variable_each_release_reads(rel, rocm, var):
    from veotrace.tuning.space import export_lines

    got, note = alloc_conf_variable(rel, rocm=rocm)
    assert got == var
    if var == "PYTORCH_ALLOC_CONF":
        old = "PYTORCH_HIP_ALLOC_CONF" if rocm else "PYTORCH_CUDA_ALLOC_CONF"
        assert f"{old} still works there, with a deprecation warning" in note
    lines = export_lines(parse_conf("max_split_size_mb:128", torch_release=rel), "max_split_size_mb:128", rocm=rocm)
    assert lines["export"] == f"export {var}=max_split_size_mb:128" and lines["variable"] == var


def test_a_recorded_string_pytorch_would_refuse_is_said_once(tmp_path):
    conf = from_settings(_settings("max_split_size_mb:١٢٨,expandable_segments:True"), torch_release="2.12")
    assert "torch 2.12 would have refused it" in conf.recorded["refused"] and not conf.recorded["not_understood"]
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [[
        {"action": "alloc", "addr": 1 << 40, "size": 4 << 20, "stream": 0, "time_us": 1},
        {"action": "free_completed", "addr": 1 << 40, "size": 4 << 20, "stream": 0, "time_us": 2}]],
        "allocator_settings": _settings("max_split_size_mb:١٢٨")}, protocol=4))
    r = run_cli("simulate", path, "-p", "torch", "-f", "json")
    assert r.exit_code == 0, r.stderr
    assert r.stderr.count("would have refused it") == 1 and r.stderr.count("١٢٨") == 1


@pytest.mark.parametrize("field, value", [("max_split_size", 2**64), ("max_split_size", 2**70)])
def test_a_snapshot_field_past_size_t_is_refused(field, value):
    with pytest.raises(TraceFormatError) as exc:
        from_settings(_settings(**{field: value}), path="x.pickle")
    assert "at most 2^64-1" in str(exc.value)


def test_a_division_field_past_size_t_is_refused():
    table = {str(1 << i): 0 for i in range(16)}
    table["1024"] = 2**70
    with pytest.raises(TraceFormatError):
        from_settings(_settings(roundup_power2_divisions=table), path="x.pickle")


def test_a_100kb_conf_is_cut_in_the_error_line():
    r = run_cli("simulate", LOG, "-p", "torch", "--conf", "max_split_size_mb:" + "٩" * 100_000)
    assert r.exit_code == 2
    (line,) = r.stderr.splitlines()
    assert len(line) < 1000 and "(100,018 characters)" in line


def test_a_5mb_recorded_string_does_not_make_the_output_5mb():
    text = "expandable_segments:True," + ",".join(["pinned_use_cuda_host_register:True"] * 150_000)
    assert len(text) > 5_000_000
    conf = from_settings(_settings(text), torch_release="2.12")
    dumped = json.dumps(conf.to_dict())
    assert len(dumped) < 20_000 and len(conf.notes) == 1  # the one option, named once
    assert conf.recorded["string"].endswith(f"({len(text):,} characters in all)")


def test_tune_json_of_a_snapshot_with_a_5mb_settings_string_stays_small(tmp_path):
    text = "expandable_segments:True," + ",".join(["pinned_use_cuda_host_register:True"] * 150_000)
    trace = []
    for i in range(20):
        addr = (1 << 40) + i * (4 << 20)
        trace += [{"action": "segment_alloc", "addr": addr, "size": 4 << 20, "stream": 0, "time_us": 4 * i},
                  {"action": "alloc", "addr": addr, "size": 4 << 20, "stream": 0, "time_us": 4 * i + 1},
                  {"action": "free_completed", "addr": addr, "size": 4 << 20, "stream": 0, "time_us": 4 * i + 2}]
    path = tmp_path / "big_settings.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [trace],
                                   "allocator_settings": _settings(text)}, protocol=4))
    r = run_cli("tune", path, "-f", "json")
    assert r.exit_code == 0, r.stderr
    assert len(r.stdout) < 100_000 and len(r.stderr) < 2_000  # was 5 MB and more
