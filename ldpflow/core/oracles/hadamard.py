"""Hadamard response (HR) and the one-bit private-coin Hadamard scheme.

Contract: ``docs/spec/oracles.md``. References: Acharya, Sun, Zhang, "Hadamard Response:
Estimating Distributions Privately, Efficiently, and with Little Communication", AISTATS 2019;
Acharya and Sun, "Communication Complexity in Locally Private Distribution Estimation and Heavy
Hitters", ICML 2019 (HR in Section 4, eq. 18-20; the one-bit scheme in Section 2).
"""

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
    """Hadamard response (Acharya, Sun, Zhang; Acharya and Sun, ICML 2019, eq. 18-20).

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
    """The one-bit private-coin Hadamard scheme (Acharya and Sun, ICML 2019, Section 2).

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
    ``norm-sub`` post-processing. Variance of the randomisation: ``4e / ((e-1)^2 K^2) *
    sum_i 1/n_i`` for every value, exactly (``4e / (n (e-1)^2)`` with equal columns), below
    the paper's bound ``2(e+1)^2 / (n (e-1)^2)``; this is :meth:`variance`, the whole error
    when every column holds the same multiset of values. Real users are not spread that way:
    each column sees a sample, which adds ``h (1 - f_v - sum_{x != v} f_x^2)`` with
    ``h = sum_i 1/n_i / K^2`` (:meth:`column_sampling_variance`), about ``1/n`` where the
    randomisation term is ``4e/((e-1)^2 n)``: at ``epsilon = 4`` the sampling term is 13
    times larger. :meth:`estimate` therefore reports ``sigma^2 = var_const = 4e/(e-1)^2 h +
    h (1 - S2^)``, the variance at ``f_v = 0`` with ``S2 = sum_x f_x^2`` estimated without
    bias from the data (:meth:`estimate_sum_of_squares`). The remaining dependence on
    ``f_v``, ``-h f_v (1 - f_v)``, lowers the variance of a frequent value by at most ``h/4``
    and is left out (``var_slope = 0``): ``sigma`` is slightly conservative for such values.
    Not a pure protocol: ``p*`` and ``q*`` are ``None``.
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
        (with ``n / K`` users per column). Derivation: given the columns' contents, the
        estimate's mean is ``(1/K) sum_i (1/n_i) sum_{j in i} H_K[v ^ x_j, i]`` (Sylvester:
        ``H[v, i] H[x, i] = H[v ^ x, i]``); the users holding ``v`` give ``f_v``, the others
        the error ``T = sum_j [x_j != v] H_K[v ^ x_j, c_j] / n``. A user's term has
        ``E[T_j^2] = 1 - pi_v`` and mean ``mu_c = sum_{x != v} pi_x H_K[v ^ x, c]``, whose
        squares sum over the ``K`` columns to ``K sum_{x != v} pi_x^2`` (orthogonal rows),
        so ``Var[T] = (1 - pi_v - sum_{x != v} pi_x^2) / n`` and ``E[T] = 0``. Assigning a
        fixed population to balanced columns by a random permutation gives the same with
        ``n - 1`` and the empirical frequencies (Hoeffding's combinatorial variance). With
        unequal columns ``1/n`` becomes ``h = sum_i 1/n_i / K^2``. :meth:`variance` is exact
        when every column holds the same multiset of values; :meth:`estimate` includes this
        term, estimated from the data (see the class notes).
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
        """Perturb a batch; ``columns`` defaults to ``arange(n) % K``
        (user ``j`` -> ``j mod K``)."""
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
        freqs = p_k[: self.domain_size]
        h = float(np.sum(1.0 / per_column)) / K**2  # 1/n with equal columns
        noise = 4 * e / (e - 1) ** 2 * h
        const = noise + h * (1.0 - self.estimate_sum_of_squares(freqs, noise, h))
        return Estimate(freqs, accumulator.n, math.sqrt(const), None, None, const, 0.0,
                        self.name, self.parameters, None)

    def estimate_sum_of_squares(self, frequencies: npt.ArrayLike, noise: float,
                                h: float) -> float:
        """An unbiased estimate of ``S2 = sum_v f_v^2`` from the raw estimates, in [0, 1].

        With ``V_v = noise + h (1 - f_v - S2 + f_v^2)`` the variance of ``f~_v`` (``noise``
        the randomisation term, ``h = sum_i 1/n_i / K^2``) and ``sum_v f_v = 1``,
        ``E[sum_v f~_v^2] = S2 + sum_v V_v = S2 (1 - (d-1) h) + d noise + (d-1) h``; solving
        for ``S2`` gives the estimate, clipped to [0, 1]. ``(d-1) h < 1`` because every
        column holds a report and ``d < K``.
        """
        f = np.asarray(frequencies, dtype=float)
        d = f.size
        raw = (float(f @ f) - d * noise - (d - 1) * h) / (1.0 - (d - 1) * h)
        return min(1.0, max(0.0, raw))
