"""Bank conflicts and sectors against hand-worked warps, and `veotrace banks` from the command line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import run_cli
from veotrace.analysis.banks import pattern_addresses, warp_access


def access(stride, elem=4, **kw):
    return warp_access(pattern_addresses(elem_bytes=elem, stride=stride), elem_bytes=elem, **kw)


def test_in_tid_times_2_floats_is_2_way_and_fetches_8_sectors():
    w = access(2)
    # thread t reads bytes 8t..8t+3: bank (2t) % 32, so threads t and t + 16 share a bank with different words
    assert w.wavefronts == 2 and w.conflict_degree == 2
    assert w.bank_threads[0] == 2 and w.bank_threads[1] == 0 and sum(w.bank_threads) == 32
    # bytes 0..251 are spread over 256 bytes: 8 sectors fetched for 128 bytes used
    assert (w.sectors, w.bytes_used, w.bytes_fetched, w.efficiency) == (8, 128, 256, 0.5)
    assert w.lines == 2


@pytest.mark.parametrize("stride, degree, sectors", [(1, 1, 4), (3, 1, 12), (4, 4, 16), (32, 32, 32), (33, 1, 32)])
def test_strides_by_hand(stride, degree, sectors):
    # stride s (floats): banks (s * t) % 32; the degree is gcd(s, 32); distinct sectors = min(32, ceil(s * 128 / 32))
    w = access(stride)
    assert w.conflict_degree == degree and w.sectors == sectors and w.bytes_used == 128


def test_broadcast_is_free():
    w = access(0)
    assert (w.wavefronts, w.conflict_degree, w.sectors, w.bytes_used) == (1, 1, 1, 4)
    assert w.bank_threads[0] == 32 and w.bank_words[0] == 1


def test_8_byte_elements_need_two_wavefronts_without_conflict():
    w = access(1, elem=8)
    assert (w.wavefronts, w.ideal_wavefronts, w.conflict_degree, w.sectors, w.bytes_used) == (2, 2, 1.0, 8, 256)


def test_bank_bytes_32_mapping():
    w = access(2, bank_bytes=32)
    # (addr >> 5) & 31: 256 bytes fall in banks 0..7, 4 threads each, one 32-byte word per bank
    assert w.bank_threads[:8] == [4] * 8 and sum(w.bank_threads[8:]) == 0 and w.conflict_degree == 1


def test_16_banks():
    w = access(1, banks=16)  # 32 words over 16 banks: 2 wavefronts, which is also the least possible
    assert (w.wavefronts, w.ideal_wavefronts, w.conflict_degree) == (2, 2, 1.0)
    assert access(2, banks=16).conflict_degree == 2  # banks 0, 2, ..., 14 with 4 words each


def test_cli_pattern_json():
    r = run_cli("banks", "--elem-bytes", "4", "--stride", "2", "-f", "json")
    assert r.exit_code == 0 and r.stderr == ""
    out = json.loads(r.stdout)
    assert out["summary"]["max_conflict_degree"] == 2 and out["summary"]["sectors"] == 8
    assert out["summary"]["bytes_used"] == 128


def test_cli_address_file_two_warps(tmp_path):
    p = tmp_path / "addrs.npy"
    first = 4 * np.arange(32)  # conflict-free
    second = 4096 + 128 * np.arange(32)  # every thread on bank 0: 32-way
    np.save(p, np.concatenate([first, second]).astype(np.uint64))
    r = run_cli("banks", "--addresses", p, "-f", "json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert [w["conflict_degree"] for w in out["warps"]] == [1, 32]
    assert out["summary"]["max_conflict_degree"] == 32 and out["summary"]["mean_conflict_degree"] == 16.5
    assert run_cli("banks", "--addresses", p).exit_code == 0


@pytest.mark.parametrize("args, message", [
    (["--elem-bytes", "0"], "--elem-bytes"),
    (["--banks", "0"], "--banks"),
    (["--base", "zz"], "--base expects"),
    (["--stride", "-1", "--offset", "0"], "must not be negative"),
])
def test_cli_bad_options(args, message):
    r = run_cli("banks", *args)
    assert r.exit_code == 2 and r.stdout == "" and r.stderr.startswith("Error: ") and message in r.stderr


def test_cli_bad_address_file(tmp_path):
    p = tmp_path / "a.pickle"
    p.write_bytes(b"\x80\x04N.")
    r = run_cli("banks", "--addresses", p)
    assert r.exit_code == 1 and r.stderr.startswith("Error: ") and "pickle" in r.stderr


def _reference(addrs: list[int], elem: int, banks: int = 32, bank_bytes: int = 4) -> tuple:
    """Bank words, sectors and bytes used by brute force over Python ints (no uint64 arithmetic)."""
    words = {w for a in addrs for w in range(a // bank_bytes, (a + elem - 1) // bank_bytes + 1)}
    per_bank = [0] * banks
    for w in words:
        per_bank[w % banks] += 1
    sectors = {s for a in addrs for s in range(a // 32, (a + elem - 1) // 32 + 1)}
    used = {b for a in addrs for b in range(a, a + elem)}
    return per_bank, len(sectors), len(used)


@pytest.mark.parametrize("base", [0, 2**47, 2**63 - 64, 2**63, 2**64 - 4096])
@pytest.mark.parametrize("elem", [1, 4, 8, 16])
def test_addresses_anywhere_in_uint64_agree_with_python_ints(base, elem):
    """Addresses of the top half (>= 2**63) and up to the last byte of the address space (issue 25)."""
    import random

    rng = random.Random(base ^ elem)
    addrs = [base + rng.randrange(0, 4096 - elem) for _ in range(31)] + [base + 4096 - elem]
    r = warp_access(np.array(addrs, dtype=np.uint64), elem_bytes=elem)
    per_bank, sectors, used = _reference(addrs, elem)
    assert (r.bank_words, r.sectors, r.bytes_used) == (per_bank, sectors, used)


def test_an_element_past_the_address_space_is_one_error(tmp_path):
    path = tmp_path / "top.npy"
    np.save(path, np.array([2**64 - 4], dtype=np.uint64))
    assert run_cli("banks", "--addresses", path, "--elem-bytes", "4").exit_code == 0
    r = run_cli("banks", "--addresses", path, "--elem-bytes", "8")
    assert r.exit_code == 1 and r.stderr.startswith(f"Error: {path}: the address 0xfffffffffffffffc with 8-byte")


@pytest.mark.parametrize("option", ["--elem-bytes", "--warp", "--banks", "--bank-bytes", "--base", "--offset", "--stride"])
def test_integer_options_past_64_bits_are_usage_errors(option):
    r = run_cli("banks", option, str(10**20))
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1 and r.stderr.startswith("Error: --"), r.stderr
