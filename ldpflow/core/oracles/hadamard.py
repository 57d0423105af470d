"""Hadamard response (HR) and the one-bit private-coin Hadamard scheme (seed 003)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import numpy.typing as npt

from ldpflow.core import hashing, randomness, validation
from ldpflow.core.oracles.base import (
    Accumulator,
    Estimate,
    FrequencyOracle,
    IndexReports,
    Reports,
)

__all__ = ["HadamardResponse", "OneBitHadamard", "hadamard_order"]


def hadamard_order(domain_size: int) -> int:
    """``K = 2**ceil(log2(d+1))``: the smallest power of two larger than ``d``."""
    return 1 << domain_size.bit_length()


def _parity(x: np.ndarray) -> np.ndarray:
    return (np.bitwise_count(x) & 1).astype(bool)


@dataclasses.dataclass(frozen=True, kw_only=True)
class HadamardResponse(IndexReports, FrequencyOracle):
    """Hadamard response (Acharya, Sun, Zhang; seed 003 eq. 18-20).

    Value ``v`` uses row ``v + 1`` of the Sylvester Hadamard matrix ``H_K``; its support set
    ``C_v = {y : H_K[v+1, y] = +1}`` has ``K/2`` elements. The client outputs a uniform member
    of ``C_v`` with probability ``e/(e+1)``, otherwise a uniform non-member.

    Notes
    -----
    epsilon-LDP per report: every output has probability ``2e/(K(e+1))`` or ``2/(K(e+1))``.
    Report ``log2 K`` bits. Aggregation: a histogram of length ``K``; estimation: one
    Walsh-Hadamard transform, ``c_v = (n + (H_K hist)[v+1]) / 2``. ``p* = e/(e+1)``,
    ``q* = 1/2``.
    """

    name = "hr"
    epsilon: float
    domain_size: int

    @property
    def order(self) -> int:
        """``K``, the order of the Hadamard matrix."""
        return hadamard_order(self.domain_size)

    @property
    def p(self) -> float:
        return self.e / (self.e + 1.0)

    @property
    def q(self) -> float:
        return 0.5

    @property
    def report_bits(self) -> int:
        return self.order.bit_length() - 1

    def _perturb(self, values: np.ndarray, source: randomness.RandomSource) -> Reports:
        n = values.size
        rows = values + 1
        y = source.below(self.order, n)
        want_member = source.bernoulli(self.p, n)
        is_member = ~_parity(rows & y)  # H[row, y] = +1 iff popcount(row & y) is even
        flip = want_member != is_member
        y[flip] ^= rows[flip] & -rows[flip]  # flip the lowest set bit of the row: a bijection
        return Reports(self.name, {"value": y})

    @property
    def index_range(self) -> int:
        return self.order

    def support_counts(self, accumulator: Accumulator) -> np.ndarray:
        transformed = hashing.fwht(accumulator.counts)
        return (accumulator.n + transformed[1 : self.domain_size + 1]) // 2


@dataclasses.dataclass(frozen=True, kw_only=True)
class OneBitHadamard(FrequencyOracle):
    """The one-bit private-coin Hadamard scheme (Acharya and Sun, seed 003, Section 2).

    Users are split into ``K`` columns (user ``j`` -> column ``j mod K``; the column travels
    in the report). A user in column ``i`` sends one bit, 1 with probability ``e/(e+1)`` if
    its value lies in ``B_i = {x : H_K[x, i] = +1}`` and ``1/(e+1)`` otherwise.

    Notes
    -----
    epsilon-LDP per report (ratio ``e**epsilon`` between the two bit probabilities). Report:
    1 bit plus the column, known to the server. Aggregation: per column the number of
    reports ``n_i`` and of ones ``S_i`` (``2K`` counters). Estimation: ``p_B = (e+1)/(e-1) *
    (S/n_i - 1/(e+1))`` and ``p_K = H_K (2 p_B - 1) / K``, one transform; the first ``d``
    coordinates are unbiased. The paper's final projection onto the simplex is the
    ``norm-sub`` post-processing. Variance: ``4e / ((e-1)^2 K^2) * sum_i 1/n_i`` for every
    value, exactly (``4e / (n (e-1)^2)`` with equal columns), below the paper's bound
    ``2(e+1)^2 / (n (e-1)^2)``. Not a pure protocol: ``p*`` and ``q*`` are ``None``.
    """

    name = "onebit"
    epsilon: float
    domain_size: int

    @property
    def order(self) -> int:
        """``K``: the number of columns and the order of the Hadamard matrix."""
        return hadamard_order(self.domain_size)

    @property
    def report_bits(self) -> int:
        return 1

    def _variance_terms(self, n: int) -> tuple[float, float]:
        return 4 * self.e / (n * (self.e - 1) ** 2), 0.0

    def column_sampling_variance(self, n: int, distribution: npt.ArrayLike) -> np.ndarray:
        """The extra error variance when users' values are drawn i.i.d. from ``distribution``.

        Each column sees only its own users, so against the population's empirical
        frequencies the estimate of ``v`` also carries ``(1 - pi_v - sum_{x != v} pi_x^2) / n``
        (with ``n / K`` users per column): ``sum_j [x_j != v] H_K[v ^ x_j, column_j] / n`` has
        mean 0 and that variance. :meth:`variance` is exact when every column holds the same
        multiset of values.
        """
        pi = np.asarray(distribution, dtype=float)
        return (1 - pi - (np.sum(pi**2) - pi**2)) / n

    def perturb(
        self,
        values: npt.ArrayLike,
        rng: randomness.RandomSource | np.random.Generator | None = None,
        *,
        columns: npt.ArrayLike | None = None,
    ) -> Reports:
        """Perturb a batch; ``columns`` defaults to ``arange(n) % K`` (user ``j`` -> ``j mod K``)."""
        vals = validation.check_values(values, self.domain_size)
        if columns is None:
            cols = np.arange(vals.size, dtype=np.int64) % self.order
        else:
            cols = validation.check_values(columns, self.order, name="columns")
            if cols.size != vals.size:
                raise ValueError(
                    f"columns must have one entry per value ({vals.size}), got {cols.size}"
                )
        source = randomness.as_source(rng)
        in_b = ~_parity(vals & cols)  # H_K[x, i] = +1
        p_one = np.where(in_b, self.e / (self.e + 1), 1 / (self.e + 1))
        bits = (source.uniform(vals.size) < p_one).astype(np.int64)
        return Reports(self.name, {"column": cols, "bit": bits})

    def perturb_one(  # type: ignore[override]
        self,
        value: int,
        rng: randomness.RandomSource | np.random.Generator | None = None,
        *,
        column: int,
    ) -> dict[str, Any]:
        """One device's report; its ``column`` is assigned by the collector."""
        return self.perturb(np.array([value]), rng, columns=np.array([column])).to_records()[0]

    def _perturb(self, values: np.ndarray, source: randomness.RandomSource) -> Reports:
        return self.perturb(values, source)

    def _column_specs(self) -> dict[str, tuple[Any, int | None]]:
        return {"column": (np.int64, None), "bit": (np.int64, None)}

    def _row_checks(self, reports: Reports) -> list[tuple[np.ndarray, str]]:
        c, b = reports.columns["column"], reports.columns["bit"]
        return [
            ((c < 0) | (c >= self.order), f"column outside [0, {self.order})"),
            ((b != 0) & (b != 1), "bit is not 0 or 1"),
        ]

    def _counts_size(self) -> int:
        return 2 * self.order

    def _count(self, reports: Reports) -> np.ndarray:
        c, b = reports.columns["column"], reports.columns["bit"]
        return np.concatenate(
            [np.bincount(c, minlength=self.order), np.bincount(c[b == 1], minlength=self.order)]
        )

    def _estimate(self, accumulator: Accumulator) -> Estimate:
        K, e = self.order, self.e
        per_column, ones = accumulator.counts[:K], accumulator.counts[K:]
        empty = np.flatnonzero(per_column == 0)
        if empty.size:
            raise ValueError(
                f"the one-bit estimate needs at least one report in each of the K = {K} columns; "
                f"{empty.size} column(s) have none (first: {int(empty[0])})"
            )
        p_b = (e + 1) / (e - 1) * (ones / per_column - 1 / (e + 1))
        p_k = hashing.fwht(2 * p_b - 1) / K
        const = 4 * e / ((e - 1) ** 2 * K**2) * float(np.sum(1.0 / per_column))
        return Estimate(p_k[: self.domain_size], accumulator.n, math.sqrt(const), None, None,
                        const, 0.0, self.name, self.parameters, None)
