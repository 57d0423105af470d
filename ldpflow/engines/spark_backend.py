"""The job plan on Spark: collections are PySpark RDDs.

``SparkBackend(master)`` gets (or creates) the ``SparkContext`` of ``--spark_master``
(``local[N]``, ``local-cluster[N,CORES,MB]``, ``spark://HOST:7077``, ``yarn``, ...;
default: the master ``spark-submit`` was given, else ``local[*]``) and
sends the ldpflow package to the executors as a zip (``SparkContext.addPyFile``), so they
need only its dependencies (numpy, scipy, pyarrow, fastavro, polars: ``ldpflow[spark]``;
on a local master the executors run the driver's interpreter unless ``PYSPARK_PYTHON``
says otherwise);
with ldpflow installed there, pass ``ship_package=False``. Maps are ``flatMap`` over one
partition a range, shuffles ``groupByKey``, merges ``reduceByKey`` (combined map-side).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ldpflow.plan.backend import Backend

__all__ = ["SparkBackend"]


def _peak_rss(_) -> list[int]:
    import os
    import resource

    return [(os.getpid(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)]


class SparkBackend(Backend):
    """The plan's operations as RDD operations of one ``SparkContext``."""

    name = "spark"

    def __init__(self, master: str | None = None, ship_package: bool = True, context=None,
                 conf: dict[str, str] | None = None):
        from pyspark import SparkConf, SparkContext

        self._own = context is None
        if context is None:
            SparkContext._ensure_initialized()  # the JVM first: its settings (spark-submit's)
            settings = SparkConf().setAppName("ldpflow")  # load with them
            settings = settings.set("spark.ui.showConsoleProgress", "false")
            if master is not None or not settings.contains("spark.master"):
                settings = settings.setMaster(master or "local[*]")
            master = settings.get("spark.master")
            if master.startswith("local"):
                # Executors on this machine run this interpreter (its packages), not the
                # first python3 on the PATH.
                os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            # One counting thread per task (ldpflow.core.parallel): the executors' cores are
            # the parallelism, as on Dask; a user's LDPFLOW_THREADS wins.
            settings = settings.setIfMissing("spark.executorEnv.LDPFLOW_THREADS",
                                             os.environ.get("LDPFLOW_THREADS", "1"))
            for name, value in (conf or {}).items():
                settings = settings.set(name, value)
            context = SparkContext.getOrCreate(settings)
            context.setLogLevel("WARN")
        self.sc = context
        submitted = self.sc.getConf().get("spark.submit.pyFiles") or ""
        if ship_package and "ldpflow" not in submitted:  # spark-submit --py-files sent it
            from ldpflow.engines.package import package_zip

            self.sc.addPyFile(package_zip())
        self._parallelism = max(int(self.sc.defaultParallelism), 1)

    @property
    def description(self) -> str:
        return f"spark ({self.sc.master})"

    @property
    def parallelism(self) -> int:
        return self._parallelism

    def parallelize(self, items: list):
        return self.sc.parallelize(list(items), max(len(items), 1))

    def flat_map(self, collection, fn):
        return collection.flatMap(fn)

    def map(self, collection, fn):
        return collection.map(fn)

    def group_by_key(self, collection):
        return collection.groupByKey(self._parallelism * 2).mapValues(list)

    def combine_per_key(self, collection, add):
        return collection.reduceByKey(add)

    def union(self, first, second):
        return first.union(second)

    def collect(self, collection) -> list:
        return collection.collect()

    def persist(self, collection):
        return collection.cache()

    def release(self, collection) -> None:
        if hasattr(collection, "unpersist"):
            collection.unpersist()

    def peak_memory(self) -> dict[Any, int]:
        """The peak resident memory of the Python workers one small job reaches, by pid."""
        parts = self._parallelism * 4
        found = self.sc.parallelize(range(parts), parts).mapPartitions(_peak_rss).collect()
        return dict(found)

    def close(self) -> None:
        if self._own:
            self.sc.stop()
