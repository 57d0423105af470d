"""MCM, the multiple channel method (Bassily and Smith, "Local, private, efficient protocols
for succinct histograms"), as the PEM paper ("Locally Differentially Private Heavy Hitter
Identification", Sec. III-D and VI) compares against it; pure NumPy, behind
:class:`~ldpflow.core.heavy_hitters.base.HeavyHitterProtocol`.

A public hash maps each value to one of ``T`` channels (default ``T = 4 k``). Users are
split into ``m`` groups, one per bit position. A user of group ``j`` whose value ``v``
falls in channel ``c`` encodes the item ``2 c + bit_j(v)`` of a ``2 T``-item domain as a
one-hot vector and sends it through symmetric unary encoding (bitwise randomized response)
with **half of epsilon** (the paper: MCM uses "half of epsilon for final testing"), plus an
OLH report of the full value with the other half. The aggregator estimates, per channel
and bit position, how many users hold bit 0 and bit 1, takes the majority as that bit of
the channel's candidate, discards a candidate that does not hash to its own channel (it
cannot be the channel's heavy hitter), estimates the remaining ``<= T`` candidates with the
full-value reports and outputs the top ``k``.

Privacy: the two reports' budgets sum to epsilon (sequential composition); the bit
position is fixed by the user id and public. ``budget_shares`` lists the components.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ldpflow.core import hashing, randomness, validation
from ldpflow.core.heavy_hitters.base import (
    DEFAULT_QUERY_LIMIT,
    HeavyHitterProtocol,
    HeavyHitters,
    check_top_k,
    olh_budget,
    olh_frequencies,
    select_top,
)
from ldpflow.core.heavy_hitters.counting import (
    candidate_support,
)
from ldpflow.core.heavy_hitters.spm import check_common, check_range
from ldpflow.core.oracles.base import Reports, as_reports
from ldpflow.core.oracles.local_hashing import OptimizedLocalHashing, optimal_hash_range
from ldpflow.core.validation import InvalidReportError

__all__ = ["NAME", "MultipleChannelMethod"]

#: The ``oracle`` tag of MCM reports.
NAME = "mcm"
_U64 = np.uint64
# Entries of the unpacked (users x 2 T) bit matrix processed at once.
_GRID_ENTRIES = 1 << 23


@dataclasses.dataclass(frozen=True, kw_only=True)
class MultipleChannelMethod(HeavyHitterProtocol):
    """The multiple channel method (MCM) of Bassily and Smith, as the PEM paper compares with it.

    Parameters
    ----------
    top_k : int
        ``k``: how many values to identify.
    value_bits : int
        ``m``, in ``[1, 64]``; users are split into ``m`` groups, one per bit position.
    epsilon : float
        Each user's total budget: ``epsilon / 2`` for the channel-bit report (symmetric unary
        encoding over ``2 T`` items), ``epsilon / 2`` for the full-value OLH report.
    num_channels : int, optional
        ``T``; by default ``4 * top_k``. The ``<= T`` candidates must fit ``Q``.
    query_limit : int, default 2**20
    channel_seed : int, default 0
        The public hash key of the value-to-channel map.

    Notes
    -----
    epsilon-LDP per user: the channel-bit report changes in at most two of its ``2 T`` bits
    between two inputs, each bit flipped independently with probability
    ``1 / (1 + e**(epsilon / 4))`` (ratio ``e**(epsilon / 4)`` per bit, ``e**(epsilon / 2)``
    in all); the full-value OLH report has ratio ``e**(epsilon / 2)``. Report: ``2 T`` bits
    (packed), one 64-bit seed, one bucket.
    """

    name = NAME
    top_k: int
    value_bits: int
    epsilon: float
    num_channels: int = None  # type: ignore[assignment]
    query_limit: int = DEFAULT_QUERY_LIMIT
    channel_seed: int = 0

    def __post_init__(self) -> None:
        k, m, eps, limit = check_common(self.top_k, self.value_bits, self.epsilon,
                                         self.query_limit)
        channels = 4 * k if self.num_channels is None else validation.check_positive_int(
            self.num_channels, name="num_channels")
        if channels > limit:
            raise ValueError(
                f"final testing estimates up to num_channels candidates; num_channels must be "
                f"<= query_limit={limit}, got {channels!r}"
            )
        seed = validation.check_positive_int(self.channel_seed, name="channel_seed", minimum=0)
        if seed >= 2**64:
            raise ValueError(f"channel_seed must be < 2**64, got {seed!r}")
        for name, value in (("top_k", k), ("value_bits", m), ("epsilon", eps),
                            ("query_limit", limit), ("num_channels", channels),
                            ("channel_seed", seed)):
            object.__setattr__(self, name, value)

    @property
    def channel_epsilon(self) -> float:
        """The budget of the channel-bit report: ``epsilon / 2``."""
        return self.epsilon / 2.0

    @property
    def final_epsilon(self) -> float:
        """The budget of the full-value (final testing) report: ``epsilon / 2``."""
        return self.epsilon / 2.0

    @property
    def flip_probability(self) -> float:
        """Each unary bit is flipped with ``1 / (1 + e**(channel_epsilon / 2))``."""
        return 1.0 / (1.0 + math.exp(self.channel_epsilon / 2.0))

    @property
    def hash_range(self) -> int:
        """OLH's hash range of the final-testing report (optimal for ``epsilon / 2``)."""
        return optimal_hash_range(self.final_epsilon)

    @property
    def budget_shares(self) -> dict[str, dict[str, float]]:
        """Each randomized component: its share, ``p`` and ``q`` (``p / q == e**share``).

        For the unary report, ``p`` and ``q`` are the probabilities of one output vector
        under two inputs that differ in the worst way (two bits).
        """
        f = self.flip_probability
        return {
            "channel_bits": {"epsilon": self.channel_epsilon, "p": (1 - f) ** 2, "q": f * f},
            "final": olh_budget(self.final_epsilon, self.hash_range),
        }

    def channel_of(self, values: npt.ArrayLike) -> np.ndarray:
        """The public channel in ``[0, T)`` of each value (splitmix64 of value and key)."""
        vals = np.asarray(values, dtype=_U64)
        with np.errstate(over="ignore"):
            mixed = hashing.splitmix64_mix(vals ^ _U64(self.channel_seed))
        return (mixed % _U64(self.num_channels)).astype(np.int64)

    @property
    def num_groups(self) -> int:
        """One group per bit position (group ``j``: bit ``j``, 0 = least significant)."""
        return self.value_bits

    def perturb(
        self,
        values: npt.ArrayLike,
        user_ids: npt.ArrayLike | Sequence[Any],
        rng: randomness.RandomSource | np.random.Generator | None = None,
    ) -> Reports:
        """Each user's channel-bit report and final-testing report.

        Returns
        -------
        Reports
            Columns ``group`` (int64, the bit position), ``bits`` (uint8, shape
            ``(n, ceil(2 T / 8))``, little bit order: bit ``2 c + b`` is item ``(c, b)``),
            ``seed`` (uint64) and ``bucket`` (int64).
        """
        vals, groups = self._check_values_and_groups(values, user_ids)
        source = randomness.as_source(rng)
        n = vals.size
        width = 2 * self.num_channels
        item = 2 * self.channel_of(vals) + ((vals >> groups.astype(_U64)) & _U64(1)).astype(
            np.int64)
        bits = source.bernoulli_bits(self.flip_probability, n, width)  # the flips
        rows = np.arange(n)
        bits[rows, item // 8] ^= (1 << (item % 8)).astype(np.uint8)
        full = OptimizedLocalHashing(epsilon=self.final_epsilon, domain_size=2**self.value_bits,
                                     hash_range=self.hash_range).perturb(vals, source)
        return Reports(NAME, {"group": groups, "bits": bits, "seed": full.columns["seed"],
                                  "bucket": full.columns["bucket"].astype(np.int64)})

    def validate(self, reports: Reports | Mapping[str, npt.ArrayLike]) -> Reports:
        """The reports with checked columns, or ``InvalidReportError`` naming the problem."""
        reports = as_reports(reports, NAME, ("group", "bits", "seed", "bucket"))
        bits = reports.columns["bits"]
        width = -(-2 * self.num_channels // 8)
        if bits.ndim != 2 or bits.shape[1] != width or bits.dtype != np.uint8:
            raise InvalidReportError(
                f"{NAME} report column 'bits' must be uint8 of shape (n, {width}), got "
                f"{bits.dtype} {bits.shape}"
            )
        group = reports.columns["group"].astype(np.int64)
        bucket = reports.columns["bucket"].astype(np.int64)
        check_range(group, 0, self.value_bits, "group", NAME)
        check_range(bucket, 0, self.hash_range, "bucket", NAME)
        return Reports(NAME, {"group": group, "bits": bits,
                                  "seed": reports.columns["seed"].astype(_U64), "bucket": bucket})

    def identify(self, reports: Reports | Mapping[str, npt.ArrayLike], *,
                 top_k: int | None = None,
                 valid: Callable[[np.ndarray, int], np.ndarray] | None = None
                 ) -> HeavyHitters:
        """Majority vote per channel and bit, then final testing of the channels' candidates.

        Raises
        ------
        InvalidReportError
            If a row is invalid.
        ValueError
            If there are no reports.
        """
        k = check_top_k(top_k, self.top_k)
        reports = self.validate_some(reports)
        n = len(reports)
        T, m = self.num_channels, self.value_bits
        group = reports.columns["group"]
        packed = reports.columns["bits"]
        counts = np.zeros((m, 2 * T), dtype=np.int64)  # ones per (bit position, item)
        step = max(1, _GRID_ENTRIES // (2 * T))
        for start in range(0, n, step):
            chunk = np.unpackbits(packed[start : start + step], axis=1, count=2 * T,
                                  bitorder="little")
            rows = group[start : start + step]
            onehot = (rows[None, :] == np.arange(m)[:, None]).astype(np.float64)
            counts += np.rint(onehot @ chunk.astype(np.float64)).astype(np.int64)
        sizes = np.bincount(group, minlength=m)
        f = self.flip_probability
        with np.errstate(invalid="ignore", divide="ignore"):
            est = (counts - sizes[:, None] * f) / (1 - 2 * f)  # users holding item, per group
        est = est.reshape(m, T, 2)
        ones = est[:, :, 1] > est[:, :, 0]  # majority per (bit position, channel); ties -> 0
        weights = _U64(1) << np.arange(m, dtype=_U64)
        cand = (ones.astype(_U64) * weights[:, None]).sum(axis=0, dtype=_U64)
        own = self.channel_of(cand) == np.arange(T)
        values = np.unique(cand[own])
        if valid is not None and values.size:
            values = values[valid(values, m)]
        support = candidate_support(reports.columns["seed"], reports.columns["bucket"],
                                    values, m, self.hash_range)
        freqs = olh_frequencies(support, n, self.final_epsilon, self.hash_range)
        keep = select_top(values, freqs, k) if values.size else np.zeros(0, int)
        return HeavyHitters(
            values=values[keep], frequencies=freqs[keep], counts=freqs[keep] * n, population=n,
            group_sizes=tuple(int(s) for s in sizes), stage_candidates=(int(values.size),),
            stage_survivors=(int(keep.size),),
        )
