"""Apple's sketch oracles: Count Mean Sketch (CMS) and Hadamard Count Mean Sketch (HCMS).

Apple Differential Privacy Team, "Learning with Privacy at Scale" (Apple Machine Learning
Journal, 2017). Both hash the domain into ``m`` buckets with ``k`` public hash functions;
a device picks one function ``j`` uniformly and reports about ``h_j(v)`` only, so a report
is small whatever the domain. The hash functions are the portable affine family
(:mod:`ldpflow.core.hashing`) with the public seeds :func:`sketch_seeds`.

* **CMS**: the report is ``j`` and an ``m``-bit vector: bit ``h_j(v)`` is 1 and every other
  bit 0, then every bit is flipped with probability ``1/(e^(ε/2)+1)``. Two values differ in
  at most two bits: ``e^ε``, exactly.
* **HCMS**: the report is ``j``, a uniform ``l`` in ``[0, m)`` and one bit: the sign
  ``H_m[h_j(v), l]`` of the Sylvester–Hadamard matrix (``(-1)^popcount(h & l)``), kept
  with probability ``e^ε/(e^ε+1)``. One bit: ``e^ε``, exactly.

The server keeps integer sums per ``(j, l)`` cell (CMS: the bits set and the reports per
``j``; HCMS: the signed bits), so accumulators merge exactly. With ``c`` the debiasing
constant (CMS ``(e^(ε/2)+1)/(e^(ε/2)-1)``, HCMS ``(e^ε+1)/(e^ε-1)``) and ``T(v)`` the
debiased sketch read at ``h_j(v)`` summed over ``j``, the estimate is
``f~(v) = m/(m-1) (T(v)/n - 1/m)``: unbiased over the choice of hash functions. With the
functions fixed, another value ``u`` adds ``f_u`` times the excess of the functions where
it collides with ``v`` over ``k/m``: over pairs of values that behaves as a variance
``(m/(m-1))^2 (1-1/m)/(m k) sum_u f_u^2`` (:meth:`_Sketch.collision_variance`), which
``variance`` adds for a whole distribution and ``Estimate.sigma`` estimates from the data;
a larger ``k`` averages it out.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from typing import Any

import numpy as np
import numpy.typing as npt

from ldpflow.core import bitvectors, hashing, randomness, registry, validation
from ldpflow.core.oracles.base import Accumulator, Estimate, FrequencyOracle, Reports

__all__ = ["CountMeanSketch", "HadamardCountMeanSketch", "sketch_seeds", "MAX_NUM_HASHES"]

#: The most hash functions a sketch may use.
MAX_NUM_HASHES = 1 << 16
#: Values hashed at a time when reading the sketch (bounds the k x chunk temporaries).
_READ_CHUNK = 1 << 14


def sketch_seeds(num_hashes: int) -> np.ndarray:
    """The public seeds of hash functions ``0 .. k-1``: ``mix(GOLDEN_GAMMA * (j + 1))``."""
    j = np.arange(1, num_hashes + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return hashing.splitmix64_mix(j * np.uint64(hashing.GOLDEN_GAMMA))


def _hash_range_parameter() -> Any:
    """The sketches' ``hash_range`` field: ``m``, the buckets of each hash."""
    return registry.parameter(1024, help="the buckets of each hash (default 1024).")


def _num_hashes_parameter() -> Any:
    """The sketches' ``num_hashes`` field: a report must say how many hashes it chose from
    (its column alone does not tell), so it is required on the wire."""
    return registry.parameter(256, help="the hash functions a client picks one of (default "
                                        "256).", wire_required=True)


class _Sketch(FrequencyOracle):
    """Shared parameters, hashing and estimation of CMS and HCMS."""

    epsilon: float
    domain_size: int
    hash_range: int
    num_hashes: int

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "hash_range",
                           validation.check_power_of_two(self.hash_range, name="hash_range"))
        k = self.num_hashes
        if not validation.is_integer(k) or not 1 <= k <= MAX_NUM_HASHES:
            raise ValueError(f"num_hashes must be an integer in [1, {MAX_NUM_HASHES}], got {k!r}")
        object.__setattr__(self, "num_hashes", int(k))

    @property
    def value_bits(self) -> int:
        return max(1, (self.domain_size - 1).bit_length())

    @property
    @abc.abstractmethod
    def c(self) -> float:
        """The debiasing constant of one report."""

    def _hash(self, j: np.ndarray, values: np.ndarray) -> np.ndarray:
        seeds = sketch_seeds(self.num_hashes)[j]
        return hashing.hash_values(seeds, values, self.value_bits, self.hash_range)

    def _read(self, table: np.ndarray) -> np.ndarray:
        """``sum_j table[j, h_j(v)]`` for every value ``v``, in chunks of values."""
        k, d = self.num_hashes, self.domain_size
        rows = np.repeat(np.arange(k), min(d, _READ_CHUNK))
        out = np.empty(d, dtype=np.float64)
        for start in range(0, d, _READ_CHUNK):
            values = np.arange(start, min(d, start + _READ_CHUNK))
            r = rows[: k * values.size]
            buckets = self._hash(r, np.tile(values, k)).reshape(k, values.size)
            out[start:start + values.size] = table[np.arange(k)[:, None], buckets].sum(axis=0)
        return out

    def _finish(self, total: np.ndarray, n: int) -> Estimate:
        """The estimate, with the collision term of ``sigma`` estimated from it."""
        m = self.hash_range
        freqs = m / (m - 1) * (total / n - 1.0 / m)
        const, slope = self._variance_terms(n)
        const += self.collision_variance(float(np.sum(np.clip(freqs, 0.0, 1.0) ** 2)))
        return Estimate(freqs, n, math.sqrt(const), None, None, const, slope, self.name,
                        self.parameters, None)

    def _dominant(self, n: int) -> float:
        m = self.hash_range
        return (m / (m - 1)) ** 2 / n

    def collision_variance(self, sum_of_squares: float) -> float:
        """The variance the ``k`` fixed hash functions add, as if drawn at random:
        ``(m/(m-1))^2 (1 - 1/m) / (m k)`` times ``sum_u f_u^2`` over the other values."""
        m, k = self.hash_range, self.num_hashes
        return (m / (m - 1)) ** 2 * (1 - 1 / m) / (m * k) * sum_of_squares

    def variance(self, n: int, frequency: float | npt.ArrayLike = 0.0) -> float | np.ndarray:
        """The variance of ``f~_v``: the reports' noise, plus, when ``frequency`` is the
        whole distribution (one entry per value), the hash collisions' term with
        ``sum_(u != v) f_u^2``."""
        noise = super().variance(n, frequency)
        f = np.asarray(frequency, dtype=float)
        if f.shape != (self.domain_size,):
            return noise
        return noise + self.collision_variance(float(np.sum(f**2))) - \
            self.collision_variance(1.0) * f**2


@dataclasses.dataclass(frozen=True, kw_only=True)
class CountMeanSketch(_Sketch):
    """Apple's Count Mean Sketch (``cms``).

    Parameters
    ----------
    epsilon : float
    domain_size : int
    hash_range : int
        ``m``, the sketch width: a power of two (default 1024). A report is ``m`` bits.
    num_hashes : int
        ``k``, the number of hash functions (default 256).

    Notes
    -----
    Variance of ``f~(v)`` (over the devices' choices of ``j`` and the flips, for hash
    functions that collide like random ones): ``(m/(m-1))^2 c^2 / n`` times
    ``f_v P(1-P) + (1-f_v) pi(1-pi)``, with ``P = e^(ε/2)/(e^(ε/2)+1)``, ``Q = 1-P`` and
    ``pi = Q + (P-Q)/m`` the chance that another value's report sets ``v``'s bit.
    """

    name = "cms"
    audit_cells = "cms"
    epsilon: float
    domain_size: int
    hash_range: int = _hash_range_parameter()
    num_hashes: int = _num_hashes_parameter()

    @property
    def c(self) -> float:
        half = math.exp(self.epsilon / 2)
        return (half + 1) / (half - 1)

    @property
    def flip(self) -> float:
        """Each bit's flip probability, ``1/(e^(ε/2)+1)``."""
        return 1.0 / (math.exp(self.epsilon / 2) + 1)

    @property
    def report_bits(self) -> int:
        return self.hash_range + max(1, (self.num_hashes - 1).bit_length())

    def _perturb(self, values: np.ndarray, source: randomness.RandomSource) -> Reports:
        n, m = values.size, self.hash_range
        j = source.below(self.num_hashes, n)
        bitvectors.check_batch_bytes(n, m, what="cms reports")
        bits = source.bernoulli_bits(self.flip, n, m)  # the flips of zero bits: set bits
        own = ~source.bernoulli(self.flip, n)  # the true bucket's bit: 1 unless flipped
        bitvectors.assign_bits(bits, np.arange(n), self._hash(j, values), own)
        return Reports(self.name, {"column": j, "bits": bits})

    def _column_specs(self) -> dict[str, tuple[Any, int | None]]:
        return {"column": (np.int64, None),
                "bits": (np.uint8, bitvectors.num_bytes(self.hash_range))}

    def _row_checks(self, reports: Reports) -> list[tuple[np.ndarray, str]]:
        j = reports.columns["column"]
        ok = bitvectors.padding_is_zero(reports.columns["bits"], self.hash_range)
        return [((j < 0) | (j >= self.num_hashes), f"column outside [0, {self.num_hashes})"),
                (~ok, f"padding bits past bit {self.hash_range} are not zero")]

    def _counts_size(self) -> int:
        return self.num_hashes * (self.hash_range + 1)

    def _count(self, reports: Reports) -> np.ndarray:
        k, m = self.num_hashes, self.hash_range
        j, bits = reports.columns["column"], reports.columns["bits"]
        counts = np.zeros((k, m + 1), dtype=np.int64)
        order = np.argsort(j, kind="stable")
        rows = np.bincount(j, minlength=k)
        starts = np.concatenate([[0], np.cumsum(rows)])
        for row in np.flatnonzero(rows):  # one column sum per hash function used
            part = bits[order[starts[row]:starts[row + 1]]]
            counts[row, :m] = bitvectors.column_sums(part, m)
        counts[:, m] = rows
        return counts.reshape(-1)

    def _estimate(self, accumulator: Accumulator) -> Estimate:
        k, m, c, n = self.num_hashes, self.hash_range, self.c, accumulator.n
        counts = accumulator.counts.reshape(k, m + 1)
        debiased = c * counts[:, :m] + (1 - c) / 2 * counts[:, m:]  # per j: c S + N_j (1-c)/2
        return self._finish(self._read(debiased), n)

    def _variance_terms(self, n: int) -> tuple[float, float]:
        big = 1 - self.flip
        pi = self.flip + (big - self.flip) / self.hash_range
        scale = self._dominant(n) * self.c ** 2
        return scale * pi * (1 - pi), scale * (big * (1 - big) - pi * (1 - pi))


@dataclasses.dataclass(frozen=True, kw_only=True)
class HadamardCountMeanSketch(_Sketch):
    """Apple's Hadamard Count Mean Sketch (``hcms``): one bit per report.

    Parameters
    ----------
    epsilon : float
    domain_size : int
    hash_range : int
        ``m``, a power of two (default 1024).
    num_hashes : int
        ``k`` (default 256).

    Notes
    -----
    Variance of ``f~(v)``: ``(m/(m-1))^2 / n`` times ``f_v (c^2 - 1) + (1 - f_v)(c^2 -
    1/m^2)``: a report's term is ``±c`` with mean 1 for the true value and ``1/m`` for
    another (for hash functions that collide like random ones).
    """

    name = "hcms"
    audit_cells = "hcms"
    epsilon: float
    domain_size: int
    hash_range: int = _hash_range_parameter()
    num_hashes: int = _num_hashes_parameter()

    @property
    def c(self) -> float:
        return (self.e + 1) / (self.e - 1)

    @property
    def report_bits(self) -> int:
        return (1 + max(1, (self.num_hashes - 1).bit_length())
                + max(1, (self.hash_range - 1).bit_length()))

    def _perturb(self, values: np.ndarray, source: randomness.RandomSource) -> Reports:
        n = values.size
        j = source.below(self.num_hashes, n)
        index = source.below(self.hash_range, n)
        sign_bit = np.bitwise_count(self._hash(j, values) & index) & 1  # 1: H = -1
        keep = source.bernoulli(self.e / (self.e + 1), n)
        bit = np.where(keep, 1 - sign_bit, sign_bit).astype(np.int64)  # bit 1: +1
        return Reports(self.name, {"column": j, "value": index, "bit": bit})

    def _column_specs(self) -> dict[str, tuple[Any, int | None]]:
        return {"column": (np.int64, None), "value": (np.int64, None), "bit": (np.int64, None)}

    def _row_checks(self, reports: Reports) -> list[tuple[np.ndarray, str]]:
        j, index, bit = (reports.columns[name] for name in ("column", "value", "bit"))
        return [((j < 0) | (j >= self.num_hashes), f"column outside [0, {self.num_hashes})"),
                ((index < 0) | (index >= self.hash_range),
                 f"value outside [0, {self.hash_range})"),
                ((bit != 0) & (bit != 1), "bit is not 0 or 1")]

    def _counts_size(self) -> int:
        return self.num_hashes * self.hash_range

    def _count(self, reports: Reports) -> np.ndarray:
        j, index, bit = (reports.columns[name] for name in ("column", "value", "bit"))
        cell = j * self.hash_range + index
        return np.bincount(cell, weights=2 * bit - 1, minlength=self._counts_size()
                           ).astype(np.int64)

    def _estimate(self, accumulator: Accumulator) -> Estimate:
        k, m, n = self.num_hashes, self.hash_range, accumulator.n
        signed = accumulator.counts.reshape(k, m).astype(np.float64)
        transformed = hashing.fwht(signed) * self.c  # per row: S H (H symmetric), times c
        return self._finish(self._read(transformed), n)

    def _variance_terms(self, n: int) -> tuple[float, float]:
        c2, m = self.c ** 2, self.hash_range
        scale = self._dominant(n)
        return scale * (c2 - 1 / m**2), scale * ((c2 - 1) - (c2 - 1 / m**2))
