"""Generalized randomized response (GRR, "direct encoding", k-RR)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ldpflow.core import randomness
from ldpflow.core.oracles.base import FrequencyOracle, IndexReports, Reports

__all__ = ["DirectEncoding"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class DirectEncoding(IndexReports, FrequencyOracle):
    """Generalized randomized response: report the true value or a uniform other one.

    Parameters
    ----------
    epsilon : float
        The privacy parameter, > 0.
    domain_size : int
        ``d``, the number of values (``0 .. d-1``), >= 2.

    Notes
    -----
    epsilon-LDP per report: ``Pr[y = v] = e/(e+d-1)`` and every other output has probability
    ``1/(e+d-1)``, a ratio of exactly ``e**epsilon``. Report: one value, ``ceil(log2 d)``
    bits. Aggregation: a histogram, ``O(n)``. Variance ``q(1-q)/(n(p-q)^2) +
    f(1-p-q)/(n(p-q))`` with ``p = e/(e+d-1)``, ``q = 1/(e+d-1)``
    (Wang et al., USENIX Security 2017, Sec. 4.1).
    """

    name = "grr"
    poisoning_family = "grr"
    audit_cells = "grr"
    audit_raw_outputs = True
    epsilon: float
    domain_size: int

    @property
    def p(self) -> float:
        return self.e / (self.e + self.domain_size - 1)

    @property
    def q(self) -> float:
        return 1.0 / (self.e + self.domain_size - 1)

    @property
    def report_bits(self) -> int:
        return max(1, math.ceil(math.log2(self.domain_size)))

    def _perturb(self, values: np.ndarray, source: randomness.RandomSource) -> Reports:
        n = values.size
        keep = source.bernoulli(self.p, n)
        other = source.below(self.domain_size - 1, n)
        other += other >= values  # uniform over the d - 1 other values
        return Reports(self.name, {"value": np.where(keep, values, other)})

    @property
    def index_range(self) -> int:
        return self.domain_size
