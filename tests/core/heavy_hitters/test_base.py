"""``ldpflow.core.heavy_hitters.base``'s selection helpers against references: the
parent-weighted Bonferroni cut computed per run of parents equals the one over every
candidate."""

from __future__ import annotations

import numpy as np
import pytest


def _parent_weighted_sigmas_by_sorting(parents, valid, significance, ends=None):
    """The cut as computed before (np.unique over every candidate): the reference."""
    import math
    import statistics

    mask = np.asarray(valid, dtype=bool)
    out = np.full(mask.size, math.inf)
    if not mask.any():
        return out
    _, inverse = np.unique(parents, return_inverse=True)
    per_parent = np.bincount(inverse, weights=mask, minlength=inverse.max() + 1)
    shares = np.count_nonzero(per_parent)
    divisor = per_parent[inverse]
    if ends is not None:
        end = np.asarray(ends, dtype=bool) & mask
        split = np.bincount(inverse, weights=end, minlength=per_parent.size)[inverse] > 0
        split &= divisor > 1
        divisor = np.where(split, np.where(end, 2.0, 2.0 * (divisor - 1)), divisor)
    sizes, where = np.unique(divisor[mask], return_inverse=True)
    z = np.array([-statistics.NormalDist().inv_cdf(significance / (shares * float(v)))
                  for v in sizes])
    out[mask] = z[where]
    return out


@pytest.mark.parametrize("runs", [True, False])
@pytest.mark.parametrize("with_ends", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_parent_weighted_cut_equals_the_sorting_one(runs, with_ends, seed):
    """The cut computed per run of parents is bit for bit the one over every candidate:
    parents in runs (a pass's extensions) or shuffled, parents with no valid candidate,
    one valid candidate, an ending candidate."""
    from ldpflow.core.heavy_hitters.base import parent_weighted_sigmas

    rng = np.random.default_rng(seed)
    parents = np.repeat(rng.permutation(rng.integers(0, 2**40, size=30).astype(np.uint64)),
                        rng.integers(1, 9, size=30))
    if not runs:
        parents = rng.permutation(parents)
    valid = rng.random(parents.size) < [0.9, 0.5, 0.1, 0.0][seed]
    ends = rng.random(parents.size) < 0.3 if with_ends else None
    np.testing.assert_array_equal(
        parent_weighted_sigmas(parents, valid, 0.05, ends=ends),
        _parent_weighted_sigmas_by_sorting(parents, valid, 0.05, ends=ends))
