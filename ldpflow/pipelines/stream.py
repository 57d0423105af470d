"""``ldpflow stream``: windowed, consistent estimates from a Pub/Sub subscription.

Locally, against the Pub/Sub emulator (``docs/streaming.md``)::

    export PUBSUB_EMULATOR_HOST=127.0.0.1:8085
    ldpflow stream --subscription projects/ldpflow-dev/subscriptions/reports \\
        --output_topic projects/ldpflow-dev/topics/estimates --output /tmp/panes \\
        --window_size 60 --allowed_lateness 300 --early_firing 10

On Dataflow::

    ldpflow stream --subscription projects/PROJECT/subscriptions/reports \\
        --output_topic projects/PROJECT/topics/estimates \\
        --dead_letter_topic projects/PROJECT/topics/report-dead-letters \\
        --runner=DataflowRunner --project=PROJECT --region=REGION \\
        --temp_location=gs://BUCKET/tmp --setup_file=./setup.py

The default runner is Beam's BundleBasedDirectRunner (streaming, offline). The job runs
until cancelled (Ctrl-C cancels it).
"""

from __future__ import annotations

import hashlib
import json
import logging

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.transforms import window

from ldpflow.pipelines.estimate import parse_methods
from ldpflow.pipelines.options import StreamOptions, acceptance_policy, expected_oracle, require
from ldpflow.transforms.streaming import EstimateStream, WindowSpec, result_to_message
from ldpflow.wire import formats
from ldpflow.wire.envelope import DeadLetter
from ldpflow.wire.results import estimate_records

__all__ = ["run", "start", "build", "WritePanesFn"]

_LOGGER = logging.getLogger(__name__)


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


def _windows(opts: StreamOptions) -> WindowSpec:
    return WindowSpec(opts.window_size, opts.window_period, opts.allowed_lateness,
                      opts.early_firing)


def build(pipeline: beam.Pipeline, opts: StreamOptions, methods: list[str], messages=None):
    """Wire source -> ``EstimateStream`` -> sinks. ``messages`` replaces the Pub/Sub source."""
    policy = acceptance_policy(opts, expected_oracle(opts, "ldpflow stream"), "ldpflow stream")
    if messages is None:
        messages = pipeline | "ReadPubSub" >> beam.io.ReadFromPubSub(
            subscription=opts.subscription, with_attributes=True,
            timestamp_attribute=opts.timestamp_attribute)
    out = messages | "EstimateStream" >> EstimateStream(methods, _windows(opts), policy,
                                                        opts.timestamp_attribute)
    estimates, dead = out["estimates"], out["dead_letters"]
    if opts.output_topic:
        (estimates | "EstimateMessages" >> beam.Map(result_to_message)
         | "PublishEstimates" >> beam.io.WriteToPubSub(opts.output_topic))
    if opts.output:
        estimates | "WritePanes" >> beam.ParDo(WritePanesFn(opts.output))
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


def _parse(argv: list[str] | None) -> tuple[PipelineOptions, StreamOptions, list[str]]:
    options = PipelineOptions(argv)
    opts = options.view_as(StreamOptions)
    require(opts, "subscription", prog="ldpflow stream")
    if not (opts.output_topic or opts.output):
        raise SystemExit("ldpflow stream: error: give --output_topic and/or --output")
    try:
        methods = parse_methods(opts.methods)
        _windows(opts)
    except ValueError as exc:
        raise SystemExit(f"ldpflow stream: error: {exc}") from None
    options.view_as(StandardOptions).streaming = True
    return options, opts, methods


def start(argv: list[str] | None = None):
    """Build and start the streaming job; returns the running ``PipelineResult``."""
    options, opts, methods = _parse(argv)
    runner = options.view_as(StandardOptions).runner
    if runner is None:
        from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner

        runner = BundleBasedDirectRunner()
    pipeline = beam.Pipeline(runner=runner, options=options)
    build(pipeline, opts, methods)
    result = pipeline.run()
    _LOGGER.info("streaming from %s (window %ss); cancel to stop", opts.subscription,
                 opts.window_size)
    return result


def run(argv: list[str] | None = None) -> None:
    """Run until the job ends or is interrupted (Ctrl-C cancels it)."""
    result = start(argv)
    try:
        result.wait_until_finish()
    except KeyboardInterrupt:
        _LOGGER.info("cancelling")
        result.cancel()
