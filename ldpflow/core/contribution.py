"""Contribution bounding: at most ``cap`` reports per user, chosen deterministically.

Local differential privacy bounds what one report reveals; a user who sends ``r`` reports
made with budgets ``epsilon_1 .. epsilon_r`` has spent ``epsilon_1 + ... + epsilon_r``
(sequential composition). A server that caps every user at ``cap`` reports bounds that
spending at the sum of the user's ``cap`` kept reports' budgets, whatever a client sends.

Which reports are kept does not depend on the order they arrived in: a user's reports are
ranked by event time, then by report-id hash (``ldpflow.core.dedup``), and the first
``cap`` are kept; copies of one report (without deduplication) that tie on all three are
ranked by their payloads (``ties``), so even then the choice is order-free. Users are
told apart by the 64-bit hash of their user id (the same hash);
two users collide with probability about ``u**2 / 2**65`` for ``u`` users, and would then
share one cap.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from ldpflow.core import validation
from ldpflow.core.dedup import string_hashes, unpacked_ids

__all__ = ["capped_rows", "epsilon_per_user", "payload_ranks", "tie_breaks"]


def capped_rows(user_hashes: npt.ArrayLike, event_times: npt.ArrayLike,
                id_hashes: npt.ArrayLike, cap: int,
                ties: Callable[[], Sequence[np.ndarray]] | None = None
                ) -> npt.NDArray[np.bool_]:
    """Which rows to keep when every user may contribute at most ``cap`` reports.

    Parameters
    ----------
    user_hashes, id_hashes : array_like of uint64, shape (n,)
        Hashes of each report's user id and report id.
    event_times : array_like of int64, shape (n,)
        Each report's event time.
    cap : int
        Reports kept per user (>= 1).
    ties : callable, optional
        Called only when two rows share user, event time and id hash (copies of one
        report, which deduplication would have removed): returns further sort keys, 1-d
        arrays of length n, most significant first (e.g. :func:`payload_ranks`), that
        rank such rows. Without it such copies keep their input order.

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
    if ties is not None:
        a, b = order[1:], order[:-1]
        if ((users[a] == users[b]) & (times[a] == times[b]) & (ids[a] == ids[b])).any():
            extra = [np.asarray(k) for k in ties()]
            order = np.lexsort((*extra[::-1], ids, times, users))
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


def payload_ranks(columns: Sequence[np.ndarray]) -> npt.NDArray[np.int64]:
    """Each row's rank (0, 1, ...; equal rows equal ranks) in the order of its payload:
    ``columns`` (1-d, or 2-d with one row per report) compared in order, each row by row,
    the order :func:`ldpflow.core.dedup.first_copies` keeps copies in."""
    parts: list[np.ndarray] = []
    for column in columns:
        column = np.asarray(column)
        parts.extend([column] if column.ndim == 1 else
                     [column[:, j] for j in range(column.shape[1])])
    n = parts[0].shape[0] if parts else 0
    ranks = np.zeros(n, dtype=np.int64)
    if n < 2 or not parts:
        return ranks
    order = np.lexsort(parts[::-1])
    new = np.zeros(n, dtype=bool)
    for part in parts:
        ordered = part[order]
        new[1:] |= ordered[1:] != ordered[:-1]
    ranks[order] = np.cumsum(new)
    return ranks
