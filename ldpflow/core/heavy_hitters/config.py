"""The automatic PEM configuration: groups, steps, query limit and hash range from
``n``, epsilon, ``k``, ``m`` and a compute budget.

The PEM paper's design principle is *fewer groups*: every group is a separate sample, so
``g`` groups leave ``n / g`` users to each estimate. Its query limit ``Q = 2**20`` exists
for the cost of counting candidates by hash evaluation; counting them by the Walsh-Hadamard
method (:mod:`~ldpflow.core.heavy_hitters.counting`) costs ``O(n_i 2**b)`` per batch of
prefixes plus ``O(Q log Q)``, so a larger ``Q`` (and fewer groups) is cheap up to the memory
of the counters. :func:`configure` applies the rule:

1. **Hash range** (:func:`cost_aware_hash_range`): the smallest power of two whose OLH
   variance is within ``tolerance`` (10 %) of the optimum's, at most ``max_hash_range``
   (64). Counting cost grows linearly with ``g_OLH`` while the variance
   ``(e + g - 1)**2 / ((e - 1)**2 (g - 1))`` flattens: at epsilon 4, 32 buckets cost 7.7 %
   more variance than 64 at half the counting time; at epsilon 8 the optimum (4096 buckets)
   would make counting 64 times slower than 64 buckets, whose variance is still a fifth of
   epsilon 4's.
2. **Survivors** ``s = 2 k`` (:func:`~ldpflow.core.heavy_hitters.base.default_survivors`).
3. **Groups**: the fewest ``g`` for which some ``(gamma, eta)`` keeps every pass within
   ``max_candidates`` candidates (pass 0: ``2**(gamma + eta)``; pass 1 ``2 s 2**eta``, as
   pass 0 keeps twice the survivors; later passes ``s 2**eta``); among those, the
   ``(gamma, eta)`` of least modelled counting cost (:func:`pass_costs`). ``g = 1`` (the
   exhaustive oracle) when ``2**m <= max_candidates``.
4. ``Q = max(2**(gamma + eta), 2 s 2**eta)``: the largest pass, so that the survivors fit.

``docs/heavy_hitters.md`` ("Automatic configuration") has the measurements behind the
defaults.
"""

from __future__ import annotations

import math

from ldpflow.core import validation
from ldpflow.core.heavy_hitters import counting
from ldpflow.core.heavy_hitters.base import MAX_QUERY_LIMIT, default_survivors
from ldpflow.core.heavy_hitters.pem import PrefixExtendingMethod
from ldpflow.core.oracles.local_hashing import olh_variance, optimal_hash_range

__all__ = [
    "DEFAULT_MAX_CANDIDATES",
    "DEFAULT_MAX_HASH_RANGE",
    "cost_aware_hash_range",
    "olh_variance_factor",
    "pass_costs",
    "configure",
]

#: The default compute budget: the most candidates one pass may estimate (32 MB of int64
#: counters per accumulator).
DEFAULT_MAX_CANDIDATES = 2**22
#: The default cap on OLH's hash range: counting costs O(n g) per batch of prefixes.
DEFAULT_MAX_HASH_RANGE = 64


def olh_variance_factor(epsilon: float, hash_range: int) -> float:
    """``(e + g - 1)**2 / ((e - 1)**2 (g - 1))``: ``n`` times OLH's variance at frequency 0
    (:func:`~ldpflow.core.oracles.local_hashing.olh_variance` of one report)."""
    return olh_variance(1, epsilon, hash_range)


def cost_aware_hash_range(epsilon: float, *, tolerance: float = 0.1,
                          max_hash_range: int = DEFAULT_MAX_HASH_RANGE) -> int:
    """The smallest power of two within ``tolerance`` of OLH's optimal variance, capped.

    Parameters
    ----------
    epsilon : float
    tolerance : float, default 0.1
        The variance allowed above the optimum's, relative (0: the optimum).
    max_hash_range : int, default 64
        A power of two >= 2: the counting budget per report.
    """
    epsilon = validation.check_epsilon(epsilon)
    if not 0 <= tolerance < math.inf:
        raise ValueError(f"tolerance must be in [0, inf), got {tolerance!r}")
    cap = validation.check_power_of_two(max_hash_range, name="max_hash_range")
    if cap < 2:
        raise ValueError(f"max_hash_range must be >= 2, got {cap!r}")
    best = optimal_hash_range(epsilon)
    floor = olh_variance_factor(epsilon, best)
    g = 2
    while g < best and olh_variance_factor(epsilon, g) > (1 + tolerance) * floor:
        g *= 2
    return min(g, cap)


def pass_costs(users: int, prefix_bits: tuple[int, ...], survivors: int,
                hash_range: int) -> list[float]:
    """The modelled counting cost of each pass (:func:`counting.scatter_cost` plus one
    ``2**eta`` Walsh-Hadamard transform per prefix), in passes over one entry."""
    b = hash_range.bit_length() - 1
    n = max(1, users // len(prefix_bits))
    costs, parent = [], 0
    for i, bits in enumerate(prefix_bits):
        eta = bits - parent
        prefixes = 1 if i == 0 else survivors
        d = counting.batch_size(prefixes, n, b, eta) if i else 1
        costs.append(counting.scatter_cost(prefixes, n, b, eta, d)
                     + prefixes * float(1 << eta) * eta)
        parent = bits
    return costs


def configure(
    *,
    top_k: int,
    value_bits: int,
    epsilon: float,
    users: int,
    max_candidates: int = DEFAULT_MAX_CANDIDATES,
    survivors: int | None = None,
    max_hash_range: int = DEFAULT_MAX_HASH_RANGE,
) -> PrefixExtendingMethod:
    """The PEM configuration of the rule in the module docstring.

    Parameters
    ----------
    top_k, value_bits, epsilon : as :class:`PrefixExtendingMethod`.
    users : int
        The expected number of users ``n`` (the cost model's; any positive estimate).
    max_candidates : int, default 2**22
        The compute budget: the most candidates one pass may estimate (<= 2**28).
    survivors : int, optional
        How many prefixes the server will keep per pass (default ``2 k``).
    max_hash_range : int, default 64

    Raises
    ------
    ValueError
        If no configuration fits the budget (it must allow ``4 s`` candidates).
    """
    k = validation.check_positive_int(top_k, name="top_k")
    m = validation.check_value_bits(value_bits)
    n = validation.check_positive_int(users, name="users")
    budget = validation.check_positive_int(max_candidates, name="max_candidates", minimum=2)
    if budget > MAX_QUERY_LIMIT:
        raise ValueError(f"max_candidates must be <= 2**28, got {budget!r}")
    s = default_survivors(k) if survivors is None else validation.check_positive_int(
        survivors, name="survivors")
    s = max(s, k)
    g_olh = cost_aware_hash_range(epsilon, max_hash_range=max_hash_range)
    log_budget = budget.bit_length() - 1
    if m <= log_budget:
        return PrefixExtendingMethod(top_k=k, value_bits=m, epsilon=epsilon, query_limit=2**m,
                                     start_bits=0, step_bits=m, hash_range=g_olh)
    max_eta = (budget // (2 * s)).bit_length() - 1  # pass 1 extends 2 s prefixes
    if max_eta < 1:
        raise ValueError(
            f"max_candidates must allow {2 * s} survivors of pass 0 a step of one bit: "
            f"max_candidates >= {4 * s}, got {budget!r}"
        )
    best: tuple[int, float, int, int] | None = None  # (groups, cost, gamma, eta)
    for eta in range(1, max_eta + 1):
        for gamma in range(0, min(log_budget - eta, m - 1) + 1):
            groups = -(-(m - gamma) // eta)
            if groups < 2:
                continue
            bits = tuple(min(gamma + (i + 1) * eta, m) for i in range(groups))
            cost = sum(pass_costs(n, bits, s, g_olh))
            entry = (groups, cost, gamma, eta)
            if best is None or entry[:2] < best[:2]:
                best = entry
    if best is None:
        raise ValueError(f"no configuration of value_bits={m} fits max_candidates={budget}")
    _, _, gamma, eta = best
    limit = max(2 ** (gamma + eta), 2 * s * 2**eta)
    return PrefixExtendingMethod(top_k=k, value_bits=m, epsilon=epsilon, query_limit=limit,
                                 start_bits=gamma, step_bits=eta, hash_range=g_olh)
