"""Heavy-hitter discovery by the prefix extending method (PEM), pure NumPy.

Contract (``../shared/spec/HEAVY_HITTERS.md``; Wang, Li, Jha, arXiv 1708.06674, Sec. IV):

* Values are ``m``-bit unsigned integers (:mod:`ldpflow.core.codecs` maps strings to them);
  the prefix of length ``l`` of ``v`` is ``v >> (m - l)``.
* Users are split into ``g`` disjoint groups by a hash of a stable user id
  (:func:`assign_groups`). Stages are indexed from 0 here: group ``i`` (the paper's group
  ``i + 1``) reports its prefix of length ``prefix_bits[i] = min(gamma + (i + 1) eta, m)``
  through OLH (:class:`~ldpflow.core.oracles.OptimizedLocalHashing`) with the full epsilon.
* Stage 0 estimates all ``2**prefix_bits[0]`` prefixes; stage ``i > 0`` estimates the
  candidates ``c * 2**eta_i + s`` for each prefix ``c`` kept by stage ``i - 1`` and every
  suffix ``s < 2**eta_i`` (``eta_i = prefix_bits[i] - prefix_bits[i - 1]``), from group
  ``i``'s reports only. Each stage keeps its top ``k`` (and, in the threshold variant, only
  those whose estimated frequency reaches the threshold); no stage estimates more than the
  query limit ``Q`` candidates. The last stage's survivors are the heavy hitters.

Per-stage functions are pure so that a Beam pipeline can run one stage per pass, with the
previous stage's survivors as a side input: :meth:`PrefixExtendingMethod.aggregate` turns a
batch of one group's reports into a :class:`CandidateAccumulator` (exact integer sums,
merged by addition), :meth:`~PrefixExtendingMethod.estimate` turns it into a
:class:`StageEstimate`, and :meth:`~PrefixExtendingMethod.select` picks the survivors.
:meth:`~PrefixExtendingMethod.identify` runs all stages in order on an in-memory batch.

Counting (``ORACLES.md``, local hashing): for candidates "prefix ``c`` x all ``2**eta``
suffixes" at prefix length ``l``, ``H_s(c 2**eta + t) = M_lo t XOR (M_hi c XOR a)``, so the
support counts of one prefix's candidates are a signed scatter of the reports (``n g``
entries into a vector of length ``2**eta``) followed by one Walsh-Hadamard transform. This
module batches ``d`` prefixes into one scatter: the reports' hash columns for the prefix bits
are projected onto the ``d`` prefixes (bit ``l`` of the projection of row ``r_j`` is
``parity(r_j & (c_l << eta))``), giving a hash on ``d + eta`` bits whose value at
``(e_l, t)`` equals ``H_s(c_l 2**eta + t)``; one scatter of ``n g`` entries into
``2**(d + eta)`` counters, a sign-weighted sum over the ``d`` projected bits per prefix and
one ``2**eta`` transform per prefix give the same exact counts as ``d`` separate scatters.
The naive users x candidates grid (:func:`ldpflow.core.hashing.naive_support_counts`) is the
test oracle.

The module also holds the simulation helpers of the command line (values drawn from ``N``
distinct ``B``-bit values by a seeded rank-to-value map, Zipf / uniform / geometric over the
ranks; the true top list) and the heavy-hitter scores (precision, recall, F1 and NCR, from
:mod:`ldpflow.core.queries`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from ldpflow.core import codecs, hashing, queries, randomness, validation
from ldpflow.core.keys import PEM as NAME
from ldpflow.core.keys import ProtocolKey
from ldpflow.core.oracles.base import Reports, as_reports
from ldpflow.core.oracles.local_hashing import OptimizedLocalHashing, optimal_hash_range
from ldpflow.core.validation import InvalidReportError

__all__ = [
    "NAME",
    "COLUMN_SPECS",
    "MAX_QUERY_LIMIT",
    "DEFAULT_QUERY_LIMIT",
    "user_keys",
    "assign_groups",
    "extend_prefixes",
    "select_top",
    "PrefixExtendingMethod",
    "CandidateAccumulator",
    "StageEstimate",
    "HeavyHitters",
    "DISTRIBUTIONS",
    "rank_probabilities",
    "distinct_values",
    "sample_values",
    "true_top",
    "score_top_k",
]

#: The paper's query limit ``Q`` (seed 002, Sec. VI-A).
DEFAULT_QUERY_LIMIT = 2**20
#: The largest query limit accepted: a stage keeps ``O(Q)`` int64 counters in memory.
MAX_QUERY_LIMIT = 2**28

_U64 = np.uint64
#: PEM's report columns (name -> (dtype, width)), as the oracles' ``_column_specs``.
COLUMN_SPECS: dict[str, tuple[Any, int | None]] = {
    "seed": (np.uint64, None), "bucket": (np.int64, None), "group": (np.int64, None),
    "prefix_bits": (np.int64, None)}
_COLUMNS = tuple(COLUMN_SPECS)
# Entries of the (reports x 2**hash_bits) index matrix built per scatter chunk.
_SCATTER_ENTRIES = 1 << 22
# The widest projected index space (prefix batch bits + suffix bits) one scatter may use.
_MAX_BATCH_INDEX_BITS = 21


# -- group assignment ---------------------------------------------------------------------------
def user_keys(user_ids: npt.ArrayLike | Sequence[Any]) -> npt.NDArray[np.uint64]:
    """The 64-bit key of each stable user id (the input of :func:`assign_groups`).

    An integer id is its 64-bit two's complement (``-1`` -> ``2**64 - 1``; an Avro ``long``
    and an unsigned 64-bit id of the same bits get the same key). A string id is the BLAKE2b
    digest of its UTF-8 bytes with an 8-byte digest size (``hashlib.blake2b(data,
    digest_size=8)``), read as a little-endian integer; ``bytes`` ids are hashed as they are.

    Raises
    ------
    TypeError
        For ids that are neither integers nor strings (floats, booleans, ...).
    ValueError
        For an integer outside ``[-2**63, 2**64)``, or an array of more than one dimension.
    """
    if isinstance(user_ids, (str, bytes)):
        raise TypeError("user_ids must be a collection of ids, got a single string")
    arr = np.asarray(user_ids)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise ValueError(f"user_ids must be one-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=_U64)
    kind = arr.dtype.kind
    if kind == "i":
        return arr.astype(np.int64).view(_U64)
    if kind == "u":
        return arr.astype(_U64)
    if kind in "US":
        return np.fromiter((_string_key(s) for s in arr.tolist()), dtype=_U64, count=arr.size)
    if kind == "O":
        return np.fromiter(
            (_object_key(v, i) for i, v in enumerate(arr)), dtype=_U64, count=arr.size
        )
    raise TypeError(f"user_ids must be integers or strings, got dtype {arr.dtype}")


def _string_key(s: str | bytes) -> int:
    data = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def _object_key(v: Any, position: int) -> int:
    if isinstance(v, (str, bytes, np.str_, np.bytes_)):
        return _string_key(v)
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        if not -(2**63) <= int(v) < 2**64:
            raise ValueError(
                f"user_ids must lie in [-2**63, 2**64), got {int(v)} at position {position}"
            )
        return int(v) % 2**64
    raise TypeError(
        f"user_ids must be integers or strings, got {type(v).__name__} at position {position}"
    )


def assign_groups(user_ids: npt.ArrayLike | Sequence[Any], num_groups: int) -> np.ndarray:
    """The group in ``[0, num_groups)`` of each user: deterministic from a stable id.

    ``group = splitmix64(key) mod num_groups``, where ``key`` is :func:`user_keys` and
    ``splitmix64(z)`` the first output of the splitmix64 stream from state ``z`` (the hash
    family's generator, ``ORACLES.md``). Each user lands in exactly one group; for distinct
    ids the groups are equal in size in expectation (the modulo bias is below
    ``num_groups / 2**64``). Neither arrival order nor randomness enters, so a user who
    reports twice reports in the same group.

    Returns
    -------
    ndarray of int64
    """
    num_groups = validation.check_positive_int(num_groups, name="num_groups")
    keys = user_keys(user_ids)
    with np.errstate(over="ignore"):
        mixed = hashing.splitmix64_mix(keys + hashing.GOLDEN_GAMMA)
    return (mixed % _U64(num_groups)).astype(np.int64)


# -- candidates and selection -----------------------------------------------------------------
def extend_prefixes(prefixes: npt.ArrayLike, step_bits: int) -> npt.NDArray[np.uint64]:
    """The candidates ``c * 2**step_bits + s`` for each prefix ``c`` and every ``s``.

    Ordered prefix by prefix (in the given order), suffixes ascending: row ``j`` of
    ``result.reshape(len(prefixes), 2**step_bits)`` extends ``prefixes[j]``.
    """
    pre = np.asarray(prefixes, dtype=_U64).reshape(-1)
    suffixes = np.arange(1 << step_bits, dtype=_U64)
    return ((pre[:, None] << _U64(step_bits)) | suffixes[None, :]).reshape(-1)


def select_top(
    candidates: npt.ArrayLike, scores: npt.ArrayLike, k: int, *, threshold: float | None = None
) -> np.ndarray:
    """Positions of the ``k`` highest scores (ties: the smaller candidate first).

    With ``threshold``, only positions whose score is at least ``threshold`` are kept (still
    at most ``k``). The positions are returned best first.
    """
    k = validation.check_positive_int(k, name="k")
    cand = np.asarray(candidates)
    score = np.asarray(scores, dtype=np.float64)
    if cand.shape != score.shape or cand.ndim != 1:
        raise ValueError(
            f"candidates and scores must be 1-d of one length, got {cand.shape} and {score.shape}"
        )
    order = np.lexsort((cand, -score))[:k]
    if threshold is not None:
        order = order[score[order] >= threshold]
    return order


# -- result types ---------------------------------------------------------------------------------
@dataclasses.dataclass(eq=False)
class CandidateAccumulator:
    """The mergeable sufficient statistics of one stage: a signed scatter vector per prefix.

    Row ``j`` of ``counts`` is the length ``2**step_bits`` vector ``F_j`` of the prefix
    ``prefixes[j]``: the sum over reports of the signs of the Walsh-Hadamard method, so that
    ``fwht(F_j) / g`` is the support count of every extension of ``prefixes[j]``. It is linear
    in the reports, so shards merge by addition, exactly and in any order.

    Attributes
    ----------
    key : tuple
        The PEM parameters and the stage; only equal keys merge.
    stage : int
    prefixes : ndarray of uint64
        The previous stage's survivors (stage 0: the single empty prefix ``[0]``).
    counts : ndarray of int64, shape (len(prefixes), 2**step_bits)
    n : int
        The number of reports counted (all of them from the stage's group).
    """

    key: tuple
    stage: int
    prefixes: np.ndarray
    counts: np.ndarray
    n: int = 0

    def merge(self, other: CandidateAccumulator) -> CandidateAccumulator:
        """Add ``other`` into this accumulator (mutating only ``self``) and return ``self``.

        Raises
        ------
        TypeError
            If ``other`` is not a :class:`CandidateAccumulator`.
        ValueError
            If ``other`` belongs to other parameters, another stage or other prefixes.
        """
        if not isinstance(other, CandidateAccumulator):
            raise TypeError(f"can only merge a CandidateAccumulator, got {type(other).__name__}")
        if other.key != self.key or other.stage != self.stage:
            raise ValueError(
                f"cannot merge an accumulator of stage {other.stage} of {other.key} into one "
                f"of stage {self.stage} of {self.key}"
            )
        if not np.array_equal(other.prefixes, self.prefixes):
            raise ValueError(
                "cannot merge accumulators of different candidate prefixes: got "
                f"{other.prefixes.tolist()[:8]}... into {self.prefixes.tolist()[:8]}..."
            )
        self.counts += other.counts
        self.n += other.n
        return self

    def copy(self) -> CandidateAccumulator:
        return CandidateAccumulator(
            self.key, self.stage, self.prefixes.copy(), self.counts.copy(), self.n
        )

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, CandidateAccumulator)
            and self.key == other.key
            and self.stage == other.stage
            and self.n == other.n
            and np.array_equal(self.prefixes, other.prefixes)
            and np.array_equal(self.counts, other.counts)
        )

    __hash__ = None  # type: ignore[assignment]


@dataclasses.dataclass(frozen=True, eq=False)
class StageEstimate:
    """The estimated frequencies of one stage's candidates.

    Attributes
    ----------
    stage : int
    prefix_bits : int
        The length of the candidates (the stage group's prefix length).
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

    stage: int
    prefix_bits: int
    candidates: np.ndarray
    support_counts: np.ndarray
    frequencies: np.ndarray
    n: int
    sigma: float

    def counts(self, population: int) -> np.ndarray:
        """Estimated numbers of users: ``frequency * population`` (the total of all groups)."""
        return self.frequencies * validation.check_positive_int(population, name="population")


@dataclasses.dataclass(frozen=True, eq=False)
class HeavyHitters:
    """The outcome of a PEM run: the top values, best first, with population estimates.

    Attributes
    ----------
    values : ndarray of uint64
    frequencies : ndarray of float64
        Estimated shares of the whole population.
    counts : ndarray of float64
        ``frequencies * population``.
    population : int
        The number of reports of all groups.
    group_sizes : tuple of int
    stage_candidates : tuple of int
        How many candidates each stage estimated (each at most the query limit).
    stage_survivors : tuple of int
        How many prefixes each stage kept.
    """

    values: np.ndarray
    frequencies: np.ndarray
    counts: np.ndarray
    population: int
    group_sizes: tuple[int, ...]
    stage_candidates: tuple[int, ...]
    stage_survivors: tuple[int, ...]

    def to_records(
        self, codec: codecs.IntegerCodec | codecs.StringCodec | None = None
    ) -> list[dict[str, Any]]:
        """``[{"value": V, "frequency": f, "count": c}, ...]`` of plain Python types.

        With a codec, ``value`` is decoded (e.g. to a string by a :class:`StringCodec`).
        """
        values: list[Any] = (
            [int(v) for v in self.values] if codec is None else list(codec.decode(self.values))
        )
        if codec is not None and isinstance(codec, codecs.IntegerCodec):
            values = [int(v) for v in values]
        return [
            {"value": v, "frequency": float(f), "count": float(c)}
            for v, f, c in zip(values, self.frequencies, self.counts, strict=True)
        ]


# -- the protocol ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, kw_only=True)
class PrefixExtendingMethod:
    """The prefix extending method (PEM) of Wang, Li and Jha for top-k heavy hitters.

    Parameters
    ----------
    top_k : int
        ``k``: how many values to identify; every stage keeps ``k`` prefixes.
    value_bits : int
        ``m``: the width of the values, in ``[1, 64]``.
    epsilon : float
        The privacy parameter; each user reports once, with the full epsilon.
    query_limit : int, default 2**20
        ``Q``: the most candidates one stage may estimate, at most ``2**28``.
    start_bits : int, optional
        ``gamma`` (``< value_bits``); by default ``ceil(log2 k)`` (at most ``m - 1``).
    step_bits : int, optional
        ``eta``; by default the largest with ``k * 2**eta <= Q`` and
        ``2**(gamma + eta) <= Q`` (at most ``m - gamma``); derived from ``num_groups`` when
        only that is given.
    num_groups : int, optional
        ``g = ceil((m - gamma) / eta)``; when given it must agree with the other parameters.
    hash_range : int, optional
        OLH's number of buckets (a power of two); by default the optimal one for epsilon.
    threshold : float, optional
        The threshold variant: a stage keeps only prefixes of estimated frequency at least
        ``threshold`` (still at most ``k``).

    Notes
    -----
    epsilon-LDP per user: a user belongs to exactly one group, fixed by its id, and reports
    one OLH report of its prefix with the full epsilon (report: 64-bit seed, ``log2``
    hash-range bucket, and the public group and prefix length). The defaults are seed 002's
    Sec. IV-C configuration: equal groups, ``gamma = ceil(log2 k)``, the largest ``eta``
    within the query limit; the last step takes the remainder ``m - gamma - (g - 1) eta``.
    Counting stage ``i`` costs ``O(n_i 2**b k / d + k 2**eta eta)`` (see the module notes);
    the estimate of a candidate has OLH's variance on the ``n_i`` users of its group.
    """

    name = NAME  # the ``oracle`` tag of its reports (a class attribute, not a parameter)
    top_k: int
    value_bits: int
    epsilon: float
    query_limit: int = DEFAULT_QUERY_LIMIT
    start_bits: int = None  # type: ignore[assignment]  # None: ceil(log2 top_k)
    step_bits: int = None  # type: ignore[assignment]  # None: the largest within Q
    num_groups: int = None  # type: ignore[assignment]  # None: from start and step bits
    hash_range: int = None  # type: ignore[assignment]  # None: OLH's optimum
    threshold: float | None = None

    def __post_init__(self) -> None:
        k = validation.check_positive_int(self.top_k, name="top_k")
        m = validation.check_positive_int(self.value_bits, name="value_bits")
        if m > 64:
            raise ValueError(f"value_bits must be in [1, 64], got {m!r}")
        epsilon = validation.check_epsilon(self.epsilon)
        limit = validation.check_positive_int(self.query_limit, name="query_limit", minimum=2)
        if limit > MAX_QUERY_LIMIT:
            raise ValueError(f"query_limit must be <= 2**28, got {limit!r}")
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
                f"stage 0 estimates all 2**{first} prefixes of {first} bits; query_limit must "
                f"be >= 2**{first}, got {limit!r}"
            )
        if derived > 1 and k * 2**eta > limit:
            raise ValueError(
                f"later stages estimate top_k * 2**step_bits = {k} * 2**{eta} candidates; "
                f"query_limit must be >= {k * 2**eta}, got {limit!r}"
            )
        if self.threshold is not None:
            threshold = self.threshold
            if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real):
                raise TypeError(
                    f"threshold must be a real number or None, got {type(threshold).__name__}"
                )
            if not math.isfinite(threshold):
                raise ValueError(f"threshold must be finite, got {threshold!r}")
            object.__setattr__(self, "threshold", float(threshold))
        for name, value in (
            ("top_k", k), ("value_bits", m), ("epsilon", epsilon), ("query_limit", limit),
            ("start_bits", gamma), ("step_bits", eta), ("num_groups", derived),
            ("hash_range", hash_range),
        ):
            object.__setattr__(self, name, value)

    # -- derived constants --------------------------------------------------------------------
    @property
    def parameters(self) -> dict[str, Any]:
        """The parameters as plain Python values."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @property
    def key(self) -> ProtocolKey:
        """A hashable identity: only reports and accumulators of equal keys mix."""
        return ProtocolKey(NAME, self.parameters)

    @classmethod
    def from_key(cls, key: Sequence[Any]) -> PrefixExtendingMethod:
        """The configuration whose :attr:`key` is ``key`` (its inverse).

        Raises
        ------
        ValueError
            If ``key`` is not a PEM key (another oracle's, or malformed).
        """
        if not isinstance(key, (tuple, list)) or not key or key[0] != NAME:
            raise ValueError(f"key must be a {NAME!r} key, got {key!r}")
        try:
            params = ProtocolKey.coerce(key).parameters
        except ValueError:
            raise ValueError(
                f"key must hold (name, value) pairs after {NAME!r}, got {key!r}"
            ) from None
        params.pop("codec", None)  # the value codec: part of a report key, not a parameter
        return cls(**params)

    @property
    def prefix_bits(self) -> tuple[int, ...]:
        """``l_i = min(gamma + (i + 1) eta, m)``: the prefix length of each group."""
        gamma, eta, m = self.start_bits, self.step_bits, self.value_bits
        return tuple(min(gamma + (i + 1) * eta, m) for i in range(self.num_groups))

    def parent_bits(self, stage: int) -> int:
        """The length of the prefixes a stage extends (0 for stage 0)."""
        stage = self._check_stage(stage)
        return 0 if stage == 0 else self.prefix_bits[stage - 1]

    def suffix_bits(self, stage: int) -> int:
        """``eta_i``: the bits a stage adds (all of ``prefix_bits[0]`` at stage 0)."""
        return self.prefix_bits[self._check_stage(stage)] - self.parent_bits(stage)

    def oracle(self, stage: int) -> OptimizedLocalHashing:
        """The OLH oracle of a stage's group: ``2**prefix_bits[stage]`` values, full epsilon."""
        bits = self.prefix_bits[self._check_stage(stage)]
        return OptimizedLocalHashing(
            epsilon=self.epsilon, domain_size=2**bits, hash_range=self.hash_range
        )

    @property
    def p(self) -> float:
        """OLH's ``p* = e / (e + g - 1)``."""
        e = math.exp(self.epsilon)
        return e / (e + self.hash_range - 1)

    @property
    def q(self) -> float:
        """OLH's ``q* = 1 / g``."""
        return 1.0 / self.hash_range

    def variance(self, n: int, frequency: float | npt.ArrayLike = 0.0) -> float | np.ndarray:
        """The exact variance of one estimated frequency from a group of ``n`` reports."""
        return self.oracle(0).variance(n, frequency)

    def max_candidates(self, stage: int) -> int:
        """The most candidates a stage can estimate (at most ``query_limit``)."""
        stage = self._check_stage(stage)
        survivors = 1 if stage == 0 else self.top_k
        return survivors * 2 ** self.suffix_bits(stage)

    def _check_stage(self, stage: int) -> int:
        stage = validation.check_positive_int(stage, name="stage", minimum=0)
        if stage >= self.num_groups:
            raise ValueError(f"stage must be in [0, {self.num_groups}), got {stage!r}")
        return stage

    # -- client -------------------------------------------------------------------------------
    def group_of(self, user_ids: npt.ArrayLike | Sequence[Any]) -> np.ndarray:
        """The group (= stage) of each user, see :func:`assign_groups`."""
        return assign_groups(user_ids, self.num_groups)

    def invalid_values(self, values: npt.ArrayLike) -> tuple[np.ndarray, list[str]]:
        """Positions of input values that are not integers in ``[0, 2**m)``, with reasons.

        Vectorised. The reasons are ``"value outside [0, 2**m)"`` and ``"value is not an
        integer"``, so they can be counted (e.g. routed to a dead-letter output).
        """
        return codecs.invalid_integers(values, self.value_bits)

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
        vals = codecs.check_unsigned(values, self.value_bits)
        groups = self.group_of(user_ids)
        if groups.size != vals.size:
            raise ValueError(
                f"user_ids must hold one id per value ({vals.size}), got {groups.size}"
            )
        source = randomness.as_source(rng)
        n = vals.size
        seeds = np.zeros(n, dtype=_U64)
        buckets = np.zeros(n, dtype=np.int64)
        lengths = np.asarray(self.prefix_bits, dtype=np.int64)[groups]
        for stage, bits in enumerate(self.prefix_bits):
            idx = np.flatnonzero(groups == stage)
            if idx.size == 0:
                continue
            prefixes = vals[idx] >> _U64(self.value_bits - bits)
            reports = self.oracle(stage).perturb(prefixes, source)
            seeds[idx] = reports.columns["seed"]
            buckets[idx] = reports.columns["bucket"]
        return Reports(
            NAME, {"seed": seeds, "bucket": buckets, "group": groups, "prefix_bits": lengths}
        )

    def perturb_one(
        self,
        value: int,
        user_id: int | str,
        rng: randomness.RandomSource | np.random.Generator | None = None,
    ) -> dict[str, Any]:
        """One user's report on a device, as a dict of plain ints."""
        ids = np.empty(1, dtype=object)
        ids[0] = user_id
        return self.perturb(np.array([value], dtype=object), ids, rng).to_records()[0]

    # -- server: reports ----------------------------------------------------------------------
    def empty_reports(self) -> Reports:
        """A batch of zero reports with PEM's columns."""
        return Reports(
            NAME,
            {"seed": np.zeros(0, _U64), "bucket": np.zeros(0, np.int64),
             "group": np.zeros(0, np.int64), "prefix_bits": np.zeros(0, np.int64)},
        )

    def coerce_reports(self, reports: Reports | Mapping[str, npt.ArrayLike]) -> Reports:
        """Check the columns of ``reports`` (names, shapes, integer dtypes).

        Raises
        ------
        TypeError
            If ``reports`` is neither ``Reports`` nor a mapping of columns.
        InvalidReportError
            If the batch as a whole is malformed (another oracle, missing columns, ...).
        """
        reports = as_reports(reports, NAME, _COLUMNS)
        cols = {}
        for name in _COLUMNS:
            col = reports.columns[name]
            if col.ndim != 1:
                raise InvalidReportError(
                    f"{NAME} report column {name!r} must have shape (n,), got {col.shape}"
                )
            if col.size and col.dtype.kind not in "iu":
                raise InvalidReportError(
                    f"{NAME} report column {name!r} must hold integers, got {col.dtype}"
                )
            cols[name] = col.astype(_U64 if name == "seed" else np.int64, copy=False)
        return Reports(NAME, cols)

    def _column_specs(self) -> dict[str, tuple[Any, int | None]]:
        """Column name -> (dtype, width), as the oracles have."""
        return COLUMN_SPECS

    def _row_checks(self, reports: Reports) -> list[tuple[np.ndarray, str]]:
        group = reports.columns["group"]
        bits = reports.columns["prefix_bits"]
        bucket = reports.columns["bucket"]
        bad_group = (group < 0) | (group >= self.num_groups)
        expected = np.asarray(self.prefix_bits, dtype=np.int64)[np.where(bad_group, 0, group)]
        return [
            (bad_group, f"group outside [0, {self.num_groups})"),
            (~bad_group & (bits != expected), "prefix_bits does not match the group's length"),
            ((bucket < 0) | (bucket >= self.hash_range), f"bucket outside [0, {self.hash_range})"),
        ]

    def invalid_rows(self, reports: Reports | Mapping[str, npt.ArrayLike]) -> tuple[
        np.ndarray, list[str]
    ]:
        """Rows no conforming client could produce, with one reason each (vectorised).

        The reasons are a fixed set, so they can be counted: ``"group outside [0, g)"``,
        ``"prefix_bits does not match the group's length"``, ``"bucket outside [0, G)"``.
        The first failing check of a row gives its reason.
        """
        reports = self.coerce_reports(reports)
        checks = self._row_checks(reports)
        bad = np.zeros(len(reports), dtype=bool)
        reason_index = np.full(len(reports), -1)
        for i, (mask, _) in enumerate(checks):
            reason_index[mask & ~bad] = i
            bad |= mask
        rows = np.flatnonzero(bad)
        return rows, [checks[reason_index[r]][1] for r in rows]

    def validate(self, reports: Reports | Mapping[str, npt.ArrayLike]) -> Reports:
        """The coerced reports, or ``InvalidReportError`` naming the first bad row."""
        reports = self.coerce_reports(reports)
        rows, reasons = self.invalid_rows(reports)
        if rows.size:
            raise InvalidReportError(
                f"{rows.size} invalid {NAME} report(s); first at row {int(rows[0])}: {reasons[0]}"
            )
        return reports

    def split_groups(self, reports: Reports | Mapping[str, npt.ArrayLike]) -> tuple[Reports, ...]:
        """The valid reports of each group, in input order (one batch per stage)."""
        reports = self.validate(reports)
        group = reports.columns["group"]
        return tuple(reports[np.flatnonzero(group == s)] for s in range(self.num_groups))

    # -- server: one stage --------------------------------------------------------------------
    def check_prefixes(self, stage: int, prefixes: npt.ArrayLike | None) -> np.ndarray:
        """A stage's prefixes to extend as uint64, after checking them.

        Stage 0 extends the single empty prefix: pass ``None`` (or ``[0]``). A later stage
        extends at most ``top_k`` distinct prefixes of ``parent_bits(stage)`` bits.
        """
        stage = self._check_stage(stage)
        if stage == 0:
            if prefixes is not None and np.asarray(prefixes).reshape(-1).tolist() != [0]:
                raise ValueError(
                    "prefixes of stage 0 must be None (the empty prefix), got "
                    f"{np.asarray(prefixes).tolist()}"
                )
            return np.zeros(1, dtype=_U64)
        if prefixes is None:
            raise ValueError(
                f"prefixes of stage {stage} must be the survivors of stage {stage - 1}"
            )
        pre = codecs.check_unsigned(prefixes, self.parent_bits(stage), name="prefixes")
        if pre.size > self.top_k:
            raise ValueError(f"prefixes must hold at most top_k={self.top_k}, got {pre.size}")
        if np.unique(pre).size != pre.size:
            raise ValueError(f"prefixes must be distinct, got {pre.tolist()}")
        return pre

    def candidates(self, stage: int, prefixes: npt.ArrayLike | None = None) -> np.ndarray:
        """The candidates a stage estimates: every extension of every prefix (uint64)."""
        pre = self.check_prefixes(stage, prefixes)
        return extend_prefixes(pre, self.suffix_bits(stage))

    def create_accumulator(
        self, stage: int, prefixes: npt.ArrayLike | None = None
    ) -> CandidateAccumulator:
        """An empty accumulator of a stage for the given prefixes."""
        pre = self.check_prefixes(stage, prefixes)
        counts = np.zeros((pre.size, 1 << self.suffix_bits(stage)), dtype=np.int64)
        return CandidateAccumulator((*self.key, ("stage", stage)), stage, pre, counts, 0)

    def aggregate(
        self,
        stage: int,
        reports: Reports | Mapping[str, npt.ArrayLike],
        prefixes: npt.ArrayLike | None = None,
    ) -> CandidateAccumulator:
        """Count a batch of one group's reports for the extensions of ``prefixes``.

        Raises
        ------
        InvalidReportError
            If a row is invalid or belongs to another group.
        """
        acc = self.create_accumulator(stage, prefixes)
        reports = self.validate(reports)
        group = reports.columns["group"]
        if np.any(group != stage):
            row = int(np.flatnonzero(group != stage)[0])
            raise InvalidReportError(
                f"reports of stage {stage} must come from group {stage}, got group "
                f"{int(group[row])} at row {row}"
            )
        if len(reports) and acc.prefixes.size:
            acc.counts += self._scatter(stage, reports, acc.prefixes)
        acc.n = len(reports)
        return acc

    def _scatter(self, stage: int, reports: Reports, prefixes: np.ndarray) -> np.ndarray:
        bits = self.prefix_bits[stage]
        eta = self.suffix_bits(stage)
        b = self.hash_range.bit_length() - 1
        rows, offsets = hashing.hash_rows(reports.columns["seed"], bits, b)
        rows = np.ascontiguousarray(rows.T)  # (b, n): long contiguous runs per hash row
        targets = reports.columns["bucket"] ^ offsets.astype(np.int64)
        low = (rows & _U64((1 << eta) - 1)).astype(np.int64)
        # Index bits above the sign bit: the suffix part of each row; bit 0: bit j of y ^ a,
        # so the XOR over a subset u of rows carries parity(u & (y ^ a)), the sign.
        base = (low << 1) | ((targets[None, :] >> np.arange(b)[:, None]) & 1)
        out = np.empty((prefixes.size, 1 << eta), dtype=np.int64)
        if self.parent_bits(stage) == 0:
            out[0] = _signed_scatter(base, eta)
            return out
        batch = _batch_size(prefixes.size, len(reports), b, eta)
        shifted = prefixes << _U64(eta)
        proj = np.empty(rows.shape, dtype=np.int64)
        for start in range(0, prefixes.size, batch):
            chunk = shifted[start : start + batch]
            d = chunk.size
            proj[...] = 0
            for bit, c in enumerate(chunk):
                proj |= (np.bitwise_count(rows & c) & np.uint8(1)).astype(np.int64) << bit
            proj <<= eta + 1
            proj |= base
            out[start : start + d] = _unit_rows(_signed_scatter(proj, d + eta), d, eta)
        return out

    def estimate(self, accumulator: CandidateAccumulator) -> StageEstimate:
        """The frequencies of a stage's candidates from its accumulator.

        Raises
        ------
        ValueError
            If the accumulator belongs to other parameters, or holds no reports while there
            are candidates (the estimate is undefined).
        """
        if not isinstance(accumulator, CandidateAccumulator):
            raise TypeError(
                f"accumulator must be a CandidateAccumulator, got {type(accumulator).__name__}"
            )
        stage = accumulator.stage
        if accumulator.key != (*self.key, ("stage", self._check_stage(stage))):
            raise ValueError(f"accumulator of {accumulator.key} given to {self.key}")
        candidates = extend_prefixes(accumulator.prefixes, self.suffix_bits(stage))
        n = accumulator.n
        if n == 0 and candidates.size:
            raise ValueError(
                f"group {stage} has no reports; the frequencies of stage {stage} are undefined"
            )
        if candidates.size:
            support = hashing.support_counts(accumulator.counts, self.hash_range).reshape(-1)
        else:
            support = np.zeros(0, dtype=np.int64)
        p, q = self.p, self.q
        freqs = (support / n - q) / (p - q) if n else np.zeros(0)
        sigma = math.sqrt(self.variance(n)) if n else math.nan
        return StageEstimate(stage, self.prefix_bits[stage], candidates, support, freqs, n, sigma)

    def count_candidates(
        self,
        stage: int,
        reports: Reports | Mapping[str, npt.ArrayLike],
        prefixes: npt.ArrayLike | None = None,
    ) -> StageEstimate:
        """:meth:`estimate` of :meth:`aggregate`: one stage on one batch of its group."""
        return self.estimate(self.aggregate(stage, reports, prefixes))

    def select(self, estimate: StageEstimate) -> tuple[np.ndarray, np.ndarray]:
        """The survivors of a stage: its top ``k`` candidates (above the threshold, if set).

        Returns
        -------
        (prefixes, frequencies) : ndarray of uint64, ndarray of float64
            Best first; the prefixes are the next stage's ``prefixes``.
        """
        keep = select_top(
            estimate.candidates, estimate.frequencies, self.top_k, threshold=self.threshold
        )
        return estimate.candidates[keep], estimate.frequencies[keep]

    # -- server: all stages -------------------------------------------------------------------
    def identify(self, reports: Reports | Mapping[str, npt.ArrayLike]) -> HeavyHitters:
        """Run every stage in order on a batch of all groups' reports.

        Raises
        ------
        InvalidReportError
            If any row is invalid (see :meth:`invalid_rows`; filter first to drop them).
        ValueError
            If a group that has candidates to estimate has no reports.
        """
        groups = self.split_groups(reports)
        population = sum(len(g) for g in groups)
        previous: np.ndarray | None = None  # stage 0 extends the empty prefix
        values, freqs = np.zeros(0, dtype=_U64), np.zeros(0)
        candidates, survivors = [], []
        for stage, group_reports in enumerate(groups):
            est = self.count_candidates(stage, group_reports, previous)
            values, freqs = self.select(est)
            previous = values
            candidates.append(int(est.candidates.size))
            survivors.append(int(values.size))
        return HeavyHitters(
            values=values,
            frequencies=freqs,
            counts=freqs * population,
            population=population,
            group_sizes=tuple(len(g) for g in groups),
            stage_candidates=tuple(candidates),
            stage_survivors=tuple(survivors),
        )


def _floor_log2(x: int) -> int:
    return x.bit_length() - 1 if x >= 1 else -1


def _signed_scatter(index_rows: np.ndarray, index_bits: int) -> np.ndarray:
    """``F`` (length ``2**index_bits``) from per-report rows ``(index << 1) | sign bit``.

    ``index_rows`` has shape ``(b, n)``: row ``j`` holds each report's hash row ``j``. For
    each report and each subset ``u`` of its ``b`` rows, the XOR of the rows in ``u`` holds
    the index ``M^T u`` above bit 0 and ``parity(u & (y ^ a))`` in bit 0; one ``bincount`` of
    all ``n 2**b`` of them, then positives minus negatives.
    """
    b, n = index_rows.shape
    width = 1 << b
    total = np.zeros(2 << index_bits, dtype=np.int64)
    chunk = max(1, _SCATTER_ENTRIES >> b)
    work = np.empty((width, min(chunk, n)), dtype=np.int64)
    for start in range(0, n, chunk):
        rows = index_rows[:, start : start + chunk]
        w = work[:, : rows.shape[1]]
        w[0] = 0
        for j in range(b):  # all 2**b subsets by doubling, along contiguous runs of reports
            np.bitwise_xor(w[: 1 << j], rows[j][None, :], out=w[1 << j : 2 << j])
        total += np.bincount(w.reshape(-1), minlength=2 << index_bits)
    return total[0::2] - total[1::2]


def _unit_rows(scattered: np.ndarray, d: int, eta: int) -> np.ndarray:
    """Rows ``e_l`` of the partial Walsh-Hadamard transform over the top ``d`` index bits.

    ``G_l[w] = sum_z F[z, w] (-1)**z_l = total[w] - 2 * (sum of F[z, w] over z with bit l)``.
    """
    F = scattered.reshape(1 << d, 1 << eta)
    total = F.sum(axis=0)
    out = np.empty((d, 1 << eta), dtype=np.int64)
    for bit in range(d):
        ones = F.reshape(1 << (d - 1 - bit), 2, 1 << bit, 1 << eta)[:, 1].sum(axis=(0, 1))
        out[bit] = total - 2 * ones
    return out


def _batch_size(num_prefixes: int, n: int, hash_bits: int, eta: int) -> int:
    """How many prefixes share one scatter: minimise a cost model of the stage.

    Per batch of ``d`` prefixes: ``n 2**b`` scatter entries (about three passes each), plus
    about ``d + 12`` passes over the ``2**(d + eta)`` projected counters (bincount output,
    chunk sums, sign split, per-prefix sums); calibrated on ``n 2**b = 2**24``, ``eta = 15``.
    """
    best, best_cost = 1, math.inf
    for d in range(1, num_prefixes + 1):
        if d + eta > max(_MAX_BATCH_INDEX_BITS, eta + 1):
            break
        batches = -(-num_prefixes // d)
        cost = batches * (3.0 * (n << hash_bits) + (d + 12) * float(1 << (d + eta)))
        if cost < best_cost:
            best, best_cost = d, cost
    return best


# -- simulation and scores ----------------------------------------------------------------------
#: Distributions over the ranks ``1 .. N`` of the distinct values.
DISTRIBUTIONS = ("zipf", "uniform", "geometric")


def rank_probabilities(
    num_distinct: int,
    distribution: str = "zipf",
    *,
    exponent: float = 1.1,
    ratio: float = 0.9,
) -> np.ndarray:
    """``P[rank r]`` for ``r = 1 .. N`` (index ``r - 1``).

    ``"zipf"``: proportional to ``r**-exponent``; ``"uniform"``; ``"geometric"``:
    proportional to ``ratio**(r - 1)``.
    """
    count = validation.check_positive_int(num_distinct, name="num_distinct")
    ranks = np.arange(1, count + 1, dtype=np.float64)
    if distribution == "zipf":
        s = validation.check_epsilon(exponent, name="exponent")  # a finite real > 0
        weights = ranks**-s
    elif distribution == "uniform":
        weights = np.ones(count)
    elif distribution == "geometric":
        rho = validation.check_probability(ratio, name="ratio", open_interval=True)
        weights = rho ** (ranks - 1)
    else:
        raise ValueError(f"distribution must be one of {list(DISTRIBUTIONS)}, got {distribution!r}")
    return weights / weights.sum()


def _generator(rng: np.random.Generator | int) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return np.random.default_rng(int(rng))
    raise TypeError(
        f"rng must be a numpy.random.Generator or an int seed, got {type(rng).__name__}"
    )


def distinct_values(
    count: int, value_bits: int, rng: np.random.Generator | int
) -> npt.NDArray[np.uint64]:
    """``count`` distinct values drawn uniformly from ``[0, 2**value_bits)`` (the rank map)."""
    count = validation.check_positive_int(count, name="count")
    bits = validation.check_positive_int(value_bits, name="value_bits")
    if bits > 64:
        raise ValueError(f"value_bits must be in [1, 64], got {bits!r}")
    if count > 2**bits:
        raise ValueError(f"count must be <= 2**value_bits = {2**bits}, got {count!r}")
    gen = _generator(rng)
    if 2**bits <= max(4 * count, 1 << 16):
        return gen.choice(2**bits, size=count, replace=False).astype(_U64)
    values = gen.integers(0, 2**bits, size=count, dtype=_U64)
    while True:  # redraw the later copies of duplicates (rare unless count ~ 2**(bits/2))
        _, first = np.unique(values, return_index=True)
        if first.size == count:
            return values
        dup = np.setdiff1d(np.arange(count), first)
        values[dup] = gen.integers(0, 2**bits, size=dup.size, dtype=_U64)


def sample_values(
    num_users: int,
    *,
    num_distinct: int,
    value_bits: int,
    rng: np.random.Generator | int,
    distribution: str = "zipf",
    exponent: float = 1.1,
    ratio: float = 0.9,
) -> npt.NDArray[np.uint64]:
    """Users' true values: ranks from a distribution, mapped to distinct random values.

    Parameters
    ----------
    num_users : int
    num_distinct : int
        ``N``: the number of distinct values (ranks ``1 .. N``).
    value_bits : int
        ``B``: values lie in ``[0, 2**B)``.
    rng : numpy.random.Generator or int
        Seeded randomness (simulation only): first the rank-to-value map
        (:func:`distinct_values`), then each user's rank, independently.
    distribution, exponent, ratio
        See :func:`rank_probabilities`.
    """
    n = validation.check_positive_int(num_users, name="num_users", minimum=0)
    gen = _generator(rng)
    probs = rank_probabilities(num_distinct, distribution, exponent=exponent, ratio=ratio)
    mapping = distinct_values(num_distinct, value_bits, gen)
    cdf = np.cumsum(probs)
    cdf[-1] = 1.0
    ranks = np.searchsorted(cdf, gen.random(n), side="right")
    return mapping[np.minimum(ranks, num_distinct - 1)]


def _integer_array(values: npt.ArrayLike, name: str) -> np.ndarray:
    """A 1-d integer array of ``values``, exact for Python ints of up to 64 bits.

    ``np.asarray([1, 2**63])`` is a float64 array (values near ``2**64`` lose their low
    bits), so sequences of Python ints are converted element by element.
    """
    if isinstance(values, np.ndarray):
        arr = values.reshape(-1)
    else:
        items = np.asarray(values, dtype=object).reshape(-1).tolist()
        if any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) for v in items):
            raise TypeError(f"{name} must be integers, got {items[:5]}...")
        ints = [int(v) for v in items]
        dtype = _U64 if ints and max(ints) >= 2**63 else np.int64
        try:
            arr = np.array(ints, dtype=dtype)
        except OverflowError:
            raise ValueError(f"{name} must lie in [-2**63, 2**64) and not mix negative values "
                             "with values of 2**63 or more") from None
    if arr.size and arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integers, got dtype {arr.dtype}")
    return arr


def true_top(values: npt.ArrayLike, k: int | None = None) -> list[dict[str, int]]:
    """``[{"value": V, "count": C}, ...]``: the distinct values by count, largest first.

    Ties are broken towards the smaller value; ``k`` keeps the first ``k`` (all by default).
    """
    arr = _integer_array(values, "values")
    uniq, counts = np.unique(arr, return_counts=True)
    order = np.lexsort((uniq, -counts))
    if k is not None:
        order = order[: validation.check_positive_int(k, name="k", minimum=0)]
    return [{"value": int(uniq[i]), "count": int(counts[i])} for i in order]


def score_top_k(
    identified: npt.ArrayLike, truth: Sequence[Mapping[str, int]] | npt.ArrayLike, k: int
) -> dict[str, float]:
    """Precision, recall, F1 and NCR of identified values against the true top ``k``.

    ``truth`` is :func:`true_top`'s list (or the true values in rank order); its first ``k``
    entries are the true top-k. The metrics are :func:`ldpflow.core.queries.precision_recall_f1`
    and :func:`ldpflow.core.queries.ncr`.
    """
    k = validation.check_positive_int(k, name="k")
    entries = truth.tolist() if isinstance(truth, np.ndarray) else list(
        cast(Sequence[Any], truth))
    ranked = [int(t["value"]) if isinstance(t, Mapping) else int(t) for t in entries[:k]]
    if not ranked:
        raise ValueError("truth must hold at least one value, got none")
    found = _integer_array(identified, "identified").astype(_U64)
    true = np.asarray(ranked, dtype=_U64)
    precision, recall, f1 = queries.precision_recall_f1(found, true)
    return {"precision": precision, "recall": recall, "f1": f1, "ncr": queries.ncr(found, true)}
