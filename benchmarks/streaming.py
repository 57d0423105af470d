"""Streaming benchmark: reports/s through the Pub/Sub emulator path and through TestStream.

    python benchmarks/streaming.py [--reports 200000] [--per_message 1000]
        [--paths pubsub_emulator,teststream,stages]

Emulator path: starts the emulator, starts ``ldpflow stream`` (BundleBasedDirectRunner),
publishes the reports as Avro batches of ``--per_message`` (event times in one past window,
allowed lateness on), and times from the first publish until a pane holding every report
arrives on the output topic. TestStream path: the same ``EstimateStream`` transform over a
TestStream of the same messages. Stages path: the transform's own steps on the same messages
in this process, without Beam (decode, deduplicate, count), in microseconds a report, to show
what limits the other two. One JSON object per path on stdout, each with the machine's load
(1-minute load average before and after, and the number of cores): the figures are only
comparable at a like load.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time

import numpy as np

import ldpflow
from ldpflow.wire import formats


def make_messages(total, per_message, start_ms, window_ms, seed=1):
    oracle = ldpflow.oracle("grr", epsilon=1.0, domain_size=1024)
    rng = np.random.default_rng(seed)
    reports = oracle.perturb(rng.integers(0, 1024, total), rng=rng)
    table = formats.reports_table(oracle, reports, formats.numbered_ids("r", 0, total),
                                  formats.numbered_ids("u", 0, total),
                                  start_ms + rng.integers(0, window_ms, total))
    return [formats.encode_message(table.slice(lo, per_message))
            for lo in range(0, total, per_message)]


def emulator_path(total, per_message):
    from google.cloud import pubsub_v1

    from ldpflow.pipelines import stream
    from ldpflow.testing.pubsub import PubSubEmulator, cancel_streaming

    window_ms = 60_000
    start = (int(time.time() * 1000) // window_ms - 5) * window_ms
    messages = make_messages(total, per_message, start, window_ms)
    with PubSubEmulator() as emulator:
        emulator.create_topic("reports")
        subscription = emulator.create_subscription("reports-stream", "reports")
        emulator.create_topic("estimates")
        check = emulator.create_subscription("estimates-check", "estimates")
        result = stream.start([f"--subscription={subscription}",
                               f"--output_topic={emulator.topic('estimates')}",
                               "--window_size=60", "--allowed_lateness=3600", "--methods=base"])
        publisher = pubsub_v1.PublisherClient()
        began = time.perf_counter()
        for future in [publisher.publish(emulator.topic("reports"), m) for m in messages]:
            future.result(timeout=60)
        published = time.perf_counter() - began
        best = 0
        with pubsub_v1.SubscriberClient() as client:
            deadline = time.monotonic() + 600
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
        elapsed = time.perf_counter() - began
        cancel_streaming(result, emulator.topic("reports"))
    return {"path": "pubsub_emulator", "reports": total, "per_message": per_message,
            "estimated": best, "publish_s": round(published, 2), "seconds": round(elapsed, 2),
            "reports_per_s": round(best / elapsed)}


def teststream_path(total, per_message):
    import apache_beam as beam
    from apache_beam.io.gcp.pubsub import PubsubMessage
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
    from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
    from apache_beam.testing.test_stream import TestStream
    from apache_beam.transforms.window import TimestampedValue

    from ldpflow.transforms.streaming import EstimateStream, WindowSpec

    messages = make_messages(total, per_message, 0, 60_000)
    stream = TestStream().advance_watermark_to(0)
    for i, body in enumerate(messages):
        stream = stream.add_elements([TimestampedValue(PubsubMessage(body, {}), i * 0.001)])
    stream = stream.advance_watermark_to(120).advance_watermark_to_infinity()
    options = PipelineOptions([])
    options.view_as(StandardOptions).streaming = True
    from apache_beam.metrics import Metrics
    from apache_beam.metrics.metric import MetricsFilter

    estimated = Metrics.distribution("benchmark", "estimated")
    began = time.perf_counter()
    p = beam.Pipeline(runner=BundleBasedDirectRunner(), options=options)
    out = p | stream | EstimateStream(["base"], WindowSpec(60))
    out["estimates"] | beam.Map(lambda r: estimated.update(r["n"]))
    result = p.run()
    result.wait_until_finish()
    elapsed = time.perf_counter() - began
    query = result.metrics().query(MetricsFilter().with_name("estimated"))["distributions"]
    return {"path": "teststream", "reports": total, "per_message": per_message,
            "estimated": max((d.committed.max for d in query), default=0),
            "seconds": round(elapsed, 2), "reports_per_s": round(total / elapsed)}


def stages_path(total, per_message):
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
    decode = DecodeMessagesFn(60.0)
    list(decode.process(messages[0]))  # imports and caches out of the timing
    began = time.perf_counter()
    cells = [tv.value for m in messages for tv in decode.process(m)]
    decoded = time.perf_counter()
    states, dedup = {}, DeduplicateReportsFn()  # per state key: key, cell and id bucket
    counted = [a for cell in cells
               for _, a in dedup.process(cell, seen=states.setdefault(cell[0], State()))]
    deduplicated = time.perf_counter()
    combine = FrequencyOracleCombineFn()
    combine.merge_accumulators([combine.add_input(combine.create_accumulator(), a)
                                for a in counted])
    merged = time.perf_counter()

    def us(seconds):
        return round(seconds / total * 1e6, 2)

    return {"path": "stages", "reports": total, "per_message": per_message,
            "decode_us": us(decoded - began), "deduplicate_and_count_us":
            us(deduplicated - decoded), "merge_us": us(merged - deduplicated),
            "reports_per_s": round(total / (merged - began))}


def main(argv=None):

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reports", type=int, default=200_000)
    parser.add_argument("--per_message", type=int, default=1000)
    parser.add_argument("--paths", default="pubsub_emulator,teststream,stages")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    paths = {"pubsub_emulator": emulator_path, "teststream": teststream_path,
             "stages": stages_path}
    for path in args.paths.split(","):
        load_before = os.getloadavg()[0]
        result = paths[path](args.reports, args.per_message)
        result.update(load_before=round(load_before, 2),
                      load_after=round(os.getloadavg()[0], 2), cores=os.cpu_count())
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
