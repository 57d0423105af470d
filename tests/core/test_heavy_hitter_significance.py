"""The survivors' significance test: a pass keeps only candidates significantly above zero
among all its valid candidates (Bonferroni), so noise at low epsilon does not become values."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from ldpflow.core import heavy_hitters as hh
from ldpflow.core.heavy_hitters.base import parent_weighted_sigmas, significance_sigmas


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
    """Every user holds a distinct value: no candidate of the last pass has a frequency
    above 1/n, so a run that returns a value has let noise through. Family-wise level 0.05
    per pass: over R runs the count of such runs is at most Binomial(R, 0.05)'s mean plus
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


def _tail(z):
    return np.array([statistics.NormalDist().cdf(-x) for x in np.asarray(z).tolist()])


def test_the_parent_weighted_cut_splits_the_level_exactly():
    """alpha / P per parent, equally among its valid candidates; a parent with an ending
    candidate gives it half of its share; the weights sum to alpha."""
    alpha = 0.05
    parents = np.array([0, 0, 0, 0, 1, 1, 2, 2], dtype=np.uint64)
    valid = np.array([1, 1, 1, 1, 1, 0, 0, 0], dtype=bool)  # parent 2: nothing valid
    z = parent_weighted_sigmas(parents, valid, alpha)
    want = [alpha / (2 * 4)] * 4 + [alpha / 2]
    assert np.allclose(_tail(z[valid]), want, rtol=1e-9, atol=0)
    assert np.isinf(z[~valid]).all()
    ends = np.array([1, 0, 0, 0, 1, 0, 1, 0], dtype=bool)
    z = parent_weighted_sigmas(parents, valid, alpha, ends=ends)
    want = [alpha / 4, alpha / 12, alpha / 12, alpha / 12, alpha / 2]
    assert np.allclose(_tail(z[valid]), want, rtol=1e-9, atol=0)
    assert math.isclose(_tail(z[valid]).sum(), alpha, rel_tol=1e-9)


def test_the_survivor_rule_with_cuts_ranks_by_margin_and_cuts_only_when_testing():
    cand = np.arange(4, dtype=np.uint64)
    freqs = np.array([0.05, 0.03, 0.02, 0.01])
    z = np.array([6.0, 2.0, 1.5, 3.0])  # margins at sigma 0.01: -0.01, 0.01, 0.005, -0.02
    kept = hh.select_survivors(cand, freqs, 0.01, survivors=4, significance=0.05,
                               cut_sigmas=z)
    assert kept.tolist() == [1, 2]
    ranked = hh.select_survivors(cand, freqs, 0.01, survivors=4, significance=0.05,
                                 cut_sigmas=z, test=False)
    assert ranked.tolist() == [1, 2, 0, 3]


@pytest.mark.statistical
def test_the_parent_weighted_test_keeps_the_family_wise_level_on_null_estimates():
    """Null estimates N(0, sigma^2) of 40 parents' candidates: one parent in four has one
    valid candidate (an ended word), the others 1 to 200 with an ending one. The share of
    runs in which any candidate passes is at most alpha (Bonferroni; here about
    alpha (1 - alpha / 2)), within 3 binomial standard deviations over R runs; a rule that
    spent 2 alpha would fail (its mean, about 2 R alpha = 200, is 5 of its standard
    deviations above the bound, 129)."""
    rng = np.random.default_rng(23)
    runs, alpha, sigma = 2000, 0.05, 0.01
    sizes = np.where(np.arange(40) % 4 == 0, 1, rng.integers(1, 201, size=40))
    parents = np.repeat(np.arange(40, dtype=np.uint64), sizes)
    first = np.concatenate([[True], parents[1:] != parents[:-1]])
    z = parent_weighted_sigmas(parents, np.ones(parents.size, dtype=bool), alpha,
                                  ends=first)
    assert math.isclose(_tail(z).sum(), alpha, rel_tol=1e-9)
    null = rng.normal(0.0, sigma, size=(runs, parents.size))
    false = np.count_nonzero((null >= z * sigma).any(axis=1))
    assert false <= runs * alpha + 3 * math.sqrt(runs * alpha * (1 - alpha))
