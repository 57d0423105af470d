"""Uncertainty of raw frequency estimates: per-value standard errors and confidence intervals.

Contract (``docs/uncertainty.md``): for an :class:`~ldpflow.core.oracles.base.Estimate`
``f~`` of ``n`` reports, the standard error of ``f~_v`` is the square root of the oracle's
own variance model evaluated at the clipped estimate (the *plug-in* estimate)::

    f+   = clip(f~, 0, 1)
    se_v = sqrt(max(oracle.variance(n, f+)_v, var_const + var_slope * f+_v))

and the two-sided interval at confidence ``1 - a`` is the normal approximation
``f~_v -/+ z se_v`` with ``z = Phi^-1(1 - a/2)`` (1.96 at 95%). The intervals are those of
the **raw unbiased estimate** (method ``base``); a post-processed vector (Norm-Sub, ...) is
biased and its error is not this one. Everything is vectorised over the domain; nothing here
depends on Beam.

Why these choices:

* **The oracle's variance, not a formula of this module.** The variance of ``f~_v`` depends
  on the true frequency ``f_v`` (exactly ``var_const + var_slope f_v`` for the pure protocols
  of ``docs/spec/oracles.md``); the oracle knows its model best, and any refinement of it
  (frequency-dependent terms, data-dependent terms) reaches the intervals unchanged. Where
  the oracle's analytic ``variance(n, f)`` and the variance terms carried by the Estimate
  differ (the one-bit scheme: its Estimate adds the column-sampling term estimated from the
  data), the larger is used.
* **Plug-in.** ``f_v`` is unknown; ``f~_v`` is unbiased for it, and the variance is affine
  in ``f_v``, so ``var_const + var_slope f~_v`` would be unbiased for the variance. Clipping
  to ``[0, 1]`` keeps the plug-in inside the model's domain (where the variance is positive)
  at the price of a small bias: at ``f_v = 0``, ``E[max(f~_v, 0)] = sigma / sqrt(2 pi)``, so
  the plug-in variance is off by ``var_slope * sigma / sqrt(2 pi)``, a relative error of
  order ``sigma`` (below 1e-2 at every ``n`` where the normal approximation holds).
* **Normal approximation.** ``f~_v`` is an affine function of a sum of ``n`` independent
  bounded terms (the reports' support indicators), so it is asymptotically normal; the
  intervals are accurate when the expected support count ``n (q* + (p*-q*) f_v)`` is large
  (hundreds), which is why they are meant for large ``n``. Coverage is measured by
  simulation in ``tests/core/test_intervals.py`` and reported in ``docs/uncertainty.md``.

The intervals are marginal (per value): over ``d`` values of frequency 0, about
``d (1 - confidence) / 2`` lie entirely above 0 by chance. :func:`significant` returns those
whose interval excludes 0; :func:`expected_false_positives` says how many of them noise
alone would give at most.
"""

from __future__ import annotations

import dataclasses
import numbers
import statistics

import numpy as np
import numpy.typing as npt

from ldpflow.core.oracles import registry
from ldpflow.core.oracles.base import Estimate

__all__ = [
    "DEFAULT_CONFIDENCE",
    "Intervals",
    "normal_quantile",
    "standard_errors",
    "confidence_intervals",
    "top",
    "significant",
    "expected_false_positives",
]

#: The default two-sided confidence level.
DEFAULT_CONFIDENCE = 0.95

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def _check_estimate(estimate: Estimate) -> Estimate:
    if not isinstance(estimate, Estimate):
        raise TypeError(f"estimate must be an Estimate, got {type(estimate).__name__}")
    if estimate.n < 1:
        raise ValueError(
            f"estimate.n must be >= 1 for standard errors, got {estimate.n} "
            "(an estimate of zero reports holds only NaN)"
        )
    if not np.all(np.isfinite(estimate.frequencies)):
        raise ValueError("estimate.frequencies must be finite to compute standard errors")
    return estimate


def _check_confidence(confidence: float) -> float:
    if isinstance(confidence, bool) or not isinstance(confidence, numbers.Real):
        raise TypeError(f"confidence must be a real number, got {type(confidence).__name__}")
    if not 0.0 < float(confidence) < 1.0:  # also rejects NaN
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    return float(confidence)


def normal_quantile(confidence: float = DEFAULT_CONFIDENCE) -> float:
    """``z = Phi^-1((1 + confidence) / 2)``: the two-sided normal critical value.

    Computed as ``-Phi^-1((1 - confidence) / 2)`` (the upper tail), which keeps precision for
    confidence levels close to 1; 1.959964 at 0.95.
    """
    confidence = _check_confidence(confidence)
    return -statistics.NormalDist().inv_cdf((1.0 - confidence) / 2.0)


def standard_errors(estimate: Estimate) -> FloatArray:
    """The plug-in standard error of every raw estimate ``f~_v`` (see the module notes).

    Parameters
    ----------
    estimate : Estimate
        An oracle's estimate of ``n >= 1`` reports.

    Returns
    -------
    ndarray of float64, shape (d,)
        ``sqrt(max(oracle.variance(n, f+), var_const + var_slope f+))`` with
        ``f+ = clip(f~, 0, 1)``; positive.

    Raises
    ------
    TypeError
        For something other than an Estimate.
    ValueError
        For an estimate of zero reports or with non-finite frequencies.
    """
    estimate = _check_estimate(estimate)
    plug_in = np.clip(estimate.frequencies, 0.0, 1.0)
    oracle = registry.make(estimate.oracle, **estimate.parameters)
    analytic = np.broadcast_to(
        np.asarray(oracle.variance(estimate.n, plug_in), dtype=np.float64), plug_in.shape)
    carried = estimate.var_const + estimate.var_slope * plug_in
    return np.sqrt(np.maximum(analytic, carried))


@dataclasses.dataclass(frozen=True, eq=False)
class Intervals:
    """Per-value confidence intervals of a raw estimate (normal approximation).

    Attributes
    ----------
    estimates : ndarray of float64, shape (d,)
        The raw unbiased estimates ``f~``, the intervals' centres.
    standard_errors : ndarray of float64, shape (d,)
        :func:`standard_errors`.
    low, high : ndarray of float64, shape (d,)
        ``f~ -/+ z * se`` (not clipped to [0, 1]: clipping would change the coverage).
    confidence : float
        The two-sided confidence level.
    z : float
        :func:`normal_quantile` of ``confidence``.
    """

    estimates: FloatArray
    standard_errors: FloatArray
    low: FloatArray
    high: FloatArray
    confidence: float
    z: float

    @property
    def domain_size(self) -> int:
        return int(self.estimates.shape[0])


def confidence_intervals(estimate: Estimate, confidence: float = DEFAULT_CONFIDENCE
                         ) -> Intervals:
    """Two-sided intervals ``f~_v -/+ z se_v`` of every raw estimate.

    Parameters
    ----------
    estimate : Estimate
        An oracle's estimate of ``n >= 1`` reports.
    confidence : float, default 0.95
        In ``(0, 1)``.

    Returns
    -------
    Intervals

    Raises
    ------
    TypeError, ValueError
        As :func:`standard_errors`; ``ValueError`` for a confidence outside ``(0, 1)``.
    """
    z = normal_quantile(confidence)
    se = standard_errors(estimate)
    f = np.array(estimate.frequencies, dtype=np.float64)
    return Intervals(f, se, f - z * se, f + z * se, float(confidence), z)


def _check_count(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return int(value)


def _by_estimate(f: FloatArray, candidates: IntArray) -> IntArray:
    """``candidates`` ordered by decreasing estimate, ties toward the smaller value."""
    order = np.lexsort((candidates, -f[candidates]))
    return candidates[order]


def top(intervals: Intervals, k: int = 20) -> IntArray:
    """The values of the ``k`` largest raw estimates, largest first (ties: smaller value first).

    Returns fewer than ``k`` values when the domain is smaller.
    """
    k = _check_count(k, "k")
    f = intervals.estimates
    if k >= f.size:
        return _by_estimate(f, np.arange(f.size, dtype=np.int64))
    part = np.argpartition(-f, k - 1)[:k] if k else np.zeros(0, dtype=np.int64)
    # argpartition breaks ties at the k-th estimate arbitrarily: take the whole tie group,
    # order it, then cut to k.
    if k:
        kth = f[part].min()
        part = np.union1d(part, np.flatnonzero(f == kth))
    return _by_estimate(f, part.astype(np.int64))[:k]


def significant(intervals: Intervals, limit: int | None = None) -> tuple[IntArray, int]:
    """The values whose interval lies entirely above 0 (``low > 0``), largest estimate first.

    A true frequency is never negative, so an interval entirely below 0 says nothing about
    its value except that noise put it there; only ``low > 0`` is evidence that the value
    occurs. The test is marginal: see :func:`expected_false_positives`.

    Parameters
    ----------
    intervals : Intervals
    limit : int, optional
        Keep at most this many (those of the largest estimates); ``None`` keeps all.

    Returns
    -------
    values : ndarray of int64
        At most ``limit`` values, ordered by decreasing estimate (ties: smaller value first).
    count : int
        How many values are significant in all (before the limit).
    """
    if limit is not None:
        limit = _check_count(limit, "limit")
    found = np.flatnonzero(intervals.low > 0.0).astype(np.int64)
    ordered = _by_estimate(intervals.estimates, found)
    return (ordered if limit is None else ordered[:limit]), int(found.size)


def expected_false_positives(intervals: Intervals) -> float:
    """``d (1 - confidence) / 2``: the expected number of significant values if every true
    frequency were 0, an upper bound on those that noise alone makes significant (a value of
    frequency 0 has ``low > 0`` with probability ``(1 - confidence)/2`` under the normal
    approximation)."""
    return intervals.domain_size * (1.0 - intervals.confidence) / 2.0
