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
  multiple of OLH's standard deviation), at most ``max_frontier`` of them (default
  ``4 k``, the best first).
* The values of the last level are estimated from the final group's reports (hash
  evaluation, a few candidates) and the top ``k`` by that estimate are the heavy hitters:
  the final estimates are independent of the choice of candidates.

Compared with PEM, TreeHist's narrow steps need many groups (``L + 1``), so each estimate
rests on fewer users; ``docs/heavy_hitters.md`` compares the two on the same populations.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from ldpflow.core import hashing, randomness, validation
from ldpflow.core.heavy_hitters import counting
from ldpflow.core.heavy_hitters.base import (
    HeavyHitterProtocol,
    HeavyHitters,
    check_top_k,
    olh_budget,
    olh_frequencies,
    olh_variance,
    select_survivors,
    select_top,
)
from ldpflow.core.heavy_hitters.config import cost_aware_hash_range
from ldpflow.core.oracles.base import Reports, as_reports
from ldpflow.core.oracles.local_hashing import OptimizedLocalHashing
from ldpflow.core.validation import InvalidReportError

__all__ = ["NAME", "TreeHist"]

#: The ``oracle`` tag of TreeHist reports.
NAME = "treehist"
_U64 = np.uint64
_COLUMNS = ("seed", "bucket", "group", "prefix_bits")
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
    top_k: int
    value_bits: int
    epsilon: float
    step_bits: int = 8
    hash_range: int = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        k = validation.check_positive_int(self.top_k, name="top_k")
        m = validation.check_positive_int(self.value_bits, name="value_bits")
        if m > 64:
            raise ValueError(f"value_bits must be in [1, 64], got {m!r}")
        eps = validation.check_epsilon(self.epsilon)
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
    def validate(self, reports: Reports | Mapping[str, npt.ArrayLike]) -> Reports:
        """The reports with checked columns, or ``InvalidReportError`` naming the first bad row."""
        reports = as_reports(reports, NAME, _COLUMNS)
        cols = {c: reports.columns[c].astype(_U64 if c == "seed" else np.int64, copy=False)
                for c in _COLUMNS}
        group, bits, bucket = cols["group"], cols["prefix_bits"], cols["bucket"]
        checks = [((group < 0) | (group >= self.num_groups),
                   f"group outside [0, {self.num_groups})"),
                  ((bucket < 0) | (bucket >= self.hash_range),
                   f"bucket outside [0, {self.hash_range})")]
        ok_group = np.clip(group, 0, self.num_groups - 1)
        checks.append((bits != np.asarray(self.group_bits)[ok_group],
                       "prefix_bits does not match the group's length"))
        for mask, reason in checks:
            bad = np.flatnonzero(mask)
            if bad.size:
                raise InvalidReportError(f"{bad.size} invalid {NAME} report(s); first at row "
                                         f"{int(bad[0])}: {reason}")
        return Reports(NAME, cols)

    def identify(self, reports: Reports | Mapping[str, npt.ArrayLike], *,
                 top_k: int | None = None,
                 valid: Callable[[np.ndarray, int], np.ndarray] | None = None,
                 threshold_sigma: float | None = 3.0, max_frontier: int | None = None
                 ) -> HeavyHitters:
        """Walk the tree with the threshold rule, then estimate its leaves; top ``k``.

        Parameters
        ----------
        reports : Reports
        top_k : int, optional
        valid : callable, optional
            ``valid(prefixes, bits)``: prune prefixes of no valid value (a codec's).
        threshold_sigma : float or None, default 3
            A node stays when estimated at ``threshold_sigma`` standard deviations or more
            (None: no threshold, only ``max_frontier``).
        max_frontier : int, optional
            The most nodes kept per level (default ``4 k``).

        Raises
        ------
        InvalidReportError
            If a row is invalid.
        ValueError
            If a group has no reports.
        """
        k = check_top_k(top_k, self.top_k)
        frontier_cap = 4 * k if max_frontier is None else validation.check_positive_int(
            max_frontier, name="max_frontier")
        reports = self.validate(reports)
        group = reports.columns["group"]
        parts = [reports[np.flatnonzero(group == g)] for g in range(self.num_groups)]
        for g, part in enumerate(parts):
            if len(part) == 0:
                raise ValueError(f"group {g} has no reports; TreeHist needs every level")
        frontier = np.zeros(1, dtype=_U64)
        parent = 0
        candidates, kept = [], []
        for level, bits in enumerate(self.levels):
            eta = bits - parent
            part = parts[level]
            F = counting.prefix_scatter(part.columns["seed"], part.columns["bucket"], frontier,
                                        bits, eta, self.hash_range)
            support = hashing.support_counts(F, self.hash_range).reshape(-1)
            cand = (frontier[:, None] << _U64(eta) | np.arange(1 << eta, dtype=_U64)).reshape(-1)
            freqs = olh_frequencies(support, len(part), self.epsilon, self.hash_range)
            sigma = float(np.sqrt(self.variance(len(part))))
            mask = None if valid is None else valid(cand, bits)
            keep = select_survivors(cand, freqs, sigma, survivors=frontier_cap,
                                    threshold_sigma=threshold_sigma, valid=mask)
            frontier, parent = cand[keep], bits
            candidates.append(int(cand.size))
            kept.append(int(frontier.size))
            if frontier.size == 0:
                break
        final = parts[-1]
        n_final = len(final)
        values = frontier if parent == self.value_bits else np.zeros(0, dtype=_U64)
        support = counting.candidate_support(final.columns["seed"], final.columns["bucket"],
                                             values, self.value_bits, self.hash_range)
        freqs = olh_frequencies(support, n_final, self.epsilon, self.hash_range)
        order = select_top(values, freqs, k) if values.size else np.zeros(0, dtype=np.int64)
        candidates.append(int(values.size))
        kept.append(int(order.size))
        population = len(reports)
        return HeavyHitters(values=values[order], frequencies=freqs[order],
                            counts=freqs[order] * population, population=population,
                            group_sizes=tuple(len(p) for p in parts),
                            stage_candidates=tuple(candidates), stage_survivors=tuple(kept))
