"""Runner selection for the batch jobs: FnApiRunner by default, Dask on request.

Contract: :func:`dask_runner` returns ``None`` unless the options ask for Dask
(``--runner=DaskRunner`` or ``--dask_local_workers=N``); otherwise it returns a runner whose
result closes its Dask client (and the LocalCluster it started, if any) once
``wait_until_finish`` returns or raises. The jobs reach it through
``ldpflow.pipelines.estimate.batch_runner``, so a job module needs no Dask-specific code::

    # an existing dask.distributed scheduler
    ldpflow estimate --input ... --output ... \\
        --runner=DaskRunner --dask_client_address=tcp://SCHEDULER:8786

    # a throw-away LocalCluster of 2 worker processes on this machine
    ldpflow estimate --input ... --output ... --runner=DaskRunner --dask_local_workers=2

Beam's DaskRunner (2.77) computes only the last-applied leaf of the graph, mishandles
tagged outputs, cannot translate ``beam.io.Read`` and has no metrics; the jobs are built to
avoid those (one PCollection split by filters, one terminal step, ``fileio`` reads). It is
batch only.
"""

from __future__ import annotations

import logging
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.runner import PipelineResult, PipelineState

__all__ = ["DaskClusterOptions", "dask_runner", "wants_dask"]

_LOGGER = logging.getLogger(__name__)
_DASK_NAMES = ("DaskRunner", "dask", "dask_runner")


class DaskClusterOptions(PipelineOptions):
    """``--dask_local_workers``: start a LocalCluster for the run (DaskRunner only).

    The other Dask flags are Beam's own ``DaskOptions``: ``--dask_client_address``,
    ``--dask_scheduler_file``, ``--dask_npartitions``, ``--dask_partition_size``, ...
    """

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument(
            "--dask_local_workers", type=int, default=None,
            help="Run on a dask.distributed LocalCluster of this many worker processes "
                 "(one thread each), started for this run and closed after it. Implies "
                 "--runner=DaskRunner; excludes --dask_client_address.")


def wants_dask(options: PipelineOptions) -> bool:
    """Whether ``options`` select Beam's DaskRunner (by name or ``--dask_local_workers``).

    Parameters
    ----------
    options : PipelineOptions
        The job's options.

    Returns
    -------
    bool
    """
    runner = options.view_as(StandardOptions).runner
    if options.view_as(DaskClusterOptions).dask_local_workers is not None:
        return True
    if isinstance(runner, str):
        return runner.rsplit(".", 1)[-1] in _DASK_NAMES  # also the dotted class path
    return runner is not None and type(runner).__name__ == "DaskRunner"


def dask_runner(options: PipelineOptions):
    """A DaskRunner that cleans up after itself, or ``None`` if Dask was not asked for.

    Parameters
    ----------
    options : PipelineOptions
        The job's options. ``--dask_local_workers=N`` starts a LocalCluster of ``N``
        single-threaded worker processes when the pipeline runs, points the run at it and,
        unless ``--dask_npartitions`` or ``--dask_partition_size`` is given, cuts every
        Dask bag into ``2 N`` partitions so that every worker gets work.

    Returns
    -------
    apache_beam.runners.runner.PipelineRunner or None

    Raises
    ------
    ValueError
        If ``--dask_local_workers`` is not positive, is combined with
        ``--dask_client_address`` / ``--dask_scheduler_file``, or names another runner.
    ImportError
        If dask.distributed is not installed (``pip install ldpflow[dask]``).
    """
    if not wants_dask(options):
        return None
    local = options.view_as(DaskClusterOptions).dask_local_workers
    runner = options.view_as(StandardOptions).runner
    if local is not None:
        if isinstance(runner, str) and runner.rsplit(".", 1)[-1] not in _DASK_NAMES:
            raise ValueError(f"--dask_local_workers needs --runner=DaskRunner, got {runner!r}")
        if local < 1:
            raise ValueError(f"--dask_local_workers must be a positive integer, got {local}")
        dask_options = _dask_options(options)
        if dask_options.address or dask_options.scheduler_file:
            raise ValueError("--dask_local_workers starts its own cluster: do not combine it "
                             "with --dask_client_address or --dask_scheduler_file")
    try:
        from apache_beam.runners.dask.dask_runner import DaskRunner
        import dask.distributed  # noqa: F401  (DaskRunner imports it lazily; fail early)
    except ImportError as exc:
        raise ImportError("the DaskRunner needs dask.distributed: "
                          "pip install 'ldpflow[dask]'") from exc

    class _SelfCleaningDaskRunner(DaskRunner):
        """Beam's DaskRunner, plus an optional LocalCluster and a result that closes both."""

        def run_pipeline(self, pipeline, options):
            cluster = None
            if local is not None:
                cluster = _start_local_cluster(local)
                # DaskRunner reads only its own DaskOptions: hand it a copy, so that the
                # caller's options do not keep this run's scheduler address.
                dask = _dask_options(options).get_all_options(drop_default=True,
                                                              current_only=True)
                dask["address"] = cluster.scheduler_address
                if "npartitions" not in dask and "partition_size" not in dask:
                    dask["npartitions"] = 2 * local
                options = PipelineOptions([], **dask)
            try:
                inner = super().run_pipeline(pipeline, options)
            except BaseException:
                if cluster is not None:
                    cluster.close()
                raise
            return _ClosingResult(inner, cluster)

    return _SelfCleaningDaskRunner()


def _dask_options(options: PipelineOptions):
    from apache_beam.runners.dask.dask_runner import DaskOptions

    return options.view_as(DaskOptions)


def _start_local_cluster(workers: int):
    from dask.distributed import LocalCluster

    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                           dashboard_address=":0")  # None would still bind :8787
    _LOGGER.info("started a dask LocalCluster of %d worker processes at %s", workers,
                 cluster.scheduler_address)
    return cluster


class _ClosingResult(PipelineResult):
    """A DaskRunner result that closes its client (and cluster) when the run ends.

    Dask leaves the client open after a run; closing the cluster first spams
    ConnectionRefused / CancelledError at shutdown.
    """

    def __init__(self, inner, cluster=None):
        super().__init__(inner.state)
        self._inner = inner
        self._cluster = cluster
        self._closed = False

    @property
    def client(self):
        """The ``dask.distributed.Client`` of the run (closed once the run has ended)."""
        return self._inner.client

    @property
    def state(self):
        return self._inner.state

    def wait_until_finish(self, duration=None):
        try:
            return self._inner.wait_until_finish(duration)
        finally:
            if self._inner.state != PipelineState.RUNNING:
                self.close()

    def cancel(self):
        try:
            return self._inner.cancel()
        finally:
            self.close()

    def metrics(self):
        return self._inner.metrics()  # NotImplementedError in Beam 2.77

    def close(self) -> None:
        """Close the client, then the LocalCluster this run started (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._inner.client.close()
        if self._cluster is not None:
            self._cluster.close()
