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
    assert result.pass_survivors[:2] == (2, 2)
    # Their frequencies come from the final group alone: within 5 sigma of the truth.
    final = result.group_sizes[-1]
    truth = np.array([0.3, 0.2])
    sigma = np.sqrt(tree.variance(final, truth))
    assert np.all(np.abs(result.frequencies - truth) < 5 * sigma)
    wide = tree.identify(reports, threshold_sigma=None, survivors=3)
    assert max(wide.pass_survivors[:-1]) <= 3


def _tree_reports():
    tree = hh.TreeHist(top_k=4, value_bits=16, epsilon=4.0)
    rng = np.random.default_rng(3)
    values = np.concatenate([np.repeat(np.array([0x1234, 0xABCD], dtype=np.uint64),
                                       [6000, 4000]),
                             rng.integers(0, 2**16, size=10_000, dtype=np.uint64)])
    return tree, tree.perturb(values, np.arange(values.size), rng)


def test_the_passes_are_the_levels_then_the_final_group():
    tree, reports = _tree_reports()
    assert tree.num_passes == 3 and tree.server_options == {
        "survivors": None, "threshold_sigma": 3.0, "threshold": None}
    assert [tree.pass_groups(s) for s in range(3)] == [(0,), (1,), (2,)]
    assert [tree.pass_label(s) for s in range(3)] == [
        "prefixes of 8 bits", "prefixes of 16 bits", "final estimate"]
    result = tree.identify(reports, threshold_sigma=8.0)
    assert result.pass_candidates == (256, 2 * 256, 2)
    assert result.pass_survivors == (2, 2, 2)
    # survivors caps every level (default 4 k = 16); threshold is a frequency cut.
    assert tree.identify(reports, threshold_sigma=None).pass_survivors[:2] == (16, 16)
    cut = tree.identify(reports, threshold_sigma=None, threshold=0.25)
    assert cut.values.tolist() == [0x1234] and cut.pass_survivors == (1, 1, 1)
    with pytest.raises(ValueError, match="survivors must be >= 1, got 0"):
        tree.identify(reports, survivors=0)


@pytest.mark.parametrize("arguments, candidates", [
    (dict(threshold_sigma=1e6), (256, 0, 0)),  # nothing passes level 0
    (dict(valid=lambda codes, bits: np.full(codes.shape, bits < 16), threshold_sigma=None),
     (256, 16 * 256, 0)),  # level 0 keeps 4 k = 16 nodes, the codec none of their children
])
def test_an_empty_frontier_leaves_the_later_passes_nothing_to_count(arguments, candidates):
    tree, reports = _tree_reports()
    result = tree.identify(reports, **arguments)
    assert result.values.size == 0 and result.frequencies.size == 0
    assert result.values.dtype == np.uint64
    assert result.pass_candidates == candidates
    assert result.pass_survivors == (candidates[1] // 256, 0, 0)
    assert result.population == len(reports) == sum(result.group_sizes)
    state = tree.initial_state()
    for pass_index in range(tree.num_passes):
        part = reports[np.flatnonzero(reports.columns["group"] == pass_index)]
        counts = tree.accumulate(pass_index, part, state)
        state = tree.advance(pass_index, counts, state, **arguments)
        figures = state.figures[-1]
        assert figures.reports == len(part) and figures.candidates == candidates[pass_index]
        assert figures.sigma == np.sqrt(tree.variance(len(part)))
    assert state.data["values"].size == 0
