"""The survivors' significance test: a stage keeps only candidates significantly above zero
among all its valid candidates (Bonferroni), so noise at low epsilon does not become values."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from ldpflow.core import heavy_hitters as hh
from ldpflow.core.heavy_hitters.base import significance_sigmas


def test_the_cut_is_bonferronis_quantile_times_sigma_exactly():
    assert significance_sigmas(0.05, 1000) == -statistics.NormalDist().inv_cdf(0.05 / 1000)
    z, sigma = significance_sigmas(0.05, 6), 0.01  # 6 valid candidates of the 8 below
    cand = np.arange(8, dtype=np.uint64)
    freqs = np.array([z * sigma, z * sigma - 1e-12, 0.5, -1.0, 0.2, 0.0, 0.9, 0.8])
    valid = np.array([1, 1, 1, 1, 1, 1, 0, 0], dtype=bool)
    kept = hh.select_survivors(cand, freqs, sigma, survivors=8, valid=valid,
                               significance=0.05)
    assert kept.tolist() == [2, 4, 0]  # at or above z sigma, best first; 6, 7 are invalid
    assert hh.select_survivors(cand, freqs, sigma, survivors=8, valid=valid).size == 6


@pytest.mark.parametrize("bad", [0, 1, -0.1, 1.5, math.nan])
def test_a_significance_outside_zero_one_is_refused(bad):
    pem = hh.make("pem", top_k=4, value_bits=16, epsilon=2.0)
    with pytest.raises(ValueError, match="significance"):
        pem.check_options({"significance": bad})


@pytest.mark.statistical
def test_data_without_heavy_hitters_gives_no_values_but_at_the_level():
    """Every user holds a distinct value: no candidate of the last stage has a frequency
    above 1/n, so a run that returns a value has let noise through. Family-wise level 0.05
    per stage: over R runs the count of such runs is at most Binomial(R, 0.05)'s mean plus
    3 standard deviations; without the test every run returns k noise values."""
    runs, n, alpha = 20, 20_000, 0.05
    pem = hh.make("pem", top_k=8, value_bits=32, epsilon=2.0, query_limit=2**14)
    noisy = 0
    for seed in range(runs):
        rng = np.random.default_rng([99, seed])
        values = rng.permutation(2**20)[:n].astype(np.uint64) * np.uint64(4093)
        reports = pem.perturb(values, np.arange(n), rng)
        noisy += pem.identify(reports).values.size > 0
        if seed < 3:
            assert pem.identify(reports, significance=None).values.size == 8
    assert noisy <= runs * alpha + 3 * math.sqrt(runs * alpha * (1 - alpha))


def test_clear_heavy_hitters_pass_the_test():
    rng = np.random.default_rng(4)
    pem = hh.configure(top_k=4, value_bits=32, epsilon=2.0, users=50_000)
    heavy = np.array([11, 2**31 + 5, 77777, 2**32 - 1], dtype=np.uint64)
    values = np.concatenate([np.repeat(heavy, 5000),
                             rng.integers(0, 2**32, size=30_000, dtype=np.uint64)])
    found = pem.identify(pem.perturb(values, np.arange(values.size), rng))
    assert sorted(found.values.tolist()) == sorted(heavy.tolist())
