"""The contract every heavy-hitter protocol follows, and the pieces they share.

A heavy-hitter protocol finds the most frequent values of a domain too large to estimate
value by value (``m``-bit values, ``m`` up to 64). Like a frequency oracle
(:mod:`ldpflow.core.oracles.base`) it is a frozen, keyword-only dataclass of its *wire*
parameters (what every client must agree on), validated at construction, hashable and
picklable. Its contract, batch first:

* ``perturb(values, user_ids, rng=None) -> Reports``: each user's report (client side; the
  default source is the operating system's CSPRNG, :mod:`ldpflow.core.randomness`). The part
  of the protocol a user takes part in (its *group*) is a deterministic function of its
  stable id (:func:`assign_groups`), never of arrival order or randomness;
* ``validate(reports)`` / ``invalid_rows(reports)``: rows no conforming client could have
  produced, with one countable reason each;
* ``identify(reports, *, top_k=None, valid=None, **options) -> HeavyHitters``: the heavy
  hitters of a batch, best first. How many values to return, which candidates the codec
  allows (``valid``) and how candidates are kept between rounds (``options``, see
  :attr:`HeavyHitterProtocol.server_options`) are *server-side* arguments: they change
  nothing a client sends;
* ``key`` / ``from_key``: the :class:`~ldpflow.core.keys.ProtocolKey` of the configuration.

The server side of every protocol is a fixed sequence of ``num_passes`` *passes* over the
reports, so that a pipeline can run one pass per round with what the earlier ones found as
a side input. Pass ``pass_index`` reads the reports of the groups ``pass_groups(pass_index)``:

* ``accumulate(pass_index, reports, state) -> PassCounts``: exact integer sums of a batch, for the
  candidates ``state`` says this pass counts; ``PassCounts.merge`` adds shards exactly, in
  any order;
* ``advance(pass_index, counts, state, *, valid=None, **options) -> PassState``: estimate and keep
  what the next pass needs (survivors, candidates);
* ``result(state, *, top_k=None) -> HeavyHitters`` after the last pass.

:meth:`HeavyHitterProtocol.identify` is that loop on an in-memory batch, for every protocol.

Shared here: the group assignment, the survivor rule (:func:`select_survivors`), the OLH
estimator of every protocol (:func:`olh_frequencies`) and the result type.
"""

from __future__ import annotations

import abc
import dataclasses
import hashlib
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, cast, overload

import numpy as np
import numpy.typing as npt

from ldpflow.core import codecs, hashing, randomness, registry, validation
from ldpflow.core.heavy_hitters.counting import candidate_support
from ldpflow.core.keys import Keyed, ProtocolKey
from ldpflow.core.oracles.base import CheckedReports, Reports
from ldpflow.core.oracles.local_hashing import olh_probabilities, olh_variance
from ldpflow.core.validation import InvalidReportError

__all__ = [
    "DEFAULT_QUERY_LIMIT",
    "MAX_QUERY_LIMIT",
    "HeavyHitterProtocol",
    "HeavyHitters",
    "PassCounts",
    "PassFigures",
    "PassState",
    "GROUP_HASHES",
    "GROUP_HASH_BLAKE2B",
    "GROUP_HASH_KEYED",
    "DEFAULT_GROUP_HASH",
    "GROUP_HASH_KEY",
    "check_group_hash",
    "user_keys",
    "string_keys",
    "groups_of_keys",
    "assign_groups",
    "extend_prefixes",
    "select_top",
    "select_survivors",
    "default_survivors",
    "olh_frequencies",
    "olh_variance",
    "heavy_hitter_standard_errors",
    "check_top_k",
    "check_common",
    "shortfall",
    "DEFAULT_SIGNIFICANCE",
    "significance_sigmas",
    "parent_weighted_sigmas",
    "check_significance",
]

#: The PEM paper's query limit ``Q`` (Sec. VI-A).
DEFAULT_QUERY_LIMIT = 2**20
#: The largest query limit accepted: a pass keeps ``O(Q)`` int64 counters in memory.
MAX_QUERY_LIMIT = 2**28

_U64 = np.uint64


# -- group assignment ---------------------------------------------------------------------------
#: Group hash version 1: a string id's key is its BLAKE2b-64 digest (one call per id).
GROUP_HASH_BLAKE2B = 1
#: Group hash version 2: a string id's key is the keyed hash
#: :func:`~ldpflow.core.hashing.keyed_string_hashes` with :data:`GROUP_HASH_KEY`,
#: computed over a whole column at once.
GROUP_HASH_KEYED = 2
#: The group hash versions, oldest first.
GROUP_HASHES: tuple[int, ...] = (GROUP_HASH_BLAKE2B, GROUP_HASH_KEYED)
#: What new clients write. A report that names no version is of version 1 (the wire's
#: default: every file written before versions existed).
DEFAULT_GROUP_HASH = GROUP_HASH_KEYED
#: ``K`` of version 2: the ASCII bytes ``ldpgrp02`` read as a little-endian integer. Public
#: (every client computes its own group), it only keeps the group hash apart from the other
#: uses of :func:`~ldpflow.core.hashing.keyed_string_hashes`.
GROUP_HASH_KEY = int.from_bytes(b"ldpgrp02", "little")


def check_group_hash(group_hash: Any) -> int:
    """A group hash version of :data:`GROUP_HASHES`."""
    if validation.check_integer(group_hash, name="group_hash") not in GROUP_HASHES:
        raise ValueError(f"group_hash must be one of {', '.join(map(str, GROUP_HASHES))}, got "
                         f"{group_hash!r}")
    return int(group_hash)


def user_keys(user_ids: npt.ArrayLike | Sequence[Any], *,
              group_hash: int = DEFAULT_GROUP_HASH) -> npt.NDArray[np.uint64]:
    """The 64-bit key of each stable user id (the input of :func:`groups_of_keys`).

    An integer id is its 64-bit two's complement (``-1`` -> ``2**64 - 1``; an Avro ``long``
    and an unsigned 64-bit id of the same bits get the same key), in every version. A
    string id is keyed by its UTF-8 bytes (``bytes`` ids as they are), by ``group_hash``:

    * version 1 (:data:`GROUP_HASH_BLAKE2B`): the BLAKE2b digest with an 8-byte digest
      size (``hashlib.blake2b(data, digest_size=8)``), read as a little-endian integer;
    * version 2 (:data:`GROUP_HASH_KEYED`, the default): :func:`string_keys`.

    Raises
    ------
    TypeError
        For ids that are neither integers nor strings (floats, booleans, ...).
    ValueError
        For an integer outside ``[-2**63, 2**64)``, an array of more than one dimension, or
        an unknown ``group_hash``.
    """
    version = check_group_hash(group_hash)
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
        # A numpy string array drops trailing NUL characters: hash the strings given, not
        # their numpy copies, when they are a sequence (a client's "a\x00" is not "a").
        items = arr.tolist() if isinstance(user_ids, np.ndarray) else \
            list(cast(Sequence[Any], user_ids))
        return _string_keys([_utf8(s) for s in items], version)
    if kind == "O":
        keys = np.empty(arr.size, dtype=_U64)
        strings, where = [], []
        for i, v in enumerate(arr.tolist()):
            if isinstance(v, (str, bytes)):
                strings.append(_utf8(v))
                where.append(i)
            else:
                keys[i] = _integer_key(v, i)
        if strings:
            keys[np.asarray(where, dtype=np.int64)] = _string_keys(strings, version)
        return keys
    raise TypeError(f"user_ids must be integers or strings, got dtype {arr.dtype}")


def string_keys(offsets: npt.ArrayLike, data: npt.ArrayLike, *,
                group_hash: int = DEFAULT_GROUP_HASH) -> npt.NDArray[np.uint64]:
    """The keys of string ids in Arrow's layout (string ``i`` is
    ``data[offsets[i]:offsets[i + 1]]``, UTF-8), as :func:`user_keys` makes them.

    Version 2 is ``keyed_string_hashes(offsets, data, GROUP_HASH_KEY)``, vectorised over
    the whole column; version 1 hashes each id with BLAKE2b (a Python call per id).
    """
    version = check_group_hash(group_hash)
    if version == GROUP_HASH_KEYED:
        return hashing.keyed_string_hashes(offsets, data, GROUP_HASH_KEY)
    bounds = np.asarray(offsets, dtype=np.int64).reshape(-1)
    if bounds.size < 2:
        return np.zeros(0, dtype=_U64)
    first = int(bounds[0])
    raw = np.asarray(data, dtype=np.uint8).reshape(-1)[first:int(bounds[-1])].tobytes()
    cuts = (bounds - first).tolist()
    return np.fromiter((_blake2b_key(raw[a:b]) for a, b in zip(cuts, cuts[1:], strict=False)),
                       dtype=_U64, count=len(cuts) - 1)


def groups_of_keys(keys: npt.ArrayLike, num_groups: int) -> np.ndarray:
    """``splitmix64(key) mod num_groups`` of each 64-bit key (int64), see
    :func:`assign_groups`."""
    num_groups = validation.check_positive_int(num_groups, name="num_groups")
    with np.errstate(over="ignore"):
        mixed = hashing.splitmix64_mix(np.asarray(keys, dtype=_U64) + hashing.GOLDEN_GAMMA)
    return (mixed % _U64(num_groups)).astype(np.int64)


def _utf8(s: str | bytes | np.str_ | np.bytes_) -> bytes:
    return s.encode("utf-8") if isinstance(s, str) else bytes(s)


def _string_keys(encoded: list[bytes], version: int) -> npt.NDArray[np.uint64]:
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    return string_keys(offsets, np.frombuffer(b"".join(encoded), dtype=np.uint8),
                       group_hash=version)


def _blake2b_key(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def _integer_key(v: Any, position: int) -> int:
    if validation.is_integer(v):
        if not -(2**63) <= int(v) < 2**64:
            raise ValueError(
                f"user_ids must lie in [-2**63, 2**64), got {int(v)} at position {position}"
            )
        return int(v) % 2**64
    raise TypeError(
        f"user_ids must be integers or strings, got {type(v).__name__} at position {position}"
    )


def assign_groups(user_ids: npt.ArrayLike | Sequence[Any], num_groups: int, *,
                  group_hash: int = DEFAULT_GROUP_HASH) -> np.ndarray:
    """The group in ``[0, num_groups)`` of each user: deterministic from a stable id.

    ``group = splitmix64(key) mod num_groups``, where ``key`` is :func:`user_keys` of
    version ``group_hash`` and ``splitmix64(z)`` the first output of the splitmix64 stream
    from state ``z`` (the hash family's generator). Each user lands in exactly one group;
    for distinct ids the groups are equal in size in expectation (the modulo bias is below
    ``num_groups / 2**64``). Neither arrival order nor randomness enters, so a user who
    reports twice (with one version) reports in the same group.

    Returns
    -------
    ndarray of int64
    """
    num_groups = validation.check_positive_int(num_groups, name="num_groups")
    return groups_of_keys(user_keys(user_ids, group_hash=group_hash), num_groups)


# -- candidates and selection -------------------------------------------------------------------
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
    if cand.size > 4 * k:  # partial selection first: a full sort of 2**20 scores is slow
        part = np.argpartition(-score, k - 1)[:k]
        cut = score[part].min()
        pool = np.flatnonzero(score >= cut)  # ties at the cut stay in the pool
        order = pool[np.lexsort((cand[pool], -score[pool]))][:k]
    else:
        order = np.lexsort((cand, -score))[:k]
    if threshold is not None:
        order = order[score[order] >= threshold]
    return order


def default_survivors(top_k: int) -> int:
    """The default number of prefixes a pass keeps: ``2 k``.

    Keeping exactly ``k`` loses true heavy hitters whenever a prefix shared by several
    frequent values (strings: ``"th"``) or a noisy empty prefix outranks the prefix of a
    ``k``-th value; keeping ``2 k`` moves the cut far from the ``k``-th value at twice the
    counting cost of a pass (``docs/heavy_hitters.md``, "Survivor rule").
    """
    return 2 * validation.check_positive_int(top_k, name="top_k")


def select_survivors(
    candidates: npt.ArrayLike,
    frequencies: npt.ArrayLike,
    sigma: float,
    *,
    survivors: int,
    threshold_sigma: float | None = None,
    threshold: float | None = None,
    valid: npt.ArrayLike | None = None,
    significance: float | None = None,
    cut_sigmas: npt.ArrayLike | None = None,
    test: bool = True,
) -> np.ndarray:
    """The survivor rule: positions of the candidates a pass keeps, best first.

    At most ``survivors`` of the highest estimates among the ``valid`` candidates; with
    ``threshold_sigma``, only those of estimate at least ``threshold_sigma * sigma`` (a
    threshold in standard deviations of one estimate at frequency 0, so it means the same
    at any ``n`` and epsilon); with ``threshold``, only those of estimated frequency at least
    ``threshold``; with ``significance`` ``alpha``, only those significantly above zero
    among all the pass's valid candidates: estimate at least ``z sigma`` with
    ``z = Phi^-1(1 - alpha / C)`` for ``C`` valid candidates (Bonferroni's bound: the chance
    that any candidate of frequency 0 is kept is at most ``alpha``, so the noise of a low
    epsilon does not become values). With ``cut_sigmas`` ``z_c`` (one per candidate, a
    weighted Bonferroni test's, :func:`parent_weighted_sigmas`), the test is
    ``f >= z_c sigma`` instead and the candidates are ranked by their margin
    ``f - z_c sigma``; ``test=False`` ranks so without cutting (a pass whose survivors are
    tested later). Ties go to the smaller candidate.
    """
    survivors = validation.check_positive_int(survivors, name="survivors")
    score = np.asarray(frequencies, dtype=np.float64)
    if valid is not None:
        mask = np.asarray(valid, dtype=bool)
        if mask.shape != score.shape:
            raise ValueError(f"valid must have the candidates' shape {score.shape}, got "
                             f"{mask.shape}")
        score = np.where(mask, score, -np.inf)
    cut = -math.inf
    if threshold_sigma is not None:
        t = _finite(threshold_sigma, "threshold_sigma")
        if math.isfinite(sigma):
            cut = max(cut, t * sigma)
    if threshold is not None:
        cut = max(cut, _finite(threshold, "threshold"))
    if significance is not None and math.isfinite(sigma):
        if cut_sigmas is not None:
            z = np.asarray(cut_sigmas, dtype=np.float64)
            margin = score - z * sigma
            if cut > -math.inf:
                margin = np.where(score >= cut, margin, -np.inf)
                cut = -math.inf
            score = np.where(margin >= 0, margin, -np.inf) if test else margin
        elif test:
            count = int(np.count_nonzero(score > -np.inf))
            if count:
                cut = max(cut, significance_sigmas(significance, count) * sigma)
    order = select_top(candidates, score, survivors)
    keep = score[order] > -np.inf
    if cut > -math.inf:
        keep &= score[order] >= cut
    return order[keep]


#: The default family-wise ``significance`` of a pass's survivors (see
#: :func:`select_survivors`).
DEFAULT_SIGNIFICANCE = 0.05


def significance_sigmas(significance: float, candidates: int) -> float:
    """``Phi^-1(1 - significance / candidates)``: how many standard deviations an estimate
    must reach to be significant at ``significance`` among ``candidates`` (Bonferroni)."""
    alpha = check_significance(significance)
    count = validation.check_positive_int(candidates, name="candidates")
    return -statistics.NormalDist().inv_cdf(alpha / count)


def parent_weighted_sigmas(parents: npt.ArrayLike, valid: npt.ArrayLike,
                           significance: float,
                           ends: npt.ArrayLike | None = None) -> np.ndarray:
    """The cut of each candidate, in standard deviations, of a weighted Bonferroni test.

    The level ``alpha`` is split equally among the ``P`` distinct ``parents`` that have a
    valid candidate, and a parent's share equally among its ``V`` valid candidates: the cut
    is ``Phi^-1(1 - alpha / (P V))`` (``inf`` for an invalid candidate). The weights sum to
    ``alpha`` and depend on the candidates and the codec only, never on the estimates they
    are applied to, so the chance that any candidate of frequency 0 passes is at most
    ``alpha``, as with equal weights. With ``ends`` (a mask: the candidate that extends
    its parent by zeros, the parent's own value when values may end there, as a string's
    do), a valid ending candidate takes half of its parent's share when the parent has
    other valid candidates, and they share the other half: a short word is tested at
    about ``Phi^-1(1 - alpha / (2 P))`` whatever the number of its parent's extensions.
    """
    alpha = check_significance(significance)
    mask = np.asarray(valid, dtype=bool).reshape(-1)
    keys = np.asarray(parents).reshape(-1)
    if keys.shape != mask.shape:
        raise ValueError(f"parents must have the candidates' shape {mask.shape}, got "
                         f"{keys.shape}")
    end = None
    if ends is not None:
        end = np.asarray(ends, dtype=bool).reshape(-1)
        if end.shape != mask.shape:
            raise ValueError(f"ends must have the candidates' shape {mask.shape}, got "
                             f"{end.shape}")
    if not mask.any():
        return np.full(mask.size, math.inf)
    # per run of equal parents (a pass's candidates come in runs of one parent's
    # extensions), then per parent: only the runs' keys are sorted, and one array of the
    # candidates' size is made (the cut), not one per step
    starts = np.concatenate([[0], np.flatnonzero(keys[1:] != keys[:-1]) + 1])
    lengths = np.diff(np.append(starts, keys.size))
    distinct, run_parent = np.unique(keys[starts], return_inverse=True)
    run_parent = run_parent.reshape(-1)
    per_parent = np.bincount(run_parent, weights=np.add.reduceat(mask, starts, dtype=np.intp),
                             minlength=distinct.size)
    shares = np.count_nonzero(per_parent)
    # the share of one candidate, as 1 / (its parent's divisor): V, or 2 and 2 (V - 1);
    # computed per parent (for its ending candidate and for the others), then spread
    divisor_end = divisor_other = per_parent
    if end is not None:
        end = end & mask
        split = np.bincount(run_parent, weights=np.add.reduceat(end, starts, dtype=np.intp),
                            minlength=distinct.size) > 0
        split &= per_parent > 1
        divisor_end = np.where(split, 2.0, per_parent)
        divisor_other = np.where(split, 2.0 * (per_parent - 1), per_parent)
    sizes, where = np.unique(np.concatenate([divisor_end, divisor_other]),
                             return_inverse=True)
    z = np.array([-statistics.NormalDist().inv_cdf(alpha / (shares * float(v))) if v else
                  math.inf for v in sizes])  # (0: a parent without valid candidates)
    z_end, z_other = z[where[:distinct.size]], z[where[distinct.size:]]
    cut = np.repeat(z_other[run_parent], lengths)
    if end is not None:
        at = np.flatnonzero(end)  # the run of each ending candidate, and its parent
        cut[at] = z_end[run_parent[np.searchsorted(starts, at, side="right") - 1]]
    np.copyto(cut, math.inf, where=~mask)
    return cut


def check_significance(value: Any) -> float:
    """A family-wise significance level in ``(0, 1)``."""
    alpha = _finite(value, "significance")
    if not 0 < alpha < 1:
        raise ValueError(f"significance must be in (0, 1), got {value!r}")
    return alpha


def _finite(value: Any, name: str) -> float:
    if not validation.is_real(value):
        raise TypeError(f"{name} must be a real number or None, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return float(value)


@overload
def check_common(top_k: Any, value_bits: Any, epsilon: Any, query_limit: None = None
                 ) -> tuple[int, int, float, None]: ...


@overload
def check_common(top_k: Any, value_bits: Any, epsilon: Any, query_limit: int
                 ) -> tuple[int, int, float, int]: ...


def check_common(top_k: Any, value_bits: Any, epsilon: Any, query_limit: Any = None
                 ) -> tuple[int, int, float, int | None]:
    """The parameters every heavy-hitter protocol has, checked: ``(k, m, epsilon, Q)``
    (``Q`` None when the protocol has no query limit)."""
    k = validation.check_positive_int(top_k, name="top_k")
    m = validation.check_value_bits(value_bits)
    eps = validation.check_epsilon(epsilon)
    if query_limit is None:
        return k, m, eps, None
    limit = validation.check_positive_int(query_limit, name="query_limit", minimum=2)
    if limit > MAX_QUERY_LIMIT:
        raise ValueError(f"query_limit must be <= 2**28, got {limit!r}")
    return k, m, eps, limit


def check_top_k(top_k: Any, default: int) -> int:
    """``top_k`` checked (``None``: ``default``)."""
    return default if top_k is None else validation.check_positive_int(top_k, name="top_k")


# -- the one OLH estimator ----------------------------------------------------------------------
def olh_frequencies(support: npt.ArrayLike, n: int, epsilon: float,
                    hash_range: int) -> np.ndarray:
    """OLH's unbiased frequencies ``(c / n - q*) / (p* - q*)`` of support counts ``c``
    (:func:`~ldpflow.core.oracles.local_hashing.olh_probabilities`). Every heavy-hitter
    protocol of this package estimates through this function, and its variance is
    :func:`~ldpflow.core.oracles.local_hashing.olh_variance`.
    """
    p, q = olh_probabilities(epsilon, hash_range)
    counts = np.asarray(support, dtype=np.float64)
    if n <= 0:
        return np.full(counts.shape, np.nan)
    return (counts / n - q) / (p - q)


# -- the result -----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, eq=False)
class HeavyHitters:
    """The outcome of a heavy-hitter run: the top values, best first, with estimates.

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
    pass_candidates : tuple of int
        How many candidates each estimation step evaluated.
    pass_survivors : tuple of int
        How many candidates each step kept.
    """

    values: np.ndarray
    frequencies: np.ndarray
    counts: np.ndarray
    population: int
    group_sizes: tuple[int, ...]
    pass_candidates: tuple[int, ...]
    pass_survivors: tuple[int, ...]
    #: Per value, the standard error of its frequency as a share of the population
    #: (:func:`heavy_hitter_standard_errors`); None when unknown.
    standard_errors: np.ndarray | None = None

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
        out = [
            {"value": v, "frequency": float(f), "count": float(c)}
            for v, f, c in zip(values, self.frequencies, self.counts, strict=True)
        ]
        if self.standard_errors is not None:  # 95% normal intervals, like the raw estimates'
            for record, se in zip(out, self.standard_errors.tolist(), strict=True):
                record.update(se=se, low=record["frequency"] - _Z95 * se,
                              high=record["frequency"] + _Z95 * se)
        return out


_Z95 = 1.959963984540054  # the standard normal's 97.5% quantile


def heavy_hitter_standard_errors(frequencies: npt.ArrayLike, n: int, population: int,
                                 epsilon: float | None, hash_range: int | None,
                                 sigma: float) -> np.ndarray:
    """Standard errors of final frequencies estimated from ``n`` OLH reports of one group,
    as shares of a population of ``population`` reports.

    ``sqrt(olh_variance(n, epsilon, g, f+) + f+ (1 - f+) (1/n - 1/population))`` with
    ``f+ = clip(f, 0, 1)`` (the plug-in of ``docs/uncertainty.md``): the OLH noise at the
    value's frequency, plus the sampling of the group from the population (users are
    assigned to groups by a hash of their id, a random partition; 0 when the group is the
    whole population). Without the OLH parameters (``epsilon`` None) the noise term is
    ``sigma**2``, the final pass's variance at frequency 0. The intervals are marginal and
    conditional on the value having been found: the selection of the largest candidates
    biases the smallest found upwards (the winner's curse).
    """
    f = np.clip(np.asarray(frequencies, dtype=np.float64), 0.0, 1.0)
    if n <= 0:
        return np.full(f.shape, np.nan)
    noise = (olh_variance(n, epsilon, hash_range, f)
             if epsilon is not None and hash_range is not None
             else np.full(f.shape, float(sigma) ** 2))
    sampling = f * (1.0 - f) * max(1.0 / n - 1.0 / max(population, n), 0.0)
    return np.sqrt(noise + sampling)


def shortfall(found: int, top_k: int, figures: Sequence[PassFigures]) -> str | None:
    """Why a run found ``found < top_k`` heavy hitters, in one line (None when it found
    ``top_k``): the first pass that kept fewer than ``top_k``, and whether it had fewer
    candidates than that to start with (what the passes before it left, or the candidates
    its protocol can form) or kept fewer of them (its threshold, its ranking per part, the
    codec's check of what a value can be)."""
    if found >= top_k:
        return None
    head = f"found {found} of the {top_k} heavy hitters asked for"
    for f in figures:
        if f.survivors >= top_k:
            continue
        where = f"pass {f.pass_index} ({f.label})"
        if f.candidates < top_k:
            before = (f"what pass {f.pass_index - 1} kept" if f.pass_index else "its domain")
            return (f"{head}: {where} had only {f.candidates} candidates, formed from "
                    f"{before}")
        return (f"{head}: {where} kept {f.survivors} of its {f.candidates} candidates; "
                "the others fell below its threshold or were not valid values")
    return head


# -- passes ---------------------------------------------------------------------------------------
@dataclasses.dataclass(eq=False)
class PassCounts:
    """The mergeable sufficient statistics of one pass: exact integer sums of reports.

    Attributes
    ----------
    key : ProtocolKey
        The configuration; only counts of equal keys, steps and contexts merge.
    pass_index : int
        The pass.
    context : tuple of ndarray
        What the pass counts for (the prefixes a pass extends, the candidates of a final
        test, ...), as :meth:`HeavyHitterProtocol.advance` left it in the state.
    arrays : dict of str to ndarray of int64
        The sums, each linear in the reports. A protocol may leave a sum out until a batch
        adds to it (SFP: one large sum per position, held only by the shards that count
        that position's reports); a merge adds the sums both hold and takes the others.
    group_counts : ndarray of int64
        How many reports of each group were counted.
    """

    key: ProtocolKey
    pass_index: int
    context: tuple
    arrays: dict
    group_counts: np.ndarray

    @property
    def n(self) -> int:
        """The number of reports counted."""
        return int(self.group_counts.sum())

    def merge(self, other: PassCounts) -> PassCounts:
        """Add ``other`` into these counts (mutating only ``self``) and return ``self``.

        Raises
        ------
        TypeError
            If ``other`` is not :class:`PassCounts`.
        ValueError
            If ``other`` belongs to other parameters, another pass or another context.
        """
        if not isinstance(other, PassCounts):
            raise TypeError(f"can only merge PassCounts, got {type(other).__name__}")
        if other.key != self.key or other.pass_index != self.pass_index:
            raise ValueError(
                f"cannot merge counts of pass {other.pass_index} of {other.key} into counts of "
                f"pass "
                f"{self.pass_index} of {self.key}"
            )
        if not _same_context(self.context, other.context):
            raise ValueError(
                f"cannot merge counts of pass {self.pass_index} made for different candidates "
                f"(the shards saw different states)"
            )
        for name, array in other.arrays.items():  # a sum only some shards hold is added
            if name in self.arrays:
                self.arrays[name] += array
            else:
                self.arrays[name] = array.copy()
        self.group_counts += other.group_counts
        return self

    def __add__(self, other: PassCounts) -> PassCounts:
        """The sum of two counts, as new counts (neither input changes): what an engine
        that hands one result to several consumers merges with."""
        return self.copy().merge(other)

    def __sub__(self, other: PassCounts) -> PassCounts:
        """These counts less ``other``'s (reports counted here, then found to be copies), as
        new counts: exact, since every sum is linear in the reports.

        Raises
        ------
        ValueError
            As :meth:`merge`, or if ``other`` holds a sum these counts do not.
        """
        if isinstance(other, PassCounts) and set(other.arrays) - set(self.arrays):
            raise ValueError("cannot take away counts of a sum these counts do not hold")
        negated = PassCounts(other.key, other.pass_index, other.context,
                             {name: -a for name, a in other.arrays.items()},
                             -other.group_counts) if isinstance(other, PassCounts) else other
        return self.copy().merge(negated)

    def copy(self) -> PassCounts:
        return PassCounts(self.key, self.pass_index, self.context,
                          {name: a.copy() for name, a in self.arrays.items()},
                          self.group_counts.copy())

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, PassCounts)
            and self.key == other.key
            and self.pass_index == other.pass_index
            and _same_context(self.context, other.context)
            and self.arrays.keys() == other.arrays.keys()
            and all(np.array_equal(a, other.arrays[k]) for k, a in self.arrays.items())
            and np.array_equal(self.group_counts, other.group_counts)
        )

    __hash__ = None  # type: ignore[assignment]


def _same_context(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(
        np.asarray(x).shape == np.asarray(y).shape and np.array_equal(x, y)
        for x, y in zip(a, b, strict=True))


@dataclasses.dataclass(frozen=True)
class PassFigures:
    """What one pass did, for logs and results.

    Attributes
    ----------
    pass_index : int
    label : str
        What the pass estimated (``"prefixes of 12 bits"``, ``"segment pairs"``, ...).
    reports : int
        Reports counted.
    candidates : int
        Candidates estimated.
    survivors : int
        Candidates kept for the next pass (the last pass: the values ranked).
    sigma : float
        The standard deviation of one estimate at frequency 0 (``nan`` when undefined).
    """

    pass_index: int
    label: str
    reports: int
    candidates: int
    survivors: int
    sigma: float = math.nan

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (``sigma`` None when undefined)."""
        out = dataclasses.asdict(self)
        out["sigma"] = None if math.isnan(self.sigma) else float(self.sigma)
        return out


@dataclasses.dataclass(frozen=True, eq=False)
class PassState:
    """What the server knows after ``pass_index`` passes (picklable: a pipeline's side input).

    Attributes
    ----------
    key : ProtocolKey
    pass_index : int
        How many passes are done.
    data : dict
        The protocol's own findings (survivors, candidates, ...), read by its next pass.
    group_sizes : tuple of int
        Reports of each group, ``-1`` for a group no pass has counted yet.
    figures : tuple of PassFigures
        One per pass done.
    """

    key: ProtocolKey
    pass_index: int
    data: Mapping[str, Any]
    group_sizes: tuple[int, ...]
    figures: tuple[PassFigures, ...] = ()

    @property
    def population(self) -> int:
        """Reports of all groups counted so far."""
        return sum(max(0, s) for s in self.group_sizes)


# -- the protocol base --------------------------------------------------------------------------
def query_limit_parameter() -> Any:
    """The ``query_limit`` field of the protocols that bound a pass's candidates (Q)."""
    return registry.parameter(DEFAULT_QUERY_LIMIT, help="Q, the most candidates one pass may "
                                                         "estimate (default 2**20).")


def hash_range_parameter() -> Any:
    """The ``hash_range`` field of the protocols that count prefixes with OLH (None: OLH's
    optimum for epsilon)."""
    return registry.parameter(None, help="OLH's number of buckets, a power of two (default "
                                         "from epsilon).")


@dataclasses.dataclass(frozen=True, kw_only=True)
class _GroupHashed:
    """The ``group_hash`` field every heavy-hitter configuration has (see
    :class:`HeavyHitterProtocol`)."""

    # A report of before the field (or null) was made with version 1.
    group_hash: int = registry.parameter(DEFAULT_GROUP_HASH, absent=GROUP_HASH_BLAKE2B,
                                         compare=False)


class HeavyHitterProtocol(Keyed, CheckedReports, _GroupHashed):
    """The base of every heavy-hitter protocol (see the module docstring).

    Subclasses are frozen keyword-only dataclasses with at least ``top_k``, ``value_bits``
    and ``epsilon``; they set ``name`` (their registry key) and :attr:`server_options`,
    and implement :attr:`num_groups`, :meth:`perturb`, the report checks
    (``_column_specs``, ``_row_checks``, see :class:`~ldpflow.core.oracles.base.
    CheckedReports`; every report has an int64 ``group`` column) and the passes
    (:attr:`num_passes`, ``_pass_context``, ``_empty_arrays``, ``_count_pass``,
    ``_advance``, ``_result``; optionally :meth:`pass_groups`, :meth:`pass_label`).

    Every configuration has ``group_hash`` (keyword-only, default
    :data:`DEFAULT_GROUP_HASH`): the version of the mapping from user ids to groups its
    clients use (:func:`assign_groups`). It travels on the wire with the configuration, so
    that the server checks each report's group with its own version, but it is no
    *parameter*: it changes nothing the server counts, so it is left out of
    :attr:`parameters` and :attr:`key` (reports of one configuration made with two versions,
    during a client update, are counted together) and out of equality.
    """

    name: ClassVar[str]
    family: ClassVar[str] = registry.HEAVY_HITTER
    #: How :mod:`ldpflow.core.poisoning` defends the protocol (``prefix``); None: no defence.
    poisoning_family: ClassVar[str | None] = None
    #: The server options :meth:`advance` and :meth:`identify` accept, with their defaults.
    server_options: ClassVar[Mapping[str, Any]] = {}
    top_k: int
    value_bits: int
    epsilon: float

    # -- identity ---------------------------------------------------------------------------------
    @classmethod
    def from_key(cls, key: Sequence[Any]) -> HeavyHitterProtocol:
        """The configuration whose :attr:`key` is ``key`` (its inverse).

        Raises
        ------
        ValueError
            If ``key`` is not a key of this protocol (another protocol's, or malformed).
        """
        if not isinstance(key, (tuple, list)) or not key or key[0] != cls.name:
            raise ValueError(f"key must be a {cls.name!r} key, got {key!r}")
        try:
            key = ProtocolKey.coerce(key)
        except ValueError:
            raise ValueError(
                f"key must hold (name, value) pairs after {cls.name!r}, got {key!r}"
            ) from None
        return key.protocol  # the value codec is part of a report key, not a parameter

    # -- client ---------------------------------------------------------------------------------
    @property
    @abc.abstractmethod
    def num_groups(self) -> int:
        """How many disjoint groups the users are split into."""

    @property
    def parameters(self) -> dict[str, Any]:
        """The parameters, without ``group_hash`` (see the class notes)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)  # type: ignore[arg-type]
                if f.name != "group_hash"}

    def _check_group_hash(self) -> None:
        """Validate ``group_hash`` (called by each protocol's ``__post_init__``)."""
        check_group_hash(self.group_hash)

    def group_of(self, user_ids: npt.ArrayLike | Sequence[Any]) -> np.ndarray:
        """The group of each user, see :func:`assign_groups` (with :attr:`group_hash`)."""
        return assign_groups(user_ids, self.num_groups, group_hash=self.group_hash)

    def invalid_values(self, values: npt.ArrayLike) -> tuple[np.ndarray, list[str]]:
        """Positions of input values that are not integers in ``[0, 2**m)``, with reasons."""
        return codecs.invalid_integers(values, self.value_bits)

    @abc.abstractmethod
    def perturb(
        self,
        values: npt.ArrayLike,
        user_ids: npt.ArrayLike | Sequence[Any],
        rng: randomness.RandomSource | np.random.Generator | None = None,
    ) -> Reports:
        """Each user's report (epsilon-LDP in total per user)."""

    def perturb_one(
        self,
        value: int,
        user_id: int | str,
        rng: randomness.RandomSource | np.random.Generator | None = None,
    ) -> dict[str, Any]:
        """One user's report on a device, as a dict of plain values."""
        ids = np.empty(1, dtype=object)
        ids[0] = user_id
        return self.perturb(np.array([value], dtype=object), ids, rng).to_records()[0]

    def _check_values_and_groups(self, values: npt.ArrayLike,
                                 user_ids: npt.ArrayLike | Sequence[Any]
                                 ) -> tuple[np.ndarray, np.ndarray]:
        vals = codecs.check_unsigned(values, self.value_bits)
        groups = self.group_of(user_ids)
        if groups.size != vals.size:
            raise ValueError(
                f"user_ids must hold one id per value ({vals.size}), got {groups.size}"
            )
        return vals, groups

    # -- server: reports ------------------------------------------------------------------------
    def empty_reports(self) -> Reports:
        """A batch of zero reports with the protocol's columns."""
        cols = {}
        for name, (dtype, width) in self._column_specs().items():
            cols[name] = np.zeros((0,) if width is None else (0, width), dtype=dtype)
        return Reports(self.name, cols)

    def _group_check(self, reports: Reports) -> tuple[np.ndarray, str]:
        group = reports.columns["group"]
        return (group < 0) | (group >= self.num_groups), f"group outside [0, {self.num_groups})"

    def validate_some(self, reports: Reports | Mapping[str, npt.ArrayLike]) -> Reports:
        """:meth:`validate`, and a ``ValueError`` if there are no reports."""
        reports = self.validate(reports)
        if len(reports) == 0:
            raise ValueError("reports must hold at least one report, got none")
        return reports

    def split_groups(self, reports: Reports | Mapping[str, npt.ArrayLike]) -> tuple[Reports, ...]:
        """The valid reports of each group, in input order."""
        reports = self.validate(reports)
        group = reports.columns["group"]
        return tuple(reports[np.flatnonzero(group == g)] for g in range(self.num_groups))

    # -- server: passes -------------------------------------------------------------------------
    @property
    @abc.abstractmethod
    def num_passes(self) -> int:
        """How many passes over the reports the server makes."""

    def pass_groups(self, pass_index: int) -> tuple[int, ...]:
        """The groups whose reports pass ``pass_index`` counts (by default every group)."""
        self._check_pass(pass_index)
        return tuple(range(self.num_groups))

    def pass_label(self, pass_index: int) -> str:
        """What pass ``pass_index`` estimates, in a few words (for logs and results)."""
        return f"pass {self._check_pass(pass_index)}"

    def initial_state(self) -> PassState:
        """The state before the first pass."""
        return PassState(self.key, 0, {}, (-1,) * self.num_groups)

    def _check_pass(self, pass_index: int) -> int:
        pass_index = validation.check_positive_int(pass_index, name="pass_index", minimum=0)
        if pass_index >= self.num_passes:
            raise ValueError(f"pass_index must be in [0, {self.num_passes}), got {pass_index!r}")
        return pass_index

    def _check_state(self, pass_index: int, state: PassState) -> None:
        if not isinstance(state, PassState):
            raise TypeError(f"state must be a PassState, got {type(state).__name__}")
        if state.key != self.key:
            raise ValueError(f"state of {state.key} given to {self.key}")
        if state.pass_index != pass_index:
            raise ValueError(f"pass {pass_index} needs the state after {pass_index} passes, got "
                             f"the state "
                             f"after {state.pass_index}")

    def create_pass_counts(self, pass_index: int, state: PassState) -> PassCounts:
        """Empty counts of pass ``pass_index`` for what ``state`` says it counts."""
        pass_index = self._check_pass(pass_index)
        self._check_state(pass_index, state)
        context = tuple(self._pass_context(pass_index, state))
        arrays = {name: np.zeros(shape, dtype=np.int64)
                  for name, shape in self._empty_arrays(pass_index, context).items()}
        return PassCounts(self.key, pass_index, context, arrays,
                          np.zeros(self.num_groups, dtype=np.int64))

    def accumulate(self, pass_index: int, reports: Reports | Mapping[str, npt.ArrayLike],
                   state: PassState) -> PassCounts:
        """Count a batch of reports for pass ``pass_index`` (after validating every row).

        Raises
        ------
        InvalidReportError
            If a row is invalid or belongs to a group the pass does not read.
        """
        counts = self.create_pass_counts(pass_index, state)
        reports = self.validate(reports)
        group = reports.columns["group"]
        allowed = self.pass_groups(pass_index)
        if len(allowed) < self.num_groups and group.size:
            outside = ~np.isin(group, np.asarray(allowed, dtype=np.int64))
            if outside.any():
                row = int(np.flatnonzero(outside)[0])
                raise InvalidReportError(
                    f"pass {pass_index} counts the reports of group(s) {list(allowed)}, got group "
                    f"{int(group[row])} at row {row}")
        if len(reports):
            for name, sums in self._count_pass(pass_index, reports, counts.context).items():
                if name in counts.arrays:
                    counts.arrays[name] += sums
                else:  # a sum the protocol allocates only once a batch adds to it
                    counts.arrays[name] = np.asarray(sums, dtype=np.int64)
            counts.group_counts += np.bincount(group, minlength=self.num_groups)
        return counts

    def advance(self, pass_index: int, counts: PassCounts, state: PassState, *,
                valid: Callable[[np.ndarray, int], np.ndarray] | None = None,
                **options: Any) -> PassState:
        """Estimate pass ``pass_index``'s counts and keep what the next pass needs.

        ``valid(codes, bits)`` (e.g. :meth:`ldpflow.core.codecs.StringCodec.valid_prefixes`)
        marks the candidates that can be (prefixes of) valid values; ``options`` are the
        protocol's :attr:`server_options`.

        Raises
        ------
        TypeError
            For an option the protocol does not have.
        ValueError
            If the counts belong to another configuration, pass or state, or a group the
            pass needs has no reports.
        """
        pass_index = self._check_pass(pass_index)
        self._check_state(pass_index, state)
        if not isinstance(counts, PassCounts):
            raise TypeError(f"counts must be PassCounts, got {type(counts).__name__}")
        if counts.key != self.key or counts.pass_index != pass_index:
            raise ValueError(f"counts of pass {counts.pass_index} of {counts.key} given to pass "
                             f"{pass_index} of {self.key}")
        if not _same_context(counts.context, tuple(self._pass_context(pass_index, state))):
            raise ValueError(f"counts of pass {pass_index} were made for another state")
        opts = self.check_options(options)
        sizes = list(state.group_sizes)
        for g in self.pass_groups(pass_index):
            seen = int(counts.group_counts[g])
            if sizes[g] >= 0 and sizes[g] != seen:
                raise ValueError(f"group {g} had {sizes[g]} reports in an earlier pass and "
                                 f"{seen} in pass {pass_index}: every pass must read the same "
                                 f"reports")
            sizes[g] = seen
        empty = [g for g in self.pass_groups(pass_index) if sizes[g] == 0]
        if empty:
            raise ValueError(f"group {empty[0]} has no reports; pass {pass_index} "
                             f"({self.pass_label(pass_index)}) needs it")
        data, figures = self._advance(pass_index, counts, state, valid, opts)
        return PassState(self.key, pass_index + 1, data, tuple(sizes), (*state.figures, figures))

    def check_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """``options`` over the defaults of :attr:`server_options`.

        Raises
        ------
        TypeError
            For an option the protocol does not have (naming the ones it has), or a value of
            the wrong type.
        ValueError
            For a value out of range (``survivors`` < 1, a threshold that is not finite).
        """
        unknown = sorted(set(options) - set(self.server_options))
        if unknown:
            have = ", ".join(self.server_options) or "none"
            raise TypeError(f"{self.name} has no server option {unknown[0]!r} (its options: "
                            f"{have})")
        merged = {**self.server_options, **options}
        for name, value in merged.items():
            if value is None:
                continue
            if name == "survivors":
                validation.check_positive_int(value, name="survivors")
            elif name == "significance":
                check_significance(value)
            else:  # thresholds and z: finite reals
                _finite(value, name)
        return merged

    def result(self, state: PassState, *, top_k: int | None = None) -> HeavyHitters:
        """The heavy hitters after the last pass, best first.

        Raises
        ------
        ValueError
            If not every pass is done.
        """
        if not isinstance(state, PassState) or state.key != self.key:
            raise ValueError(f"state of {getattr(state, 'key', state)!r} given to {self.key}")
        if state.pass_index != self.num_passes:
            raise ValueError(f"the result needs all {self.num_passes} passes, got the state "
                             f"after {state.pass_index}")
        k = check_top_k(top_k, self.top_k)
        values, freqs = self._result(state, k)
        population = state.population
        last = state.figures[-1] if state.figures else None
        # A final test leaves its OLH parameters; otherwise (PEM's last pass) the pass's
        # sigma at frequency 0 stands for the noise.
        olh = state.data.get("final_olh") or (None, None)
        se = (heavy_hitter_standard_errors(freqs, last.reports, population, olh[0], olh[1],
                                           last.sigma) if last is not None else None)
        return HeavyHitters(
            values=values, frequencies=freqs, counts=freqs * population,
            population=population, group_sizes=tuple(state.group_sizes),
            pass_candidates=tuple(f.candidates for f in state.figures),
            pass_survivors=tuple(f.survivors for f in state.figures), standard_errors=se)

    def identify(self, reports: Reports | Mapping[str, npt.ArrayLike], *,
                 top_k: int | None = None,
                 valid: Callable[[np.ndarray, int], np.ndarray] | None = None,
                 **options: Any) -> HeavyHitters:
        """The heavy hitters of a batch of reports, best first: every pass in order.

        ``top_k`` (default the configuration's) is how many to return; ``valid`` and
        ``options`` are as for :meth:`advance`.

        Raises
        ------
        InvalidReportError
            If any row is invalid (see :meth:`invalid_rows`; filter first to drop them).
        ValueError
            If there are no reports, or a group a pass needs has none.
        """
        reports = self.validate_some(reports)
        self.check_options(options)
        group = reports.columns["group"]
        state = self.initial_state()
        for pass_index in range(self.num_passes):
            wanted = self.pass_groups(pass_index)
            part = reports if len(wanted) == self.num_groups else reports[
                np.flatnonzero(np.isin(group, np.asarray(wanted, dtype=np.int64)))]
            counts = self.accumulate(pass_index, part, state)
            state = self.advance(pass_index, counts, state, valid=valid, **options)
        return self.result(state, top_k=top_k)

    # -- server: the hooks of each protocol -----------------------------------------------------
    @abc.abstractmethod
    def _pass_context(self, pass_index: int, state: PassState) -> tuple:
        """What pass ``pass_index`` counts for (arrays), read from the state."""

    @abc.abstractmethod
    def _empty_arrays(self, pass_index: int, context: tuple) -> dict[str, tuple[int, ...]]:
        """The name and shape of each int64 sum of pass ``pass_index`` that every count holds
        (sums that :meth:`_count_pass` returns beyond these are allocated when first added
        to)."""

    @abc.abstractmethod
    def _count_pass(
        self, pass_index: int, reports: Reports, context: tuple
    ) -> dict[str, np.ndarray]:
        """The sums of a valid, non-empty batch of the pass's groups."""

    @abc.abstractmethod
    def _advance(self, pass_index: int, counts: PassCounts, state: PassState,
                 valid: Callable[[np.ndarray, int], np.ndarray] | None,
                 options: dict[str, Any]) -> tuple[dict[str, Any], PassFigures]:
        """The next state's data and this pass's figures (groups are known non-empty)."""

    def _result(self, state: PassState, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best values (uint64) and their frequencies, best first (by default
        those a final test left in the state, see :meth:`_final_advance`)."""
        return state.data["values"][:k], state.data["frequencies"][:k]

    # -- the final test: estimate a set of candidates from whole-value OLH reports ----------
    def _final_context(self, state: PassState) -> tuple:
        """The candidates of a final test: what the previous pass left as ``candidates``."""
        return (np.asarray(state.data["candidates"], dtype=_U64),)

    def _final_count(self, reports: Reports, context: tuple) -> dict[str, np.ndarray]:
        """The support of the candidates ``context[0]`` among the reports' top-level OLH
        reports of the whole value (``seed``, ``bucket``, :attr:`hash_range` buckets)."""
        (values,) = context
        if not values.size:
            return {}
        return {"support": candidate_support(
            reports.columns["seed"], reports.columns["bucket"], values, self.value_bits,
            self.hash_range)}  # type: ignore[attr-defined]

    def _final_advance(self, pass_index: int, counts: PassCounts, epsilon: float, n: int
                       ) -> tuple[dict[str, Any], PassFigures]:
        """The candidates of a final test ranked by their OLH estimates from ``n`` reports
        of budget ``epsilon``: every candidate, best first, with its frequency."""
        (values,) = counts.context
        g = self.hash_range  # type: ignore[attr-defined]
        freqs = olh_frequencies(counts.arrays["support"], n, epsilon, g)
        order = (select_top(values, freqs, values.size) if values.size
                 else np.zeros(0, dtype=np.int64))
        figures = PassFigures(pass_index, self.pass_label(pass_index), n, int(values.size),
                              int(order.size), math.sqrt(olh_variance(n, epsilon, g)))
        return {"values": values[order], "frequencies": freqs[order],
                "final_olh": (float(epsilon), int(g))}, figures

    @property
    @abc.abstractmethod
    def budget_shares(self) -> dict[str, dict[str, float]]:
        """Each randomized component of a user's report: its epsilon share and the
        probabilities ``p``, ``q`` of one output under the two inputs that differ most
        (``p / q == e**share``); the shares sum to ``epsilon``."""


def olh_budget(epsilon: float, hash_range: int) -> dict[str, float]:
    """The share ``epsilon`` of one OLH report and its worst-case output probabilities."""
    p, _ = olh_probabilities(epsilon, hash_range)
    return {"epsilon": float(epsilon), "p": p,  # q: the worst case, p / e**epsilon
            "q": 1.0 / (math.exp(epsilon) + hash_range - 1)}
