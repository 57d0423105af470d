"""Contribution caps: each user's earliest ``cap`` reports, whatever the arrival order."""

from __future__ import annotations

import numpy as np
import pytest

from ldpflow.core.contribution import capped_rows, epsilon_per_user


def reference_keep(users, times, ids, cap):
    """Row by row: sort each user's reports by (time, id hash), keep the first ``cap``."""
    keep = np.zeros(len(users), dtype=bool)
    by_user: dict[int, list[int]] = {}
    for row, user in enumerate(users.tolist()):
        by_user.setdefault(user, []).append(row)
    for rows in by_user.values():
        rows.sort(key=lambda r: (int(times[r]), int(ids[r])))
        keep[rows[:cap]] = True
    return keep


@pytest.mark.parametrize("cap", [1, 2, 5])
def test_capped_rows_equals_the_row_by_row_rule(cap):
    rng = np.random.default_rng(3)
    n = 5000
    users = rng.integers(0, 700, n).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    times = rng.integers(0, 50, n)  # many ties in time: the id hash decides
    ids = rng.integers(0, 2**63, n).astype(np.uint64)
    keep = capped_rows(users, times, ids, cap)
    assert np.array_equal(keep, reference_keep(users, times, ids, cap))
    _, per_user = np.unique(users[keep], return_counts=True)
    assert per_user.max() <= cap


def test_the_choice_does_not_depend_on_arrival_order():
    rng = np.random.default_rng(4)
    n = 2000
    users = rng.integers(0, 100, n).astype(np.uint64)
    times = rng.integers(0, 10, n)
    ids = rng.permutation(n).astype(np.uint64)
    keep = capped_rows(users, times, ids, 3)
    order = rng.permutation(n)
    again = capped_rows(users[order], times[order], ids[order], 3)
    assert np.array_equal(again, keep[order])


def test_nothing_is_dropped_under_the_cap():
    users = np.array([1, 2, 3, 1], dtype=np.uint64)
    keep = capped_rows(users, np.zeros(4, dtype=np.int64), np.arange(4, dtype=np.uint64), 2)
    assert keep.all()
    keep = capped_rows(users, np.array([5, 0, 0, 1]), np.arange(4, dtype=np.uint64), 1)
    assert keep.tolist() == [False, True, True, True]  # user 1's earlier report wins


@pytest.mark.parametrize("cap", [0, -1, 1.5, True, None])
def test_a_bad_cap_is_refused(cap):
    with pytest.raises(ValueError, match="cap must be a positive integer"):
        capped_rows(np.zeros(1, np.uint64), np.zeros(1, np.int64), np.zeros(1, np.uint64), cap)


def test_mismatched_lengths_are_refused():
    with pytest.raises(ValueError, match="one length"):
        capped_rows(np.zeros(2, np.uint64), np.zeros(1, np.int64), np.zeros(2, np.uint64), 1)


def test_epsilon_per_user_sums_each_users_budgets():
    users = np.array([7, 7, 8, 9, 9, 9], dtype=np.uint64)
    eps = np.array([1.0, 0.5, 4.0, 1.0, 1.0, 1.5])
    assert epsilon_per_user(users, eps) == (3, 4.0)
    assert epsilon_per_user(users[[0, 1, 3, 4, 5]], eps[[0, 1, 3, 4, 5]]) == (2, 3.5)
    assert epsilon_per_user(np.zeros(0, np.uint64), np.zeros(0)) == (0, 0.0)


def test_payload_ranks_order_rows_by_their_columns_in_order():
    from ldpflow.core.contribution import payload_ranks

    first = np.array([2, 1, 2, 1, 0])
    second = np.array([[0, 1], [5, 0], [0, 0], [5, 0], [9, 9]])
    assert payload_ranks([first, second]).tolist() == [3, 1, 2, 1, 0]
    assert payload_ranks([]).tolist() == []


def test_copies_that_tie_on_user_time_and_id_are_ranked_by_their_ties_whatever_the_order():
    users = np.array([7, 7, 7], dtype=np.uint64)
    times = np.array([1, 1, 1])
    ids = np.array([3, 3, 3], dtype=np.uint64)
    payload = np.array([5, 4, 6])
    kept = {tuple(payload[order][capped_rows(users, times, ids, 1,
                                             ties=lambda o=order: [payload[o]])])
            for order in ([0, 1, 2], [2, 1, 0], [1, 2, 0])}
    assert kept == {(4,)}
    calls = []
    capped_rows(np.arange(3, dtype=np.uint64), times, ids, 1, ties=lambda: calls.append(1))
    assert calls == []  # no ties: never asked
