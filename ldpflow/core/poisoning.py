"""Data poisoning of frequency oracles: the attacks used to evaluate defences, and the defences.

Threat model (Cao, Jia, Gong, "Data Poisoning Attacks to Local Differential Privacy
Protocols", USENIX Security 2021): ``m`` fake users, a fraction ``beta = m / (n + m)`` of all
reports, send crafted reports to promote a set of target values; their reports pass every
wire check, so they reach the aggregate. The *maximal gain attack* (MGA) makes every fake
report support all the targets it can. Attacks here (evaluation only, seeded):

* :func:`maximal_gain_attack`: GRR: each fake reports a target; unary encoding (OUE/SUE)
  and SS: bitmaps holding the targets and, by ``variant``, nothing else (``naive``), uniform
  other values up to the expected honest support size (``fixed-size``, the paper's MGA) or
  every other value with probability ``q`` (``matched``: exactly an honest report conditioned
  on supporting the targets); local hashing: the seed, out of ``tries`` random seeds, whose
  hash maps the most targets to one bucket, and that bucket;
* :func:`input_manipulation`: fake users run the honest client on a target (the baseline);
* :func:`spread_attack`: the same number of fakes on each of many targets, each running the
  single-target MGA; on GRR with few enough per target, every target stays under the
  per-value threshold (*threshold-hugging*).

Defences. Detection uses the exact law of honest reports; recovery re-estimates from what
detection leaves. Every test states its level: a per-report test at ``level`` (by default
per oracle family, :data:`DEFAULT_LEVELS`) flags at most that share of genuine reports; a
population test at ``population_level`` raises an alarm on an honest population with at
most that probability (Bonferroni over what it examines).

* Bitmaps (oue, sue, ss): the support size of an honest report has a known law whatever the
  user's value (:func:`support_size_law`). Per report: a two-sided test
  (:func:`support_size_bounds`). Per population: sizes whose report count exceeds its
  binomial law (a *spike*: many reports of one size); among the reports of spike sizes,
  values supported beyond what genuine users and the fakes' filler explain are
  *suspected*. Flagged: sizes outside the bounds, and spike-size reports supporting a
  suspected value. Recovery: the estimate from the reports whose size is accepted and no
  spike. That selection depends on the size only, so the kept genuine reports are an exact
  randomized response with constants ``p'``, ``q'`` (:func:`truncated_constants`) and the
  estimate stays unbiased.
* Local hashing (olh, blh): per population, pairs among the :data:`OLH_CANDIDATES` values of
  largest support whose co-support (reports supporting both) exceeds the honest expectation
  ``N((f_u + f_v)(p/g - 1/g^2) + 1/g^2)`` (the hash family is 3-wise independent); the
  suspected set is the densest clique of such pairs. Per report: supporting at least ``k``
  suspected values, ``k`` the smallest count a genuine non-holder's report reaches with
  probability at most ``level`` (a Monte Carlo law with a fixed seed: the affine family makes
  it depend on the values' affine structure). Recovery: the estimate of the reports not
  flagged, with the flagged genuine reports' expected support put back.
* GRR: a report is one value, so a fake report of ``t`` cannot be told from a genuine
  report of ``t``: there is no per-report test. Per population: a value whose count exceeds
  ``Binomial(N, p)`` (what it would be if *every* user held it) at
  ``population_level / (2 d)`` is impossible for honest users and is suspected. A
  dispersion alarm (below) adds the fewest values of largest count whose removal leaves
  an honest-looking rest (:func:`_grr_dispersion_suspects`). The reports of suspected values
  are flagged (a flag on a value: the genuine reports of it are flagged too). Recovery:
  ``n`` and the genuine mass of the suspected values are not jointly identifiable from one
  histogram; assuming that mass is zero, ``n^ = (N - c_T) / (1 - |T| q)``, the suspected
  values are reported as 0 and the others as ``(c_v / n^ - q) / (p - q)`` (undoing the
  fakes' depression of every other value).
* Every family, per population: the *dispersion* test (:func:`dispersion_test`) of many
  values with excess, ``T = sum_v z_v^2`` with ``z_v`` a support count standardised by the
  law of a value nobody holds, against the least favourable honest population (exact
  moments, ``sum f = 1``, a confidence bound on the largest frequency). It spends
  :data:`DISPERSION_SHARE` of ``population_level``; the family's own population tests the
  rest. It catches fakes spread thinly over many values, each under a per-value threshold;
  on bitmaps and local hashing it is an alarm only (no per-report test can pick out such
  reports, below).

What no test can see (docs/poisoning.md): fake reports whose law is at most ``K`` times an
honest report's law of some value are flagged by any per-report test with probability at
most ``K e^epsilon`` times its false-positive rate; the matched unary MGA, the ss MGA and the
single-target local-hashing MGA have ``K ~ 2``.

The defence runs in :data:`NUM_PASSES` passes over the reports so that a pipeline can
schedule it: ``plan = initial_plan(oracle)``, then for each pass ``tally(plan, reports)`` per
batch, merged with :meth:`PoisoningTally.merge`, and ``plan = advance(plan, tally)``; after
the last pass :func:`finish` gives the :class:`PoisoningReport`. :func:`defend` runs them all
in memory. Reports given to :func:`tally` must be valid (``oracle.validate`` or a parsed
:class:`~ldpflow.wire.envelope.ReportBatch`).

References
----------
X. Cao, J. Jia, N. Z. Gong. Data Poisoning Attacks to Local Differential Privacy Protocols.
USENIX Security 2021.
X. Sun, Q. Ye, H. Hu, J. Duan, T. Wo, J. Xu, R. Yang. LDPRecover: Recovering Frequencies from
Poisoning Attacks against Local Differential Privacy. ICDE 2024.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ldpflow.core import bitvectors, hashing, validation
from ldpflow.core.heavy_hitters import PROTOCOLS
from ldpflow.core.heavy_hitters.pem import PrefixExtendingMethod
from ldpflow.core.oracles.base import Accumulator, FrequencyOracle, Reports
from ldpflow.core.oracles.registry import ORACLES

if TYPE_CHECKING:  # for annotations only: the dispatch reads ``poisoning_family``
    from ldpflow.core.oracles.grr import DirectEncoding
    from ldpflow.core.oracles.local_hashing import LocalHashing
    from ldpflow.core.oracles.unary import UnaryEncoding

__all__ = [
    "DEFAULT_LEVELS",
    "default_level",
    "DEFAULT_POPULATION_LEVEL",
    "DISPERSION_SHARE",
    "NUM_PASSES",
    "OLH_CANDIDATES",
    "MGA_VARIANTS",
    "SUPPORTED",
    "fake_user_count",
    "maximal_gain_attack",
    "input_manipulation",
    "spread_attack",
    "support_size_law",
    "support_size_bounds",
    "truncated_constants",
    "dispersion_moments",
    "dispersion_test",
    "supports",
    "DefencePlan",
    "PoisoningTally",
    "PoisoningReport",
    "initial_plan",
    "tally",
    "advance",
    "finish",
    "flag_reports",
    "defend",
    "HEAVY_HITTER_SUPPORTED",
    "prefix_pass_level",
    "prefix_pass_test",
    "prefix_section",
    "defend_prefixes",
]

#: Per-report level by oracle family: the largest share of genuine reports a per-report
#: test flags. Bitmaps: 1e-4, leaving room under 1% for the genuine reports of a spike size
#: that support a suspected value (0.7% for oue, 0.9% for sue at epsilon 1, d 1024); local
#: hashing: 1e-2, since the fakes' co-support count overlaps the genuine tail
#: (docs/poisoning.md).
DEFAULT_LEVELS = {"grr": 1e-3, "bitmap": 1e-4, "hash": 1e-2}
#: Family-wise level of all the population tests of a key together (spikes, suspected
#: values, co-support pairs, dispersion: :data:`DISPERSION_SHARE`).
DEFAULT_POPULATION_LEVEL = 1e-3
#: Passes over the reports of one key (fixed, so a pipeline unrolls them at construction).
NUM_PASSES = 3
#: Local hashing: the values of largest support whose pairwise co-support is examined.
OLH_CANDIDATES = 32
MGA_VARIANTS = ("naive", "fixed-size", "matched")
#: The test family (:data:`DEFAULT_LEVELS`) of each ``poisoning_family`` an oracle class
#: declares: unary encoding and subset selection are both bitmaps.
_TEST_FAMILY = {"grr": "grr", "unary": "bitmap", "subset": "bitmap", "hash": "hash"}
#: Registry keys the defence handles: the oracles that declare a ``poisoning_family``.
SUPPORTED: tuple[str, ...] = tuple(
    name for name, cls in ORACLES.items() if cls.poisoning_family in _TEST_FAMILY)

_ROWS = 1 << 16  # reports hashed or unpacked at a time (bounded temporaries)


def _stats() -> Any:
    from scipy import stats  # here, not at import: scipy.stats takes 0.4 s to import

    return stats


def _family(oracle: FrequencyOracle) -> str | None:
    """The test family of ``oracle``, from the ``poisoning_family`` its class declares."""
    return _TEST_FAMILY.get(getattr(oracle, "poisoning_family", None))  # type: ignore[arg-type]


def _subset_size(oracle: Any) -> int:
    """``omega`` of an oracle of the ``subset`` family."""
    return int(oracle.subset_size)


def _is(oracle: Any, poisoning_family: str) -> bool:
    """Whether ``oracle``'s class declares ``poisoning_family`` (``subset``, ``unary``)."""
    return getattr(oracle, "poisoning_family", None) == poisoning_family


def default_level(oracle: FrequencyOracle) -> float:
    """The default per-report level of ``oracle``'s family (:data:`DEFAULT_LEVELS`)."""
    return DEFAULT_LEVELS[_check_oracle(oracle)]


def _pq(oracle: FrequencyOracle) -> tuple[float, float]:
    """``(p*, q*)`` of a pure protocol (every oracle the defence handles is one)."""
    return float(oracle.p), float(oracle.q)  # type: ignore[arg-type]


def supports(oracle: FrequencyOracle) -> bool:
    """Whether the defence handles ``oracle`` (:data:`SUPPORTED`)."""
    return _family(oracle) is not None


def _check_oracle(oracle: FrequencyOracle) -> str:
    if not isinstance(oracle, FrequencyOracle):
        raise TypeError(f"oracle must be a FrequencyOracle, got {type(oracle).__name__}")
    family = _family(oracle)
    if family is None:
        raise ValueError(f"oracle must be one of {' '.join(SUPPORTED)}, got {oracle.name!r}")
    return family


def _check_targets(targets: npt.ArrayLike, domain_size: int) -> np.ndarray:
    values = validation.check_values(targets, domain_size, name="targets")
    if values.size == 0 or np.unique(values).size != values.size:
        raise ValueError(f"targets must be distinct values, at least one, got {values.tolist()}")
    return values.astype(np.int64)


# -- attacks -------------------------------------------------------------------------------
def fake_user_count(genuine: int, beta: float) -> int:
    """``m`` with ``m / (genuine + m) = beta`` (rounded): fake users making a share ``beta``."""
    genuine = validation.check_positive_int(genuine, name="genuine")
    beta = validation.check_probability(beta, name="beta")
    if beta >= 1:
        raise ValueError(f"beta must be in [0, 1), got {beta!r}")
    return round(beta * genuine / (1 - beta))


def _pack(dense: np.ndarray) -> np.ndarray:
    return np.packbits(dense, axis=1, bitorder="little")


def maximal_gain_attack(
    oracle: FrequencyOracle,
    targets: npt.ArrayLike,
    fake_users: int,
    rng: np.random.Generator,
    *,
    variant: str = "fixed-size",
    tries: int = 1000,
) -> Reports:
    """The reports of ``fake_users`` fake users running the maximal gain attack.

    Parameters
    ----------
    oracle : FrequencyOracle
        grr, oue, sue, ss, olh or blh.
    targets : array_like of int
        The distinct values to promote.
    fake_users : int
        ``m``, the number of fake reports.
    rng : numpy.random.Generator
        A seeded generator (evaluation only).
    variant : {"naive", "fixed-size", "matched"}
        Bitmaps only: the other values a fake report holds (module docstring). ``fixed-size``
        uses ``round(p + (d - 1) q)`` values in all (ss: ``omega``); ``matched`` is exactly
        an honest report of a target holder conditioned on the targets' bits being set
        (unary encoding only).
    tries : int
        Local hashing: random seeds examined per fake user.

    Returns
    -------
    Reports
        Valid reports of ``oracle``.
    """
    family = _check_oracle(oracle)
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    targets = _check_targets(targets, oracle.domain_size)
    m = validation.check_positive_int(fake_users, name="fake_users", minimum=0)
    if variant not in MGA_VARIANTS:
        raise ValueError(f"variant must be one of {' '.join(MGA_VARIANTS)}, got {variant!r}")
    d, r = oracle.domain_size, targets.size
    if family == "grr":
        return Reports(oracle.name, {"value": targets[rng.integers(0, r, m)]})
    if family == "hash":
        return _hash_attack(oracle, targets, m, rng, validation.check_positive_int(  # type: ignore[arg-type]
            tries, name="tries"))
    others = np.setdiff1d(np.arange(d), targets)
    if _is(oracle, "subset"):
        if variant == "matched":
            raise ValueError("variant 'matched' is for unary encoding; an ss report has "
                             "exactly omega values (use 'fixed-size')")
        size = _subset_size(oracle)
    else:
        size = round(_pq(oracle)[0] + (d - 1) * _pq(oracle)[1])
    if variant != "naive" and r > size:
        raise ValueError(f"targets must be at most the support size {size}, got {r}")
    chunks = []
    for part in bitvectors.row_chunks(m, d):
        rows = part.stop - part.start
        dense = np.zeros((rows, d), dtype=np.uint8)
        if variant == "matched":
            dense[:] = rng.random((rows, d)) < _pq(oracle)[1]
        elif variant == "fixed-size" and size > r:
            keys = rng.random((rows, others.size))
            picked = np.argpartition(keys, size - r - 1, axis=1)[:, : size - r]
            dense[np.arange(rows)[:, None], others[picked]] = 1
        dense[:, targets] = 1
        chunks.append(_pack(dense))
    bits = np.concatenate(chunks) if chunks else np.zeros((0, bitvectors.num_bytes(d)), np.uint8)
    return Reports(oracle.name, {"bits": bits})


def _hash_attack(oracle: LocalHashing, targets: np.ndarray, m: int, rng: np.random.Generator,
                 tries: int) -> Reports:
    """Per fake user: of ``tries`` random seeds, the one whose hash puts the most targets in
    one bucket (first such), reported with that bucket."""
    g, r = oracle.hash_range, targets.size
    seeds = np.empty(m, dtype=np.uint64)
    buckets = np.empty(m, dtype=np.int64)
    per_chunk = max(1, _ROWS // tries)
    for start in range(0, m, per_chunk):
        rows = min(per_chunk, m - start)
        pool = rng.bit_generator.random_raw(rows * tries).astype(np.uint64)
        hashed = hashing.hash_grid(pool, targets, oracle.value_bits, g)  # (rows*tries, r)
        load = np.zeros((hashed.shape[0], g), dtype=np.int64)
        np.add.at(load, (np.repeat(np.arange(hashed.shape[0]), r), hashed.ravel()), 1)
        best_bucket = load.argmax(axis=1)
        best = load.max(axis=1).reshape(rows, tries).argmax(axis=1)
        pick = np.arange(rows) * tries + best
        seeds[start : start + rows] = pool[pick]
        buckets[start : start + rows] = best_bucket[pick]
    return Reports(oracle.name, {"seed": seeds, "bucket": buckets})


def input_manipulation(oracle: FrequencyOracle, targets: npt.ArrayLike, fake_users: int,
                       rng: np.random.Generator) -> Reports:
    """Fake users running the honest client on a uniformly chosen target (the baseline)."""
    if not isinstance(oracle, FrequencyOracle):
        raise TypeError(f"oracle must be a FrequencyOracle, got {type(oracle).__name__}")
    targets = _check_targets(targets, oracle.domain_size)
    m = validation.check_positive_int(fake_users, name="fake_users", minimum=0)
    return oracle.perturb(targets[rng.integers(0, targets.size, m)], rng)


def spread_attack(oracle: FrequencyOracle, targets: npt.ArrayLike, per_target: int,
                  rng: np.random.Generator, *, variant: str = "matched",
                  tries: int = 1000) -> Reports:
    """``per_target`` fake users for each target, each running the single-target maximal
    gain attack on it (bitmaps: ``variant``, by default the matched one; local hashing:
    ``tries`` seeds). GRR: exactly ``per_target`` reports of each target. With
    ``per_target`` under what the per-value test accepts, every target stays below its
    threshold (the *threshold-hugging* attack; docs/poisoning.md)."""
    targets = _check_targets(targets, oracle.domain_size)
    per = validation.check_positive_int(per_target, name="per_target", minimum=0)
    if _check_oracle(oracle) == "grr":
        return Reports(oracle.name, {"value": np.repeat(targets, per)})
    if _is(oracle, "subset") and variant == "matched":
        variant = "fixed-size"  # for ss the fixed-size report is the matched one
    extra: dict[str, Any] = {"tries": tries} if _family(oracle) == "hash" else {"variant": variant}
    return Reports.concat([maximal_gain_attack(oracle, [int(t)], per, rng, **extra)
                           for t in targets])


# -- the law of honest support sizes ------------------------------------------------------
def _binomial_pmf(trials: int, prob: float) -> np.ndarray:
    return _stats().binom.pmf(np.arange(trials + 1), trials, prob)


def _own_and_others(oracle: UnaryEncoding) -> tuple[np.ndarray, np.ndarray]:
    """Unary encoding: the laws (over 0 .. d-1) of the number of *other* bits set in a
    report whose user holds the value looked at, ``Binomial(d-1, q)``, and in one whose user
    holds another value, ``Bernoulli(p) + Binomial(d-2, q)``."""
    d, p, q = oracle.domain_size, oracle.p, oracle.q
    own = _binomial_pmf(d - 1, q)
    two = _binomial_pmf(d - 2, q)
    other = np.zeros(d)
    other[: d - 1] += (1 - p) * two
    other[1:] += p * two
    return own, other


def support_size_law(oracle: FrequencyOracle) -> npt.NDArray[np.float64]:
    """``P[size = s]``, ``s = 0 .. d``, for an honest report, whatever its user's value.

    Unary encoding: ``Bernoulli(p) + Binomial(d - 1, q)`` (the own bit and the others, all
    independent); ss: a point mass at ``omega``. Exact.
    """
    if _is(oracle, "subset"):
        law = np.zeros(oracle.domain_size + 1)
        law[_subset_size(oracle)] = 1.0
        return law
    if not _is(oracle, "unary"):
        raise ValueError(f"support sizes are defined for oue, sue and ss, got {oracle.name!r}")
    own, _ = _own_and_others(oracle)  # type: ignore[arg-type]  # unary, by its family
    p = _pq(oracle)[0]
    law = np.zeros(oracle.domain_size + 1)
    law[:-1] += (1 - p) * own
    law[1:] += p * own
    return law


def support_size_bounds(oracle: FrequencyOracle, level: float = DEFAULT_LEVELS["bitmap"]
                        ) -> tuple[int, int, float]:
    """The accepted sizes ``[lo, hi]`` of the two-sided test at ``level`` and its exact
    false-positive probability ``P[size < lo] + P[size > hi] <= level``."""
    level = validation.check_probability(level, name="level", open_interval=True)
    law = support_size_law(oracle)
    below = np.concatenate([[0.0], np.cumsum(law)[:-1]])  # P[size < s]
    above = np.concatenate([np.cumsum(law[::-1])[::-1][1:], [0.0]])  # P[size > s]
    lo = int(np.flatnonzero(below <= level / 2).max())
    hi = int(np.flatnonzero(above <= level / 2).min())
    return lo, hi, float(below[lo] + above[hi])


def truncated_constants(oracle: FrequencyOracle, accepted: npt.ArrayLike
                        ) -> tuple[float, float, float]:
    """``(P_K, p', q')`` of the honest reports whose size is in the set ``K`` (``accepted``:
    a boolean mask over sizes ``0 .. d``): ``P_K = P[size in K]``, ``p' = P[own bit | size
    in K]``, ``q' = P[a given other bit | size in K]``.

    A selection by size alone treats every value alike, so the selected genuine reports are
    a randomized response with ``p'`` and ``q'``: ``E[c_v^K] = n P_K (q' + (p' - q') f_v)``.
    """
    mask = np.asarray(accepted, dtype=bool)
    d = oracle.domain_size
    if mask.shape != (d + 1,):
        raise ValueError(f"accepted must be a mask of {d + 1} sizes, got shape {mask.shape}")
    law = support_size_law(oracle)
    total = float(law[mask].sum())
    if _is(oracle, "subset") or total == 0.0:
        return total, *_pq(oracle)
    own, other = _own_and_others(oracle)  # type: ignore[arg-type]
    p, q = _pq(oracle)
    p_kept = p * float(own[mask[1:]].sum()) / total
    q_kept = q * float(other[mask[1:]].sum()) / total
    return total, p_kept, q_kept


# -- the dispersion test: many values with excess -------------------------------------------
#: Share of ``population_level`` spent on the dispersion test (:func:`dispersion_test`); each
#: family's own population tests keep the rest, so the family-wise level holds (Bonferroni).
DISPERSION_SHARE = 0.5


def _pair_covariances(oracle: FrequencyOracle) -> tuple[float, float]:
    """``(c0, c1)``: the covariance of the support indicators of two values ``u != v`` in one
    report whose user holds neither (``c0``) or holds ``u`` (``c1``). Zero for unary encoding
    (independent bits) and local hashing (3-wise independent hashes); negative for grr (one
    value per report) and ss (a fixed number of values per report)."""
    p, q = _pq(oracle)
    d = oracle.domain_size
    if _is(oracle, "grr"):
        return -q * q, -p * q
    if _is(oracle, "subset") and d > 2:
        w = _subset_size(oracle)
        both = (p * (w - 1) * (w - 2) + (1 - p) * w * (w - 1)) / ((d - 1) * (d - 2))
        return both - q * q, p * (w - 1) / (d - 1) - p * q
    return 0.0, 0.0


def dispersion_moments(oracle: FrequencyOracle, n: npt.ArrayLike, *,
                       values: npt.ArrayLike | None = None, mass_bound: float = 1.0
                       ) -> tuple[np.ndarray, np.ndarray]:
    """The largest mean and variance of the dispersion statistic ``T = sum_v z_v^2`` over
    ``values`` values (by default the whole domain) among honest populations of ``n`` users
    whose largest frequency is at most ``mass_bound`` (``n`` and ``values`` broadcast).

    ``z_v = (c_v - n q) / sqrt(n q (1 - q))``: the support count standardised by the law of a
    value nobody holds. ``c_v`` is a sum over users of Bernoulli(``p``) (holders) and
    Bernoulli(``q``) (the others), so its cumulants are linear in ``f_v``:
    ``k_j(c_v) = n (K_j(q) + (K_j(p) - K_j(q)) f_v)``. With ``delta_v = n (p - q) f_v``,
    ``E[(c_v - nq)^2] = k2 + delta^2`` and ``Var[(c_v - nq)^2] = k4 + 2 k2^2 + 4 delta^2 k2 +
    4 delta k3``, exactly. Summed under ``sum f <= 1``, the mean depends on the population
    only through ``S = sum f^2``, the variance through ``S`` and ``sum f^3 <= f_max S``;
    both are linear in ``S <= f_max <= mass_bound`` (the variance is taken at both ends), so
    these bound every such honest population. A report of unary encoding or local hashing
    supports two values independently (the sum is exact); grr and ss add their Gaussian
    cross term ``2 sum_{u != v} Cov(c_u, c_v)^2`` (the negative cross terms are left out,
    which only overstates the variance).
    """
    p, q = _pq(oracle)
    n = np.asarray(n, dtype=np.float64)
    d = np.asarray(oracle.domain_size if values is None else values, dtype=np.float64)
    s = min(1.0, max(float(mass_bound), 0.0))
    r = p - q

    def cumulants(x: float) -> tuple[float, float, float]:
        v = x * (1 - x)
        return v, v * (1 - 2 * x), v * (1 - 6 * v)

    (a2, a3, a4), (b2, b3, b4) = cumulants(q), cumulants(p)
    b2, b3, b4 = b2 - a2, b3 - a3, b4 - a4  # the slopes in f_v
    c0, c1 = _pair_covariances(oracle)
    e = c1 - c0

    def mass(coefficient: float) -> float:
        """The largest ``coefficient * M`` over the values' genuine mass ``M``: exactly 1
        over the whole domain, at most 1 over part of it."""
        return coefficient if values is None or coefficient > 0 else 0.0

    scale = n * a2
    mean = (n * (d * a2 + mass(b2)) + n * n * r * r * s) / scale

    def variance(s_: float) -> np.ndarray:
        cross = (d * (d - 1) * (n * c0) ** 2 + 4 * (d - 1) * n * n * mass(c0 * e)
                 + e * e * n * n * (2 * np.maximum(d - 2, 0) * s_ + 2))
        return np.asarray((n * (d * a4 + mass(b4))
                           + 2 * n * n * (d * a2 * a2 + mass(2 * a2 * b2) + b2 * b2 * s_)
                           + 4 * n ** 3 * r * r * (a2 * s_ + max(b2, 0.0) * s * s_)
                           + 4 * n * n * r * (mass(a3) + b3 * s_) + 2 * cross) / scale ** 2)

    return mean, np.maximum(variance(0.0), variance(s))


def _mass_bound(oracle: FrequencyOracle, counts: np.ndarray, n: int, level: float) -> float:
    """``U``, at least the largest genuine frequency with probability ``1 - level`` on honest
    reports: the largest estimate plus ``z_level`` times the largest standard deviation of an
    estimate (the value holding ``f_max`` is one of those maximised over)."""
    p, q = _pq(oracle)
    sigma = max(math.sqrt(x * (1 - x) / n) for x in (p, q)) / (p - q)
    top = (float(counts.max()) / n - q) / (p - q)
    return float(min(1.0, max(0.0, top + _stats().norm.isf(level) * sigma)))


def _dispersion_value(q: float, n: npt.ArrayLike, squares: npt.ArrayLike, sums: npt.ArrayLike,
                      values: npt.ArrayLike) -> np.ndarray:
    """``sum (c_v - n q)^2 / (n q (1 - q))`` from ``sum c^2``, ``sum c`` and the count."""
    n = np.asarray(n, dtype=np.float64)
    return np.asarray((np.asarray(squares) - 2 * n * q * np.asarray(sums)
                       + np.asarray(values) * (n * q) ** 2) / (n * q * (1 - q)))


def _null_threshold(oracle: FrequencyOracle, n: npt.ArrayLike, values: npt.ArrayLike,
                    mass_bound: float, level: float) -> tuple[np.ndarray, ...]:
    """``(g, h, threshold, mean, variance)``: the null ``g chi2_h`` (Satterthwaite: the
    largest mean and variance of :func:`dispersion_moments`) and its upper ``level``
    quantile."""
    mean, variance = dispersion_moments(oracle, n, values=values, mass_bound=mass_bound)
    g, h = variance / (2 * mean), 2 * mean * mean / variance
    return g, h, g * _stats().chi2.isf(level, h), mean, variance


def dispersion_test(oracle: FrequencyOracle, support: npt.ArrayLike, n: int,
                    level: float) -> dict[str, Any]:
    """The population test of *many values with excess*, at family-wise ``level``.

    Statistic: ``T = sum_v z_v^2`` over the domain, or over the values ``support`` counts
    when it counts fewer (the first ones or any chosen without these reports, such as
    PEM's candidates; :func:`dispersion_moments` bounds their genuine mass by 1), which grows
    with the square of every value's excess over the law of a value nobody holds. An honest
    population has ``sum f = 1``, which caps the excess it can spread; fakes do not. Null:
    the least favourable honest population whose largest frequency is at most ``U``
    (:func:`_mass_bound` at ``level / 2``), approximated by ``g chi2_h`` with its largest mean
    and variance; the alarm is ``T`` above its ``level / 2`` quantile. An honest population
    raises it with probability at most ``level`` (union bound), whatever its frequencies.

    Returns a JSON-ready dict: ``name``, ``value`` (``T``), ``threshold``, ``p_value`` (the
    tail of the null at ``T``), ``level`` (what ``p_value`` is compared with: ``level / 2``),
    ``alarm``, ``mass_bound`` (``U``) and ``mass_bound_level``, ``null_mean``, ``null_sd``.
    """
    counts = np.asarray(support, dtype=np.float64).reshape(-1)
    d = oracle.domain_size
    if not 0 < counts.size <= d:
        raise ValueError(f"support must count 1 .. domain_size={d} values, got {counts.size}")
    q = _pq(oracle)[1]
    bound = _mass_bound(oracle, counts, n, level / 2)
    g, h, threshold, mean, variance = _null_threshold(oracle, n, counts.size, bound, level / 2)
    value = float(_dispersion_value(q, n, np.sum(counts**2), counts.sum(), counts.size))
    return {"name": "dispersion", "value": value, "threshold": float(threshold),
            "p_value": float(_stats().chi2.sf(value / g, h)), "level": level / 2,
            "alarm": bool(value > threshold), "mass_bound": bound,
            "mass_bound_level": level / 2, "null_mean": float(mean),
            "null_sd": float(np.sqrt(variance))}


def _grr_dispersion_suspects(oracle: DirectEncoding, support: np.ndarray, n: int,
                             test: dict[str, Any], start: Sequence[int]) -> tuple[int, ...]:
    """GRR after a dispersion alarm: the fewest values, ``start`` (the per-value suspects)
    then by decreasing count, whose removal leaves counts the rest of an honest population
    explains. With ``P`` removed, the genuine users are re-estimated as the recovery does,
    ``n^ = (N - c_P) / (1 - |P| q)`` (this undoes the fakes' depression of every other
    value), and the rest's statistic is compared with its null over ``d - |P|`` values,
    ``n^`` users, at the test's level and mass bound. Only values counted above ``n^ q``
    are removed."""
    d, q = oracle.domain_size, oracle.q
    counts = support.astype(np.float64)
    first = np.asarray(sorted(start), dtype=np.int64)
    rest = np.argsort(-counts, kind="stable")
    order = np.concatenate([first, rest[~np.isin(rest, first)]])
    c = counts[order]
    removed = np.concatenate([[0.0], np.cumsum(c)])
    removed_sq = np.concatenate([[0.0], np.cumsum(c**2)])
    ks = np.arange(first.size, d)
    n_hat = (n - removed[ks]) / (1 - ks * q)
    usable = (n_hat > 0) & ((ks == first.size) | (c[np.maximum(ks - 1, 0)] > n_hat * q))
    usable &= np.cumprod(usable).astype(bool)  # stop at the first value without excess
    ks, n_hat = ks[usable], n_hat[usable]
    if ks.size == 0:
        return tuple(int(v) for v in first)
    values = d - ks
    t = _dispersion_value(q, n_hat, counts @ counts - removed_sq[ks],
                          counts.sum() - removed[ks], values)
    threshold = _null_threshold(oracle, n_hat, values, test["mass_bound"], test["level"])[2]
    passing = np.flatnonzero(t <= threshold)
    k = int(ks[passing[0]] if passing.size else ks[-1])
    return tuple(sorted(int(v) for v in order[:k]))


# -- the defence: plans, tallies, passes ---------------------------------------------------
@dataclasses.dataclass(frozen=True, eq=False)
class DefencePlan:
    """What one key's defence knows before a pass (small: a pipeline's side input).

    Attributes
    ----------
    oracle : FrequencyOracle
    level, population_level : float
        The per-report and population levels.
    pass_index : int
        The next pass, ``0 .. NUM_PASSES - 1``.
    n : int
        The reports seen by the first pass (0 before it).
    support : ndarray of int64 or None
        The first pass's accumulator counts (all reports).
    size_bounds : (int, int) or None
        Bitmaps: the accepted support sizes.
    spike_sizes : tuple of int
        Bitmaps: sizes over-represented in the population.
    candidates : tuple of int
        Local hashing: the values whose co-support is examined.
    suspected : tuple of int
        Values the population tests attribute to fake users.
    min_supported : int or None
        Local hashing: a report supporting at least this many suspected values is flagged.
    recovered : ndarray of float64 or None
        Bitmaps: the recovered estimates (from the second pass).
    details : dict
        JSON-ready statistics of the tests, for the report.
    """

    oracle: FrequencyOracle
    level: float = DEFAULT_LEVELS["bitmap"]
    population_level: float = DEFAULT_POPULATION_LEVEL
    pass_index: int = 0
    n: int = 0
    support: np.ndarray | None = None
    size_bounds: tuple[int, int] | None = None
    spike_sizes: tuple[int, ...] = ()
    candidates: tuple[int, ...] = ()
    suspected: tuple[int, ...] = ()
    min_supported: int | None = None
    recovered: np.ndarray | None = None
    details: dict = dataclasses.field(default_factory=dict)

    @property
    def family(self) -> str:
        return _check_oracle(self.oracle)


@dataclasses.dataclass(eq=False)
class PoisoningTally:
    """Integer statistics of one pass over a set of reports; merging adds them exactly."""

    pass_index: int
    counts: dict[str, np.ndarray]

    def merge(self, other: PoisoningTally) -> PoisoningTally:
        """Add ``other`` into this tally (mutating only ``self``) and return ``self``."""
        if not isinstance(other, PoisoningTally):
            raise TypeError(f"can only merge a PoisoningTally, got {type(other).__name__}")
        if other.pass_index != self.pass_index or set(other.counts) != set(self.counts):
            raise ValueError(f"cannot merge a tally of pass {other.pass_index} "
                             f"{sorted(other.counts)} into one of pass {self.pass_index} "
                             f"{sorted(self.counts)}")
        for name, value in other.counts.items():
            if value.shape != self.counts[name].shape:
                raise ValueError(f"tally field {name!r} has shape {value.shape}, expected "
                                 f"{self.counts[name].shape}")
            self.counts[name] = self.counts[name] + value
        return self


@dataclasses.dataclass(frozen=True, eq=False)
class PoisoningReport:
    """The outcome of the defence for one key.

    Attributes
    ----------
    oracle : str
    test : str
        The tests applied (``support-size``, ``co-support``, ``value-count``).
    level, population_level : float
    n : int
        Reports examined.
    flagged : int
        Reports flagged as fake.
    suspected : tuple of int
        Values the population tests attribute to fake users.
    recovered : ndarray of float64
        The recovered (raw, unbiased for the genuine users) frequency estimates.
    identifiable : bool
        False when the recovered estimates of the suspected values rest on an assumption
        rather than on the data (GRR).
    details : dict
    """

    oracle: str
    test: str
    level: float
    population_level: float
    n: int
    flagged: int
    suspected: tuple[int, ...]
    recovered: np.ndarray
    identifiable: bool
    details: dict

    def to_dict(self) -> dict[str, Any]:
        """The ``poisoning`` section of a key's result: plain Python values."""
        return {
            "test": self.test, "level": self.level, "population_level": self.population_level,
            "n": self.n, "flagged": self.flagged,
            "flagged_fraction": self.flagged / self.n if self.n else 0.0,
            "suspected": list(self.suspected), "identifiable": self.identifiable,
            "recovered_estimates": [float(x) if np.isfinite(x) else None
                                    for x in self.recovered],
            "details": self.details,
        }


_TESTS = {"grr": "value-count", "bitmap": "support-size", "hash": "co-support"}


def initial_plan(oracle: FrequencyOracle, level: float | None = None,
                 population_level: float = DEFAULT_POPULATION_LEVEL) -> DefencePlan:
    """The plan of the first pass (validates the oracle and the levels; ``level=None``: the
    family's default, :func:`default_level`)."""
    if level is None:
        level = default_level(oracle)
    _check_oracle(oracle)
    level = validation.check_probability(level, name="level", open_interval=True)
    population_level = validation.check_probability(population_level, name="population_level",
                                                    open_interval=True)
    return DefencePlan(oracle, level, population_level)


def _own_level(plan: DefencePlan) -> float:
    """The family-wise level of a family's own population tests: what the dispersion test
    leaves of ``population_level`` (:data:`DISPERSION_SHARE`)."""
    return plan.population_level * (1 - DISPERSION_SHARE)


def _sizes(reports: Reports) -> np.ndarray:
    return bitvectors.row_popcount(reports.columns["bits"])


def _support_matrix(oracle: LocalHashing, reports: Reports, values: Sequence[int]) -> np.ndarray:
    """``S[i, j] = [H_{s_i}(values[j]) == y_i]`` (bool, shape ``(n, len(values))``)."""
    seeds, buckets = reports.columns["seed"], reports.columns["bucket"]
    out = np.zeros((seeds.size, len(values)), dtype=bool)
    if len(values):
        for start in range(0, seeds.size, _ROWS):
            part = slice(start, start + _ROWS)
            grid = hashing.hash_grid(seeds[part], np.asarray(values), oracle.value_bits,
                                     oracle.hash_range)
            out[part] = grid == buckets[part].astype(np.int64)[:, None]
    return out


def _column_sums(bits: np.ndarray, d: int) -> np.ndarray:
    return bitvectors.column_sums(bits, d) if bits.shape[0] else np.zeros(d, dtype=np.int64)


def _kept_mask(plan: DefencePlan) -> np.ndarray:
    """Bitmaps: the sizes whose reports the recovery keeps (accepted, no spike)."""
    lo, hi = plan.size_bounds  # type: ignore[misc]
    mask = np.zeros(plan.oracle.domain_size + 1, dtype=bool)
    mask[lo : hi + 1] = True
    mask[list(plan.spike_sizes)] = False
    return mask


def flag_reports(plan: DefencePlan, reports: Reports) -> npt.NDArray[np.bool_]:
    """Which reports the defence flags as fake (the plan of the last pass)."""
    if plan.pass_index != NUM_PASSES - 1:
        raise ValueError(f"reports are flagged with the plan of pass {NUM_PASSES - 1}, "
                         f"got one of pass {plan.pass_index}")
    family = plan.family
    if family == "grr":
        return np.isin(reports.columns["value"], np.asarray(plan.suspected, dtype=np.int64))
    if family == "bitmap":
        sizes = _sizes(reports)
        lo, hi = plan.size_bounds  # type: ignore[misc]
        flagged = (sizes < lo) | (sizes > hi)
        if plan.spike_sizes and plan.suspected:
            spike = np.flatnonzero(np.isin(sizes, plan.spike_sizes))
            values = np.asarray(plan.suspected)
            picked = reports.columns["bits"][spike[:, None], values >> 3]  # (rows, suspected)
            hit = ((picked >> (values & 7).astype(np.uint8)) & 1).any(axis=1)
            flagged[spike[hit]] = True
        return flagged
    if not plan.suspected:
        return np.zeros(len(reports), dtype=bool)
    hits = _support_matrix(plan.oracle, reports, plan.suspected).sum(axis=1)  # type: ignore[arg-type]
    return hits >= plan.min_supported


def tally(plan: DefencePlan, reports: Reports) -> PoisoningTally:
    """The statistics of pass ``plan.pass_index`` over a batch of valid reports."""
    if not isinstance(plan, DefencePlan):
        raise TypeError(f"plan must be a DefencePlan, got {type(plan).__name__}")
    oracle, family, pass_index = plan.oracle, plan.family, plan.pass_index
    d = oracle.domain_size
    n = np.array([len(reports)], dtype=np.int64)
    if 0 < pass_index < NUM_PASSES and plan.n == 0:  # no reports in the first pass: nothing to do
        return PoisoningTally(pass_index, {"n": n} if pass_index == 1 else
                              {"n": n, "flagged": np.zeros(1, dtype=np.int64)})
    if pass_index == 0:
        counts = {"n": n, "support": oracle.count_valid(reports).counts}
        if family == "bitmap":
            counts["sizes"] = np.bincount(_sizes(reports), minlength=d + 1).astype(np.int64)
        return PoisoningTally(0, counts)
    if pass_index == 1:
        counts = {"n": n}
        if family == "bitmap":
            sizes, bits = _sizes(reports), reports.columns["bits"]
            kept = _kept_mask(plan)[sizes]
            spike = np.isin(sizes, plan.spike_sizes)
            counts.update(kept_n=np.array([kept.sum()], dtype=np.int64),
                          spike_n=np.array([spike.sum()], dtype=np.int64),
                          kept_support=_column_sums(bits[kept], d),
                          spike_support=_column_sums(bits[spike], d))
        elif family == "hash":
            support = _support_matrix(oracle, reports, plan.candidates).astype(np.int64)  # type: ignore[arg-type]
            counts["cosupport"] = support.T @ support
        return PoisoningTally(1, counts)
    if pass_index == 2:
        flagged = flag_reports(plan, reports)
        counts = {"n": n, "flagged": np.array([flagged.sum()], dtype=np.int64)}
        if family == "hash":
            kept = reports[~flagged]
            counts["kept_n"] = np.array([len(kept)], dtype=np.int64)
            counts["kept_support"] = (oracle.count_valid(kept).counts if len(kept)
                                      else oracle.create_accumulator().counts)
        return PoisoningTally(2, counts)
    raise ValueError(f"plan.pass_index must be in [0, {NUM_PASSES}), got {pass_index}")


def _check_tally(plan: DefencePlan, result: PoisoningTally) -> None:
    if not isinstance(result, PoisoningTally):
        raise TypeError(f"tally must be a PoisoningTally, got {type(result).__name__}")
    if result.pass_index != plan.pass_index:
        raise ValueError(f"a tally of pass {result.pass_index} given to the plan of pass "
                         f"{plan.pass_index}")


def advance(plan: DefencePlan, result: PoisoningTally) -> DefencePlan:
    """The plan of the next pass, from the merged tally of this one (passes 0 and 1)."""
    _check_tally(plan, result)
    if plan.pass_index == 0:
        return _after_first(plan, result)
    if plan.pass_index == 1:
        return _after_second(plan, result)
    raise ValueError(f"the plan of pass {plan.pass_index} is the last; call finish()")


def _after_first(plan: DefencePlan, result: PoisoningTally) -> DefencePlan:
    oracle, family = plan.oracle, plan.family
    stats = _stats()
    n = int(result.counts["n"][0])
    support = result.counts["support"].copy()
    changes: dict[str, Any] = {"pass_index": 1, "n": n, "support": support}
    details: dict[str, Any] = {}
    d = oracle.domain_size
    if n:  # every family: the population test of many values with excess
        dispersion = dispersion_test(
            oracle, oracle.support_counts(Accumulator(oracle.key, support, n)), n,
            plan.population_level * DISPERSION_SHARE)
        details["dispersion"] = dispersion
    if n == 0:
        pass
    elif family == "grr":
        # What a value's count would be if every user held it: Binomial(N, p).
        pvalues = stats.binom.sf(support - 1, n, oracle.p)
        suspected = tuple(int(v) for v in np.flatnonzero(pvalues <= _own_level(plan) / d))
        details["max_count_fraction"] = float(support.max() / n)
        details["impossible_above_fraction"] = _pq(oracle)[0]
        details["value_count_suspected"] = list(suspected)
        if dispersion["alarm"]:
            suspected = _grr_dispersion_suspects(oracle, support, n, dispersion,  # type: ignore[arg-type]
                                                 suspected)
        changes["suspected"] = suspected
    elif family == "bitmap":
        lo, hi, false_positive = support_size_bounds(oracle, plan.level)
        law = support_size_law(oracle)
        sizes = result.counts["sizes"]
        tested = np.flatnonzero((law > 0) & (np.arange(d + 1) >= lo) & (np.arange(d + 1) <= hi))
        pvalues = stats.binom.sf(sizes[tested] - 1, n, law[tested])
        excess = sizes[tested] > n * law[tested]
        spikes = tested[excess & (pvalues <= _own_level(plan) / max(1, tested.size))]
        changes.update(size_bounds=(lo, hi), spike_sizes=tuple(int(s) for s in spikes))
        details.update(size_bounds=[lo, hi], size_test_false_positive=false_positive,
                       spike_sizes=[int(s) for s in spikes],
                       spike_excess=[int(sizes[s] - round(n * law[s])) for s in spikes])
    else:
        k = min(OLH_CANDIDATES, d)
        counts = oracle.support_counts(Accumulator(oracle.key, support, n))
        order = np.argsort(-counts, kind="stable")[:k]
        changes["candidates"] = tuple(int(v) for v in np.sort(order))
    changes["details"] = details
    return dataclasses.replace(plan, **changes)


def _after_second(plan: DefencePlan, result: PoisoningTally) -> DefencePlan:
    oracle, family = plan.oracle, plan.family
    stats = _stats()
    details = dict(plan.details)
    changes: dict[str, Any] = {"pass_index": 2}
    n = plan.n
    if family == "bitmap" and n:
        mask = _kept_mask(plan)
        total, p_kept, q_kept = truncated_constants(oracle, mask)
        kept_n = int(result.counts["kept_n"][0])
        if kept_n == 0 or p_kept == q_kept:
            recovered = np.full(oracle.domain_size, np.nan)
        else:
            recovered = (result.counts["kept_support"] / kept_n - q_kept) / (p_kept - q_kept)
        changes["recovered"] = recovered
        details.update(kept=kept_n, kept_p=p_kept, kept_q=q_kept)
        if plan.spike_sizes and kept_n and _is(oracle, "unary"):
            changes["suspected"] = _spike_suspects(plan, result, recovered, total, kept_n,
                                                   p_kept, q_kept, details)
    elif family == "hash" and n and plan.candidates:
        cands = np.asarray(plan.candidates)
        cos = result.counts["cosupport"].astype(np.float64)
        g = oracle.hash_range  # type: ignore[attr-defined]
        p, q = _pq(oracle)
        f = np.clip((np.diag(cos) / n - q) / (p - q), 0.0, 1.0)
        var_f = float(oracle.variance(n))
        pair_f = f[:, None] + f[None, :]
        slope = p / g - 1 / g**2
        expected = n * (pair_f * slope + 1 / g**2)
        var = expected * (1 - expected / n) + (n * slope) ** 2 * 2 * var_f
        z = (cos - expected) / np.sqrt(var)
        pairs = max(1, cands.size * (cands.size - 1) // 2)
        threshold = stats.norm.isf(_own_level(plan) / pairs)
        suspected = tuple(int(v) for v in cands[_densest_clique(z, threshold)])
        changes["suspected"] = suspected
        details.update(candidates=int(cands.size), pair_threshold_z=float(threshold),
                       max_pair_z=float(np.max(z[np.triu_indices(cands.size, 1)]))
                       if cands.size > 1 else None)
        if suspected:
            null = _null_support(oracle, suspected)  # type: ignore[arg-type]
            tail = _tail(null)
            min_supported = max(1, int(np.flatnonzero(tail <= plan.level).min()))
            flagged = null.sum(axis=1) >= min_supported
            changes["min_supported"] = min_supported
            # The genuine collateral the recovery adds back: the null share flagged, and the
            # share flagged and supporting each suspected value.
            details.update(min_supported=min_supported,
                           report_false_positive_estimate=float(flagged.mean()),
                           collateral=[float(x) for x in null[flagged].sum(axis=0) / len(null)])
    changes["details"] = details
    return dataclasses.replace(plan, **changes)


def _densest_clique(z: np.ndarray, threshold: float) -> list[int]:
    """Indices of a set of candidates whose every pair has ``z > threshold``: the pair of
    largest ``z``, then, while possible, the candidate whose smallest ``z`` with the members
    is largest (empty when no pair passes)."""
    k = z.shape[0]
    if k < 2:
        return []
    scores = np.where(np.eye(k, dtype=bool), -np.inf, z)
    first, second = np.unravel_index(np.argmax(scores), scores.shape)
    if scores[first, second] <= threshold:
        return []
    members = [int(first), int(second)]
    while len(members) < k:
        weakest = scores[:, members].min(axis=1)
        weakest[members] = -np.inf
        best = int(np.argmax(weakest))
        if weakest[best] <= threshold:
            break
        members.append(best)
    return sorted(members)


#: Draws of the Monte Carlo null of the co-support count (fixed seed: plans are reproducible).
_NULL_DRAWS = 1 << 18
_NULL_SEED = 0x5EED


def _null_support(oracle: LocalHashing, values: Sequence[int]) -> np.ndarray:
    """Which of ``values`` each of :data:`_NULL_DRAWS` simulated genuine reports supports
    (bool, ``(draws, r)``), for users holding none of them (and outside their affine span):
    a uniform seed and a bucket uniform and independent of the hashes of ``values``. Drawn
    with a fixed seed, so plans are reproducible. (The affine family makes the law of the
    count depend on the affine structure of ``values``: it is not simply binomial.)"""
    rng = np.random.default_rng(_NULL_SEED)
    seeds = rng.bit_generator.random_raw(_NULL_DRAWS).astype(np.uint64)
    buckets = rng.integers(0, oracle.hash_range, _NULL_DRAWS)
    reports = Reports(oracle.name, {"seed": seeds, "bucket": buckets})
    return _support_matrix(oracle, reports, values)


def _tail(null: np.ndarray) -> np.ndarray:
    """``P[count >= j]``, ``j = 0 .. r + 1``, of the simulated support counts."""
    counts = np.bincount(null.sum(axis=1), minlength=null.shape[1] + 1)
    return np.append(np.cumsum(counts[::-1])[::-1] / null.shape[0], 0.0)


def _spike_suspects(plan: DefencePlan, result: PoisoningTally, recovered: np.ndarray,
                    total: float, kept_n: int, p_kept: float, q_kept: float,
                    details: dict) -> tuple[int, ...]:
    """Values that the reports of spike sizes support beyond the other values.

    A genuine report of a spike size supports ``v`` with probability ``a1`` if its user holds
    ``v`` and ``a0`` otherwise (exact), so genuine support is ``n^ (f a1 + (1 - f) a0)`` with
    ``n^ = kept / P_K`` and ``f`` the recovered estimate. The excess over it, ``e_v``, comes
    from the ``X`` excess (fake) spike reports: all of them support a target, a share ``rho``
    of them any other value (their filler). ``rho`` is estimated by the median excess, and
    ``v`` is suspected when ``e_v - rho X`` exceeds its standard deviation (genuine binomial
    noise, the error of ``f``, the fakes' binomial filler) times the Bonferroni quantile.
    """
    oracle = plan.oracle
    own, other = _own_and_others(oracle)  # type: ignore[arg-type]
    spike = np.zeros(oracle.domain_size + 1, dtype=bool)
    spike[list(plan.spike_sizes)] = True
    a1 = oracle.p * float(own[spike[1:]].sum())  # type: ignore[operator]
    a0 = oracle.q * float(other[spike[1:]].sum())  # type: ignore[operator]
    n_hat = kept_n / total
    spike_n = float(support_size_law(oracle)[spike].sum()) * n_hat
    fakes = max(0.0, float(result.counts["spike_n"][0]) - spike_n)
    f = np.clip(recovered, 0.0, 1.0)
    expected = n_hat * (f * a1 + (1 - f) * a0)
    excess = result.counts["spike_support"] - expected
    rho = float(np.clip(np.median(excess) / fakes, 0.0, 1.0)) if fakes else 0.0
    var_f = q_kept * (1 - q_kept) / (kept_n * (p_kept - q_kept) ** 2)
    var = (expected * (1 - expected / n_hat) + (n_hat * (a1 - a0)) ** 2 * var_f
           + fakes * rho * (1 - rho))
    z = (excess - rho * fakes) / np.sqrt(var)
    threshold = _stats().norm.isf(_own_level(plan) / oracle.domain_size)
    details.update(spike_fake_reports_estimate=fakes, spike_filler_rate=rho,
                   spike_support_threshold_z=float(threshold))
    return tuple(int(v) for v in np.flatnonzero(z > threshold))


def finish(plan: DefencePlan, result: PoisoningTally) -> PoisoningReport:
    """The report of the defence from the merged tally of the last pass."""
    _check_tally(plan, result)
    if plan.pass_index != NUM_PASSES - 1:
        raise ValueError(f"finish() takes the plan of pass {NUM_PASSES - 1}, got {plan.pass_index}")
    oracle, family = plan.oracle, plan.family
    d = oracle.domain_size
    n = plan.n
    flagged = int(result.counts["flagged"][0])
    details = dict(plan.details)
    identifiable = True
    if n == 0:
        recovered = np.full(d, np.nan)
    elif family == "grr":
        recovered, identifiable = _grr_recovery(oracle, plan, details)  # type: ignore[arg-type]
    elif family == "bitmap":
        recovered = plan.recovered  # type: ignore[assignment]
    else:
        kept_n = int(result.counts["kept_n"][0])
        details["kept"] = kept_n
        if kept_n == 0:
            recovered = np.full(d, np.nan)
        else:
            acc = Accumulator(oracle.key, result.counts["kept_support"].copy(), kept_n)
            recovered = oracle.estimate(acc).frequencies
            if plan.suspected:
                recovered = _hash_recovery(oracle, plan, acc, details)  # type: ignore[arg-type]
    return PoisoningReport(oracle.name, _TESTS[family], plan.level, plan.population_level, n,
                           flagged, plan.suspected, np.asarray(recovered, dtype=np.float64),
                           identifiable, details)


def _hash_recovery(oracle: LocalHashing, plan: DefencePlan, kept: Accumulator,
                   details: dict) -> np.ndarray:
    """Local hashing: the estimate of the kept reports with the genuine reports flagged put
    back at their expected counts (LDPRecover's correction of a known removal).

    A share ``phi`` of genuine reports is flagged (null law), so ``n^ = kept / (1 - phi)``;
    those flagged support a suspected value ``v`` with share ``psi_v`` and any other value
    with share ``phi / g`` (its hash is independent of theirs), so ``n^ psi_v`` and
    ``n^ phi / g`` are added to the support counts before estimating with ``n^``.
    """
    p, q = _pq(oracle)
    phi = details["report_false_positive_estimate"]
    n_hat = kept.n / (1 - phi)
    counts = oracle.support_counts(kept).astype(np.float64) + n_hat * phi / oracle.hash_range
    counts[list(plan.suspected)] += n_hat * (np.asarray(details["collateral"])
                                             - phi / oracle.hash_range)
    details["genuine_users_estimate"] = float(n_hat)
    return np.asarray((counts / n_hat - q) / (p - q), dtype=np.float64)


def _grr_recovery(oracle: DirectEncoding, plan: DefencePlan, details: dict
                  ) -> tuple[np.ndarray, bool]:
    """LDPRecover-style recovery of GRR (module docstring): suspected values at 0, the others
    re-estimated with the genuine count ``n^``."""
    support, n = plan.support, plan.n
    p, q = oracle.p, oracle.q
    raw = np.asarray((support / n - q) / (p - q), dtype=np.float64)  # type: ignore[operator]
    if not plan.suspected:
        return raw, True
    suspected = list(plan.suspected)
    rest = n - int(support[suspected].sum())  # type: ignore[index]
    n_hat = rest / (1 - len(suspected) * q)
    recovered = np.asarray((support / n_hat - q) / (p - q), dtype=np.float64)  # type: ignore[operator]
    recovered[suspected] = 0.0
    details["genuine_users_estimate"] = float(n_hat)
    details["fake_users_estimate"] = float(n - n_hat)
    return recovered, False


def defend(oracle: FrequencyOracle, reports: Reports, *, level: float | None = None,
           population_level: float = DEFAULT_POPULATION_LEVEL) -> PoisoningReport:
    """Run every pass of the defence over ``reports`` (validated first) in memory."""
    plan = initial_plan(oracle, level, population_level)
    reports = oracle.validate(reports)
    for pass_index in range(NUM_PASSES):
        result = tally(plan, reports)
        if pass_index < NUM_PASSES - 1:
            plan = advance(plan, result)
    return finish(plan, result)


# -- heavy hitters: PEM's passes, from the counts of its passes ------------------------------
#: Heavy-hitter protocols the defence handles (``ldpflow heavy-hitters --poisoning detect``):
#: those that declare the ``prefix`` poisoning family (their passes are OLH over prefixes).
HEAVY_HITTER_SUPPORTED: tuple[str, ...] = tuple(
    name for name, cls in PROTOCOLS.items()
    if getattr(cls, "poisoning_family", None) == "prefix")


def _check_prefix_protocol(protocol: Any) -> PrefixExtendingMethod:
    if not _is(protocol, "prefix"):
        raise ValueError(f"protocol must be one of {' '.join(HEAVY_HITTER_SUPPORTED)}, got "
                         f"{getattr(protocol, 'name', type(protocol).__name__)!r}")
    return protocol


def prefix_pass_level(protocol: PrefixExtendingMethod, population_level: float) -> float:
    """The level of each pass's test: ``population_level / g`` (Bonferroni over the ``g``
    passes, so a configuration's tests together stay at ``population_level``)."""
    protocol = _check_prefix_protocol(protocol)
    population_level = validation.check_probability(population_level, name="population_level",
                                                    open_interval=True)
    return population_level / protocol.num_groups


def prefix_pass_test(protocol: PrefixExtendingMethod, counts: Any,
                      population_level: float = DEFAULT_POPULATION_LEVEL) -> dict[str, Any]:
    """The dispersion test of one PEM pass from the counts of its pass (``PassCounts``).

    A pass's group counts the support of its candidates (the extensions of what the
    earlier passes kept, chosen from *other* groups' reports), exactly as its OLH oracle
    (``protocol.oracle(pass_index)``) would; so :func:`dispersion_test` over those candidates,
    at :func:`prefix_pass_level`, is the test of many values with excess on an honest
    group's reports, whatever the candidates are. Fakes promoting several targets (the
    MGA: each fake supports all the targets it can) raise it; no report is flagged (that
    needs the reports again, docs/poisoning.md).

    Returns ``{"pass_index", "label", "n", "candidates", "dispersion"}`` (``dispersion`` None
    for a pass without reports or candidates).
    """
    protocol = _check_prefix_protocol(protocol)
    level = prefix_pass_level(protocol, population_level)
    pass_index = counts.pass_index
    n = int(counts.group_counts[pass_index])
    out: dict[str, Any] = {"pass": pass_index, "label": protocol.pass_label(pass_index), "n": n,
                           "candidates": 0, "dispersion": None}
    if n:  # (without reports a pass has no estimates to test)
        estimate = protocol.estimate(counts)
        out["candidates"] = int(estimate.candidates.size)
        if estimate.candidates.size:
            out["dispersion"] = dispersion_test(protocol.oracle(pass_index),
                                                estimate.support_counts, n, level)
    return out


def prefix_section(protocol: PrefixExtendingMethod, passes: Sequence[dict[str, Any]],
                   population_level: float = DEFAULT_POPULATION_LEVEL) -> dict[str, Any]:
    """The ``poisoning`` section of a PEM configuration from its passes' tests
    (:func:`prefix_pass_test`, in pass order): the layout of
    :meth:`PoisoningReport.to_dict`, with ``test`` ``"dispersion"``, nothing flagged,
    suspected or recovered (``level`` and ``recovered_estimates`` None: there is no
    per-report test), ``alarm`` (any pass's) and per pass in ``details.passes``."""
    level = prefix_pass_level(protocol, population_level)
    n = sum(int(s["n"]) for s in passes)
    alarms = [int(s["pass"]) for s in passes if s["dispersion"] and s["dispersion"]["alarm"]]
    return {
        "test": "dispersion", "level": None, "population_level": population_level, "n": n,
        "flagged": 0, "flagged_fraction": 0.0, "suspected": [], "identifiable": True,
        "recovered_estimates": None, "alarm": bool(alarms),
        "details": {"pass_level": level, "alarm_passes": alarms, "passes": list(passes)},
    }


def defend_prefixes(protocol: PrefixExtendingMethod, reports: Reports, *,
                    population_level: float = DEFAULT_POPULATION_LEVEL,
                    valid: Any = None, **options: Any) -> dict[str, Any]:
    """:func:`prefix_section` of PEM's passes over ``reports`` in memory (as
    ``protocol.identify(reports, valid=valid, **options)`` runs them)."""
    protocol = _check_prefix_protocol(protocol)
    reports = protocol.validate_some(reports)
    protocol.check_options(options)
    group = reports.columns["group"]
    state = protocol.initial_state()
    passes = []
    for pass_index in range(protocol.num_passes):
        part = reports[np.flatnonzero(group == protocol.pass_groups(pass_index)[0])]
        counts = protocol.accumulate(pass_index, part, state)
        passes.append(prefix_pass_test(protocol, counts, population_level))
        state = protocol.advance(pass_index, counts, state, valid=valid, **options)
    return prefix_section(protocol, passes, population_level)
