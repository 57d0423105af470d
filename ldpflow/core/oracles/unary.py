"""Unary encoding: optimized (OUE) and symmetric (SUE, "basic RAPPOR")."""

from __future__ import annotations

import abc
import dataclasses
import math

import numpy as np

from ldpflow.core import bitvectors, randomness
from ldpflow.core.oracles.base import BitmapReports, FrequencyOracle, Reports

__all__ = ["UnaryEncoding", "OptimizedUnaryEncoding", "SymmetricUnaryEncoding"]


class UnaryEncoding(BitmapReports, FrequencyOracle):
    """Shared client, wire form and aggregation of OUE and SUE.

    A report is a ``d``-bit vector sent as ``ceil(d/8)`` bytes, little-endian bit order
    (``numpy.packbits(bitorder="little")``), padding bits zero. Bit ``v`` (the true value) is
    1 with probability ``p``, every other bit with probability ``q``, independently.
    Aggregation: column sums, ``O(n d / 8)`` byte histogram.
    """

    epsilon: float
    domain_size: int

    @property
    @abc.abstractmethod
    def p(self) -> float:
        """Probability that the true value's bit is 1."""

    @property
    @abc.abstractmethod
    def q(self) -> float:
        """Probability that any other bit is 1."""

    @property
    def report_bits(self) -> int:
        return self.domain_size

    def _perturb(self, values: np.ndarray, source: randomness.RandomSource) -> Reports:
        n = values.size
        bits = source.bernoulli_bits(self.q, n, self.domain_size)
        own = source.bernoulli(self.p, n)
        bitvectors.assign_bits(bits, np.arange(n), values, own)
        return Reports(self.name, {"bits": bits})


@dataclasses.dataclass(frozen=True, kw_only=True)
class OptimizedUnaryEncoding(UnaryEncoding):
    """Optimized unary encoding (OUE): ``p = 1/2``, ``q = 1/(e+1)``.

    Notes
    -----
    epsilon-LDP per report: changing the true value changes two bits, with likelihood ratio
    ``(p(1-q)) / ((1-p)q) = e**epsilon`` exactly. Report ``d`` bits; variance
    ``4e/(n(e-1)^2)`` at ``f = 0`` (Wang et al., USENIX Security 2017, Sec. 4.3).
    """

    name = "oue"
    epsilon: float
    domain_size: int

    @property
    def p(self) -> float:
        return 0.5

    @property
    def q(self) -> float:
        return 1.0 / (self.e + 1.0)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SymmetricUnaryEncoding(UnaryEncoding):
    """Symmetric unary encoding (SUE, basic RAPPOR): ``p = e^(eps/2)/(e^(eps/2)+1)``, ``q = 1-p``.

    Notes
    -----
    epsilon-LDP per report: each of the two differing bits contributes a ratio of
    ``e**(epsilon/2)``. Report ``d`` bits (Wang et al., USENIX Security 2017, Sec. 4.2).
    """

    name = "sue"
    epsilon: float
    domain_size: int

    @property
    def p(self) -> float:
        half = math.exp(self.epsilon / 2)
        return half / (half + 1.0)

    @property
    def q(self) -> float:
        return 1.0 / (math.exp(self.epsilon / 2) + 1.0)
