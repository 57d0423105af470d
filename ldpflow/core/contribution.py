"""Contribution bounding: at most ``cap`` reports per user, chosen deterministically.

Local differential privacy bounds what one report reveals; a user who sends ``r`` reports
made with budgets ``epsilon_1 .. epsilon_r`` has spent ``epsilon_1 + ... + epsilon_r``
(sequential composition). A server that caps every user at ``cap`` reports bounds that
spending at the sum of the user's ``cap`` kept reports' budgets, whatever a client sends.

Which reports are kept does not depend on the order they arrived in: a user's reports are
ranked by event time, then by report-id hash (``ldpflow.core.dedup``), and the first
``cap`` are kept. Users are told apart by the 64-bit hash of their user id (the same hash);
two users collide with probability about ``u**2 / 2**65`` for ``u`` users, and would then
share one cap.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ldpflow.core import validation
from ldpflow.core.dedup import string_hashes, unpacked_ids

__all__ = ["capped_rows", "epsilon_per_user", "tie_breaks"]


def capped_rows(user_hashes: npt.ArrayLike, event_times: npt.ArrayLike,
                id_hashes: npt.ArrayLike, cap: int) -> npt.NDArray[np.bool_]:
    """Which rows to keep when every user may contribute at most ``cap`` reports.

    Parameters
    ----------
    user_hashes, id_hashes : array_like of uint64, shape (n,)
        Hashes of each report's user id and report id.
    event_times : array_like of int64, shape (n,)
        Each report's event time.
    cap : int
        Reports kept per user (>= 1).

    Returns
    -------
    ndarray of bool, shape (n,)
        The kept rows: each user's ``cap`` earliest reports (ties: smaller id hash first).
    """
    cap = validation.check_limit(cap, name="cap")
    users = np.asarray(user_hashes, dtype=np.uint64)
    times = np.asarray(event_times, dtype=np.int64)
    ids = np.asarray(id_hashes, dtype=np.uint64)
    if not users.shape == times.shape == ids.shape or users.ndim != 1:
        raise ValueError("user_hashes, event_times and id_hashes must be 1-d arrays of one "
                         f"length, got shapes {users.shape}, {times.shape}, {ids.shape}")
    n = users.size
    keep = np.ones(n, dtype=bool)
    if n <= cap:
        return keep
    order = np.lexsort((ids, times, users))  # the last key is the primary one
    sorted_users = users[order]
    starts = np.ones(n, dtype=bool)
    starts[1:] = sorted_users[1:] != sorted_users[:-1]
    first = np.flatnonzero(starts)
    rank = np.arange(n) - np.repeat(first, np.diff(np.append(first, n)))
    keep[order[rank >= cap]] = False
    return keep


def epsilon_per_user(user_hashes: npt.ArrayLike, epsilons: npt.ArrayLike
                     ) -> tuple[int, float]:
    """The number of distinct users and the largest total budget one of them spent.

    Parameters
    ----------
    user_hashes : array_like of uint64, shape (n,)
    epsilons : array_like of float, shape (n,)
        Each report's epsilon.

    Returns
    -------
    users : int
    largest : float
        ``max`` over users of the sum of their reports' epsilons (0.0 without reports).
    """
    users = np.asarray(user_hashes, dtype=np.uint64)
    eps = np.asarray(epsilons, dtype=np.float64)
    if users.shape != eps.shape:
        raise ValueError(f"user_hashes and epsilons must have one shape, got {users.shape} "
                         f"and {eps.shape}")
    if users.size == 0:
        return 0, 0.0
    distinct, inverse = np.unique(users, return_inverse=True)
    totals = np.bincount(inverse.reshape(-1), weights=eps, minlength=distinct.size)
    return int(distinct.size), float(totals.max())


def tie_breaks(report_ids: np.ndarray) -> np.ndarray:
    """The cap's tie-break of equal event times: the public (unkeyed) hash of each full
    report id (``report_ids``: :func:`ldpflow.core.dedup.packed_ids`), the same in every run
    and on every engine (the keyed id hashes change with each run's key)."""
    return string_hashes(*unpacked_ids(report_ids))
