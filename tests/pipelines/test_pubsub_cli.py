"""``ldpflow pubsub`` and ``ldpflow stream``'s Pub/Sub errors, without the emulator.

What needs a running emulator (create, publish, pull end to end) is in
``test_stream_pubsub.py``.
"""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

import ldpflow
from ldpflow.pipelines import pubsub
from ldpflow.schemas import compact_schema
from ldpflow.wire import avro, formats

TOPIC = "projects/ldpflow-dev/topics/reports"
SUBSCRIPTION = "projects/ldpflow-dev/subscriptions/reports-stream"


def usage_line(excinfo) -> str:
    """The one line of a usage error (``SystemExit`` with text: the CLI exits 2)."""
    code = excinfo.value.code
    assert isinstance(code, str), code
    assert "\n" not in code
    return code


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: nothing listens


@pytest.fixture
def no_pubsub(monkeypatch, tmp_path):
    """No emulator and no Google Cloud credentials (whatever this machine has)."""
    monkeypatch.delenv("PUBSUB_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-such-key.json"))


@pytest.mark.parametrize("argv, flag", [
    (["create", "--topic", "projects/P/topics/reports"], "--topic"),
    (["create", "--topic", "reports"], "--topic"),
    (["create", "--topic", TOPIC, "--subscription", "projects/ldpflow-dev/subscriptions/S"],
     "--subscription"),
    (["create", "--topic", TOPIC, "--subscription", "projects/ldpflow-dev/topics/reports"],
     "--subscription"),
    (["publish", "--topic", "projects/ldpflow-dev/topics/goog-x", "--input", "x.avro"],
     "--topic"),
    (["pull", "--subscription", "projects/ldpflow-dev/subscriptions/a/b"], "--subscription"),
])
def test_bad_resource_name_is_a_one_line_usage_error(argv, flag):
    with pytest.raises(SystemExit) as excinfo:
        pubsub.run([*argv, "--emulator_host", "127.0.0.1:1"])
    line = usage_line(excinfo)
    assert line.startswith(f"ldpflow pubsub {argv[0]}: error: {flag}")


@pytest.mark.parametrize("argv, message", [
    (["create", "--topic", TOPIC, "--output_subscription", SUBSCRIPTION],
     "--output_subscription needs --output_topic"),
    (["create", "--topic", TOPIC, "--ack_deadline_seconds", "5"], "--ack_deadline_seconds"),
    (["publish", "--topic", TOPIC, "--input", "x.avro", "--batch_size", "0"], "--batch_size"),
    (["publish", "--topic", TOPIC, "--input", "x.avro", "--event_times", "spread:-1"],
     "--event_times"),
    (["publish", "--topic", TOPIC, "--input", "x.avro", "--event_times", "window"],
     "--event_times"),
    (["publish", "--topic", TOPIC, "--input", "x.avro", "--event_times", "now:5"],
     "--event_times"),
    (["pull", "--subscription", SUBSCRIPTION, "--until_reports", "0"], "--until_reports"),
    (["pull", "--subscription", SUBSCRIPTION, "--final_only"], "--final_only needs"),
    (["pull", "--subscription", SUBSCRIPTION, "--timeout", "0"], "--timeout"),
    (["pull", "--subscription", SUBSCRIPTION, "--wake_seconds", "0"], "--wake_seconds"),
    (["pull", "--subscription", SUBSCRIPTION, "--wake_topic", SUBSCRIPTION], "--wake_topic"),
    (["publish", "--topic", TOPIC], "--input"),
    (["push", "--topic", TOPIC], "unknown command 'push'; did you mean publish?"),
])
def test_bad_arguments_are_one_line_usage_errors(argv, message):
    with pytest.raises(SystemExit) as excinfo:
        pubsub.run([*argv, "--emulator_host", "127.0.0.1:1"] if argv[0] != "push" else argv)
    assert message in usage_line(excinfo)


def test_no_command_is_a_usage_error():
    with pytest.raises(SystemExit) as excinfo:
        pubsub.run([])
    assert "give a command" in usage_line(excinfo)


@pytest.mark.parametrize("argv", [
    ["create", "--topic", TOPIC, "--subscription", SUBSCRIPTION],
    ["publish", "--topic", TOPIC, "--input", "/nonexistent/*.avro"],
    ["pull", "--subscription", SUBSCRIPTION],
])
def test_production_is_refused_without_allow_production(no_pubsub, argv):
    with pytest.raises(SystemExit) as excinfo:
        pubsub.run(argv)
    line = usage_line(excinfo)
    assert "no Pub/Sub emulator given" in line and "--allow_production" in line
    assert "PUBSUB_EMULATOR_HOST" in line


def test_allow_production_without_credentials_fails_in_one_line(no_pubsub, capsys):
    pytest.importorskip("google.cloud.pubsub_v1")
    with pytest.raises(SystemExit) as excinfo:
        pubsub.run(["create", "--topic", TOPIC, "--allow_production"])
    assert excinfo.value.code == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert err.startswith("ldpflow pubsub create: error: no Pub/Sub emulator and no Google")
    assert "PUBSUB_EMULATOR_HOST" in err


def test_emulator_that_does_not_answer_fails_in_one_line(no_pubsub, capsys):
    host = f"127.0.0.1:{closed_port()}"
    with pytest.raises(SystemExit) as excinfo:
        pubsub.run(["create", "--topic", TOPIC, "--emulator_host", host])
    assert excinfo.value.code == 1
    err = capsys.readouterr().err.strip()
    assert err == (f"ldpflow pubsub create: error: no Pub/Sub emulator answers at "
                   f"--emulator_host={host}: start one (gcloud beta emulators pubsub start "
                   f"--host-port={host})")
    assert "PUBSUB_EMULATOR_HOST" not in os.environ  # --emulator_host set it meanwhile only


def test_help_shows_the_defaults(capsys):
    with pytest.raises(SystemExit) as excinfo:
        pubsub.run(["publish", "--help"])
    assert excinfo.value.code == 0
    out = capsys.readouterr().out
    assert "(default: 1000)" in out and "--allow_production" in out
    assert "--event_times" in out and "window:60" in out and "--emulator_host" in out


def test_rewrite_event_times_modes():
    now = 1_800_000_012_345
    times = np.array([5_000, 1_000, np.nan, 3_000])
    assert pubsub.rewrite_event_times(times, now, "now").tolist() == [now] * 4
    spread = pubsub.rewrite_event_times(times, now, "spread:10")
    assert spread.tolist() == [now, now - 10_000, now - 10_000, now - 5_000]  # order kept
    same = pubsub.rewrite_event_times(np.full(3, 7.0), now, "spread:1")
    assert same.tolist() == [now - 1_000, now - 500, now]  # equal times: by position
    kept = pubsub.rewrite_event_times(times, now, "from_file")
    assert np.array_equal(kept, times, equal_nan=True)
    assert pubsub.rewrite_event_times(np.array([]), now, "window:5").size == 0


def test_rewrite_event_times_window_holds_every_report_in_the_current_window():
    now = 1_800_000_012_345  # 12.345 s into a minute
    times = np.array([9, 0, 4, np.nan, 9])
    window = pubsub.rewrite_event_times(times, now, "window:60")
    start = 1_800_000_000_000
    assert window.tolist() == [start + 59_999, start, start + 26_666, start, start + 59_999]
    assert pubsub.DEFAULT_EVENT_TIMES == "window:60"
    for seconds in (0.5, 1, 7, 60, 3600):  # one fixed window of that size, whatever now is
        for now in (1_800_000_000_000, 1_800_000_012_345, 1_800_000_059_999):
            got = pubsub.rewrite_event_times(np.arange(1000.0), now, f"window:{seconds}")
            size = int(seconds * 1000)
            assert np.unique(got // size).size == 1 and got.min() <= now <= got.max()
            assert np.all(np.diff(got) >= 0) and got.max() - got.min() == size - 1


@pytest.mark.parametrize("text, parsed", [("now", ("now", 0.0)), ("from_file", ("from_file", 0.0)),
                                          ("spread:2.5", ("spread", 2.5)),
                                          ("window:60", ("window", 60.0))])
def test_parse_event_times(text, parsed):
    assert pubsub.parse_event_times(text) == parsed


def reports_file(tmp_path, fmt, oracle_key="oue", n=300):
    oracle = ldpflow.oracle(oracle_key, epsilon=1.0, domain_size=40)
    rng = np.random.default_rng(5)
    reports = oracle.perturb(rng.integers(0, 40, n), rng=rng)
    table = formats.reports_table(oracle, reports, [f"r{i}" for i in range(n)],
                                  [f"u{i}" for i in range(n)], np.arange(n) * 10)
    path = tmp_path / f"reports{ {'avro': '.avro', 'json': '.jsonl', 'parquet': '.parquet'}[fmt]}"
    with open(path, "wb") as f:
        formats.write_reports(f, fmt, table)
    return path, table, oracle


@pytest.mark.parametrize("fmt", formats.FORMATS)
@pytest.mark.parametrize("message_format,codec", [("avro", "deflate"), ("avro", "null"),
                                                  ("avro", "snappy"), ("json", "deflate")])
def test_a_file_becomes_messages_the_job_decodes_as_the_file(tmp_path, fmt, message_format,
                                                             codec):
    path, _, oracle = reports_file(tmp_path, fmt)
    with open(path, "rb") as f:
        (expected,) = list(formats.read_reports(f, fmt))
    table = pubsub._read_table(str(path), fmt)
    bodies = [body for body, _ in pubsub._messages(table, 128, message_format, codec)]
    if message_format == "avro":
        headers = [avro.read_header(io.BytesIO(body)) for body in bodies]
        assert {h.codec for h in headers} == {codec}
        assert all(h.schema == compact_schema("report") for h in headers)
    assert len(bodies) == 3  # 128 + 128 + 44 reports
    counts = None
    for body in bodies:
        for parsed in formats.decode_message(body):
            assert not parsed.dead_letters
            for batch in parsed.batches.values():
                acc = oracle.aggregate(batch.reports)
                counts = acc if counts is None else counts.merge(acc)
    (batch,) = expected.batches.values()
    assert counts.n == 300
    np.testing.assert_array_equal(counts.counts, oracle.aggregate(batch.reports).counts)


def test_a_batch_over_the_message_limit_is_split(tmp_path, monkeypatch):
    path, table, _ = reports_file(tmp_path, "avro")
    whole = len(formats.encode_message(table))
    one = len(formats.encode_message(table.slice(0, 1)))  # the schema and one report
    limit = one + (whole - one) // 3
    monkeypatch.setattr(pubsub, "MAX_MESSAGE_BYTES", limit)
    parts = list(pubsub._messages(table, table.num_rows, "avro", "deflate"))
    assert len(parts) >= 4 and all(len(body) <= limit for body, _ in parts)
    assert sum(rows.num_rows for _, rows in parts) == table.num_rows
    ids = [i for _, rows in parts for i in rows.column("report_id").to_pylist()]
    assert ids == table.column("report_id").to_pylist()  # every report once, in order


def test_a_file_that_is_not_reports_fails_in_one_line(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_bytes(b"{not json\n")
    with pytest.raises(pubsub.PubSubFailure, match="cannot read .*broken.jsonl as json"):
        pubsub._read_table(str(path), "json")


def test_check_name_accepts_what_the_emulator_and_beam_accept():
    assert pubsub.check_name(TOPIC, "topics", "--topic") == TOPIC
    pubsub.check_name("projects/example.com:my-project/topics/a.b~c+d%e_f", "topics", "--topic")
    for bad in ("projects/ldpflow-dev/topics/1abc", "projects/ldpflow_dev/topics/reports",
                "projects/ldpflow-dev/topics/", "projects//topics/reports"):
        with pytest.raises(ValueError, match="--topic"):
            pubsub.check_name(bad, "topics", "--topic")


# -- ldpflow stream: the README's line and what a new user meets first ------------------------
def test_stream_readme_placeholder_names_fail_with_one_line_status_2(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PUBSUB_EMULATOR_HOST"}
    env["GOOGLE_APPLICATION_CREDENTIALS"] = str(tmp_path / "no-such-key.json")
    done = subprocess.run(
        [sys.executable, "-m", "ldpflow.pipelines.cli", "stream",
         "--subscription", "projects/P/subscriptions/S", "--output_topic", "projects/P/topics/T"],
        capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("ldpflow stream: error: --subscription: the project of")


def test_stream_refuses_real_pubsub_without_allow_production(no_pubsub):
    from ldpflow.pipelines import stream

    with pytest.raises(SystemExit) as excinfo:
        stream.start([f"--subscription={SUBSCRIPTION}", f"--output_topic={TOPIC}"])
    line = usage_line(excinfo)
    assert line.startswith("ldpflow stream: error: no Pub/Sub emulator given: set "
                           "PUBSUB_EMULATOR_HOST")
    assert line.endswith("real Pub/Sub only with --allow_production")


@pytest.mark.parametrize("emulator", [None, "127.0.0.1:1"])
def test_stream_on_a_remote_runner_needs_allow_production(monkeypatch, emulator):
    """Dataflow reads real Pub/Sub whatever PUBSUB_EMULATOR_HOST says: refused, in one
    line, before anything is submitted (the same guard as ldpflow pubsub)."""
    from ldpflow.pipelines import stream

    if emulator is None:
        monkeypatch.delenv("PUBSUB_EMULATOR_HOST", raising=False)
    else:
        monkeypatch.setenv("PUBSUB_EMULATOR_HOST", emulator)
    with pytest.raises(SystemExit) as excinfo:
        stream.start([f"--subscription={SUBSCRIPTION}", f"--output_topic={TOPIC}",
                      "--runner=DataflowRunner", "--project=ldpflow-dev"])
    assert usage_line(excinfo) == ("ldpflow stream: error: --runner=DataflowRunner works on "
                                   "real Pub/Sub; real Pub/Sub only with --allow_production")


def test_stream_and_pubsub_share_one_production_guard():
    import inspect

    from ldpflow.pipelines import stream

    assert "guard_production(" in inspect.getsource(stream._check_pubsub)
    assert "guard_production(" in inspect.getsource(pubsub._connect)


def test_stream_without_emulator_or_credentials_fails_in_one_line(no_pubsub, capsys):
    pytest.importorskip("google.cloud.pubsub_v1")
    from ldpflow.pipelines import stream

    with pytest.raises(SystemExit) as excinfo:
        stream.start([f"--subscription={SUBSCRIPTION}", f"--output_topic={TOPIC}",
                      "--allow_production"])
    assert excinfo.value.code == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert err.startswith("ldpflow stream: error: no Pub/Sub emulator and no Google Cloud "
                          "credentials: set PUBSUB_EMULATOR_HOST")


def test_stream_emulator_that_does_not_answer_fails_in_one_line(monkeypatch, capsys):
    pytest.importorskip("google.cloud.pubsub_v1")
    from ldpflow.pipelines import stream

    host = f"127.0.0.1:{closed_port()}"
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", host)
    with pytest.raises(SystemExit) as excinfo:
        stream.start([f"--subscription={SUBSCRIPTION}", f"--output_topic={TOPIC}"])
    assert excinfo.value.code == 1
    assert capsys.readouterr().err.strip() == (
        f"ldpflow stream: error: no Pub/Sub emulator answers at PUBSUB_EMULATOR_HOST={host}: "
        f"start one (gcloud beta emulators pubsub start --host-port={host})")


def test_stream_bad_topic_name_is_a_usage_error():
    from ldpflow.pipelines import stream

    with pytest.raises(SystemExit) as excinfo:
        stream.start([f"--subscription={SUBSCRIPTION}",
                      "--output_topic=projects/ldpflow-dev/subscriptions/estimates"])
    assert usage_line(excinfo).startswith("ldpflow stream: error: --output_topic must be "
                                          "projects/PROJECT/topics/NAME")


def test_runtime_failure_message_is_one_line():
    exceptions = pytest.importorskip("google.api_core.exceptions")
    line = pubsub.failure_message(exceptions.NotFound("Subscription does not exist\nmore"))
    assert line.endswith("404 Subscription does not exist")
    assert pubsub.failure_message(ValueError("x")) is None
