"""Apple's sequence fragment puzzle (SFP; Apple's Differential Privacy Team, "Learning with
Privacy at Scale"), pure NumPy, behind
:class:`~ldpflow.core.heavy_hitters.base.HeavyHitterProtocol`.

A value is cut into ``P = m / fragment_bits`` fragments (most significant first). Each user
sends two reports, each with **half of epsilon**:

* a *puzzle piece*: at the position ``p`` of its group (users are split into ``P`` groups by
  id, :func:`~ldpflow.core.heavy_hitters.base.assign_groups`), the pair
  ``(h(v), fragment_p(v))`` of a public ``hash_bits``-bit hash of the whole value and the
  fragment, as one ``hash_bits + fragment_bits``-bit item through OLH;
* the whole value through OLH (for the final estimate).

The server estimates every pair of every position over its full domain (exact
Walsh–Hadamard counting), keeps at each position the pairs estimated at ``threshold_sigma``
standard deviations or more (at most ``max_pairs``, the best first), joins the positions'
fragments that carry the same hash (the hash is the puzzle's glue: fragments of one value
share it), keeps at most ``query_limit`` joined candidates, estimates them from every
user's whole-value report and returns the top ``k``. Apple uses count-mean sketches as the
frequency oracle; this reading uses the package's OLH for both reports.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from ldpflow.core import hashing, randomness, validation
from ldpflow.core.heavy_hitters import counting
from ldpflow.core.heavy_hitters.base import (
    DEFAULT_QUERY_LIMIT,
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
from ldpflow.core.heavy_hitters.spm import check_common, check_range
from ldpflow.core.oracles.base import Reports, as_reports
from ldpflow.core.oracles.local_hashing import OptimizedLocalHashing

__all__ = ["NAME", "SequenceFragmentPuzzle"]

#: The ``oracle`` tag of SFP reports.
NAME = "sfp"
_U64 = np.uint64
_COLUMNS = ("group", "seed_piece", "bucket_piece", "seed", "bucket")
# The widest puzzle-piece domain counted over its full domain (2**22 counters).
_MAX_PIECE_BITS = 22


@dataclasses.dataclass(frozen=True, kw_only=True)
class SequenceFragmentPuzzle(HeavyHitterProtocol):
    """Apple's sequence fragment puzzle (SFP) on OLH.

    Parameters
    ----------
    top_k : int
    value_bits : int
        ``m``, a multiple of ``fragment_bits``.
    epsilon : float
        Each user's total budget: ``epsilon / 2`` per report.
    fragment_bits : int, default 16
        The width of a fragment (two bytes: two ASCII characters, as Apple's).
    hash_bits : int, default 6
        The width of the public hash that glues a value's fragments.
    query_limit : int, default 2**20
        The most joined candidates estimated in the final step.
    hash_seed : int, default 0
        The key of the public hash.

    Notes
    -----
    epsilon-LDP per user: two OLH reports of ``epsilon / 2`` each (sequential
    composition); the position is fixed by the user id and public. Report: two 64-bit
    seeds and two buckets, and the position.
    """

    name = NAME
    top_k: int
    value_bits: int
    epsilon: float
    fragment_bits: int = 16
    hash_bits: int = 6
    query_limit: int = DEFAULT_QUERY_LIMIT
    hash_seed: int = 0

    def __post_init__(self) -> None:
        k, m, eps, limit = check_common(self.top_k, self.value_bits, self.epsilon,
                                        self.query_limit)
        frag = validation.check_positive_int(self.fragment_bits, name="fragment_bits")
        if frag > m or m % frag:
            raise ValueError(f"fragment_bits must divide value_bits={m}, got {frag!r}")
        r = validation.check_positive_int(self.hash_bits, name="hash_bits")
        if r + frag > _MAX_PIECE_BITS:
            raise ValueError(f"hash_bits + fragment_bits must be <= {_MAX_PIECE_BITS}, got "
                             f"{r} + {frag}")
        seed = validation.check_positive_int(self.hash_seed, name="hash_seed", minimum=0)
        if seed >= 2**64:
            raise ValueError(f"hash_seed must be < 2**64, got {seed!r}")
        for name, value in (("top_k", k), ("value_bits", m), ("epsilon", eps),
                            ("fragment_bits", frag), ("hash_bits", r), ("query_limit", limit),
                            ("hash_seed", seed)):
            object.__setattr__(self, name, value)

    @property
    def positions(self) -> int:
        """``P = m / fragment_bits``."""
        return self.value_bits // self.fragment_bits

    @property
    def num_groups(self) -> int:
        """One group per fragment position."""
        return self.positions

    @property
    def piece_bits(self) -> int:
        """The width of a puzzle piece: ``hash_bits + fragment_bits``."""
        return self.hash_bits + self.fragment_bits

    @property
    def component_epsilon(self) -> float:
        """The budget of each report: ``epsilon / 2``."""
        return self.epsilon / 2.0

    @property
    def hash_range(self) -> int:
        """OLH's hash range of both reports (cost-aware for ``epsilon / 2``)."""
        return cost_aware_hash_range(self.component_epsilon)

    @property
    def budget_shares(self) -> dict[str, dict[str, float]]:
        """The puzzle piece and the whole value, ``epsilon / 2`` each."""
        comp = olh_budget(self.component_epsilon, self.hash_range)
        return {"piece": dict(comp), "final": dict(comp)}

    def value_hash(self, values: npt.ArrayLike) -> np.ndarray:
        """The public ``hash_bits``-bit hash of each value (splitmix64 of value and key)."""
        vals = np.asarray(values, dtype=_U64)
        with np.errstate(over="ignore"):
            mixed = hashing.splitmix64_mix(vals ^ _U64(self.hash_seed))
        return (mixed >> _U64(64 - self.hash_bits)).astype(np.int64)

    def fragment(self, values: np.ndarray, position: int) -> np.ndarray:
        """Fragment ``position`` (0: the most significant) of each value."""
        shift = self.value_bits - (position + 1) * self.fragment_bits
        return ((values >> _U64(shift)) & _U64((1 << self.fragment_bits) - 1)).astype(_U64)

    def _oracle(self, bits: int) -> OptimizedLocalHashing:
        return OptimizedLocalHashing(epsilon=self.component_epsilon, domain_size=2**bits,
                                     hash_range=self.hash_range)

    # -- client -------------------------------------------------------------------------------
    def perturb(
        self,
        values: npt.ArrayLike,
        user_ids: Any,
        rng: randomness.RandomSource | np.random.Generator | None = None,
    ) -> Reports:
        """Each user's puzzle piece (its position's) and whole-value report.

        Returns
        -------
        Reports
            Columns ``group`` (the position), ``seed_piece``, ``bucket_piece``, ``seed``,
            ``bucket``.
        """
        vals, groups = self._check_values_and_groups(values, user_ids)
        source = randomness.as_source(rng)
        n = vals.size
        pieces = np.zeros(n, dtype=_U64)
        tags = self.value_hash(vals).astype(_U64) << _U64(self.fragment_bits)
        for position in range(self.positions):
            idx = np.flatnonzero(groups == position)
            pieces[idx] = tags[idx] | self.fragment(vals[idx], position)
        piece = self._oracle(self.piece_bits).perturb(pieces, source)
        full = self._oracle(self.value_bits).perturb(vals, source)
        return Reports(NAME, {"group": groups, "seed_piece": piece.columns["seed"],
                              "bucket_piece": piece.columns["bucket"].astype(np.int64),
                              "seed": full.columns["seed"],
                              "bucket": full.columns["bucket"].astype(np.int64)})

    # -- server -------------------------------------------------------------------------------
    def validate(self, reports: Reports | Mapping[str, npt.ArrayLike]) -> Reports:
        """The reports with checked columns, or ``InvalidReportError`` naming the first bad row."""
        reports = as_reports(reports, NAME, _COLUMNS)
        cols = {c: reports.columns[c].astype(_U64 if c.startswith("seed") else np.int64,
                                             copy=False) for c in _COLUMNS}
        check_range(cols["group"], 0, self.positions, "group", NAME)
        for c in ("bucket_piece", "bucket"):
            check_range(cols[c], 0, self.hash_range, c, NAME)
        return Reports(NAME, cols)

    def identify(self, reports: Reports | Mapping[str, npt.ArrayLike], *,
                 top_k: int | None = None,
                 valid: Callable[[np.ndarray, int], np.ndarray] | None = None,
                 threshold_sigma: float | None = 3.0, max_pairs: int | None = None
                 ) -> HeavyHitters:
        """Puzzle pieces per position, joined by hash, then final testing; top ``k``.

        Parameters
        ----------
        reports : Reports
        top_k : int, optional
        valid : callable, optional
            ``valid(values, value_bits)``: prune joined candidates of no valid value.
        threshold_sigma : float or None, default 3
            A pair stays when estimated at this many standard deviations or more.
        max_pairs : int, optional
            The most pairs kept per position (default ``4 k``).

        Raises
        ------
        InvalidReportError
            If a row is invalid.
        ValueError
            If there are no reports, or a position has none.
        """
        k = check_top_k(top_k, self.top_k)
        cap = 4 * k if max_pairs is None else validation.check_positive_int(
            max_pairs, name="max_pairs")
        reports = self.validate_some(reports)
        n = len(reports)
        cols, group = reports.columns, reports.columns["group"]
        g = self.hash_range
        frag_mask = (1 << self.fragment_bits) - 1
        by_tag: list[dict[int, np.ndarray]] = []
        candidates, kept = [], []
        for position in range(self.positions):
            idx = np.flatnonzero(group == position)
            if idx.size == 0:
                raise ValueError(f"position {position} has no reports; SFP needs every one")
            support = counting.full_domain_support(cols["seed_piece"][idx],
                                                   cols["bucket_piece"][idx],
                                                   self.piece_bits, g)
            freqs = olh_frequencies(support, idx.size, self.component_epsilon, g)
            sigma = float(np.sqrt(olh_variance(idx.size, self.component_epsilon, g)))
            pairs = np.arange(1 << self.piece_bits, dtype=_U64)
            keep = select_survivors(pairs, freqs, sigma, survivors=cap,
                                    threshold_sigma=threshold_sigma)
            tags = (pairs[keep] >> _U64(self.fragment_bits)).astype(np.int64)
            frags = pairs[keep] & _U64(frag_mask)
            by_tag.append({int(t): frags[tags == t] for t in np.unique(tags)})
            candidates.append(1 << self.piece_bits)
            kept.append(int(keep.size))
        joined: list[np.ndarray] = []
        for tag in sorted(set.intersection(*(set(d) for d in by_tag))):
            parts = [d[tag] for d in by_tag]
            for combo in itertools.product(*parts):
                value = 0
                for frag in combo:
                    value = (value << self.fragment_bits) | int(frag)
                joined.append(np.uint64(value))
                if len(joined) >= self.query_limit:
                    break
            if len(joined) >= self.query_limit:
                break
        values = np.unique(np.array(joined, dtype=_U64))
        # A value's own hash must be the tag that joined it (as MCM's own-channel check).
        if values.size:
            tags = np.array([t for t in sorted(set.intersection(*(set(d) for d in by_tag)))])
            values = values[np.isin(self.value_hash(values), tags)]
        if valid is not None and values.size:
            values = values[valid(values, self.value_bits)]
        support = counting.candidate_support(cols["seed"], cols["bucket"], values,
                                             self.value_bits, g)
        freqs = olh_frequencies(support, n, self.component_epsilon, g)
        order = select_top(values, freqs, k) if values.size else np.zeros(0, dtype=np.int64)
        candidates.append(int(values.size))
        kept.append(int(order.size))
        return HeavyHitters(values=values[order], frequencies=freqs[order],
                            counts=freqs[order] * n, population=n,
                            group_sizes=tuple(int(np.count_nonzero(group == p))
                                              for p in range(self.positions)),
                            stage_candidates=tuple(candidates), stage_survivors=tuple(kept))
