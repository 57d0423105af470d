"""The Dask backend's operations keep what the plan relies on: a persisted collection holds
its elements for every later use, also a union of collections derived from one released."""

from __future__ import annotations

import gc

import pytest

pytestmark = [pytest.mark.pipeline]


def _pieces(x):
    return [(x % 3, x), (x % 3, -x)]


def _negative(pair):
    return [pair] if pair[1] < 0 else []


def _positive(pair):
    return [pair] if pair[1] >= 0 else []


@pytest.fixture(scope="module")
def backend():
    pytest.importorskip("distributed", reason="needs the dask extra: pip install 'ldpflow[dask]'")
    from ldpflow.engines.dask_backend import DaskBackend

    with DaskBackend(workers=2) as backend:
        yield backend


def test_a_persisted_union_keeps_its_elements_after_its_inputs_are_released(backend):
    def build():
        source = backend.persist(backend.flat_map(backend.parallelize(list(range(40))),
                                                  _pieces))
        grouped = backend.flat_map(backend.group_by_key(backend.flat_map(source, _negative)),
                                   _flatten_group)
        return backend.persist(backend.union(backend.flat_map(source, _positive), grouped))

    union = build()
    gc.collect()
    expected = sorted(_pieces(x)[0] for x in range(40)) + sorted(_pieces(x)[1] for x in range(40))
    for _ in range(3):  # every use sees every element
        assert sorted(backend.collect(union)) == sorted(expected)


def _flatten_group(group):
    return [(group[0], value) for value in group[1]]


def test_worker_environment_sets_the_allocator_and_one_counting_thread(backend):
    import os

    from ldpflow.engines.dask_backend import WORKER_MALLOC

    def read():
        return {name: os.environ.get(name) for name in (*WORKER_MALLOC, "LDPFLOW_THREADS")}

    for found in backend.client.run(read).values():
        assert found == {**WORKER_MALLOC,
                         "LDPFLOW_THREADS": os.environ.get("LDPFLOW_THREADS", "1")}


def test_starting_a_local_cluster_leaves_this_process_environment_as_it_was(monkeypatch):
    """Dask's nanny writes the workers' pre-spawn environment into the parent's os.environ:
    the backend puts it back (else the parent counts in one thread after a Dask job)."""
    pytest.importorskip("distributed", reason="needs the dask extra: pip install 'ldpflow[dask]'")
    import os

    from ldpflow.engines.dask_backend import DaskBackend, worker_environment

    monkeypatch.delenv("LDPFLOW_THREADS", raising=False)
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "4096")
    before = {name: os.environ.get(name) for name in worker_environment()}
    with DaskBackend(workers=1) as backend:
        assert {name: os.environ.get(name) for name in worker_environment()} == before
        found = next(iter(backend.client.run(lambda: os.environ.get("LDPFLOW_THREADS")).values()))
        assert found == "1"
    assert before["LDPFLOW_THREADS"] is None and before["MALLOC_MMAP_THRESHOLD_"] == "4096"
