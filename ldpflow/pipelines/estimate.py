"""``ldpflow estimate``: report files -> consistent frequency estimates, on Apache Beam or
the job plan.

Local (``--engine auto``, the default: without Beam's flags, the job plan in this process,
``--engine local``; ``--engine beam`` runs Beam's in-process FnApiRunner instead, with the
same outputs)::

    ldpflow estimate --input '/tmp/reports/*.avro' --output /tmp/estimates \\
        --methods norm-sub,base-cut

Both cores of this machine, on Beam (its flags choose Beam)::

    ldpflow estimate --input ... --output ... \\
        --direct_num_workers=2 --direct_running_mode=multi_processing

Production (any Beam runner; see ``deploy/README.md``)::

    ldpflow estimate --input 'gs://BUCKET/reports/*.avro' --output gs://BUCKET/estimates \\
        --runner=DataflowRunner --project=PROJECT --region=REGION \\
        --temp_location=gs://BUCKET/tmp --setup_file=./setup.py

Other engines (``--engine dask|spark|local``; ``docs/engines.md``, which also gives the
rules of ``--engine auto``) run the same job as a Beam-free plan (``ldpflow.plan``), with the
same counts, dead letters and outputs::

    ldpflow estimate --input ... --output ... --engine dask --workers 2
    ldpflow estimate --input ... --output ... --engine spark --spark_master 'local[2]'

Reports of different oracles or parameter sets are estimated separately; each report id is
counted once (``--dedup none`` counts every copy). :func:`run` returns the run's counts
(from Beam's counters), which :func:`~ldpflow.pipelines.verdict.verdict` judges (the one
rule of the batch jobs, re-exported here). Writes ``OUTPUT/estimates.json``
(``{"results": [{"oracle", "epsilon", "domain_size", "n", "duplicates", "dead_letters",
"estimates": {METHOD: [...]}, "standard_errors", "intervals", "top", "significant", ...}],
"records", "duplicates", "dead_letters": {...}, "run": {...}}``; ``docs/uncertainty.md``),
``OUTPUT/estimates.avro`` (``schemas/estimate.avsc``) and the refused records with their
reasons under ``OUTPUT/dead_letters/``; ``--format csv`` adds ``OUTPUT/estimates.csv`` and
``--value_labels FILE`` labels the values in all of them (docs/pipeline.md).
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from ldpflow.pipelines.common import (
    acceptance_policy,
    batch_runner,
    check_engine,
    check_inputs,
    check_output,
    job_options,
    parse_methods,
    plan_failures,
    run_pipeline,
    start_backend,
    usage_error,
)
from ldpflow.pipelines.verdict import dead_letter_counts, input_bytes, verdict
from ldpflow.wire.results import run_metadata, utc_now

if TYPE_CHECKING:
    import apache_beam as beam

__all__ = ["run", "build", "verdict"]

_LOGGER = logging.getLogger(__name__)
_PROG = "ldpflow estimate"


def build(pipeline: beam.Pipeline, args, methods: list[str], policy=None, run=None,
          progress=None):
    """Wire read -> estimate -> write into ``pipeline`` (``args``: the job's flags, from
    ``job_options``); returns the commit step (which moves the staged outputs into
    ``--output`` once both writers are done). ``run``: the run's metadata
    (:func:`~ldpflow.wire.results.run_metadata`, which :func:`run` passes) for
    ``estimates.json`` and the Avro records; ``None`` leaves it out. ``progress``: the
    job's progress lines (:class:`~ldpflow.plan.progress.ProgressSpec`)."""
    # Beam is imported here, not with the module: --engine dask|spark|local never needs it.
    import apache_beam as beam

    from ldpflow.transforms.caps import CAP_KEEP
    from ldpflow.transforms.dedup import RepeatedIds
    from ldpflow.transforms.estimate import (
        CountDeadLettersFn,
        DeadLetterSummaryFn,
        EstimateReports,
    )
    from ldpflow.transforms.io import (
        CommitOutputs,
        ReadReports,
        WriteDeadLetters,
        WriteEstimates,
        staging_folder,
    )
    from ldpflow.transforms.poisoning import AttachPoisoning, DetectPoisoning

    if policy is None:  # run() checks the flags first, before any pipeline exists
        policy = acceptance_policy(args, _PROG)
    dedup = args.dedup != "none"
    cap = args.max_reports_per_user
    keep = tuple(dict.fromkeys((("id_hashes", "report_ids") if dedup else ())
                               + (CAP_KEEP if cap is not None else ())))
    output = args.output
    repeated = None
    if dedup:  # a first, light read: only report-id hashes go through the shuffle
        ids = pipeline | "ReadReportIds" >> ReadReports(args.input, args.input_format, policy,
                                                        ids_only=True)
        repeated = ids["reports"] | "RepeatedIds" >> RepeatedIds()
    read = pipeline | "ReadReports" >> ReadReports(args.input, args.input_format, policy, keep,
                                                   repeated=repeated, progress=progress)
    estimate = EstimateReports(methods, dedup=dedup, max_reports_per_user=cap,
                               max_job_bytes=args.max_job_bytes, source=args.input)
    inputs = {"reports": read["reports"], "dead_letters": read["dead_letters"]}
    if dedup:
        inputs["repeats"] = read["repeats"]
    results = inputs | "EstimateReports" >> estimate
    if args.poisoning == "detect":  # on the very batches counted (after dedup and caps)
        sections = estimate.reports | "DetectPoisoning" >> DetectPoisoning()
        results = ({"results": results, "poisoning": sections}
                   | "AttachPoisoning" >> AttachPoisoning())
    # The read's dead letters and those of the keys the job-wide budget refused.
    letters = ((read["dead_letters"], estimate.refused) | "AllDeadLetters" >> beam.Flatten())
    summary = letters | "SummariseDeadLetters" >> beam.CombineGlobally(DeadLetterSummaryFn())
    _ = letters | "CountDeadLetters" >> beam.ParDo(CountDeadLettersFn())
    staging = staging_folder(output)  # written there, then moved into place
    written = (
        results | "WriteEstimates" >> WriteEstimates(staging, summary, dedup,
                                                     estimate.contribution, run),
        letters | "WriteDeadLetters" >> WriteDeadLetters(staging),
    )
    return written | "CommitOutputs" >> CommitOutputs(output, staging)


def _run_plan(args, methods: list[str], backend, labelling: dict) -> dict:
    """The job plan (``ldpflow.plan``) on ``--engine`` dask, spark or local (or on
    ``backend``, an engine already running)."""
    from ldpflow.plan.job import plan_ranges, run_estimate

    check_engine(args, _PROG)
    check_inputs(args.input, args.input_format, _PROG, beam=False)  # Beam's messages, too
    try:
        tasks = plan_ranges(args.input, args.input_format)
    except (OSError, ValueError) as exc:
        raise usage_error(_PROG, f"cannot plan --input {args.input!r}: {exc}") from None
    if not tasks:
        raise usage_error(_PROG, f"--input {args.input!r} matched no files")
    policy = acceptance_policy(args, _PROG)
    check_output(args.output, _PROG)  # the last check, as on Beam (it creates the folder)
    with plan_failures(_PROG), start_backend(args, _PROG, backend) as engine:
        return run_estimate(engine, _plan_job(args, methods, policy, tasks, engine, labelling))


def _read_remote(path: str) -> bytes:
    """A label file on another file system (``gs://``, ...), through Beam's."""
    from apache_beam.io.filesystems import FileSystems

    try:
        with FileSystems.open(path) as f:
            return f.read()
    except ValueError as exc:  # a scheme Beam has no file system for (BeamIOError: OSError)
        raise OSError(str(exc)) from None


def _labels_and_formats(args) -> dict:
    """``run_metadata``'s ``value_labels`` and ``formats`` of ``--value_labels`` and
    ``--format`` (docs/pipeline.md), checked: a one-line usage error (exit 2) if not."""
    from ldpflow.wire.labels import LabelsError, load_value_labels

    labels = None  # --format: the parser's choices (wire.results.FORMATS; a test checks)
    if args.value_labels is not None:
        try:
            labels = load_value_labels(args.value_labels, args.expect_domain_size,
                                       read=_read_remote)
        except LabelsError as exc:
            raise usage_error(_PROG, f"--value_labels {exc}") from None
    expected = args.expect_value_labels
    if expected is not None and labels is None:
        raise usage_error(_PROG, "--expect_value_labels needs --value_labels (the label file "
                                 "of that version)")
    if expected is not None and expected != labels.version:
        raise usage_error(_PROG, f"--value_labels {args.value_labels} is the dictionary "
                                 f"{labels.version}, but the clients encoded with "
                                 f"{expected} (--expect_value_labels): their values would "
                                 "be named by the wrong labels")
    return {"value_labels": labels, "formats": (args.format,)}


def _plan_job(args, methods, policy, tasks, backend, labelling: dict):
    from ldpflow.plan.job import EstimateJob
    from ldpflow.plan.progress import ProgressSpec

    metadata = run_metadata(inputs=args.input, files=len({task.path for task in tasks}),
                            policy=policy, methods=methods, runner=backend.description,
                            started=utc_now(), **labelling)
    size = input_bytes(args.input)
    return EstimateJob(input=args.input, output=args.output, methods=tuple(methods),
                       policy=policy, fmt=args.input_format, dedup=args.dedup != "none",
                       max_reports_per_user=args.max_reports_per_user, run=metadata,
                       input_bytes=size, max_job_bytes=args.max_job_bytes,
                       progress=ProgressSpec(uuid.uuid4().hex, size),
                       poisoning=args.poisoning == "detect",
                       dedup_store=args.dedup_store or ("disk" if args.engine == "local"
                                                        else "memory"))


def run(argv: list[str] | None = None, backend=None) -> dict:
    """Run the job; returns its counts ``{"records", "reports_estimated", "duplicates",
    "capped", "dead_letters", "lost_parts", "lost_bytes", "lost_unsized", "reasons",
    "input_bytes", "output", "seconds", "state", "timings_ms"}`` (from the run's Beam
    metrics, or the plan's; without the counts when the runner reports none), or with
    ``--no_wait_until_finish`` ``{"submitted": True, "output": ...}`` once submitted.

    ``backend``: a job-plan engine already running (``ldpflow.plan.backend.Backend``), for
    ``--engine`` other than beam; default: the one the flags name, started and stopped here.

    Raises
    ------
    SystemExit
        A one-line usage error, before any pipeline exists.
    """
    options, args = job_options("estimate", argv)
    output = args.output
    try:
        methods = parse_methods(args.methods)
    except ValueError as exc:
        raise usage_error(_PROG, str(exc)) from None
    if args.max_reports_per_user is not None and args.max_reports_per_user < 1:
        raise usage_error(_PROG, "--max_reports_per_user must be a positive integer, got "
                                 f"{args.max_reports_per_user}")
    from ldpflow.plan.progress import set_quiet

    set_quiet(args.quiet == "true")
    if args.max_job_bytes is None or args.max_job_bytes < 1:
        raise usage_error(_PROG, f"--max_job_bytes must be a positive integer, got "
                                 f"{args.max_job_bytes}")
    fraction = args.max_dead_letter_fraction
    if not 0 <= fraction <= 1:
        raise usage_error(_PROG, f"--max_dead_letter_fraction must be in [0, 1], got {fraction}")
    labelling = _labels_and_formats(args)  # checked before anything runs
    if args.engine != "beam":
        return _run_plan(args, methods, backend, labelling)
    files = check_inputs(args.input, args.input_format, _PROG)
    policy = acceptance_policy(args, _PROG)
    runner = batch_runner(options, _PROG)
    check_output(output, _PROG)  # the last check (it creates the folder): one line, exit 2
    metadata = run_metadata(inputs=args.input, files=files, policy=policy, methods=methods,
                            runner=runner if isinstance(runner, str) else type(runner).__name__,
                            started=utc_now(), **labelling)
    import apache_beam as beam

    from ldpflow.plan.progress import ProgressSpec, finished

    pipeline = beam.Pipeline(runner=runner, options=options)
    progress = ProgressSpec(uuid.uuid4().hex, input_bytes(args.input))
    build(pipeline, args, methods, policy, metadata, progress)
    ran = run_pipeline(pipeline, options, _PROG)
    if ran.get("submitted"):
        return {"submitted": True, "output": output}
    summary = {"output": output, "state": ran["state"], "seconds": ran["seconds"],
               "timings_ms": {name: ran["distributions"][name] for name in
                              ("range_read_ms", "estimate_ms") if name in ran["distributions"]}}
    counts = ran["counters"]
    finished(progress, counts.get("records"))
    if "records" in counts or "ranges" in counts:  # a range read counts, even of no record
        summary.update(records=counts.get("records", 0),
                       reports_estimated=counts.get("reports_estimated", 0),
                       duplicates=counts.get("duplicates", 0),
                       capped=counts.get("reports_capped", 0),
                       **dead_letter_counts(counts), input_bytes=input_bytes(args.input))
        _LOGGER.info("%s: %d records: %d estimated, %d duplicates, %d dead letters in %.1fs "
                     "-> %s", _PROG, summary["records"], summary["reports_estimated"],
                     summary["duplicates"], summary["dead_letters"], ran["seconds"], output)
    else:
        _LOGGER.info("%s: done in %.1fs -> %s (the runner reported no counters)", _PROG,
                     ran["seconds"], output)
    return summary
