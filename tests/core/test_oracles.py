"""Contract tests run against every registry key: validation, pickling, wire form, merge,
exact privacy, unbiasedness and variance."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

import ldpflow
from ldpflow.core import bitvectors, randomness
from ldpflow.core.oracles import Reports, registry
from ldpflow.core.validation import InvalidReportError
from tests.core import reference

NAMES = list(registry.ORACLES)


def zipf_values(rng, n, d, s=1.1):
    weights = np.arange(1, d + 1, dtype=float) ** -s
    return rng.choice(d, size=n, p=weights / weights.sum())


def column_balanced(rng, n, d, K):
    """Values whose every one-bit column (j mod K) holds the same multiset of values."""
    return np.repeat(zipf_values(rng, n // K, d), K)


def order_of(d):
    return 1 << d.bit_length()


# -- parameters and validation -------------------------------------------------------------


def test_registry_has_the_spec_keys():
    assert set(NAMES) == set(reference.ORACLE_KEYS)
    assert ldpflow.oracle is registry.make


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("epsilon", [0, -1.0, math.nan, math.inf])
def test_bad_epsilon_value_is_named(name, epsilon):
    with pytest.raises(ValueError, match=r"epsilon must be in \(0, inf\), got"):
        registry.make(name, epsilon=epsilon, domain_size=8)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("epsilon", ["1", True, None])
def test_bad_epsilon_type_is_named(name, epsilon):
    with pytest.raises(TypeError, match="epsilon must be a real number"):
        registry.make(name, epsilon=epsilon, domain_size=8)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("domain_size,error", [(1, ValueError), (0, ValueError), (-3, ValueError),
                                               (2.5, TypeError), (True, TypeError)])
def test_bad_domain_size_is_named(name, domain_size, error):
    with pytest.raises(error, match=f"domain_size must .*{domain_size!r}"):
        registry.make(name, epsilon=1.0, domain_size=domain_size)


def test_unknown_oracle_lists_known_names():
    with pytest.raises(ValueError, match=f"oracle must be one of {' '.join(registry.ORACLES)}, "
                                         "got 'rappor'"):  # a protocol, of another family
        registry.make("rappor", epsilon=1.0, domain_size=8)


def test_unknown_parameter_is_a_type_error():
    with pytest.raises(TypeError, match="hash_range"):
        registry.make("grr", epsilon=1.0, domain_size=8, hash_range=4)


@pytest.mark.parametrize("hash_range", [3, 1, 6])
def test_olh_hash_range_must_be_a_power_of_two(hash_range):
    with pytest.raises(ValueError, match=f"hash_range must .*got {hash_range}"):
        registry.make("olh", epsilon=1.0, domain_size=8, hash_range=hash_range)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("values,error,message", [
    ([0, 8], ValueError, r"values must lie in \[0, 8\), got 8 at position 1"),
    ([-1], ValueError, r"values must lie in \[0, 8\), got -1 at position 0"),
    ([0.5], TypeError, "values must be integers, got 0.5"),
    (["a"], TypeError, "values must be integers"),
    ([[1, 2]], ValueError, "one-dimensional"),
])
def test_values_outside_the_domain_are_refused(name, values, error, message):
    oracle = registry.make(name, epsilon=1.0, domain_size=8)
    with pytest.raises(error, match=message):
        oracle.perturb(values, rng=np.random.default_rng(0))


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 2.0, 4.0, 8.0])
def test_olh_picks_the_better_power_of_two(epsilon):
    oracle = registry.make("olh", epsilon=epsilon, domain_size=64)
    e = math.exp(epsilon)
    def var(g):
        return (e + g - 1) ** 2 / ((e - 1) ** 2 * (g - 1))
    lo = 2 ** max(1, math.floor(math.log2(e + 1)))
    hi = 2 ** max(1, math.ceil(math.log2(e + 1)))
    assert oracle.hash_range == min((lo, hi), key=var)
    assert registry.make("blh", epsilon=epsilon, domain_size=64).hash_range == 2


@pytest.mark.parametrize("name", NAMES)
def test_oracle_pickles_and_hashes(name):
    oracle = registry.make(name, epsilon=0.7, domain_size=10)
    clone = pickle.loads(pickle.dumps(oracle))
    assert clone == oracle and hash(clone) == hash(oracle)
    assert clone.key == oracle.key


@pytest.mark.parametrize("name", NAMES)
def test_report_bits_follow_the_spec(name):
    d, eps = 100, 1.0
    oracle = registry.make(name, epsilon=eps, domain_size=d)
    e = math.exp(eps)
    expected = {
        "grr": 7, "oue": 100, "sue": 100, "hr": 7, "onebit": 1,
        "olh": 64 + int(math.log2(oracle.hash_range)) if name == "olh" else None,
        "blh": 65,
        "ss": max(1, math.floor(d / (e + 1) + 0.5)) * 7,
        "cms": 1024 + 8,  # m bits and j among k = 256
        "hcms": 1 + 8 + 10,  # one bit, j among 256, l among m = 1024
        "pgr": 7,  # q = 3, t = 5: K = 121 hyperplanes
    }[name]
    assert oracle.report_bits == expected


# -- wire form and validation of reports ----------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_reports_slice_concat_and_pickle(name):
    oracle = registry.make(name, epsilon=1.0, domain_size=20)
    reports = oracle.perturb(np.arange(20) % 20, rng=np.random.default_rng(3))
    assert len(reports) == 20
    parts = [reports[0:7], reports[7:13], reports[13:]]
    assert [len(p) for p in parts] == [7, 6, 7]
    joined = Reports.concat(parts)
    for column in reports.columns:
        np.testing.assert_array_equal(joined.columns[column], reports.columns[column])
    clone = pickle.loads(pickle.dumps(reports))
    assert oracle.aggregate(clone) == oracle.aggregate(reports)


@pytest.mark.parametrize("name", NAMES)
def test_perturb_one_returns_plain_wire_values(name):
    oracle = registry.make(name, epsilon=1.0, domain_size=20)
    kwargs = {"column": 3} if name == "onebit" else {}
    record = oracle.perturb_one(5, np.random.default_rng(1), **kwargs)
    for value in record.values():
        assert type(value) in (int, bytes)
    columns = {k: np.array([v]) if not isinstance(v, bytes) else np.frombuffer(v, np.uint8)[None]
               for k, v in record.items()}
    assert oracle.aggregate(columns).n == 1


def test_unary_wire_form_is_little_endian_packbits():
    oracle = registry.make("oue", epsilon=1.0, domain_size=11)
    reports = oracle.perturb(np.arange(11), rng=np.random.default_rng(5))
    bits = reports.bits
    assert bits.shape == (11, 2) and bits.dtype == np.uint8
    unpacked = np.unpackbits(bits, axis=1, bitorder="little")
    assert not unpacked[:, 11:].any()  # padding bits are zero
    np.testing.assert_array_equal(np.packbits(unpacked[:, :11], axis=1, bitorder="little"), bits)
    np.testing.assert_array_equal(oracle.aggregate(reports).counts, unpacked[:, :11].sum(axis=0))


@pytest.mark.parametrize("name,columns,reason", [
    ("grr", {"value": [0, 9, 3]}, r"value outside \[0, 8\)"),
    ("hr", {"value": [0, 16]}, r"value outside \[0, 16\)"),
    ("pgr", {"value": [0, 8]}, r"value outside \[0, 8\)"),  # q = 7, t = 2: K = 8
    ("olh", {"seed": [1, 2], "bucket": [0, 7]}, r"bucket outside"),
    ("oue", {"bits": [[1], [0]]}, None),
    ("onebit", {"column": [0, 1, 16], "bit": [0, 1, 1]}, r"column outside \[0, 16\)"),
    ("onebit", {"column": [0, 1], "bit": [2, 1]}, "bit is not 0 or 1"),
])
def test_invalid_rows_have_reasons(name, columns, reason):
    oracle = registry.make(name, epsilon=1.0, domain_size=8)
    rows, reasons = oracle.invalid_rows(Reports(name, columns))
    if reason is None:
        assert rows.size == 0
        return
    assert rows.size == 1
    assert reasons[0] and __import__("re").search(reason, reasons[0])
    with pytest.raises(InvalidReportError, match=f"first at row {int(rows[0])}"):
        oracle.aggregate(Reports(name, columns))


def test_unary_padding_bits_must_be_zero():
    oracle = registry.make("oue", epsilon=1.0, domain_size=10)
    bits = np.zeros((3, 2), dtype=np.uint8)
    bits[1, 1] = 0b100  # bit 10: past the domain
    rows, reasons = oracle.invalid_rows(Reports("oue", {"bits": bits}))
    assert rows.tolist() == [1] and "padding" in reasons[0]


def test_subset_selection_needs_exactly_omega_values():
    oracle = registry.make("ss", epsilon=1.0, domain_size=16)
    good = oracle.perturb(np.arange(16), rng=np.random.default_rng(0)).bits
    bad = good.copy()
    bad[4, 0] ^= 1
    rows, reasons = oracle.invalid_rows(Reports("ss", {"bits": bad}))
    assert rows.tolist() == [4] and f"exactly {oracle.subset_size}" in reasons[0]


@pytest.mark.parametrize("name", NAMES)
def test_malformed_columns_are_refused(name):
    oracle = registry.make(name, epsilon=1.0, domain_size=8)
    with pytest.raises(InvalidReportError, match="need columns"):
        oracle.aggregate({"nonsense": [1, 2]})
    other = "grr" if name != "grr" else "hr"
    with pytest.raises(InvalidReportError, match="given to oracle"):
        oracle.aggregate(Reports(other, {"value": [1]}))


def test_byte_columns_must_hold_bytes():
    oracle = registry.make("oue", epsilon=1.0, domain_size=8)
    with pytest.raises(InvalidReportError,
                       match=r"must hold bytes \(0..255\), got values in \[0, 256\]"):
        oracle.aggregate({"bits": np.array([[0], [256]])})


def test_wide_byte_columns_are_refused():
    oracle = registry.make("oue", epsilon=1.0, domain_size=8)
    with pytest.raises(InvalidReportError, match=r"shape \(n, 1\)"):
        oracle.aggregate({"bits": np.zeros((2, 2), dtype=np.uint8)})


# -- randomness ---------------------------------------------------------------------------


def test_client_defaults_to_the_secure_source():
    assert isinstance(randomness.as_source(None), randomness.SecureSource)
    assert randomness.as_source(None).secure
    assert not randomness.make_rng(1).secure
    oracle = registry.make("olh", epsilon=1.0, domain_size=100)
    a, b = oracle.perturb_one(3), oracle.perturb_one(3)
    assert a["seed"] != b["seed"]  # 2**-64 chance of a false failure


def test_an_integer_is_not_a_generator():
    with pytest.raises(TypeError, match="rng must be None"):
        registry.make("grr", epsilon=1.0, domain_size=4).perturb([1], rng=42)


# -- aggregation and merging --------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_merge_in_any_split_and_order_equals_pooling(name, data):
    oracle = registry.make(name, epsilon=1.3, domain_size=13)
    n = data.draw(st.integers(0, 60))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    reports = oracle.perturb(rng.integers(0, 13, n), rng=rng)
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=5)))
    bounds = [0, *cuts, n]
    parts = [reports[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    order = data.draw(st.permutations(range(len(parts))))
    merged = oracle.create_accumulator()
    for i in order:
        merged = merged.merge(oracle.aggregate(parts[i]))
    assert merged == oracle.aggregate(reports)
    assert merged.n == n


def test_merge_refuses_other_parameters():
    a = registry.make("grr", epsilon=1.0, domain_size=8).create_accumulator()
    b = registry.make("grr", epsilon=2.0, domain_size=8).create_accumulator()
    with pytest.raises(ValueError, match="cannot merge"):
        a.merge(b)
    with pytest.raises(TypeError, match="can only merge an Accumulator"):
        a.merge(np.zeros(8))


def test_merge_mutates_only_the_first():
    oracle = registry.make("grr", epsilon=1.0, domain_size=4)
    a = oracle.aggregate(oracle.perturb([1, 2], rng=np.random.default_rng(0)))
    b = oracle.aggregate(oracle.perturb([3], rng=np.random.default_rng(1)))
    b_counts = b.counts.copy()
    assert a.merge(b) is a
    np.testing.assert_array_equal(b.counts, b_counts)
    assert a.n == 3 and b.n == 1


@pytest.mark.parametrize("name", NAMES)
def test_empty_estimate_is_nan_not_an_error(name):
    oracle = registry.make(name, epsilon=1.0, domain_size=8)
    est = oracle.estimate(oracle.create_accumulator())
    assert est.n == 0 and np.isnan(est.frequencies).all() and math.isnan(est.sigma)


def test_onebit_empty_column_is_a_clear_error():
    oracle = registry.make("onebit", epsilon=1.0, domain_size=8)
    reports = oracle.perturb(np.arange(20) % 8, rng=np.random.default_rng(0),
                             columns=np.arange(20) % 15)  # column 15 left empty
    with pytest.raises(ValueError, match=r"each of the K = 16 columns \(user j -> column j mod "
                                         r"K\): 1 of them have none \(first: 15\) among n = 20"):
        oracle.estimate(oracle.aggregate(reports))


@pytest.mark.parametrize("d,g", [(10, 4), (64, 2), (100, 8), (2, 2), (37, 16)])
def test_olh_fast_counts_equal_the_naive_count(d, g):
    from ldpflow.core import hashing

    rng = np.random.default_rng(d * g)
    oracle = registry.make("olh", epsilon=1.0, domain_size=d, hash_range=g)
    n = 500
    seeds = rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
    buckets = rng.integers(0, g, n)  # arbitrary reports, not only perturbed ones
    acc = oracle.aggregate({"seed": seeds, "bucket": buckets})
    fast = oracle.support_counts(acc)
    naive = hashing.naive_support_counts(seeds, buckets, oracle.value_bits, g, np.arange(d))
    np.testing.assert_array_equal(fast, naive)


def test_hash_family_matches_the_python_reference():
    from ldpflow.core import hashing

    rng = np.random.default_rng(11)
    for value_bits, g in [(1, 2), (10, 4), (33, 64), (64, 2), (64, 1024)]:
        seeds = rng.integers(0, 2**64 - 1, 40, dtype=np.uint64, endpoint=True)
        values = rng.integers(0, 2**value_bits - 1, 40, dtype=np.uint64, endpoint=True)
        got = hashing.hash_values(seeds, values, value_bits, g)
        want = [reference.hash_value(int(s), int(v), value_bits, g)
                for s, v in zip(seeds, values, strict=True)]
        assert got.tolist() == want


def test_hr_counts_equal_membership_counts():
    oracle = registry.make("hr", epsilon=1.0, domain_size=21)
    K = oracle.order
    y = np.random.default_rng(2).integers(0, K, 300)
    acc = oracle.aggregate({"value": y})
    naive = [sum(reference.hadamard(v + 1, int(t)) == 1 for t in y) for v in range(21)]
    np.testing.assert_array_equal(oracle.support_counts(acc), naive)


def test_onebit_estimate_equals_the_explicit_matrix_formula():
    oracle = registry.make("onebit", epsilon=0.9, domain_size=5)
    K, e = oracle.order, math.exp(0.9)
    rng = np.random.default_rng(8)
    reports = oracle.perturb(rng.integers(0, 5, 400), rng=rng)
    est = oracle.estimate(oracle.aggregate(reports))
    H = np.array([[reference.hadamard(i, j) for j in range(K)] for i in range(K)])
    n_i = np.bincount(reports.column, minlength=K)
    s_i = np.bincount(reports.column, weights=reports.bit, minlength=K)
    p_b = (e + 1) / (e - 1) * (s_i / n_i - 1 / (e + 1))
    np.testing.assert_allclose(est.frequencies, (H @ (2 * p_b - 1) / K)[:5], rtol=1e-12, atol=1e-14)


# -- exact privacy ------------------------------------------------------------------------

SMALL = {"grr": 5, "oue": 4, "sue": 4, "olh": 6, "blh": 6, "hr": 6, "ss": 6, "onebit": 6,
         "cms": 6, "hcms": 6, "pgr": 7}  # pgr at d = 7: (q, t) = (2, 3), (3, 3), (7, 2)
#: Sketches small enough to enumerate: m = 4 buckets, k = 3 hash functions.
SMALL_SKETCH = {"hash_range": 4, "num_hashes": 3}


def small(name, epsilon):
    extra = SMALL_SKETCH if name in ("cms", "hcms") else {}
    return registry.make(name, epsilon=epsilon, domain_size=SMALL[name], **extra)


def worst_ratio(oracle, seeds=None):
    dists = [reference.output_distribution(oracle, v, seeds) for v in range(oracle.domain_size)]
    for dist in dists:
        assert math.isclose(sum(dist.values()), 1.0, rel_tol=1e-12)
    keys = dists[0].keys()
    return max(a[y] / b[y] for a in dists for b in dists for y in keys)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("epsilon", [0.3, math.log(2), 1.7])
def test_worst_case_likelihood_ratio_is_exactly_e_to_the_epsilon(name, epsilon):
    oracle = small(name, epsilon)
    seeds = reference.splitmix64(99, 32)
    ratio = worst_ratio(oracle, seeds)
    assert math.isclose(ratio, math.exp(epsilon), rel_tol=1e-12)  # attained
    assert not ratio < math.exp(epsilon) * (1 - 1e-9)  # and not only bounded


@pytest.mark.parametrize("name", ["grr", "oue", "sue", "hr", "ss", "onebit", "pgr"])
def test_sampled_reports_follow_the_exact_distribution(name):
    """Chi-square goodness of fit of 40k reports of one value against the spec's law."""
    eps = math.log(2)  # ss: omega = 2 of d = 6; pgr: q = 3, t = 3 (13 hyperplanes)
    oracle = registry.make(name, epsilon=eps, domain_size=SMALL[name])
    value, n = 2, 40_000
    rng = np.random.default_rng(20240611)
    reports = oracle.perturb(np.full(n, value), rng=rng)
    dist = reference.output_distribution(oracle, value)
    if name in ("oue", "sue", "ss"):
        rows = bitvectors.unpack(reports.bits, oracle.domain_size)
        if name == "ss":
            keys = [tuple(np.flatnonzero(r)) for r in rows]
        else:
            keys = [tuple(r) for r in rows]
    elif name == "onebit":
        keys = list(zip(reports.column.tolist(), reports.bit.tolist(), strict=True))
    else:
        keys = reports.value.tolist()
    outcomes = list(dist)
    index = {k: i for i, k in enumerate(outcomes)}
    observed = np.bincount([index[k] for k in keys], minlength=len(outcomes))
    expected = np.array([dist[k] for k in outcomes]) * n
    if name == "onebit":  # columns are assigned, not drawn: compare bits within columns
        expected = (expected / expected.reshape(-1, 2).sum(axis=1).repeat(2)
                    * observed.reshape(-1, 2).sum(axis=1).repeat(2))
    assert stats.chisquare(observed, expected).pvalue > 1e-4


@pytest.mark.parametrize("name", ["olh", "blh"])
def test_local_hashing_buckets_follow_randomized_response(name):
    oracle = registry.make(name, epsilon=1.2, domain_size=50, hash_range=8 if name == "olh" else 2)
    n, value = 40_000, 17
    reports = oracle.perturb(np.full(n, value), rng=np.random.default_rng(4))
    hashed = np.array([reference.hash_value(int(s), value, oracle.value_bits, oracle.hash_range)
                       for s in reports.seed[:2000]])
    np.testing.assert_array_equal(
        hashed, __import__("ldpflow").core.hashing.hash_values(
            reports.seed[:2000], np.full(2000, value), oracle.value_bits, oracle.hash_range))
    from ldpflow.core import hashing
    h = hashing.hash_values(reports.seed, np.full(n, value), oracle.value_bits, oracle.hash_range)
    shift = (reports.bucket - h) % oracle.hash_range
    g, e = oracle.hash_range, math.exp(1.2)
    expected = np.array([e] + [1.0] * (g - 1)) / (e + g - 1) * n
    assert stats.chisquare(np.bincount(shift, minlength=g), expected).pvalue > 1e-4
    # The seeds are uniform 64-bit words: each of the top 8 bits is fair.
    top = (reports.seed >> np.uint64(56)).astype(np.int64)
    assert stats.chisquare(np.bincount(top, minlength=256)).pvalue > 1e-4


# -- statistics ---------------------------------------------------------------------------


def bonferroni_z(alpha, m):
    return stats.norm.ppf(1 - alpha / (2 * m))


@pytest.mark.statistical
@pytest.mark.parametrize("name", NAMES)
def test_estimates_are_unbiased_within_k_sigma(name):
    d, n = 64, 2**17
    rng = np.random.default_rng(7)
    values = column_balanced(rng, n, d, order_of(d))
    truth = np.bincount(values, minlength=d) / n
    oracle = registry.make(name, epsilon=1.0, domain_size=d)
    est = oracle.estimate(oracle.aggregate(oracle.perturb(values, rng=rng)))
    sd = np.sqrt(oracle.variance(n, truth))
    z = bonferroni_z(1e-3, d)
    assert np.all(np.abs(est.frequencies - truth) <= z * sd), (
        np.max(np.abs(est.frequencies - truth) / sd))
    if name == "onebit":  # sigma: variance at f = 0 with S2 estimated (equal columns here)
        e = math.exp(1.0)
        s2 = oracle.estimate_sum_of_squares(est.frequencies, 4 * e / ((e - 1) ** 2 * n),
                                            1 / (n - 1))
        assert math.isclose(est.sigma**2, oracle.variance(n, sum_of_squares=s2), rel_tol=1e-9)
    elif name in ("cms", "hcms"):  # sigma adds the hash collisions' term, S2 estimated
        s2 = float(np.sum(np.clip(est.frequencies, 0, 1) ** 2))
        assert math.isclose(est.sigma**2, oracle.variance(n) + oracle.collision_variance(s2),
                            rel_tol=1e-9)
    else:
        assert math.isclose(est.sigma, math.sqrt(oracle.variance(n)), rel_tol=1e-9)


@pytest.mark.statistical
def test_the_papers_olh_p_would_be_caught():
    """The paper text's p = (e-1)/(e+g-1) biases the estimate far beyond k sigma."""
    d, n = 64, 2**17
    rng = np.random.default_rng(7)
    values = zipf_values(rng, n, d)
    truth = np.bincount(values, minlength=d) / n
    oracle = registry.make("olh", epsilon=1.0, domain_size=d)
    est = oracle.estimate(oracle.aggregate(oracle.perturb(values, rng=rng)))
    g, e = oracle.hash_range, math.exp(1.0)
    wrong_p = (e - 1) / (e + g - 1)
    wrong = (est.support_counts / n - oracle.q) / (wrong_p - oracle.q)
    sd = np.sqrt(oracle.variance(n, truth))
    assert np.any(np.abs(wrong - truth) > bonferroni_z(1e-3, d) * sd)


@pytest.mark.statistical
@pytest.mark.parametrize("name", NAMES)
def test_empirical_variance_matches_the_formula(name):
    """Over R runs, (R-1) s^2 / Var follows chi-square(R-1) (estimates are near normal)."""
    d, n, R = 8, 4096, 300
    rng = np.random.default_rng(31)
    values = zipf_values(rng, n, d)
    truth = np.bincount(values, minlength=d) / n
    oracle = registry.make(name, epsilon=1.0, domain_size=d)
    # Each run in a new order: users' columns (one-bit) independent of their values.
    runs = np.array([oracle.estimate(oracle.aggregate(oracle.perturb(rng.permutation(values),
                                                                     rng=rng))).frequencies
                     for _ in range(R)])
    ratio = runs.var(axis=0, ddof=1) / oracle.variance(n, truth)
    alpha = 1e-4 / d
    lo = stats.chi2.ppf(alpha / 2, R - 1) / (R - 1)
    hi = stats.chi2.ppf(1 - alpha / 2, R - 1) / (R - 1)
    assert np.all((ratio > lo) & (ratio < hi)), ratio
