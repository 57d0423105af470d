"""The job plan on Dask distributed: collections are ``dask.bag`` bags.

``DaskBackend(scheduler=ADDRESS)`` connects to a running scheduler (``--dask_scheduler``;
its workers must have ldpflow installed, or it is sent to them as a zip with
``Client.upload_file``: ``deploy/dask``); without one it starts a ``LocalCluster`` of
``workers`` worker processes, one thread each (the counting is numpy: processes, not
threads, use the cores). A shuffle is one split task per partition, a pick of each part
and one group task per output partition (two per worker); merges are ``foldby``.

The worker processes it starts get glibc's allocator settings of :data:`WORKER_MALLOC`
instead of Dask's default ``MALLOC_TRIM_THRESHOLD_=65536``: that setting also fixes the
``mmap`` threshold at 128 KiB, so every array a read makes (a column, a hash, a count) is a
fresh ``mmap`` whose pages fault in and are handed back at once, which doubled the CPU time
of a range read (0.17 s -> 0.36 s for 1.25 million Parquet reports; ``docs/engines.md``).
Each worker counts in one thread (``LDPFLOW_THREADS=1``, :mod:`ldpflow.core.parallel`;
unless the driver's environment sets it): a worker is one core, as its one Dask thread
says, and the workers are the parallelism; with the counting's own threads on top, two
workers ran four threads on two cores. Workers of a cluster started elsewhere
(``--dask_scheduler``) take their own environment: ``deploy/dask`` sets the same there.
"""

from __future__ import annotations

import logging
import operator
import os
from typing import Any

from ldpflow.plan.backend import Backend

__all__ = ["DaskBackend", "WORKER_MALLOC", "worker_environment"]

_LOGGER = logging.getLogger(__name__)

#: The allocator settings of the worker processes a ``LocalCluster`` starts (Dask's
#: ``distributed.nanny.pre-spawn-environ``, set before each worker process exists): freed
#: blocks under 32 MiB (glibc's largest mmap threshold) stay in the heap for the next
#: range, and the heap gives memory back once 128 MiB are free at its top.
WORKER_MALLOC = {"MALLOC_TRIM_THRESHOLD_": str(128 << 20),
                 "MALLOC_MMAP_THRESHOLD_": str(32 << 20)}


def worker_environment() -> dict[str, str]:
    """The environment a ``LocalCluster``'s worker processes start with: :data:`WORKER_MALLOC`
    and one counting thread each (``LDPFLOW_THREADS``, unless set here)."""
    return {**WORKER_MALLOC, "LDPFLOW_THREADS": os.environ.get("LDPFLOW_THREADS", "1")}


def _fold(acc, item, add):
    return item[1] if acc is None else add(acc, item[1])


def _fold_combine(a, b, add):
    return b if a is None else a if b is None else add(a, b)


def _first(pair):
    return pair[0]


def _split_by_key(pairs, parts: int) -> list[list]:
    """One partition's ``(int key, value)`` pairs -> ``parts`` lists, by ``key % parts``."""
    out: list[list] = [[] for _ in range(parts)]
    for pair in pairs:
        out[pair[0] % parts].append(pair)
    return out


def _group_parts(lists) -> list:
    """One output partition's pairs (from every input) -> ``(key, [values])`` per key."""
    groups: dict = {}
    for pairs in lists:
        for key, value in pairs:
            groups.setdefault(key, []).append(value)
    return list(groups.items())


def _peak_rss() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class DaskBackend(Backend):
    """The plan's operations as ``dask.bag`` operations on a distributed ``Client``."""

    name = "dask"

    def __init__(self, scheduler: str | None = None, workers: int | None = None,
                 ship_package: bool | None = None, client=None):
        from distributed import Client, LocalCluster

        self._cluster = None
        self._own_client = client is None
        if client is not None:
            self.client = client
        elif scheduler:
            self.client = Client(scheduler)
        else:
            import dask

            logging.getLogger("distributed").setLevel(logging.WARNING)
            environ = worker_environment()
            # The nanny sets its pre-spawn environment in this process's os.environ too:
            # put back what was here, or this process would count in one thread after.
            kept = {name: os.environ.get(name) for name in environ}
            try:
                with dask.config.set({f"distributed.nanny.pre-spawn-environ.{name}": value
                                      for name, value in environ.items()}):
                    self._cluster = LocalCluster(n_workers=workers, threads_per_worker=1,
                                                 processes=True, dashboard_address=None)
            finally:
                for name, value in kept.items():
                    if value is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = value
            self.client = Client(self._cluster)
        if ship_package if ship_package is not None else bool(scheduler):
            from ldpflow.engines.package import package_zip

            self.client.upload_file(package_zip())
        self._workers = len(self.client.scheduler_info()["workers"])
        _LOGGER.info("dask: %d workers at %s", self._workers, self.client.scheduler.address)

    @property
    def description(self) -> str:
        return f"dask ({self._workers} workers)"

    @property
    def parallelism(self) -> int:
        return self._workers

    def parallelize(self, items: list):
        import dask.bag as db

        return db.from_sequence(list(items), npartitions=max(len(items), 1))

    def flat_map(self, collection, fn):
        return collection.map(fn).flatten()

    def map(self, collection, fn):
        return collection.map(fn)

    def group_by_key(self, collection):
        # One split task per input partition, a pick of each of its parts and one group
        # task per output partition: N + N * P + P tasks (84 for 16 ranges on 2 workers),
        # where dask.bag's groupby(shuffle="tasks") made 300 to 600 for the same shuffle and
        # the scheduler's time per task is driver time between the plan's steps.
        from dask.bag import Bag
        from dask.base import tokenize
        from dask.highlevelgraph import HighLevelGraph

        parts = max(self._workers * 2, 1)
        token = tokenize(collection.name, parts)
        split, pick, group = (f"ldpflow-{what}-{token}" for what in ("split", "pick", "group"))
        inputs = range(collection.npartitions)
        dsk: dict = {(split, i): (_split_by_key, (collection.name, i), parts) for i in inputs}
        dsk.update({(pick, i, j): (operator.getitem, (split, i), j)
                    for i in inputs for j in range(parts)})
        dsk.update({(group, j): (_group_parts, [(pick, i, j) for i in inputs])
                    for j in range(parts)})
        graph = HighLevelGraph.from_collections(group, dsk, dependencies=[collection])
        return Bag(graph, group, parts)

    def combine_per_key(self, collection, add):
        import functools

        return collection.foldby(_first, functools.partial(_fold, add=add), None,
                                 functools.partial(_fold_combine, add=add), None)

    def union(self, first, second):
        import dask.bag as db

        # A real task per partition, not db.concat's aliases of the inputs' keys: a persisted
        # alias lost its partitions once the inputs were released (counts varied by run).
        return db.concat([first, second]).map_partitions(list)

    def collect(self, collection) -> list:
        return list(collection.compute())

    def collect_all(self, *collections) -> tuple[list, ...]:
        import dask

        return tuple(list(found) for found in dask.compute(*collections))

    def persist(self, collection):
        return collection.persist()

    def peak_memory(self) -> dict[str, Any]:
        """Each worker process's peak resident memory, in bytes."""
        return self.client.run(_peak_rss)

    def close(self) -> None:
        if self._own_client:
            self.client.close()
        if self._cluster is not None:
            self._cluster.close()
