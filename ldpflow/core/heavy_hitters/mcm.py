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

The passes of the family's contract (:mod:`~ldpflow.core.heavy_hitters.base`), each over
every group: pass 0, "channel bits", counts the ones of every item per bit position
(array ``ones``, shape ``(m, 2 T)``) and its ``advance`` takes the majority votes, the
own-channel check and the codec's pruning (``valid``), keeping the candidates; pass 1,
"final test", counts their support from the full-value reports and its ``advance`` keeps
them with their estimates, best first. MCM has no server options.

Privacy: the two reports' budgets sum to epsilon (sequential composition); the bit
position is fixed by the user id and public. ``budget_shares`` lists the components.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ldpflow.core import bitvectors, hashing, randomness, registry, validation
from ldpflow.core.heavy_hitters.base import (
    HeavyHitterProtocol,
    PassCounts,
    PassFigures,
    PassState,
    check_common,
    olh_budget,
    query_limit_parameter,
)
from ldpflow.core.oracles.base import Reports
from ldpflow.core.oracles.local_hashing import OptimizedLocalHashing, optimal_hash_range

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
    num_channels: int = registry.parameter(None, help="T, the channels (default 4k).")
    query_limit: int = query_limit_parameter()
    channel_seed: int = registry.parameter(
        0, help="the key of the public value-to-channel hash (default 0).")

    def __post_init__(self) -> None:
        self._check_group_hash()
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

    def _column_specs(self) -> dict[str, tuple[Any, int | None]]:
        return {"group": (np.int64, None), "bits": (np.uint8, -(-2 * self.num_channels // 8)),
                "seed": (np.uint64, None), "bucket": (np.int64, None)}

    def _row_checks(self, reports: Reports) -> list[tuple[np.ndarray, str]]:
        bucket, g = reports.columns["bucket"], self.hash_range
        width = 2 * self.num_channels
        return [self._group_check(reports),
                (~bitvectors.padding_is_zero(reports.columns["bits"], width),
                 f"padding bits past bit {width} are not zero"),
                ((bucket < 0) | (bucket >= g), f"bucket outside [0, {g})")]

    # -- server: the passes -------------------------------------------------------------------
    @property
    def num_passes(self) -> int:
        """Two passes: the channel bits, then the final test."""
        return 2

    def pass_label(self, pass_index: int) -> str:
        return ("channel bits", "final test")[self._check_pass(pass_index)]

    def _pass_context(self, pass_index: int, state: PassState) -> tuple:
        if pass_index == 0:
            return ()
        return self._final_context(state)

    def _empty_arrays(self, pass_index: int, context: tuple) -> dict[str, tuple[int, ...]]:
        if pass_index == 0:
            return {"ones": (self.value_bits, 2 * self.num_channels)}
        return {"support": (context[0].size,)}

    def _count_pass(
        self, pass_index: int, reports: Reports, context: tuple
    ) -> dict[str, np.ndarray]:
        if pass_index == 1:
            return self._final_count(reports, context)
        T, m = self.num_channels, self.value_bits
        group, packed = reports.columns["group"], reports.columns["bits"]
        ones = np.zeros((m, 2 * T), dtype=np.int64)  # ones per (bit position, item)
        step_rows = max(1, _GRID_ENTRIES // (2 * T))
        for start in range(0, len(reports), step_rows):
            chunk = np.unpackbits(packed[start : start + step_rows], axis=1, count=2 * T,
                                  bitorder="little")
            rows = group[start : start + step_rows]
            # a 0/1 matmul of at most 2**23 rows: float64 sums are exact integers
            onehot = (rows[None, :] == np.arange(m)[:, None]).astype(np.float64)
            ones += np.rint(onehot @ chunk.astype(np.float64)).astype(np.int64)
        return {"ones": ones}

    def _advance(self, pass_index: int, counts: PassCounts, state: PassState,
                 valid: Callable[[np.ndarray, int], np.ndarray] | None,
                 options: dict[str, Any]) -> tuple[dict[str, Any], PassFigures]:
        T, m = self.num_channels, self.value_bits
        n = counts.n
        if pass_index == 1:
            return self._final_advance(pass_index, counts, self.final_epsilon, n)
        sizes = counts.group_counts
        f = self.flip_probability
        est = (counts.arrays["ones"] - sizes[:, None] * f) / (1 - 2 * f)  # holders per item
        est = est.reshape(m, T, 2)
        ones = est[:, :, 1] > est[:, :, 0]  # majority per (bit position, channel); ties -> 0
        weights = _U64(1) << np.arange(m, dtype=_U64)
        cand = (ones.astype(_U64) * weights[:, None]).sum(axis=0, dtype=_U64)
        own = self.channel_of(cand) == np.arange(T)  # a channel's candidate hashes to it
        values = np.unique(cand[own])
        if valid is not None and values.size:
            values = values[valid(values, m)]
        figures = PassFigures(pass_index, self.pass_label(pass_index), n, T, int(values.size))
        return {"candidates": values}, figures

