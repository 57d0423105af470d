"""Generalized randomized response (GRR, "direct encoding", k-RR)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from ldpflow.core import randomness, validation
from ldpflow.core.oracles.base import FrequencyOracle, Reports

__all__ = ["DirectEncoding"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class DirectEncoding(FrequencyOracle):
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
    epsilon: float
    domain_size: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", validation.check_epsilon(self.epsilon))
        object.__setattr__(self, "domain_size", validation.check_domain_size(self.domain_size))

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

    def _column_specs(self) -> dict[str, tuple[Any, int | None]]:
        return {"value": (np.int64, None)}

    def _row_checks(self, reports: Reports) -> list[tuple[np.ndarray, str]]:
        v = reports.columns["value"]
        return [((v < 0) | (v >= self.domain_size), f"value outside [0, {self.domain_size})")]

    def _counts_size(self) -> int:
        return self.domain_size

    def _count(self, reports: Reports) -> np.ndarray:
        return np.bincount(reports.columns["value"], minlength=self.domain_size)
