"""Apple's CMS and HCMS: exact privacy, the exact mean and variance for the fixed hash
functions, and sigma with the collision term."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from ldpflow.core import bitvectors, hashing
from ldpflow.core.oracles.sketch import CountMeanSketch, HadamardCountMeanSketch, sketch_seeds

SKETCHES = {"cms": CountMeanSketch, "hcms": HadamardCountMeanSketch}


def buckets(oracle):
    """``h_j(v)`` for every function and value: shape (k, d), by the public hash family."""
    k, d = oracle.num_hashes, oracle.domain_size
    return hashing.hash_values(np.repeat(sketch_seeds(k), d), np.tile(np.arange(d), k),
                               oracle.value_bits, oracle.hash_range).reshape(k, d)


def report_law(oracle, value):
    """P(report | value) for every possible report, from the protocol's definition."""
    h, k, m = buckets(oracle), oracle.num_hashes, oracle.hash_range
    law = {}
    if oracle.name == "cms":
        flip = 1 / (math.exp(oracle.epsilon / 2) + 1)
        for j in range(k):
            for pattern in itertools.product((0, 1), repeat=m):
                p = 1 / k
                for index, bit in enumerate(pattern):
                    one = 1 - flip if index == h[j, value] else flip
                    p *= one if bit else 1 - one
                law[(j, pattern)] = p
    else:
        keep = math.exp(oracle.epsilon) / (math.exp(oracle.epsilon) + 1)
        for j, col, bit in itertools.product(range(k), range(m), (0, 1)):
            sign = 1 - (bin(int(h[j, value]) & col).count("1") & 1) * 2  # H_m[h, l]
            law[(j, col, bit)] = (keep if (bit == 1) == (sign == 1) else 1 - keep) / (k * m)
    return law


@pytest.mark.parametrize("name", SKETCHES)
@pytest.mark.parametrize("epsilon", [0.3, math.log(2), 1.7])
def test_worst_case_likelihood_ratio_is_exactly_e_to_the_epsilon(name, epsilon):
    oracle = SKETCHES[name](epsilon=epsilon, domain_size=6, hash_range=4, num_hashes=3)
    laws = [report_law(oracle, v) for v in range(oracle.domain_size)]
    for law in laws:
        assert math.isclose(sum(law.values()), 1.0, rel_tol=1e-12)
    ratio = max(a[r] / b[r] for a in laws for b in laws for r in a)
    assert math.isclose(ratio, math.exp(epsilon), rel_tol=1e-12)


@pytest.mark.parametrize("name", SKETCHES)
def test_sampled_reports_follow_the_protocols_law(name):
    oracle = SKETCHES[name](epsilon=math.log(2), domain_size=6, hash_range=4, num_hashes=3)
    value, n = 2, 40_000
    reports = oracle.perturb(np.full(n, value), rng=np.random.default_rng(3))
    law = report_law(oracle, value)
    if name == "cms":
        rows = bitvectors.unpack(reports.columns["bits"], oracle.hash_range)
        keys = [(int(j), tuple(int(b) for b in row))
                for j, row in zip(reports.columns["column"], rows, strict=True)]
    else:
        keys = list(zip(*(reports.columns[c].tolist() for c in ("column", "value", "bit")),
                        strict=True))
    outcomes = list(law)
    index = {o: i for i, o in enumerate(outcomes)}
    observed = np.bincount([index[k] for k in keys], minlength=len(outcomes))
    expected = np.array([law[o] for o in outcomes]) * n
    assert stats.chisquare(observed, expected).pvalue > 1e-4


def exact_moments(oracle, truth, n):
    """E and Var of f~_v for these hash functions, from the per-user support chances."""
    h = buckets(oracle)
    rho = (h[:, :, None] == h[:, None, :]).mean(axis=0)  # rho[u, v]: share of colliding j
    m = oracle.hash_range
    scale = m / (m - 1)
    mean = scale * (truth @ (rho - 1 / m))
    if oracle.name == "cms":
        flip = oracle.flip
        pi = flip + (1 - 2 * flip) * rho  # P(bit h_j(v) set | the user holds u)
        per_user = oracle.c**2 * pi * (1 - pi)
    else:
        per_user = oracle.c**2 - rho**2
    variance = scale**2 * (truth @ per_user) / n
    return mean, variance


@pytest.mark.statistical
@pytest.mark.parametrize("name", SKETCHES)
def test_mean_and_variance_over_runs_are_the_exact_ones(name):
    """Over R runs of one population: the mean is the exact expectation (collisions and all)
    within k sigma, and (R-1) s^2 / Var follows chi-square(R-1)."""
    oracle = SKETCHES[name](epsilon=1.0, domain_size=8, hash_range=8, num_hashes=4)
    d, n, runs = 8, 4096, 300
    rng = np.random.default_rng(31)
    values = rng.choice(d, size=n, p=np.array([8, 6, 4, 3, 2, 1, 1, 1]) / 26)
    truth = np.bincount(values, minlength=d) / n
    got = np.array([oracle.estimate(oracle.aggregate(oracle.perturb(values, rng=rng))
                                    ).frequencies for _ in range(runs)])
    mean, variance = exact_moments(oracle, truth, n)
    z = stats.norm.ppf(1 - 1e-3 / (2 * d))
    assert np.all(np.abs(got.mean(axis=0) - mean) <= z * np.sqrt(variance / runs))
    statistic = (runs - 1) * got.var(axis=0, ddof=1) / variance
    low, high = stats.chi2.ppf([1e-3 / (2 * d), 1 - 1e-3 / (2 * d)], runs - 1)
    assert np.all((statistic > low) & (statistic < high)), statistic / (runs - 1)


@pytest.mark.statistical
@pytest.mark.parametrize("name", SKETCHES)
def test_estimates_are_within_k_sigma_with_the_collision_term(name):
    d, n = 500, 2**17
    rng = np.random.default_rng(7)
    weights = np.arange(1, d + 1, dtype=float) ** -1.1
    values = rng.choice(d, size=n, p=weights / weights.sum())
    truth = np.bincount(values, minlength=d) / n
    oracle = SKETCHES[name](epsilon=2.0, domain_size=d, hash_range=256, num_hashes=64)
    est = oracle.estimate(oracle.aggregate(oracle.perturb(values, rng=rng)))
    sd = np.sqrt(oracle.variance(n, truth))
    z = stats.norm.ppf(1 - 1e-3 / (2 * d))
    assert np.all(np.abs(est.frequencies - truth) <= z * sd)
    # sigma: the noise at f = 0 plus the collision term, sum of squares from the estimate.
    s2 = float(np.sum(np.clip(est.frequencies, 0, 1) ** 2))
    assert math.isclose(est.sigma**2, oracle.variance(n) + oracle.collision_variance(s2),
                        rel_tol=1e-12)
    # Without the collision term these hash functions' bias would not fit the noise alone.
    noise = np.sqrt(oracle.variance(n, 0.0) + oracle._variance_terms(n)[1] * truth)
    assert np.mean(((est.frequencies - truth) / noise) ** 2) > np.mean(
        ((est.frequencies - truth) / sd) ** 2)


@pytest.mark.parametrize("name", SKETCHES)
def test_merging_in_any_split_equals_pooling(name):
    oracle = SKETCHES[name](epsilon=1.0, domain_size=50, hash_range=16, num_hashes=8)
    rng = np.random.default_rng(2)
    reports = oracle.perturb(rng.integers(0, 50, 3000), rng=rng)
    pooled = oracle.aggregate(reports)
    parts = [oracle.aggregate(reports[a:b]) for a, b in ((0, 1000), (1000, 1001), (1001, 3000))]
    merged = parts[2].merge(parts[0]).merge(parts[1])
    assert merged == pooled and merged.n == 3000
    assert np.array_equal(oracle.estimate(merged).frequencies,
                          oracle.estimate(pooled).frequencies)


@pytest.mark.parametrize("name", SKETCHES)
def test_invalid_reports_are_refused_with_reasons(name):
    oracle = SKETCHES[name](epsilon=1.0, domain_size=50, hash_range=16, num_hashes=8)
    reports = oracle.perturb(np.arange(4), rng=np.random.default_rng(1))
    columns = {k: v.copy() for k, v in reports.columns.items()}
    columns["column"][0] = 8
    if name == "hcms":
        columns["value"][1] = 16
        columns["bit"][2] = 2
    rows, reasons = oracle.invalid_rows(type(reports)(oracle.name, columns))
    want = ["column outside [0, 8)"] + (["value outside [0, 16)", "bit is not 0 or 1"]
                                        if name == "hcms" else [])
    assert rows.tolist() == list(range(len(want))) and reasons == want


@pytest.mark.parametrize("name", SKETCHES)
def test_parameters_are_checked(name):
    cls = SKETCHES[name]
    with pytest.raises(ValueError, match="hash_range"):
        cls(epsilon=1.0, domain_size=10, hash_range=12)
    with pytest.raises(ValueError, match="num_hashes must be an integer"):
        cls(epsilon=1.0, domain_size=10, num_hashes=0)
    oracle = cls(epsilon=1.0, domain_size=10)
    assert (oracle.hash_range, oracle.num_hashes) == (1024, 256)
    assert oracle.key.parameters["num_hashes"] == 256
