"""Reported ``sigma`` and variance terms against the measured error, on skewed data at
d >= 10^4.

Post-processing trusts ``Estimate.sigma`` (base-cut's threshold, power's noise scale) and
``var_const + var_slope * f`` (mle-apx). For every oracle at epsilon = 4, on a Zipf(1.1)
population and on one with heavy point masses, the mean squared error over the d values is
compared with ``sigma^2``. With independent, near-normal errors of variances ``V_v``,
``d * MSE = sum_v V_v chi2_1``; Satterthwaite's approximation makes ``MSE * nu / m`` a
``chi2_nu`` variable with ``m = mean(V)`` and ``nu = (sum V)^2 / sum V^2``, which gives the
band. Per-value variances (the frequency-dependent term) are checked over repeated seeds
against ``chi2_{R-1}``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from ldpflow.core import simulation
from ldpflow.core.oracles import registry

EPSILON = 4.0
ALPHA = 1e-6  # two-sided, per assertion


def zipf_population(rng, n, d):
    return simulation.RankDistribution("zipf", 1.1).sample(d, n, rng)


def point_mass_population(rng, n, d):
    """40% of the users hold value 0 and 10% value 1; the rest are Zipf(1.1) over the domain."""
    tail = simulation.RankDistribution("zipf", 1.1).probabilities(d)
    p = 0.5 * tail
    p[0] += 0.4
    p[1] += 0.1
    return rng.choice(d, size=n, p=p / p.sum())


POPULATIONS = {"zipf": zipf_population, "point-mass": point_mass_population}

# (domain size, users): d >= 10^4 everywhere; n moderate where perturbing costs n * d bits.
SIZES = {"grr": (50_000, 10**6), "hr": (50_000, 10**6), "blh": (50_000, 10**6),
         "olh": (50_000, 200_000), "onebit": (50_000, 10**6), "oue": (10_000, 50_000),
         "sue": (10_000, 50_000), "ss": (10_000, 50_000)}


def mse_band(variances, alpha=ALPHA):
    """The (low, high) band of the mean of ``e_v^2`` over values for independent normal
    errors of variances ``variances`` (Satterthwaite's chi-square)."""
    v = np.asarray(variances, dtype=float)
    mean, nu = v.mean(), v.sum() ** 2 / (v**2).sum()
    return (mean * stats.chi2.ppf(alpha / 2, nu) / nu,
            mean * stats.chi2.ppf(1 - alpha / 2, nu) / nu)


def predicted_variances(oracle, est, truth):
    """The per-value error variances the theory predicts against the true frequencies."""
    if oracle.name != "onebit":
        return est.var_const + est.var_slope * truth
    return oracle.variance(est.n, truth)  # randomisation and column sampling, per value


def check_sigma_matches_mse(oracle, est, truth):
    mse = float(np.mean((est.frequencies - truth) ** 2))
    predicted = predicted_variances(oracle, est, truth)
    lo, hi = mse_band(predicted)
    assert lo < mse < hi, (mse, lo, hi)  # the variance formula, per value
    # The reported sigma: the band with sigma^2 as the mean variance.
    lo, hi = mse_band(np.full_like(predicted, est.sigma**2) * predicted / predicted.mean())
    assert lo < mse < hi, f"{oracle.name}: MSE / sigma^2 = {mse / est.sigma**2:.3f}"


@pytest.mark.statistical
@pytest.mark.parametrize("population", sorted(POPULATIONS))
@pytest.mark.parametrize("name", sorted(SIZES))
def test_reported_sigma_matches_the_mse_across_values(name, population):
    d, n = SIZES[name]
    rng = np.random.default_rng([20240611, len(name), len(population)])
    values = POPULATIONS[population](rng, n, d)
    truth = np.bincount(values, minlength=d) / n
    oracle = registry.make(name, epsilon=EPSILON, domain_size=d)
    est = oracle.estimate(oracle.aggregate(oracle.perturb(values, rng=rng)))
    check_sigma_matches_mse(oracle, est, truth)


@pytest.mark.statistical
@pytest.mark.parametrize("population", sorted(POPULATIONS))
@pytest.mark.parametrize("name", ["oue", "sue"])
def test_count_level_sigma_matches_the_mse_at_the_issue_size(name, population):
    """d = 50,000 and 10^6 users, drawn at the count level (the exact law of the counts)."""
    d, n = 50_000, 10**6
    rng = np.random.default_rng([7, len(name), len(population)])
    counts = np.bincount(POPULATIONS[population](rng, n, d), minlength=d)
    oracle = registry.make(name, epsilon=EPSILON, domain_size=d)
    est = oracle.estimate(oracle.sample_accumulator(counts, rng))
    check_sigma_matches_mse(oracle, est, counts / n)


def test_onebit_sigma_includes_the_estimated_column_sampling_term():
    """sigma^2 = 4e/(e-1)^2 h + c (1 - S2^), c = n h / (n - 1), with S2^ the unbiased
    estimate of sum f_v^2, recomputed here from the accumulator (exact), S2^ within k sigma
    of the truth, and sigma^2 = variance(n, 0) at that S2."""
    d, n = 10_000, 2**20
    rng = np.random.default_rng(5)
    values = point_mass_population(rng, n, d)
    truth = np.bincount(values, minlength=d) / n
    oracle = registry.make("onebit", epsilon=EPSILON, domain_size=d)
    acc = oracle.aggregate(oracle.perturb(values, rng=rng))
    est = oracle.estimate(acc)
    K, e = oracle.order, math.exp(EPSILON)
    h = float(np.sum(1.0 / acc.counts[:K])) / K**2
    c = n * h / (n - 1)
    noise = 4 * e / (e - 1) ** 2 * h
    f = est.frequencies
    s2 = (f @ f - d * noise - (d - 1) * c) / (1 - (d - 1) * c)
    assert math.isclose(est.var_const, noise + c * (1 - s2), rel_tol=1e-12)
    assert math.isclose(est.sigma**2, est.var_const, rel_tol=1e-12) and est.var_slope == 0.0
    assert math.isclose(est.sigma**2, oracle.variance(n, sum_of_squares=s2), rel_tol=1e-12)
    assert est.sigma**2 > 10 * noise  # the sampling term dominates at eps = 4
    # Var[S2^] ~ sum_v (4 f_v^2 V_v + 2 V_v^2) / (1 - (d-1) h)^2 for normal errors.
    v = predicted_variances(oracle, est, truth)
    sd = math.sqrt(float(np.sum(4 * truth**2 * v + 2 * v**2))) / (1 - (d - 1) * h)
    assert abs(s2 - truth @ truth) < stats.norm.ppf(1 - ALPHA / 2) * sd, (s2, truth @ truth, sd)


def test_onebit_sum_of_squares_is_clipped_to_the_unit_interval():
    oracle = registry.make("onebit", epsilon=1.0, domain_size=100)
    assert oracle.estimate_sum_of_squares(np.zeros(100), 1e-3, 1e-4) == 0.0
    assert oracle.estimate_sum_of_squares(np.full(100, 1.0), 0.0, 1e-4) == 1.0


@pytest.mark.statistical
@pytest.mark.parametrize("name,runs,n", [("oue", 400, 10**6), ("sue", 400, 10**6),
                                         ("grr", 200, 50_000), ("hr", 200, 50_000)])
def test_variance_of_a_heavy_value_includes_the_frequency_term(name, runs, n):
    """Over R seeds, the variance at the 40% and 10% values is var_const + var_slope f,
    far from sigma^2 alone for oue and grr (the frequency term dominates there)."""
    d = 10_000
    rng = np.random.default_rng([11, len(name)])
    values = point_mass_population(rng, n, d)
    counts = np.bincount(values, minlength=d)
    oracle = registry.make(name, epsilon=EPSILON, domain_size=d)
    heavy = np.array([0, 1])
    if name in ("oue", "sue"):
        runs_f = [oracle.estimate(oracle.sample_accumulator(counts, rng)).frequencies[heavy]
                  for _ in range(runs)]
    else:
        runs_f = [oracle.estimate(oracle.aggregate(oracle.perturb(values, rng=rng)))
                  .frequencies[heavy] for _ in range(runs)]
    est = oracle.estimate(oracle.aggregate(oracle.perturb(values[:1000], rng=rng)))
    predicted = oracle.variance(n, counts[heavy] / n)
    ratio = np.var(runs_f, axis=0, ddof=1) / predicted
    lo = stats.chi2.ppf(ALPHA / 2, runs - 1) / (runs - 1)
    hi = stats.chi2.ppf(1 - ALPHA / 2, runs - 1) / (runs - 1)
    assert np.all((lo < ratio) & (ratio < hi)), ratio
    # The Estimate's terms are the same model (both scale as 1/n).
    from_estimate = (est.var_const + est.var_slope * counts[heavy] / n) * 1000 / n
    np.testing.assert_allclose(from_estimate, predicted, rtol=1e-12)


@pytest.mark.statistical
@pytest.mark.parametrize("name", ["oue", "sue"])
def test_count_level_law_equals_perturb_then_aggregate(name):
    """Mean and variance of every column sum, and of their total (independent columns), from
    both paths agree with Binomial(n_v, p) + Binomial(n - n_v, q)."""
    d, runs = 6, 400
    oracle = registry.make(name, epsilon=1.0, domain_size=d)
    values = np.repeat(np.arange(d), [900, 500, 300, 200, 80, 20])
    counts, n = np.bincount(values, minlength=d), values.size
    p, q = oracle.p, oracle.q
    mean = counts * p + (n - counts) * q
    var = counts * p * (1 - p) + (n - counts) * q * (1 - q)
    rng = np.random.default_rng(3)
    paths = {
        "counts": [oracle.sample_accumulator(counts, rng).counts for _ in range(runs)],
        "reports": [oracle.aggregate(oracle.perturb(values, rng=rng)).counts for _ in range(runs)],
    }
    z = stats.norm.ppf(1 - ALPHA / (2 * (d + 1)))
    lo = stats.chi2.ppf(ALPHA / (2 * (d + 1)), runs - 1) / (runs - 1)
    hi = stats.chi2.ppf(1 - ALPHA / (2 * (d + 1)), runs - 1) / (runs - 1)
    for path, sums in paths.items():
        sums = np.array(sums)
        both = np.column_stack([sums, sums.sum(axis=1)])
        m, v = np.append(mean, mean.sum()), np.append(var, var.sum())
        assert np.all(np.abs(both.mean(axis=0) - m) < z * np.sqrt(v / runs)), path
        ratio = both.var(axis=0, ddof=1) / v
        assert np.all((lo < ratio) & (ratio < hi)), (path, ratio)


def test_count_level_simulation_refuses_bad_counts():
    oracle = registry.make("oue", epsilon=1.0, domain_size=4)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="true_counts must be 4 non-negative integers"):
        oracle.sample_accumulator(np.array([1, 2, 3]), rng)
    with pytest.raises(ValueError, match="non-negative"):
        oracle.sample_accumulator(np.array([1, -2, 3, 0]), rng)
    with pytest.raises(TypeError, match="numpy.random.Generator"):
        oracle.sample_accumulator(np.array([1, 2, 3, 0]), 0)
    acc = oracle.sample_accumulator(np.array([1, 2, 3, 0]), rng)
    assert acc.n == 6 and acc.key == oracle.create_accumulator().key
