"""`veotrace correlate`: numbers equal scipy's on the aligned data; bad arrays get one Error: line."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from tests.conftest import real_trace, run_cli


@pytest.fixture
def series(tmp_path):
    rng = np.random.default_rng(11)
    addrs = (np.cumsum(rng.integers(0, 1 << 20, 60)) + (1 << 40)).astype(np.uint64)
    jumps = np.abs(np.diff(addrs.astype(np.int64))).astype(float)
    epe = 0.8 * (jumps - jumps.mean()) / jumps.std() + rng.normal(0, 0.6, jumps.size) + 3
    a, e = tmp_path / "addrs.npy", tmp_path / "epe.npy"
    np.save(a, addrs)
    np.save(e, epe)
    return a, e, jumps, epe


def test_pearson_and_spearman_match_scipy(series):
    a, e, jumps, epe = series
    r = run_cli("correlate", a, e, "-f", "json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["n"] == jumps.size
    ref = stats.pearsonr(jumps, epe)
    ci = ref.confidence_interval(0.95)
    assert out["pearson"]["r"] == pytest.approx(ref.statistic, abs=1e-12)
    assert out["pearson"]["p"] == pytest.approx(ref.pvalue, rel=1e-9)
    assert out["pearson"]["ci_low"] == pytest.approx(ci.low, abs=1e-12)
    assert out["pearson"]["ci_high"] == pytest.approx(ci.high, abs=1e-12)
    assert out["spearman"]["r"] == pytest.approx(stats.spearmanr(jumps, epe).statistic, abs=1e-12)
    assert out["headline"].startswith(f"r = {ref.statistic:.2f} +- ")


def test_object_array_is_refused_without_unpickling(tmp_path):
    epe = tmp_path / "e.npy"
    np.save(epe, np.ones(2))
    r = run_cli("correlate", real_trace("numpy_py3-objarr.npy"), epe)
    assert r.exit_code == 1 and r.stderr.startswith("Error: ") and len(r.stderr.strip().splitlines()) == 1


def test_lengths_that_cannot_be_aligned(tmp_path, series):
    a, _, _, _ = series
    bad = tmp_path / "short.npy"
    np.save(bad, np.ones(10))
    r = run_cli("correlate", a, bad)
    assert r.exit_code == 1 and "Error: " in r.stderr and "10" in r.stderr


def test_nonfinite_refused_then_dropped_and_counted(tmp_path, series):
    a, _, _, epe = series
    e2 = epe.copy()
    e2[5] = np.nan
    p = tmp_path / "nan.npy"
    np.save(p, e2)
    r = run_cli("correlate", a, p)
    assert r.exit_code == 1 and "Error: " in r.stderr
    r = run_cli("correlate", a, p, "--drop-nonfinite", "-f", "json")
    assert r.exit_code == 0 and json.loads(r.stdout)["dropped_nonfinite"] == 1


def test_constant_series_is_an_error(tmp_path, series):
    a, _, _, epe = series
    p = tmp_path / "const.npy"
    np.save(p, np.full(epe.size, 2.0))
    r = run_cli("correlate", a, p)
    assert r.exit_code == 1 and "Error: " in r.stderr
