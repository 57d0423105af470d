"""The heavy-hitter baselines of seed 002: SPM and MCM, pure NumPy.

Contract (``../shared/spec/HEAVY_HITTERS.md``, "Baselines named in seed 002"; Wang, Li, Jha,
arXiv 1708.06674, Sec. III-C, III-D, VI and the Appendix). Both protocols share PEM's
interfaces (:mod:`ldpflow.core.heavy_hitters`): ``perturb(values, user_ids, rng)`` returns a
batch of :class:`~ldpflow.core.oracles.base.Reports`, ``identify(reports)`` returns a
:class:`~ldpflow.core.heavy_hitters.HeavyHitters` (top-k values, best first, with estimated
frequencies; ``stage_candidates`` records how many candidates every estimation step
evaluated, each at most the query limit ``Q``). Users are assigned to their part
deterministically by :func:`~ldpflow.core.heavy_hitters.assign_groups`; the top-k is
:func:`~ldpflow.core.heavy_hitters.select_top`.

The paper's summary leaves details open; the choices made here (the simplest faithful ones)
are:

* **SPM** (segment pairs method, Fanti et al., "Building a RAPPOR with the unknown"). An
  ``m``-bit value is cut into ``t`` segments (most significant first; segment ``i`` covers
  bits ``[i s, min((i + 1) s, m))`` counted from the top, ``s = ceil(m / t)``). Users are
  split into ``t (t - 1) / 2`` groups, one per segment pair ``(i, j)``, ``i < j``. Each user
  sends three OLH reports, each with **one third of epsilon** (the paper: SPM uses "one third
  of epsilon for final testing"): segment ``i`` of its value, segment ``j`` of its value and
  the full value. The aggregator (1) estimates every value of every segment over its full
  domain ``2**s`` from all groups whose pair contains the segment, and keeps the top
  ``segment_top`` (default ``k``) per segment; (2) for each pair, estimates the joint
  frequency of every combination of the two segments' kept values from that pair's group
  by the Appendix's simple unbiased joint estimator (the expected support of "report ``a``
  supports ``x`` and report ``b`` supports ``y``" is
  ``qa qb + qb (pa - qa) f_x + qa (pb - qb) f_y + (pa - qa)(pb - qb) f_xy``; the ``f_x``,
  ``f_y`` are the group's own estimates), and keeps the top ``segment_top`` pairs; (3) builds
  the full values whose every segment pair was kept, segment by segment (if a partial set
  grows beyond ``Q`` it is cut to the ``Q`` of largest smallest-pair-estimate); (4) estimates
  the candidates with the full-value reports of all users (final testing) and outputs the
  top ``k``.
* **MCM** (multiple channel method, Bassily and Smith, "Local, private, efficient protocols
  for succinct histograms"). A public hash maps each value to one of ``T`` channels
  (default ``T = 4 k``). Users are split into ``m`` groups, one per bit position. A user of
  group ``j`` whose value ``v`` falls in channel ``c`` encodes the item ``2 c + bit_j(v)`` of a
  ``2 T``-item domain as a one-hot vector and sends it through symmetric unary encoding
  (bitwise randomized response) with **half of epsilon** (the paper: MCM uses "half of
  epsilon for final testing"), plus an OLH report of the full value with the other half. The
  aggregator estimates, per channel and bit position, how many users hold bit 0 and bit 1,
  takes the majority as that bit of the channel's candidate, discards a candidate that does
  not hash to its own channel (it cannot be the channel's heavy hitter), estimates the
  remaining ``<= T`` candidates with the full-value reports and outputs the top ``k``.

Privacy: every user sends its reports once; the components' budgets sum to epsilon
(sequential composition), so each user's report is epsilon-LDP. The group (pair or bit
position) depends only on the user id and is public. ``budget_shares`` lists the
components with their ``p`` and ``q``; each component's worst-case likelihood ratio is
exactly ``e**share`` (tested).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ldpflow.core import codecs, hashing, randomness, validation
from ldpflow.core.heavy_hitters import (
    DEFAULT_QUERY_LIMIT,
    MAX_QUERY_LIMIT,
    HeavyHitters,
    assign_groups,
    select_top,
)
from ldpflow.core.oracles.base import Reports, as_reports
from ldpflow.core.oracles.local_hashing import OptimizedLocalHashing, optimal_hash_range
from ldpflow.core.validation import InvalidReportError

__all__ = [
    "SPM_NAME",
    "MCM_NAME",
    "SegmentPairsMethod",
    "MultipleChannelMethod",
    "olh_support",
]

#: The ``oracle`` tag of SPM reports.
SPM_NAME = "spm"
#: The ``oracle`` tag of MCM reports.
MCM_NAME = "mcm"

_U64 = np.uint64
# Entries of the (users x candidates) hash grid evaluated at once.
_GRID_ENTRIES = 1 << 23
# The widest segment whose full domain is counted by one scatter.
_MAX_SEGMENT_BITS = 24


def olh_support(
    seeds: npt.ArrayLike,
    buckets: npt.ArrayLike,
    candidates: npt.ArrayLike,
    value_bits: int,
    hash_range: int,
) -> np.ndarray:
    """``#{i : H_{s_i}(c) = y_i}`` for each candidate ``c`` (int64), chunked over users.

    The hash-evaluation method for small candidate sets (``n |C|`` hash evaluations).
    """
    seeds = np.asarray(seeds, dtype=_U64)
    buckets = np.asarray(buckets).astype(np.int64)
    cand = np.asarray(candidates, dtype=_U64).reshape(-1)
    out = np.zeros(cand.size, dtype=np.int64)
    if cand.size == 0 or seeds.size == 0:
        return out
    step = max(1, _GRID_ENTRIES // cand.size)
    for start in range(0, seeds.size, step):
        grid = hashing.hash_grid(seeds[start : start + step], cand, value_bits, hash_range)
        out += (grid == buckets[start : start + step, None]).sum(axis=0)
    return out


def _olh_support_matrix(
    seeds: np.ndarray, buckets: np.ndarray, candidates: np.ndarray, bits: int, hash_range: int
) -> np.ndarray:
    """The boolean ``(n, |C|)`` matrix "report ``i`` supports candidate ``c``"."""
    if candidates.size == 0:
        return np.zeros((seeds.size, 0), dtype=bool)
    grid = hashing.hash_grid(seeds, candidates, bits, hash_range)
    return grid == buckets.astype(np.int64)[:, None]


def _full_domain_support(
    seeds: np.ndarray, buckets: np.ndarray, bits: int, hash_range: int
) -> np.ndarray:
    """Exact support counts of all ``2**bits`` values (scatter + Walsh-Hadamard transform)."""
    b = hash_range.bit_length() - 1
    rows, offsets = hashing.hash_rows(seeds, bits, b)
    targets = buckets.astype(np.int64) ^ offsets.astype(np.int64)
    return hashing.support_counts(hashing.affine_sign_scatter(rows, targets, bits), hash_range)


def _check_common(top_k: int, value_bits: int, epsilon: float, query_limit: int) -> tuple:
    k = validation.check_positive_int(top_k, name="top_k")
    m = validation.check_positive_int(value_bits, name="value_bits")
    if m > 64:
        raise ValueError(f"value_bits must be in [1, 64], got {m!r}")
    eps = validation.check_epsilon(epsilon)
    limit = validation.check_positive_int(query_limit, name="query_limit", minimum=2)
    if limit > MAX_QUERY_LIMIT:
        raise ValueError(f"query_limit must be <= 2**28, got {limit!r}")
    return k, m, eps, limit


def _check_range(col: np.ndarray, low: int, high: int, column: str, name: str) -> None:
    bad = np.flatnonzero((col < low) | (col >= high))
    if bad.size:
        raise InvalidReportError(
            f"{bad.size} invalid {name} report(s); first at row {int(bad[0])}: "
            f"{column} outside [{low}, {high})"
        )


# -- SPM ------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, kw_only=True)
class SegmentPairsMethod:
    """The segment pairs method (SPM) of Fanti et al., as seed 002 compares against it.

    Parameters
    ----------
    top_k : int
        ``k``: how many values to identify.
    value_bits : int
        ``m``, in ``[2, 64]``.
    epsilon : float
        Each user's total budget; each of its three OLH reports uses ``epsilon / 3``.
    num_segments : int, optional
        ``t >= 2``; by default the smallest with ``2**ceil(m / t) <= min(Q, 2**16)``.
    segment_top : int, optional
        How many values per segment and how many value pairs per segment pair are kept;
        by default ``top_k``. ``segment_top**2`` joint candidates per pair must fit ``Q``.
    query_limit : int, default 2**20
        ``Q``: the most candidates any step estimates.

    Notes
    -----
    epsilon-LDP per user: three OLH reports (segment ``i``, segment ``j``, full value) of
    ``epsilon / 3`` each, OLH's optimal hash range for ``epsilon / 3``; the pair ``(i, j)``
    is fixed by the user id (:func:`~ldpflow.core.heavy_hitters.assign_groups`). Report:
    three 64-bit seeds and three buckets. See the module notes for the aggregation.
    """

    name = SPM_NAME
    top_k: int
    value_bits: int
    epsilon: float
    num_segments: int = None  # type: ignore[assignment]
    segment_top: int = None  # type: ignore[assignment]
    query_limit: int = DEFAULT_QUERY_LIMIT

    def __post_init__(self) -> None:
        k, m, eps, limit = _check_common(self.top_k, self.value_bits, self.epsilon,
                                         self.query_limit)
        if m < 2:
            raise ValueError(f"value_bits must be >= 2 for segment pairs, got {m!r}")
        widest = min(limit.bit_length() - 1, 16)
        if self.num_segments is None:
            t = max(2, -(-m // widest))
        else:
            t = validation.check_positive_int(self.num_segments, name="num_segments", minimum=2)
            if t > m:
                raise ValueError(f"num_segments must be <= value_bits={m}, got {t!r}")
        s = -(-m // t)
        if 2**s > limit or s > _MAX_SEGMENT_BITS:
            raise ValueError(
                f"each segment's 2**{s} values are estimated in one step; num_segments must "
                f"make ceil(value_bits / num_segments) <= {min(limit.bit_length() - 1, 24)}, "
                f"got {t!r}"
            )
        if t * s - m >= s:
            raise ValueError(
                f"num_segments={t} leaves an empty segment for value_bits={m}; use at most "
                f"{-(-m // s)}"
            )
        top = k if self.segment_top is None else validation.check_positive_int(
            self.segment_top, name="segment_top")
        if top * top > limit:
            raise ValueError(
                f"each pair estimates segment_top**2 joint candidates; segment_top must be "
                f"<= {math.isqrt(limit)} for query_limit={limit}, got {top!r}"
            )
        for name, value in (("top_k", k), ("value_bits", m), ("epsilon", eps),
                            ("query_limit", limit), ("num_segments", t), ("segment_top", top)):
            object.__setattr__(self, name, value)

    # -- derived constants --------------------------------------------------------------------
    @property
    def segment_bounds(self) -> tuple[tuple[int, int], ...]:
        """``(shift, bits)`` of each segment: segment ``i`` is ``(v >> shift) & (2**bits - 1)``."""
        s, m = -(-self.value_bits // self.num_segments), self.value_bits
        out = []
        for i in range(self.num_segments):
            top = m - i * s
            bits = min(s, top)
            out.append((top - bits, bits))
        return tuple(out)

    @property
    def pairs(self) -> tuple[tuple[int, int], ...]:
        """The segment pairs ``(i, j)``, ``i < j``; group ``g`` reports ``pairs[g]``."""
        return tuple(itertools.combinations(range(self.num_segments), 2))

    @property
    def component_epsilon(self) -> float:
        """The budget of each of the three reports: ``epsilon / 3``."""
        return self.epsilon / 3.0

    @property
    def hash_range(self) -> int:
        """OLH's hash range of every component (optimal for ``epsilon / 3``)."""
        return optimal_hash_range(self.component_epsilon)

    def _oracle(self, bits: int) -> OptimizedLocalHashing:
        return OptimizedLocalHashing(epsilon=self.component_epsilon, domain_size=2**bits,
                                     hash_range=self.hash_range)

    @property
    def budget_shares(self) -> dict[str, dict[str, float]]:
        """Each randomized component: its epsilon share and its OLH ``p*``, ``q`` (other bucket).

        The shares sum to ``epsilon``; for each component ``p / q == e**share``.
        """
        e = math.exp(self.component_epsilon)
        g = self.hash_range
        comp = {"epsilon": self.component_epsilon, "p": e / (e + g - 1), "q": 1 / (e + g - 1)}
        return {"segment_a": dict(comp), "segment_b": dict(comp), "final": dict(comp)}

    def group_of(self, user_ids: npt.ArrayLike | Sequence[Any]) -> np.ndarray:
        """The segment pair (index into :attr:`pairs`) of each user."""
        return assign_groups(user_ids, len(self.pairs))

    # -- client ---------------------------------------------------------------------------------
    def perturb(
        self,
        values: npt.ArrayLike,
        user_ids: npt.ArrayLike | Sequence[Any],
        rng: randomness.RandomSource | np.random.Generator | None = None,
    ) -> Reports:
        """Each user's three OLH reports (epsilon / 3 each).

        Returns
        -------
        Reports
            Columns ``group`` (int64), ``seed_a``, ``bucket_a`` (segment ``i``), ``seed_b``,
            ``bucket_b`` (segment ``j``), ``seed``, ``bucket`` (the full value).
        """
        vals = codecs.check_unsigned(values, self.value_bits)
        groups = self.group_of(user_ids)
        if groups.size != vals.size:
            raise ValueError(
                f"user_ids must hold one id per value ({vals.size}), got {groups.size}"
            )
        source = randomness.as_source(rng)
        n = vals.size
        cols = {"group": groups}
        for side in ("a", "b"):
            cols[f"seed_{side}"] = np.zeros(n, dtype=_U64)
            cols[f"bucket_{side}"] = np.zeros(n, dtype=np.int64)
        bounds = self.segment_bounds
        for g, pair in enumerate(self.pairs):
            idx = np.flatnonzero(groups == g)
            if idx.size == 0:
                continue
            for side, seg in zip(("a", "b"), pair):
                shift, bits = bounds[seg]
                part = (vals[idx] >> _U64(shift)) & _U64((1 << bits) - 1)
                rep = self._oracle(bits).perturb(part, source)
                cols[f"seed_{side}"][idx] = rep.columns["seed"]
                cols[f"bucket_{side}"][idx] = rep.columns["bucket"]
        full = self._oracle(self.value_bits).perturb(vals, source)
        cols["seed"] = full.columns["seed"]
        cols["bucket"] = full.columns["bucket"].astype(np.int64)
        return Reports(SPM_NAME, cols)

    # -- server ---------------------------------------------------------------------------------
    def validate(self, reports: Reports | Mapping[str, npt.ArrayLike]) -> Reports:
        """The reports with checked columns, or ``InvalidReportError`` naming the first bad row."""
        names = ("group", "seed_a", "bucket_a", "seed_b", "bucket_b", "seed", "bucket")
        reports = as_reports(reports, SPM_NAME, names)
        cols = {c: reports.columns[c].astype(_U64 if c.startswith("seed") else np.int64,
                                             copy=False) for c in names}
        _check_range(cols["group"], 0, len(self.pairs), "group", SPM_NAME)
        for c in ("bucket_a", "bucket_b", "bucket"):
            _check_range(cols[c], 0, self.hash_range, c, SPM_NAME)
        return Reports(SPM_NAME, cols)

    def _estimate(self, support: np.ndarray, n: int) -> np.ndarray:
        comp = self.budget_shares["final"]
        p, q = comp["p"], 1.0 / self.hash_range
        return (support / n - q) / (p - q)

    def identify(self, reports: Reports | Mapping[str, npt.ArrayLike]) -> HeavyHitters:
        """Segments, then segment pairs, then candidates, then final testing; top ``k``.

        Raises
        ------
        InvalidReportError
            If a row is invalid.
        ValueError
            If there are no reports.
        """
        reports = self.validate(reports)
        n = len(reports)
        if n == 0:
            raise ValueError("reports must hold at least one report, got none")
        cols = reports.columns
        group = cols["group"]
        g_range = self.hash_range
        bounds = self.segment_bounds
        pairs = self.pairs
        stage_candidates: list[int] = []
        survivors: list[int] = []
        # (1) each segment over its full domain, from every group whose pair contains it
        kept: list[np.ndarray] = []
        for seg, (_, bits) in enumerate(bounds):
            support = np.zeros(1 << bits, dtype=np.int64)
            count = 0
            for g, pair in enumerate(pairs):
                if seg not in pair:
                    continue
                side = "a" if pair[0] == seg else "b"
                idx = np.flatnonzero(group == g)
                count += idx.size
                if idx.size:
                    support += _full_domain_support(
                        cols[f"seed_{side}"][idx], cols[f"bucket_{side}"][idx], bits, g_range)
            if count == 0:
                raise ValueError(f"no reports cover segment {seg}; its values are undefined")
            freqs = self._estimate(support, count)
            cand = np.arange(1 << bits, dtype=_U64)
            keep = select_top(cand, freqs, self.segment_top)
            kept.append(cand[keep])
            stage_candidates.append(1 << bits)
            survivors.append(int(keep.size))
        # (2) joint estimates of the kept values of each pair, from the pair's group
        p = self.budget_shares["final"]["p"]
        q = 1.0 / g_range
        frequent: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        for g, (i, j) in enumerate(pairs):
            idx = np.flatnonzero(group == g)
            xi, xj = kept[i], kept[j]
            stage_candidates.append(int(xi.size * xj.size))
            if idx.size == 0:
                raise ValueError(f"group {g} (segments {i}, {j}) has no reports")
            joint = np.zeros((xi.size, xj.size))
            fi = np.zeros(xi.size)
            fj = np.zeros(xj.size)
            step = max(1, _GRID_ENTRIES // max(xi.size, xj.size, 1))
            for start in range(0, idx.size, step):
                rows = idx[start : start + step]
                a = _olh_support_matrix(cols["seed_a"][rows], cols["bucket_a"][rows], xi,
                                        bounds[i][1], g_range).astype(np.float64)
                b = _olh_support_matrix(cols["seed_b"][rows], cols["bucket_b"][rows], xj,
                                        bounds[j][1], g_range).astype(np.float64)
                joint += a.T @ b
                fi += a.sum(axis=0)
                fj += b.sum(axis=0)
            size = idx.size
            est_i = (fi / size - q) / (p - q)
            est_j = (fj / size - q) / (p - q)
            # Appendix: E[S/n] = q^2 + q (p - q) (f_x + f_y) + (p - q)^2 f_xy
            f_xy = (joint / size - q * q - q * (p - q) * (est_i[:, None] + est_j[None, :])) / (
                (p - q) ** 2)
            codes = ((xi[:, None] << _U64(bounds[j][1])) | xj[None, :]).reshape(-1)
            keep = select_top(codes, f_xy.reshape(-1), self.segment_top)
            frequent[(i, j)] = (codes[keep], f_xy.reshape(-1)[keep])
            survivors.append(int(keep.size))
        # (3) full values whose every segment pair is frequent
        partial = kept[0][:, None]  # (c, segments so far)
        score = np.full(partial.shape[0], np.inf)
        for j in range(1, self.num_segments):
            c, xj = partial.shape[0], kept[j]
            ext = np.concatenate(
                [np.repeat(partial, xj.size, axis=0), np.tile(xj, c)[:, None]], axis=1)
            ext_score = np.repeat(score, xj.size)
            ok = np.ones(ext.shape[0], dtype=bool)
            for i in range(j):
                codes, f = frequent[(i, j)]
                if codes.size == 0:
                    ok[:] = False
                    break
                order = np.argsort(codes)
                sorted_codes, sorted_f = codes[order], f[order]
                pair_codes = (ext[:, i] << _U64(bounds[j][1])) | ext[:, j]
                pos = np.minimum(np.searchsorted(sorted_codes, pair_codes), codes.size - 1)
                hit = sorted_codes[pos] == pair_codes
                ok &= hit
                ext_score = np.minimum(ext_score, np.where(hit, sorted_f[pos], -np.inf))
            partial, score = ext[ok], ext_score[ok]
            if partial.shape[0] > self.query_limit:  # keep the Q of largest weakest pair
                top = np.argsort(-score, kind="stable")[: self.query_limit]
                partial, score = partial[top], score[top]
        values = np.zeros(partial.shape[0], dtype=_U64)
        for seg, (shift, _) in enumerate(bounds):
            values |= partial[:, seg] << _U64(shift)
        # (4) final testing with every user's full-value report
        stage_candidates.append(int(values.size))
        support = olh_support(cols["seed"], cols["bucket"], values, self.value_bits, g_range)
        freqs = self._estimate(support, n)
        keep = select_top(values, freqs, self.top_k) if values.size else np.zeros(0, int)
        survivors.append(int(keep.size))
        return HeavyHitters(
            values=values[keep], frequencies=freqs[keep], counts=freqs[keep] * n,
            population=n,
            group_sizes=tuple(int(np.count_nonzero(group == g)) for g in range(len(pairs))),
            stage_candidates=tuple(stage_candidates), stage_survivors=tuple(survivors),
        )


# -- MCM ------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, kw_only=True)
class MultipleChannelMethod:
    """The multiple channel method (MCM) of Bassily and Smith, as seed 002 compares against it.

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

    name = MCM_NAME
    top_k: int
    value_bits: int
    epsilon: float
    num_channels: int = None  # type: ignore[assignment]
    query_limit: int = DEFAULT_QUERY_LIMIT
    channel_seed: int = 0

    def __post_init__(self) -> None:
        k, m, eps, limit = _check_common(self.top_k, self.value_bits, self.epsilon,
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
        e = math.exp(self.final_epsilon)
        g = self.hash_range
        return {
            "channel_bits": {"epsilon": self.channel_epsilon, "p": (1 - f) ** 2, "q": f * f},
            "final": {"epsilon": self.final_epsilon, "p": e / (e + g - 1), "q": 1 / (e + g - 1)},
        }

    def channel_of(self, values: npt.ArrayLike) -> np.ndarray:
        """The public channel in ``[0, T)`` of each value (splitmix64 of value and key)."""
        vals = np.asarray(values, dtype=_U64)
        with np.errstate(over="ignore"):
            mixed = hashing.splitmix64_mix(vals ^ _U64(self.channel_seed))
        return (mixed % _U64(self.num_channels)).astype(np.int64)

    def group_of(self, user_ids: npt.ArrayLike | Sequence[Any]) -> np.ndarray:
        """The bit position (0 = least significant) each user reports."""
        return assign_groups(user_ids, self.value_bits)

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
        vals = codecs.check_unsigned(values, self.value_bits)
        groups = self.group_of(user_ids)
        if groups.size != vals.size:
            raise ValueError(
                f"user_ids must hold one id per value ({vals.size}), got {groups.size}"
            )
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
        return Reports(MCM_NAME, {"group": groups, "bits": bits, "seed": full.columns["seed"],
                                  "bucket": full.columns["bucket"].astype(np.int64)})

    def validate(self, reports: Reports | Mapping[str, npt.ArrayLike]) -> Reports:
        """The reports with checked columns, or ``InvalidReportError`` naming the problem."""
        reports = as_reports(reports, MCM_NAME, ("group", "bits", "seed", "bucket"))
        bits = reports.columns["bits"]
        width = -(-2 * self.num_channels // 8)
        if bits.ndim != 2 or bits.shape[1] != width or bits.dtype != np.uint8:
            raise InvalidReportError(
                f"{MCM_NAME} report column 'bits' must be uint8 of shape (n, {width}), got "
                f"{bits.dtype} {bits.shape}"
            )
        group = reports.columns["group"].astype(np.int64)
        bucket = reports.columns["bucket"].astype(np.int64)
        _check_range(group, 0, self.value_bits, "group", MCM_NAME)
        _check_range(bucket, 0, self.hash_range, "bucket", MCM_NAME)
        return Reports(MCM_NAME, {"group": group, "bits": bits,
                                  "seed": reports.columns["seed"].astype(_U64), "bucket": bucket})

    def identify(self, reports: Reports | Mapping[str, npt.ArrayLike]) -> HeavyHitters:
        """Majority vote per channel and bit, then final testing of the channels' candidates.

        Raises
        ------
        InvalidReportError
            If a row is invalid.
        ValueError
            If there are no reports.
        """
        reports = self.validate(reports)
        n = len(reports)
        if n == 0:
            raise ValueError("reports must hold at least one report, got none")
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
        support = olh_support(reports.columns["seed"], reports.columns["bucket"], values, m,
                              self.hash_range)
        final = self.budget_shares["final"]
        q = 1.0 / self.hash_range
        freqs = (support / n - q) / (final["p"] - q)
        keep = select_top(values, freqs, self.top_k) if values.size else np.zeros(0, int)
        return HeavyHitters(
            values=values[keep], frequencies=freqs[keep], counts=freqs[keep] * n, population=n,
            group_sizes=tuple(int(s) for s in sizes), stage_candidates=(int(values.size),),
            stage_survivors=(int(keep.size),),
        )
