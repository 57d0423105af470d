"""Projective geometry response (PGR).

Contract: ``docs/spec/oracles.md``. Reference: Feldman, Nelson, Nguyen, Talwar, "Private
Frequency Estimation via Projective Geometry", ICML 2022.

Values are points of the projective space ``P^{t-1}(F_q)`` and a report is one of its
hyperplanes, so a report is one integer in ``[0, K)``, ``K = (q^t - 1)/(q - 1)``. Points and
hyperplanes are both indexed by normalised vectors of ``F_q^t`` (first nonzero coordinate 1)
in one canonical order (:func:`vector_codes`); the hyperplane of ``u`` is ``{x : <u, x> = 0}``.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np
import numpy.typing as npt

from ldpflow.core import randomness
from ldpflow.core.oracles.base import Accumulator, FrequencyOracle, IndexReports, Reports

__all__ = [
    "ProjectiveGeometryResponse",
    "choose_geometry",
    "geometry_constants",
    "vector_codes",
    "fast_support_counts",
    "naive_support_counts",
    "transform_counts",
]

# The transform decoder's rounding must stay far from 1/2; in double precision it stays below
# 1e-6 at n = 10^9 reports (tests/core/test_pgr.py).
_ROUNDING_LIMIT = 1e-3
# The largest transform (q^t entries, 16 bytes each while transformed) the decoder will use.
_MAX_TRANSFORM = 1 << 24


def _is_prime(m: int) -> bool:
    if m < 2:
        return False
    if m % 2 == 0:
        return m == 2
    return all(m % f for f in range(3, math.isqrt(m) + 1, 2))


def _prime_at_most(x: float) -> int | None:
    m = math.floor(x)
    while m >= 2 and not _is_prime(m):
        m -= 1
    return m if m >= 2 else None


def _prime_at_least(x: float) -> int:
    m = max(2, math.ceil(x))
    while not _is_prime(m):
        m += 1
    return m


def _dimension(q: int, domain_size: int) -> int:
    """The smallest ``t >= 2`` with ``K = (q^t - 1)/(q - 1) >= d``."""
    t = 2
    while (q**t - 1) // (q - 1) < domain_size:
        t += 1
    return t


def geometry_constants(q: int, t: int, epsilon: float) -> tuple[int, int, int, float, float]:
    """``(K, h, h2, p*, q*)`` of PGR over ``P^{t-1}(F_q)``.

    ``K`` points (and hyperplanes), ``h = (q^{t-1}-1)/(q-1)`` points per hyperplane (and
    hyperplanes per point), ``h2 = (q^{t-2}-1)/(q-1)`` hyperplanes through two distinct
    points. With ``Z = h e + K - h``: ``p* = h e / Z`` and ``q* = (h2 e + h - h2) / Z``.
    """
    e = math.exp(epsilon)
    K = (q**t - 1) // (q - 1)
    h = (q ** (t - 1) - 1) // (q - 1)
    h2 = (q ** (t - 2) - 1) // (q - 1)
    z = h * e + (K - h)
    return K, h, h2, h * e / z, (h2 * e + (h - h2)) / z


def _variance_constant(q: int, t: int, epsilon: float) -> float:
    _, _, _, p, qs = geometry_constants(q, t, epsilon)
    return qs * (1 - qs) / (p - qs) ** 2


def max_transform_size(domain_size: int) -> int:
    """The largest decoding transform (``q^t`` entries) :func:`choose_geometry` allows:
    ``max(2**24, 4 d)``, which ``q = 2`` always meets (``2^t <= 2 (d + 1)``)."""
    return max(_MAX_TRANSFORM, 4 * domain_size)


@functools.lru_cache(maxsize=256)
def choose_geometry(epsilon: float, domain_size: int) -> tuple[int, int]:
    """``(q, t)``: the field size and dimension PGR uses for ``epsilon`` and ``d``.

    The paper takes ``q`` close to ``e^epsilon + 1``, where ``q*(1-q*)/(p*-q*)^2`` tends to
    subset selection's ``4e/(e-1)^2`` as ``t`` grows. The rule: the candidates are the
    largest prime ``<= e^epsilon + 1``, the smallest prime ``>= e^epsilon + 1``, the primes
    below 64, and ``r``, the smallest prime ``>= d - 1`` (with ``t = 2``, randomized response
    over ``r + 1`` points); a candidate above ``r`` is replaced by ``r``. Each takes the
    smallest ``t >= 2`` with ``K >= d``. A candidate with ``t >= 3`` whose decoding
    transform exceeds :func:`max_transform_size` (``q^t`` entries) is dropped. The candidate
    of smallest variance constant ``q*(1-q*)/(p*-q*)^2`` wins, the smaller ``q`` on a tie.
    Both ends derive ``(q, t)`` from ``epsilon`` and ``d``, so the wire form needs no field
    of its own.
    """
    target = math.exp(epsilon) + 1.0
    cap = _prime_at_least(domain_size - 1)
    near = {c for c in (_prime_at_most(target), _prime_at_least(target)) if c is not None}
    near |= {c for c in range(2, 64) if _is_prime(c)}
    limit = max_transform_size(domain_size)
    scored = []
    for q in {min(c, cap) for c in near} | {cap}:
        t = _dimension(q, domain_size)
        if t == 2 or q**t <= limit:
            scored.append((_variance_constant(q, t, epsilon), q, t))
    _, q, t = min(scored)
    return q, t


def _block_offsets(q: int, t: int) -> np.ndarray:
    """``(q^j - 1)/(q - 1)`` for ``j = 0 .. t``: where each block of the order starts."""
    return np.array([(q**j - 1) // (q - 1) for j in range(t + 1)], dtype=np.int64)


def vector_codes(indices: npt.ArrayLike, q: int, t: int) -> np.ndarray:
    """The normalised vector of each index, as its base-``q`` code ``sum_i x_i q^(t-1-i)``.

    The canonical order lists the normalised vectors by increasing code: block ``j``
    (``j = 0 .. t-1``) holds the ``q^j`` vectors with leading 1 at position ``t-1-j``, whose
    codes are ``q^j .. 2 q^j - 1``. Index ``i`` lies in the block ``j`` with
    ``(q^j-1)/(q-1) <= i < (q^(j+1)-1)/(q-1)`` and has code ``q^j + i - (q^j-1)/(q-1)``.
    """
    idx = np.asarray(indices, dtype=np.int64)
    offsets = _block_offsets(q, t)
    j = np.searchsorted(offsets, idx, side="right") - 1
    return q**j + idx - offsets[j]


def _codes_to_indices(codes: np.ndarray, q: int, t: int) -> np.ndarray:
    """Inverse of :func:`vector_codes` on normalised codes."""
    offsets = _block_offsets(q, t)
    powers = q ** np.arange(t, dtype=np.int64)
    j = np.searchsorted(powers, codes, side="right") - 1  # q^j <= code < q^(j+1)
    return offsets[j] + codes - powers[j]


def _digits(codes: np.ndarray, q: int, t: int) -> np.ndarray:
    """``(n, t)`` coordinates, most significant first."""
    powers = q ** np.arange(t - 1, -1, -1, dtype=np.int64)
    return (codes[:, None] // powers) % q


def _normalise(w: np.ndarray, q: int) -> np.ndarray:
    """Scale each nonzero row of ``w`` (``(n, t)`` over ``F_q``) so its first nonzero is 1."""
    inverse = np.array([0] + [pow(a, -1, q) for a in range(1, q)], dtype=np.int64)
    lead = np.argmax(w != 0, axis=1)
    scale = inverse[w[np.arange(w.shape[0]), lead]]
    return (w * scale[:, None]) % q


def _encode(w: np.ndarray, q: int) -> np.ndarray:
    t = w.shape[1]
    return w @ (q ** np.arange(t - 1, -1, -1, dtype=np.int64))


def naive_support_counts(histogram: npt.ArrayLike, q: int, t: int, domain_size: int) -> np.ndarray:
    """``c = A hist`` with the explicit ``d x K`` point-hyperplane incidence matrix (small K)."""
    hist = np.asarray(histogram, dtype=np.int64)
    K = hist.size
    points = _digits(vector_codes(np.arange(domain_size), q, t), q, t)
    planes = _digits(vector_codes(np.arange(K), q, t), q, t)
    incidence = (points @ planes.T) % q == 0
    return incidence.astype(np.int64) @ hist


def transform_counts(histogram: np.ndarray, q: int, t: int, points: np.ndarray) -> np.ndarray:
    """``(n + sum_{lambda != 0} Re H^(lambda x)) / q`` for the rows ``x`` of ``points``, in
    floating point, before rounding (:func:`fast_support_counts`).

    ``H`` is real, so ``H^(-y)`` is the conjugate of ``H^(y)``: the real transform keeps the
    last axis' first ``q // 2 + 1`` frequencies, and a ``y`` past them is read as ``-y``.
    """
    cube = np.zeros(q**t, dtype=np.float64)
    cube[vector_codes(np.arange(histogram.size), q, t)] = histogram
    half = q // 2 + 1
    spectrum = np.fft.rfftn(cube.reshape((q,) * t)).real.reshape(-1)
    del cube
    weights = np.concatenate([q ** np.arange(t - 2, -1, -1, dtype=np.int64) * half, [1]])
    total = np.full(points.shape[0], float(histogram.sum()))
    for lam in range(1, q):  # a loop over the field's elements, not over reports
        y = (lam * points) % q
        past = y[:, -1] >= half
        y[past] = (-y[past]) % q
        total += spectrum[y @ weights]
    return total / q


def fast_support_counts(histogram: npt.ArrayLike, q: int, t: int, domain_size: int) -> np.ndarray:
    """``c_x = #{reports y : x in y}`` for the first ``domain_size`` points, exactly.

    With ``H`` the histogram placed on the normalised vectors of ``F_q^t`` (zero elsewhere)
    and ``H^(x) = sum_u H(u) w^<u,x>`` its ``t``-dimensional DFT of size ``q`` per axis
    (``w = exp(-2 pi i/q)``), ``sum_{lambda in F_q} H^(lambda x) = q c_x`` because
    ``sum_lambda w^(lambda s)`` is ``q`` for ``s = 0`` and 0 otherwise; ``H^(0) = n``. So
    ``c_x = (n + sum_{lambda != 0} H^(lambda x)) / q``: one FFT of ``q^t`` entries
    (``O(q^t t log q)``) and ``(q - 1) d`` look-ups, rounded to integers (the rounding error
    is checked). For ``t = 2`` a hyperplane is one point, ``u^perp``, and the counts are a
    permutation of the histogram.
    """
    hist = np.asarray(histogram, dtype=np.int64)
    n = int(hist.sum())
    points = _digits(vector_codes(np.arange(domain_size), q, t), q, t)
    if t == 2:  # <u, x> = 0 with x = (x1, x2): u is (x2, -x1), normalised
        u = _normalise(np.stack([points[:, 1], (-points[:, 0]) % q], axis=1), q)
        return hist[_codes_to_indices(_encode(u, q), q, t)].copy()
    counts = transform_counts(hist, q, t, points)
    rounded = np.rint(counts)
    error = float(np.max(np.abs(counts - rounded))) if counts.size else 0.0
    if error > _ROUNDING_LIMIT:  # below 1e-6 at n = 10^9 (tested); refuse rather than guess
        raise ArithmeticError(f"PGR transform decoder rounding error {error} exceeds "
                              f"{_ROUNDING_LIMIT} (n = {n})")
    return rounded.astype(np.int64)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProjectiveGeometryResponse(IndexReports, FrequencyOracle):
    """Projective geometry response (Feldman, Nelson, Nguyen, Talwar, ICML 2022).

    Value ``v`` is point ``v`` of ``P^{t-1}(F_q)`` (:func:`vector_codes`); the client reports
    a hyperplane ``y`` with ``P(y | v) = e/Z`` if ``v in y`` and ``1/Z`` otherwise,
    ``Z = h e + K - h``. ``q`` and ``t`` follow from ``epsilon`` and ``d``
    (:func:`choose_geometry`): ``q`` a prime near ``e^epsilon + 1``, ``t`` the smallest with
    ``K >= d``.

    Notes
    -----
    epsilon-LDP per report: every output has probability ``e/Z`` or ``1/Z``. Report
    ``ceil(log2 K)`` bits (about ``log2 d``; ``K < q d``). Aggregation: a histogram of the
    ``K`` hyperplanes; estimation: ``c_v`` for every value from one ``t``-dimensional DFT of
    size ``q`` per axis (:func:`fast_support_counts`), ``O(q^t t log q)``. A pure protocol:
    ``p* = h e/Z``, ``q* = (h2 e + h - h2)/Z`` (``h2`` hyperplanes through two points), and
    users' supports are independent, so the variance is exactly the base formula; its
    constant tends to ``(e+q-1)^2/((e-1)^2 (q-1)) / n`` as ``t`` grows, subset selection's
    ``4e/((e-1)^2 n)`` at ``q = e + 1``.
    """

    name = "pgr"
    audit_cells = "pgr"
    epsilon: float
    domain_size: int

    def __post_init__(self) -> None:
        super().__post_init__()
        q, _ = self.geometry
        if q > 2**31:  # codes of t = 2 reach q^2: int64
            raise ValueError(f"PGR needs a field size q <= 2**31; epsilon={self.epsilon!r} "
                             f"and domain_size={self.domain_size!r} give q = {q}")

    @property
    def geometry(self) -> tuple[int, int]:
        """``(q, t)``: the field size and the dimension of ``F_q^t``."""
        return choose_geometry(self.epsilon, self.domain_size)

    @property
    def field_size(self) -> int:
        """``q``, a prime."""
        return self.geometry[0]

    @property
    def order(self) -> int:
        """``K = (q^t - 1)/(q - 1)``: the number of points and of hyperplanes."""
        q, t = self.geometry
        return (q**t - 1) // (q - 1)

    @property
    def p(self) -> float:
        return geometry_constants(*self.geometry, self.epsilon)[3]

    @property
    def q(self) -> float:
        return geometry_constants(*self.geometry, self.epsilon)[4]

    @property
    def report_bits(self) -> int:
        return (self.order - 1).bit_length()

    @property
    def index_range(self) -> int:
        return self.order

    def _perturb(self, values: np.ndarray, source: randomness.RandomSource) -> Reports:
        """Draw ``y`` exactly: membership with probability ``p*``, then a uniform hyperplane
        with that membership.

        With ``x`` the value's point and ``k`` its leading coordinate (``x_k = 1``), draw
        ``s = <w, x>``: 0 for a member, uniform in ``1 .. q-1`` otherwise; the other ``t - 1``
        coordinates of ``w`` uniformly; and solve ``w_k = s - sum_{j != k} w_j x_j``. This is
        a bijection onto the vectors ``w`` with ``<w, x> = s``, so ``w`` is uniform over the
        nonzero vectors of the wanted kind (a member row with ``w = 0`` is drawn again).
        Each hyperplane is ``q - 1`` such vectors (its nonzero multiples), so the normalised
        ``w`` is uniform over the hyperplanes of that kind.
        """
        q, t = self.geometry
        n = values.size
        x = _digits(vector_codes(values, q, t), q, t)
        lead = np.argmax(x != 0, axis=1)
        member = source.bernoulli(self.p, n)
        w = np.empty((n, t), dtype=np.int64)
        todo = np.arange(n)
        while todo.size:
            m = todo.size
            s = np.where(member[todo], 0, 1 + source.below(q - 1, m))
            free = source.below(q, m * t).reshape(m, t)
            rows = np.arange(m)
            free[rows, lead[todo]] = 0
            dot = np.sum(free * x[todo], axis=1)
            free[rows, lead[todo]] = (s - dot) % q
            w[todo] = free
            todo = todo[~free.any(axis=1)]  # w = 0: only for a member, chance q^-(t-1)
        codes = _encode(_normalise(w, q), q)
        return Reports(self.name, {"value": _codes_to_indices(codes, q, t)})

    def support_counts(self, accumulator: Accumulator) -> np.ndarray:
        q, t = self.geometry
        return fast_support_counts(accumulator.counts, q, t, self.domain_size)
