"""Tests of ``ldpflow.core.postprocess`` against ``docs/spec/consistency.md``.

Tolerances: floating-point checks use a rounding bound (a few ulps per term summed);
comparisons with a generic solver use the solver's stopping tolerance through the strong
convexity of the objective; statistical checks use standard errors from the variance
formulas, never a guessed delta.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.optimize
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ldpflow.core import postprocess as pp
from ldpflow.core.oracles import registry
from ldpflow.core.oracles.base import Estimate
from ldpflow.core.postprocess import METHODS, postprocess

EPS = np.finfo(np.float64).eps

NON_NEGATIVE = {
    "base-pos", "base-cut", "norm-mul", "norm-sub", "norm-cut", "cls", "mle-apx", "power",
    "power-ns", "ibu",
}
SUMS_TO_ONE = {"norm", "norm-mul", "norm-sub", "cls", "mle-apx", "power-ns", "ibu"}
IDEMPOTENT = set(METHODS) - {"power", "power-ns"}  # a posterior mean is not a projection


# -- helpers ---------------------------------------------------------------------------------
def pure_estimate(freqs, *, n: int = 10_000, p: float = 0.5, q: float = 0.25, oracle="olh"):
    """An Estimate of a pure protocol with the exact variance terms of docs/spec/oracles.md."""
    c = q * (1 - q) / (n * (p - q) ** 2)
    s = (1 - p - q) / (n * (p - q))
    return Estimate(np.asarray(freqs, dtype=float), n, math.sqrt(c), p, q, c, s, oracle, {}, None)


def grr_pq(epsilon: float, d: int) -> tuple[float, float]:
    e = math.exp(epsilon)
    return e / (e + d - 1), 1 / (e + d - 1)


def olh_pq(epsilon: float) -> tuple[float, float]:
    e = math.exp(epsilon)
    g = 4 if epsilon >= 1 else 2
    return e / (e + g - 1), 1 / g


def rounding(x) -> float:
    """A bound on the rounding error of summing ``x``: a few ulps per term."""
    x = np.asarray(x, dtype=float)
    return 4 * x.size * EPS * max(1.0, float(np.sum(np.abs(x))))


def zipf(d: int, exponent: float = 1.1) -> np.ndarray:
    f = np.arange(1, d + 1, dtype=float) ** -exponent
    return f / f.sum()


def noisy(truth, estimate_like, rng):
    """Raw estimates under the Gaussian model: f + N(0, var_const + var_slope * f)."""
    var = estimate_like.var_const + estimate_like.var_slope * truth
    return truth + rng.normal(0.0, np.sqrt(var))


def run(method: str, freqs, *, n: int = 10_000, sigma: float = 0.02, slope: float = 1e-5, **kw):
    """Call a method on a plain vector with the statistics it needs."""
    stats = {
        "base-cut": {"sigma": sigma},
        "mle-apx": {"var_const": sigma**2, "var_slope": slope},
        "power": {"n": n, "sigma": sigma},
        "power-ns": {"n": n, "sigma": sigma},
        "ibu": {"p": 0.5, "q": 0.25},
    }.get(method, {})
    return postprocess(freqs, method, **stats, **kw)


vectors = arrays(
    np.float64,
    st.integers(1, 40),
    elements=st.floats(-0.5, 1.0, allow_nan=False, allow_infinity=False, width=64),
)


# -- API -------------------------------------------------------------------------------------
def test_methods_are_the_spec_names():
    assert METHODS == (
        "base", "base-pos", "post-pos", "base-cut", "norm", "norm-mul", "norm-sub",
        "norm-cut", "cls", "mle-apx", "power", "power-ns", "ibu",
    )


@pytest.mark.parametrize("module", ["ldpflow.core.postprocess", "ldpflow.core.queries"])
def test_all_names_exist(module):
    mod = __import__(module, fromlist=["__all__"])
    for name in mod.__all__:
        assert hasattr(mod, name), name


@pytest.mark.parametrize("method", METHODS)
def test_estimate_and_plain_vector_agree(method):
    rng = np.random.default_rng(11)
    est = pure_estimate(zipf(30) + rng.normal(0, 0.02, 30))
    stats = {
        "base-cut": {"sigma": est.sigma},
        "mle-apx": {"var_const": est.var_const, "var_slope": est.var_slope},
        "power": {"n": est.n, "sigma": est.sigma},
        "power-ns": {"n": est.n, "sigma": est.sigma},
        "ibu": {"p": est.p, "q": est.q},
    }.get(method, {})
    np.testing.assert_array_equal(
        postprocess(est, method), postprocess(est.frequencies, method, **stats)
    )


@pytest.mark.parametrize("method", METHODS)
def test_input_is_not_modified_and_output_is_new(method):
    f = np.array([0.6, -0.1, 0.3, 0.05, 0.4])
    before = f.copy()
    out = run(method, f)
    np.testing.assert_array_equal(f, before)
    assert out is not f and out.dtype == np.float64 and out.shape == f.shape


def test_unknown_method_names_the_choices():
    with pytest.raises(ValueError, match="method must be one of .*norm-sub.*got 'normsub'"):
        postprocess([0.5, 0.5], "normsub")
    with pytest.raises(TypeError, match="method must be a str"):
        postprocess([0.5, 0.5], 3)


def test_parameter_errors_name_the_parameter():
    est = pure_estimate([0.5, 0.5])
    with pytest.raises(TypeError, match="does not accept parameter.*alpha"):
        postprocess(est, "norm-sub", alpha=2)
    with pytest.raises(TypeError, match="sigma .* is taken from the Estimate"):
        postprocess(est, "base-cut", sigma=0.1)
    with pytest.raises(TypeError, match="needs the keyword.*sigma"):
        postprocess([0.5, 0.5], "base-cut")
    with pytest.raises(TypeError, match="needs the keyword.*var_const, var_slope"):
        postprocess([0.5, 0.5], "mle-apx")
    with pytest.raises(ValueError, match="alpha must be a finite number in \\(0.0, inf\\), got 0"):
        postprocess(est, "base-cut", alpha=0)
    with pytest.raises(ValueError, match="sigma must be a finite number .* got -1"):
        postprocess([0.5, 0.5], "base-cut", sigma=-1)
    with pytest.raises(ValueError, match="var_const \\+ var_slope .* must be > 0"):
        postprocess([0.5, 0.5], "mle-apx", var_const=1.0, var_slope=-1.0)
    with pytest.raises(ValueError, match="var_const must be a finite number in \\(0.0, inf\\)"):
        postprocess([0.5, 0.5], "mle-apx", var_const=0.0, var_slope=0.0)
    with pytest.raises(TypeError, match="n must be an integer"):
        postprocess([0.5, 0.5], "power", n=10.5, sigma=0.1)


@pytest.mark.parametrize("method", METHODS)
def test_estimate_of_zero_reports_raises(method):
    # What an oracle returns for an empty accumulator: NaN everywhere, n == 0.
    nan = float("nan")
    est = Estimate(np.full(8, nan), 0, nan, 0.5, 0.25, nan, nan, "olh", {}, None)
    with pytest.raises(ValueError, match="estimate.n must be >= 1 .* got 0"):
        postprocess(est, method)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("bad", [[0.5, float("nan")], [float("inf"), 0.1], [], [[0.5, 0.5]]])
def test_bad_vectors_raise(method, bad):
    with pytest.raises(ValueError, match="frequencies must"):
        run(method, bad)


@pytest.mark.parametrize("oracle", sorted(registry.ORACLES))
def test_every_method_on_every_oracle_keeps_its_promises(oracle):
    rng = np.random.default_rng(17)
    d = 100
    values = rng.choice(d, size=20_000, p=zipf(d))
    fo = registry.make(oracle, epsilon=1.0, domain_size=d)
    est = fo.estimate(fo.aggregate(fo.perturb(values, rng=rng)))
    for method in METHODS:
        if method == "ibu" and est.p is None:  # one-bit, cms and hcms: no support channel
            with pytest.raises(ValueError, match="method 'ibu' needs p\\* and q\\*"):
                postprocess(est, method)
            continue
        out = postprocess(est, method)
        assert out.shape == (d,) and np.all(np.isfinite(out)), method
        if method in NON_NEGATIVE:
            assert np.all(out >= 0), method
        if method in SUMS_TO_ONE:
            assert abs(math.fsum(out) - 1) <= rounding(est.frequencies) + rounding(out), method


# -- the promised properties, on any input ----------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(vectors)
def test_non_negative_where_promised(f):
    for method in NON_NEGATIVE:
        assert np.all(run(method, f) >= 0.0), method


@settings(max_examples=60, deadline=None)
@given(vectors)
def test_sums_to_one_where_promised(f):
    for method in SUMS_TO_ONE:
        out = run(method, f)
        assert abs(math.fsum(out) - 1.0) <= rounding(f) + rounding(out), method


@settings(max_examples=60, deadline=None)
@given(vectors)
def test_norm_cut_sums_to_at_most_one_and_keeps_or_cuts(f):
    out = pp.norm_cut(f)
    assert math.fsum(out) <= 1.0 + rounding(out)
    assert np.all((out == f) | (out == 0.0))


@settings(max_examples=60, deadline=None)
@given(vectors)
def test_idempotent_where_it_holds(f):
    for method in IDEMPOTENT:
        once = run(method, f)
        twice = run(method, once)
        np.testing.assert_allclose(twice, once, rtol=0, atol=rounding(f), err_msg=method)


@settings(max_examples=60, deadline=None)
@given(vectors)
def test_order_is_preserved(f):
    for method in set(METHODS) - {"power", "power-ns"}:
        out = run(method, f)
        order = np.argsort(f, kind="stable")
        assert np.all(np.diff(out[order]) >= 0.0), method  # f_a <= f_b  =>  f'_a <= f'_b
        _, first = np.unique(f, return_inverse=True)
        for group in np.unique(first):  # equal estimates get equal outputs
            assert np.ptp(out[first == group]) == 0.0, method


@settings(max_examples=30, deadline=None)
@given(vectors, st.floats(0.002, 0.2))
def test_power_order_is_preserved_up_to_its_discretisation(f, sigma):
    n = 5000
    out = pp.power(f, n=n, sigma=sigma)
    s = n * sigma
    h = max(1, math.ceil(s / 8))
    order = np.argsort(f, kind="stable")
    # The discretisation error of a posterior mean is below h^2/s counts (see power's Notes).
    assert np.all(np.diff(out[order]) >= -2 * h * h / s / n)
    assert np.all(out >= 1.0 / n) and np.all(out <= 1.0)


@settings(max_examples=60, deadline=None)
@given(vectors, st.data())
def test_projections_never_move_away_from_a_consistent_truth(f, data):
    # Norm, Base-Pos and Norm-Sub are Euclidean projections onto convex sets (hyperplane,
    # orthant, simplex) that contain every true distribution, hence non-expansive towards it.
    weights = data.draw(arrays(np.float64, f.size, elements=st.floats(0.0, 1.0)))
    truth = weights / weights.sum() if weights.sum() > 0 else np.full(f.size, 1 / f.size)
    before = np.linalg.norm(f - truth)
    for method in ("norm", "base-pos", "norm-sub", "cls"):
        after = np.linalg.norm(run(method, f) - truth)
        assert after <= before + rounding(f), method


# -- CLS against a generic constrained solver ---------------------------------------------------
def _solve_simplex_qp(target, weights):
    """argmin sum (x - target)^2 / weights  s.t. x >= 0, sum x = 1, by scipy's SLSQP."""
    d = target.size
    result = scipy.optimize.minimize(
        lambda x: np.sum((x - target) ** 2 / weights),
        np.full(d, 1 / d),
        jac=lambda x: 2 * (x - target) / weights,
        method="SLSQP",
        bounds=[(0, None)] * d,
        constraints=[{"type": "eq", "fun": lambda x: x.sum() - 1, "jac": lambda x: np.ones(d)}],
        options={"ftol": 1e-14, "maxiter": 1000},
    )
    assert result.success, result.message
    return result.x


@pytest.mark.parametrize("seed", range(8))
def test_cls_matches_a_generic_solver(seed):
    rng = np.random.default_rng(seed)
    d = int(rng.integers(2, 40))
    f = rng.dirichlet(np.full(d, 0.5)) + rng.normal(0, rng.choice([0.01, 0.1, 0.5]), d)
    ours = pp.cls(f)
    theirs = _solve_simplex_qp(f, np.ones(d))
    objective = lambda x: np.sum((x - f) ** 2)  # noqa: E731
    # Ours is feasible and no worse than the solver's point; the objective is 2-strongly
    # convex, so ||ours - theirs||^2 <= F(theirs) - F(ours) + the solver's tolerance.
    assert objective(ours) <= objective(theirs) + 1e-12
    assert np.sum((ours - theirs) ** 2) <= max(objective(theirs) - objective(ours), 0) + 1e-12
    np.testing.assert_array_equal(ours, pp.norm_sub(f))


# -- MLE-Apx ----------------------------------------------------------------------------------
def _mle_apx_spec_iteration(f, n, p, q):
    """The spec's procedure verbatim, in its A, B, x notation."""
    a, b, pq = q * (1 - q), (p - q) * (1 - p - q), p - q
    support = np.ones(f.size, dtype=bool)
    while True:
        x = pq * (1 - f[support].sum()) / (support.sum() * a + b)
        out = np.where(support, (a * x + f * pq) / (pq - b * x), 0.0)
        negative = support & (out < 0)
        if not negative.any():
            return out
        support &= ~negative


def _realistic_cases():
    """(truth, estimate) pairs of GRR and OLH on Zipf data, with their exact noise model."""
    rng = np.random.default_rng(2020)
    for oracle, (epsilon, d, n) in [
        ("grr", (0.5, 20, 10_000)), ("grr", (2.0, 50, 10_000)), ("grr", (4.0, 200, 100_000)),
        ("olh", (0.5, 100, 10_000)), ("olh", (1.0, 300, 100_000)), ("olh", (3.0, 50, 5_000)),
    ]:
        p, q = grr_pq(epsilon, d) if oracle == "grr" else olh_pq(epsilon)
        truth = zipf(d)
        est = pure_estimate(np.zeros(d), n=n, p=p, q=q, oracle=oracle)
        est = pure_estimate(noisy(truth, est, rng), n=n, p=p, q=q, oracle=oracle)
        yield truth, est


@pytest.mark.parametrize("case", range(6))
def test_mle_apx_equals_the_spec_iteration(case):
    _, est = list(_realistic_cases())[case]
    ours = postprocess(est, "mle-apx")
    spec = _mle_apx_spec_iteration(est.frequencies, est.n, est.p, est.q)
    np.testing.assert_allclose(ours, spec, rtol=0, atol=1e3 * EPS)
    assert abs(math.fsum(ours) - 1) <= rounding(ours)


@pytest.mark.parametrize("case", range(6))
def test_mle_apx_is_stationary_for_its_weighted_objective(case):
    # The stated objective with the weights held at the solution: a generic solver of the
    # weighted least squares must return the same point (a fixed point of the reweighting).
    _, est = list(_realistic_cases())[case]
    ours = postprocess(est, "mle-apx")
    weights = (est.var_const + est.var_slope * ours) / est.var_const  # relative, ~1
    theirs = _solve_simplex_qp(est.frequencies, weights)
    # Strong convexity modulus 2/max(weights): ||d||^2 <= max(w) * (gap + solver tolerance).
    gap = max(
        np.sum((theirs - est.frequencies) ** 2 / weights)
        - np.sum((ours - est.frequencies) ** 2 / weights),
        0.0,
    )
    assert np.sum((ours - theirs) ** 2) <= weights.max() * (gap + 1e-12)


def test_mle_apx_matches_iterated_reweighting_with_a_generic_solver():
    # Independent of our answer: start from unit weights, solve, reweight at the solution,
    # repeat until the weights settle, then compare.
    truth, est = list(_realistic_cases())[2]  # GRR at eps = 4: the largest var_slope / var_const
    f = est.frequencies[:40]
    f = f + (1 - f.sum()) / f.size
    weights = np.ones(f.size)
    for _ in range(30):
        x = _solve_simplex_qp(f, weights)
        new = (est.var_const + est.var_slope * x) / est.var_const
        if np.max(np.abs(new - weights)) < 1e-10:
            break
        weights = new
    ours = pp.mle_apx(f, var_const=est.var_const, var_slope=est.var_slope)
    assert np.sum((ours - x) ** 2) <= weights.max() * 1e-11


def test_mle_apx_tends_to_norm_sub_as_b_vanishes():
    # On a fixed support D1 (|D1| = m), with lam = (1 - S)/(m c + s) and Norm-Sub's g:
    #   mle(s) - g = lam s (g - 1/m) / (1 - lam s)   on D1,
    # which is linear in s as s -> 0 (the paper: MLE-Apx is Norm-Sub stretched about 1/m).
    rng = np.random.default_rng(7)
    f = zipf(100) + rng.normal(0, 0.01, 100)
    c = 1e-4
    g = pp.norm_sub(f)
    support = g > 0
    m = support.sum()
    previous = math.inf
    for s in [c * 10.0**-k for k in range(1, 9)]:
        out = pp.mle_apx(f, var_const=c, var_slope=s)
        assert np.array_equal(out > 0, support)
        lam = (1 - f[support].sum()) / (m * c + s)
        expected = np.where(support, g + lam * s * (g - 1 / m) / (1 - lam * s), 0.0)
        np.testing.assert_allclose(out, expected, rtol=0, atol=100 * EPS)
        distance = np.max(np.abs(out - g))
        assert distance <= previous / 9.9  # linear in s: a factor 10 per step (up to rounding)
        previous = distance
    np.testing.assert_allclose(pp.mle_apx(f, var_const=c, var_slope=0.0), g, atol=10 * EPS)


def test_mle_apx_of_a_non_pure_estimate_is_norm_sub():
    # The one-bit scheme: p, q are None and var_slope is 0, so the weights are equal.
    rng = np.random.default_rng(3)
    f = zipf(64) + rng.normal(0, 0.02, 64)
    est = Estimate(f, 5000, 0.02, None, None, 0.02**2, 0.0, "onebit", {}, None)
    np.testing.assert_allclose(postprocess(est, "mle-apx"), pp.norm_sub(f), atol=10 * EPS)


def test_mle_apx_with_negative_slope_is_consistent():
    # HR: p* = e/(e+1), q* = 1/2, so 1 - p* - q* < 0.
    rng = np.random.default_rng(4)
    e = math.exp(3.0)
    est = pure_estimate(np.zeros(64), n=2000, p=e / (e + 1), q=0.5, oracle="hr")
    assert est.var_slope < 0
    f = noisy(zipf(64), est, rng)
    out = pp.mle_apx(f, var_const=est.var_const, var_slope=est.var_slope)
    assert np.all(out >= 0) and abs(math.fsum(out) - 1) <= rounding(out)
    np.testing.assert_allclose(out, _mle_apx_spec_iteration(f, 2000, est.p, est.q), atol=1e3 * EPS)


def test_mle_apx_far_below_the_model_falls_back_to_norm_sub():
    # var_const + var_slope * max(f~) <= 0: no order-keeping stationary point exists.
    f = np.array([-2.0, -2.5, -3.0])
    np.testing.assert_array_equal(pp.mle_apx(f, var_const=1.0, var_slope=1.0), pp.norm_sub(f))


# -- Base-Cut ---------------------------------------------------------------------------------
@pytest.mark.parametrize("d", [5, 10, 100, 1000, 100_000, 10**9])
@pytest.mark.parametrize("alpha", [0.05, 1.0, 2.0, 5.0])
def test_base_cut_threshold_is_the_normal_quantile(d, alpha):
    sigma = 0.0123
    expected = scipy.stats.norm.isf(alpha / d) * sigma if alpha / d < 0.5 else 0.0
    assert pp.base_cut_threshold(d, sigma, alpha) == pytest.approx(expected, rel=1e-13, abs=0)


def test_base_cut_keeps_exactly_the_values_at_or_above_the_threshold():
    sigma = 0.01
    t = pp.base_cut_threshold(1000, sigma, 2.0)
    assert t == pytest.approx(scipy.stats.norm.ppf(1 - 2 / 1000) * sigma, rel=1e-12)
    f = np.full(1000, -0.001)
    f[:4] = [t, np.nextafter(t, 0), 0.5, t + 1e-3]
    out = pp.base_cut(f, sigma=sigma)
    np.testing.assert_array_equal(out[:4], [t, 0.0, 0.5, t + 1e-3])
    assert np.all(out[4:] == 0)


@pytest.mark.parametrize(
    "d, alpha", [(4, 2.0), (3, 2.0), (2, 2.0), (1, 2.0), (10, 10.0), (10, 50.0)]
)
def test_base_cut_with_alpha_at_least_half_the_domain_is_base_pos(d, alpha):
    # alpha/d >= 1/2 gives Phi^-1(1 - alpha/d) <= 0 (undefined for alpha >= d): T = 0.
    f = np.linspace(-0.3, 0.6, d)
    assert pp.base_cut_threshold(d, 0.1, alpha) == 0.0
    np.testing.assert_array_equal(pp.base_cut(f, sigma=0.1, alpha=alpha), pp.base_pos(f))


# -- Norm-Cut, Norm-Mul, edge cases ------------------------------------------------------------
def test_norm_cut_below_one_is_base_pos():
    f = np.array([0.3, -0.2, 0.4, 0.1])
    np.testing.assert_array_equal(pp.norm_cut(f), [0.3, 0.0, 0.4, 0.1])


def test_norm_cut_takes_the_smallest_threshold_with_sum_at_most_one():
    f = np.array([0.1, 0.5, -0.3, 0.25, 0.125, 0.25])  # dyadic: sums are exact
    # Kept from the top: 0.5, 0.25, 0.25 (sum 1.0); adding 0.125 would exceed 1.
    np.testing.assert_array_equal(pp.norm_cut(f), [0.0, 0.5, 0.0, 0.25, 0.0, 0.25])


def test_norm_cut_ties_at_the_threshold_go_together():
    # 0.5 + 0.375 + 0.375 > 1: the tied pair cannot be split, so both are cut.
    f = np.array([0.375, 0.5, 0.375, 0.0625])
    np.testing.assert_array_equal(pp.norm_cut(f), [0.0, 0.5, 0.0, 0.0])
    # A tie group that fits is kept whole.
    f = np.array([0.25, 0.5, 0.25, 0.125])
    np.testing.assert_array_equal(pp.norm_cut(f), [0.25, 0.5, 0.25, 0.0])


def test_norm_cut_single_value_above_one_cuts_everything():
    np.testing.assert_array_equal(pp.norm_cut([1.25, -0.25]), [0.0, 0.0])


ALL_NON_POSITIVE = np.array([-0.1, -0.2, 0.0, -0.05])


@pytest.mark.parametrize(
    "method, expected",
    [
        ("base", ALL_NON_POSITIVE),
        ("base-pos", [0.0, 0.0, 0.0, 0.0]),
        ("post-pos", ALL_NON_POSITIVE),
        ("base-cut", [0.0, 0.0, 0.0, 0.0]),
        ("norm", ALL_NON_POSITIVE + (1 + 0.35) / 4),
        ("norm-mul", [0.25, 0.25, 0.25, 0.25]),  # no gamma exists: uniform
        ("norm-sub", [0.2375, 0.1375, 0.3375, 0.2875]),
        ("norm-cut", [0.0, 0.0, 0.0, 0.0]),
        ("cls", [0.2375, 0.1375, 0.3375, 0.2875]),
    ],
)
def test_all_estimates_non_positive(method, expected):
    np.testing.assert_allclose(run(method, ALL_NON_POSITIVE), expected, rtol=0, atol=1e-15)


def test_all_estimates_non_positive_mle_apx_and_power():
    out = run("mle-apx", ALL_NON_POSITIVE, sigma=0.1, slope=1e-3)
    assert np.all(out > 0) and abs(out.sum() - 1) <= rounding(out)
    n = 1000
    out = run("power", ALL_NON_POSITIVE, n=n, sigma=0.05)
    assert np.all(out >= 1 / n) and np.all(out < 0.05)  # a few counts, within one sigma


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("value", [-0.4, 0.0, 0.3, 1.0, 1.7])
def test_domain_of_one_value(method, value):
    out = run(method, [value], n=1000, sigma=0.05)
    assert out.shape == (1,)
    if method in SUMS_TO_ONE:
        assert out[0] == pytest.approx(1.0, abs=4 * EPS)
    elif method == "power":
        assert 1 / 1000 <= out[0] <= 1.0
    elif method == "norm-cut":
        assert out[0] == (max(value, 0.0) if value <= 1 else 0.0)
    elif method in ("base", "post-pos"):
        assert out[0] == value
    else:  # base-pos, and base-cut whose threshold is 0 at d = 1
        assert out[0] == max(value, 0.0)


def test_norm_mul_scales_the_positive_part():
    f = np.array([0.6, -0.2, 0.2, 0.0])
    np.testing.assert_allclose(pp.norm_mul(f), [0.75, 0.0, 0.25, 0.0], atol=1e-15)


def test_norm_shifts_uniformly_and_does_nothing_to_a_vector_summing_to_one():
    f = np.array([0.7, -0.1, 0.6])
    np.testing.assert_allclose(pp.norm(f), f - 0.2 / 3, atol=1e-15)
    g = np.array([0.5, -0.25, 0.75])
    np.testing.assert_array_equal(pp.norm(g), g)


def test_norm_sub_example_from_the_definition():
    f = np.array([0.5, 0.4, 0.3, -0.1])  # support {0, 1, 2}: delta = (1 - 1.2) / 3
    np.testing.assert_allclose(pp.norm_sub(f), [0.5 - 0.2 / 3, 0.4 - 0.2 / 3, 0.3 - 0.2 / 3, 0.0])


# -- Power ------------------------------------------------------------------------------------
def _power_brute_force(f, n, sigma):
    """The consistency paper's eq. 12 over every count x = 1..n (no window, no cells)."""
    y, s = n * np.asarray(f), n * sigma
    alpha = pp.fit_power_law_exponent(float(y.mean()), n)
    x = np.arange(1, n + 1, dtype=float)
    log_prior = -alpha * np.log(x)
    out = np.empty(y.size)
    for i, yv in enumerate(y):
        log_w = log_prior - 0.5 * ((yv - x) / s) ** 2
        w = np.exp(log_w - log_w.max())
        out[i] = (w * x).sum() / w.sum()
    return out / n


def _power_inputs(n, sigma, seed):
    rng = np.random.default_rng(seed)
    f = zipf(40) + rng.normal(0, sigma, 40)
    f[:4] = [-0.5, 1.3, -3 * sigma, 1 + 2 * sigma]  # far below, beyond n, near both ends
    return f


@pytest.mark.parametrize("n, sigma", [(2000, 0.002), (500, 0.01), (60, 0.1)])
def test_power_with_unit_cells_equals_the_exact_sum(n, sigma):
    # n * sigma <= cells_per_sigma: every cell is one integer; only the 8-sigma window differs.
    f = _power_inputs(n, sigma, seed=n)
    ours = pp.power(f, n=n, sigma=sigma)
    np.testing.assert_allclose(ours, _power_brute_force(f, n, sigma), rtol=1e-10)


@pytest.mark.parametrize("n, sigma", [(2000, 0.02), (20_000, 0.01), (20_000, 0.0006)])
def test_power_with_wide_cells_is_within_its_discretisation_bound(n, sigma):
    f = _power_inputs(n, sigma, seed=n)
    ours = pp.power(f, n=n, sigma=sigma)
    s = n * sigma
    h = math.ceil(s / 8)
    exact = _power_brute_force(f, n, sigma)
    assert np.max(np.abs(ours - exact)) * n <= h * h / s  # the bound stated in the docstring


def _prior_mean_exact(n, alpha):
    x = np.arange(1, n + 1, dtype=float)
    return math.fsum(x ** (1 - alpha)) / math.fsum(x**-alpha)


@pytest.mark.parametrize("n", [50, 3000, 100_000])
@pytest.mark.parametrize("fraction", [1e-4, 0.01, 0.1, 0.45])
def test_power_law_fit_solves_the_mean_equation(n, fraction):
    target = max(1.2, fraction * n)
    alpha = pp.fit_power_law_exponent(target, n)
    root = scipy.optimize.brentq(
        lambda a: _prior_mean_exact(n, a) - target, 0.0, 50.0, xtol=1e-13, rtol=1e-14
    )
    assert alpha == pytest.approx(root, abs=1e-9)


def test_power_law_fit_conventions():
    assert pp.fit_power_law_exponent(0.7, 1000) == 1.01  # mean below one count
    assert pp.fit_power_law_exponent(-5.0, 1000) == 1.01
    assert pp.fit_power_law_exponent(600.0, 1000) == 0.0  # above (n + 1) / 2: uniform prior
    assert pp.fit_power_law_exponent(1 + 1e-17, 1000) == 50.0


def test_power_on_zipf_keeps_the_top_and_raises_the_small():
    # The consistency paper's Figure 2: Power changes the top estimates little and raises the
    # small ones towards the prior. OLH at eps = 1, n = 10^6, d = 1000.
    rng = np.random.default_rng(1000)
    p, q = olh_pq(1.0)
    n, d = 1_000_000, 1000
    truth = zipf(d)
    est = pure_estimate(np.zeros(d), n=n, p=p, q=q)
    est = pure_estimate(noisy(truth, est, rng), n=n, p=p, q=q)
    out = postprocess(est, "power")
    alpha = pp.fit_power_law_exponent(float(np.mean(n * est.frequencies)), n)
    y, s = n * est.frequencies, n * est.sigma
    top = y >= 10 * s
    assert top.sum() >= 5
    # Laplace's method: the posterior mean is y - alpha s^2 / y (1 + O((s/y)^2)): at >= 10
    # sigma the relative correction is at most alpha (alpha + 1) / 100 < 5%.
    shift = (y - n * out)[top]
    np.testing.assert_allclose(shift, alpha * s**2 / y[top], rtol=0.05)
    small = est.frequencies <= 0
    assert np.all(out[small] > est.frequencies[small]) and np.all(out[small] >= 1 / n)
    # Raised towards the prior, but not beyond the noise level.
    assert np.all(out[small] * n < s)


def test_power_ns_is_norm_sub_of_power():
    rng = np.random.default_rng(5)
    f = zipf(100) + rng.normal(0, 0.01, 100)
    np.testing.assert_array_equal(
        pp.power_ns(f, n=10_000, sigma=0.01), pp.norm_sub(pp.power(f, n=10_000, sigma=0.01))
    )


def test_power_is_deterministic_and_chunking_invariant():
    rng = np.random.default_rng(6)
    f = zipf(3000) + rng.normal(0, 0.003, 3000)  # enough rows for several chunks
    first = pp.power(f, n=10**6, sigma=0.003)
    np.testing.assert_array_equal(first, pp.power(f, n=10**6, sigma=0.003))
    np.testing.assert_array_equal(first[:7], pp.power(f, n=10**6, sigma=0.003)[:7])


# -- statistical: bias and variance claims of the paper --------------------------------------
@pytest.mark.statistical
def test_norm_is_unbiased_with_the_predicted_variance():
    rng = np.random.default_rng(20200223)
    d, runs = 50, 4000
    truth = zipf(d)
    est = pure_estimate(np.zeros(d), n=5000, p=0.6, q=0.25)
    var = est.var_const + est.var_slope * truth
    draws = truth + rng.normal(0, np.sqrt(var), (runs, d))
    normed = np.array([pp.norm(row) for row in draws])
    # Norm_v = f~_v - mean(f~) + 1/d: Var = Var_v (1 - 2/d) + sum(Var) / d^2.
    predicted = var * (1 - 2 / d) + var.sum() / d**2
    standard_error = np.sqrt(predicted / runs)
    assert np.all(np.abs(normed.mean(axis=0) - truth) <= 4.5 * standard_error)
    # The sample variance of `runs` normal draws has relative standard error sqrt(2/(runs-1)).
    relative_error = math.sqrt(2 / (runs - 1))
    np.testing.assert_allclose(normed.var(axis=0, ddof=1), predicted, rtol=4.5 * relative_error)
    assert np.all(predicted <= var)  # Norm reduces variance (slightly)


@pytest.mark.statistical
def test_base_pos_bias_at_zero_frequency_is_sigma_over_root_two_pi():
    rng = np.random.default_rng(99)
    sigma, cells = 0.01, 400_000
    values = pp.base_pos(rng.normal(0, sigma, cells))  # zero-frequency values of many runs
    mean = sigma / math.sqrt(2 * math.pi)  # E[max(N(0, s^2), 0)]
    variance = sigma**2 / 2 - mean**2
    assert abs(values.mean() - mean) <= 4 * math.sqrt(variance / cells)


@pytest.mark.statistical
def test_base_cut_admits_alpha_false_positives_on_average():
    rng = np.random.default_rng(123)
    d, zeros, runs, sigma, alpha = 1000, 990, 2000, 0.01, 2.0
    truth = np.zeros(d)
    truth[: d - zeros] = 1 / (d - zeros)
    hits = np.array(
        [
            np.count_nonzero(pp.base_cut(truth + rng.normal(0, sigma, d), sigma=sigma)[d - zeros :])
            for _ in range(runs)
        ]
    )
    tail = alpha / d
    assert abs(hits.mean() - zeros * tail) <= 4 * math.sqrt(zeros * tail * (1 - tail) / runs)


# -- IBU ---------------------------------------------------------------------------------------
def grr_counts_estimate(d: int, epsilon: float, n: int, seed: int, exponent: float = 1.1):
    """A GRR estimate of n Zipf values and its support counts (the reports' histogram)."""
    rng = np.random.default_rng(seed)
    oracle = registry.make("grr", epsilon=epsilon, domain_size=d)
    acc = oracle.aggregate(oracle.perturb(rng.choice(d, size=n, p=zipf(d, exponent)), rng=rng))
    return oracle.estimate(acc), acc.counts.astype(float)


def grr_log_likelihood(f, counts, p, q):
    """The multinomial log-likelihood of GRR's report histogram, up to a constant."""
    return float(np.sum(counts * np.log(q + (p - q) * np.asarray(f))))


def _maximise_likelihood(counts, p, q):
    """argmax sum c_v log(q + (p - q) f_v) on the simplex, by scipy's SLSQP."""
    d = counts.size
    n = counts.sum()
    result = scipy.optimize.minimize(
        lambda f: -grr_log_likelihood(f, counts, p, q) / n,
        np.full(d, 1 / d),
        jac=lambda f: -counts * (p - q) / (q + (p - q) * f) / n,
        method="SLSQP",
        bounds=[(0, 1)] * d,
        constraints=[{"type": "eq", "fun": lambda f: f.sum() - 1, "jac": lambda f: np.ones(d)}],
        options={"ftol": 1e-15, "maxiter": 1000},
    )
    assert result.success, result.message
    return result.x


@pytest.mark.parametrize("seed", range(6))
def test_ibu_on_grr_is_the_maximum_likelihood_estimate(seed):
    # Small domain, a skewed truth and few reports, so that some estimates are negative and
    # the maximiser sits on the boundary of the simplex.
    est, counts = grr_counts_estimate(d=6, epsilon=1.0, n=300, seed=seed, exponent=2.0)
    p, q = est.p, est.q
    mle = postprocess(est, "ibu")
    direct = _maximise_likelihood(counts, p, q)
    n = counts.sum()
    best, found = grr_log_likelihood(mle, counts, p, q), grr_log_likelihood(direct, counts, p, q)
    slack = 64 * EPS * n * max(1.0, abs(best) / n)  # rounding of the two sums
    assert best >= found - slack  # nothing feasible does better
    # Strong concavity on the simplex: l(f*) - l(x) >= (mu / 2) |x - f*|^2 with
    # mu = min_v c_v (p-q)^2 / max D_v^2 >= min_v c_v (p-q)^2 / p^2.
    mu = counts.min() * (p - q) ** 2 / p**2
    assert mu > 0
    assert np.linalg.norm(direct - mle) <= math.sqrt(2 * (best - found + slack) / mu)
    # KKT, exactly up to rounding: the gradient is lam on the support and <= lam off it.
    gradient = counts * (p - q) / (q + (p - q) * mle)
    support = mle > 0
    lam = gradient[support].mean()
    np.testing.assert_allclose(gradient[support], lam, rtol=1e-12)
    assert np.all(gradient[~support] <= lam * (1 + 1e-12))


def test_ibu_is_a_fixed_point_of_the_em_update_and_the_iteration_converges_to_it():
    est, _ = grr_counts_estimate(d=8, epsilon=2.0, n=2000, seed=3)
    mle = pp.ibu(est.frequencies, p=est.p, q=est.q)
    run_em = pp.iterative_bayesian_update(est.frequencies, p=est.p, q=est.q, tol=0.0,
                                          max_iterations=20_000, trace=True)
    # tol 0: it runs until the certificate is exactly 0 in floating point, or to the limit
    assert run_em.gap == 0.0 or run_em.iterations == 20_000
    # The EM objective is maximised by ibu (up to rounding), and EM approaches it: by strong
    # concavity its distance to the maximiser is bounded by the objective's gap.
    best = pp.ibu_log_likelihood(mle, est.frequencies, p=est.p, q=est.q)
    last = float(run_em.log_likelihoods[-1])
    assert last <= best + 16 * EPS
    w = np.maximum(est.frequencies + est.q / (est.p - est.q), 0)
    w /= w.sum()
    mu = w.min() * (est.p - est.q) ** 2 / est.p**2
    gap = max(best - last, 0.0) + 16 * EPS
    assert np.linalg.norm(run_em.frequencies - mle) <= math.sqrt(2 * gap / mu)
    # One EM update from the limit stays there: the KKT multiplier is 1 on the support.
    ratio = w / (est.q + (est.p - est.q) * mle)
    step = mle * ((est.p - est.q) * ratio + est.q * ratio.sum())
    np.testing.assert_allclose(step, mle, rtol=0, atol=64 * EPS)


@pytest.mark.parametrize("name", sorted(
    name for name in registry.ORACLES
    if registry.make(name, epsilon=1.0, domain_size=8).p is not None))  # the pure protocols
def test_ibu_iteration_never_decreases_its_objective(name):
    rng = np.random.default_rng(21)
    d = 50
    fo = registry.make(name, epsilon=1.0, domain_size=d)
    est = fo.estimate(fo.aggregate(fo.perturb(rng.choice(d, size=5000, p=zipf(d)), rng=rng)))
    result = pp.iterative_bayesian_update(est.frequencies, p=est.p, q=est.q, tol=0.0,
                                          max_iterations=300, trace=True)
    trail = result.log_likelihoods
    assert trail.shape == (301,)
    # EM's monotonicity, up to the rounding of an fsum of d terms of size ~|log D|.
    bound = 8 * d * EPS * max(1.0, float(np.max(np.abs(trail))))
    assert np.all(np.diff(trail) >= -bound)
    assert trail[-1] > trail[0]
    assert np.all(result.frequencies > 0) and abs(math.fsum(result.frequencies) - 1) <= 4 * EPS * d
    best = pp.ibu_log_likelihood(pp.ibu(est.frequencies, p=est.p, q=est.q), est.frequencies,
                                 p=est.p, q=est.q)
    assert trail[-1] <= best + bound  # the limit is the maximum


@pytest.mark.parametrize("name", ["grr", "oue", "olh"])
def test_ibu_stops_at_a_certified_gap_in_its_objective(name):
    rng = np.random.default_rng(8)
    d = 16
    fo = registry.make(name, epsilon=2.0, domain_size=d)
    est = fo.estimate(fo.aggregate(fo.perturb(rng.choice(d, size=4000, p=zipf(d)), rng=rng)))
    best = pp.ibu_log_likelihood(pp.ibu(est.frequencies, p=est.p, q=est.q), est.frequencies,
                                 p=est.p, q=est.q)
    bound = 8 * d * EPS * max(1.0, abs(best))  # rounding of the objectives' sums
    for tol in (1e-4, 1e-7):
        result = pp.iterative_bayesian_update(est.frequencies, p=est.p, q=est.q, tol=tol,
                                              max_iterations=200_000)
        assert result.converged and result.gap <= tol
        # The certificate is a Frank-Wolfe gap: it bounds how far the objective is below max.
        here = pp.ibu_log_likelihood(result.frequencies, est.frequencies, p=est.p, q=est.q)
        assert 0 <= best - here + bound and best - here <= result.gap + bound
        # It stopped at the first iterate within the tolerance.
        before = pp.iterative_bayesian_update(est.frequencies, p=est.p, q=est.q, tol=0.0,
                                              max_iterations=result.iterations - 1)
        assert before.gap > tol and not before.converged
    capped = pp.iterative_bayesian_update(est.frequencies, p=est.p, q=est.q, tol=1e-12,
                                          max_iterations=5)
    assert capped.iterations == 5 and not capped.converged and capped.log_likelihoods is None


def test_ibu_certificate_bounds_the_gap_along_the_whole_iteration():
    est, _ = grr_counts_estimate(d=10, epsilon=1.0, n=3000, seed=6)
    best = pp.ibu_log_likelihood(pp.ibu(est.frequencies, p=est.p, q=est.q), est.frequencies,
                                 p=est.p, q=est.q)
    for steps in (1, 3, 10, 30, 100):
        result = pp.iterative_bayesian_update(est.frequencies, p=est.p, q=est.q, tol=0.0,
                                              max_iterations=steps, trace=True)
        assert result.iterations == steps
        gap = best - float(result.log_likelihoods[-1])
        assert -16 * EPS <= gap <= result.gap + 16 * EPS


def test_ibu_errors_name_the_problem():
    est = Estimate(zipf(8), 5000, 0.02, None, None, 0.02**2, 0.0, "onebit", {}, None)
    with pytest.raises(ValueError, match="method 'ibu' needs p\\* and q\\*.*one-bit"):
        postprocess(est, "ibu")
    with pytest.raises(TypeError, match="needs the keyword.*p, q"):
        postprocess(zipf(8), "ibu")
    with pytest.raises(ValueError, match="p and q must satisfy 0 < q < p <= 1, got p=0.2"):
        postprocess(zipf(8), "ibu", p=0.2, q=0.5)
    with pytest.raises(TypeError, match="p .* is taken from the Estimate"):
        postprocess(pure_estimate(zipf(8)), "ibu", p=0.5)
    with pytest.raises(TypeError, match="does not accept parameter.*tol"):
        postprocess(pure_estimate(zipf(8)), "ibu", tol=1e-3)
    with pytest.raises(ValueError, match="max_iterations must be"):
        pp.iterative_bayesian_update(zipf(8), p=0.5, q=0.25, max_iterations=0)
    with pytest.raises(ValueError, match="tol must be a finite number"):
        pp.iterative_bayesian_update(zipf(8), p=0.5, q=0.25, tol=-1.0)


def test_ibu_is_the_raw_estimate_scaled_about_minus_r_and_cut():
    # f_v = max(t (f~_v + r) - r, 0): on a vector whose supports are all positive and whose
    # raw estimates already sum to 1 with no negative value, t = 1 and nothing changes.
    p, q = 0.5, 0.25
    f = np.array([0.5, 0.3, 0.2, 0.0])
    np.testing.assert_allclose(pp.ibu(f, p=p, q=q), f, rtol=0, atol=8 * EPS)
    g = np.array([0.7, 0.4, -0.05, -0.05])  # r = 1: t = (1 + 2) / (1.7 + 1.4) = 3 / 3.1
    t = 3 / 3.1
    np.testing.assert_allclose(pp.ibu(g, p=p, q=q),
                               [t * 1.7 - 1, t * 1.4 - 1, 0.0, 0.0], rtol=0, atol=8 * EPS)
    # No positive support weight at all (only a vector no oracle made): uniform.
    np.testing.assert_array_equal(pp.ibu([-2.0, -3.0], p=p, q=q), [0.5, 0.5])
