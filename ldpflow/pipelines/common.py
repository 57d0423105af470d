"""What the Beam jobs share: flag parsing and checks, the runner, running and counting.

:func:`job_options` is every job's entry: it refuses unknown flags (naming the job's closest
flag), prints the job's help, checks its required flags, and returns Beam's
``PipelineOptions``. A usage error is a ``SystemExit`` whose code is one line of text (the
CLI prints it and exits 2). :func:`run_pipeline` runs a built pipeline and returns the
job's Beam counters (namespace ``ldpflow``), so a job need not read its output back.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import re
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from ldpflow.core import validation
from ldpflow.pipelines.options import JOBS, Job
from ldpflow.pipelines.usage import (
    HelpFormatter,
    Parser,
    check_output,
    check_output_file,
    usage_error,
)

__all__ = [
    "job_options",
    "job_help",
    "usage_error",
    "parse_methods",
    "acceptance_policy",
    "expected_oracle",
    "check_inputs",
    "check_output",
    "check_output_file",
    "staging_folders",
    "detached",
    "batch_runner",
    "run_pipeline",
    "counters",
    "distributions",
]

_LOGGER = logging.getLogger(__name__)
_BEAM_EPILOG = ("Every Apache Beam pipeline option is accepted as well (--runner, --project, "
                "--region, --temp_location, --setup_file, --direct_num_workers, ...); see "
                "deploy/README.md.")


class _Marking:
    """A parser (or argument group) view that marks the job's required flags."""

    def __init__(self, target, required: Sequence[str]):
        self._target = target
        self._required = set(required)

    def add_argument(self, *names, **kwargs):
        if any(name.lstrip("-") in self._required for name in names):
            kwargs["required"] = True
        return self._target.add_argument(*names, **kwargs)

    def __getattr__(self, name):
        return getattr(self._target, name)


def _title(group: type[PipelineOptions]) -> str:
    return (group.__doc__ or group.__name__).strip().splitlines()[0].rstrip(".").replace("``", "")


def job_help(job: Job) -> argparse.ArgumentParser:
    """The parser that prints ``ldpflow JOB --help``: the job's groups, defaults shown,
    required flags marked."""
    parser = argparse.ArgumentParser(prog=f"ldpflow {job.name}", description=job.summary,
                                     epilog=_BEAM_EPILOG, formatter_class=HelpFormatter,
                                     allow_abbrev=False)
    for group in job.groups:
        group._add_argparse_args(_Marking(parser.add_argument_group(_title(group)),
                                          job.required))
    return parser


def _beam_option_classes() -> list[type[PipelineOptions]]:
    seen: dict[str, type[PipelineOptions]] = {}
    stack = list(PipelineOptions.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if cls.__module__.startswith("apache_beam."):
            seen.setdefault(f"{cls.__module__}.{cls.__qualname__}", cls)
    return list(seen.values())


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    return [name for action in parser._actions for name in action.option_strings
            if name.startswith("--")]


def job_options(name: str, argv: Sequence[str] | None
                ) -> tuple[PipelineOptions, argparse.Namespace]:
    """Parse a Beam job's flags, as the CLI's conventions say.

    Returns
    -------
    options : PipelineOptions
        Every flag, for the pipeline and its runner.
    args : argparse.Namespace
        The job's own flags (those of its option groups), by name.

    Raises
    ------
    SystemExit
        With code 0 after printing the help (``-h``/``--help``); with a one-line message
        for an unknown flag (naming the closest flag of the job), a stray argument or a
        missing required flag.
    """
    job = JOBS[name]
    argv = list(argv or [])
    prog = f"ldpflow {name}"
    help_parser = job_help(job)
    if {"-h", "--help"} & set(argv):
        help_parser.print_help()
        raise SystemExit(0)
    accepting = Parser(prog=prog, add_help=False, allow_abbrev=False)
    for cls in _beam_option_classes():
        cls._add_argparse_args(accepting)
    own = _flags(help_parser)
    for group in job.groups:
        group._add_argparse_args(accepting)
    _, rest = accepting.parse_known_args(argv)  # a bad value or choice: a usage error
    for arg in rest:
        if arg.startswith("-"):
            flag = arg.split("=", 1)[0]
            close = (difflib.get_close_matches(flag, own, n=1, cutoff=0.6)
                     or difflib.get_close_matches(flag, _flags(accepting), n=1, cutoff=0.75))
            hint = f"; did you mean {close[0]}?" if close else f" (see {prog} --help)"
            raise usage_error(prog, f"unrecognized flag {flag}{hint}")
        raise usage_error(prog, f"unexpected argument {arg!r} (flags are --name=value)")
    options = PipelineOptions(argv)
    values = options.get_all_options()
    missing = [f"--{flag}" for flag in job.required if values.get(flag) in (None, "")]
    if missing:
        raise usage_error(prog, f"the following flags are required: {', '.join(missing)}")
    own_dests = {action.dest for action in help_parser._actions if action.option_strings}
    own_dests.discard("help")
    return options, argparse.Namespace(**{dest: values.get(dest) for dest in own_dests})


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
    for name in ("max_domain_size", "max_hash_range", "max_keys", "max_counters",
                 "max_key_bytes"):
        try:
            validation.check_limit(getattr(opts, name), name=f"--{name}")
        except ValueError as exc:
            raise usage_error(prog, str(exc)) from None
    if not opts.max_epsilon > 0:
        raise usage_error(prog, f"--max_epsilon must be > 0, got {opts.max_epsilon}")
    return AcceptancePolicy(expect=dict(expect), max_domain_size=opts.max_domain_size,
                            max_hash_range=opts.max_hash_range, max_epsilon=opts.max_epsilon,
                            max_keys=opts.max_keys, max_counters=opts.max_counters,
                            id_key=new_id_key(),  # the run's secret id-hash key
                            max_key_bytes=opts.max_key_bytes)


def check_inputs(pattern: str, fmt: str | None, prog: str) -> int:
    """Fail before any pipeline exists if ``pattern`` matches no file or a file whose format
    cannot be told from its name; returns the number of files."""
    from apache_beam.io.filesystems import FileSystems

    from ldpflow.wire import formats

    try:
        matched = FileSystems.match([pattern])[0].metadata_list
    except (OSError, ValueError) as exc:  # BeamIOError is an IOError
        raise usage_error(prog, f"cannot list --input {pattern!r}: {exc}") from None
    if not matched:
        raise usage_error(prog, f"--input {pattern!r} matched no files")
    if fmt is None:
        for metadata in matched:
            try:
                formats.detect_format(metadata.path)
            except ValueError as exc:
                raise usage_error(prog, f"{exc} (--input_format)") from None
    return len(matched)


def detached(options: PipelineOptions) -> bool:
    """``--no_wait_until_finish``: submit and return (as a Flex Template launcher must)."""
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
        failure = _os_failure(exc)
        if failure is None:
            raise
        print(f"{prog}: error: the job failed, its output is unchanged: {failure}",
              file=sys.stderr)
        raise SystemExit(1) from None
    return {"state": str(result.state), "seconds": round(time.perf_counter() - started, 3),
            "counters": counters(result), "distributions": distributions(result)}
