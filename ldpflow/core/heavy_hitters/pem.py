"""The prefix extending method (PEM) of Wang, Li and Jha, pure NumPy.

Contract ("Locally Differentially Private Heavy Hitter Identification", Wang, Li, Jha,
Sec. IV):

* Values are ``m``-bit unsigned integers (:mod:`ldpflow.core.codecs` maps strings to them);
  the prefix of length ``l`` of ``v`` is ``v >> (m - l)``.
* Users are split into ``g`` disjoint groups by a hash of a stable user id
  (:func:`~ldpflow.core.heavy_hitters.base.assign_groups`). Passes are indexed from 0 here:
  group ``i`` (the paper's group ``i + 1``) reports its prefix of length
  ``prefix_bits[i] = min(gamma + (i + 1) eta, m)`` through OLH with the full epsilon.
* Pass 0 estimates all ``2**prefix_bits[0]`` prefixes; pass ``i > 0`` estimates the
  candidates ``c * 2**eta_i + s`` for each prefix ``c`` kept by pass ``i - 1`` and every
  suffix ``s < 2**eta_i`` (``eta_i = prefix_bits[i] - prefix_bits[i - 1]``), from group
  ``i``'s reports only (counted exactly by :mod:`~ldpflow.core.heavy_hitters.counting`).

Server-side choices (they change nothing a client sends, so they are arguments of the
server calls, not parameters of the configuration):

* **the survivor rule** (:func:`~ldpflow.core.heavy_hitters.base.select_survivors`): each
  pass keeps its ``survivors`` best candidates (default ``2 k``), optionally only those
  above ``threshold_sigma`` standard deviations, and the last pass only those significantly
  above zero (``significance``, see :meth:`PrefixExtendingMethod.select`); candidates that
  cannot be prefixes of valid values under the codec (``valid``) are pruned first;
* **the ranking** (:func:`combine`): from the second pass on, a pool of the best
  candidates by their own estimates is ranked by an inverse-variance combination of their
  own estimate and, where an earlier pass's ancestor of a candidate is held by no other
  candidate of the pool and its estimate agrees within ``z`` standard deviations of the
  difference, the earlier groups' estimates of that ancestor (which then count the same
  value). The top ``k`` of the last pass by that ranking are the heavy hitters.

Each of the paper's stages is one pass of the family's contract (its stage ``i`` is
pass ``i``) (:mod:`~ldpflow.core.heavy_hitters.base`):
:meth:`PrefixExtendingMethod.aggregate` turns a batch of one group's reports into
:class:`~ldpflow.core.heavy_hitters.base.PassCounts` (exact integer sums, merged by
addition) for the previous pass's survivors, :meth:`~PrefixExtendingMethod.estimate` turns
them into a :class:`PassEstimate` and :meth:`~PrefixExtendingMethod.select` picks the
survivors (a :class:`PassSurvivors`, given to the later passes' selections as
``history``); ``advance`` does both, and ``identify`` runs every pass in order.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ldpflow.core import codecs, hashing, randomness, registry, validation
from ldpflow.core.heavy_hitters import counting
from ldpflow.core.heavy_hitters.base import (
    DEFAULT_SIGNIFICANCE,
    HeavyHitterProtocol,
    PassCounts,
    PassFigures,
    PassState,
    check_common,
    default_survivors,
    extend_prefixes,
    hash_range_parameter,
    olh_budget,
    olh_frequencies,
    olh_variance,
    parent_weighted_sigmas,
    query_limit_parameter,
    select_survivors,
)
from ldpflow.core.keys import PEM as NAME
from ldpflow.core.oracles.base import Reports
from ldpflow.core.oracles.local_hashing import (
    OptimizedLocalHashing,
    olh_probabilities,
    optimal_hash_range,
)

__all__ = [
    "NAME",
    "COLUMN_SPECS",
    "PrefixExtendingMethod",
    "PassEstimate",
    "PassSurvivors",
    "combine",
    "DEFAULT_REFINE_SIGMA",
]

_U64 = np.uint64
#: PEM's report columns (name -> (dtype, width)), as the oracles' ``_column_specs``.
COLUMN_SPECS: dict[str, tuple[Any, int | None]] = {
    "seed": (np.uint64, None), "bucket": (np.int64, None), "group": (np.int64, None),
    "prefix_bits": (np.int64, None)}
#: ``z`` of :func:`combine`: an earlier pass's estimate joins the final ranking unless it
#: exceeds the last pass's by more than ``z`` standard deviations of the difference.
DEFAULT_REFINE_SIGMA = 3.0


@dataclasses.dataclass(frozen=True, eq=False)
class PassEstimate:
    """The estimated frequencies of one pass's candidates.

    Attributes
    ----------
    pass_index : int
    prefix_bits : int
        The length of the candidates (the pass group's prefix length).
    candidates : ndarray of uint64
        The candidate prefixes, see :func:`extend_prefixes`.
    support_counts : ndarray of int64
        How many of the group's reports support each candidate.
    frequencies : ndarray of float64
        ``(c / n - q) / (p - q)``: unbiased for the candidate's share of the group, hence of
        the whole population (the groups are uniform samples of it).
    n : int
        The number of the group's reports.
    sigma : float
        The standard deviation of one frequency at true frequency 0 (``nan`` when ``n == 0``).
    """

    pass_index: int
    prefix_bits: int
    candidates: np.ndarray
    support_counts: np.ndarray
    frequencies: np.ndarray
    n: int
    sigma: float

    def counts(self, population: int) -> np.ndarray:
        """Estimated numbers of users: ``frequency * population`` (the total of all groups)."""
        return self.frequencies * validation.check_positive_int(population, name="population")


# -- the protocol ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, kw_only=True)
class PrefixExtendingMethod(HeavyHitterProtocol):
    """The prefix extending method (PEM) of Wang, Li and Jha for top-k heavy hitters.

    Parameters
    ----------
    top_k : int
        ``k``: how many values to identify (by default; :meth:`identify` may ask for
        another number).
    value_bits : int
        ``m``: the width of the values, in ``[1, 64]``.
    epsilon : float
        The privacy parameter; each user reports once, with the full epsilon.
    query_limit : int, default 2**20
        ``Q``: the most candidates one pass may estimate, at most ``2**28``.
    start_bits : int, optional
        ``gamma`` (``< value_bits``); by default ``ceil(log2 k)`` (at most ``m - 1``).
    step_bits : int, optional
        ``eta``; by default the largest with ``k * 2**eta <= Q`` and
        ``2**(gamma + eta) <= Q`` (at most ``m - gamma``); derived from ``num_groups`` when
        only that is given.
    num_groups : int, optional
        ``g = ceil((m - gamma) / eta)``; when given it must agree with the other parameters.
    hash_range : int, optional
        OLH's number of buckets (a power of two); by default the optimal one for epsilon
        (:func:`ldpflow.core.heavy_hitters.config.configure` chooses a cheaper one with the
        counting cost in view).

    Notes
    -----
    epsilon-LDP per user: a user belongs to exactly one group, fixed by its id, and reports
    one OLH report of its prefix with the full epsilon (report: 64-bit seed, ``log2``
    hash-range bucket, and the public group and prefix length). The defaults are the paper's
    Sec. IV-C configuration: equal groups, ``gamma = ceil(log2 k)``, the largest ``eta``
    within the query limit; the last step takes the remainder ``m - gamma - (g - 1) eta``.
    Counting pass ``i`` costs ``O(n_i 2**b s / d + s 2**eta eta)`` for ``s`` survivors
    (:mod:`~ldpflow.core.heavy_hitters.counting`); the estimate of a candidate has OLH's
    variance on the ``n_i`` users of its group. The survivors of a pass are at most
    ``query_limit // 2**eta_i`` (by default :attr:`default_survivors`).
    """

    name = NAME  # the ``oracle`` tag of its reports (a class attribute, not a parameter)
    #: :mod:`ldpflow.core.poisoning` tests the OLH counts of each pass's prefixes.
    poisoning_family = "prefix"
    #: The survivor rule of every pass (see :meth:`select`).
    server_options = {"survivors": None, "threshold_sigma": None, "threshold": None,
                      "refine_sigma": DEFAULT_REFINE_SIGMA,
                      "significance": DEFAULT_SIGNIFICANCE}
    top_k: int
    value_bits: int
    epsilon: float
    query_limit: int = query_limit_parameter()
    start_bits: int = registry.parameter(  # None: ceil(log2 top_k)
        None, help="gamma (default ceil(log2 k)).")
    step_bits: int = registry.parameter(  # None: the largest within Q
        None, help="eta (default the largest with k * 2**eta <= Q).")
    num_groups: int = registry.parameter(  # None: from start and step bits
        None, help="g (default ceil((bits - start_bits) / step_bits); must agree).")
    hash_range: int = hash_range_parameter()  # None: OLH's optimum

    def __post_init__(self) -> None:
        self._check_group_hash()
        k, m, epsilon, limit = check_common(self.top_k, self.value_bits, self.epsilon,
                                            self.query_limit)
        hash_range = (
            optimal_hash_range(epsilon) if self.hash_range is None else self.hash_range
        )
        hash_range = validation.check_power_of_two(hash_range, name="hash_range")
        if self.start_bits is None:
            gamma = min((k - 1).bit_length(), m - 1)
        else:
            gamma = validation.check_positive_int(self.start_bits, name="start_bits", minimum=0)
            if gamma >= m:
                raise ValueError(f"start_bits must be < value_bits={m}, got {gamma!r}")
        rest = m - gamma
        groups = self.num_groups
        if groups is not None:
            groups = validation.check_positive_int(groups, name="num_groups")
        if self.step_bits is not None:
            eta = validation.check_positive_int(self.step_bits, name="step_bits")
        elif groups is not None:
            eta = -(-rest // groups)
        else:
            eta = min(_floor_log2(limit // k), _floor_log2(limit) - gamma, rest)
            if eta < 1:
                raise ValueError(
                    f"query_limit must allow a step of at least one bit: query_limit >= "
                    f"max(2 * top_k, 2**(start_bits + 1)) = {max(2 * k, 2 ** (gamma + 1))}, "
                    f"got {limit!r}"
                )
        derived = -(-rest // eta)
        if groups is not None and groups != derived:
            raise ValueError(
                f"num_groups must equal ceil((value_bits - start_bits) / step_bits) = "
                f"ceil({rest} / {eta}) = {derived}, got {groups!r}"
            )
        first = min(gamma + eta, m)
        if 2**first > limit:
            raise ValueError(
                f"pass 0 estimates all 2**{first} prefixes of {first} bits; query_limit must "
                f"be >= 2**{first}, got {limit!r}"
            )
        if derived > 1 and k * 2**eta > limit:
            raise ValueError(
                f"later passes estimate top_k * 2**step_bits = {k} * 2**{eta} candidates; "
                f"query_limit must be >= {k * 2**eta}, got {limit!r}"
            )
        for name, value in (
            ("top_k", k), ("value_bits", m), ("epsilon", epsilon), ("query_limit", limit),
            ("start_bits", gamma), ("step_bits", eta), ("num_groups", derived),
            ("hash_range", hash_range),
        ):
            object.__setattr__(self, name, value)

    # -- derived constants --------------------------------------------------------------------
    @property
    def prefix_bits(self) -> tuple[int, ...]:
        """``l_i = min(gamma + (i + 1) eta, m)``: the prefix length of each group."""
        gamma, eta, m = self.start_bits, self.step_bits, self.value_bits
        return tuple(min(gamma + (i + 1) * eta, m) for i in range(self.num_groups))

    def parent_bits(self, pass_index: int) -> int:
        """The length of the prefixes a pass extends (0 for pass 0)."""
        pass_index = self._check_pass(pass_index)
        return 0 if pass_index == 0 else self.prefix_bits[pass_index - 1]

    def suffix_bits(self, pass_index: int) -> int:
        """``eta_i``: the bits a pass adds (all of ``prefix_bits[0]`` at pass 0)."""
        return self.prefix_bits[self._check_pass(pass_index)] - self.parent_bits(pass_index)

    def oracle(self, pass_index: int) -> OptimizedLocalHashing:
        """The OLH oracle of a pass's group: ``2**prefix_bits[pass_index]`` values, full epsilon."""
        bits = self.prefix_bits[self._check_pass(pass_index)]
        return OptimizedLocalHashing(
            epsilon=self.epsilon, domain_size=2**bits, hash_range=self.hash_range
        )

    @property
    def p(self) -> float:
        """OLH's ``p* = e / (e + g - 1)`` (:func:`olh_probabilities`)."""
        return olh_probabilities(self.epsilon, self.hash_range)[0]

    @property
    def q(self) -> float:
        """OLH's ``q* = 1 / g``."""
        return olh_probabilities(self.epsilon, self.hash_range)[1]

    def variance(self, n: int, frequency: float | npt.ArrayLike = 0.0) -> float | np.ndarray:
        """The exact variance of one estimated frequency from a group of ``n`` reports."""
        return olh_variance(n, self.epsilon, self.hash_range, frequency)

    @property
    def budget_shares(self) -> dict[str, dict[str, float]]:
        """One OLH report with the full epsilon."""
        return {"prefix": olh_budget(self.epsilon, self.hash_range)}

    @property
    def max_survivors(self) -> int:
        """The most prefixes a pass may keep: ``query_limit // 2**eta`` (later passes)."""
        return self.query_limit >> self.step_bits if self.num_groups > 1 else self.query_limit

    @property
    def default_survivors(self) -> int:
        """The survivors a pass keeps by default: ``2 k``, or as many as the query limit
        allows if fewer (never fewer than ``k``)."""
        return max(self.top_k, min(default_survivors(self.top_k), self.max_survivors))

    def check_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """The base's checks, and ``survivors`` at most :attr:`max_survivors`."""
        merged = super().check_options(options)
        self._check_survivors(merged["survivors"])
        return merged

    def _check_survivors(self, survivors: int | None) -> int:
        if survivors is None:
            return self.default_survivors
        s = validation.check_positive_int(survivors, name="survivors")
        if s > self.max_survivors:
            raise ValueError(
                f"survivors must be <= query_limit // 2**step_bits = {self.query_limit} // "
                f"2**{self.step_bits} = {self.max_survivors}, got {s!r}"
            )
        return s

    def max_candidates(self, pass_index: int, survivors: int | None = None) -> int:
        """The most candidates a pass can estimate (at most ``query_limit``)."""
        pass_index = self._check_pass(pass_index)
        kept = 1 if pass_index == 0 else self._check_survivors(survivors)
        return kept * 2 ** self.suffix_bits(pass_index)

    def _check_pass(self, pass_index: int) -> int:
        pass_index = validation.check_positive_int(pass_index, name="pass_index", minimum=0)
        if pass_index >= self.num_groups:
            raise ValueError(f"pass_index must be in [0, {self.num_groups}), got {pass_index!r}")
        return pass_index

    # -- client -------------------------------------------------------------------------------
    def perturb(
        self,
        values: npt.ArrayLike,
        user_ids: npt.ArrayLike | Sequence[Any],
        rng: randomness.RandomSource | np.random.Generator | None = None,
    ) -> Reports:
        """Each user's report: its group's prefix of its value through OLH (epsilon-LDP).

        Parameters
        ----------
        values : array_like of int
            True values in ``[0, 2**value_bits)``.
        user_ids : array_like of int or str
            Stable user ids, one per value; they decide the groups (:meth:`group_of`).
        rng : None, numpy.random.Generator or RandomSource
            ``None`` (default) uses the operating system's CSPRNG, as a client must; pass a
            seeded generator for simulation and tests only.

        Returns
        -------
        Reports
            Columns ``seed`` (uint64), ``bucket`` (int64), ``group`` and ``prefix_bits``
            (int64), in the order of the input.
        """
        vals, groups = self._check_values_and_groups(values, user_ids)
        source = randomness.as_source(rng)
        n = vals.size
        seeds = np.zeros(n, dtype=_U64)
        buckets = np.zeros(n, dtype=np.int64)
        lengths = np.asarray(self.prefix_bits, dtype=np.int64)[groups]
        for pass_index, bits in enumerate(self.prefix_bits):
            idx = np.flatnonzero(groups == pass_index)
            if idx.size == 0:
                continue
            prefixes = vals[idx] >> _U64(self.value_bits - bits)
            reports = self.oracle(pass_index).perturb(prefixes, source)
            seeds[idx] = reports.columns["seed"]
            buckets[idx] = reports.columns["bucket"]
        return Reports(
            NAME, {"seed": seeds, "bucket": buckets, "group": groups, "prefix_bits": lengths}
        )

    # -- server: reports ----------------------------------------------------------------------
    def _column_specs(self) -> dict[str, tuple[Any, int | None]]:
        """Column name -> (dtype, width), as the oracles have."""
        return COLUMN_SPECS

    def _row_checks(self, reports: Reports) -> list[tuple[np.ndarray, str]]:
        group = reports.columns["group"]
        bits = reports.columns["prefix_bits"]
        bucket = reports.columns["bucket"]
        bad_group, group_reason = self._group_check(reports)
        expected = np.asarray(self.prefix_bits, dtype=np.int64)[np.where(bad_group, 0, group)]
        return [
            (bad_group, group_reason),
            (~bad_group & (bits != expected), "prefix_bits does not match the group's length"),
            ((bucket < 0) | (bucket >= self.hash_range), f"bucket outside [0, {self.hash_range})"),
        ]

    # -- server: one pass --------------------------------------------------------------------
    def check_prefixes(self, pass_index: int, prefixes: npt.ArrayLike | None) -> np.ndarray:
        """A pass's prefixes to extend as uint64, after checking them.

        Pass 0 extends the single empty prefix: pass ``None`` (or ``[0]``). A later pass
        extends at most :attr:`max_survivors` distinct prefixes of ``parent_bits(pass_index)``
        bits.
        """
        pass_index = self._check_pass(pass_index)
        if pass_index == 0:
            if prefixes is not None and np.asarray(prefixes).reshape(-1).tolist() != [0]:
                raise ValueError(
                    "prefixes of pass 0 must be None (the empty prefix), got "
                    f"{np.asarray(prefixes).tolist()}"
                )
            return np.zeros(1, dtype=_U64)
        if prefixes is None:
            raise ValueError(
                f"prefixes of pass {pass_index} must be the survivors of pass {pass_index - 1}"
            )
        pre = codecs.check_unsigned(prefixes, self.parent_bits(pass_index), name="prefixes")
        limit = self.query_limit >> self.suffix_bits(pass_index)
        if pre.size > limit:
            raise ValueError(
                f"prefixes must hold at most query_limit // 2**{self.suffix_bits(pass_index)} = "
                f"{limit}, got {pre.size}"
            )
        if np.unique(pre).size != pre.size:
            raise ValueError(f"prefixes must be distinct, got {pre.tolist()}")
        return pre

    def candidates(self, pass_index: int, prefixes: npt.ArrayLike | None = None) -> np.ndarray:
        """The candidates a pass estimates: every extension of every prefix (uint64)."""
        pre = self.check_prefixes(pass_index, prefixes)
        return extend_prefixes(pre, self.suffix_bits(pass_index))

    def _pass_state(self, pass_index: int, prefixes: npt.ArrayLike | None) -> PassState:
        """A state that makes ``pass_index`` extend ``prefixes`` (for the one-pass calls)."""
        return PassState(
            self.key,
            pass_index,
            {"prefixes": self.check_prefixes(pass_index, prefixes)},
            (-1,) * self.num_groups,
        )

    def create_accumulator(self, pass_index: int, prefixes: npt.ArrayLike | None = None
                           ) -> PassCounts:
        """Empty counts of a pass for the given prefixes (:meth:`create_pass_counts`)."""
        return self.create_pass_counts(pass_index, self._pass_state(pass_index, prefixes))

    def aggregate(
        self,
        pass_index: int,
        reports: Reports | Mapping[str, npt.ArrayLike],
        prefixes: npt.ArrayLike | None = None,
    ) -> PassCounts:
        """Count a batch of one group's reports for the extensions of ``prefixes``.

        The counts' one array, ``counts``, has a row per prefix: the length ``2**eta`` signed
        scatter ``F_j`` of the Walsh-Hadamard method, so that ``fwht(F_j) / g`` is the
        support count of every extension of ``prefixes[j]``; it is linear in the reports.

        Raises
        ------
        InvalidReportError
            If a row is invalid or belongs to another group.
        """
        return self.accumulate(pass_index, reports, self._pass_state(pass_index, prefixes))

    # the pass hooks: pass i is pass i, on group i's reports
    @property
    def num_passes(self) -> int:
        """One pass per pass: ``g``."""
        return self.num_groups

    def pass_groups(self, pass_index: int) -> tuple[int, ...]:
        """Pass ``i`` reads group ``i``."""
        return (self._check_pass(pass_index),)

    def pass_label(self, pass_index: int) -> str:
        return f"prefixes of {self.prefix_bits[self._check_pass(pass_index)]} bits"

    def _pass_context(self, pass_index: int, state: PassState) -> tuple:
        return (self.check_prefixes(pass_index, state.data.get("prefixes")),)

    def _empty_arrays(self, pass_index: int, context: tuple) -> dict[str, tuple[int, ...]]:
        return {"counts": (context[0].size, 1 << self.suffix_bits(pass_index))}

    def _count_pass(
        self, pass_index: int, reports: Reports, context: tuple
    ) -> dict[str, np.ndarray]:
        (prefixes,) = context
        if not prefixes.size:
            return {}
        return {"counts": counting.prefix_scatter(
            reports.columns["seed"], reports.columns["bucket"], prefixes,
            self.prefix_bits[pass_index], self.suffix_bits(pass_index), self.hash_range)}

    def _advance(self, pass_index: int, counts: PassCounts, state: PassState,
                 valid: Callable[[np.ndarray, int], np.ndarray] | None,
                 options: dict[str, Any]) -> tuple[dict[str, Any], PassFigures]:
        history = tuple(state.data.get("history", ()))
        estimate = self.estimate(counts)
        kept = self.select(estimate, history=history, valid=valid, **options)
        figures = PassFigures(pass_index, self.pass_label(pass_index), estimate.n,
                              int(estimate.candidates.size), int(kept.prefixes.size),
                              estimate.sigma)
        data = {"history": (*history, kept), "prefixes": kept.prefixes}
        return data, figures

    def _result(self, state: PassState, k: int) -> tuple[np.ndarray, np.ndarray]:
        return state.data["history"][-1].top(k)

    def estimate(self, accumulator: PassCounts) -> PassEstimate:
        """The frequencies of a pass's candidates from its counts.

        Raises
        ------
        ValueError
            If the counts belong to other parameters, or hold no reports while there
            are candidates (the estimate is undefined).
        """
        if not isinstance(accumulator, PassCounts):
            raise TypeError(
                f"accumulator must be PassCounts, got {type(accumulator).__name__}"
            )
        if accumulator.key != self.key:
            raise ValueError(f"accumulator of {accumulator.key} given to {self.key}")
        pass_index = self._check_pass(accumulator.pass_index)
        (prefixes,) = accumulator.context
        candidates = extend_prefixes(prefixes, self.suffix_bits(pass_index))
        n = int(accumulator.group_counts[pass_index])
        if n == 0 and candidates.size:
            raise ValueError(
                f"group {pass_index} has no reports; the frequencies of pass {pass_index} are "
                f"undefined"
            )
        if candidates.size:
            support = hashing.support_counts(accumulator.arrays["counts"],
                                             self.hash_range).reshape(-1)
        else:
            support = np.zeros(0, dtype=np.int64)
        freqs = olh_frequencies(support, n, self.epsilon, self.hash_range) if n else np.zeros(0)
        sigma = math.sqrt(self.variance(n)) if n else math.nan
        return PassEstimate(
            pass_index, self.prefix_bits[pass_index], candidates, support, freqs, n, sigma
        )

    def count_candidates(
        self,
        pass_index: int,
        reports: Reports | Mapping[str, npt.ArrayLike],
        prefixes: npt.ArrayLike | None = None,
    ) -> PassEstimate:
        """:meth:`estimate` of :meth:`aggregate`: one pass on one batch of its group."""
        return self.estimate(self.aggregate(pass_index, reports, prefixes))

    def select(
        self,
        estimate: PassEstimate,
        *,
        history: Sequence[PassSurvivors] = (),
        survivors: int | None = None,
        threshold_sigma: float | None = None,
        threshold: float | None = None,
        valid: Callable[[np.ndarray, int], np.ndarray] | None = None,
        refine_sigma: float | None = DEFAULT_REFINE_SIGMA,
        significance: float | None = DEFAULT_SIGNIFICANCE,
    ) -> PassSurvivors:
        """The survivors of a pass, best first.

        The survivor rule (:func:`~ldpflow.core.heavy_hitters.base.select_survivors`) picks
        a pool of ``4 s`` candidates by their own estimates (pruning the invalid ones and
        those below the thresholds); :func:`combine` ranks the pool with the estimates of the
        earlier passes' survivors (``history``) and the best ``s`` are kept.

        Parameters
        ----------
        estimate : PassEstimate
        history : sequence of PassSurvivors
            The survivors of the earlier passes, in order (empty at pass 0).
        survivors : int, optional
            ``s``, how many candidates to keep at most (default :attr:`default_survivors`).
        threshold_sigma : float, optional
            Keep only candidates estimated at ``threshold_sigma * estimate.sigma`` or more.
        threshold : float, optional
            Keep only candidates of estimated frequency ``threshold`` or more.
        valid : callable, optional
            ``valid(candidates, prefix_bits)`` -> bool mask of the candidates that can be
            prefixes of valid values (a codec's ``valid_prefixes``); the others are pruned.
        refine_sigma : float or None, default 3
            :func:`combine`'s ``z``; ``None`` ranks by the pass's own estimates (the paper).
        significance : float or None, default 0.05
            The last pass (the one whose values are returned) keeps only candidates
            significantly above zero among its valid candidates, family-wise at this level:
            a weighted Bonferroni test, the level split equally among the prefixes the
            pass extends, a prefix's share equally among its valid extensions, and (with
            ``valid``) half of it to the extension by zeros when that one is valid (a value
            that ends there;
            :func:`~ldpflow.core.heavy_hitters.base.parent_weighted_sigmas`). Earlier passes
            (from pass 1) rank by the margin over the same cut of their own candidates
            without cutting; pass 0 by its estimates. A run then returns fewer than ``k``
            rather than noise. With one group, pass 0 is the last and the test is
            Bonferroni's over its candidates. ``None``: no such test (the paper).

        Returns
        -------
        PassSurvivors
            The kept prefixes with their own estimates and their combined scores.
        """
        s = self._check_survivors(survivors)
        if estimate.pass_index == 0 and self.num_groups > 1:
            # Pass 0 has no earlier estimates to rank with: keep twice as many prefixes
            # (when the next pass's candidates fit the query limit); the combined ranking
            # of pass 1 drops the noisy ones.
            s = max(s, min(2 * s, self.query_limit >> self.suffix_bits(1)))
        mask = None if valid is None else valid(estimate.candidates, estimate.prefix_bits)
        refined = refine_sigma is not None and bool(history)
        pool_size = 4 * s if refined else s
        # The significance test is the last pass's (the pass whose values are returned):
        # later passes split its level among the prefixes they extend
        # (parent_weighted_sigmas), and a pass before the last ranks by the margin over
        # that cut without cutting.
        last = estimate.pass_index == self.num_groups - 1
        z = None
        if significance is not None and estimate.pass_index and math.isfinite(estimate.sigma):
            eta = self.suffix_bits(estimate.pass_index)
            z = parent_weighted_sigmas(
                estimate.candidates >> np.uint64(eta),
                np.ones(estimate.candidates.size, dtype=bool) if mask is None else mask,
                significance, ends=None if mask is None else
                (estimate.candidates & np.uint64((1 << eta) - 1)) == 0)
        pool = select_survivors(estimate.candidates, estimate.frequencies, estimate.sigma,
                                survivors=pool_size, threshold_sigma=threshold_sigma,
                                threshold=threshold, valid=mask,
                                significance=significance if last or z is not None else None,
                                cut_sigmas=z, test=last)
        prefixes, freqs = estimate.candidates[pool], estimate.frequencies[pool]
        if not refined or refine_sigma is None:  # (refined implies a refine_sigma)
            return PassSurvivors(estimate.prefix_bits, prefixes, freqs, estimate.sigma, freqs)
        scores = combine(prefixes, freqs, estimate.sigma, estimate.prefix_bits, history,
                         z=refine_sigma)
        rank = scores if z is None or last else scores - z[pool] * estimate.sigma
        keep = np.lexsort((prefixes, -rank))[:s]
        return PassSurvivors(estimate.prefix_bits, prefixes[keep], freqs[keep],
                              estimate.sigma, scores[keep])


@dataclasses.dataclass(frozen=True, eq=False)
class PassSurvivors:
    """The prefixes a pass kept, best first, with their estimates.

    Attributes
    ----------
    prefix_bits : int
    prefixes : ndarray of uint64
    frequencies : ndarray of float64
        The pass's own (unbiased) estimates of the prefixes.
    sigma : float
        The standard deviation of one of the pass's own estimates at frequency 0.
    scores : ndarray of float64
        The combined estimates the pass ranked by (:func:`combine`; its own estimates
        when nothing was combined). The heavy hitters' reported frequencies.
    """

    prefix_bits: int
    prefixes: np.ndarray
    frequencies: np.ndarray
    sigma: float
    scores: np.ndarray

    def top(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best prefixes and their scores (ties: the smaller prefix)."""
        order = np.lexsort((self.prefixes, -self.scores))[
            : validation.check_positive_int(k, name="k")]
        return self.prefixes[order], self.scores[order]


def combine(prefixes: npt.ArrayLike, frequencies: npt.ArrayLike, sigma: float,
            prefix_bits: int, history: Sequence[PassSurvivors], *,
            z: float = DEFAULT_REFINE_SIGMA) -> np.ndarray:
    """Combined estimates of a pool of ``prefix_bits``-bit prefixes with earlier passes'.

    A prefix ``v`` of the pool has its own unbiased estimate ``f(v)`` from its pass's
    group. An earlier pass ``j`` estimated ``v``'s ancestor ``a_j(v)`` (its first
    ``l_j`` bits) from another, independent group: unbiased for the total frequency of the
    values below that ancestor, which is ``v``'s when ``v`` holds all of it. The estimate
    of pass ``j`` joins ``v``'s when ``a_j(v)`` was kept by pass ``j``, ``v`` has the
    highest own estimate of the prefixes of the pool below that ancestor (a noisy sibling
    never borrows its ancestor's mass), and ``f_j(a_j(v)) - f(v) <= z sqrt(sigma_j**2 +
    sigma**2)`` (the ancestor is not visibly heavier: no other frequent value below it);
    the result is the inverse-variance mean of the joined estimates. For 64-bit integer
    values every pass usually joins, so the ranking of the last pass rests on about
    ``n`` users instead of ``n / g``, and a noisy prefix that survived a pass by chance is
    outranked once a later group sees nothing below it.
    A short word whose ancestors other frequent words share keeps its own estimate.

    Survivors of a pass are chosen by that pass's estimates, which biases the ones near
    its cut upwards; keeping more survivors than ``k`` (the default ``2 k``) keeps the cut
    away from the ``k``-th value.

    Returns
    -------
    ndarray of float64
    """
    values = np.asarray(prefixes, dtype=_U64)
    freqs = np.asarray(frequencies, dtype=np.float64)
    if not values.size or not history or not math.isfinite(sigma) or sigma <= 0:
        return freqs.copy()
    z = float(z)
    weight = np.full(values.size, 1.0 / sigma**2)
    total = freqs * weight
    for pass_index in history:
        if (
            pass_index.prefixes.size == 0
            or not math.isfinite(pass_index.sigma)
            or pass_index.sigma <= 0
        ):
            continue
        ancestor = values >> _U64(prefix_bits - pass_index.prefix_bits)
        order = np.argsort(pass_index.prefixes, kind="stable")
        known = pass_index.prefixes[order]
        pos = np.minimum(np.searchsorted(known, ancestor), known.size - 1)
        found = known[pos] == ancestor
        est = np.where(found, pass_index.frequencies[order][pos], 0.0)
        best = _best_per_group(ancestor, freqs)
        bound = z * math.sqrt(pass_index.sigma**2 + sigma**2)
        joins = found & best & (est - freqs <= bound)
        w = 1.0 / pass_index.sigma**2
        total = total + np.where(joins, est * w, 0.0)
        weight = weight + np.where(joins, w, 0.0)
    return total / weight


def _best_per_group(keys: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Whether each entry has the highest score among the entries of its key (ties: the
    first)."""
    order = np.lexsort((-scores, keys))
    first = np.ones(keys.size, dtype=bool)
    first[1:] = keys[order][1:] != keys[order][:-1]
    out = np.zeros(keys.size, dtype=bool)
    out[order[first]] = True
    return out


def _floor_log2(x: int) -> int:
    return x.bit_length() - 1 if x >= 1 else -1
