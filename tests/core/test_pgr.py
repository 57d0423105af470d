"""Projective geometry response: the geometry, the exact decoder, exact privacy, sampling,
unbiasedness and variance."""

from __future__ import annotations

import math
from itertools import product

import numpy as np
import pytest
from scipy import stats

from ldpflow.core.oracles import registry
from ldpflow.core.oracles.pgr import (
    ProjectiveGeometryResponse,
    choose_geometry,
    fast_support_counts,
    geometry_constants,
    naive_support_counts,
    transform_counts,
    vector_codes,
)
from ldpflow.core.validation import InvalidReportError
from tests.core import reference

GEOMETRIES = [(2, 2), (2, 3), (2, 5), (3, 2), (3, 3), (3, 4), (5, 2), (5, 3), (7, 3), (11, 2)]


def normalised_vectors(q, t):
    """Plain Python: the normalised vectors of F_q^t in increasing base-q code."""
    vectors = [x for x in product(range(q), repeat=t) if next((c for c in x if c), 0) == 1]
    return sorted(vectors, key=lambda x: sum(c * q ** (t - 1 - i) for i, c in enumerate(x)))


def incident(u, x, q):
    return sum(a * b for a, b in zip(u, x, strict=True)) % q == 0


def zipf_values(rng, n, d, s=1.1):
    weights = np.arange(1, d + 1, dtype=float) ** -s
    return rng.choice(d, size=n, p=weights / weights.sum())


# -- geometry -------------------------------------------------------------------------------


@pytest.mark.parametrize("q,t", GEOMETRIES)
def test_canonical_order_and_incidence_counts(q, t):
    vectors = normalised_vectors(q, t)
    K, h, h2, _, _ = geometry_constants(q, t, 1.0)
    assert len(vectors) == K
    codes = [sum(c * q ** (t - 1 - i) for i, c in enumerate(x)) for x in vectors]
    assert vector_codes(np.arange(K), q, t).tolist() == codes
    for u in vectors:  # each hyperplane holds h points
        assert sum(incident(u, x, q) for x in vectors) == h
    for a, b in [(0, 1), (0, K - 1), (K // 2, K - 1)]:  # two points share h2 hyperplanes
        assert sum(incident(u, vectors[a], q) and incident(u, vectors[b], q)
                   for u in vectors) == h2


@pytest.mark.parametrize("epsilon", [0.1, 0.5, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0])
@pytest.mark.parametrize("d", [2, 7, 100, 1024, 50_000])
def test_geometry_follows_the_documented_rule(epsilon, d):
    q, t = choose_geometry(epsilon, d)
    K = (q**t - 1) // (q - 1)
    assert reference_is_prime(q) and K >= d and (t == 2 or (q ** (t - 1) - 1) // (q - 1) < d)
    assert t == 2 or q**t <= max(2**24, 4 * d)
    e1 = math.exp(epsilon) + 1
    below = max(m for m in range(2, max(3, math.floor(e1) + 1)) if reference_is_prime(m))
    above = next(m for m in range(max(2, math.ceil(e1)), 10**6) if reference_is_prime(m))
    cap = next(m for m in range(max(2, d - 1), 10**6) if reference_is_prime(m))
    def var(c):
        tt = 2
        while (c**tt - 1) // (c - 1) < d:
            tt += 1
        if tt > 2 and c**tt > max(2**24, 4 * d):
            return math.inf
        _, _, _, p, qs = geometry_constants(c, tt, epsilon)
        return qs * (1 - qs) / (p - qs) ** 2
    candidates = {min(c, cap) for c in (below, above, *filter(reference_is_prime, range(64)))}
    candidates.add(cap)
    assert q == min(candidates, key=lambda c: (var(c), c))


def reference_is_prime(m):
    return m >= 2 and all(m % f for f in range(2, math.isqrt(m) + 1))


# -- the decoder ----------------------------------------------------------------------------


@pytest.mark.parametrize("q,t", GEOMETRIES)
def test_fast_decoder_equals_the_incidence_matrix_exactly(q, t):
    K = (q**t - 1) // (q - 1)
    rng = np.random.default_rng(q * 100 + t)
    vectors = normalised_vectors(q, t)
    for hist in (rng.integers(0, 1000, K), rng.integers(0, 2, K) * 10**9, np.zeros(K, int)):
        fast = fast_support_counts(hist, q, t, K)
        naive = naive_support_counts(hist, q, t, K)
        np.testing.assert_array_equal(fast, naive)
        plain = [sum(int(hist[y]) for y, u in enumerate(vectors) if incident(u, x, q))
                 for x in vectors]
        assert fast.tolist() == plain
        for d in (2, K // 2 + 1):  # the first d points only
            np.testing.assert_array_equal(fast_support_counts(hist, q, t, d), naive[:d])


@pytest.mark.parametrize("epsilon,d", [(1.0, 50_000), (4.0, 50_000), (2.0, 1024)])
def test_transform_rounding_error_is_tiny_at_scale(epsilon, d):
    """Histograms of 10^9 reports: the floating-point counts are integers to within 1e-6."""
    q, t = choose_geometry(epsilon, d)
    K = (q**t - 1) // (q - 1)
    rng = np.random.default_rng(5)
    hist = rng.multinomial(10**9, np.full(K, 1 / K))
    from ldpflow.core.oracles import pgr

    points = pgr._digits(vector_codes(np.arange(d), q, t), q, t)
    raw = transform_counts(hist, q, t, points)
    assert np.max(np.abs(raw - np.rint(raw))) < 1e-6
    sample = rng.choice(d, 30, replace=False)  # spot-check against the incidence rows
    planes = pgr._digits(vector_codes(np.arange(K), q, t), q, t)
    rows = (points[sample] @ planes.T) % q == 0
    np.testing.assert_array_equal(np.rint(raw[sample]).astype(np.int64), rows @ hist)


def test_support_counts_use_the_fast_decoder():
    oracle = registry.make("pgr", epsilon=2.0, domain_size=100)
    q, t = oracle.geometry
    reports = oracle.perturb(np.random.default_rng(1).integers(0, 100, 3000),
                             rng=np.random.default_rng(2))
    acc = oracle.aggregate(reports)
    np.testing.assert_array_equal(oracle.support_counts(acc),
                                  naive_support_counts(acc.counts, q, t, 100))


# -- privacy and sampling -------------------------------------------------------------------


@pytest.mark.parametrize("epsilon,d", [(0.3, 7), (math.log(2), 7), (1.0, 10), (2.0, 20),
                                       (1.0, 6), (0.2, 20)])
def test_exact_likelihood_ratio_and_support_probabilities(epsilon, d):
    oracle = ProjectiveGeometryResponse(epsilon=epsilon, domain_size=d)
    dists = [reference.output_distribution(oracle, v) for v in range(d)]
    ratio = max(a[y] / b[y] for a in dists for b in dists for y in a)
    assert math.isclose(ratio, math.exp(epsilon), rel_tol=1e-12)  # attained
    q, t = oracle.geometry
    vectors = normalised_vectors(q, t)
    for v in (0, d - 1):
        own = sum(p for y, p in dists[v].items() if incident(vectors[y], vectors[v], q))
        other = sum(p for y, p in dists[v].items() if incident(vectors[y], vectors[v - 1], q))
        assert math.isclose(own, oracle.p, rel_tol=1e-12)
        assert math.isclose(other, oracle.q, rel_tol=1e-12)


@pytest.mark.parametrize("epsilon,d,value", [(0.2, 30, 29), (1.0, 40, 0), (1.0, 40, 17),
                                             (2.0, 31, 30), (1.0, 6, 4)])
def test_sampled_hyperplanes_follow_the_exact_law(epsilon, d, value):
    """Chi-square of 60k reports against P(y | v), which is uniform within each kind."""
    oracle = ProjectiveGeometryResponse(epsilon=epsilon, domain_size=d)
    n = 60_000
    reports = oracle.perturb(np.full(n, value), rng=np.random.default_rng(20240611 + value))
    dist = reference.output_distribution(oracle, value)
    observed = np.bincount(reports.value, minlength=oracle.order)
    expected = np.array([dist[y] for y in range(oracle.order)]) * n
    assert stats.chisquare(observed, expected).pvalue > 1e-4


def test_reports_outside_the_hyperplanes_are_refused():
    oracle = ProjectiveGeometryResponse(epsilon=1.0, domain_size=100)  # q = 3, t = 5
    assert oracle.order == 121 and oracle.report_bits == 7
    with pytest.raises(InvalidReportError, match=r"value outside \[0, 121\)"):
        oracle.aggregate({"value": [0, 121]})


# -- statistics -----------------------------------------------------------------------------


@pytest.mark.statistical
@pytest.mark.parametrize("epsilon,d", [(1.0, 1000), (4.0, 1000), (2.0, 5000)])
def test_estimates_are_unbiased_within_k_sigma_on_zipf_data(epsilon, d):
    n = 200_000
    rng = np.random.default_rng(17)
    values = zipf_values(rng, n, d)
    truth = np.bincount(values, minlength=d) / n
    oracle = ProjectiveGeometryResponse(epsilon=epsilon, domain_size=d)
    est = oracle.estimate(oracle.aggregate(oracle.perturb(values, rng=rng)))
    sd = np.sqrt(oracle.variance(n, truth))
    z = stats.norm.ppf(1 - 1e-3 / (2 * d))  # Bonferroni over the d values
    assert np.all(np.abs(est.frequencies - truth) <= z * sd)
    assert math.isclose(est.sigma, math.sqrt(oracle.variance(n)), rel_tol=1e-12)


@pytest.mark.statistical
@pytest.mark.parametrize("epsilon,d", [(1.0, 30), (3.0, 200)])
def test_empirical_variance_matches_the_formula(epsilon, d):
    """Over R runs, (R-1) s^2 / Var follows chi-square(R-1); Bonferroni over the d values."""
    n, R = 5000, 300
    rng = np.random.default_rng(41)
    values = zipf_values(rng, n, d)
    truth = np.bincount(values, minlength=d) / n
    oracle = ProjectiveGeometryResponse(epsilon=epsilon, domain_size=d)
    runs = np.array([oracle.estimate(oracle.aggregate(oracle.perturb(values, rng=rng))).frequencies
                     for _ in range(R)])
    ratio = runs.var(axis=0, ddof=1) / oracle.variance(n, truth)
    alpha = 1e-4 / d
    lo = stats.chi2.ppf(alpha / 2, R - 1) / (R - 1)
    hi = stats.chi2.ppf(1 - alpha / 2, R - 1) / (R - 1)
    assert np.all((ratio > lo) & (ratio < hi)), ratio


@pytest.mark.parametrize("epsilon", [math.log(2), math.log(4), math.log(6)])
def test_variance_equals_subset_selection_when_d_is_K_and_q_is_e_plus_one(epsilon):
    """With d = K and omega = h, PGR's (p*, q*) equal subset selection's exactly.

    SS: ``p* = h e / (h e + K - h)`` (PGR's), and with ``K - 1 = q h``, ``h2 = (h - 1)/q``,
    ``q*_SS = (p* (h-1) + (1-p*) h) / (K-1) = (e (h-1) + K - h) / (q Z)`` which is
    ``((h-1)(e-1) + q h) / (q Z) = (h2 e + h - h2) / Z``. SS takes ``omega = h`` when
    ``round(K / (e+1)) = h``: at ``q = e + 1``, ``K / q = h + 1/q``. PGR's constant also
    tends to ``(e+q-1)^2/((e-1)^2 (q-1)) = 4e/(e-1)^2`` as ``t`` grows.
    """
    e = math.exp(epsilon)
    q = round(e + 1)
    limit = 4 * e / (e - 1) ** 2
    assert math.isclose((e + q - 1) ** 2 / ((e - 1) ** 2 * (q - 1)), limit, rel_tol=1e-12)
    t = max(t for t in range(2, 40) if q**t <= 2**24)
    d = (q**t - 1) // (q - 1)
    pgr = ProjectiveGeometryResponse(epsilon=epsilon, domain_size=d)
    ss = registry.make("ss", epsilon=epsilon, domain_size=d)
    assert pgr.geometry == (q, t) and ss.subset_size == (q ** (t - 1) - 1) // (q - 1)
    assert math.isclose(pgr.p, ss.p, rel_tol=1e-12) and math.isclose(pgr.q, ss.q, rel_tol=1e-12)
    assert math.isclose(pgr.variance(1000), ss.variance(1000), rel_tol=1e-10)
    for t in range(3, 9):  # and for every t, at d = K
        d = (q**t - 1) // (q - 1)
        _, h, _, p, qs = geometry_constants(q, t, epsilon)
        ss = registry.make("ss", epsilon=epsilon, domain_size=d)
        assert ss.subset_size == h
        assert math.isclose(qs, ss.q, rel_tol=1e-12) and math.isclose(p, ss.p, rel_tol=1e-12)


# -- the client's draws, replayed in plain Python ---------------------------------------------


class WordStream:
    """The splitmix64 words of a client seed, consumed in order (``SplitMix64Source``)."""

    def __init__(self, seed):
        self.words, self.used = reference.splitmix64(seed, 4096), 0

    def word(self):
        self.used += 1
        return self.words[self.used - 1]

    def uniform(self):
        return (self.word() >> 11) / 2.0**53

    def below(self, bound):  # Lemire's multiply-shift with rejection
        while True:
            m = (self.word() >> 32) * bound
            if m & 0xFFFFFFFF >= (2**32 - bound) % bound:
                return m >> 32


def reference_report(oracle, value, seed):
    """The spec's draw order for one report: member, then rounds of s and t coordinates."""
    q, t = oracle.geometry
    vectors = normalised_vectors(q, t)
    x = vectors[value]
    k = next(i for i, c in enumerate(x) if c)
    stream = WordStream(seed)
    member = stream.uniform() < oracle.p
    while True:
        other = 1 + stream.below(q - 1)  # drawn in every round, used by non-members only
        s = 0 if member else other
        w = [stream.below(q) for _ in range(t)]
        w[k] = (s - sum(w[j] * x[j] for j in range(t) if j != k)) % q
        if any(w):
            break
    lead = next(c for c in w if c)
    inverse = pow(lead, -1, q)
    return vectors.index(tuple(c * inverse % q for c in w))


def test_published_vectors_follow_the_spec_draw_order():
    import json

    from tests.core.test_vectors import VECTORS

    cases = [c for c in json.loads((VECTORS / "sketch_reports.json").read_text())
             if c["oracle"] == "pgr"]
    assert len(cases) >= 4
    for case in cases:
        oracle = registry.make("pgr", **case["parameters"])
        want = case["report"]["value"]
        assert reference_report(oracle, case["value"], case["client_seed"]) == want
    oracle = registry.make("pgr", epsilon=1.0, domain_size=40)  # q = 3, t = 4
    from ldpflow.core.randomness import SplitMix64Source

    for seed in range(1, 200):
        value = seed % 40
        got = oracle.perturb_one(value, SplitMix64Source(seed))["value"]
        assert got == reference_report(oracle, value, seed), seed
