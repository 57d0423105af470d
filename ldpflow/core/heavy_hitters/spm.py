"""SPM, the segment pairs method (Fanti et al., "Building a RAPPOR with the unknown"), as
the PEM paper ("Locally Differentially Private Heavy Hitter Identification", Sec. III-C, VI
and the Appendix) compares against it; pure NumPy, behind
:class:`~ldpflow.core.heavy_hitters.base.HeavyHitterProtocol`.

An ``m``-bit value is cut into ``t`` segments (most significant first; segment ``i`` covers
bits ``[i s, min((i + 1) s, m))`` counted from the top, ``s = ceil(m / t)``). Users are
split into ``t (t - 1) / 2`` groups, one per segment pair ``(i, j)``, ``i < j``. Each user
sends three OLH reports, each with **one third of epsilon** (the paper: SPM uses "one third
of epsilon for final testing"): segment ``i`` of its value, segment ``j`` of its value and
the full value. The aggregator (1) estimates every value of every segment over its full
domain ``2**s`` from all groups whose pair contains the segment, and keeps the top
``segment_top`` (default ``k``) per segment; (2) for each pair, estimates the joint
frequency of every combination of the two segments' kept values from that pair's group by
the Appendix's simple unbiased joint estimator (the expected support of "report ``a``
supports ``x`` and report ``b`` supports ``y``" is
``qa qb + qb (pa - qa) f_x + qa (pb - qb) f_y + (pa - qa)(pb - qb) f_xy``; the ``f_x``,
``f_y`` are the group's own estimates), and keeps the top ``segment_top`` pairs; (3) builds
the full values whose every segment pair was kept, segment by segment (if a partial set
grows beyond ``Q`` it is cut to the ``Q`` of largest smallest-pair-estimate); (4) estimates
the candidates with the full-value reports of all users (final testing) and outputs the
top ``k``.

The passes of the family's contract (:mod:`~ldpflow.core.heavy_hitters.base`), each over
every group:

* pass 0, "segments": the full-domain support of each segment (array ``segment_i``),
  summed over the groups whose pair contains it; ``advance`` keeps the top ``segment_top``
  values of each segment (step 1);
* pass 1, "segment pairs": for each pair ``g``, from its group only, the joint support
  counts ``joint_g`` (``a^T b`` of the 0/1 matrices "report supports value" of the two
  segments' kept values) and the support sums ``fi_g``, ``fj_g``; ``advance`` keeps the
  top pairs and builds the candidates (steps 2 and 3), pruning those the codec does not
  allow (``valid``);
* pass 2, "final test": the support of every candidate from every full-value report
  (step 4); ``advance`` keeps the candidates with their estimates, best first.

SPM has no server options (``segment_top`` is a parameter of the configuration).

Privacy: the three reports' budgets sum to epsilon (sequential composition); the pair is
fixed by the user id and public. ``budget_shares`` lists the components.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ldpflow.core import randomness, registry, validation
from ldpflow.core.heavy_hitters.base import (
    HeavyHitterProtocol,
    PassCounts,
    PassFigures,
    PassState,
    check_common,
    olh_budget,
    olh_frequencies,
    query_limit_parameter,
    select_top,
)
from ldpflow.core.heavy_hitters.counting import (
    full_domain_support,
    support_matrix,
)
from ldpflow.core.oracles.base import Reports
from ldpflow.core.oracles.local_hashing import OptimizedLocalHashing, optimal_hash_range

__all__ = ["NAME", "COLUMN_SPECS", "SegmentPairsMethod"]

#: The ``oracle`` tag of SPM reports.
NAME = "spm"
_U64 = np.uint64
#: SPM's report columns (name -> (dtype, width)).
COLUMN_SPECS: dict[str, tuple[Any, int | None]] = {
    "group": (np.int64, None), "seed_a": (np.uint64, None), "bucket_a": (np.int64, None),
    "seed_b": (np.uint64, None), "bucket_b": (np.int64, None), "seed": (np.uint64, None),
    "bucket": (np.int64, None)}
# Entries of the (users x candidates) hash grid evaluated at once.
_GRID_ENTRIES = 1 << 23
# A chunk's float64 product of 0/1 matrices sums at most _GRID_ENTRIES ones per entry:
# exact integers while below 2**53.
if _GRID_ENTRIES >= 2**53:  # pragma: no cover - a guard on the constant above
    raise ImportError("_GRID_ENTRIES must stay below 2**53 for exact joint counts")
# The widest segment whose full domain is counted by one scatter.
_MAX_SEGMENT_BITS = 24


@dataclasses.dataclass(frozen=True, kw_only=True)
class SegmentPairsMethod(HeavyHitterProtocol):
    """The segment pairs method (SPM) of Fanti et al., as the PEM paper compares against it.

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

    name = NAME
    top_k: int
    value_bits: int
    epsilon: float
    num_segments: int = registry.parameter(
        None, help="t, the segments of a value (default from Q).")
    segment_top: int = registry.parameter(
        None, help="values kept per segment and pairs per segment pair (default k).")
    query_limit: int = query_limit_parameter()

    def __post_init__(self) -> None:
        self._check_group_hash()
        k, m, eps, limit = check_common(self.top_k, self.value_bits, self.epsilon,
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

    @property
    def num_groups(self) -> int:
        """One group per segment pair: ``t (t - 1) / 2``."""
        return len(self.pairs)

    def _oracle(self, bits: int) -> OptimizedLocalHashing:
        return OptimizedLocalHashing(epsilon=self.component_epsilon, domain_size=2**bits,
                                     hash_range=self.hash_range)

    @property
    def budget_shares(self) -> dict[str, dict[str, float]]:
        """Each randomized component: its epsilon share and its OLH ``p*``, ``q`` (other bucket).

        The shares sum to ``epsilon``; for each component ``p / q == e**share``.
        """
        comp = olh_budget(self.component_epsilon, self.hash_range)
        return {"segment_a": dict(comp), "segment_b": dict(comp), "final": dict(comp)}

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
        vals, groups = self._check_values_and_groups(values, user_ids)
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
            for side, seg in zip(("a", "b"), pair, strict=True):
                shift, bits = bounds[seg]
                part = (vals[idx] >> _U64(shift)) & _U64((1 << bits) - 1)
                rep = self._oracle(bits).perturb(part, source)
                cols[f"seed_{side}"][idx] = rep.columns["seed"]
                cols[f"bucket_{side}"][idx] = rep.columns["bucket"]
        full = self._oracle(self.value_bits).perturb(vals, source)
        cols["seed"] = full.columns["seed"]
        cols["bucket"] = full.columns["bucket"].astype(np.int64)
        return Reports(NAME, cols)

    # -- server ---------------------------------------------------------------------------------
    def _column_specs(self) -> dict[str, tuple[Any, int | None]]:
        return COLUMN_SPECS

    def _row_checks(self, reports: Reports) -> list[tuple[np.ndarray, str]]:
        g = self.hash_range
        return [self._group_check(reports)] + [
            ((reports.columns[c] < 0) | (reports.columns[c] >= g), f"{c} outside [0, {g})")
            for c in ("bucket_a", "bucket_b", "bucket")]

    def _estimate(self, support: np.ndarray, n: int) -> np.ndarray:
        return olh_frequencies(support, n, self.component_epsilon, self.hash_range)

    # -- server: the passes -------------------------------------------------------------------
    @property
    def num_passes(self) -> int:
        """Three passes: the segments, the segment pairs, the final test."""
        return 3

    def pass_label(self, pass_index: int) -> str:
        return ("segments", "segment pairs", "final test")[self._check_pass(pass_index)]

    def _pass_context(self, pass_index: int, state: PassState) -> tuple:
        if pass_index == 0:
            return ()
        if pass_index == 1:
            return tuple(np.asarray(x, dtype=_U64) for x in state.data["kept"])
        return self._final_context(state)

    def _empty_arrays(self, pass_index: int, context: tuple) -> dict[str, tuple[int, ...]]:
        if pass_index == 0:
            return {f"segment_{seg}": (1 << bits,)
                    for seg, (_, bits) in enumerate(self.segment_bounds)}
        if pass_index == 1:
            out: dict[str, tuple[int, ...]] = {}
            for g, (i, j) in enumerate(self.pairs):
                out[f"joint_{g}"] = (context[i].size, context[j].size)
                out[f"fi_{g}"] = (context[i].size,)
                out[f"fj_{g}"] = (context[j].size,)
            return out
        return {"support": (context[0].size,)}

    def _count_pass(
        self, pass_index: int, reports: Reports, context: tuple
    ) -> dict[str, np.ndarray]:
        cols, g_range, bounds = reports.columns, self.hash_range, self.segment_bounds
        group = cols["group"]
        if pass_index == 2:
            return self._final_count(reports, context)
        out: dict[str, np.ndarray] = {}
        for g, (i, j) in enumerate(self.pairs):
            idx = np.flatnonzero(group == g)
            if not idx.size:
                continue
            if pass_index == 0:  # both segments of the pair over their full domains
                for side, seg in (("a", i), ("b", j)):
                    support = full_domain_support(cols[f"seed_{side}"][idx],
                                                  cols[f"bucket_{side}"][idx],
                                                  bounds[seg][1], g_range)
                    name = f"segment_{seg}"
                    out[name] = out[name] + support if name in out else support
                continue
            out.update(self._joint_counts(cols, idx, context[i], context[j], bounds[i][1],
                                          bounds[j][1], g))
        return out

    def _joint_counts(self, cols: Mapping[str, np.ndarray], idx: np.ndarray, xi: np.ndarray,
                      xj: np.ndarray, bits_i: int, bits_j: int, g: int
                      ) -> dict[str, np.ndarray]:
        """Pair ``g``'s joint support counts ``a^T b`` of its kept values and the sums."""
        g_range = self.hash_range
        joint = np.zeros((xi.size, xj.size), dtype=np.int64)
        fi = np.zeros(xi.size, dtype=np.int64)
        fj = np.zeros(xj.size, dtype=np.int64)
        if not (xi.size and xj.size):
            return {}
        step = max(1, _GRID_ENTRIES // max(xi.size, xj.size, 1))
        for start in range(0, idx.size, step):
            rows = idx[start : start + step]
            a = support_matrix(cols["seed_a"][rows], cols["bucket_a"][rows], xi, bits_i,
                               g_range)
            b = support_matrix(cols["seed_b"][rows], cols["bucket_b"][rows], xj, bits_j,
                               g_range)
            joint += np.rint(a.T.astype(np.float64) @ b.astype(np.float64)).astype(np.int64)
            fi += a.sum(axis=0)
            fj += b.sum(axis=0)
        return {f"joint_{g}": joint, f"fi_{g}": fi, f"fj_{g}": fj}

    def _advance(self, pass_index: int, counts: PassCounts, state: PassState,
                 valid: Callable[[np.ndarray, int], np.ndarray] | None,
                 options: dict[str, Any]) -> tuple[dict[str, Any], PassFigures]:
        label, n = self.pass_label(pass_index), counts.n
        if pass_index == 0:
            kept = []
            for seg, (_, bits) in enumerate(self.segment_bounds):
                covered = sum(int(counts.group_counts[g])
                              for g, pair in enumerate(self.pairs) if seg in pair)
                freqs = self._estimate(counts.arrays[f"segment_{seg}"], covered)
                cand = np.arange(1 << bits, dtype=_U64)
                kept.append(cand[select_top(cand, freqs, self.segment_top)])
            figures = PassFigures(pass_index, label, n,
                                  sum(1 << b for _, b in self.segment_bounds),
                                  sum(int(x.size) for x in kept))
            return {"kept": tuple(kept)}, figures
        if pass_index == 1:
            values = self._join(counts)
            if valid is not None and values.size:
                values = values[valid(values, self.value_bits)]
            figures = PassFigures(pass_index, label, n,
                                  sum(int(counts.context[i].size * counts.context[j].size)
                                      for i, j in self.pairs), int(values.size))
            return {"candidates": values}, figures
        return self._final_advance(pass_index, counts, self.component_epsilon, n)

    def _join(self, counts: PassCounts) -> np.ndarray:
        """The full values whose every segment pair is among its pair's frequent ones."""
        kept, bounds = counts.context, self.segment_bounds
        g_range = self.hash_range
        p = olh_budget(self.component_epsilon, g_range)["p"]  # P[y = H(v)]
        q = 1.0 / g_range
        frequent: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        for g, (i, j) in enumerate(self.pairs):
            xi, xj = kept[i], kept[j]
            size = int(counts.group_counts[g])
            if not (xi.size and xj.size):
                frequent[(i, j)] = (np.zeros(0, dtype=_U64), np.zeros(0))
                continue
            joint = counts.arrays[f"joint_{g}"].astype(np.float64)
            est_i = self._estimate(counts.arrays[f"fi_{g}"], size)
            est_j = self._estimate(counts.arrays[f"fj_{g}"], size)
            # Appendix: E[S/n] = q^2 + q (p - q) (f_x + f_y) + (p - q)^2 f_xy
            f_xy = (joint / size - q * q - q * (p - q) * (est_i[:, None] + est_j[None, :])) / (
                (p - q) ** 2)
            codes = ((xi[:, None] << _U64(bounds[j][1])) | xj[None, :]).reshape(-1)
            keep = select_top(codes, f_xy.reshape(-1), self.segment_top)
            frequent[(i, j)] = (codes[keep], f_xy.reshape(-1)[keep])
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
        return values

