"""``ldpflow stream`` against the real Pub/Sub emulator, compared with a batch run."""

from __future__ import annotations

import json
import threading
import time
import types

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


def stream_topics(emulator, reports, estimates):
    """Create the topics ``reports`` and ``estimates``; returns the job's subscription to
    the first and a check subscription to the second."""
    emulator.create_topic(reports)
    emulator.create_topic(estimates)
    return (emulator.create_subscription(f"{reports}-stream", reports),
            emulator.create_subscription(f"{estimates}-check", estimates))


def batch_result(input_pattern, output, methods="base,norm-sub"):
    """The one result of ``ldpflow estimate`` on the same reports (its estimates.json)."""
    from ldpflow.pipelines import estimate

    estimate.run([f"--input={input_pattern}", f"--output={output}", f"--methods={methods}"])
    with open(f"{output}/estimates.json") as f:
        (result,) = json.load(f)["results"]
    return result


def test_stream_from_the_emulator_equals_a_batch_run(emulator, tmp_path):
    from google.cloud import pubsub_v1

    from ldpflow.pipelines import stream

    subscription, estimates_sub = stream_topics(emulator, "reports", "estimates")

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

    expected = batch_result(f"{tmp_path}/reports.avro", f"{tmp_path}/batch")
    assert expected["n"] == n
    assert final["estimates"]["base"] == expected["estimates"]["base"]  # exact: same counts
    assert final["estimates"]["norm-sub"] == expected["estimates"]["norm-sub"]


def test_a_backlog_of_many_bundles_arrives_whole_and_exact(emulator):
    """A backlog of 800 small messages (several of the reader's bundles, each pulled while
    the one before is decoded; one message twice) gives the estimate of the reports
    themselves, exactly: nothing pulled ahead is lost or counted twice."""
    from google.cloud import pubsub_v1

    from ldpflow.pipelines import stream
    from ldpflow.pipelines.pubsub_client import READER_BUNDLE_MESSAGES

    subscription, estimates_sub = stream_topics(emulator, "backlog", "backlog-estimates")
    oracle = ldpflow.oracle("grr", epsilon=1.0, domain_size=64)
    rng = np.random.default_rng(7)
    per_message, messages = 10, 800
    assert messages > 2 * READER_BUNDLE_MESSAGES
    n = per_message * messages
    window_ms = 60_000
    start = (int(time.time() * 1000) // window_ms - 5) * window_ms
    reports = oracle.perturb(rng.integers(0, 64, n), rng=rng)
    records = reports_to_records(oracle, reports, [f"r{i}" for i in range(n)],
                                 [f"u{i}" for i in range(n)],
                                 start + rng.integers(0, window_ms, n))
    publisher = pubsub_v1.PublisherClient()
    topic = emulator.topic("backlog")
    bodies = [formats.encode_message(records[lo:lo + per_message])
              for lo in range(0, n, per_message)]
    futures = [publisher.publish(topic, body) for body in bodies + [bodies[123]]]
    for future in futures:
        future.result(timeout=60)
    result = stream.start([
        f"--subscription={subscription}", f"--output_topic={emulator.topic('backlog-estimates')}",
        "--window_size=60", "--allowed_lateness=3600", "--methods=base"])
    try:
        panes = pull_until(estimates_sub, lambda got: any(p["n"] >= n for p in got))
    finally:
        cancel_streaming(result, topic)
    assert panes, "no estimates arrived from the streaming job"
    final = max(panes, key=lambda p: p["n"])
    assert final["n"] == n
    expected = oracle.estimate(oracle.aggregate(reports)).frequencies.tolist()
    assert final["estimates"]["base"] == expected


# -- the local recipe: ldpflow pubsub create / stream / pubsub publish / pubsub pull -----------
#: Fields of a pane that a batch result does not have (or has with run-time values).
PANE_FIELDS = {"window_start", "window_end", "pane", "pane_index"}


def test_local_recipe_create_stream_publish_pull_ends_in_the_batch_estimate(
        emulator, tmp_path, capsys):
    """The README's steps, at a smaller scale: ``pull --until_reports N --final_only``
    prints one pane, and that pane is the batch estimate of the same files."""
    from ldpflow.pipelines import pubsub, simulate, stream

    topic, estimates = emulator.topic("recipe-reports"), emulator.topic("recipe-estimates")
    subscription = emulator.subscription("recipe-stream")
    pull_sub = emulator.subscription("recipe-pull")
    create = ["create", f"--topic={topic}", f"--subscription={subscription}",
              f"--output_topic={estimates}", f"--output_subscription={pull_sub}"]
    assert pubsub.run(create) == 0
    assert pubsub.run(create) == 0  # idempotent: what exists is kept
    created = capsys.readouterr().out.splitlines()
    assert created[:4] == [f"created {topic}", f"created {subscription}",
                           f"created {estimates}", f"created {pull_sub}"]
    assert created[4:] == [f"exists  {topic}", f"exists  {subscription}",
                           f"exists  {estimates}", f"exists  {pull_sub}"]

    users, methods = 3000, "norm-sub,base-cut"
    simulate.run(["--oracle=olh", "--epsilon=1", "--domain_size=64", f"--users={users}",
                  "--seed=11", "--shards=2", f"--output={tmp_path}/reports"])
    result = stream.start([
        f"--subscription={subscription}", f"--output_topic={estimates}",
        "--window_size=5", "--allowed_lateness=300", f"--methods={methods}",
    ])
    try:
        started_ms = int(time.time() * 1000)
        assert pubsub.run(["publish", f"--topic={topic}", f"--input={tmp_path}/reports/*.avro",
                           "--batch_size=500", "--event_times=window:5"]) == 0
        published_ms = int(time.time() * 1000)
        assert capsys.readouterr().out.strip() == (
            f"published {users} reports in 6 messages to {topic}")
        assert pubsub.run(["pull", f"--subscription={pull_sub}", f"--until_reports={users}",
                           "--final_only", "--timeout=120", f"--wake_topic={topic}",
                           "--wake_seconds=1"]) == 0
        (line,) = capsys.readouterr().out.splitlines()
        # Nothing more comes: a pull for more reports than were published times out (exit 1).
        with pytest.raises(SystemExit) as excinfo:
            pubsub.run(["pull", f"--subscription={pull_sub}", f"--until_reports={users + 1}",
                        "--timeout=3"])
        assert excinfo.value.code == 1
        (error,) = capsys.readouterr().err.strip().splitlines()
        assert error.startswith("ldpflow pubsub pull: error: --timeout 3 s passed before the "
                                f"estimates held --until_reports {users + 1} reports")
    finally:
        cancel_streaming(result, topic)
    final = json.loads(line)
    # Every report was given a time in the window of publishing's start: one window.
    assert final["window_end"] - final["window_start"] == 5000
    assert final["window_start"] <= published_ms and final["window_end"] > started_ms
    assert final["n"] == users

    expected = batch_result(f"{tmp_path}/reports/*.avro", f"{tmp_path}/batch", methods)
    assert set(expected) - set(final) == {"dead_letters"} and expected["dead_letters"] == 0
    assert set(final) - set(expected) == PANE_FIELDS
    same = {k: v for k, v in final.items() if k not in PANE_FIELDS}
    # Byte-identical but for the run-time fields: counts, estimates, errors, intervals.
    assert json.dumps(same, sort_keys=True) == json.dumps(
        {k: expected[k] for k in same}, sort_keys=True)


def test_stream_with_a_missing_subscription_fails_in_one_line(emulator, capsys):
    from ldpflow.pipelines import stream

    missing = emulator.subscription("no-such-subscription")
    with pytest.raises(SystemExit) as excinfo:
        stream.start([f"--subscription={missing}",
                      f"--output_topic={emulator.topic('estimates')}"])
    assert excinfo.value.code == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (f"ldpflow stream: error: --subscription {missing} does not exist on the "
                    f"Pub/Sub emulator at {emulator.host}; create it: ldpflow pubsub create "
                    f"--topic projects/{emulator.project}/topics/TOPIC --subscription {missing}")


def test_stream_with_a_missing_output_topic_fails_in_one_line(emulator, capsys):
    from ldpflow.pipelines import stream

    emulator.create_topic("lonely")
    subscription = emulator.create_subscription("lonely-stream", "lonely")
    missing = emulator.topic("no-such-topic")
    with pytest.raises(SystemExit) as excinfo:
        stream.start([f"--subscription={subscription}", f"--output_topic={missing}"])
    assert excinfo.value.code == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"ldpflow stream: error: --output_topic {missing} does not exist")


def test_publish_to_a_missing_topic_fails_in_one_line(emulator, tmp_path, capsys):
    from ldpflow.pipelines import pubsub

    (tmp_path / "r.jsonl").write_text("")
    missing = emulator.topic("no-such-topic")
    with pytest.raises(SystemExit) as excinfo:
        pubsub.run(["publish", f"--topic={missing}", f"--input={tmp_path}/r.jsonl"])
    assert excinfo.value.code == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"ldpflow pubsub publish: error: --topic {missing} does not exist")


def test_a_large_message_and_a_bad_timestamp_are_dead_letters_and_windows_fire(emulator):
    from google.cloud import pubsub_v1

    from ldpflow.pipelines import stream

    subscription, estimates_sub = stream_topics(emulator, "hostile", "hostile-estimates")
    emulator.create_topic("hostile-dead")
    dead_sub = emulator.create_subscription("hostile-dead-check", "hostile-dead")
    oracle = ldpflow.oracle("grr", epsilon=1.0, domain_size=16)
    rng = np.random.default_rng(7)
    n = 2000
    start = (int(time.time() * 1000) // 60_000 - 3) * 60_000
    reports = oracle.perturb(rng.integers(0, 16, n), rng=rng)
    records = reports_to_records(oracle, reports, [f"h{i}" for i in range(n)],
                                 [f"u{i}" for i in range(n)], np.full(n, start + 10))
    publisher = pubsub_v1.PublisherClient()
    topic = emulator.topic("hostile")
    futures = [  # all waiting before the job starts: its first pull has every one
        publisher.publish(topic, b"\x00" * 9_692_245, ts=str(start)),  # over 4 MiB
        publisher.publish(topic, formats.encode_message(records[:10]), ts="not-a-time"),
        publisher.publish(topic, formats.encode_message(records[:1000]), ts=str(start)),
        publisher.publish(topic, formats.encode_message(records[1000:]), ts=str(start)),
    ]
    for future in futures:
        future.result(timeout=60)
    result = stream.start([
        f"--subscription={subscription}", f"--output_topic={emulator.topic('hostile-estimates')}",
        "--window_size=60", "--allowed_lateness=3600", "--methods=base",
        "--timestamp_attribute=ts", f"--dead_letter_topic={emulator.topic('hostile-dead')}",
    ])
    try:
        panes = pull_until(estimates_sub, lambda got: any(p["n"] >= n for p in got),
                           timeout=60)
        dead = pull_until(dead_sub, lambda got: len(got) >= 2, timeout=30)
    finally:
        cancel_streaming(result, emulator.topic("hostile"))
    assert panes, "the stream stalled: no estimates arrived"
    final = max(panes, key=lambda p: p["n"])
    assert final["n"] == n  # exact: neither hostile message counted, nothing lost
    assert final["window_start"] == start
    expected = oracle.estimate(oracle.aggregate(reports)).frequencies.tolist()
    assert final["estimates"]["base"] == expected
    assert sorted((d["reason"].split(":")[0], d["count"]) for d in dead) == [
        ("message attribute 'ts' missing or invalid", 10), ("policy", 1)]  # too long a line


def test_pull_takes_many_large_messages(emulator, capsys):
    """``ldpflow pubsub pull`` past 4 MiB in one pull (25 panes of 400 kB) and a 9 MB
    message: Pub/Sub's own limit is 10 MB."""
    from google.cloud import pubsub_v1

    from ldpflow.pipelines import pubsub

    topic = emulator.create_topic("big-panes")
    subscription = emulator.create_subscription("big-panes-pull", "big-panes")
    publisher = pubsub_v1.PublisherClient()
    bodies = [json.dumps({"pane": i, "pad": "x" * 400_000}).encode() for i in range(25)]
    bodies.append(b"\x00" * 9_000_000)
    for future in [publisher.publish(topic, body) for body in bodies]:
        future.result(timeout=60)
    capsys.readouterr()
    assert pubsub.run(["pull", f"--subscription={subscription}", "--max_messages=26",
                       "--timeout=30"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 26
    assert sorted(json.loads(line)["pane"] for line in lines if line.startswith("{")) == \
        list(range(25))


def test_the_direct_runners_reader_pulls_many_messages_at_a_time():
    """Beam's direct-runner reader asks for 10 messages a pull (a bundle each); its
    subscriber class asks for READER_PULL_MESSAGES, and takes a larger request as it is."""
    from ldpflow.pipelines.pubsub_client import READER_PULL_MESSAGES, _reader_subscriber_class

    class Recorder:
        def pull(self, *args, **kwargs):
            return kwargs

    client = _reader_subscriber_class(Recorder)()
    assert READER_PULL_MESSAGES == 1000  # Pub/Sub's largest pull
    assert client.pull(subscription="s", max_messages=10)["max_messages"] == 1000
    assert client.pull(subscription="s", max_messages=5000)["max_messages"] == 5000
    assert "max_messages" not in client.pull(request={"subscription": "s"})


class FakeSubscription:
    """A subscription's pulls as the emulator answers them (at most ``cap`` messages a
    pull); records every call."""

    def __init__(self, count, cap=100):
        self.waiting = [types.SimpleNamespace(ack_id=f"a{i}", message=i) for i in range(count)]
        self.cap, self.calls, self.handed_back = cap, [], []
        self.lock = threading.Lock()

    def client(self):
        fake = self

        class Base:
            def pull(self, **kwargs):
                fake.calls.append(kwargs)
                with fake.lock:
                    n = min(kwargs["max_messages"], fake.cap)
                    taken, fake.waiting[:n] = fake.waiting[:n], []
                return types.SimpleNamespace(received_messages=taken)

            def modify_ack_deadline(self, subscription, ack_ids, ack_deadline_seconds):
                assert ack_deadline_seconds == 0
                fake.handed_back += ack_ids

        return _reader_subscriber_class_for(Base)()


def _reader_subscriber_class_for(base):
    from ldpflow.pipelines.pubsub_client import _reader_subscriber_class

    return _reader_subscriber_class(base)


def _drain(client, pulls):
    got = []
    for _ in range(pulls):
        got += [m.message for m in client.pull(subscription="s", max_messages=10,
                                               timeout=5).received_messages]
    return got


def test_the_reader_gathers_a_bundle_from_the_messages_waiting():
    """The emulator answers 100 messages a pull: the reader's bundle takes what is waiting
    by pulls that return at once, up to READER_BUNDLE_MESSAGES, and stops at an empty one."""
    from ldpflow.pipelines import pubsub_client

    fake = FakeSubscription(pubsub_client.READER_BUNDLE_MESSAGES + 50)
    client = fake.client()
    first = client.pull(subscription="s", max_messages=10, timeout=5).received_messages
    assert [m.message for m in first] == list(range(pubsub_client.READER_BUNDLE_MESSAGES))
    assert fake.calls[0] == {"subscription": "s", "max_messages": 1000, "timeout": 5}
    assert all(c["return_immediately"] for c in fake.calls[1:pubsub_client.
                                                          READER_BUNDLE_MESSAGES // 100])
    rest = client.pull(subscription="s", max_messages=10, timeout=5).received_messages
    assert [m.message for m in rest] == list(range(pubsub_client.READER_BUNDLE_MESSAGES,
                                                   pubsub_client.READER_BUNDLE_MESSAGES + 50))


def test_the_reader_pulls_the_next_bundle_ahead_and_loses_nothing():
    """After a bundle with messages the next is pulled on a thread while the job works:
    every message arrives once, in order, and an idle subscription gives empty bundles."""
    fake = FakeSubscription(2_345)
    client = fake.client()
    got = _drain(client, 12)
    assert got == list(range(2_345))
    assert fake.handed_back == []


def test_a_bundle_pulled_ahead_and_not_taken_is_handed_back(monkeypatch):
    """A cancelled reader takes no more bundles: what it pulled ahead goes back to Pub/Sub
    (ack deadline 0, delivered again at once), and a later pull starts afresh."""
    from ldpflow.pipelines import pubsub_client

    monkeypatch.setattr(pubsub_client, "UNCLAIMED_SECONDS", 0.05)
    fake = FakeSubscription(450, cap=100)
    client = fake.client()
    first = client.pull(subscription="s", max_messages=10, timeout=5).received_messages
    assert len(first) == 300
    deadline = time.monotonic() + 10
    while len(fake.handed_back) < 150 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fake.handed_back == [f"a{i}" for i in range(300, 450)]
    fake.waiting = [types.SimpleNamespace(ack_id=f"b{i}", message=i) for i in range(300, 450)]
    again = client.pull(subscription="s", max_messages=10, timeout=5).received_messages
    assert [m.message for m in again] == list(range(300, 450))


def test_a_failed_pull_ahead_raises_in_the_reader():
    """A Pub/Sub failure of a pull made ahead (on its thread) is raised by the reader's
    next pull."""

    class Refused(RuntimeError):
        pass

    fake = FakeSubscription(150)
    client = fake.client()
    pull = type(client).__mro__[1].pull

    def pull_or_refuse(self, **kwargs):
        if len(fake.calls) == 3:  # 100, then 50 and none at once: the fourth is ahead
            fake.calls.append(kwargs)
            raise Refused("no")
        return pull(self, **kwargs)

    type(client).__mro__[1].pull = pull_or_refuse
    assert len(client.pull(subscription="s", max_messages=10,
                           timeout=5).received_messages) == 150
    with pytest.raises(Refused):
        client.pull(subscription="s", max_messages=10, timeout=5)
    assert len(fake.calls) == 4
