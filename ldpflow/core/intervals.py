"""Uncertainty of raw frequency estimates: per-value standard errors and confidence intervals.

Contract (``docs/uncertainty.md``): for an :class:`~ldpflow.core.oracles.base.Estimate`
``f~`` of ``n`` reports, the standard error of ``f~_v`` is the square root of the oracle's
own variance model evaluated at the clipped estimate (the *plug-in* estimate)::

    f+   = clip(f~, 0, 1)
    se_v = sqrt(max(oracle.variance(n, f+)_v, var_const + var_slope * f+_v))

and the two-sided interval at confidence ``1 - a`` is the normal approximation
``f~_v -/+ z se_v`` with ``z = Phi^-1(1 - a/2)`` (1.96 at 95%). The intervals are those of
the **raw unbiased estimate** (method ``base``); a post-processed vector (Norm-Sub, ...) is
biased and its error is not this one: :func:`bootstrap_intervals` gives each method's own
intervals, by a seeded parametric bootstrap through the method (bias-corrected percentile).
Everything is vectorised over the domain; nothing here depends on Beam.

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
import hashlib
import json
import statistics
from typing import Any

import numpy as np
import numpy.typing as npt

from ldpflow.core import postprocess as _postprocess
from ldpflow.core import validation
from ldpflow.core.keys import ProtocolKey
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
    "DEFAULT_REPLICATES",
    "BOOTSTRAP_METHODS",
    "MAX_BOOTSTRAP_VALUES",
    "MIN_REPLICATES",
    "default_replicates",
    "bootstrap_seed",
    "bootstrap_intervals",
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
    if not 0.0 < validation.check_real(confidence, name="confidence") < 1.0:  # rejects NaN
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
    oracle = registry.from_key(ProtocolKey(estimate.oracle, estimate.parameters))
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
    #: The estimate the intervals are of: ``"base"`` (the raw estimate, normal
    #: approximation) or a post-processing method (:func:`bootstrap_intervals`).
    method: str = "base"
    #: The bootstrap's replicates and seed (0 and None for the normal approximation).
    replicates: int = 0
    seed: int | None = None

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
    return validation.check_positive_int(value, name=name, minimum=0)


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


# -- intervals of the post-processed estimates: a parametric bootstrap -------------------------
#: Bootstrap replicates per interval. The bias correction and the quantiles are estimated
#: from the replicates, and their sampling noise lowers the coverage: by about 0.01 at 200
#: replicates, 0.005 at 1000 (measured, ``docs/uncertainty.md``).
DEFAULT_REPLICATES = 1000
#: The methods whose bootstrap intervals were measured to cover (``docs/uncertainty.md``):
#: every post-processing method except the raw ones (``base``, ``post-pos``: use
#: :func:`confidence_intervals`), Norm-Mul, whose scale ``1 / sum max(f~, 0)`` the noise of
#: a large domain drives far from 1 (coverage 0.87 measured at d = 1024), and Power/PowerNS,
#: whose posterior-mean shrinkage toward a prior fitted on each replicate the bootstrap does
#: not undo (0.77 and 0.90 measured at d = 32), all at a nominal 0.95.
BOOTSTRAP_METHODS = ("base-pos", "base-cut", "norm", "norm-sub", "norm-cut", "cls", "mle-apx",
                     "ibu")
#: The most replicate values (``B * d``) one bootstrap holds: 2^22 float64, 32 MiB (and a
#: second copy, sorted per value): 1000 replicates up to d = 4096, fewer above.
MAX_BOOTSTRAP_VALUES = 1 << 22
#: The fewest replicates :func:`bootstrap_intervals` accepts.
MIN_REPLICATES = 100


def default_replicates(method: str, domain_size: int) -> int:
    """How many replicates the jobs draw for ``method`` on ``domain_size`` values.

    :data:`DEFAULT_REPLICATES`, fewer if needed to hold ``B * d`` within
    :data:`MAX_BOOTSTRAP_VALUES`; 0 (no bootstrap) when that leaves fewer than
    :data:`MIN_REPLICATES` (above 41,943 values), or for a method not in
    :data:`BOOTSTRAP_METHODS`.
    """
    if method not in BOOTSTRAP_METHODS:
        return 0
    fits = MAX_BOOTSTRAP_VALUES // max(int(domain_size), 1)
    replicates = min(DEFAULT_REPLICATES, fits)
    return replicates if replicates >= MIN_REPLICATES else 0


def bootstrap_seed(estimate: Estimate, method: str) -> int:
    """The bootstrap's seed, derived from the estimate and the method alone.

    SHA-256 of the oracle's name and parameters, ``n``, the method and the raw estimate's
    bytes (float64, little-endian): the same estimate gives the same replicates on every run
    and every machine, so result files are byte-identical on a rerun, and two estimates (two
    windows, two keys) do not share their noise.
    """
    digest = hashlib.sha256()
    digest.update(json.dumps([estimate.oracle, estimate.parameters, int(estimate.n), method],
                             sort_keys=True, default=str).encode("utf-8"))
    digest.update(np.ascontiguousarray(estimate.frequencies, dtype="<f8").tobytes())
    return int.from_bytes(digest.digest()[:8], "little")


def bootstrap_intervals(
    estimate: Estimate,
    method: str,
    confidence: float = DEFAULT_CONFIDENCE,
    *,
    replicates: int = DEFAULT_REPLICATES,
    seed: int | None = None,
    **params: Any,
) -> Intervals:
    """Per-value intervals of a post-processed estimate, by a parametric bootstrap.

    The raw estimate is asymptotically normal with the per-value standard errors of
    :func:`standard_errors`, so ``B = replicates`` raw replicates are drawn as
    ``f*_b = f~ + se * Z_b`` (``Z_b`` standard normal, one row per replicate) and each is
    pushed through the method (:func:`ldpflow.core.postprocess.postprocess` with the
    estimate's own statistics, ``n``, ``sigma``, ``p*``, ``q*``, the variance terms). The
    interval of value ``v`` is Efron's bias-corrected percentile interval of the replicates
    ``g(f*_b)_v`` (``g`` the method): their quantiles at ``Phi(2 z0_v -/+ z)``, with
    ``z0_v = Phi^-1((#{b: g(f*_b)_v < g(f~)_v} + #{b: g(f*_b)_v == g(f~)_v} / 2) / B)``.

    * The percentile interval follows the method's shape: it stays inside the method's
      range (never below 0 for a non-negative method) and is the image of the raw interval
      under an elementwise monotone method (Base-Pos).
    * The correction ``z0`` moves it back by the method's bias: a replicate is noisier than
      the estimate, so a shrinking method (Norm-Sub's shift, IBU's scale) shrinks it again,
      and the plain percentile interval would be centred on the bias twice.
    * At a value the method sets to 0 (a cut, a clip, the simplex's boundary) the bootstrap
      fails: most replicates are 0 too, and it would claim ``[0, 0]`` for a small true
      frequency. There the interval is ``[0, max(bootstrap high, f~_v + z se_v)]``: the
      upper end of the raw interval, which is what the 0 leaves known.

    The interval is then widened, if needed, to hold the method's own estimate ``g(f~)_v``,
    so that the estimate a reader sees always lies in its interval.

    Parameters
    ----------
    estimate : Estimate
        An oracle's estimate of ``n >= 1`` reports.
    method : str
        One of :data:`BOOTSTRAP_METHODS`. For ``base`` and ``post-pos`` (the raw vector) use
        :func:`confidence_intervals`.
    confidence : float, default 0.95
    replicates : int, default :data:`DEFAULT_REPLICATES`
        ``B >= MIN_REPLICATES`` (100); :func:`default_replicates` is the jobs' choice.
    seed : int, optional
        The generator's seed; default :func:`bootstrap_seed` of the estimate and method.
    **params
        The method's tuning parameters (``alpha``, ``window``, ...).

    Returns
    -------
    Intervals
        ``estimates`` the method's output ``g(f~)``, ``standard_errors`` the replicates'
        standard deviation per value, ``low``/``high`` the bounds, ``method``, ``replicates``
        and ``seed`` as used (``z`` is the normal quantile of ``confidence``, for reference).

    Raises
    ------
    TypeError, ValueError
        As :func:`standard_errors` and :func:`~ldpflow.core.postprocess.postprocess`; for
        ``replicates < 100``; ``ValueError`` for a method not in :data:`BOOTSTRAP_METHODS`.

    Notes
    -----
    The replicates vary the values independently: the raw errors' correlations are
    ``O(1/n)`` in covariance (``docs/uncertainty.md``) and the methods' coupling of the
    values (the shift of Norm-Sub, the scale of IBU) comes from the replicates' own sum.
    Cost: ``B`` calls of the method on a vector of ``d`` (for Norm-Sub, ``B`` sorts) and
    one sort of the ``(B, d)`` replicates per column; memory ``2 B d`` float64.
    """
    estimate = _check_estimate(estimate)
    confidence = _check_confidence(confidence)
    validation.check_positive_int(replicates, name="replicates", minimum=MIN_REPLICATES)
    if method not in BOOTSTRAP_METHODS:
        raise ValueError(
            f"method must be one of {', '.join(BOOTSTRAP_METHODS)} for bootstrap intervals, "
            f"got {method!r} (base and post-pos: confidence_intervals; power and power-ns: "
            "their measured coverage is below nominal, docs/uncertainty.md)")
    centre = _postprocess.postprocess(estimate, method, **params)
    seed = bootstrap_seed(estimate, method) if seed is None else int(seed)
    se = standard_errors(estimate)
    rng = np.random.default_rng(seed)
    stats = {name: getattr(estimate, name) for name in _postprocess.statistics_of(method)}
    out = np.empty((int(replicates), se.size))
    for b in range(out.shape[0]):  # over replicates only; each call is vectorised over d
        draw = estimate.frequencies + se * rng.standard_normal(se.size)
        out[b] = _postprocess.postprocess(draw, method, **stats, **params)
    z = normal_quantile(confidence)
    per_value = np.ascontiguousarray(out.T)  # (d, B): each value's replicates contiguous
    del out
    spread = per_value.std(axis=1, ddof=1)
    low, high = _bias_corrected_percentiles(per_value, centre, z)
    low, high = np.minimum(low, centre), np.maximum(high, centre)
    # A value the method set to 0 keeps the raw interval's upper end: the 0 says only that
    # the raw estimate fell below a cut, and the bootstrap of a hard cut is inconsistent
    # there (most replicates are cut too, and it would claim [0, 0] for a small f > 0).
    zero = centre == 0.0
    high = np.where(zero, np.maximum(high, estimate.frequencies + z * se), high)
    return Intervals(centre, spread, low, high, confidence,
                     normal_quantile(confidence), method, int(replicates), seed)


def _bias_corrected_percentiles(replicates: FloatArray, centre: FloatArray, z: float
                                ) -> tuple[FloatArray, FloatArray]:
    """Efron's bias-corrected percentile bounds of each row of ``replicates`` (d, B),
    which this sorts in place.

    ``z0_v = Phi^-1((#{g*_bv < g_v} + #{g*_bv == g_v} / 2) / B)`` (ties at a cut count
    half; clipped to ``[1/(2B), 1 - 1/(2B)]``) measures how far the replicates' median lies
    from the estimate; the bounds are the replicates' quantiles at ``Phi(2 z0 -/+ z)``
    (linear interpolation between order statistics).
    """
    b = replicates.shape[1]
    share = (np.count_nonzero(replicates < centre[:, None], axis=1)
             + 0.5 * np.count_nonzero(replicates == centre[:, None], axis=1)) / b
    share = np.clip(share, 0.5 / b, 1.0 - 0.5 / b)
    normal = statistics.NormalDist()
    # At most 2B + 1 distinct shares: the normal functions run once per distinct value.
    distinct, where = np.unique(share, return_inverse=True)
    z0 = np.array([normal.inv_cdf(float(s)) for s in distinct])
    replicates.sort(axis=1)  # rows are contiguous: a fast sort per value
    rows = np.arange(replicates.shape[0])

    def at(sign: float) -> FloatArray:
        levels = np.array([normal.cdf(float(2.0 * x + sign * z)) for x in z0])[where]
        position = levels * (b - 1)
        below = np.floor(position).astype(np.int64)
        above = np.minimum(below + 1, b - 1)
        weight = position - below
        return (replicates[rows, below] * (1.0 - weight)
                + replicates[rows, above] * weight)

    return at(-1.0), at(1.0)
