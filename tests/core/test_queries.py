"""Tests of ``ldpflow.core.queries``: queries, Post-Pos clamping and error metrics."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ldpflow.core import queries as qs

TRUTH = np.array([0.1, 0.4, 0.0, 0.3, 0.2])
ESTIMATE = np.array([0.15, 0.35, -0.05, 0.3, 0.25])

vectors = arrays(
    np.float64, st.integers(1, 30), elements=st.floats(-1.0, 1.0, allow_nan=False, width=64)
)


# -- queries ---------------------------------------------------------------------------------
def test_full_domain_is_a_copy_and_clamps_for_post_pos():
    out = qs.full_domain(ESTIMATE)
    np.testing.assert_array_equal(out, ESTIMATE)
    assert out is not ESTIMATE
    np.testing.assert_array_equal(qs.full_domain(ESTIMATE, clamp=True), [0.15, 0.35, 0, 0.3, 0.25])


def test_top_k_values_are_in_rank_order_with_ties_to_the_smaller_value():
    np.testing.assert_array_equal(qs.top_k_values(TRUTH, 3), [1, 3, 4])
    np.testing.assert_array_equal(qs.top_k_values([0.2, 0.5, 0.2, 0.1], 3), [1, 0, 2])
    np.testing.assert_array_equal(qs.top_k_values(TRUTH, 5), [1, 3, 4, 0, 2])


def test_top_k_answers_at_the_true_top_values():
    np.testing.assert_array_equal(qs.top_k(ESTIMATE, TRUTH, 2), [0.35, 0.3])
    np.testing.assert_array_equal(qs.top_k([-0.1, 0.2], [0.6, 0.4], 1, clamp=True), [0.0])


@pytest.mark.parametrize("k", [0, 6, -1])
def test_top_k_rejects_k_outside_the_domain(k):
    with pytest.raises(ValueError, match=f"k must be in \\[1, 5\\] \\(the domain size\\), got {k}"):
        qs.top_k_values(TRUTH, k)


def test_top_k_rejects_non_integer_k():
    with pytest.raises(TypeError, match="k must be an integer, got float"):
        qs.top_k_values(TRUTH, 2.0)


def test_set_value_sums_over_each_subset_given_as_indices_or_mask():
    by_index = qs.set_value(ESTIMATE, [[0, 2], [1, 3]])
    by_mask = qs.set_value(ESTIMATE, np.array([[1, 0, 1, 0, 0], [0, 1, 0, 1, 0]], dtype=bool))
    np.testing.assert_allclose(by_index, [0.10, 0.65])
    np.testing.assert_array_equal(by_index, by_mask)
    np.testing.assert_allclose(qs.set_value(ESTIMATE, [2]), [-0.05])  # one subset, 1-d
    np.testing.assert_allclose(qs.set_value(ESTIMATE, [[2]], clamp=True), [0.0])


def test_set_value_validates_subsets():
    with pytest.raises(ValueError, match="subsets must hold values in \\[0, 5\\), got 5"):
        qs.set_value(ESTIMATE, [[0, 5]])
    with pytest.raises(ValueError, match="shape \\(count, 5\\)"):
        qs.set_value(ESTIMATE, np.ones((2, 4), dtype=bool))
    with pytest.raises(TypeError, match="boolean mask or integer indices"):
        qs.set_value(ESTIMATE, [[0.5]])


@settings(max_examples=50, deadline=None)
@given(vectors)
def test_set_value_of_the_whole_domain_is_the_sum(f):
    total = qs.set_value(f, np.ones(f.size, dtype=bool))
    assert total.shape == (1,)
    assert total[0] == pytest.approx(math.fsum(f), abs=4 * f.size * np.finfo(float).eps)


def test_random_subsets_have_the_size_and_are_reproducible():
    masks = qs.random_subsets(100, 10, 50, np.random.default_rng(1))
    assert masks.shape == (50, 100) and masks.dtype == np.bool_
    np.testing.assert_array_equal(masks.sum(axis=1), 10)
    np.testing.assert_array_equal(masks, qs.random_subsets(100, 10, 50, np.random.default_rng(1)))


@pytest.mark.statistical
def test_random_subsets_include_each_value_with_probability_size_over_d():
    d, size, count = 40, 7, 20_000
    masks = qs.random_subsets(d, size, count, np.random.default_rng(2))
    p = size / d
    standard_error = math.sqrt(p * (1 - p) / count)
    assert np.all(np.abs(masks.mean(axis=0) - p) <= 4.5 * standard_error)
    # Pairs: Pr[u and v both in] = size (size - 1) / (d (d - 1)) for a uniform subset.
    pair = size * (size - 1) / (d * (d - 1))
    both = (masks[:, 0] & masks[:, 1]).mean()
    assert abs(both - pair) <= 4.5 * math.sqrt(pair * (1 - pair) / count)


def test_random_subsets_validate():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="size must be in \\[1, 5\\] \\(the domain size\\), got 6"):
        qs.random_subsets(5, 6, 1, rng)
    with pytest.raises(ValueError, match="count must be >= 1, got 0"):
        qs.random_subsets(5, 2, 0, rng)
    with pytest.raises(TypeError, match="rng must be a numpy.random.Generator"):
        qs.random_subsets(5, 2, 1, 42)


# -- metrics ---------------------------------------------------------------------------------
def test_mse_variants_by_hand():
    assert qs.mse_full_domain(ESTIMATE, TRUTH) == pytest.approx(
        (0.05**2 + 0.05**2 + 0.05**2 + 0 + 0.05**2) / 5
    )
    # Post-Pos: the -0.05 answer becomes 0, exactly the truth.
    assert qs.mse_full_domain(ESTIMATE, TRUTH, clamp=True) == pytest.approx(3 * 0.05**2 / 5)
    assert qs.mse_top_k(ESTIMATE, TRUTH, 2) == pytest.approx(0.05**2 / 2)
    subsets = [[0, 2], [1, 4]]  # sums: est 0.10, 0.60; true 0.10, 0.60
    assert qs.mse_set_value(ESTIMATE, TRUTH, subsets) == pytest.approx(0.0, abs=1e-30)
    assert qs.mse_set_value(ESTIMATE, TRUTH, [[2, 3]]) == pytest.approx(0.05**2)
    assert qs.mse_set_value(ESTIMATE, TRUTH, [[2]], clamp=True) == 0.0


def test_l1_and_linf_errors():
    assert qs.l1_error(ESTIMATE, TRUTH) == pytest.approx(0.2)
    assert qs.linf_error(ESTIMATE, TRUTH) == pytest.approx(0.05)
    assert qs.l1_error(ESTIMATE, TRUTH, clamp=True) == pytest.approx(0.15)


def test_metrics_reject_mismatched_or_non_finite_vectors():
    with pytest.raises(ValueError, match="same length, got 5 and 4"):
        qs.mse_full_domain(ESTIMATE, TRUTH[:4])
    with pytest.raises(ValueError, match="estimate must be finite, got nan at position 1"):
        qs.mse_full_domain([0.1, float("nan")], [0.5, 0.5])


@settings(max_examples=50, deadline=None)
@given(vectors, st.data())
def test_metric_identities(f, data):
    truth = data.draw(arrays(np.float64, f.size, elements=st.floats(0.0, 1.0, width=64)))
    assert qs.mse_full_domain(truth, truth) == 0.0
    assert qs.linf_error(f, truth) ** 2 >= qs.mse_full_domain(f, truth) - 1e-15
    assert qs.l1_error(f, truth) >= qs.linf_error(f, truth)
    # With a non-negative truth, clamping answers at 0 never increases any error.
    assert qs.mse_full_domain(f, truth, clamp=True) <= qs.mse_full_domain(f, truth)
    k = data.draw(st.integers(1, f.size))
    assert qs.mse_top_k(f, truth, k) == pytest.approx(
        np.mean((f - truth)[qs.top_k_values(truth, k)] ** 2)
    )


# -- heavy hitters ---------------------------------------------------------------------------
def test_precision_recall_f1():
    assert qs.precision_recall_f1([1, 2, 3, 4], [1, 2, 5]) == pytest.approx((0.5, 2 / 3, 4 / 7))
    assert qs.precision_recall_f1([7], [1, 2]) == (0.0, 0.0, 0.0)
    assert qs.precision_recall_f1([], [1, 2]) == (0.0, 0.0, 0.0)
    assert qs.precision_recall_f1([2, 1, 1], [1, 2]) == (1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="relevant must hold at least one value"):
        qs.precision_recall_f1([1], [])


def test_ncr_weighs_rank_r_by_k_minus_r_plus_one():
    ranked = [10, 20, 30, 40]  # weights 4, 3, 2, 1; total 10
    assert qs.ncr([10, 20, 30, 40], ranked) == 1.0
    assert qs.ncr([20, 40, 99], ranked) == pytest.approx((3 + 1) / 10)
    assert qs.ncr([10], ranked) == pytest.approx(4 / 10)
    assert qs.ncr([], ranked) == 0.0
    with pytest.raises(ValueError, match="distinct values"):
        qs.ncr([1], [1, 1])


def test_top_k_scores_of_estimates():
    truth = np.array([0.4, 0.3, 0.2, 0.1])
    estimate = np.array([0.35, 0.1, 0.25, 0.3])  # estimated top-2: {0, 3}; true top-2: {0, 1}
    scores = qs.top_k_scores(estimate, truth, 2)
    assert scores == qs.TopKScores(precision=0.5, recall=0.5, f1=0.5, ncr=2 / 3)
    assert qs.top_k_scores(truth, truth, 3) == qs.TopKScores(1.0, 1.0, 1.0, 1.0)


# -- score_identified: the one scoring of heavy hitters --------------------------------------
def test_score_identified_of_strings_by_hand():
    truth = ["a", "b", "c", "d"]  # top-3: a b c, weights 3 2 1, total 6
    scores = qs.score_identified(["c", "a", "x", "a"], truth, 3)  # I = {a, c, x}
    assert scores == qs.TopKScores(precision=2 / 3, recall=2 / 3, f1=2 / 3, ncr=4 / 6)
    assert qs.score_identified(["b"], truth, 3) == qs.TopKScores(1.0, 1 / 3, 0.5, 2 / 6)
    assert qs.score_identified([b"a"], truth, 3) == qs.TopKScores(0.0, 0.0, 0.0, 0.0)
    assert qs.score_identified([b"a", b"b"], [b"b", b"a"], 1) == qs.TopKScores(
        0.5, 1.0, 2 / 3, 1.0)


def test_score_identified_collapses_repeated_truth_keeping_the_first_rank():
    # Distinct in rank order: 7, 3, 9, 1; the top-3 is 7, 3, 9 (weights 3, 2, 1).
    truth = [7, 3, 7, 3, 9, 1]
    assert qs.score_identified([9], truth, 3) == qs.TopKScores(1.0, 1 / 3, 0.5, 1 / 6)
    assert qs.score_identified([1], truth, 3) == qs.TopKScores(0.0, 0.0, 0.0, 0.0)
    assert qs.score_identified([3, 9], truth, 3).ncr == pytest.approx(3 / 6)


def test_score_identified_of_an_empty_set_and_of_k_beyond_the_truth():
    assert qs.score_identified([], ["a", "b"], 2) == qs.TopKScores(0.0, 0.0, 0.0, 0.0)
    assert qs.score_identified(np.array([], dtype=np.int64), [5], 1) == qs.TopKScores(
        0.0, 0.0, 0.0, 0.0)
    # k = 10 of 2 distinct true values: both are the top list, NCR over 2 * 3 / 2 = 3.
    assert qs.score_identified(["b"], ["a", "b", "a"], 10) == qs.TopKScores(
        1.0, 0.5, 2 / 3, 1 / 3)
    assert qs.score_identified(["a", "b", "z"], ["a", "b"], 10) == qs.TopKScores(
        2 / 3, 1.0, 0.8, 1.0)


def test_score_identified_ncr_weighs_rank_r_by_k_minus_r_plus_one():
    truth = [40, 30, 20, 10, 0]  # k = 4: weights 4, 3, 2, 1; total 10
    for found, weight in [([40], 4), ([30], 3), ([20], 2), ([10], 1), ([0], 0),
                          ([40, 10], 5), ([30, 20, 10], 6), ([10, 20, 30, 40], 10)]:
        assert qs.score_identified(found, truth, 4).ncr == pytest.approx(weight / 10)


def test_score_identified_compares_integers_of_every_kind_as_numbers():
    big = 2**64 - 1
    truth = np.array([big, 2**63, 5], dtype=np.uint64)
    assert qs.score_identified([big, 2**63 + 1, np.int64(5)], truth, 3) == qs.TopKScores(
        2 / 3, 2 / 3, 2 / 3, (3 + 1) / 6)
    assert qs.score_identified(np.array([5], dtype=np.int8), [5, 6], 2).ncr == pytest.approx(
        2 / 3)
    assert qs.score_identified([-1], [big], 1).recall == 0.0  # no wrap-around to 2**64 - 1
    assert qs.score_identified(np.array(["x", "y"]), ["y"], 1).precision == 0.5  # numpy str


def test_score_identified_takes_true_tops_list():
    values = np.array([5, 3, 3, 9, 9, 1], dtype=np.uint64)
    top = qs.true_top(values)
    assert top == [{"value": 3, "count": 2}, {"value": 9, "count": 2},
                   {"value": 1, "count": 1}, {"value": 5, "count": 1}]
    assert qs.true_top(values, 1) == [{"value": 3, "count": 2}]
    assert qs.true_top([2**63 + 1, 2**63 + 1, 4]) == [{"value": 2**63 + 1, "count": 2},
                                                     {"value": 4, "count": 1}]
    assert qs.score_identified([9, 5], top, 2) == qs.TopKScores(0.5, 0.5, 0.5, 1 / 3)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 12), max_size=8), st.lists(st.integers(0, 12), min_size=1,
                                                          max_size=10), st.integers(1, 12))
def test_score_identified_of_strings_agrees_with_the_integer_path(found, truth, k):
    ranked = list(dict.fromkeys(truth))[:k]
    by_int = qs.score_identified(found, truth, k)
    by_str = qs.score_identified([f"v{v}" for v in found], [f"v{v}" for v in truth], k)
    by_bytes = qs.score_identified([b"%d" % v for v in found], [b"%d" % v for v in truth], k)
    assert by_int == by_str == by_bytes
    p, r, f = qs.precision_recall_f1(np.array(found, dtype=np.int64), np.array(ranked))
    assert (by_int.precision, by_int.recall, by_int.f1) == (p, r, f)
    assert by_int.ncr == qs.ncr(np.array(found, dtype=np.int64), np.array(ranked))


def test_precision_recall_f1_and_ncr_take_strings_too():
    assert qs.precision_recall_f1(["a", "b", "c", "d"], ["a", "b", "e"]) == pytest.approx(
        (0.5, 2 / 3, 4 / 7))
    assert qs.ncr(["b", "d", "z"], ["a", "b", "c", "d"]) == pytest.approx((3 + 1) / 10)


def test_score_identified_validates():
    with pytest.raises(ValueError, match="k must be >= 1, got 0"):
        qs.score_identified([1], [1], 0)
    with pytest.raises(TypeError, match="k must be an integer, got float"):
        qs.score_identified([1], [1], 2.0)
    with pytest.raises(ValueError, match="truth must hold at least one value, got none"):
        qs.score_identified([1], [], 3)
    with pytest.raises(TypeError, match="identified must hold integers, strings or bytes, "
                                        "got float 1.0 at position 1"):
        qs.score_identified([1, 1.0], [1], 1)
    with pytest.raises(TypeError, match="truth must hold integers, strings or bytes, got bool"):
        qs.score_identified([1], [True], 1)
    with pytest.raises(TypeError, match="identified must hold hashable values, got list"):
        qs.score_identified([[1]], [1], 1)
    with pytest.raises(TypeError, match="identified must be a collection of values, got one str"):
        qs.score_identified("ab", ["a"], 1)
    with pytest.raises(ValueError, match="truth entry 0 has no 'value'"):
        qs.score_identified([1], [{"count": 3}], 1)
    with pytest.raises(TypeError, match="identified must hold integers, strings or bytes"):
        qs.precision_recall_f1(np.array([0.5]), [1])
