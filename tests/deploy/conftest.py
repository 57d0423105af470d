"""Fixtures of the deployment tests: one dask.distributed LocalCluster per session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def dask_cluster():
    """A LocalCluster of 2 single-threaded worker processes: the tests' 'remote' engine."""
    from dask.distributed import LocalCluster  # apache-beam[dask]: part of ./dev's install

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as cluster:
        yield cluster
