"""Engines of the job plan (:mod:`ldpflow.plan`): thin adapters of
:class:`~ldpflow.plan.backend.Backend` over Dask distributed (:mod:`ldpflow.engines.dask_backend`)
and PySpark RDDs (:mod:`ldpflow.engines.spark_backend`). :func:`make_backend` builds the one the
flags name. Neither imports Apache Beam."""

from __future__ import annotations

from ldpflow.plan.backend import Backend, LocalBackend

__all__ = ["make_backend"]


def make_backend(engine: str, *, dask_scheduler: str | None = None, workers: int | None = None,
                 spark_master: str | None = None) -> Backend:
    """The backend of ``--engine`` (``local``, ``dask`` or ``spark``)."""
    if engine == "local":
        return LocalBackend()
    if engine == "dask":
        from ldpflow.engines.dask_backend import DaskBackend

        return DaskBackend(scheduler=dask_scheduler, workers=workers)
    if engine == "spark":
        from ldpflow.engines.spark_backend import SparkBackend

        return SparkBackend(master=spark_master)
    raise ValueError(f"engine must be local, dask or spark, got {engine!r}")
