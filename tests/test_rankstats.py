"""The numpy trend statistics agree with scipy.stats on the same data (ties, small and large n)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from veotrace.analysis import rankstats


def _cases():
    rng = np.random.default_rng(7)
    for n in (5, 12, 33, 34, 200, 2500):
        x = np.arange(n, dtype=float) / 12.0
        yield f"smooth{n}", x, 0.01 * x + rng.normal(0, 0.3, n)
        yield f"ties{n}", np.round(x * 2), np.round(rng.normal(0, 1, n), 1)
    yield "monotone", np.arange(40.0), np.arange(40.0) ** 1.5
    yield "one_swap", np.arange(50.0), np.r_[np.arange(48.0), 49.0, 48.0]
    yield "large_fallback", np.arange(7000.0), rng.normal(0, 1, 7000) + np.arange(7000) * 1e-4


@pytest.mark.parametrize("name,x,y", list(_cases()), ids=lambda v: v if isinstance(v, str) else "")
def test_matches_scipy(name, x, y):
    lr = stats.linregress(x, y)
    slope, intercept, r = rankstats.linregress(x, y)
    assert slope == pytest.approx(lr.slope, rel=1e-12, abs=1e-15)
    assert intercept == pytest.approx(lr.intercept, rel=1e-12, abs=1e-15)
    assert r == pytest.approx(lr.rvalue, rel=1e-12, abs=1e-15)

    kt = stats.kendalltau(x, y)
    tau, p = rankstats.kendall_tau(x, y)
    assert tau == pytest.approx(kt.statistic, rel=1e-12, abs=1e-15)
    assert p == pytest.approx(kt.pvalue, rel=1e-9, abs=1e-300)

    if x.size <= 4000:
        ts = stats.theilslopes(y, x)
        med, lo, hi = rankstats.theil_sen(x, y)
        assert (med, lo, hi) == (ts.slope, ts.low_slope, ts.high_slope)


def test_kendall_undefined_when_one_series_is_constant():
    tau, p = rankstats.kendall_tau(np.arange(10.0), np.ones(10))
    assert np.isnan(tau) and np.isnan(p)


@pytest.mark.parametrize("kind", ["untied", "y_ties", "x_ties", "nan_free_reversed"])
def test_concordance_fast_walk_equals_all_pairs(kind):
    """The sorted-list walk (x untied) and the all-pairs count give the same exact integer."""
    rng = np.random.default_rng(7)
    n = 700
    x = rng.permutation(n).astype(float) if kind != "x_ties" else rng.integers(0, 90, n).astype(float)
    y = rng.normal(size=n) if kind in ("untied", "x_ties") else rng.integers(0, 6, n).astype(float)
    if kind == "nan_free_reversed":
        x = -x
    pairs = sum(int(np.sum((np.sign(x[j] - x[i]) * np.sign(y[j] - y[i]))[upper]))
                for i, j, upper in rankstats._pairs(n))
    assert rankstats._concordance(x, y) == pairs
    ref = stats.kendalltau(x, y)
    tau, p = rankstats.kendall_tau(x, y)
    assert tau == pytest.approx(ref.statistic, abs=1e-12) and p == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("kind", ["normal", "few_values", "with_nan", "sorted", "tiny"])
def test_order_statistics_equal_a_full_sort(kind):
    """The sampled bracket gives exactly the sorted array's values, at the median and at the ends
    (where the bracket misses and the whole array is partitioned)."""
    rng = np.random.default_rng(3)
    n = 10 if kind == "tiny" else 300_001
    v = {"normal": rng.normal(size=n), "few_values": rng.integers(0, 3, n).astype(float),
         "with_nan": np.where(rng.random(n) < 0.01, np.nan, rng.normal(size=n)),
         "sorted": np.arange(n, dtype=float), "tiny": rng.normal(size=n)}[kind]
    ref = np.sort(v)
    for ranks in ([n // 2 - 100, n // 2, n // 2 + 1, n // 2 + 100], [0, 1], [n - 2, n - 1]):
        ranks = sorted({min(max(k, 0), n - 1) for k in ranks})
        got = rankstats.order_statistics(v.copy(), ranks)
        assert set(got) == set(ranks)
        assert all(got[k] == ref[k] or (np.isnan(got[k]) and np.isnan(ref[k])) for k in ranks)
