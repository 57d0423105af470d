"""Queries on a frequency vector and the error metrics of their answers.

Contract (``docs/spec/consistency.md``, "Queries and metrics"; Wang et al., "Locally
Differentially Private Frequency Estimation with Consistency", NDSS 2020, Section V; Wang, Li,
Jha, "Locally Differentially Private Heavy Hitter Identification", arXiv 1708.06674, for F1 and
NCR): pure functions of numpy vectors, no randomness except through an injected generator.
A frequency vector is a one-dimensional float array over the domain ``0 .. d-1`` (a
post-processed estimate, or the true frequencies).

Queries:

* **full domain**: the frequency of every value;
* **top-k** (frequent values): the frequencies of the ``k`` values with the largest *true*
  frequencies (ties broken towards the smaller value, so the set is deterministic);
* **set-value**: the sum of the frequencies over a subset of the domain, e.g. a random subset
  of ``rho% * d`` values (:func:`random_subsets`).

Post-Pos (``postprocess(..., "post-pos")`` returns the raw vector) is applied here: every
query and metric takes ``clamp=True`` to replace each *answer* (a single frequency or a
subset sum) by ``max(answer, 0)``.

Metrics: mean squared error over the full domain, the true top-k and a family of subsets;
the l1 and l-infinity errors; for heavy hitters, precision, recall and F1 of an identified
set against the true top-k, and NCR (each true top-k value of rank ``r`` weighs
``k - r + 1``; NCR is the weight identified over the total weight ``k (k + 1) / 2``).

Heavy-hitter scoring lives here and only here: :func:`score_identified` scores identified
values of any kind (integer indices, 64-bit values, decoded strings or bytes) against the true
values in rank order, :func:`true_top` ranks a population's values, and
:func:`top_k_scores` scores the top of an estimated frequency vector; all of them use
:func:`precision_recall_f1` and :func:`ncr`'s one implementation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Iterable, Iterator, Mapping
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from ldpflow.core import validation
from ldpflow.core.validation import check_positive_int

__all__ = [
    "TopKScores",
    "full_domain",
    "top_k_values",
    "top_k",
    "random_subsets",
    "set_value",
    "mse",
    "mse_full_domain",
    "mse_top_k",
    "mse_set_value",
    "l1_error",
    "linf_error",
    "precision_recall_f1",
    "ncr",
    "top_k_scores",
    "score_identified",
    "true_top",
]

FloatArray = npt.NDArray[np.float64]


# -- validation ------------------------------------------------------------------------------
def _vector(values: npt.ArrayLike, name: str) -> FloatArray:
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be an array of real numbers: {exc}") from None
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty one-dimensional array, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        bad = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise ValueError(f"{name} must be finite, got {float(arr[bad])!r} at position {bad}")
    return arr


def _pair(estimate: npt.ArrayLike, truth: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    est, tru = _vector(estimate, "estimate"), _vector(truth, "truth")
    if est.shape != tru.shape:
        raise ValueError(
            f"estimate and truth must have the same length, got {est.size} and {tru.size}"
        )
    return est, tru


def _k(k: Any, domain_size: int) -> int:
    if not 1 <= validation.check_integer(k, name="k") <= domain_size:
        raise ValueError(f"k must be in [1, {domain_size}] (the domain size), got {k!r}")
    return int(k)


def _subset_mask(subsets: npt.ArrayLike, domain_size: int) -> npt.NDArray[np.bool_]:
    """Subsets as a (count, d) boolean mask; a 1-d mask or index list is one subset."""
    arr = np.asarray(subsets)
    if arr.dtype == np.bool_:
        mask = np.atleast_2d(arr)
        if mask.ndim != 2 or mask.shape[1] != domain_size:
            raise ValueError(
                f"subsets as a boolean mask must have shape (count, {domain_size}), "
                f"got {arr.shape}"
            )
        return mask
    if arr.dtype.kind not in "iu":
        raise TypeError(f"subsets must be a boolean mask or integer indices, got dtype {arr.dtype}")
    index = np.atleast_2d(arr)
    if index.ndim != 2:
        raise ValueError(f"subsets as indices must be 1-d or 2-d, got shape {arr.shape}")
    if index.size and (index.min() < 0 or index.max() >= domain_size):
        bad = int(index[(index < 0) | (index >= domain_size)][0])
        raise ValueError(f"subsets must hold values in [0, {domain_size}), got {bad}")
    mask = np.zeros((index.shape[0], domain_size), dtype=bool)
    np.put_along_axis(mask, index, True, axis=1)
    return mask


def _clamped(answers: FloatArray, clamp: bool) -> FloatArray:
    return np.maximum(answers, 0.0) if clamp else answers


# -- queries ---------------------------------------------------------------------------------
def full_domain(frequencies: npt.ArrayLike, *, clamp: bool = False) -> FloatArray:
    """The frequency of every value (``clamp=True``: each one at least 0, i.e. Post-Pos)."""
    return _clamped(_vector(frequencies, "frequencies").copy(), clamp)


def top_k_values(frequencies: npt.ArrayLike, k: int) -> npt.NDArray[np.int64]:
    """The ``k`` values with the largest frequencies, largest first.

    Ties are broken towards the smaller value (a stable sort), so the answer is deterministic.

    Parameters
    ----------
    frequencies : array_like of float, shape (d,)
    k : int
        ``1 <= k <= d``.

    Returns
    -------
    ndarray of int64, shape (k,)
        The values in decreasing order of frequency: index ``r - 1`` holds rank ``r``.
    """
    f = _vector(frequencies, "frequencies")
    k = _k(k, f.size)
    return np.argsort(-f, kind="stable")[:k].astype(np.int64)


def top_k(
    frequencies: npt.ArrayLike, truth: npt.ArrayLike, k: int, *, clamp: bool = False
) -> FloatArray:
    """The answers ``frequencies[v]`` for the ``k`` values ``v`` of largest *true* frequency.

    The query set comes from ``truth`` (neither the oracle nor the post-processing knows it),
    in decreasing order of true frequency.
    """
    est, tru = _pair(frequencies, truth)
    return _clamped(est[top_k_values(tru, k)], clamp)


def random_subsets(
    domain_size: int, size: int, count: int, rng: np.random.Generator
) -> npt.NDArray[np.bool_]:
    """``count`` subsets of ``size`` distinct values, each uniform among all such subsets.

    Parameters
    ----------
    domain_size : int
        ``d >= 1``.
    size : int
        Values per subset, ``1 <= size <= d`` (the consistency paper uses ``round(rho/100 * d)``).
    count : int
        Number of subsets, ``>= 1``.
    rng : numpy.random.Generator
        The source of randomness (pass a seeded one for reproducible experiments).

    Returns
    -------
    ndarray of bool, shape (count, domain_size)
        Row ``i`` marks the values of subset ``i``.
    """
    domain_size = check_positive_int(domain_size, name="domain_size")
    count = check_positive_int(count, name="count")
    if not 1 <= validation.check_integer(size, name="size") <= domain_size:
        raise ValueError(f"size must be in [1, {domain_size}] (the domain size), got {size!r}")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    # The ranks of iid uniforms are a uniform random permutation per row; its first `size`
    # entries are a uniform subset.
    chosen = np.argsort(rng.random((count, domain_size)), axis=1)[:, : int(size)]
    return _subset_mask(chosen, domain_size)


def set_value(
    frequencies: npt.ArrayLike, subsets: npt.ArrayLike, *, clamp: bool = False
) -> FloatArray:
    """The sum of ``frequencies`` over each subset (``clamp=True``: each sum at least 0).

    Parameters
    ----------
    frequencies : array_like of float, shape (d,)
    subsets : array_like
        A boolean mask of shape ``(count, d)`` or ``(d,)``, or integer indices of shape
        ``(count, size)`` or ``(size,)`` (indices within a row should be distinct).

    Returns
    -------
    ndarray of float64, shape (count,)
    """
    f = _vector(frequencies, "frequencies")
    mask = _subset_mask(subsets, f.size)
    return _clamped(mask.astype(np.float64) @ f, clamp)


# -- error metrics ---------------------------------------------------------------------------
def mse(answers: npt.ArrayLike, truth: npt.ArrayLike) -> float:
    """Mean squared error between two answer vectors of equal length."""
    est, tru = _pair(answers, truth)
    return float(np.mean((est - tru) ** 2))


def mse_full_domain(
    frequencies: npt.ArrayLike, truth: npt.ArrayLike, *, clamp: bool = False
) -> float:
    """``(1/d) sum_v (f'_v - f_v)^2`` (the consistency paper, Section V-A)."""
    est, tru = _pair(frequencies, truth)
    return mse(full_domain(est, clamp=clamp), tru)


def mse_top_k(
    frequencies: npt.ArrayLike, truth: npt.ArrayLike, k: int, *, clamp: bool = False
) -> float:
    """The MSE over the ``k`` values of largest true frequency."""
    est, tru = _pair(frequencies, truth)
    return mse(top_k(est, tru, k, clamp=clamp), tru[top_k_values(tru, k)])


def mse_set_value(
    frequencies: npt.ArrayLike,
    truth: npt.ArrayLike,
    subsets: npt.ArrayLike,
    *,
    clamp: bool = False,
) -> float:
    """The MSE of the subset sums: mean over subsets of ``(f'(S) - f(S))^2``."""
    est, tru = _pair(frequencies, truth)
    return mse(set_value(est, subsets, clamp=clamp), set_value(tru, subsets))


def l1_error(frequencies: npt.ArrayLike, truth: npt.ArrayLike, *, clamp: bool = False) -> float:
    """``sum_v |f'_v - f_v|`` over the full domain."""
    est, tru = _pair(frequencies, truth)
    return float(np.sum(np.abs(full_domain(est, clamp=clamp) - tru)))


def linf_error(frequencies: npt.ArrayLike, truth: npt.ArrayLike, *, clamp: bool = False) -> float:
    """``max_v |f'_v - f_v|`` over the full domain."""
    est, tru = _pair(frequencies, truth)
    return float(np.max(np.abs(full_domain(est, clamp=clamp) - tru)))


# -- heavy hitters ---------------------------------------------------------------------------
def _value(item: Any, name: str, position: int) -> Hashable:
    """One value of a heavy-hitter collection, as the Python object it compares as."""
    if isinstance(item, np.generic):
        item = item.item()  # numpy ints, strings and bytes compare as Python's
    if isinstance(item, (bool, float, complex)):
        # True == 1 and 1.0 == 1 would merge distinct values silently; a float is also what
        # np.asarray makes of Python ints of 2**63 or more, with their low bits lost.
        raise TypeError(f"{name} must hold integers, strings or bytes, got "
                        f"{type(item).__name__} {item!r} at position {position}")
    try:
        hash(item)
    except TypeError:
        raise TypeError(f"{name} must hold hashable values, got {type(item).__name__} at "
                        f"position {position}") from None
    return item


def _entries(values: Any, name: str) -> Iterator[Any]:
    """An iterator over a one-dimensional collection of values (not a single string, not a
    multi-dimensional array), read lazily."""
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{name} must be a collection of values, got one "
                        f"{type(values).__name__} ({values!r})")
    if isinstance(values, np.ndarray):
        if values.ndim != 1:
            raise ValueError(f"{name} must be a one-dimensional collection of values, got "
                             f"shape {values.shape}")
        values = values.tolist() if values.size else []  # an empty array of any dtype is empty
    try:
        return iter(values)
    except TypeError:
        raise TypeError(f"{name} must be a collection of values, got "
                        f"{type(values).__name__}") from None


def _distinct(values: Any, name: str) -> tuple[list[Hashable], int]:
    """The distinct values of a one-dimensional collection in the order they first occur,
    and how many values it holds (duplicates included)."""
    items = list(_entries(values, name))
    first: dict[Hashable, None] = {}
    for position, item in enumerate(items):
        first.setdefault(_value(item, name, position), None)
    return list(first), len(items)


def _precision_recall_f1(found: set[Hashable], relevant: set[Hashable]
                         ) -> tuple[float, float, float]:
    hits = len(found & relevant)
    precision = hits / len(found) if found else 0.0
    recall = hits / len(relevant)
    f1 = 2 * precision * recall / (precision + recall) if hits else 0.0
    return precision, recall, f1


def _ncr(found: set[Hashable], ranked: list[Hashable]) -> float:
    k = len(ranked)
    weight = sum(k - r for r, v in enumerate(ranked) if v in found)  # rank r + 1: k - r
    return float(weight / (k * (k + 1) / 2))


def precision_recall_f1(
    identified: Iterable[Hashable] | npt.ArrayLike, relevant: Iterable[Hashable] | npt.ArrayLike
) -> tuple[float, float, float]:
    """Precision, recall and F1 of an identified set of values against the relevant set.

    Parameters
    ----------
    identified : array_like or iterable of hashable
        The values reported (e.g. the estimated top-k): integers (Python or numpy), strings
        or bytes. Duplicates count once.
    relevant : array_like or iterable of hashable
        The true top-k values; must not be empty.

    Returns
    -------
    (precision, recall, f1) : tuple of float
        ``|I & R| / |I|``, ``|I & R| / |R|`` and their harmonic mean. An empty identified set
        has precision 0 (nothing correct was identified), hence F1 0.

    Raises
    ------
    TypeError
        A value is a bool or a float (they would compare equal to integers), or unhashable.
    ValueError
        ``relevant`` is empty.
    """
    found, _ = _distinct(identified, "identified")
    true, _ = _distinct(relevant, "relevant")
    if not true:
        raise ValueError("relevant must hold at least one value, got an empty set")
    return _precision_recall_f1(set(found), set(true))


def ncr(identified: Iterable[Hashable] | npt.ArrayLike,
        true_top_k: Iterable[Hashable] | npt.ArrayLike) -> float:
    """Normalized cumulative rank of an identified set (the PEM paper, Wang, Li, Jha).

    Parameters
    ----------
    identified : array_like or iterable of hashable
        The values reported; order and duplicates do not matter.
    true_top_k : array_like or iterable of hashable
        The true top-k values *in rank order* (largest first, as :func:`top_k_values` gives),
        distinct.

    Returns
    -------
    float
        ``sum over identified true values of (k - r + 1)`` over ``k (k + 1) / 2``: 1 when the
        whole top-k is identified; missing the rank-1 value costs the most.
    """
    ranked, size = _distinct(true_top_k, "true_top_k")
    if size == 0:
        raise ValueError("true_top_k must hold at least one value, got none")
    if len(ranked) != size:
        shown = (true_top_k.tolist() if isinstance(true_top_k, np.ndarray)
                 else list(cast(Iterable[Any], true_top_k)))
        raise ValueError(f"true_top_k must hold distinct values, got {shown}")
    found, _ = _distinct(identified, "identified")
    return _ncr(set(found), ranked)


@dataclasses.dataclass(frozen=True)
class TopKScores:
    """How well the estimated top-k matches the true top-k.

    Attributes
    ----------
    precision, recall, f1, ncr : float
        See :func:`precision_recall_f1` and :func:`ncr`; all in ``[0, 1]``.
    """

    precision: float
    recall: float
    f1: float
    ncr: float


def top_k_scores(frequencies: npt.ArrayLike, truth: npt.ArrayLike, k: int) -> TopKScores:
    """Score the ``k`` largest estimates as a heavy-hitter answer against the true top-k."""
    est, tru = _pair(frequencies, truth)
    identified, relevant = top_k_values(est, k), top_k_values(tru, k)
    return score_identified(identified, relevant, k)


def _ranked_truth(truth: Any, k: int) -> list[Hashable]:
    """The first ``k`` distinct values of ``truth`` (read no further than needed)."""
    entries = _entries(truth, "truth")
    ranked: dict[Hashable, None] = {}
    for position, entry in enumerate(entries):
        if len(ranked) == k:
            break
        if isinstance(entry, Mapping):  # an entry of true_top's list
            if "value" not in entry:
                raise ValueError(f"truth entry {position} has no 'value': {dict(entry)!r}")
            entry = entry["value"]
        ranked.setdefault(_value(entry, "truth", position), None)
    return list(ranked)


def score_identified(
    identified: Iterable[Hashable] | npt.ArrayLike,
    truth: Iterable[Any] | npt.ArrayLike,
    k: int,
) -> TopKScores:
    """Precision, recall, F1 and NCR of identified values against the true top ``k``.

    The one scoring of heavy hitters: integer domain indices (:func:`top_k_scores`), the
    64-bit values of :mod:`ldpflow.core.heavy_hitters` and decoded strings or bytes are all
    scored here, as values compared by equality.

    Parameters
    ----------
    identified : array_like or iterable of hashable
        The values reported: integers (Python or numpy, any width), strings or bytes. Order
        and duplicates do not matter.
    truth : array_like or iterable
        The true values in rank order, largest first: values like ``identified``'s, or the
        entries of :func:`true_top` (mappings with a ``"value"``). A value that occurs again
        is dropped (its first occurrence holds its rank); the first ``k`` distinct values
        are the true top-k.
    k : int
        ``k >= 1``. When ``truth`` holds fewer than ``k`` distinct values, all of them are
        the true top list and NCR is normalised by their number.

    Returns
    -------
    TopKScores
        ``precision = |I & T| / |I|`` (0 for an empty ``identified``), ``recall =
        |I & T| / |T|``, their harmonic mean ``f1``, and ``ncr``: the true value of rank
        ``r`` weighs ``|T| - r + 1`` and NCR is the weight identified over
        ``|T| (|T| + 1) / 2`` (:func:`precision_recall_f1` and :func:`ncr`).

    Raises
    ------
    TypeError
        ``k`` is not an integer, or a value is a bool, a float or unhashable.
    ValueError
        ``k < 1``, or ``truth`` holds no value.
    """
    k = check_positive_int(k, name="k")
    ranked = _ranked_truth(truth, k)
    if not ranked:
        raise ValueError("truth must hold at least one value, got none")
    found, _ = _distinct(identified, "identified")
    found_set = set(found)
    precision, recall, f1 = _precision_recall_f1(found_set, set(ranked))
    return TopKScores(precision, recall, f1, _ncr(found_set, ranked))


def _integer_array(values: npt.ArrayLike, name: str) -> np.ndarray:
    """A 1-d integer array of ``values``, exact for Python ints of up to 64 bits.

    ``np.asarray([1, 2**63])`` is a float64 array (values near ``2**64`` lose their low
    bits), so sequences of Python ints are converted element by element.
    """
    if isinstance(values, np.ndarray):
        arr = values.reshape(-1)
    else:
        items = np.asarray(values, dtype=object).reshape(-1).tolist()
        if not all(validation.is_integer(v) for v in items):
            raise TypeError(f"{name} must be integers, got {items[:5]}...")
        ints = [int(v) for v in items]
        dtype = np.uint64 if ints and max(ints) >= 2**63 else np.int64
        try:
            arr = np.array(ints, dtype=dtype)
        except OverflowError:
            raise ValueError(f"{name} must lie in [-2**63, 2**64) and not mix negative values "
                             "with values of 2**63 or more") from None
    if arr.size and arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integers, got dtype {arr.dtype}")
    return arr


def true_top(values: npt.ArrayLike, k: int | None = None) -> list[dict[str, int]]:
    """The distinct values by count, largest first: the true top list of a population.

    Parameters
    ----------
    values : array_like of int
        Every user's value (integers of up to 64 bits, exact for Python ints too).
    k : int, optional
        Keep the first ``k`` entries (``k >= 0``); all by default.

    Returns
    -------
    list of dict
        ``[{"value": V, "count": C}, ...]``, ties broken towards the smaller value; the
        ``truth`` of :func:`score_identified` as it is.
    """
    arr = _integer_array(values, "values")
    uniq, counts = np.unique(arr, return_counts=True)
    order = np.lexsort((uniq, -counts))
    if k is not None:
        order = order[: check_positive_int(k, name="k", minimum=0)]
    return [{"value": int(uniq[i]), "count": int(counts[i])} for i in order]
