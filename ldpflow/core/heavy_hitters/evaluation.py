"""Populations and scores for heavy-hitter evaluation (seeded; never for real clients).

Values are drawn from ``N`` distinct ``B``-bit values by a seeded rank-to-value map, and
their ranks by a :class:`ldpflow.core.simulation.RankDistribution` (Zipf / uniform /
geometric, the one sampler of the package).

Scoring lives in :mod:`ldpflow.core.queries`, the one place for it:
:func:`ldpflow.core.queries.true_top` (the true top list, re-exported here as
:func:`true_top`) and :func:`ldpflow.core.queries.score_identified` (precision, recall, F1
and NCR of identified values of any kind, integers, strings or bytes); :func:`score_top_k`
is that scoring as a dict, for the callers that take one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

from ldpflow.core import queries, simulation, validation
from ldpflow.core.queries import true_top

__all__ = [
    "DISTRIBUTIONS",
    "rank_probabilities",
    "distinct_values",
    "sample_values",
    "true_top",
    "score_top_k",
]

_U64 = np.uint64


#: Distributions over the ranks ``1 .. N`` of the distinct values.
DISTRIBUTIONS = ("zipf", "uniform", "geometric")


def _distribution(distribution: str, exponent: float, ratio: float
                  ) -> simulation.RankDistribution:
    if distribution == "zipf":
        validation.check_epsilon(exponent, name="exponent")  # a finite real > 0
        return simulation.RankDistribution("zipf", float(exponent))
    if distribution == "uniform":
        return simulation.RankDistribution("uniform")
    if distribution == "geometric":
        rho = validation.check_probability(ratio, name="ratio", open_interval=True)
        return simulation.RankDistribution("geometric", float(rho))
    raise ValueError(f"distribution must be one of {list(DISTRIBUTIONS)}, got {distribution!r}")


def rank_probabilities(
    num_distinct: int,
    distribution: str = "zipf",
    *,
    exponent: float = 1.1,
    ratio: float = 0.9,
) -> np.ndarray:
    """``P[rank r]`` for ``r = 1 .. N`` (index ``r - 1``).

    ``"zipf"``: proportional to ``r**-exponent``; ``"uniform"``; ``"geometric"``:
    proportional to ``ratio**(r - 1)`` (:class:`ldpflow.core.simulation.RankDistribution`).
    """
    count = validation.check_positive_int(num_distinct, name="num_distinct")
    return _distribution(distribution, exponent, ratio).probabilities(count)


def _generator(rng: np.random.Generator | int) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    if validation.is_integer(rng):
        return np.random.default_rng(int(rng))
    raise TypeError(
        f"rng must be a numpy.random.Generator or an int seed, got {type(rng).__name__}"
    )


def distinct_values(
    count: int, value_bits: int, rng: np.random.Generator | int
) -> npt.NDArray[np.uint64]:
    """``count`` distinct values drawn uniformly from ``[0, 2**value_bits)`` (the rank map)."""
    count = validation.check_positive_int(count, name="count")
    bits = validation.check_value_bits(value_bits)
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
    dist = _distribution(distribution, exponent, ratio)
    count = validation.check_positive_int(num_distinct, name="num_distinct")
    mapping = distinct_values(count, value_bits, gen)
    return mapping[dist.sample(count, n, gen)]


def score_top_k(
    identified: Iterable[Hashable] | npt.ArrayLike, truth: Iterable[Any] | npt.ArrayLike, k: int
) -> dict[str, float]:
    """Precision, recall, F1 and NCR of identified values against the true top ``k``.

    :func:`ldpflow.core.queries.score_identified` (see there for ``identified``, ``truth``,
    such as :func:`true_top`'s list, and ``k``) as a dict with the keys ``precision``,
    ``recall``, ``f1`` and ``ncr``.
    """
    return dataclasses.asdict(queries.score_identified(identified, truth, k))
