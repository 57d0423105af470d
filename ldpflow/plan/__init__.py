"""A Beam-free job plan: ``ldpflow estimate`` as pure steps over core and wire objects
(:mod:`ldpflow.plan.steps`), written once against the small set of operations every engine
implements (:mod:`ldpflow.plan.backend`) and run by :func:`ldpflow.plan.job.run_estimate`.
Engines: in-process (:class:`~ldpflow.plan.backend.LocalBackend`), Dask and Spark
(:mod:`ldpflow.engines`). This package never imports Apache Beam."""

__all__: list[str] = []
