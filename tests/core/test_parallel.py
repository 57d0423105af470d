"""``ldpflow.core.parallel``: results in order, the pool's threads never fan out again,
at most ``workers`` items taken ahead, and no call still running when an error is raised
or the iterator is closed."""

from __future__ import annotations

import threading
import time

import pytest

from ldpflow.core import parallel


@pytest.fixture
def two_threads(monkeypatch):
    monkeypatch.setenv("LDPFLOW_THREADS", "2")


def test_map_ordered_gives_the_results_in_order_on_the_pool(two_threads):
    names = []

    def square(x):
        names.append(threading.current_thread().name)
        time.sleep(0.002 * (x % 3))  # ending out of order
        return x * x

    assert list(parallel.map_ordered(square, range(20), 2)) == [x * x for x in range(20)]
    assert all(name.startswith("ldpflow-count") for name in names)


def test_map_ordered_on_one_worker_runs_in_the_calling_thread():
    names = []
    got = list(parallel.map_ordered(lambda x: names.append(threading.current_thread().name)
                                    or -x, [1, 2, 3], 1))
    assert got == [-1, -2, -3]
    assert set(names) == {threading.current_thread().name}


def test_the_pools_threads_count_on_one_thread(two_threads):
    """Work on the pool does not fan out again: ``threads()`` is 1 there, and a nested
    ``map_items`` runs in the worker itself (no wait on a pool its caller has filled)."""
    assert parallel.threads() == 2

    def inner(x):
        seen = []
        parallel.map_items(lambda run: seen.append(threading.current_thread().name), list(range(8)),
                           1 << 30)
        return parallel.threads(), seen, threading.current_thread().name

    for threads, seen, name in parallel.map_ordered(inner, range(4), 2):
        assert threads == 1 and seen == [name]


def test_map_ordered_takes_items_no_further_ahead_than_its_workers(two_threads):
    taken, done = [], []

    def items():
        for x in range(10):
            taken.append(x)
            yield x

    def work(x):
        done.append(x)
        return x

    for x in parallel.map_ordered(work, items(), 2):
        assert len(taken) <= x + 2  # the one given back, and one more running
    assert sorted(done) == list(range(10))


def test_an_error_is_raised_after_every_call_started_has_ended(two_threads):
    ended = []

    def work(x):
        if x == 0:
            raise ValueError("the first fails")
        time.sleep(0.05)
        ended.append(x)
        return x

    with pytest.raises(ValueError, match="the first fails"):
        list(parallel.map_ordered(work, range(5), 2))
    assert ended == [1]  # the one running beside it ended first; none started after


def test_closing_early_waits_for_the_calls_running(two_threads):
    ended = []

    def work(x):
        time.sleep(0.05 * x)
        ended.append(x)
        return x

    results = parallel.map_ordered(work, range(6), 2)
    assert next(results) == 0
    results.close()
    assert ended == [0, 1]  # the second, running when closed, had ended before close returned
