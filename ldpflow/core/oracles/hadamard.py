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
    audit_cells = "hadamard"
    audit_raw_outputs = True
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
    ``norm-sub`` post-processing. Not a pure protocol: ``p*`` and ``q*`` are ``None``.

    The estimate needs a report in every column, so at least ``n = K`` users: with fewer,
    the Hadamard coefficients of the empty columns are unknown and no unbiased estimate of
    the frequencies exists (at most ``n`` of the ``d`` needed linear measurements are made);
    :meth:`estimate` and :meth:`variance` say so in one line (:meth:`users_needed`).

    Variance (:meth:`variance`, the same model as ``Estimate.sigma``): the error of ``f~_v``
    against the population's frequency ``f_v``, with the users' order (so their columns)
    independent of their values, has variance

        ``V_v = 4e/(e-1)^2 h + c (1 - f_v - S2 + f_v^2)``,  ``S2 = sum_x f_x^2``,

    with ``h = sum_i 1/n_i / K^2`` (``1/n`` with equal columns) and ``c = n h / (n - 1)``.
    The first term is the randomisation, exact for any assignment; the second is the column
    sampling: each column sees only its own users (:meth:`column_sampling_variance`; at
    ``epsilon = 4`` it is 13 times the first). :meth:`estimate` reports ``sigma^2 =
    var_const = V`` at ``f_v = 0`` with ``S2`` estimated without bias from the data
    (:meth:`estimate_sum_of_squares`); the remaining ``-c f_v (1 - f_v)`` lowers a frequent
    value's variance by at most ``c/4`` and is left out (``var_slope = 0``): ``sigma`` is
    slightly conservative for such values. The randomisation term (``4e / (n (e-1)^2)`` with
    equal columns) is below the paper's bound ``2(e+1)^2 / (n (e-1)^2)``.
    """

    name = "onebit"
    audit_cells = "onebit"
    epsilon: float
    domain_size: int

    @property
    def order(self) -> int:
        """``K``: the number of columns and the order of the Hadamard matrix."""
        return hadamard_order(self.domain_size)

    @property
    def report_bits(self) -> int:
        return 1

    @property
    def users_needed(self) -> int:
        """The fewest reports with which the frequencies can be estimated: ``K``, one in
        every column."""
        return self.order

    def _randomisation_variance(self, h: float) -> float:
        return 4 * self.e / (self.e - 1) ** 2 * h

    def _column_weight(self, n: int) -> float:
        """``h = sum_i 1/n_i / K^2`` for ``n`` users in columns ``j mod K``, ``n >= K``."""
        K = self.order
        if n < K:
            raise ValueError(self._too_few_message(n))
        quotient, extra = divmod(n, K)
        return (extra / (quotient + 1) + (K - extra) / quotient) / K**2

    def _too_few_message(self, n: int) -> str:
        K = self.order
        return (f"the one-bit estimate at d = {self.domain_size} needs n >= K = {K} reports "
                f"(one in each column, user j -> column j mod K), got n = {n}: {K - n} "
                f"column(s) have none")

    def variance(self, n: int, frequency: float | npt.ArrayLike = 0.0, *,
                 sum_of_squares: float | None = None) -> float | np.ndarray:
        """The variance of ``f~_v`` against the population's frequency ``f_v`` (see the class
        notes): ``4e/(e-1)^2 h + c (1 - f_v - S2 + f_v^2)``.

        ``S2 = sum_x f_x^2`` is ``sum_of_squares`` if given; else ``sum(frequency**2)`` when
        ``frequency`` holds the whole population (one entry per value); else ``f_v**2``, its
        least possible value, which gives the largest variance any population with this
        ``f_v`` can have. ``n`` users fill the columns ``j mod K``; exact when ``K`` divides
        ``n`` (otherwise the column sizes differ by one and the sampling term is within a
        relative ``K/n``).

        Raises
        ------
        ValueError
            For ``n < K`` (no estimate exists), or ``sum_of_squares`` outside ``[0, 1]``.
        """
        n = validation.check_positive_int(n, name="n")
        f = np.asarray(frequency, dtype=float)
        h = self._column_weight(n)
        if sum_of_squares is not None:
            s2: float | np.ndarray = float(sum_of_squares)
            if not 0.0 <= s2 <= 1.0:
                raise ValueError(f"sum_of_squares must be in [0, 1], got {sum_of_squares!r}")
        elif f.shape == (self.domain_size,):
            s2 = float(f @ f)
        else:
            s2 = f**2
        result = self._value_variance(n, h, f, s2)
        return float(result) if np.ndim(result) == 0 else result

    def _value_variance(self, n: int, h: float, f: float | np.ndarray,
                        s2: float | np.ndarray) -> float | np.ndarray:
        c = n * h / (n - 1)  # n >= K >= 4
        # For a distribution, 1 - f_v - sum_{x != v} f_x^2 >= (1 - f_v) - (1 - f_v)^2 >= 0;
        # a vector that is not one (a clipped plug-in with S2 > 1) gets no negative term.
        return self._randomisation_variance(h) + c * np.maximum(1 - f - s2 + f * f, 0.0)

    def _variance_terms(self, n: int) -> tuple[float, float]:
        # The base's linear model (const + slope f_v) does not hold here: variance() and
        # _estimate are this oracle's own, so nothing may ask for the linear terms.
        raise TypeError("the one-bit variance is not linear in f_v: use variance()")

    def column_sampling_variance(self, n: int, distribution: npt.ArrayLike) -> np.ndarray:
        """The column-sampling part of :meth:`variance` for values drawn i.i.d. from
        ``distribution``: ``(1 - pi_v - sum_{x != v} pi_x^2) / n`` (equal columns).

        Derivation: given the columns' contents, the estimate's mean is
        ``(1/K) sum_i (1/n_i) sum_{j in i} H_K[v ^ x_j, i]`` (Sylvester:
        ``H[v, i] H[x, i] = H[v ^ x, i]``); the users holding ``v`` give ``f_v``, the others
        the error ``T = sum_j [x_j != v] H_K[v ^ x_j, c_j] / n``. A user's term has
        ``E[T_j^2] = 1 - pi_v`` and mean ``mu_c = sum_{x != v} pi_x H_K[v ^ x, c]``, whose
        squares sum over the ``K`` columns to ``K sum_{x != v} pi_x^2`` (orthogonal rows),
        so ``Var[T] = (1 - pi_v - sum_{x != v} pi_x^2) / n`` and ``E[T] = 0``. Assigning a
        fixed population to balanced columns by a random permutation gives the same with
        ``n - 1`` and the empirical frequencies (Hoeffding's combinatorial variance), the
        form :meth:`variance` uses. When every column holds the same multiset of values,
        the term is zero and the randomisation is the whole error.
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
        K, e, n = self.order, self.e, accumulator.n
        per_column, ones = accumulator.counts[:K], accumulator.counts[K:]
        if n < K:
            raise ValueError(self._too_few_message(n))
        empty = np.flatnonzero(per_column == 0)
        if empty.size:
            raise ValueError(
                f"the one-bit estimate needs a report in each of the K = {K} columns (user j "
                f"-> column j mod K): {empty.size} of them have none (first: {int(empty[0])}) "
                f"among n = {n} reports; were the columns assigned j mod K?")
        p_b = (e + 1) / (e - 1) * (ones / per_column - 1 / (e + 1))
        p_k = hashing.fwht(2 * p_b - 1) / K
        freqs = p_k[: self.domain_size]
        h = float(np.sum(1.0 / per_column)) / K**2  # 1/n with equal columns
        c = n * h / (n - 1)
        noise = self._randomisation_variance(h)
        s2 = self.estimate_sum_of_squares(freqs, noise, c)
        const = float(self._value_variance(n, h, 0.0, s2))
        return Estimate(freqs, n, math.sqrt(const), None, None, const, 0.0,
                        self.name, self.parameters, None)

    def estimate_sum_of_squares(self, frequencies: npt.ArrayLike, noise: float,
                                h: float) -> float:
        """An unbiased estimate of ``S2 = sum_v f_v^2`` from the raw estimates, in [0, 1].

        With ``V_v = noise + h (1 - f_v - S2 + f_v^2)`` the variance of ``f~_v`` (``noise``
        the randomisation term, ``h`` the sampling weight ``c`` of the class notes) and
        ``sum_v f_v = 1``, ``E[sum_v f~_v^2] = S2 + sum_v V_v = S2 (1 - (d-1) h) + d noise +
        (d-1) h``; solving for ``S2`` gives the estimate, clipped to [0, 1].
        ``(d-1) h < 1`` because every column holds a report and ``d < K``.
        """
        f = np.asarray(frequencies, dtype=float)
        d = f.size
        raw = (float(f @ f) - d * noise - (d - 1) * h) / (1.0 - (d - 1) * h)
        return min(1.0, max(0.0, raw))
