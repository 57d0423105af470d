"""TreeHist: levels and groups, the threshold rule and the separate final estimate."""

from __future__ import annotations

import numpy as np
import pytest

from ldpflow.core import heavy_hitters as hh


def test_levels_and_groups_follow_the_step():
    tree = hh.TreeHist(top_k=4, value_bits=20, epsilon=2.0, step_bits=8)
    assert tree.levels == (8, 16, 20) and tree.num_groups == 4
    assert tree.group_bits == (8, 16, 20, 20)
    assert tree.hash_range == hh.cost_aware_hash_range(2.0)
    with pytest.raises(ValueError, match=r"step_bits must be <= min\(value_bits, 20\) = 8"):
        hh.TreeHist(top_k=4, value_bits=8, epsilon=2.0, step_bits=9)


def test_threshold_keeps_only_nodes_above_it_and_the_final_group_estimates():
    tree = hh.TreeHist(top_k=4, value_bits=16, epsilon=4.0)
    rng = np.random.default_rng(3)
    values = np.concatenate([np.repeat(np.array([0x1234, 0xABCD], dtype=np.uint64),
                                       [6000, 4000]),
                             rng.integers(0, 2**16, size=10_000, dtype=np.uint64)])
    reports = tree.perturb(values, np.arange(values.size), rng)
    result = tree.identify(reports, threshold_sigma=8.0)
    # Only the two heavy values pass a high threshold at both levels.
    assert sorted(result.values.tolist()) == [0x1234, 0xABCD]
    assert result.stage_survivors[:2] == (2, 2)
    # Their frequencies come from the final group alone: within 5 sigma of the truth.
    final = result.group_sizes[-1]
    truth = np.array([0.3, 0.2])
    sigma = np.sqrt(tree.variance(final, truth))
    assert np.all(np.abs(result.frequencies - truth) < 5 * sigma)
    wide = tree.identify(reports, threshold_sigma=None, max_frontier=3)
    assert max(wide.stage_survivors[:-1]) <= 3
