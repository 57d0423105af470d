"""The one-bit scheme's variance model and its minimum number of users.

``variance(n, f)`` is the error variance of ``f~_v`` against the population's frequency, with
the users' columns independent of their values (the class notes of ``OneBitHadamard``): the
randomisation plus the column sampling. ``Estimate.sigma`` is the same model at ``f_v = 0``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

import ldpflow
from tests.core.test_oracle_variance import point_mass_population  # S2 far from 0

ALPHA = 1e-6  # two-sided, per assertion (Bonferroni over the values inside)


def errors_over_orders(oracle, values, runs, rng):
    """``f~ - f`` for ``runs`` independent orders of one population (rows)."""
    truth = np.bincount(values, minlength=oracle.domain_size) / values.size
    return np.array([
        oracle.estimate(oracle.aggregate(oracle.perturb(rng.permutation(values), rng=rng)))
        .frequencies - truth for _ in range(runs)]), truth


@pytest.mark.statistical
def test_variance_is_the_mse_against_the_population():
    """Per value, R * MSE / variance(n, f) ~ chi-square(R) (near-normal errors of mean 0):
    the band is the sampling spread of the MSE. The randomisation term alone, what
    variance() returned before, is rejected at every value."""
    d, n, runs = 256, 2**15, 300
    rng = np.random.default_rng(20190612)
    oracle = ldpflow.oracle("onebit", epsilon=4.0, domain_size=d)
    values = point_mass_population(rng, n, d)
    errors, truth = errors_over_orders(oracle, values, runs, rng)
    predicted = oracle.variance(n, truth)
    z = stats.norm.ppf(1 - ALPHA / (2 * d))
    assert np.all(np.abs(errors.mean(axis=0)) < z * np.sqrt(predicted / runs))  # unbiased
    ratio = runs * np.mean(errors**2, axis=0) / predicted
    lo, hi = stats.chi2.ppf([ALPHA / (2 * d), 1 - ALPHA / (2 * d)], runs)
    assert np.all((lo < ratio) & (ratio < hi)), (ratio.min(), ratio.max(), lo, hi)
    e = math.exp(4.0)
    randomisation = 4 * e / ((e - 1) ** 2 * n)
    assert np.all(runs * np.mean(errors**2, axis=0) / randomisation > hi)
    # The three ways of giving S2 agree; a scalar frequency takes the largest variance.
    s2 = float(truth @ truth)
    np.testing.assert_allclose(oracle.variance(n, truth[:3], sum_of_squares=s2), predicted[:3],
                               rtol=1e-12)
    assert oracle.variance(n, truth[0]) > predicted[0]
    assert math.isclose(oracle.variance(n, 0.0, sum_of_squares=0.0),
                        randomisation + 1 / (n - 1), rel_tol=1e-12)


def test_variance_refuses_a_sum_of_squares_outside_the_unit_interval():
    oracle = ldpflow.oracle("onebit", epsilon=1.0, domain_size=8)
    with pytest.raises(ValueError, match=r"sum_of_squares must be in \[0, 1\], got 1.5"):
        oracle.variance(64, sum_of_squares=1.5)


def test_variance_with_unequal_columns_uses_their_sizes():
    """n = K + 3: three columns of two users; h = (3/2 + K - 3) / K^2."""
    oracle = ldpflow.oracle("onebit", epsilon=1.0, domain_size=10)
    K, n, e = 16, 19, math.exp(1.0)
    h = (3 / 2 + K - 3) / K**2
    want = 4 * e / (e - 1) ** 2 * h + n * h / (n - 1) * (1 - 0.25)
    assert math.isclose(oracle.variance(n, 0.0, sum_of_squares=0.25), want, rel_tol=1e-12)


def test_fewer_users_than_columns_says_in_one_line_what_n_it_needs():
    """The issue's case: d = 5*10^4 (K = 65536) and 20,000 users. No unbiased estimate
    exists (20,000 measurements of 50,000 unknowns); estimate and variance say what n is
    needed, in one line."""
    d, n = 50_000, 20_000
    oracle = ldpflow.oracle("onebit", epsilon=1.0, domain_size=d)
    rng = np.random.default_rng(3)
    acc = oracle.aggregate(oracle.perturb(rng.integers(0, d, n), rng=rng))
    want = (r"^the one-bit estimate at d = 50000 needs n >= K = 65536 reports \(one in each "
            r"column, user j -> column j mod K\), got n = 20000: 45536 column\(s\) have none$")
    with pytest.raises(ValueError, match=want):
        oracle.estimate(acc)
    with pytest.raises(ValueError, match=want):
        oracle.variance(n)
    assert oracle.users_needed == 65536


def test_exactly_one_user_per_column_is_estimable():
    oracle = ldpflow.oracle("onebit", epsilon=1.0, domain_size=100)
    rng = np.random.default_rng(4)
    n = oracle.users_needed
    est = oracle.estimate(oracle.aggregate(oracle.perturb(rng.integers(0, 100, n), rng=rng)))
    assert est.n == n and np.isfinite(est.frequencies).all()
    assert math.isfinite(est.sigma) and est.sigma > 0
