"""TreeHist (Bassily, Nissim, Stemmer, Thakurta, "Practical Locally Private Heavy Hitters"),
pure NumPy, behind :class:`~ldpflow.core.heavy_hitters.base.HeavyHitterProtocol`.

TreeHist walks a prefix tree of the values with a *threshold* rule and estimates the
values it finds with a separate frequency oracle. This module's reading of it, on the
package's OLH and exact counting:

* The ``m`` bits are cut into ``L = ceil(m / step_bits)`` levels (level ``i`` holds the
  prefixes of ``min((i + 1) step_bits, m)`` bits). Users are split into ``L + 1`` groups by
  their id (:func:`~ldpflow.core.heavy_hitters.base.assign_groups`): group ``i < L`` reports
  its level-``i`` prefix, group ``L`` its full value, each through OLH with the full
  epsilon (one report per user: epsilon-LDP).
* The server extends the frontier level by level: level 0 estimates all
  ``2**step_bits`` prefixes, level ``i`` the ``2**step_bits`` children of every frontier
  node; a node stays when its estimate is at least ``threshold_sigma`` standard
  deviations (default 3; TreeHist's threshold of order ``sqrt(n log d) / epsilon`` is a
  multiple of OLH's standard deviation), at most ``survivors`` of them (default ``4 k``,
  the best first); candidates that cannot be prefixes of valid values (``valid``) are
  pruned first.
* The values of the last level are estimated from the final group's reports (hash
  evaluation, a few candidates) and the top ``k`` by that estimate are the heavy hitters:
  the final estimates are independent of the choice of candidates.

The passes of the family's contract (:mod:`~ldpflow.core.heavy_hitters.base`): pass
``i < L`` reads group ``i`` and counts the signed scatter
(:func:`~ldpflow.core.heavy_hitters.counting.prefix_scatter`) of every child of the
frontier (the state's ``frontier``; the single empty prefix at pass 0), its ``advance``
keeps the next frontier; pass ``L`` reads group ``L`` and counts the support of the last
frontier's values, its ``advance`` keeps them with their estimates, best first. A frontier
that empties leaves nothing to count for the later passes, and the result is empty. The
server options are ``survivors``, ``threshold_sigma`` and ``threshold`` (see
:attr:`TreeHist.server_options`).

Compared with PEM, TreeHist's narrow steps need many groups (``L + 1``), so each estimate
rests on fewer users; ``docs/heavy_hitters.md`` compares the two on the same populations.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from ldpflow.core import hashing, randomness, registry, validation
from ldpflow.core.heavy_hitters import counting, pem
from ldpflow.core.heavy_hitters.base import (
    HeavyHitterProtocol,
    PassCounts,
    PassFigures,
    PassState,
    check_common,
    extend_prefixes,
    hash_range_parameter,
    olh_budget,
    olh_frequencies,
    olh_variance,
    select_survivors,
)
from ldpflow.core.heavy_hitters.config import cost_aware_hash_range
from ldpflow.core.oracles.base import Reports
from ldpflow.core.oracles.local_hashing import OptimizedLocalHashing

__all__ = ["NAME", "COLUMN_SPECS", "TreeHist"]

#: The ``oracle`` tag of TreeHist reports.
NAME = "treehist"
_U64 = np.uint64
#: TreeHist's report columns (name -> (dtype, width)): PEM's report form, the same table.
COLUMN_SPECS: dict[str, tuple[Any, int | None]] = pem.COLUMN_SPECS
# The widest level whose children of one frontier node are counted at once.
_MAX_STEP_BITS = 20


@dataclasses.dataclass(frozen=True, kw_only=True)
class TreeHist(HeavyHitterProtocol):
    """TreeHist: a thresholded prefix tree, then a separate estimate of the leaves.

    Parameters
    ----------
    top_k : int
    value_bits : int
        ``m``, in ``[1, 64]``.
    epsilon : float
    step_bits : int, default 8
        Bits per tree level (a byte: one character of ASCII text).
    hash_range : int, optional
        OLH's number of buckets (default :func:`~ldpflow.core.heavy_hitters.config.
        cost_aware_hash_range`).

    Notes
    -----
    epsilon-LDP per user: one OLH report (full epsilon) of one prefix, the group fixed by
    the user id. Report: 64-bit seed, bucket, group, prefix length.
    """

    name = NAME
    #: The rule of every level (see the module notes): at most ``survivors`` nodes (default
    #: ``4 k``), each estimated at ``threshold_sigma`` standard deviations or more (``None``:
    #: no such threshold) and at frequency ``threshold`` or more (``None``: none).
    server_options = {"survivors": None, "threshold_sigma": 3.0, "threshold": None}
    top_k: int
    value_bits: int
    epsilon: float
    step_bits: int = registry.parameter(8, help="bits per level (default 8).")
    hash_range: int = hash_range_parameter()

    def __post_init__(self) -> None:
        self._check_group_hash()
        k, m, eps, _ = check_common(self.top_k, self.value_bits, self.epsilon)
        step = validation.check_positive_int(self.step_bits, name="step_bits")
        if step > min(m, _MAX_STEP_BITS):
            raise ValueError(f"step_bits must be <= min(value_bits, {_MAX_STEP_BITS}) = "
                             f"{min(m, _MAX_STEP_BITS)}, got {step!r}")
        g = cost_aware_hash_range(eps) if self.hash_range is None else self.hash_range
        g = validation.check_power_of_two(g, name="hash_range")
        for name, value in (("top_k", k), ("value_bits", m), ("epsilon", eps),
                            ("step_bits", step), ("hash_range", g)):
            object.__setattr__(self, name, value)

    @property
    def levels(self) -> tuple[int, ...]:
        """The prefix length of each tree level."""
        count = -(-self.value_bits // self.step_bits)
        return tuple(min((i + 1) * self.step_bits, self.value_bits) for i in range(count))

    @property
    def num_groups(self) -> int:
        """One group per level and the final group."""
        return len(self.levels) + 1

    @property
    def group_bits(self) -> tuple[int, ...]:
        """The prefix length each group reports (the last group: the full value)."""
        return (*self.levels, self.value_bits)

    @property
    def budget_shares(self) -> dict[str, dict[str, float]]:
        """One OLH report with the full epsilon."""
        return {"prefix": olh_budget(self.epsilon, self.hash_range)}

    def variance(self, n: int, frequency: Any = 0.0) -> Any:
        """OLH's variance of one estimate from ``n`` reports."""
        return olh_variance(n, self.epsilon, self.hash_range, frequency)

    # -- client -------------------------------------------------------------------------------
    def perturb(
        self,
        values: npt.ArrayLike,
        user_ids: Any,
        rng: randomness.RandomSource | np.random.Generator | None = None,
    ) -> Reports:
        """Each user's OLH report of its group's prefix.

        Returns
        -------
        Reports
            Columns ``seed`` (uint64), ``bucket``, ``group`` and ``prefix_bits`` (int64).
        """
        vals, groups = self._check_values_and_groups(values, user_ids)
        source = randomness.as_source(rng)
        n = vals.size
        seeds = np.zeros(n, dtype=_U64)
        buckets = np.zeros(n, dtype=np.int64)
        bits_of = np.asarray(self.group_bits, dtype=np.int64)
        for group, bits in enumerate(self.group_bits):
            idx = np.flatnonzero(groups == group)
            if idx.size == 0:
                continue
            oracle = OptimizedLocalHashing(epsilon=self.epsilon, domain_size=2**bits,
                                           hash_range=self.hash_range)
            rep = oracle.perturb(vals[idx] >> _U64(self.value_bits - bits), source)
            seeds[idx] = rep.columns["seed"]
            buckets[idx] = rep.columns["bucket"]
        return Reports(NAME, {"seed": seeds, "bucket": buckets, "group": groups,
                              "prefix_bits": bits_of[groups]})

    # -- server -------------------------------------------------------------------------------
    def _column_specs(self) -> dict[str, tuple[Any, int | None]]:
        return COLUMN_SPECS

    def _row_checks(self, reports: Reports) -> list[tuple[np.ndarray, str]]:
        group, bits = reports.columns["group"], reports.columns["prefix_bits"]
        bucket, g = reports.columns["bucket"], self.hash_range
        bad_group, reason = self._group_check(reports)
        expected = np.asarray(self.group_bits, dtype=np.int64)[np.where(bad_group, 0, group)]
        return [(bad_group, reason),
                (~bad_group & (bits != expected), "prefix_bits does not match the group's length"),
                ((bucket < 0) | (bucket >= g), f"bucket outside [0, {g})")]

    # -- server: the passes -------------------------------------------------------------------
    @property
    def num_passes(self) -> int:
        """One pass per level and the final estimate: ``L + 1``."""
        return len(self.levels) + 1

    def pass_groups(self, pass_index: int) -> tuple[int, ...]:
        """Pass ``i`` reads group ``i`` (the last pass: the final group ``L``)."""
        return (self._check_pass(pass_index),)

    def pass_label(self, pass_index: int) -> str:
        pass_index = self._check_pass(pass_index)
        if pass_index < len(self.levels):
            return f"prefixes of {self.levels[pass_index]} bits"
        return "final estimate"

    def _frontier(self, state: PassState) -> np.ndarray:
        return np.asarray(state.data.get("frontier", np.zeros(1, dtype=_U64)), dtype=_U64)

    def _suffix_bits(self, pass_index: int) -> int:
        return self.levels[pass_index] - (self.levels[pass_index - 1] if pass_index else 0)

    def _pass_context(self, pass_index: int, state: PassState) -> tuple:
        return (self._frontier(state),)

    def _empty_arrays(self, pass_index: int, context: tuple) -> dict[str, tuple[int, ...]]:
        (nodes,) = context
        if pass_index < len(self.levels):
            return {"counts": (nodes.size, 1 << self._suffix_bits(pass_index))}
        return {"support": (nodes.size,)}

    def _count_pass(
        self, pass_index: int, reports: Reports, context: tuple
    ) -> dict[str, np.ndarray]:
        (nodes,) = context
        if not nodes.size:
            return {}
        if pass_index == len(self.levels):
            return self._final_count(reports, context)
        return {"counts": counting.prefix_scatter(
            reports.columns["seed"], reports.columns["bucket"], nodes, self.levels[pass_index],
            self._suffix_bits(pass_index), self.hash_range)}

    def _advance(self, pass_index: int, counts: PassCounts, state: PassState,
                 valid: Callable[[np.ndarray, int], np.ndarray] | None,
                 options: dict[str, Any]) -> tuple[dict[str, Any], PassFigures]:
        (nodes,) = counts.context
        n = int(counts.group_counts[pass_index])
        sigma = float(np.sqrt(self.variance(n)))
        g = self.hash_range
        if pass_index == len(self.levels):  # the final estimate of the last level's frontier
            return self._final_advance(pass_index, counts, self.epsilon, n)
        survivors = options["survivors"]
        cap = 4 * self.top_k if survivors is None else validation.check_positive_int(
            survivors, name="survivors")
        bits, eta = self.levels[pass_index], self._suffix_bits(pass_index)
        cand = extend_prefixes(nodes, eta)
        if nodes.size:
            support = hashing.support_counts(counts.arrays["counts"], g).reshape(-1)
        else:
            support = np.zeros(0, dtype=np.int64)
        freqs = olh_frequencies(support, n, self.epsilon, g)
        mask = None if valid is None or not cand.size else valid(cand, bits)
        keep = select_survivors(cand, freqs, sigma, survivors=cap,
                                threshold_sigma=options["threshold_sigma"],
                                threshold=options["threshold"], valid=mask)
        figures = PassFigures(
            pass_index, self.pass_label(pass_index), n, int(cand.size), int(keep.size), sigma
        )
        return {"frontier": cand[keep]}, figures

