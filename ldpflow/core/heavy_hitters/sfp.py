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
standard deviations or more (at most ``survivors``, default ``4 k``, the best first), joins
the positions' fragments that carry the same hash (the hash is the puzzle's glue: fragments
of one value share it) and keeps a joined value only when its own hash is the tag that
joined it, keeps at most ``query_limit`` joined candidates, estimates them from every
user's whole-value report and returns the top ``k``. Apple uses count-mean sketches as the
frequency oracle; this reading uses the package's OLH for both reports.

The passes of the family's contract (:mod:`~ldpflow.core.heavy_hitters.base`), each over
every group: pass 0, "puzzle pieces", counts the full-domain support of the pieces of each
position from its group (array ``support_p``) and its ``advance`` keeps the pieces, joins
them (:meth:`SequenceFragmentPuzzle.join`) and prunes the values the codec does not allow
(``valid``); pass 1, "final test", counts the support of the joined values from the
whole-value reports and its ``advance`` keeps them with their estimates, best first. The
server options are ``survivors``, ``threshold_sigma`` and ``threshold``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ldpflow.core import hashing, randomness, registry, validation
from ldpflow.core.heavy_hitters import counting
from ldpflow.core.heavy_hitters.base import (
    HeavyHitterProtocol,
    PassCounts,
    PassFigures,
    PassState,
    check_common,
    olh_budget,
    olh_frequencies,
    olh_variance,
    query_limit_parameter,
    select_survivors,
)
from ldpflow.core.heavy_hitters.config import cost_aware_hash_range
from ldpflow.core.oracles.base import Reports
from ldpflow.core.oracles.local_hashing import OptimizedLocalHashing

__all__ = ["NAME", "COLUMN_SPECS", "SequenceFragmentPuzzle"]

#: The ``oracle`` tag of SFP reports.
NAME = "sfp"
_U64 = np.uint64
#: SFP's report columns (name -> (dtype, width)).
COLUMN_SPECS: dict[str, tuple[Any, int | None]] = {
    "group": (np.int64, None), "seed_piece": (np.uint64, None),
    "bucket_piece": (np.int64, None), "seed": (np.uint64, None), "bucket": (np.int64, None)}
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
    #: The rule of every position: at most ``survivors`` pieces (default ``4 k``), each
    #: estimated at ``threshold_sigma`` standard deviations or more (``None``: no such
    #: threshold) and at frequency ``threshold`` or more (``None``: none).
    server_options = {"survivors": None, "threshold_sigma": 3.0, "threshold": None}
    top_k: int
    value_bits: int
    epsilon: float
    fragment_bits: int = registry.parameter(16, help="the width of a fragment (default 16).")
    hash_bits: int = registry.parameter(
        6, help="the width of the hash that glues fragments (default 6).")
    query_limit: int = query_limit_parameter()
    hash_seed: int = registry.parameter(0, help="the key of that hash (default 0).")

    def __post_init__(self) -> None:
        self._check_group_hash()
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
    def _column_specs(self) -> dict[str, tuple[Any, int | None]]:
        return COLUMN_SPECS

    def _row_checks(self, reports: Reports) -> list[tuple[np.ndarray, str]]:
        g = self.hash_range
        return [self._group_check(reports)] + [
            ((reports.columns[c] < 0) | (reports.columns[c] >= g), f"{c} outside [0, {g})")
            for c in ("bucket_piece", "bucket")]

    # -- server: the passes -------------------------------------------------------------------
    @property
    def num_passes(self) -> int:
        """Two passes: the puzzle pieces, then the final test of the joined values."""
        return 2

    def pass_label(self, pass_index: int) -> str:
        return ("puzzle pieces", "final test")[self._check_pass(pass_index)]

    def _pass_context(self, pass_index: int, state: PassState) -> tuple:
        if pass_index == 0:
            return ()
        return self._final_context(state)

    def _empty_arrays(self, pass_index: int, context: tuple) -> dict[str, tuple[int, ...]]:
        if pass_index == 0:  # one 2**piece_bits sum per position, allocated where its reports are
            return {}
        return {"support": (context[0].size,)}

    def _count_pass(
        self, pass_index: int, reports: Reports, context: tuple
    ) -> dict[str, np.ndarray]:
        cols, g = reports.columns, self.hash_range
        if pass_index == 1:
            return self._final_count(reports, context)
        out = {}
        for position in range(self.positions):
            idx = np.flatnonzero(cols["group"] == position)
            if idx.size:
                out[f"support_{position}"] = counting.full_domain_support(
                    cols["seed_piece"][idx], cols["bucket_piece"][idx], self.piece_bits, g)
        return out

    def _advance(self, pass_index: int, counts: PassCounts, state: PassState,
                 valid: Callable[[np.ndarray, int], np.ndarray] | None,
                 options: dict[str, Any]) -> tuple[dict[str, Any], PassFigures]:
        g, eps, n = self.hash_range, self.component_epsilon, counts.n
        if pass_index == 1:
            return self._final_advance(pass_index, counts, eps, n)
        survivors = options["survivors"]
        cap = 4 * self.top_k if survivors is None else validation.check_positive_int(
            survivors, name="survivors")
        pieces = np.arange(1 << self.piece_bits, dtype=_U64)
        kept = []
        for position in range(self.positions):
            size = int(counts.group_counts[position])
            freqs = olh_frequencies(counts.arrays[f"support_{position}"], size, eps, g)
            sigma = float(np.sqrt(olh_variance(size, eps, g)))
            keep = select_survivors(pieces, freqs, sigma, survivors=cap,
                                    threshold_sigma=options["threshold_sigma"],
                                    threshold=options["threshold"])
            kept.append(pieces[keep])
        values = self.join(kept)
        if valid is not None and values.size:
            values = values[valid(values, self.value_bits)]
        figures = PassFigures(pass_index, self.pass_label(pass_index), n,
                              self.positions << self.piece_bits, int(values.size))
        return {"candidates": values}, figures

    def join(self, pieces: Sequence[npt.ArrayLike]) -> np.ndarray:
        """The values the kept pieces of every position spell, sorted (uint64).

        For each tag held by a piece of every position, every combination of one fragment
        per position under that tag (tags ascending; within a tag the combinations in the
        order of :func:`itertools.product` over each position's pieces in the given order),
        at most :attr:`query_limit` combinations in all; a value stays only when its own
        :meth:`value_hash` is the tag that joined it.

        Parameters
        ----------
        pieces : sequence of array_like
            The kept ``piece_bits``-bit pieces ``(tag << fragment_bits) | fragment`` of each
            position, best first.

        Returns
        -------
        ndarray of uint64
        """
        if len(pieces) != self.positions:
            raise ValueError(f"pieces must hold one array per position ({self.positions}), "
                             f"got {len(pieces)}")
        frag_bits, num_tags = self.fragment_bits, 1 << self.hash_bits
        tags, frags, counts = [], [], []
        for kept in pieces:
            kept = np.asarray(kept, dtype=_U64).reshape(-1)
            tag = (kept >> _U64(frag_bits)).astype(np.int64)
            order = np.argsort(tag, kind="stable")  # by tag, in the given order within one
            tags.append(tag[order])
            frags.append(kept[order] & _U64((1 << frag_bits) - 1))
            counts.append(np.bincount(tag, minlength=num_tags))
        sizes = np.stack(counts)  # (positions, tags): the pieces of each tag per position
        common = np.flatnonzero((sizes > 0).all(axis=0))
        limit = self.query_limit
        per_tag = np.ones(common.size, dtype=np.int64)  # combinations per tag, capped at Q
        for row in sizes[:, common]:
            per_tag = np.minimum(per_tag * row, limit)
        total = min(int(per_tag.sum()), limit)
        if total == 0:
            return np.zeros(0, dtype=_U64)
        ends = np.cumsum(per_tag)
        row = np.arange(total, dtype=np.int64)
        which = np.searchsorted(ends, row, side="right")  # the tag of each combination
        local = row - (ends - per_tag)[which]
        tag = common[which]
        values = np.zeros(total, dtype=_U64)
        for position in range(self.positions - 1, -1, -1):  # the last position varies fastest
            radix = sizes[position, tag]
            digit = local % radix
            local //= radix
            start = np.cumsum(counts[position]) - counts[position]
            frag = frags[position][start[tag] + digit]
            values |= frag << _U64((self.positions - 1 - position) * frag_bits)
        own = self.value_hash(values) == tag  # the puzzle's glue must be the value's own hash
        return np.unique(values[own])

