"""``ldpflow stream`` against the real Pub/Sub emulator, compared with a batch run."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

import ldpflow
from ldpflow.testing.pubsub import EmulatorUnavailable, PubSubEmulator, cancel_streaming
from tests import wire_support as formats
from tests.wire_support import reports_to_records

pytestmark = [pytest.mark.pubsub, pytest.mark.pipeline]


@pytest.fixture(scope="module")
def emulator():
    try:
        with PubSubEmulator() as running:
            yield running
    except EmulatorUnavailable as exc:
        pytest.skip(f"Pub/Sub emulator unavailable: {exc}")


def pull_until(subscription, done, timeout=90.0):
    """Pull JSON messages until ``done(messages)`` or the timeout; returns them."""
    from google.api_core import exceptions
    from google.cloud import pubsub_v1

    received = []
    deadline = time.monotonic() + timeout
    with pubsub_v1.SubscriberClient() as client:
        while time.monotonic() < deadline and not done(received):
            try:
                response = client.pull(request={"subscription": subscription,
                                                "max_messages": 100}, timeout=3)
            except (exceptions.DeadlineExceeded, exceptions.RetryError):
                continue
            if response.received_messages:
                client.acknowledge(request={"subscription": subscription, "ack_ids": [
                    m.ack_id for m in response.received_messages]})
            received += [json.loads(m.message.data) for m in response.received_messages]
    return received


def test_stream_from_the_emulator_equals_a_batch_run(emulator, tmp_path):
    from google.cloud import pubsub_v1

    from ldpflow.pipelines import estimate, stream

    emulator.create_topic("reports")
    subscription = emulator.create_subscription("reports-stream", "reports")
    emulator.create_topic("estimates")
    estimates_sub = emulator.create_subscription("estimates-check", "estimates")

    oracle = ldpflow.oracle("olh", epsilon=1.0, domain_size=128)
    rng = np.random.default_rng(42)
    n = 6000
    now_ms = int(time.time() * 1000)
    window_ms = 60_000
    start = (now_ms // window_ms - 5) * window_ms  # a window five minutes ago
    reports = oracle.perturb(rng.integers(0, 128, n), rng=rng)
    records = reports_to_records(oracle, reports, [f"r{i}" for i in range(n)],
                                 [f"u{i}" for i in range(n)],
                                 start + rng.integers(0, window_ms, n))
    with open(tmp_path / "reports.avro", "wb") as f:
        formats.write_avro(f, records)

    result = stream.start([
        f"--subscription={subscription}", f"--output_topic={emulator.topic('estimates')}",
        "--window_size=60", "--allowed_lateness=3600", "--methods=base,norm-sub",
    ])
    try:
        publisher = pubsub_v1.PublisherClient()
        topic = emulator.topic("reports")
        futures = []
        for lo in range(0, n, 1000):
            body = formats.encode_message(records[lo:lo + 1000])
            futures.append(publisher.publish(topic, body))
            if lo == 2000:  # at-least-once: one batch arrives twice
                futures.append(publisher.publish(topic, body))
        for future in futures:
            future.result(timeout=30)
        panes = pull_until(estimates_sub, lambda got: any(p["n"] >= n for p in got))
    finally:
        cancel_streaming(result, emulator.topic("reports"))
    assert panes, "no estimates arrived from the streaming job"
    final = max(panes, key=lambda p: p["n"])
    assert final["n"] == n  # the duplicated batch changed nothing
    assert final["window_start"] == start and final["window_end"] == start + window_ms
    for pane in panes:
        assert abs(sum(pane["estimates"]["norm-sub"]) - 1) < 1e-9
        assert pane["n"] <= n

    batch = estimate.run([f"--input={tmp_path}/reports.avro", f"--output={tmp_path}/batch",
                          "--methods=base,norm-sub"])
    (expected,) = batch["results"]
    assert expected["n"] == n
    assert final["estimates"]["base"] == expected["estimates"]["base"]  # exact: same counts
    assert final["estimates"]["norm-sub"] == expected["estimates"]["norm-sub"]
