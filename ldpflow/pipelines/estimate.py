"""``ldpflow estimate``: report files -> consistent frequency estimates, on Apache Beam.

Local (the default runner is Beam's Python FnApiRunner: in-process, offline)::

    ldpflow estimate --input '/tmp/reports/*.avro' --output /tmp/estimates \\
        --methods norm-sub,base-cut

Both cores of this machine::

    ldpflow estimate --input ... --output ... \\
        --direct_num_workers=2 --direct_running_mode=multi_processing

Production (any Beam runner; see ``deploy/README.md``)::

    ldpflow estimate --input 'gs://BUCKET/reports/*.avro' --output gs://BUCKET/estimates \\
        --runner=DataflowRunner --project=PROJECT --region=REGION \\
        --temp_location=gs://BUCKET/tmp --setup_file=./setup.py

Reports of different oracles or parameter sets are estimated separately; each report id is
counted once (``--dedup none`` counts every copy). Writes ``OUTPUT/estimates.json``
(``{"results": [{"oracle", "epsilon", "domain_size", "n", "duplicates", "dead_letters",
"estimates": {METHOD: [...]}}], "records", "duplicates", "dead_letters": {...}}``),
``OUTPUT/estimates.avro`` (``schemas/estimate.avsc``) and the refused records with their
reasons under ``OUTPUT/dead_letters/``.
"""

from __future__ import annotations

import json
import logging
import time

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from ldpflow.core import postprocess as postprocess_module
from ldpflow.pipelines.options import (
    EstimateOptions,
    acceptance_policy,
    expected_oracle,
    require,
)
from ldpflow.transforms.estimate import DeadLetterSummaryFn, EstimateReports
from ldpflow.transforms.io import (
    CommitOutputs,
    ReadReports,
    SplitDeadLetters,
    WriteDeadLetters,
    WriteEstimates,
    staging_folder,
)
from ldpflow.wire import formats

__all__ = ["run", "parse_methods", "batch_runner", "check_inputs", "detached", "verdict"]

_LOGGER = logging.getLogger(__name__)
_PROG = "ldpflow estimate"


def parse_methods(text: str) -> list[str]:
    """Validate a comma-separated list of post-processing methods."""
    methods = [m.strip().lower() for m in text.split(",") if m.strip()]
    unknown = [m for m in methods if m not in postprocess_module.METHODS]
    if not methods or unknown:
        raise ValueError(
            f"--methods must name methods among {', '.join(postprocess_module.METHODS)}, "
            f"got {text!r}"
        )
    return list(dict.fromkeys(methods))


def check_inputs(pattern: str, fmt: str | None, job: str) -> int:
    """Fail before any pipeline exists if ``pattern`` matches no file or a file whose format
    cannot be told from its name; returns the number of files."""
    from apache_beam.io.filesystems import FileSystems

    try:
        matched = FileSystems.match([pattern])[0].metadata_list
    except (OSError, ValueError) as exc:  # BeamIOError is an IOError
        raise SystemExit(f"{job}: error: cannot list --input {pattern!r}: {exc}") from None
    if not matched:
        raise SystemExit(f"{job}: error: --input {pattern!r} matched no files")
    if fmt is None:
        for metadata in matched:
            try:
                formats.detect_format(metadata.path)
            except ValueError as exc:
                raise SystemExit(f"{job}: error: {exc} (--input_format)") from None
    return len(matched)


def detached(options: PipelineOptions) -> bool:
    """``--no_wait_until_finish``: submit and return (as a Flex Template launcher must)."""
    return bool(options.view_as(StandardOptions).no_wait_until_finish)


def batch_runner(options: PipelineOptions):
    """The runner to use: as given, else the Python FnApiRunner (offline, no downloads).

    ``--runner=DaskRunner`` (optionally with ``--dask_local_workers=N``) gets a DaskRunner
    that closes its client and cluster after the run (``ldpflow.pipelines.runners``).
    """
    from ldpflow.pipelines import runners

    dask = runners.dask_runner(options)
    if dask is not None:
        return dask
    runner = options.view_as(StandardOptions).runner
    if runner is None:
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner

        return FnApiRunner()
    return runner


def build(pipeline: beam.Pipeline, opts: EstimateOptions, methods: list[str], policy=None):
    """Wire read -> estimate -> write into ``pipeline``; returns the commit step (which
    moves the staged outputs into ``--output`` once both writers are done)."""
    if policy is None:  # run() checks the flags first, before any pipeline exists
        policy = acceptance_policy(opts, expected_oracle(opts, _PROG), _PROG)
    dedup = opts.dedup != "none"
    keep = ("id_hashes",) if dedup else ()
    read = (pipeline
            | "ReadReports" >> ReadReports(opts.input, opts.input_format, policy, keep)
            | "Split" >> SplitDeadLetters())
    results = read | "EstimateReports" >> EstimateReports(methods, dedup=dedup)
    summary = read["dead_letters"] | "SummariseDeadLetters" >> beam.CombineGlobally(
        DeadLetterSummaryFn())
    staging = staging_folder(opts.output)  # written there, then moved into place
    written = (
        results | "WriteEstimates" >> WriteEstimates(staging, summary, dedup),
        read["dead_letters"] | "WriteDeadLetters" >> WriteDeadLetters(staging),
    )
    return written | "CommitOutputs" >> CommitOutputs(opts.output, staging)


def verdict(document: dict, max_dead_letter_fraction: float) -> str | None:
    """Why a finished run failed (None: it did not): no valid report was estimated, or more
    than ``max_dead_letter_fraction`` of the records were refused. One line, with counts."""
    if document.get("submitted"):
        return None
    records, estimated = document["records"], document["reports_estimated"]
    dead = document["dead_letters"]["total"]
    summary = (f"{records} records: {estimated} estimated, {document.get('duplicates', 0)} "
               f"duplicates, {dead} dead letters")
    if estimated == 0:
        return f"no valid report was estimated ({summary})"
    if records and dead / records > max_dead_letter_fraction:
        return (f"{dead / records:.1%} of the records were refused, more than "
                f"--max_dead_letter_fraction {max_dead_letter_fraction} ({summary})")
    return None


def run(argv: list[str] | None = None) -> dict:
    """Run the job; returns the ``estimates.json`` document (or, with
    ``--no_wait_until_finish``, ``{"submitted": True, "output": ...}`` once submitted)."""
    options = PipelineOptions(argv)
    opts = options.view_as(EstimateOptions)
    require(opts, "input", "output", prog="ldpflow estimate")
    try:
        methods = parse_methods(opts.methods)
    except ValueError as exc:
        raise SystemExit(f"ldpflow estimate: error: {exc}") from None
    if not 0 <= opts.max_dead_letter_fraction <= 1:
        raise SystemExit("ldpflow estimate: error: --max_dead_letter_fraction must be in "
                         f"[0, 1], got {opts.max_dead_letter_fraction}")
    check_inputs(opts.input, opts.input_format, "ldpflow estimate")
    policy = acceptance_policy(opts, expected_oracle(opts, _PROG), _PROG)  # flags fail here
    started = time.perf_counter()
    pipeline = beam.Pipeline(runner=batch_runner(options), options=options)
    build(pipeline, opts, methods, policy)
    result = pipeline.run()
    if detached(options):
        _LOGGER.info("submitted; not waiting for the job (--no_wait_until_finish): %s", result)
        return {"submitted": True, "output": opts.output}
    result.wait_until_finish()
    path = opts.output.rstrip("/") + "/estimates.json"
    from apache_beam.io.filesystems import FileSystems

    with FileSystems.open(path) as f:
        document = json.loads(f.read().decode("utf-8"))
    _LOGGER.info(
        "estimated %d keys from %d records (%d duplicates, %d dead letters) in %.1fs -> %s",
        len(document["results"]), document["records"], document["duplicates"],
        document["dead_letters"]["total"], time.perf_counter() - started, path,
    )
    return document
