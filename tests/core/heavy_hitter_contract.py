"""The contract every heavy-hitter protocol follows, as reusable checks.

``tests/core/test_heavy_hitter_protocols.py`` runs them over every key of
:data:`ldpflow.core.heavy_hitters.PROTOCOLS` (the pattern of the oracles' contract suite).
Each protocol gets one small configuration (:data:`SMALL`) in which its estimates are
exact enough to find three clear heavy hitters of 20 000 users with fixed seeds, and
:func:`run_passes` runs the server's passes by hand, each on shards merged in a random
order, as a pipeline does.
"""

from __future__ import annotations

import math
import pickle

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
#: The server options of each protocol, in the order they are declared.
SERVER_OPTIONS = {
    "pem": ("survivors", "threshold_sigma", "threshold", "refine_sigma", "significance"),
    "spm": (),
    "mcm": (),
    "treehist": ("survivors", "threshold_sigma", "threshold"),
    "sfp": ("survivors", "threshold_sigma", "threshold"),
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


def reports(name: str, n: int, values_seed: int, rng_seed: int, **overrides):
    """The protocol of :data:`SMALL` (with ``overrides``) and its seeded reports of
    :func:`population`."""
    protocol = make(name, **overrides)
    return protocol, protocol.perturb(population(n, values_seed), np.arange(n),
                                      np.random.default_rng(rng_seed))


def no_beef(codes, bits):
    """A ``valid`` rule that prunes the heaviest value (and its prefixes)."""
    return codes != (HEAVY[0] >> np.uint64(16 - bits))


def split_pass(protocol, batch, pass_index):
    """The reports of ``batch`` that pass ``pass_index`` reads."""
    wanted = np.asarray(protocol.pass_groups(pass_index), dtype=np.int64)
    return batch[np.flatnonzero(np.isin(batch.columns["group"], wanted))]


def run_passes(protocol, batch, rng, *, shards=3, top_k=None, valid=None, **options):
    """Every pass by hand: the pass's reports split into ``shards`` random shards, each
    accumulated alone, merged in a random order; counts and states go through pickle.

    Returns the result and the final state.
    """
    state = protocol.initial_state()
    for pass_index in range(protocol.num_passes):
        part = split_pass(protocol, batch, pass_index)
        label = rng.integers(0, shards, size=len(part))
        pieces = [protocol.accumulate(pass_index, part[np.flatnonzero(label == s)], state)
                  for s in range(shards)]
        order = rng.permutation(shards)
        counts = pieces[order[0]]
        for s in order[1:]:
            counts = counts.merge(pickle.loads(pickle.dumps(pieces[s])))
        state = protocol.advance(pass_index, counts, state, valid=valid, **options)
        state = pickle.loads(pickle.dumps(state))
    return protocol.result(state, top_k=top_k), state


def same_data(a, b) -> bool:
    """Whether two state data (dicts, tuples, arrays, dataclasses) are exactly equal."""
    if isinstance(a, dict):
        return (isinstance(b, dict) and a.keys() == b.keys()
                and all(same_data(a[k], b[k]) for k in a))
    if isinstance(a, (tuple, list)):
        return (type(a) is type(b) and len(a) == len(b)
                and all(same_data(x, y) for x, y in zip(a, b, strict=True)))
    if isinstance(a, np.ndarray):
        return (isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
                and np.array_equal(a, b))
    if hasattr(a, "__dataclass_fields__"):
        return type(a) is type(b) and all(
            same_data(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)
    return type(a) is type(b) and (a == b or (a != a and b != b))


def same_state(a, b) -> bool:
    """Whether two :class:`~ldpflow.core.heavy_hitters.PassState` are exactly equal."""
    return (a.key == b.key and a.pass_index == b.pass_index and a.group_sizes == b.group_sizes
            and same_data(a.figures, b.figures) and same_data(dict(a.data), dict(b.data)))
