"""The contract every heavy-hitter protocol follows, as reusable checks.

``tests/core/test_heavy_hitter_protocols.py`` runs them over every key of
:data:`ldpflow.core.heavy_hitters.PROTOCOLS` (the pattern of the oracles' contract suite).
Each protocol gets one small configuration (:data:`SMALL`) in which its estimates are
exact enough to find three clear heavy hitters of 20 000 users with fixed seeds.
"""

from __future__ import annotations

import math

import numpy as np

from ldpflow.core import heavy_hitters as hh

#: One small configuration per protocol key (16-bit values, k = 3).
SMALL = {
    "pem": dict(top_k=3, value_bits=16, epsilon=4.0, query_limit=2**8),
    "spm": dict(top_k=3, value_bits=16, epsilon=4.0),
    "mcm": dict(top_k=3, value_bits=16, epsilon=4.0),
    "treehist": dict(top_k=3, value_bits=16, epsilon=4.0, step_bits=8),
    "sfp": dict(top_k=3, value_bits=16, epsilon=4.0, fragment_bits=8, hash_bits=4),
}
#: Three heavy values and their shares; the other users hold uniform noise values.
HEAVY = np.array([0xBEEF, 0x0042, 0xF00D], dtype=np.uint64)
SHARES = (0.30, 0.20, 0.15)


def make(name: str, **overrides):
    return hh.make(name, **{**SMALL[name], **overrides})


def population(n: int, seed: int) -> np.ndarray:
    """``n`` values: the heavy ones in their shares, the rest uniform (seeded), shuffled."""
    rng = np.random.default_rng(seed)
    counts = [int(n * s) for s in SHARES]
    rest = n - sum(counts)
    values = np.concatenate([np.repeat(HEAVY, counts),
                             rng.integers(0, 2**16, size=rest, dtype=np.uint64)])
    return rng.permutation(values)


def shares_sum_to_epsilon(protocol) -> bool:
    shares = protocol.budget_shares
    return math.isclose(sum(c["epsilon"] for c in shares.values()), protocol.epsilon,
                        rel_tol=1e-12)


def ratios_are_tight(protocol) -> bool:
    """Each component's worst-case likelihood ratio is exactly ``e**share``."""
    return all(math.isclose(c["p"] / c["q"], math.exp(c["epsilon"]), rel_tol=1e-9)
               for c in protocol.budget_shares.values())
