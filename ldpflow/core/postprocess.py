"""Consistency post-processing of raw frequency estimates.

Contract (``docs/spec/consistency.md``; Wang et al., "Locally Differentially Private
Frequency Estimation with Consistency", NDSS 2020): every method is a pure, vectorised
function of the raw unbiased estimate vector ``f~`` (length ``d``) and, where it needs them,
the statistics of the estimate (``n``, ``sigma``, the variance terms). It returns a new
float64 vector of length ``d`` and never modifies its input. "Consistent" means ``f' >= 0``
and ``sum(f') == 1`` (up to floating-point rounding).

================  ============  ==========  ==================================================
name              non-negative  sums to 1   output
================  ============  ==========  ==================================================
``base``          no            no          ``f~``
``base-pos``      yes           no          ``max(f~, 0)``
``post-pos``      per answer    no          ``f~``; clamp each *query answer* at 0
                                            (``ldpflow.core.queries``, ``clamp=True``)
``base-cut``      yes           no          ``f~_v`` if ``f~_v >= T`` else 0,
                                            ``T = max(0, Phi^-1(1 - alpha/d)) * sigma``
``norm``          no            yes         ``f~ + (1 - sum f~) / d``
``norm-mul``      yes           yes         ``max(gamma f~, 0)``, ``sum = 1``
``norm-sub``      yes           yes         ``max(f~ + delta, 0)``, ``sum = 1``
                                            (Euclidean projection onto the simplex)
``norm-cut``      yes           <= 1        ``f~_v`` if ``f~_v >= theta`` else 0, ``theta > 0``
                                            the smallest threshold whose kept sum is <= 1
``cls``           yes           yes         constrained least squares == ``norm-sub``
``mle-apx``       yes           yes         approximate constrained MLE (variance-weighted)
``power``         yes (> 0)     no          posterior mean under a fitted power-law prior
``power-ns``      yes           yes         ``norm-sub(power(f~))``
``ibu``           yes           yes         the iterative Bayesian update's fixed point (the
                                            EM limit on the support channel; pure protocols)
================  ============  ==========  ==================================================

Every method preserves the order of the estimates weakly: ``f~_a < f~_b`` implies
``f'_a <= f'_b`` and ``f~_a == f~_b`` implies ``f'_a == f'_b`` (Power and PowerNS up to the
discretisation error of their numerical sums, see :func:`power`).

Edge cases (each one is tested):

* **n == 0.** An :class:`~ldpflow.core.oracles.base.Estimate` of zero reports holds only NaN;
  every method raises ``ValueError`` for it, and for any non-finite input vector.
* **All estimates <= 0.** ``norm-mul`` has no ``gamma > 0``; it returns the uniform vector
  ``1/d``. ``norm-sub``/``cls`` are well defined (the projection). ``norm-cut`` and
  ``base-pos`` return zeros; ``base-cut`` returns zeros. ``mle-apx`` is well defined while the
  variance model ``var_const + var_slope * f~`` is positive at the largest estimate; below
  that (estimates far outside the Gaussian model) it returns ``norm-sub``.
* **alpha >= d/2 in base-cut** (this includes ``alpha >= d``, where ``1 - alpha/d <= 0`` has no
  quantile): the quantile ``Phi^-1(1 - alpha/d)`` is ``<= 0``; the threshold is clamped to 0 so
  the output stays non-negative, and ``base-cut`` equals ``base-pos``. With the default
  ``alpha = 2`` this happens for ``d <= 4``.
* **d == 1.** ``norm``, ``norm-mul``, ``norm-sub``, ``cls``, ``mle-apx`` and ``power-ns``
  return ``[1.0]``; the others apply their rule to the single value (``norm-cut`` cuts a
  single estimate above 1 to 0: no threshold keeps it with a sum <= 1).
* **Ties at the norm-cut threshold.** The rule keeps every value ``>= theta``, so tied values
  are kept or cut together: a tie group that would push the kept sum above 1 is cut whole.

References
----------
.. [1] T. Wang, M. Lopuhaa-Zwakenberg, Z. Li, B. Skoric, N. Li, "Locally Differentially
   Private Frequency Estimation with Consistency", NDSS 2020, Sections IV-V, Appendix A-B.
.. [2] J. Jia, N. Z. Gong, "Calibrate: Frequency Estimation and Heavy Hitter Identification
   with Local Differential Privacy via Incorporating Prior Knowledge", INFOCOM 2019.
.. [3] L. Condat, "Fast projection onto the simplex and the l1 ball", Math. Program. 2016.
.. [4] R. Agrawal, C. C. Aggarwal, "On the Design and Quantification of Privacy Preserving
   Data Mining Algorithms", PODS 2001 (the iterative Bayesian update).
.. [5] P. Kairouz, K. Bonawitz, D. Ramage, "Discrete Distribution Estimation under Local
   Privacy", ICML 2016 (IBU as the EM algorithm of the channel's likelihood).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from ldpflow.core import validation
from ldpflow.core.oracles.base import Estimate
from ldpflow.core.validation import check_positive_int

__all__ = [
    "METHODS",
    "postprocess",
    "statistics_of",
    "base",
    "base_pos",
    "post_pos",
    "base_cut",
    "base_cut_threshold",
    "norm",
    "norm_mul",
    "norm_sub",
    "norm_cut",
    "cls",
    "mle_apx",
    "power",
    "power_ns",
    "fit_power_law_exponent",
    "ibu",
    "IBUResult",
    "iterative_bayesian_update",
    "IBU_TOLERANCE",
    "IBU_MAX_ITERATIONS",
    "ibu_log_likelihood",
]

#: The method names accepted by :func:`postprocess`, in the order of the paper's Table I.
METHODS: tuple[str, ...] = (
    "base",
    "base-pos",
    "post-pos",
    "base-cut",
    "norm",
    "norm-mul",
    "norm-sub",
    "norm-cut",
    "cls",
    "mle-apx",
    "power",
    "power-ns",
    "ibu",
)

FloatArray = npt.NDArray[np.float64]


# -- validation helpers ----------------------------------------------------------------------
def _as_frequencies(frequencies: npt.ArrayLike, name: str = "frequencies") -> FloatArray:
    """A finite, one-dimensional, non-empty float64 copy of ``frequencies``."""
    try:
        arr = np.array(frequencies, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be an array of real numbers: {exc}") from None
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} must hold at least one value, got an empty array")
    finite = np.isfinite(arr)
    if not finite.all():
        bad = int(np.flatnonzero(~finite)[0])
        raise ValueError(
            f"{name} must be finite, got {float(arr[bad])!r} at position {bad} "
            "(an estimate from n == 0 reports is all NaN and cannot be post-processed)"
        )
    return arr


def _real(value: Any, *, name: str, low: float = -math.inf, low_open: bool = False) -> float:
    """``value`` as a finite float ``>= low`` (``> low`` when ``low_open``)."""
    out = validation.check_real(value, name=name)
    ok = math.isfinite(out) and (out > low if low_open else out >= low)
    if not ok:
        bound = f"({low}, inf)" if low_open else f"[{low}, inf)"
        raise ValueError(f"{name} must be a finite number in {bound}, got {value!r}")
    return out


def _sorted_desc(x: FloatArray) -> FloatArray:
    return -np.sort(-x)


# -- non-negativity only ---------------------------------------------------------------------
def base(frequencies: npt.ArrayLike) -> FloatArray:
    """Base: the raw estimates, unchanged (a validated copy).

    Parameters
    ----------
    frequencies : array_like of float, shape (d,)
        The raw unbiased estimates ``f~``.

    Returns
    -------
    ndarray of float64, shape (d,)
    """
    return _as_frequencies(frequencies)


def base_pos(frequencies: npt.ArrayLike) -> FloatArray:
    """Base-Pos: ``max(f~, 0)``. Non-negative; the sum is >= the raw sum (biased upwards)."""
    return np.maximum(_as_frequencies(frequencies), 0.0)


def post_pos(frequencies: npt.ArrayLike) -> FloatArray:
    """Post-Pos: the raw estimates; each *query answer* is clamped at 0 when it is asked.

    Post-Pos does not change the vector: answer queries with ``clamp=True`` in
    :mod:`ldpflow.core.queries` (a single value, a top-k value or a subset sum is then
    ``max(answer, 0)``). For single-value queries this equals Base-Pos.
    """
    return _as_frequencies(frequencies)


def base_cut_threshold(domain_size: int, sigma: float, alpha: float = 2.0) -> float:
    """The Base-Cut threshold ``T = max(0, Phi^-1(1 - alpha/d)) * sigma`` (NDSS 2020, eq. 8).

    Parameters
    ----------
    domain_size : int
        ``d >= 1``.
    sigma : float
        The standard deviation of an estimate of true frequency 0 (``>= 0``).
    alpha : float, default 2
        The expected number of zero-frequency values above ``T`` (``> 0``); the paper's choice.

    Returns
    -------
    float
        ``T >= 0``. The quantile is computed as ``-Phi^-1(alpha/d)`` (the upper tail), which
        keeps full precision for tiny ``alpha/d``. When ``alpha/d >= 1/2`` the quantile is
        ``<= 0`` (and undefined for ``alpha >= d``); ``T`` is then 0, so Base-Cut stays
        non-negative and equals Base-Pos.
    """
    d = check_positive_int(domain_size, name="domain_size")
    sigma = _real(sigma, name="sigma", low=0.0)
    alpha = _real(alpha, name="alpha", low=0.0, low_open=True)
    tail = alpha / d
    if tail >= 0.5:
        return 0.0
    return -statistics.NormalDist().inv_cdf(tail) * sigma


def base_cut(frequencies: npt.ArrayLike, *, sigma: float, alpha: float = 2.0) -> FloatArray:
    """Base-Cut: keep ``f~_v`` if ``f~_v >= T``, else 0 (``T`` from :func:`base_cut_threshold`).

    Parameters
    ----------
    frequencies : array_like of float, shape (d,)
    sigma : float
        ``Estimate.sigma``: ``sqrt(q*(1-q*) / (n (p*-q*)^2))``.
    alpha : float, default 2
        Expected number of false positives among the zero-frequency values.

    Returns
    -------
    ndarray of float64, shape (d,)
        Non-negative; each entry is either its estimate or 0.
    """
    f = _as_frequencies(frequencies)
    threshold = base_cut_threshold(f.size, sigma, alpha)
    # T >= 0, so a value kept because it is >= T is never negative.
    return np.where(f >= threshold, f, 0.0)


# -- sum-to-one (and both) -------------------------------------------------------------------
def norm(frequencies: npt.ArrayLike) -> FloatArray:
    """Norm: ``f~ + (1 - sum f~) / d``; sums to 1, unbiased, may be negative.

    It is the Euclidean projection onto the hyperplane ``sum f = 1``. Where every report
    supports the same number of domain values (GRR, SS) the raw estimates already sum to 1
    and Norm changes nothing (up to rounding). The paper counts HR among them; the HR of
    ``docs/spec/oracles.md`` (row ``v + 1`` of ``H_K``) is not, so Norm does change its estimates.
    """
    f = _as_frequencies(frequencies)
    return f + (1.0 - math.fsum(f)) / f.size


def norm_mul(frequencies: npt.ArrayLike) -> FloatArray:
    """Norm-Mul: ``max(gamma f~, 0)`` with ``gamma > 0`` such that the sum is 1.

    ``gamma = 1 / sum(max(f~, 0))``. When no estimate is positive no such ``gamma`` exists;
    the method then returns the uniform vector ``1/d`` (the consistent vector that assumes
    nothing), which preserves the order weakly.
    """
    f = _as_frequencies(frequencies)
    positive = np.maximum(f, 0.0)
    total = math.fsum(positive)
    if total <= 0.0:
        return np.full(f.size, 1.0 / f.size)
    return positive / total


def norm_sub(frequencies: npt.ArrayLike) -> FloatArray:
    """Norm-Sub: ``max(f~ + delta, 0)`` with ``delta`` such that the sum is 1.

    This is the Euclidean projection onto the probability simplex, computed exactly in
    ``O(d log d)`` by sorting (Condat 2016, Algorithm 1): with ``u`` the estimates in
    decreasing order and ``S_m`` their prefix sums, the support size is the largest ``m`` with
    ``u_m + (1 - S_m)/m > 0`` and ``delta = (1 - S_m)/m``. Also the solution of CLS.

    Returns
    -------
    ndarray of float64, shape (d,)
        Non-negative, sums to 1; a projection, so applying it twice changes nothing.
    """
    f = _as_frequencies(frequencies)
    return np.maximum(f + _simplex_shift(f), 0.0)


def _simplex_shift(f: FloatArray) -> float:
    u = _sorted_desc(f)
    prefix = np.cumsum(u)
    sizes = np.arange(1, f.size + 1, dtype=np.float64)
    inside = u + (1.0 - prefix) / sizes > 0.0
    # The first entry is always inside (u_1 + 1 - u_1 = 1); guard against rounding anyway.
    m = max(int(np.flatnonzero(inside)[-1]) + 1, 1) if inside.any() else 1
    return (1.0 - float(prefix[m - 1])) / m


def cls(frequencies: npt.ArrayLike) -> FloatArray:
    """CLS: ``argmin ||f' - f~||_2`` subject to ``f' >= 0`` and ``sum f' = 1``.

    The KKT conditions of this problem give ``f'_v = max(f~_v + delta, 0)`` with ``delta`` set
    by the sum (Wang et al., NDSS 2020, Appendix A): exactly Norm-Sub, which is how it is computed.
    """
    return norm_sub(frequencies)


def norm_cut(frequencies: npt.ArrayLike) -> FloatArray:
    """Norm-Cut: zero the small estimates so that the kept ones sum to at most 1.

    If ``sum(max(f~, 0)) <= 1`` the result is ``max(f~, 0)``. Otherwise every ``f~_v < theta``
    is set to 0, with ``theta > 0`` the smallest threshold such that
    ``sum_{f~_v >= theta} f~_v <= 1``. Values equal to ``theta`` are kept together, so a
    group of tied values is kept or cut as a whole. When the largest value alone exceeds 1,
    every value is cut (the output is all zeros, which sums to 0 <= 1).

    Returns
    -------
    ndarray of float64, shape (d,)
        Non-negative, sum <= 1; each entry is its estimate or 0.
    """
    f = _as_frequencies(frequencies)
    positive = np.maximum(f, 0.0)
    if math.fsum(positive) <= 1.0:
        return positive
    u = _sorted_desc(positive)
    prefix = np.cumsum(u)
    # The mass kept by the threshold u_i includes the whole tie group of u_i: the prefix sum
    # at the group's last index (u is decreasing, so -u is increasing for searchsorted).
    group_end = np.searchsorted(-u, -u, side="right") - 1
    keep = (prefix[group_end] <= 1.0) & (u > 0.0)
    if not keep.any():
        return np.zeros_like(f)
    theta = float(u[int(np.flatnonzero(keep)[-1])])
    return np.where(f >= theta, f, 0.0)


# -- MLE-Apx -------------------------------------------------------------------------------
def mle_apx(frequencies: npt.ArrayLike, *, var_const: float, var_slope: float) -> FloatArray:
    """MLE-Apx: the variance-weighted constrained estimate of Wang et al. (NDSS 2020), Sec. IV-D.

    Model: ``f~_v ~ N(f'_v, c + s f'_v)`` independently, with ``c = var_const`` and
    ``s = var_slope`` (for pure protocols ``c = A / (n (p*-q*)^2)``, ``s = B / (n (p*-q*)^2)``,
    ``A = q*(1-q*)``, ``B = (p*-q*)(1-p*-q*)``). Stationarity of the weighted least-squares
    objective ``sum_v (f'_v - f~_v)^2 / (c + s f'_v)`` under ``f' >= 0``, ``sum f' = 1``, with
    the weights held at the solution, gives on the support ``D1``::

        f'_v - f~_v = lam (c + s f'_v)   =>   f'_v = (f~_v + lam c) / (1 - lam s)
        lam = (1 - sum_{D1} f~_v) / (|D1| c + s)      (from sum_{D1} f'_v = 1)

    and ``f'_v = 0`` with ``f~_v + lam c <= 0`` off the support. In the spec's ``A, B``
    notation ``lam = x n (p*-q*)`` and this is ``f'_v = (A x + f~_v (p*-q*)) / ((p*-q*) - B x)``
    with ``x = (p*-q*)(1 - sum_{D1} f~_v) / (|D1| A + B)``: the sum-to-one constraint fixes the
    sign of the denominator, which the paper's text (NDSS 2020) has reversed.

    Parameters
    ----------
    frequencies : array_like of float, shape (d,)
    var_const : float
        ``c > 0``, the variance of an estimate of true frequency 0 (``Estimate.var_const``).
    var_slope : float
        ``s``, the variance's slope in the true frequency (``Estimate.var_slope``); it may be
        negative (``p* + q* > 1``), but ``c + s`` (the variance at frequency 1) must be > 0.

    Returns
    -------
    ndarray of float64, shape (d,)
        Non-negative, sums to 1, order preserving, idempotent on consistent input.

    Notes
    -----
    The spec computes the support by iterating from ``D1 = D`` and dropping the values that
    come out negative. That iteration only ever shrinks ``D1`` and stops at the KKT point
    above (the argument of Michelot's simplex projection), and the support is always a set of
    largest estimates, so this function finds the same point directly in ``O(d log d)``: with
    ``u`` sorted decreasingly and ``S_m`` its prefix sums, ``(u_m + lam_m c)(m c + s)`` is
    non-increasing in ``m``, and the support size is the last ``m`` where it is positive.
    This requires ``c + s u_1 > 0`` (the variance model positive at the largest estimate);
    otherwise all estimates lie far below zero, no stationary point keeps the order, and
    the function returns Norm-Sub, the unweighted projection.

    With ``s = 0`` (the one-bit scheme, or ``B -> 0``) the weights are equal and MLE-Apx is
    exactly Norm-Sub; the paper observes that the two are close in practice.
    """
    f = _as_frequencies(frequencies)
    c = _real(var_const, name="var_const", low=0.0, low_open=True)
    s = _real(var_slope, name="var_slope")
    if not c + s > 0.0:
        raise ValueError(
            "var_const + var_slope (the variance at frequency 1) must be > 0, "
            f"got {var_const!r} + {var_slope!r}"
        )
    u = _sorted_desc(f)
    if not c + s * float(u[0]) > 0.0:
        return norm_sub(f)
    prefix = np.cumsum(u)
    denominators = np.arange(1, f.size + 1, dtype=np.float64) * c + s  # > 0 since c + s > 0
    lams = (1.0 - prefix) / denominators
    inside = u + lams * c > 0.0
    m = int(np.flatnonzero(inside)[-1]) + 1 if inside.any() else 1
    lam = float(lams[m - 1])
    # 1 - lam s equals sum over the support of (u + lam c) > 0, so the division keeps signs.
    return np.maximum(f + lam * c, 0.0) / (1.0 - lam * s)


# -- Power and PowerNS -----------------------------------------------------------------------
# Sums of x^(-a) over x = 1..n are exact term by term up to _EXACT_LIMIT and use the
# Euler-Maclaurin formula (terms through B4) above it, where its relative error is below
# a^5 / (30240 * 4096^5), about 1e-14 even at the largest exponent fitted.
_EXACT_LIMIT = 4096
_ALPHA_MAX = 50.0
_ALPHA_BELOW_ONE = 1.01  # the spec's exponent when the mean estimated count is below 1
_BISECTION_STEPS = 200


def _expm1_over(z: FloatArray) -> FloatArray:
    """``expm1(z) / z`` with its limit 1 at ``z == 0``."""
    z = np.asarray(z, dtype=np.float64)
    small = np.abs(z) < 1e-8
    safe = np.where(small, 1.0, z)
    return np.where(small, 1.0 + z / 2.0, np.expm1(safe) / safe)


def _em_ratio(a: FloatArray, b: FloatArray, exponent: float) -> FloatArray:
    """``sum_{x=a}^{b} (x/a)^(-exponent)`` by Euler-Maclaurin, for ``b >= a >= 4097``."""
    s = exponent
    log_r = np.log1p((b - a) / a)
    r_pow = np.exp(-s * log_r)  # r^-s
    integral = a * log_r * _expm1_over((1.0 - s) * log_r)
    ends = 0.5 * (1.0 + r_pow)
    b2 = -(s / (12.0 * a)) * (r_pow / np.exp(log_r) - 1.0)
    b4 = (s * (s + 1.0) * (s + 2.0) / (720.0 * a**3)) * (r_pow * np.exp(-3.0 * log_r) - 1.0)
    return integral + ends + b2 + b4


class _PowerSums:
    """``sum_{x=a}^{b} x^(-exponent)`` for integer ranges within ``[1, n]``, vectorised."""

    def __init__(self, n: int, exponent: float):
        self.n = n
        self.exponent = exponent
        self.limit = min(n, _EXACT_LIMIT)
        x = np.arange(1, self.limit + 1, dtype=np.float64)
        terms = x ** (-exponent)
        # Range sums are differences of cumulative sums taken from the end where the terms
        # are small, so that a cell's sum is never the difference of two much larger
        # numbers: tail sums for decreasing terms (exponent > 0), prefix sums otherwise.
        self.from_tail = exponent > 0
        self.cum = np.zeros(self.limit + 2)
        if self.from_tail:  # cum[a] = sum_{x=a}^{limit}, cum[limit + 1] = 0
            self.cum[1 : self.limit + 1] = np.cumsum(terms[::-1])[::-1]
        else:  # cum[b] = sum_{x=1}^{b}, cum[0] = 0
            self.cum[1 : self.limit + 1] = np.cumsum(terms)

    def _exact(self, a: npt.NDArray[np.int64], b: npt.NDArray[np.int64]) -> FloatArray:
        if self.from_tail:
            return self.cum[a] - self.cum[b + 1]
        return self.cum[b] - self.cum[a - 1]

    def log_sum(self, a: npt.NDArray[np.int64], b: npt.NDArray[np.int64]) -> FloatArray:
        """``log sum_{x=a}^{b} x^-s`` elementwise (``1 <= a <= b <= n``)."""
        s, limit = self.exponent, self.limit
        out = np.empty(a.shape)
        exact = a <= limit
        if exact.any():
            ae, be = a[exact], b[exact]
            part = self._exact(ae, np.minimum(be, limit))
            spill = be > limit  # cells that straddle the limit: add the Euler-Maclaurin rest
            if spill.any():
                start = float(limit + 1)
                rest = start ** (-s) * _em_ratio(
                    np.full(int(spill.sum()), start), be[spill].astype(np.float64), s
                )
                part[spill] += rest
            out[exact] = np.log(part)
        far = ~exact
        if far.any():
            af, bf = a[far].astype(np.float64), b[far].astype(np.float64)
            out[far] = -s * np.log(af) + np.log(_em_ratio(af, bf, s))
        return out

    def total(self) -> float:
        """``sum_{x=1}^{n} x^-s``."""
        one = np.ones(1, dtype=np.int64)
        return float(np.exp(self.log_sum(one, np.full(1, self.n, dtype=np.int64))[0]))


def _prior_mean(n: int, alpha: float) -> float:
    """Mean of the discrete power law ``Pr[x] ~ x^-alpha`` on ``x = 1..n``."""
    return _PowerSums(n, alpha - 1.0).total() / _PowerSums(n, alpha).total()


def fit_power_law_exponent(mean_count: float, n: int) -> float:
    """The exponent ``alpha`` whose power-law prior on ``1..n`` has mean ``mean_count``.

    Parameters
    ----------
    mean_count : float
        The mean of the estimated counts ``n * f~_v`` over the domain.
    n : int
        The number of reports: the prior's support is ``x = 1, ..., n``.

    Returns
    -------
    float
        ``alpha`` in ``[0, 50]`` with ``sum x^(1-alpha) / sum x^-alpha == mean_count``, found by
        200 deterministic bisection steps (the prior mean decreases strictly in ``alpha``).
        ``1.01`` when ``mean_count < 1`` (the spec's convention: no power law on ``x >= 1`` has a
        mean below 1). Clamped to 0 (a uniform prior) when ``mean_count >= (n + 1) / 2``, the
        largest mean of a non-increasing power law, and to 50 when the mean is within about
        ``2^-50`` of 1.
    """
    n = check_positive_int(n, name="n")
    mean_count = _real(mean_count, name="mean_count")
    if mean_count < 1.0:
        return _ALPHA_BELOW_ONE
    if mean_count >= _prior_mean(n, 0.0):
        return 0.0
    if mean_count <= _prior_mean(n, _ALPHA_MAX):
        return _ALPHA_MAX
    low, high = 0.0, _ALPHA_MAX  # prior_mean(low) > mean_count > prior_mean(high)
    for _ in range(_BISECTION_STEPS):
        mid = 0.5 * (low + high)
        if mid in (low, high):
            break
        if _prior_mean(n, mid) > mean_count:
            low = mid
        else:
            high = mid
    return 0.5 * (low + high)


def power(
    frequencies: npt.ArrayLike,
    *,
    n: int,
    sigma: float,
    window: float = 8.0,
    cells_per_sigma: int = 8,
) -> FloatArray:
    """Power: the posterior mean of each count under a fitted power-law prior (Jia & Gong).

    With ``y_v = n f~_v`` the estimated count and ``s = n sigma`` its noise, the prior
    ``Pr[x] ~ x^-alpha`` on the counts ``x = 1..n`` (``alpha`` from
    :func:`fit_power_law_exponent` on the mean of ``y``), the output is (NDSS 2020, eq. 12)::

        f'_v = (1/n) sum_x x phi((y_v - x)/s) Pr[x] / sum_x phi((y_v - x)/s) Pr[x]

    Parameters
    ----------
    frequencies : array_like of float, shape (d,)
    n : int
        The number of reports (``>= 1``).
    sigma : float
        ``Estimate.sigma`` (``> 0``): the noise standard deviation of a frequency.
    window : float, default 8
        The sums run over the integers of ``[1, n]`` where the Gaussian factor is within
        ``exp(-window^2 / 2)`` (``1e-14`` at the default) of its value at ``c = clip(y_v, 1, n)``:
        ``c -/+ window * s`` for ``y_v`` inside ``[1, n]``, a shorter stretch next to the
        boundary for ``y_v`` outside (the factor decays faster there).
    cells_per_sigma : int, default 8
        Resolution: the window is cut into cells of ``h`` consecutive integers, ``h`` about
        ``1/cells_per_sigma`` of the Gaussian factor's scale (``h = ceil(s / cells_per_sigma)``
        inside ``[1, n]``; exact sums, ``h = 1``, when ``s <= cells_per_sigma``).

    Returns
    -------
    ndarray of float64, shape (d,)
        Every entry is at least ``1/n`` (one count). Not normalised.

    Notes
    -----
    Deterministic and vectorised over ``v``, in ``O(d * window * cells_per_sigma)`` after an
    ``O(4096)``-per-step fit of ``alpha``. Within a cell the prior's masses
    ``P = sum x^-alpha`` and ``Q = sum x^(1-alpha)`` are exact (term by term up to x = 4096,
    Euler-Maclaurin above, relative error ~1e-14); the Gaussian factor is evaluated at the
    cell's prior-weighted centre ``Q/P``, which cancels its first-order error in the
    denominator. The remaining error of a posterior mean is below ``h^2 / s`` counts
    (``s / 64`` at the default resolution: a small fraction of the noise ``s``); with
    ``h = 1`` the sums are exact up to the window's truncation. Rows with ``y_v`` inside
    ``[1, n]`` share one lattice of cells, so the output is monotone in ``f~`` up to rounding
    there; below 1 count and above ``n`` the order holds up to that discretisation error.
    """
    f = _as_frequencies(frequencies)
    n = check_positive_int(n, name="n")
    sigma = _real(sigma, name="sigma", low=0.0, low_open=True)
    window = _real(window, name="window", low=0.0, low_open=True)
    cells_per_sigma = check_positive_int(cells_per_sigma, name="cells_per_sigma")

    y = n * f
    noise = n * sigma
    alpha = fit_power_law_exponent(float(np.mean(y)), n)
    masses = _PowerSums(n, alpha)  # P: sum x^-alpha
    moments = _PowerSums(n, alpha - 1.0)  # Q: sum x^(1-alpha)

    # The window: where the Gaussian factor, relative to its value at the point of the
    # support nearest y (c = clip(y, 1, n)), stays above exp(-window^2 / 2). For y inside
    # [1, n] that is c -/+ window * s. For y outside, at distance delta, the factor decays
    # like exp(-(2 delta t + t^2) / (2 s^2)) with the distance t from c, so the window shrinks
    # to t_max = window^2 s^2 / (delta + sqrt(delta^2 + window^2 s^2)); each row's cells
    # shrink with it, so that every cell spans about 1/cells_per_sigma of the factor's
    # scale t_max / window.
    centre = np.clip(y, 1.0, float(n))
    distance = np.abs(y - centre)
    reach = window * noise
    half = reach * reach / (distance + np.hypot(distance, reach))
    lower = np.clip(np.floor(centre - half), 1, n).astype(np.int64)
    upper = np.clip(np.ceil(centre + half), 1, n).astype(np.int64)
    width = np.maximum(1, np.ceil(half / (window * cells_per_sigma))).astype(np.int64)
    # Cells lie on the lattice 1 + k * width, shared by all rows of equal width (every y
    # inside [1, n]): rows then differ only in which whole cells their windows take, which
    # keeps the output monotone in y up to rounding.
    lower = 1 + (lower - 1) // width * width
    cells = int(((upper - lower) // width).max()) + 1

    out = np.empty(f.size)
    # Rows in chunks of ~2^20 cells keep the temporaries small for large domains.
    rows = max(1, (1 << 20) // cells)
    steps = np.arange(cells, dtype=np.int64)
    for start in range(0, f.size, rows):
        stop = min(f.size, start + rows)
        step = width[start:stop, None]
        a = lower[start:stop, None] + steps[None, :] * step
        valid = a <= upper[start:stop, None]
        a = np.where(valid, a, 1)
        b = np.where(valid, np.minimum(a + step - 1, n), 1)
        log_p = masses.log_sum(a.ravel(), b.ravel()).reshape(a.shape)
        log_q = moments.log_sum(a.ravel(), b.ravel()).reshape(a.shape)
        centres = np.exp(log_q - log_p)  # prior-weighted mean count of each cell
        z = (y[start:stop, None] - centres) / noise
        log_w = np.where(valid, log_p - 0.5 * z * z, -np.inf)
        weights = np.exp(log_w - log_w.max(axis=1, keepdims=True))
        out[start:stop] = (weights * centres).sum(axis=1) / weights.sum(axis=1)
    # The posterior mean lies in [1, n]; clip the rounding so "at least one count" holds.
    return np.clip(out, 1.0, float(n)) / n


def power_ns(
    frequencies: npt.ArrayLike,
    *,
    n: int,
    sigma: float,
    window: float = 8.0,
    cells_per_sigma: int = 8,
) -> FloatArray:
    """PowerNS: :func:`norm_sub` applied to :func:`power`'s output (consistent)."""
    return norm_sub(
        power(frequencies, n=n, sigma=sigma, window=window, cells_per_sigma=cells_per_sigma)
    )


# -- IBU -------------------------------------------------------------------------------------
#: The iteration's default stopping tolerance on its optimality certificate (a bound on how
#: far the objective is below its maximum).
IBU_TOLERANCE = 1e-9
#: The iteration's default limit on the number of updates.
IBU_MAX_ITERATIONS = 10_000


def _support_weights(f: FloatArray, p: float, q: float) -> FloatArray:
    """``f~ + q*/(p*-q*)`` clipped at 0: proportional to the support counts, since
    ``c_v / n = q* + (p*-q*) f~_v`` (the oracle's estimate inverted; exact up to rounding).
    Counts are never negative; the clip only meets rounding and vectors no oracle made."""
    return np.maximum(f + q / (p - q), 0.0)


def _check_channel(p: Any, q: Any) -> tuple[float, float]:
    if p is None or q is None:
        raise ValueError(
            "method 'ibu' needs p* and q* (an estimate of a pure protocol: grr oue sue olh blh "
            f"hr ss), got p={p!r}, q={q!r} (one-bit, cms and hcms have no support channel)"
        )
    p = _real(p, name="p", low=0.0, low_open=True)
    q = _real(q, name="q", low=0.0, low_open=True)
    if not q < p <= 1.0:
        raise ValueError(f"p and q must satisfy 0 < q < p <= 1, got p={p!r}, q={q!r}")
    return p, q


def ibu_log_likelihood(frequencies: npt.ArrayLike, estimates: npt.ArrayLike, *,
                       p: float, q: float) -> float:
    """IBU's objective at the distribution ``frequencies`` for the raw ``estimates``.

    ``sum_v w_v log(q* + (p*-q*) f_v)`` with ``w_v = c_v / sum_x c_x`` the support
    fractions (from the raw estimates, as in :func:`ibu`). For GRR (one support per report)
    it is the multinomial log-likelihood of the reports divided by ``n``, up to a constant.
    """
    p, q = _check_channel(p, q)
    f = np.asarray(frequencies, dtype=np.float64)
    weights = _support_weights(_as_frequencies(estimates, "estimates"), p, q)
    total = math.fsum(weights)
    if total <= 0.0:
        return 0.0
    used = weights > 0.0
    return math.fsum(weights[used] / total * np.log(q + (p - q) * f[used]))


def ibu(frequencies: npt.ArrayLike, *, p: float | None, q: float | None) -> FloatArray:
    """IBU: the fixed point of the iterative Bayesian update, computed exactly.

    IBU (Agrawal & Aggarwal 2001; Kairouz et al. 2016) is the EM algorithm for the true
    distribution behind the reports, on the oracle's channel. For the pure protocols of
    ``docs/spec/oracles.md`` a report of a user holding ``u`` supports ``v`` with probability
    ``A[v, u] = p*`` if ``v == u`` else ``q*``; every column of ``A`` sums to
    ``s = p* + (d-1) q*``, so ``A / s`` is a channel from the true value to one support, and
    the ``C = sum_v c_v`` supports counted are treated as draws from it. The objective is
    ``L(f) = sum_v w_v log(q* + (p*-q*) f_v)`` (``w = c / C``, :func:`ibu_log_likelihood`);
    :func:`iterative_bayesian_update` is its EM iteration, and this function returns the
    point it converges to: the maximiser of ``L`` on the simplex.

    ``L`` is separable and concave, so its maximiser follows from the KKT conditions
    (``w_v (p*-q*) / (q* + (p*-q*) f_v) = lam`` on the support, ``<= lam`` off it)::

        f_v = max(t (f~_v + r) - r, 0),    r = q* / (p*-q*),

    with ``t > 0`` such that ``sum f = 1``: the raw estimates scaled about ``-r`` and cut at
    0. ``t`` is found exactly as Norm-Sub's shift is (sort, prefix sums, the largest support
    whose last member stays positive), in ``O(d log d)``; no iteration and no loop over
    reports. The support counts come from the raw estimates, ``c_v / n = q* + (p*-q*) f~_v``
    (the estimate inverted), so a plain vector works as well as an Estimate.

    For GRR each report has one support (``C = n``) and ``L`` is the exact likelihood of
    the reports: the output is the maximum-likelihood estimate on the simplex. For the other
    pure protocols a report supports several values jointly and ``L`` is the pseudo-likelihood
    that treats the supports as independent draws (the formulation of multi-freq-ldpy); its
    interior maximiser ``f_v = (s w_v - q*)/(p*-q*)`` is the unbiased estimate with ``n s``
    replaced by ``C``.

    Parameters
    ----------
    frequencies : array_like of float, shape (d,)
        The raw unbiased estimates ``f~``.
    p, q : float
        ``Estimate.p`` and ``Estimate.q`` (``0 < q* < p* <= 1``).

    Returns
    -------
    ndarray of float64, shape (d,)
        Non-negative, sums to 1, order preserving; a consistent input is returned unchanged
        (up to rounding). If no value has a positive weight (only a vector no oracle made:
        every ``f~_v <= -r``) the objective is constant and the output is uniform.

    Raises
    ------
    ValueError
        For ``p``/``q`` missing (the one-bit scheme: no support channel) or not
        ``0 < q < p <= 1``; for a bad vector.
    """
    f = _as_frequencies(frequencies)
    p, q = _check_channel(p, q)
    r = q / (p - q)
    weights = _support_weights(f, p, q)
    u = _sorted_desc(weights)
    prefix = np.cumsum(u)
    if not prefix[-1] > 0.0:
        return np.full(f.size, 1.0 / f.size)
    sizes = np.arange(1, f.size + 1, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        scales = (1.0 + sizes * r) / prefix  # t for each support size (inf past the zeros)
        inside = u * scales - r > 0.0
    # The first entry is inside (u_1 t_1 - r = 1 > 0); guard against rounding anyway.
    m = int(np.flatnonzero(inside)[-1]) + 1 if inside.any() else 1
    out = np.maximum(scales[m - 1] * weights - r, 0.0)
    return out / math.fsum(out)


@dataclasses.dataclass(frozen=True, eq=False)
class IBUResult:
    """What :func:`iterative_bayesian_update` found.

    Attributes
    ----------
    frequencies : ndarray of float64, shape (d,)
        The last iterate: positive, sums to 1.
    iterations : int
        The number of updates made.
    converged : bool
        Whether the stopping tolerance was met (``False``: ``max_iterations`` was reached).
    gap : float
        The optimality certificate of the returned iterate: ``max_u m_u - 1`` with ``m`` the
        EM multipliers, which bounds ``L(f*) - L(f)`` (see the Notes of
        :func:`iterative_bayesian_update`).
    log_likelihoods : ndarray of float64 or None
        With ``trace=True``: :func:`ibu_log_likelihood` at the start and at every iterate
        (``iterations + 1`` values); EM never decreases it.
    """

    frequencies: FloatArray
    iterations: int
    converged: bool
    gap: float
    log_likelihoods: FloatArray | None = None


def iterative_bayesian_update(
    frequencies: npt.ArrayLike,
    *,
    p: float | None,
    q: float | None,
    tol: float = IBU_TOLERANCE,
    max_iterations: int = IBU_MAX_ITERATIONS,
    trace: bool = False,
) -> IBUResult:
    """The IBU iteration itself: EM on the support channel of :func:`ibu`, from uniform.

    One update, vectorised over the domain from the support fractions ``w`` (no loop over
    reports)::

        f_u <- f_u m_u,   m_u = (p*-q*) w_u / D_u + q* sum_v w_v / D_v,   D = q* + (p*-q*) f

    (``m_u = sum_v w_v A[v, u] / (A f)_v``, as ``(A f)_v = D_v`` when ``sum f = 1``);
    ``O(d)`` per update. It keeps ``f > 0`` and ``sum f = 1`` (renormalised against
    rounding) and never decreases :func:`ibu_log_likelihood`. Its limit is :func:`ibu`'s
    output, which the method ``ibu`` returns directly: this function is the literal
    algorithm, for comparison.

    Stopping rule: before each update the iterate's certificate ``gap = max_u m_u - 1`` is
    computed; the iteration stops as soon as ``gap <= tol`` (``converged``), or once
    ``max_iterations`` updates have been made. ``gap`` bounds the distance to the optimum
    in objective: ``L(f*) - L(f) <= gap`` (see the Notes), so the rule certifies the result,
    unlike a rule on the change per update, which is tiny whenever EM is slow.

    Parameters
    ----------
    frequencies : array_like of float, shape (d,)
        The raw unbiased estimates ``f~``.
    p, q : float
        ``p*`` and ``q*``.
    tol : float, default :data:`IBU_TOLERANCE` (1e-9)
        Stop when the certificate ``max_u m_u - 1`` is at most ``tol`` (``tol >= 0``).
    max_iterations : int, default :data:`IBU_MAX_ITERATIONS` (10000)
        Stop after this many updates in any case (``>= 1``).
    trace : bool, default False
        Record the objective at every iterate.

    Returns
    -------
    IBUResult

    Raises
    ------
    ValueError
        As :func:`ibu`; for ``tol < 0`` or ``max_iterations < 1``.
    TypeError
        For a non-bool ``trace``.

    Notes
    -----
    The certificate is the Frank-Wolfe duality gap of the concave objective on the simplex:
    with ``g = grad L(f)``, ``g_u = (p*-q*) w_u / D_u``, concavity gives
    ``L(f*) <= L(f) + <g, f* - f> <= L(f) + max_u g_u - <g, f>``, and since
    ``sum_u f_u m_u = sum_v w_v = 1``, ``<g, f> = 1 - q* sum_v w_v / D_v``, so
    ``max_u g_u - <g, f> = max_u m_u - 1``. It is 0 exactly at the fixed point.

    The iteration is slow exactly where LDP estimation is hard. Near its limit a value of
    frequency ``f_u`` approaches it by a factor of about ``1 - p* (p*-q*) f_u w_u / D_u^2``
    per update (the diagonal of the update's Jacobian); ``w_u`` is about ``D_u / s``
    (``s = p* + (d-1) q*``: 1 for GRR, about ``d q*`` for unary encoding and local hashing),
    so for large domains thousands of updates move the small values little and values whose
    limit is 0 approach it sublinearly. Stopped early, the iterate is shrunk toward the
    uniform start: a different estimator from the limit (``docs/uncertainty.md`` reports
    both).
    """
    f = _as_frequencies(frequencies)
    p, q = _check_channel(p, q)
    tol = _real(tol, name="tol", low=0.0)
    max_iterations = check_positive_int(max_iterations, name="max_iterations")
    if not isinstance(trace, bool):
        raise TypeError(f"trace must be a bool, got {type(trace).__name__}")
    weights = _support_weights(f, p, q)
    total = math.fsum(weights)
    d = f.size
    current = np.full(d, 1.0 / d)
    trail = [ibu_log_likelihood(current, f, p=p, q=q)] if trace else None
    if total <= 0.0:  # no support weight: L is constant and every point is optimal
        return IBUResult(current, 0, True, 0.0,
                         np.asarray(trail) if trail is not None else None)
    w = weights / total
    slope = p - q
    iterations = 0
    while True:
        ratio = w / (q + slope * current)
        multipliers = slope * ratio + q * float(ratio.sum())  # pairwise sums: fsum is slow
        certificate = max(float(multipliers.max()) - 1.0, 0.0)
        if certificate <= tol or iterations == max_iterations:
            break
        current = current * multipliers
        current /= current.sum()
        iterations += 1
        if trail is not None:
            trail.append(ibu_log_likelihood(current, f, p=p, q=q))
    return IBUResult(current, iterations, certificate <= tol, certificate,
                     np.asarray(trail) if trail is not None else None)


# -- dispatch --------------------------------------------------------------------------------
# name -> (function, statistics it needs, tuning parameters it accepts)
_STATISTICS = ("n", "sigma", "var_const", "var_slope", "p", "q")  # p, q: IBU's channel
_DISPATCH: dict[str, tuple[Callable[..., FloatArray], tuple[str, ...], tuple[str, ...]]] = {
    "base": (base, (), ()),
    "base-pos": (base_pos, (), ()),
    "post-pos": (post_pos, (), ()),
    "base-cut": (base_cut, ("sigma",), ("alpha",)),
    "norm": (norm, (), ()),
    "norm-mul": (norm_mul, (), ()),
    "norm-sub": (norm_sub, (), ()),
    "norm-cut": (norm_cut, (), ()),
    "cls": (cls, (), ()),
    "mle-apx": (mle_apx, ("var_const", "var_slope"), ()),
    "power": (power, ("n", "sigma"), ("window", "cells_per_sigma")),
    "power-ns": (power_ns, ("n", "sigma"), ("window", "cells_per_sigma")),
    "ibu": (ibu, ("p", "q"), ()),
}


def statistics_of(method: str) -> tuple[str, ...]:
    """The statistics of an Estimate that ``method`` reads (``("sigma",)`` for base-cut):
    the keywords a plain vector needs in :func:`postprocess`."""
    if method not in _DISPATCH:
        raise ValueError(f"method must be one of {', '.join(METHODS)}; got {method!r}")
    return _DISPATCH[method][1]


def postprocess(estimate: Estimate | npt.ArrayLike, method: str, **params: Any) -> FloatArray:
    """Post-process raw frequency estimates with the named consistency method.

    Parameters
    ----------
    estimate : Estimate or array_like of float
        An oracle's :class:`~ldpflow.core.oracles.base.Estimate` (the contract: the method
        takes ``n``, ``sigma``, ``var_const`` and ``var_slope`` from it), or a plain vector of
        raw estimates, in which case the statistics the method needs must be passed as
        keywords: ``sigma`` for ``base-cut``; ``var_const`` and ``var_slope`` for ``mle-apx``;
        ``n`` and ``sigma`` for ``power`` and ``power-ns``; ``p`` and ``q`` for ``ibu``.
    method : str
        One of :data:`METHODS`.
    **params
        Tuning parameters: ``alpha`` (``base-cut``, default 2); ``window`` and
        ``cells_per_sigma`` (``power``, ``power-ns``).

    Returns
    -------
    ndarray of float64, shape (d,)
        A new vector; ``post-pos`` returns the raw vector (clamp its query answers).

    Raises
    ------
    ValueError
        For an unknown method; for an estimate of ``n == 0`` reports or a non-finite vector;
        for a bad parameter value.
    TypeError
        For a parameter the method does not accept, a missing statistic for a plain vector,
        or a statistic given alongside an ``Estimate`` (which already carries it).
    """
    if not isinstance(method, str):
        raise TypeError(f"method must be a str, got {type(method).__name__}")
    if method not in _DISPATCH:
        raise ValueError(f"method must be one of {', '.join(METHODS)}; got {method!r}")
    function, needed, tuning = _DISPATCH[method]
    is_estimate = isinstance(estimate, Estimate)
    allowed = set(tuning) if is_estimate else set(tuning) | set(needed)
    unknown = sorted(set(params) - allowed)
    if unknown:
        if is_estimate and set(unknown) & set(_STATISTICS):
            raise TypeError(
                f"{', '.join(unknown)} for method {method!r} is taken from the Estimate; "
                "pass estimate.frequencies to give statistics explicitly"
            )
        accepted = sorted(allowed)
        raise TypeError(
            f"method {method!r} does not accept parameter(s) {', '.join(unknown)}; "
            f"it accepts {', '.join(accepted) if accepted else 'none'}"
        )
    if isinstance(estimate, Estimate):
        if estimate.n < 1:
            raise ValueError(
                f"estimate.n must be >= 1 to post-process, got {estimate.n} "
                "(an estimate of zero reports holds only NaN)"
            )
        stats = {name: getattr(estimate, name) for name in needed}
        return function(estimate.frequencies, **stats, **params)
    missing = [name for name in needed if name not in params]
    if missing:
        raise TypeError(
            f"method {method!r} on a plain vector needs the keyword(s) {', '.join(missing)} "
            "(or pass an Estimate, which carries them)"
        )
    return function(estimate, **params)
