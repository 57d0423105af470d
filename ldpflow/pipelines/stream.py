"""``ldpflow stream``: windowed, consistent estimates (with ``--protocol``, heavy hitters) from a
Pub/Sub subscription.

Locally, against the Pub/Sub emulator (``gcloud beta emulators pubsub start``, or the Debian
package ``google-cloud-cli-pubsub-emulator``; ``docs/streaming.md``)::

    export PUBSUB_EMULATOR_HOST=127.0.0.1:8085
    ldpflow simulate --oracle olh --epsilon 1 --domain_size 64 --users 20000 --output /tmp/r
    ldpflow pubsub create --topic projects/ldpflow-dev/topics/reports \\
        --subscription projects/ldpflow-dev/subscriptions/reports-stream \\
        --output_topic projects/ldpflow-dev/topics/estimates \\
        --output_subscription projects/ldpflow-dev/subscriptions/estimates-pull
    ldpflow stream --subscription projects/ldpflow-dev/subscriptions/reports-stream \\
        --output_topic projects/ldpflow-dev/topics/estimates --output /tmp/panes \\
        --window_size 60 --allowed_lateness 600 &
    ldpflow pubsub publish --topic projects/ldpflow-dev/topics/reports --input '/tmp/r/*.avro'
    ldpflow pubsub pull --subscription projects/ldpflow-dev/subscriptions/estimates-pull \\
        --wake_topic projects/ldpflow-dev/topics/reports --until_reports 20000 --final_only

The heavy hitters of each window (``--protocol pem|spm|mcm|treehist|sfp``): each pane is
the document of ``ldpflow heavy-hitters`` (``heavy_hitters.json``) of the window's reports,
with the window and the pane, written to ``OUTPUT/heavy_hitters-START-END-PROTOCOL-KEY-
PANE.json`` and/or published to ``--output_topic``; the reports carry their configuration,
and ``--k``, ``--bits``, the protocol's flags, ``--codec`` and ``--epsilon`` only check it
(a report that differs is a dead letter)::

    ldpflow simulate --oracle pem --bits 32 --k 16 --epsilon 4 --domain_size 10000 \\
        --users 200000 --output /tmp/pem
    ldpflow stream --subscription projects/ldpflow-dev/subscriptions/reports-stream \\
        --output /tmp/hh-panes --window_size 60 --allowed_lateness 600 --protocol pem &
    ldpflow pubsub publish --topic projects/ldpflow-dev/topics/reports --input '/tmp/pem/*.avro'

On Dataflow::

    ldpflow stream --subscription projects/PROJECT/subscriptions/reports \\
        --output_topic projects/PROJECT/topics/estimates \\
        --dead_letter_topic projects/PROJECT/topics/report-dead-letters \\
        --runner=DataflowRunner --project=PROJECT --region=REGION \\
        --temp_location=gs://BUCKET/tmp --setup_file=./setup.py --allow_production

The default runner is Beam's BundleBasedDirectRunner (streaming, offline). The job runs
until cancelled (Ctrl-C cancels it). Before it starts, these are usage errors (one line,
exit status 2): a malformed subscription or topic name; real Pub/Sub without
``--allow_production`` (a remote runner, or a local one without ``PUBSUB_EMULATOR_HOST``:
the guard of ``ldpflow pubsub``); an ``--output`` or ``--dead_letter_output`` folder that
cannot be written. On a local runner, Pub/Sub that cannot be reached (no emulator answering
at ``PUBSUB_EMULATOR_HOST``, or no credentials without it) and a subscription or topic that
does not exist are one line and exit status 1, as is a Pub/Sub failure while it runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.transforms import window

from ldpflow.core import heavy_hitters as hh
from ldpflow.pipelines import pubsub
from ldpflow.pipelines.common import (
    acceptance_policy,
    check_output,
    job_options,
    parse_methods,
    usage_error,
)
from ldpflow.pipelines.options import DEFAULT_METHODS
from ldpflow.transforms.heavy_hitters import ServerRule
from ldpflow.transforms.streaming import EstimateStream, WindowSpec, result_to_message
from ldpflow.transforms.windowed_heavy_hitters import (
    IdentifyHeavyHittersStream,
    window_document_key,
)
from ldpflow.wire import formats
from ldpflow.wire.envelope import DeadLetter
from ldpflow.wire.results import estimate_records

__all__ = ["run", "start", "build", "parse", "WritePanesFn", "WriteHeavyHitterPanesFn",
           "HeavyHitterStream"]

_LOGGER = logging.getLogger(__name__)
_PROG = "ldpflow stream"


class WritePanesFn(beam.DoFn):
    """One pane -> ``OUTPUT/estimates-START-END-KEY-PANE.json`` and ``.avro`` (idempotent)."""

    def __init__(self, output: str):
        super().__init__()
        self._output = output.rstrip("/")

    def process(self, result):
        key = hashlib.sha1(json.dumps(result["parameters"], sort_keys=True).encode()
                           + result["oracle"].encode()).hexdigest()[:10]
        stem = (f"{self._output}/estimates-{result['window_start']}-{result['window_end']}-"
                f"{result['oracle']}-{key}-{result['pane_index']:04d}")
        with FileSystems.create(stem + ".json") as f:
            f.write(json.dumps(result, sort_keys=True).encode("utf-8"))
        window_bounds = (result["window_start"], result["window_end"])
        records = estimate_records({**result, "dead_letters": 0}, window_bounds, result["pane"])
        with FileSystems.create(stem + ".avro") as f:
            formats.write_records(f, "avro", records, schema="estimate")
        yield stem + ".json"


class WriteHeavyHitterPanesFn(beam.DoFn):
    """One pane's heavy-hitter document ->
    ``OUTPUT/heavy_hitters-START-END-PROTOCOL-KEY-PANE.json`` (idempotent)."""

    def __init__(self, output: str):
        super().__init__()
        self._output = output.rstrip("/")

    def process(self, document):
        key_text = window_document_key(document)
        key = hashlib.sha1(key_text.encode("utf-8")).hexdigest()[:10]
        protocol = (document["results"][0].get("protocol") if document["results"]
                    else None) or "none"
        path = (f"{self._output}/heavy_hitters-{document['window_start']}-"
                f"{document['window_end']}-{protocol}-{key}-{document['pane_index']:04d}.json")
        with FileSystems.create(path) as f:
            f.write(json.dumps(document, indent=1, sort_keys=True).encode("utf-8"))
        yield path


class WriteDeadLetterWindowsFn(beam.DoFn):
    """Dead letters of one window and pane -> one JSON-lines file."""

    def __init__(self, output: str):
        super().__init__()
        self._output = output.rstrip("/")

    def process(self, element, win=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
        _, lines = element
        lines = sorted(lines)
        path = (f"{self._output}/dead_letters-{int(win.start.micros // 1000)}-"
                f"{int(pane.index):04d}.jsonl")
        with FileSystems.create(path) as f:
            f.write(("\n".join(lines) + "\n").encode("utf-8"))
        yield path


def _windows(opts) -> WindowSpec:
    return WindowSpec(opts.window_size, opts.window_period, opts.allowed_lateness,
                      opts.early_firing)


@dataclasses.dataclass(frozen=True)
class HeavyHitterStream:
    """What ``--protocol`` asks of the stream: the protocol, the parameters the flags state
    (the reports of others are dead letters) and the server's rule."""

    protocol: str
    expect: dict
    rule: ServerRule


def build(pipeline: beam.Pipeline, opts, methods: list[str], messages=None,
          heavy: HeavyHitterStream | None = None, deduplicate: bool = True):
    """Wire source -> ``EstimateStream`` (with ``heavy``: ``IdentifyHeavyHittersStream``)
    -> sinks (``opts``: the job's flags, from ``job_options``). ``messages`` replaces the
    Pub/Sub source; ``deduplicate=False`` counts every copy (frequency estimates only: the
    job always deduplicates, ``benchmarks/streaming.py`` measures the difference)."""
    if heavy is not None and not deduplicate:
        raise ValueError("the heavy-hitter stream always deduplicates")
    policy = acceptance_policy(opts, _PROG, None if heavy is None else heavy.expect)
    if messages is None:
        from ldpflow.pipelines.pubsub_client import allow_large_pulls

        allow_large_pulls()  # the emulator's pulls take 10 MB messages, as the service's do
        # The timestamp attribute is read by EstimateStream, not by Beam's reader: a value
        # that does not parse is then a dead letter, not an error that stalls the read.
        messages = pipeline | "ReadPubSub" >> beam.io.ReadFromPubSub(
            subscription=opts.subscription, with_attributes=True)
    if heavy is None:
        out = messages | "EstimateStream" >> EstimateStream(
            methods, _windows(opts), policy, opts.timestamp_attribute,
            opts.max_reports_per_user, deduplicate=deduplicate)
        panes, writer = out["estimates"], WritePanesFn
    else:
        out = messages | "HeavyHittersStream" >> IdentifyHeavyHittersStream(
            heavy.protocol, _windows(opts), policy, heavy.rule, opts.timestamp_attribute,
            opts.max_reports_per_user)
        panes, writer = out["heavy_hitters"], WriteHeavyHitterPanesFn
    dead = out["dead_letters"]
    if opts.output_topic:
        (panes | "EstimateMessages" >> beam.Map(result_to_message)
         | "PublishEstimates" >> beam.io.WriteToPubSub(opts.output_topic))
    if opts.output:
        panes | "WritePanes" >> beam.ParDo(writer(opts.output))
    dead_json = dead | "DeadLetterJson" >> beam.Map(DeadLetter.to_json)
    if opts.dead_letter_topic:
        (dead_json | "DeadLetterMessages" >> beam.Map(lambda text: text.encode("utf-8"))
         | "PublishDeadLetters" >> beam.io.WriteToPubSub(opts.dead_letter_topic))
    if opts.dead_letter_output:
        (dead_json
         | "DeadLetterWindows" >> beam.WindowInto(window.FixedWindows(opts.window_size))
         | "DeadLetterKey" >> beam.Map(lambda text: ("dead_letters", text))
         | "GroupDeadLetters" >> beam.GroupByKey()
         | "WriteDeadLetters" >> beam.ParDo(WriteDeadLetterWindowsFn(opts.dead_letter_output)))
    return out


#: The flags of ``--protocol`` (``HeavyHittersOptions``) other than it.
_HEAVY_FLAGS = ("k", "bits", *sorted(hh.SHAPE_FLAGS), "survivors", "threshold_sigma",
                "threshold", "significance", "refine_sigma", "codec", "truth")


def _heavy_hitters(opts, argv: list[str] | None) -> HeavyHitterStream | None:
    """``--protocol`` and its flags, checked as the batch job checks them, before any
    pipeline: the configuration is each report's own, and what the flags state only checks
    it (the reports of another configuration are dead letters)."""
    if opts.protocol is None:
        stray = [f for f in _HEAVY_FLAGS if getattr(opts, f, None) is not None]
        if stray:
            raise usage_error(_PROG, f"--{stray[0]} is a heavy-hitter flag: give --protocol "
                                     "(pem, spm, mcm, treehist, sfp) with it")
        return None
    from ldpflow.core import validation
    from ldpflow.pipelines import heavy_hitters as job

    if opts.methods != DEFAULT_METHODS:  # a --methods other than the default's
        raise usage_error(_PROG, "--methods post-processes frequency estimates; with "
                                 "--protocol each pane holds the window's heavy hitters")
    for flag in ("expect_oracle", "expect_domain_size"):
        if getattr(opts, flag) is not None:
            raise usage_error(_PROG, f"--{flag} is for frequency-oracle reports; with "
                                     "--protocol the flags --k, --bits, --expect_epsilon, --codec "
                                     "and the protocol's own check the reports")
    name = opts.protocol
    if opts.k is not None:
        job.configure(opts, prog=_PROG)  # the flags' own values: a usage error names them
    else:
        job.check_flags(opts, _PROG)
    options = job.server_options(opts, _PROG)
    truth = job.read_truth(opts.truth, _PROG) if opts.truth else None
    expect: dict[str, Any] = {"oracle": name}
    if opts.k is not None:
        expect.update(top_k=opts.k, value_bits=opts.bits, **{
            p: getattr(opts, p) for p in hh.shape_parameters(name)
            if getattr(opts, p) is not None})
    if opts.codec is not None:
        expect["codec"] = opts.codec
    if opts.expect_epsilon is not None:
        try:
            expect["epsilon"] = validation.check_epsilon(opts.expect_epsilon,
                                                         name="--expect_epsilon")
        except ValueError as exc:
            raise usage_error(_PROG, str(exc)) from None
    return HeavyHitterStream(name, expect, ServerRule(options=options, truth=truth))


def parse(argv: list[str] | None):
    """The job's flags, checked before any pipeline exists: ``(options, opts, methods,
    heavy)`` for :func:`build` (``heavy``: the :class:`HeavyHitterStream` of ``--protocol``,
    None without it).

    Raises
    ------
    SystemExit
        With one line of text for a usage error.
    """
    options, opts = job_options("stream", argv)
    if not (opts.output_topic or opts.output):
        raise usage_error(_PROG, "give --output_topic and/or --output")
    try:
        methods = parse_methods(opts.methods)
        _windows(opts)
    except ValueError as exc:
        raise usage_error(_PROG, str(exc)) from None
    heavy = _heavy_hitters(opts, argv)
    # bad limits fail before any pipeline exists
    acceptance_policy(opts, _PROG, None if heavy is None else heavy.expect)
    if opts.max_reports_per_user is not None and opts.max_reports_per_user < 1:
        raise usage_error(_PROG, "--max_reports_per_user must be a positive integer, got "
                                 f"{opts.max_reports_per_user}")
    options.view_as(StandardOptions).streaming = True
    return options, opts, methods, heavy


def _local(runner) -> bool:
    """Whether the job runs on this machine (so its Pub/Sub can be checked from here)."""
    if runner is None:
        return True
    name = runner if isinstance(runner, str) else type(runner).__name__
    return name.rsplit(".", 1)[-1].endswith("DirectRunner")


def _check_pubsub(opts, runner) -> None:
    """Resource names; real Pub/Sub only with ``--allow_production`` (a remote runner, or
    a local one without ``PUBSUB_EMULATOR_HOST``); then (on a local runner) that they
    exist: before any pipeline."""
    names = {"subscription": ("subscriptions", opts.subscription),
             "output_topic": ("topics", opts.output_topic),
             "dead_letter_topic": ("topics", opts.dead_letter_topic)}
    for flag, (kind, path) in names.items():
        if path:
            try:
                pubsub.check_name(path, kind, f"--{flag}")
            except ValueError as exc:
                raise usage_error(_PROG, str(exc)) from None
    local = _local(runner)
    name = runner if isinstance(runner, str) else type(runner).__name__
    pubsub.guard_production(_PROG, opts.allow_production not in (None, "false"),
                            os.environ.get("PUBSUB_EMULATOR_HOST"),
                            "set PUBSUB_EMULATOR_HOST=HOST:PORT",
                            None if local else f"--runner={name} works on real Pub/Sub")
    if local:
        try:
            pubsub.check_job_resources(opts.subscription, {
                "output_topic": opts.output_topic, "dead_letter_topic": opts.dead_letter_topic})
        except pubsub.PubSubFailure as exc:
            raise pubsub.exit_failure(_PROG, str(exc)) from None


def start(argv: list[str] | None = None):
    """Build and start the streaming job; returns the running ``PipelineResult``.

    Raises
    ------
    SystemExit
        With one line of text for a usage error (a malformed resource name); with code 1,
        after one line on stderr, when Pub/Sub cannot be reached or a resource does not
        exist (local runners).
    """
    options, opts, methods, heavy = parse(argv)
    runner = options.view_as(StandardOptions).runner
    _check_pubsub(opts, runner)
    for flag in ("output", "dead_letter_output"):  # written as panes fire: check them now
        if getattr(opts, flag):
            check_output(getattr(opts, flag), _PROG, flag=f"--{flag}", dead_letters=False)
    if runner is None:
        from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner

        runner = BundleBasedDirectRunner()
    pipeline = beam.Pipeline(runner=runner, options=options)
    build(pipeline, opts, methods, heavy=heavy)
    result = pipeline.run()
    _LOGGER.info("streaming from %s (window %ss); cancel to stop", opts.subscription,
                 opts.window_size)
    return result


def run(argv: list[str] | None = None) -> None:
    """Run until the job ends or is interrupted (Ctrl-C cancels it).

    Raises
    ------
    SystemExit
        As :func:`start`; and with code 1, after one line on stderr, when a Pub/Sub call
        fails while the job runs (the runner has logged the details).
    """
    result = start(argv)
    try:
        result.wait_until_finish()
    except KeyboardInterrupt:
        _LOGGER.info("cancelling")
        result.cancel()
    except Exception as exc:  # noqa: BLE001 - only Pub/Sub's failures are turned to a line
        message = pubsub.failure_message(exc)
        if message is None:
            raise
        raise pubsub.exit_failure(_PROG, message) from None
