"""Local hashing: optimized (OLH) and binary (BLH), with the portable affine hash family."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from ldpflow.core import hashing, randomness, registry, validation
from ldpflow.core.oracles.base import FrequencyOracle, Reports

#: The widest values whose full domain is aggregated (a 2**L counter vector).
MAX_FULL_DOMAIN_BITS = 28

__all__ = [
    "MAX_FULL_DOMAIN_BITS",
    "LocalHashing",
    "OptimizedLocalHashing",
    "BinaryLocalHashing",
    "optimal_hash_range",
    "olh_probabilities",
    "olh_variance",
]
#: Reports counted at a time: small enough that the hashes of a chunk stay in cache.
_COUNT_CHUNK = 1 << 15


def olh_probabilities(epsilon: float, hash_range: int) -> tuple[float, float]:
    """OLH's ``(p*, q*) = (e / (e + g - 1), 1 / g)`` at ``epsilon`` with ``g`` buckets.

    ``p*``: a report's bucket is its value's hash; ``q*``: it is a given other value's (the
    hash is uniform). Wang et al., "Locally Differentially Private Protocols for Frequency
    Estimation", Sec. 4.4. The one place these are computed: the oracles, PEM, SPM, MCM,
    TreeHist, SFP and LOLOHA's permanent step all call it.
    """
    e = math.exp(epsilon)
    return e / (e + hash_range - 1), 1.0 / hash_range


def olh_variance(n: int, epsilon: float, hash_range: int, frequency: Any = 0.0) -> Any:
    """The exact variance of one OLH frequency from ``n`` reports, at true ``frequency``.

    ``(q* (1 - q*) + f (p* - q*)(1 - p* - q*)) / (n (p* - q*)**2)`` (the support of a value
    of frequency ``f`` is a sum of ``n`` independent Bernoulli(``f p* + (1 - f) q*``));
    at ``f = 0``, ``n = 1`` it is ``(e + g - 1)**2 / ((e - 1)**2 (g - 1))``, the factor the
    choice of ``g`` minimises. A float for a scalar ``frequency``, else an array.
    """
    p, q = olh_probabilities(epsilon, hash_range)
    f = np.asarray(frequency, dtype=np.float64)
    out = (q * (1 - q) + f * (p - q) * (1 - p - q)) / (n * (p - q) ** 2)
    return float(out) if out.ndim == 0 else out


def optimal_hash_range(epsilon: float) -> int:
    """OLH's ``g``: the power of two ``2**b``, ``b`` in ``{floor, ceil}(log2(e+1))`` (>= 1), of
    smaller variance ``(e+g-1)^2 / ((e-1)^2 (g-1))``.

    The paper rounds ``e + 1`` to any integer; powers of two cost at most ~3% variance at any
    epsilon and make the exact Walsh-Hadamard aggregation possible.
    """
    epsilon = validation.check_epsilon(epsilon)
    exact = math.log2(math.exp(epsilon) + 1)
    candidates = {max(1, math.floor(exact)), max(1, math.ceil(exact))}
    return 2 ** min(sorted(candidates), key=lambda b: olh_variance(1, epsilon, 2**b))


class LocalHashing(FrequencyOracle):
    """Shared client, wire form and aggregation of OLH and BLH.

    A report is ``(seed, bucket)``: a uniform 64-bit seed ``s`` (unsigned; an Avro ``long``
    carries it as its two's complement) and ``y`` in ``[0, g)``, equal to ``H_s(v)`` with
    probability ``e/(e+g-1)`` and uniform over the other ``g-1`` buckets otherwise.
    Aggregation: the signed scatter vector ``F`` of length ``2**L`` (``L = ceil(log2 d)``),
    ``O(n g)``; estimation: one Walsh-Hadamard transform, ``O(L 2**L)``, giving the exact
    support counts (see :mod:`ldpflow.core.hashing`).
    """

    poisoning_family = "hash"
    audit_cells = "local_hashing"
    epsilon: float
    domain_size: int
    hash_range: int

    def _validate(self) -> None:
        super().__post_init__()
        object.__setattr__(
            self, "hash_range", validation.check_power_of_two(self.hash_range, name="hash_range")
        )

    @property
    def value_bits(self) -> int:
        """``L = ceil(log2 d)``: the width of values fed to the hash."""
        return max(1, (self.domain_size - 1).bit_length())

    @property
    def hash_bits(self) -> int:
        """``b = log2 g``."""
        return self.hash_range.bit_length() - 1

    @property
    def p(self) -> float:
        return olh_probabilities(self.epsilon, self.hash_range)[0]

    @property
    def q(self) -> float:
        return olh_probabilities(self.epsilon, self.hash_range)[1]

    @property
    def report_bits(self) -> int:
        return 64 + self.hash_bits

    def _perturb(self, values: np.ndarray, source: randomness.RandomSource) -> Reports:
        n = values.size
        seeds = source.words(n)
        hashed = hashing.hash_values(seeds, values, self.value_bits, self.hash_range)
        keep = source.bernoulli(self.p, n)
        other = source.below(self.hash_range - 1, n)
        buckets = np.where(keep, hashed, (hashed + 1 + other) % self.hash_range)
        return Reports(self.name, {"seed": seeds, "bucket": buckets})

    def _column_specs(self) -> dict[str, tuple[Any, int | None]]:
        return {"seed": (np.uint64, None), "bucket": (np.int64, None)}

    def _row_checks(self, reports: Reports) -> list[tuple[np.ndarray, str]]:
        y = reports.columns["bucket"]
        return [((y < 0) | (y >= self.hash_range), f"bucket outside [0, {self.hash_range})")]

    def _counts_size(self) -> int:
        if self.value_bits > MAX_FULL_DOMAIN_BITS:
            raise ValueError(
                f"full-domain aggregation of local hashing needs 2**{self.value_bits} counters; "
                f"domain_size must be <= 2**{MAX_FULL_DOMAIN_BITS}, got {self.domain_size} "
                "(count candidate sets with ldpflow.core.heavy_hitters instead)"
            )
        return 1 << self.value_bits

    def _count(self, reports: Reports) -> np.ndarray:
        seeds, buckets = reports.columns["seed"], reports.columns["bucket"]
        total = np.zeros(1 << self.value_bits, dtype=np.int64)
        for start in range(0, seeds.size, _COUNT_CHUNK):  # chunks that stay in cache
            part = slice(start, start + _COUNT_CHUNK)
            rows, offsets = hashing.hash_rows(seeds[part], self.value_bits, self.hash_bits)
            targets = buckets[part] ^ offsets.astype(np.int64)
            total += hashing.affine_sign_scatter(rows, targets, self.value_bits)
        return total

    def support_counts(self, accumulator) -> np.ndarray:  # type: ignore[override]
        counts = hashing.support_counts(accumulator.counts, self.hash_range)
        return counts[: self.domain_size]


@dataclasses.dataclass(frozen=True, kw_only=True)
class OptimizedLocalHashing(LocalHashing):
    """Optimized local hashing (OLH): ``g`` from :func:`optimal_hash_range` unless given.

    Parameters
    ----------
    epsilon : float
    domain_size : int
    hash_range : int, optional
        ``g``, a power of two >= 2; by default the better of the two powers of two around
        ``e + 1``.

    Notes
    -----
    epsilon-LDP per report: given the seed, the bucket follows ``g``-ary randomized response
    on ``H_s(v)``, ratio ``e**epsilon``. Report ``64 + log2 g`` bits; variance
    ``q(1-q)/(n(p-q)^2)`` with ``p = e/(e+g-1)``, ``q = 1/g`` (Wang et al., USENIX Security
    2017, Sec. 4.4; the paper text's transcription of ``p`` is wrong, the unbiasedness tests
    check this one).
    """

    name = "olh"
    epsilon: float
    domain_size: int
    hash_range: int = registry.parameter(  # None: the optimal power of two
        None, help="g, the buckets (default the optimal power of two for epsilon).")

    def __post_init__(self) -> None:
        if self.hash_range is None:
            object.__setattr__(self, "hash_range", optimal_hash_range(self.epsilon))
        self._validate()


@dataclasses.dataclass(frozen=True, kw_only=True)
class BinaryLocalHashing(LocalHashing):
    """Binary local hashing (BLH): local hashing with ``g = 2``."""

    name = "blh"
    epsilon: float
    domain_size: int
    hash_range: int = registry.parameter(2, help="g, the buckets: 2.")

    def __post_init__(self) -> None:
        self._validate()
        if self.hash_range != 2:
            raise ValueError(f"hash_range of blh must be 2, got {self.hash_range!r}")
