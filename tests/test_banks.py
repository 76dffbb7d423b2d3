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
