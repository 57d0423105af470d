"""What the Beam jobs share: flag parsing and checks, the runner, running and counting.

:func:`job_options` is every job's entry: it parses the job's flags
(:func:`ldpflow.pipelines.options.parse`: unknown flags refused naming the job's closest
flag, the help, the required flags) and returns Beam's ``PipelineOptions`` of the flags
that are not ldpflow's. Importing this module does not import Beam. A usage error is a
``SystemExit`` whose code is one line of text (the CLI prints it and exits 2).
:func:`run_pipeline` runs a built pipeline and returns the job's Beam counters (namespace
``ldpflow``), so a job need not read its output back.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import re
import sys
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ldpflow.core import validation
from ldpflow.pipelines.options import Command, Parsed, help_parser, parse
from ldpflow.pipelines.usage import (
    check_output,
    check_output_file,
    usage_error,
)

if TYPE_CHECKING:
    from apache_beam.options.pipeline_options import PipelineOptions

__all__ = [
    "job_options",
    "job_help",
    "usage_error",
    "parse_methods",
    "acceptance_policy",
    "expected_oracle",
    "check_inputs",
    "list_paths",
    "open_path",
    "check_output",
    "check_output_file",
    "staging_folders",
    "detached",
    "batch_runner",
    "run_pipeline",
    "plan_failures",
    "counters",
    "distributions",
]

_LOGGER = logging.getLogger(__name__)


def job_help(job: Command | str) -> argparse.ArgumentParser:
    """The parser that prints ``ldpflow JOB --help``: the job's groups, defaults shown,
    required flags marked (:func:`ldpflow.pipelines.options.help_parser`)."""
    return help_parser(job)


def job_options(name: str, argv: Sequence[str] | Parsed | None
                ) -> tuple[PipelineOptions | None, argparse.Namespace]:
    """Parse a Beam job's flags (:func:`ldpflow.pipelines.options.parse`; ``argv`` may be
    parsed already, so the CLI parses once).

    Returns
    -------
    options : PipelineOptions
        Beam's flags (those that are not ldpflow's, unchanged), for the pipeline and its
        runner; ``None`` when the job runs on another ``--engine`` (Beam is not imported).
        ``--engine auto`` is resolved by then (``args.engine``: the engine that runs,
        logged with the reason in one line).
    args : argparse.Namespace
        The job's own flags (those of its option groups), by name.

    Raises
    ------
    SystemExit
        With code 0 after printing the help (``-h``/``--help``); with a one-line message
        for an unknown flag (naming the closest flag of the job), a stray argument or a
        missing required flag.
    """
    parsed = argv if isinstance(argv, Parsed) else parse(name, list(argv or []))
    if parsed.engine_reason is not None:  # the engine that runs, and why: one line
        _LOGGER.info("%s: engine %s (%s)", parsed.command.prog, parsed.args.engine,
                     parsed.engine_reason)
    if not parsed.command.on_beam(parsed.args):
        return None, parsed.args
    from apache_beam.options.pipeline_options import PipelineOptions

    return PipelineOptions(parsed.beam_argv), parsed.args


def parse_methods(text: str) -> list[str]:
    """Validate a comma-separated list of post-processing methods."""
    from ldpflow.core import postprocess

    methods = [m.strip().lower() for m in text.split(",") if m.strip()]
    unknown = [m for m in methods if m not in postprocess.METHODS]
    if not methods or unknown:
        raise ValueError(f"--methods must name methods among {', '.join(postprocess.METHODS)}, "
                         f"got {text!r}")
    return list(dict.fromkeys(methods))


def expected_oracle(opts, prog: str) -> dict:
    """The ``--expect_*`` parameters, each checked once by the validators every oracle uses
    (so ``--expect_epsilon -1`` is a usage error, not a filter that refuses all; the
    oracle's name is one of the flag's choices). No oracle has a further constraint on
    these two, so none is built to check them again."""
    expect = {k: v for k, v in {"oracle": opts.expect_oracle, "epsilon": opts.expect_epsilon,
                                "domain_size": opts.expect_domain_size}.items() if v is not None}
    try:
        if "epsilon" in expect:
            expect["epsilon"] = validation.check_epsilon(expect["epsilon"],
                                                         name="--expect_epsilon")
        if "domain_size" in expect:
            validation.check_domain_size(expect["domain_size"], name="--expect_domain_size")
    except (TypeError, ValueError) as exc:
        raise usage_error(prog, str(exc)) from None
    return expect


def acceptance_policy(opts, prog: str, expect: Mapping[str, Any] | None = None):
    """The :class:`~ldpflow.wire.parse.AcceptancePolicy` of a job's flags (the
    ``--expect_*`` ones unless ``expect`` is given), checked before any pipeline exists."""
    from ldpflow.core.dedup import new_id_key
    from ldpflow.wire.parse import AcceptancePolicy

    if expect is None:
        expect = expected_oracle(opts, prog)
    limits: dict[str, Any] = {}  # the limits this command has flags for; others: defaults
    for name in ("max_domain_size", "max_hash_range", "max_keys", "max_counters",
                 "max_key_bytes"):
        if getattr(opts, name, None) is None:
            continue
        try:
            limits[name] = validation.check_limit(getattr(opts, name), name=f"--{name}")
        except ValueError as exc:
            raise usage_error(prog, str(exc)) from None
    if getattr(opts, "max_epsilon", None) is not None:
        if not opts.max_epsilon > 0:
            raise usage_error(prog, f"--max_epsilon must be > 0, got {opts.max_epsilon}")
        limits["max_epsilon"] = opts.max_epsilon
    return AcceptancePolicy(expect=dict(expect), id_key=new_id_key(),  # the run's secret
                            **limits)


def check_engine(opts, prog: str) -> None:
    """The job-plan engine flags (``--workers``), checked before anything runs."""
    if opts.workers is not None:
        try:
            validation.check_limit(opts.workers, name="--workers")
        except ValueError as exc:
            raise usage_error(prog, str(exc)) from None


def start_backend(opts, prog: str, backend=None):
    """The job-plan engine ``--engine`` names (``ldpflow.engines.make_backend``), started
    and stopped by the ``with`` block; a one-line usage error naming the extra to install
    when its package is missing. ``backend``: an engine already running, used as it is
    (and left running)."""
    if backend is not None:
        return contextlib.nullcontext(backend)
    from ldpflow.engines import make_backend

    try:
        return make_backend(opts.engine, dask_scheduler=opts.dask_scheduler,
                            workers=opts.workers, spark_master=opts.spark_master)
    except ModuleNotFoundError as exc:
        raise usage_error(prog, f"--engine {opts.engine} needs {exc.name}: pip install "
                                f"'ldpflow[{opts.engine}]'") from None


def list_paths(pattern: str, beam: bool = True) -> list[str]:
    """The files ``pattern`` matches. ``beam``: through Beam's file systems (a Beam job's);
    else through the job plan's (:mod:`ldpflow.plan.files`, without Beam)."""
    if beam:
        from apache_beam.io.filesystems import FileSystems

        return [m.path for m in FileSystems.match([pattern])[0].metadata_list]
    from ldpflow.plan.files import match

    return [path for path, _ in match(pattern)]


def open_path(path: str, beam: bool = True):
    """One file to read, decompressed in bounded steps by the wire layer; through Beam's file
    systems or the job plan's, as :func:`list_paths`."""
    if beam:
        from ldpflow.transforms.io import open_input

        return open_input(path)
    from ldpflow.plan.files import open_file

    return open_file(path)


def check_inputs(pattern: str, fmt: str | None, prog: str, beam: bool = True) -> int:
    """Fail before any pipeline exists if ``pattern`` matches no file or a file whose format
    cannot be told from its name; returns the number of files (``beam``: as
    :func:`list_paths`)."""
    from ldpflow.wire import formats

    try:
        paths = list_paths(pattern, beam)
    except (OSError, ValueError) as exc:  # BeamIOError is an IOError
        raise usage_error(prog, f"cannot list --input {pattern!r}: {exc}") from None
    if not paths:
        raise usage_error(prog, f"--input {pattern!r} matched no files")
    if fmt is None:
        for path in paths:
            try:
                formats.detect_format(path)
            except ValueError as exc:
                raise usage_error(prog, f"{exc} (--input_format)") from None
    return len(paths)


def detached(options: PipelineOptions) -> bool:
    """``--no_wait_until_finish``: submit and return (as a Flex Template launcher must)."""
    from apache_beam.options.pipeline_options import StandardOptions

    return bool(options.view_as(StandardOptions).no_wait_until_finish)


_UNSUPPORTED_RUNNERS = {
    "DaskRunner": "Beam's DaskRunner computes side inputs inside the consuming task, sends "
                  "every tagged output to every tag and drops what a DoFn emits when its "
                  "bundle finishes, so it would estimate wrongly; on one machine use "
                  "--direct_num_workers=N --direct_running_mode=multi_processing, on a "
                  "cluster Dataflow, Flink or Spark (deploy/README.md, 'Runners')",
}


def batch_runner(options: PipelineOptions, prog: str):
    """The runner to use: as given, else the Python FnApiRunner (offline, no downloads).

    Raises
    ------
    SystemExit
        For a runner known to give wrong results on these jobs (the DaskRunner), saying why
        and what to use instead.
    """
    from apache_beam.options.pipeline_options import StandardOptions

    runner = options.view_as(StandardOptions).runner
    name = runner if isinstance(runner, str) else type(runner).__name__
    if runner is not None and name.rsplit(".", 1)[-1] in _UNSUPPORTED_RUNNERS:
        raise usage_error(prog, f"--runner={name} is not supported: "
                                f"{_UNSUPPORTED_RUNNERS[name.rsplit('.', 1)[-1]]}")
    if runner is None:
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner

        return FnApiRunner()
    return runner


def _metrics(result):
    from apache_beam.metrics.metric import MetricsFilter

    try:
        return result.metrics().query(MetricsFilter().with_namespace("ldpflow"))
    except (NotImplementedError, AttributeError):  # a runner without metrics
        return {"counters": [], "distributions": []}


def _value(item):
    return item.committed if item.committed is not None else item.attempted


def counters(result) -> dict[str, int]:
    """The run's committed ``ldpflow`` counters, summed over steps (empty when the runner
    reports no metrics)."""
    totals: dict[str, int] = {}
    for item in _metrics(result)["counters"]:
        name = item.key.metric.name
        totals[name] = totals.get(name, 0) + int(_value(item) or 0)
    return totals


def distributions(result) -> dict[str, dict[str, float]]:
    """The run's ``ldpflow`` distributions (timings, sizes), merged over steps:
    ``{name: {"count", "sum", "min", "max", "mean"}}``."""
    merged: dict[str, dict[str, float]] = {}
    for item in _metrics(result)["distributions"]:
        value = _value(item)
        if value is None or not value.count:
            continue
        into = merged.setdefault(item.key.metric.name, {"count": 0, "sum": 0,
                                                        "min": value.min, "max": value.max})
        into["count"] += value.count
        into["sum"] += value.sum
        into["min"], into["max"] = min(into["min"], value.min), max(into["max"], value.max)
    for into in merged.values():
        into["mean"] = into["sum"] / into["count"]
    return merged


def staging_folders(pipeline) -> list[str]:
    """The staging folders of the pipeline's commit steps
    (:class:`~ldpflow.transforms.io.CommitOutputs`)."""
    from apache_beam.pipeline import PipelineVisitor

    from ldpflow.transforms.io import CommitOutputs

    found: list[str] = []

    class _Find(PipelineVisitor):
        def enter_composite_transform(self, node):
            if isinstance(node.transform, CommitOutputs):
                found.append(node.transform.staging)

    pipeline.visit(_Find())
    return found


def _remove_staging(folders: Sequence[str], prog: str) -> None:
    """After a failed run: remove its staging folders (its partial files), nothing else."""
    from apache_beam.io.filesystems import FileSystems

    for folder in folders:
        try:
            if FileSystems.exists(folder):
                FileSystems.delete([folder])
                _LOGGER.info("%s: removed the failed run's staging folder %s", prog, folder)
        except (OSError, ValueError) as exc:  # BeamIOError is an IOError
            _LOGGER.warning("%s: could not remove the staging folder %s: %s", prog, folder,
                            exc)


_OS_ERROR = re.compile(r"\b(?:OSError|IOError|[A-Za-z]+Error): (\[Errno \d+\][^\[\n]*)")


def _os_failure(exc: BaseException) -> str | None:
    """The one line of a failure of the file system (a full disk, a folder gone, ...),
    raised in a worker: runners re-raise it as another exception, its text kept."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno is not None:
            return f"[Errno {exc.errno}] {exc.strerror}"
        found = _OS_ERROR.search(str(exc))
        if found:
            return found.group(1).strip()
        exc = exc.__cause__ or exc.__context__
    return None


def run_pipeline(pipeline, options: PipelineOptions, prog: str) -> dict[str, Any]:
    """Run ``pipeline``; returns ``{"state", "seconds", "counters", "distributions"}``, or
    ``{"submitted": True}`` with ``--no_wait_until_finish`` once submitted.

    When the run fails (a full disk, ...) its staging folders are removed before the error
    goes on, so the previous output stays as it was and no partial file holds the space; a
    failure that is an ``OSError`` becomes one line and exit status 1.
    """
    staging = staging_folders(pipeline)
    started = time.perf_counter()
    try:
        result = pipeline.run()
        if detached(options):
            _LOGGER.info("%s: submitted; not waiting for the job (--no_wait_until_finish): %s",
                         prog, result)
            return {"submitted": True}
        result.wait_until_finish()
    except BaseException as exc:
        _remove_staging(staging, prog)
        _exit_on_os_failure(exc, prog)
        raise
    return {"state": str(result.state), "seconds": round(time.perf_counter() - started, 3),
            "counters": counters(result), "distributions": distributions(result)}


def _exit_on_os_failure(exc: BaseException, prog: str) -> None:
    """A failed run whose cause is the file system's (:func:`_os_failure`): one line on
    stderr and exit status 1 (``SystemExit(1)``); any other failure returns, to go on."""
    failure = _os_failure(exc)
    if failure is None:
        return
    print(f"{prog}: error: the job failed, its output is unchanged: {failure}",
          file=sys.stderr)
    raise SystemExit(1) from None


@contextlib.contextmanager
def plan_failures(prog: str):
    """A job plan's run (``--engine local|dask|spark``) failing as a Beam run does
    (:func:`run_pipeline`): the run has removed its own staging folder (its partial files;
    :func:`ldpflow.plan.outputs.staged`), so the previous output stays as it was, and a
    failure of the file system (a full disk, ...) is one line and exit status 1."""
    try:
        yield
    except BaseException as exc:
        _exit_on_os_failure(exc, prog)
        raise
