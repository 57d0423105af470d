"""Runner selection for the batch jobs: FnApiRunner by default, Dask on request.

Contract: :func:`dask_runner` returns ``None`` unless the options ask for Dask
(``--runner=DaskRunner`` or ``--dask_local_workers=N``); otherwise it returns a DaskRunner
whose result closes its Dask client (and the LocalCluster it started, if any) once
``wait_until_finish`` returns or raises. The jobs reach it through
``ldpflow.pipelines.estimate.batch_runner``, so a job module needs no Dask-specific code::

    # an existing dask.distributed scheduler
    ldpflow estimate --input ... --output ... \\
        --runner=DaskRunner --dask_client_address=tcp://SCHEDULER:8786 --dask_npartitions=8

    # a throw-away LocalCluster of 2 worker processes on this machine
    ldpflow estimate --input ... --output ... --runner=DaskRunner --dask_local_workers=2

The runner is Beam's DaskRunner with its graph translation (``run_pipeline``) redone, because
Beam 2.77's translation (``apache_beam/runners/dask/dask_runner.py``) defeats a cluster:

* a side input is a Dask bag that the consuming task iterates, which recomputes the side
  input's whole upstream graph inside that one task, on one worker (our jobs' final writes
  take side inputs, so all the reading ran there, and twice). Here the upstream of a side
  input is computed on the cluster first, and the task gets the values (so a side input
  must fit in the submitting process's memory, as the jobs' small ones do);
* ``beam.Reshuffle`` is the identity, and ``fileio.MatchFiles`` starts from a one-element
  ``Create``, so every file was read in one partition. Here Reshuffle computes its input
  (for the jobs, the list of files), cuts it into ``--dask_npartitions`` partitions and
  deals them over the workers;
* only the last-applied leaf was computed. Here every leaf is, and a bag that several
  transforms consume is persisted on the cluster, so shared upstream work runs once;
* what a DoFn emits in ``finish_bundle`` was dropped (the outputs were collected before it
  ran). Here they are kept.

Results are unchanged (tests/deploy/test_dask.py compares them with the FnApiRunner's).
Still true of Dask: tagged outputs reach every tag (the jobs split one PCollection by
filters instead), ``beam.io.Read`` is not translated (the jobs read with ``fileio``), there
are no metrics and no combiner lifting, and it is batch only.
"""

from __future__ import annotations

import logging

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.pipeline import PipelineVisitor
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
    apache_beam.runners.dask.dask_runner.DaskRunner or None

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
        import dask.distributed  # noqa: F401
        from apache_beam.runners.dask.dask_runner import DaskRunner
    except ImportError as exc:
        raise ImportError("the DaskRunner needs dask.distributed: "
                          "pip install 'ldpflow[dask]'") from exc

    class _ClusterDaskRunner(DaskRunner):
        """Beam's DaskRunner, translated for a cluster (module docstring), self-cleaning."""

        def run_pipeline(self, pipeline, options):
            import dask
            import dask.distributed

            from apache_beam.runners.dask.dask_runner import DaskRunnerResult
            from apache_beam.runners.dask.overrides import dask_overrides

            client_kwargs = _dask_options(options).get_all_options(drop_default=True,
                                                                   current_only=True)
            cluster = None
            if local is not None:
                cluster = _start_local_cluster(local)
                client_kwargs["address"] = cluster.scheduler_address
                if "npartitions" not in client_kwargs and "partition_size" not in client_kwargs:
                    client_kwargs["npartitions"] = 2 * local
            bag_kwargs = {name: client_kwargs.pop(name) for name in ("npartitions",
                                                                     "partition_size")
                          if client_kwargs.get(name)}
            client = None
            try:
                client = dask.distributed.Client(**client_kwargs)
                pipeline.replace_all(dask_overrides())
                consumers = _ConsumerCounter()
                pipeline.visit(consumers)
                translator = _translator(client, bag_kwargs, consumers.counts)
                pipeline.visit(translator)
                leaves = [bag for node, bag in translator.bags.items()
                          if consumers.counts.get(node, 0) == 0 and hasattr(bag, "dask")]
                futures = client.compute(list(dask.optimize(*leaves)))
            except BaseException:
                if client is not None:
                    client.close()
                if cluster is not None:
                    cluster.close()
                raise
            return _ClosingResult(DaskRunnerResult(client, futures), cluster,
                                  held=translator.held)

    return _ClusterDaskRunner()


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


class _ConsumerCounter(PipelineVisitor):
    """Counts, per primitive transform, the transforms that read its output (main or side)."""

    def __init__(self):
        self.counts: dict = {}

    def visit_transform(self, transform_node) -> None:
        for value in list(transform_node.inputs) + [si.pvalue for si in
                                                    transform_node.side_inputs]:
            producer = getattr(value, "producer", None)
            if producer is not None:
                self.counts[producer] = self.counts.get(producer, 0) + 1


def _translator(client, bag_kwargs: dict, consumers: dict):
    """A pipeline visitor that builds one Dask bag per primitive transform.

    Follows Beam 2.77's ``DaskRunner.to_dask_bag_visitor``, except that side inputs are
    computed on the cluster and handed over as values, bags read more than once are
    persisted, and Reshuffle repartitions (module docstring).
    """
    import apache_beam as beam
    import dask.bag
    import dask.distributed
    from apache_beam import pvalue
    from apache_beam.runners.dask import transform_evaluator as evaluator
    from apache_beam.runners.dask.overrides import _Reshuffle
    from apache_beam.transforms.sideinputs import SideInputMap

    class _Repartition(evaluator.DaskBagOp):
        """Reshuffle: the input, computed, in ``npartitions`` parts dealt over the workers.

        Dask places a task next to its input, so repartitioning alone would leave every
        part on the worker that listed the files.
        """

        def apply(self, input_bag, side_inputs=None):
            npartitions = self.bag_kwargs.get("npartitions") or input_bag.npartitions
            if input_bag.npartitions < npartitions:
                input_bag = input_bag.repartition(npartitions=npartitions)
            workers = sorted(client.scheduler_info()["workers"])
            if not workers:  # none connected yet: let the scheduler place the parts
                return input_bag
            parts = dask.distributed.futures_of(client.persist(input_bag))
            dealt = [client.submit(_identity, part, workers=[workers[i % len(workers)]],
                                   pure=False) for i, part in enumerate(parts)]
            held.extend(dealt)  # a released future's data is dropped: hold them for the run
            return dask.bag.from_delayed(dealt)

    class _ParDo(evaluator.ParDo):
        """Beam 2.77's ParDo translation, with the DoFn's ``finish_bundle`` outputs kept."""

        def apply(self, input_bag, side_inputs=None):
            from apache_beam.runners.common import DoFnContext, DoFnSignature, _OutputHandler

            transform = self.transform
            args, kwargs = transform.raw_side_inputs
            main_input = next(iter(self.applied.main_inputs.values()))
            window_fn = getattr(main_input, "windowing", None)
            window_fn = window_fn.windowfn if window_fn is not None else None
            receivers = evaluator.OneReceiver()
            invoker_args = [
                DoFnSignature(transform.fn),
                _OutputHandler(window_fn=window_fn, main_receivers=receivers[None],
                               tagged_receivers=receivers, per_element_output_counter=None,
                               output_batch_converter=None, process_yields_batches=False,
                               process_batch_yields_elements=False),
            ]
            invoker_kwargs = dict(
                context=DoFnContext(transform.label, state=None), side_inputs=side_inputs,
                input_args=list(args), input_kwargs=kwargs, user_state_context=None,
                bundle_finalizer_param=beam.DoFn.BundleFinalizerParam())
            return input_bag.map(evaluator.get_windowed_value, window_fn).map_partitions(
                _apply_dofn_to_bundle, invoker_args, invoker_kwargs, receivers)

    translations = {**evaluator.TRANSLATIONS, _Reshuffle: _Repartition,
                    beam.ParDo: _ParDo}
    held: list = []

    class _Translator(PipelineVisitor):
        def __init__(self):
            self.bags: dict = {}
            self.held = held  # futures the run's graph refers to by key

        def visit_transform(self, transform_node) -> None:
            op_class = translations.get(transform_node.transform.__class__, evaluator.NoOp)
            op = op_class(transform_node, bag_kwargs=bag_kwargs)
            kwargs = {"input_bag": None, "side_inputs": None}
            inputs = list(transform_node.inputs)
            if inputs:
                bags = [None if isinstance(value, pvalue.PBegin) else self.bags[value.producer]
                        for value in inputs
                        if isinstance(value, pvalue.PBegin) or value.producer in self.bags]
                single = len(bags) == 1 and not isinstance(op, evaluator.Flatten)
                kwargs["input_bag"] = bags[0] if single else bags
            if transform_node.side_inputs:
                kwargs["side_inputs"] = [
                    SideInputMap(type(si), si._view_options(), evaluator.DaskBagWindowedIterator(
                        self._values(si.pvalue.producer), si._window_mapping_fn))
                    for si in transform_node.side_inputs]
            bag = op.apply(**kwargs)
            if consumers.get(transform_node, 0) > 1 and hasattr(bag, "dask"):
                bag = client.persist(bag)  # computed once, read by every consumer
                held.append(bag)
            self.bags[transform_node] = bag

        def _values(self, producer) -> list:
            # DaskBagWindowedIterator only iterates: a list of the computed values serves.
            return client.compute(self.bags[producer]).result()

    return _Translator()


def _identity(value):
    return value


def _apply_dofn_to_bundle(items, invoker_args, invoker_kwargs, receivers):
    """One Dask partition through a DoFn, as one bundle (runs on the workers).

    Beam 2.77's version collects the outputs before ``finish_bundle``, so a DoFn that emits
    there (e.g. a per-bundle partial aggregate) lost them.
    """
    from apache_beam.runners.common import DoFnInvoker

    invoker = DoFnInvoker.create_invoker(*invoker_args, **invoker_kwargs)
    invoker.invoke_setup()
    invoker.invoke_start_bundle()
    for item in items:
        invoker.invoke_process(item)
    invoker.invoke_finish_bundle()
    invoker.invoke_teardown()
    results = [value.value for value in receivers.values]
    receivers.values.clear()
    return results


class _ClosingResult(PipelineResult):
    """A DaskRunner result that closes its client (and cluster) when the run ends.

    Dask leaves the client open after a run; closing the cluster first spams
    ConnectionRefused / CancelledError at shutdown.
    """

    def __init__(self, inner, cluster=None, held=()):
        super().__init__(inner.state)
        self._inner = inner
        self._cluster = cluster
        self._held = list(held)
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
        self._held.clear()
        self._inner.client.close()
        if self._cluster is not None:
            self._cluster.close()
