"""Unary encoding: optimized (OUE) and symmetric (SUE, "basic RAPPOR")."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from ldpflow.core import bitvectors, randomness, validation
from ldpflow.core.oracles.base import FrequencyOracle, Reports

__all__ = ["UnaryEncoding", "OptimizedUnaryEncoding", "SymmetricUnaryEncoding"]


class UnaryEncoding(FrequencyOracle):
    """Shared client, wire form and aggregation of OUE and SUE.

    A report is a ``d``-bit vector sent as ``ceil(d/8)`` bytes, little-endian bit order
    (``numpy.packbits(bitorder="little")``), padding bits zero. Bit ``v`` (the true value) is
    1 with probability ``p``, every other bit with probability ``q``, independently.
    Aggregation: column sums, ``O(n d / 8)`` byte histogram.
    """

    epsilon: float
    domain_size: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", validation.check_epsilon(self.epsilon))
        object.__setattr__(self, "domain_size", validation.check_domain_size(self.domain_size))

    @property
    def report_bits(self) -> int:
        return self.domain_size

    def _perturb(self, values: np.ndarray, source: randomness.RandomSource) -> Reports:
        n = values.size
        bits = source.bernoulli_bits(self.q, n, self.domain_size)
        own = source.bernoulli(self.p, n)
        bitvectors.assign_bits(bits, np.arange(n), values, own)
        return Reports(self.name, {"bits": bits})

    def _column_specs(self) -> dict[str, tuple[Any, int | None]]:
        return {"bits": (np.uint8, bitvectors.num_bytes(self.domain_size))}

    def _row_checks(self, reports: Reports) -> list[tuple[np.ndarray, str]]:
        ok = bitvectors.padding_is_zero(reports.columns["bits"], self.domain_size)
        return [(~ok, f"padding bits past bit {self.domain_size} are not zero")]

    def _counts_size(self) -> int:
        return self.domain_size

    def _count(self, reports: Reports) -> np.ndarray:
        return bitvectors.column_sums(reports.columns["bits"], self.domain_size)


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
