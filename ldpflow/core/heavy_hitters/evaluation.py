"""Populations and scores for heavy-hitter evaluation (seeded; never for real clients).

Values are drawn from ``N`` distinct ``B``-bit values by a seeded rank-to-value map, and
their ranks by a :class:`ldpflow.core.simulation.RankDistribution` (Zipf / uniform /
geometric, the one sampler of the package); :func:`true_top` is the true top list and
:func:`score_top_k` the
heavy-hitter scores (precision, recall, F1 and NCR, from :mod:`ldpflow.core.queries`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from ldpflow.core import queries, simulation, validation

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
    dist = _distribution(distribution, exponent, ratio)
    count = validation.check_positive_int(num_distinct, name="num_distinct")
    mapping = distinct_values(count, value_bits, gen)
    return mapping[dist.sample(count, n, gen)]


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
