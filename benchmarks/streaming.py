"""Streaming benchmark: reports/s through the Pub/Sub emulator and through TestStream, with
deduplication on and off.

    python benchmarks/streaming.py [--reports 200000] [--per_message 1000]
        [--paths pubsub_emulator,pubsub_backlog,teststream,stages] [--dedup on,off]
        [--repeats 3] [--stage_bundle 300] [--teststream_bundle 1]
        [--publish_batch_bytes 9000000] [--publisher process] [--message_codec deflate]

The messages are what ``formats.encode_message`` makes (the report schema without its docs
in each header; blocks deflated by default, ``--message_codec null`` for uncompressed ones;
each result gives the codec and the mean ``message_bytes``).

``pubsub_emulator`` (live): starts the emulator, starts ``ldpflow stream``
(BundleBasedDirectRunner, one worker), publishes the reports as Avro batches of
``--per_message`` (event times in one past window, allowed lateness on), and times from the
first publish until a pane holding every report arrives on the output topic, so the
publishing is inside the figure (``--publisher process``, the default: a process of its own,
started and loaded before the timing, as a job's publishers are elsewhere; ``thread``: this
process, whose threads then share the job's interpreter lock and CPU; the publisher sends
batches of up to ``--publish_batch_bytes``; the client library's default is 1 MB, about 20
messages of 1,000 reports). ``pubsub_backlog``: the same job started on a subscription that
already holds every message (published before, timed apart), timed from the moment
``pipeline.run()`` has returned (the runner is up; the pipeline's construction and start are
``build_s``, outside the figure) until the full pane: what one worker drains. Both end when
the check subscriber pulls the pane, so the pane's publishing and that pull are inside the
figure, and neither includes the job's start-up. ``teststream``: the same ``EstimateStream`` over a
TestStream of the same messages, ``--teststream_bundle`` messages a bundle (1: each message a
bundle of its own, as before; the reader's bundles hold up to
``pubsub_client.READER_BUNDLE_MESSAGES``). ``stages``: the transform's steps on
the same messages in this process, without Beam (decode, in bundles of ``--stage_bundle``
messages as the job joins them; deduplicate; count), in microseconds a report of wall time
and of this process's CPU time (``cpu_*``, which a busy machine inflates less), to show what
limits the others. The emulator paths also give this process's CPU seconds over the timed
span (``cpu_s``: the job, and with ``--publisher thread`` the publisher) and the emulator's JVM's
(``emulator_cpu_s``): on two cores the three share the machine. With the publisher in a
process of its own (and in the backlog path) this process's CPU is the job's alone, and
``reports_per_job_cpu_s`` is the reports over it (``publisher_cpu_s``: the publisher's): on
a loaded machine the figure that compares.
With ``--dedup off`` the job counts every copy (``build(..., deduplicate=False)``; the job
itself always deduplicates).

One JSON object per path and dedup setting on stdout: the median of ``--repeats`` runs
(``reports_per_s``) and every run's figure, with the machine's load (1-minute load average
before and after, and the number of cores) and this process's peak RSS: the figures are
only comparable at a like load.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import pickle
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

import ldpflow
from ldpflow.pipelines.pubsub_client import READER_BUNDLE_MESSAGES
from ldpflow.wire import avro, formats
from ldpflow.wire.messages import MESSAGE_CODEC as DEFAULT_MESSAGE_CODEC

#: The Avro messages' block codec (``--message_codec``; the library's default, deflate, unless
#: told otherwise: ``null`` gives the uncompressed messages of the earlier figures).
MESSAGE_CODEC = DEFAULT_MESSAGE_CODEC


def make_messages(total, per_message, start_ms, window_ms, seed=1):
    oracle = ldpflow.oracle("grr", epsilon=1.0, domain_size=1024)
    rng = np.random.default_rng(seed)
    reports = oracle.perturb(rng.integers(0, 1024, total), rng=rng)
    table = formats.reports_table(oracle, reports, formats.numbered_ids("r", 0, total),
                                  formats.numbered_ids("u", 0, total),
                                  start_ms + rng.integers(0, window_ms, total))
    return [formats.encode_message(table.slice(lo, per_message), codec=MESSAGE_CODEC)
            for lo in range(0, total, per_message)]


def _start_job(argv, deduplicate):
    """``ldpflow stream`` (``stream.start``), or with ``deduplicate=False`` the same wiring
    counting every copy; returns ``(result, seconds to build)``."""
    import apache_beam as beam
    from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner

    from ldpflow.pipelines import stream

    began = time.perf_counter()
    if deduplicate:
        return stream.start(argv), time.perf_counter() - began
    options, opts, methods, _ = stream.parse(argv)
    pipeline = beam.Pipeline(runner=BundleBasedDirectRunner(), options=options)
    stream.build(pipeline, opts, methods, deduplicate=False)
    built = time.perf_counter() - began
    return pipeline.run(), built


def _await_pane(check, total, timeout=600):
    """The largest ``n`` of the panes pulled from ``check`` until one holds ``total``."""
    from google.cloud import pubsub_v1

    best = 0
    with pubsub_v1.SubscriberClient() as client:
        deadline = time.monotonic() + timeout
        while best < total and time.monotonic() < deadline:
            try:
                response = client.pull(request={"subscription": check, "max_messages": 100},
                                       timeout=3)
            except Exception:  # noqa: BLE001 - deadline on an idle subscription
                continue
            if response.received_messages:
                client.acknowledge(request={"subscription": check, "ack_ids": [
                    m.ack_id for m in response.received_messages]})
            for m in response.received_messages:
                best = max(best, json.loads(m.message.data)["n"])
    return best


def _publisher(batch_bytes):
    from google.cloud import pubsub_v1

    return pubsub_v1.PublisherClient(pubsub_v1.types.BatchSettings(
        max_bytes=batch_bytes, max_latency=0.01, max_messages=1000))


def _publish_all(publisher, topic, messages):
    for future in [publisher.publish(topic, m) for m in messages]:
        future.result(timeout=60)


def publish_child(path, topic, batch_bytes):
    """The live path's publisher in a process of its own (``--publisher process``): loads
    the messages pickled at ``path``, says ``ready``, publishes them all when a line arrives
    on stdin, then prints its wall and CPU seconds of publishing as JSON."""
    with open(path, "rb") as f:
        messages = pickle.load(f)
    publisher = _publisher(batch_bytes)
    print("ready", flush=True)
    sys.stdin.readline()
    began, cpu = time.perf_counter(), time.process_time()
    _publish_all(publisher, topic, messages)
    print(json.dumps({"publish_s": time.perf_counter() - began,
                      "cpu_s": time.process_time() - cpu}), flush=True)


class _PublisherProcess:
    """A started :func:`publish_child`, waiting to publish ``messages`` to ``topic``."""

    def __init__(self, topic, messages, batch_bytes):
        with tempfile.NamedTemporaryFile("wb", suffix=".pickle", delete=False) as f:
            pickle.dump(messages, f)
            self._path = f.name
        self._process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--publish_from", self._path,
             "--publish_topic", topic, "--publish_batch_bytes", str(batch_bytes)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if self._process.stdout.readline().strip() != "ready":
            self.close()
            raise RuntimeError("the publisher process did not start")

    def start(self):
        self._process.stdin.write("go\n")
        self._process.stdin.flush()

    def result(self):
        """``(publish seconds, publisher CPU seconds)`` once it has published."""
        line = self._process.stdout.readline()
        self._process.wait(timeout=60)
        if not line.strip():
            raise RuntimeError(f"the publisher process ended (exit {self._process.returncode})"
                               " without its figures")
        done = json.loads(line)
        return done["publish_s"], done["cpu_s"]

    def close(self):
        """Stop the process if it still runs, remove its messages' file (always call it)."""
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        if os.path.exists(self._path):
            os.unlink(self._path)


def emulator_path(total, per_message, deduplicate=True, backlog=False,
                  batch_bytes=9_000_000, publisher_process=True):

    from ldpflow.testing.pubsub import PubSubEmulator, cancel_streaming

    window_ms = 60_000
    start = (int(time.time() * 1000) // window_ms - 5) * window_ms
    messages = make_messages(total, per_message, start, window_ms)
    with PubSubEmulator() as emulator:
        emulator.create_topic("reports")
        subscription = emulator.create_subscription("reports-stream", "reports")
        emulator.create_topic("estimates")
        check = emulator.create_subscription("estimates-check", "estimates")
        argv = [f"--subscription={subscription}",
                f"--output_topic={emulator.topic('estimates')}",
                "--window_size=60", "--allowed_lateness=3600", "--methods=base"]
        separate = publisher_process and not backlog
        publisher = None if separate else _publisher(batch_bytes)
        publisher_cpu = None
        child = None

        def publish():
            began = time.perf_counter()
            _publish_all(publisher, emulator.topic("reports"), messages)
            return time.perf_counter() - began

        try:
            if backlog:
                published = publish()
                result, built = _start_job(argv, deduplicate)
                began, cpu = time.perf_counter(), time.process_time()
                jvm = emulator.cpu_seconds()
            elif separate:
                child = _PublisherProcess(emulator.topic("reports"), messages, batch_bytes)
                result, built = _start_job(argv, deduplicate)
                began, cpu = time.perf_counter(), time.process_time()
                jvm = emulator.cpu_seconds()
                child.start()
            else:
                result, built = _start_job(argv, deduplicate)
                began, cpu = time.perf_counter(), time.process_time()
                jvm = emulator.cpu_seconds()
                published = publish()
            best = _await_pane(check, total)
            elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
            jvm = emulator.cpu_seconds() - jvm
            if separate:
                published, publisher_cpu = child.result()
            cancel_streaming(result, emulator.topic("reports"))
        finally:
            if child is not None:
                child.close()

    figures = {"path": "pubsub_backlog" if backlog else "pubsub_emulator", "reports": total,
               "per_message": per_message, "publish_batch_bytes": batch_bytes,
               "publisher": "process" if separate else "this process", "estimated": best,
               "publish_s": round(published, 2),
               "build_s": round(built, 2), "seconds": round(elapsed, 2),
               "cpu_s": round(cpu, 2), "emulator_cpu_s": round(jvm, 2),
               "reports_per_s": round(best / elapsed)}
    if separate or backlog:  # this process's CPU is the job's alone
        figures["reports_per_job_cpu_s"] = round(best / cpu)
    if publisher_cpu is not None:
        figures["publisher_cpu_s"] = round(publisher_cpu, 2)
    return figures


def backlog_path(total, per_message, deduplicate=True, batch_bytes=9_000_000):
    return emulator_path(total, per_message, deduplicate, backlog=True,
                         batch_bytes=batch_bytes)


def teststream_path(total, per_message, deduplicate=True, bundle=1):
    import apache_beam as beam
    from apache_beam.io.gcp.pubsub import PubsubMessage
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
    from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
    from apache_beam.testing.test_stream import TestStream
    from apache_beam.transforms.window import TimestampedValue

    from ldpflow.transforms.streaming import EstimateStream, WindowSpec

    messages = make_messages(total, per_message, 0, 60_000)
    stream = TestStream().advance_watermark_to(0)
    for lo in range(0, len(messages), bundle):  # one bundle each
        stream = stream.add_elements([TimestampedValue(PubsubMessage(body, {}), i * 0.001)
                                      for i, body in enumerate(messages[lo:lo + bundle], lo)])
    stream = stream.advance_watermark_to(120).advance_watermark_to_infinity()
    options = PipelineOptions([])
    options.view_as(StandardOptions).streaming = True
    from apache_beam.metrics import Metrics
    from apache_beam.metrics.metric import MetricsFilter

    estimated = Metrics.distribution("benchmark", "estimated")
    began = time.perf_counter()
    p = beam.Pipeline(runner=BundleBasedDirectRunner(), options=options)
    out = p | stream | EstimateStream(["base"], WindowSpec(60), deduplicate=deduplicate)
    out["estimates"] | beam.Map(lambda r: estimated.update(r["n"]))
    result = p.run()
    result.wait_until_finish()
    elapsed = time.perf_counter() - began
    query = result.metrics().query(MetricsFilter().with_name("estimated"))["distributions"]
    return {"path": "teststream", "reports": total, "per_message": per_message,
            "bundle_messages": bundle,
            "estimated": max((d.committed.max for d in query), default=0),
            "seconds": round(elapsed, 2), "reports_per_s": round(total / elapsed)}


def stages_path(total, per_message, deduplicate=True, bundle=READER_BUNDLE_MESSAGES):
    """The streaming steps without Beam: microseconds a report for each."""
    from ldpflow.transforms.combine import FrequencyOracleCombineFn
    from ldpflow.transforms.streaming import (
        DecodeMessagesFn,
        DeduplicateReportsFn,
        SeenIdsCombineFn,
    )

    class State:  # a combining state as the direct runner keeps it, per key and cell
        def __init__(self):
            self.fn = SeenIdsCombineFn()
            self.accumulator = self.fn.create_accumulator()

        def read(self):
            return self.fn.extract_output(self.accumulator)

        def add(self, value):
            self.accumulator = self.fn.add_input(self.accumulator, value)

    messages = make_messages(total, per_message, 0, 60_000)
    decode = DecodeMessagesFn(60.0, join=True)
    decode.start_bundle()
    list(decode.process(messages[0], 0, None))
    list(decode.finish_bundle())  # imports and caches out of the timing
    began, cpu_began = time.perf_counter(), time.process_time()
    cells = []
    for lo in range(0, len(messages), bundle):  # as the job's bundles arrive
        decode.start_bundle()
        for m in messages[lo:lo + bundle]:
            list(decode.process(m, 0, None))
        cells += [wv.value for wv in decode.finish_bundle()]
    decoded, cpu_decoded = time.perf_counter(), time.process_time()
    if deduplicate:
        states, dedup = {}, DeduplicateReportsFn()  # per state key: key, cell and id bucket
        counted = [a for cell in cells
                   for _, a in dedup.process(cell, seen=states.setdefault(cell[0], State()))]
    else:
        counted = [batch.protocol.count_valid(batch.reports) for _, batch in cells]
    deduplicated, cpu_deduplicated = time.perf_counter(), time.process_time()
    combine = FrequencyOracleCombineFn()
    combine.merge_accumulators([combine.add_input(combine.create_accumulator(), a)
                                for a in counted])
    merged, cpu_merged = time.perf_counter(), time.process_time()

    def us(seconds):
        return round(seconds / total * 1e6, 3)

    return {"path": "stages", "reports": total, "per_message": per_message,
            "bundle_messages": bundle, "decode_us": us(decoded - began),
            ("deduplicate_and_count_us" if deduplicate else "count_us"):
            us(deduplicated - decoded), "merge_us": us(merged - deduplicated),
            "cpu_decode_us": us(cpu_decoded - cpu_began),
            "cpu_dedup_count_us" if deduplicate else "cpu_count_us":
            us(cpu_deduplicated - cpu_decoded),
            "reports_per_s": round(total / (merged - began)),
            "reports_per_cpu_s": round(total / (cpu_merged - cpu_began))}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reports", type=int, default=200_000)
    parser.add_argument("--per_message", type=int, default=1000)
    parser.add_argument("--paths", default="pubsub_emulator,pubsub_backlog,teststream,stages")
    parser.add_argument("--dedup", default="on,off", help="on, off or on,off")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--stage_bundle", type=int, default=READER_BUNDLE_MESSAGES,
                        help="messages a bundle in the stages path (the reader's largest "
                             "bundle)")
    parser.add_argument("--publish_batch_bytes", type=int, default=9_000_000,
                        help="largest publish request of the emulator paths' publisher "
                             "(Pub/Sub's limit is 10 MB; the client's default 1 MB)")
    parser.add_argument("--publisher", choices=("process", "thread"), default="process",
                        help="the live path's publisher: a process of its own (this "
                             "process's CPU is then the job's alone), or this process")
    parser.add_argument("--publish_from", help=argparse.SUPPRESS)
    parser.add_argument("--publish_topic", help=argparse.SUPPRESS)
    parser.add_argument("--teststream_bundle", type=int, default=1,
                        help="messages a bundle (one add_elements) in the teststream path")
    parser.add_argument("--message_codec", choices=avro.CODECS,
                        default=DEFAULT_MESSAGE_CODEC,
                        help="the Avro messages' block codec (default: the library's)")
    args = parser.parse_args(argv)
    global MESSAGE_CODEC
    MESSAGE_CODEC = args.message_codec
    if args.publish_from:  # the live path's publisher process
        publish_child(args.publish_from, args.publish_topic, args.publish_batch_bytes)
        return
    logging.basicConfig(level=logging.WARNING)
    paths = {"pubsub_emulator": lambda n, m, d: emulator_path(
                 n, m, d, batch_bytes=args.publish_batch_bytes,
                 publisher_process=args.publisher == "process"),
             "pubsub_backlog": lambda n, m, d: backlog_path(n, m, d, args.publish_batch_bytes),
             "teststream": lambda n, m, d: teststream_path(n, m, d, args.teststream_bundle),
             "stages": lambda n, m, d: stages_path(n, m, d, args.stage_bundle)}
    sample = make_messages(min(args.reports, 10 * args.per_message), args.per_message, 0,
                           60_000)  # the messages' mean size, reported with every result
    message_bytes = round(sum(map(len, sample)) / len(sample))
    for path in args.paths.split(","):
        for setting in args.dedup.split(","):
            load_before = os.getloadavg()[0]
            runs = [paths[path](args.reports, args.per_message, setting == "on")
                    for _ in range(args.repeats)]
            result = sorted(runs, key=lambda r: r["reports_per_s"])[len(runs) // 2]
            result.update(dedup=setting, runs_reports_per_s=[r["reports_per_s"] for r in runs],
                          message_codec=MESSAGE_CODEC,
                          message_bytes=message_bytes,
                          load_before=round(load_before, 2),
                          load_after=round(os.getloadavg()[0], 2), cores=os.cpu_count(),
                          max_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                                           / 1024))
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
