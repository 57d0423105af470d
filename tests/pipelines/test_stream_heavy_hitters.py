"""``ldpflow stream --protocol``: windowed heavy hitters, exact against ``ldpflow
heavy-hitters`` on each window's reports (TestStream through the job's own wiring, and the
Pub/Sub emulator), for every protocol."""

from __future__ import annotations

import glob
import json
import time

import fastavro
import numpy as np
import pytest

from ldpflow.pipelines import heavy_hitters, simulate, stream
from tests import wire_support as formats
from tests.pipelines.test_stream_pubsub import emulator  # noqa: F401 - the fixture

beam = pytest.importorskip("apache_beam")
from apache_beam.io.gcp.pubsub import PubsubMessage  # noqa: E402
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner  # noqa: E402
from apache_beam.testing.test_stream import TestStream  # noqa: E402
from apache_beam.transforms.window import TimestampedValue  # noqa: E402

pytestmark = pytest.mark.pipeline

#: The batch job's test configurations (tests/pipelines/test_heavy_hitters.py).
PROTOCOL_FLAGS = {
    "pem": ["--bits", "32", "--k", "8", "--query_limit", "1024"],
    "spm": ["--bits", "16", "--k", "8"],
    "mcm": ["--bits", "16", "--k", "8"],
    "treehist": ["--bits", "16", "--k", "8", "--step_bits", "8"],
    "sfp": ["--bits", "16", "--k", "8", "--fragment_bits", "8", "--hash_bits", "4"],
}
WINDOW_MS = 60_000
#: What only the stream's document has, and what depends on how the reports arrived.
STREAM_ONLY = {"window_start", "window_end", "pane", "pane_index", "kept_bytes"}


def simulated_records(tmp_path, name, users, seed=3):
    """Simulated reports of ``name``, as records, with event times in two windows (the
    reports alternate between [0, 60 s) and [60 s, 120 s))."""
    simulate.run(["--oracle", name, *PROTOCOL_FLAGS[name], "--epsilon", "4",
                  "--domain_size", "300", "--users", str(users), "--seed", str(seed),
                  "--output", str(tmp_path / "r"), "--shards", "2"])
    records = []
    for path in sorted(glob.glob(f"{tmp_path}/r/*.avro")):
        with open(path, "rb") as f:
            records += list(fastavro.reader(f))
    rng = np.random.default_rng(seed)
    for i, record in enumerate(records):
        record["event_time"] = (i % 2) * WINDOW_MS + int(rng.integers(0, WINDOW_MS))
    return records


def batch_document(records, folder, name):
    """``ldpflow heavy-hitters`` on ``records`` (written to one file)."""
    folder.mkdir(parents=True)
    with open(folder / "reports.avro", "wb") as f:
        formats.write_avro(f, records)
    heavy_hitters.run([f"--input={folder}/reports.avro", f"--output={folder}/hh",
                       f"--protocol={name}"])
    with open(folder / "hh" / "heavy_hitters.json") as f:
        return json.load(f)


def comparable(document):
    """The document without what depends on arrival (a pass's ``batches``) or belongs to
    one of the two jobs (window fields, timings)."""
    out = {k: v for k, v in document.items() if k not in STREAM_ONLY | {"elapsed_seconds"}}
    out["passes"] = [{k: v for k, v in s.items() if k != "batches"} for s in out["passes"]]
    out["results"] = [{**r, "passes": [{k: v for k, v in s.items() if k != "batches"}
                                       for s in r["passes"]]} for r in out["results"]]
    return out


def run_stream(argv, messages):
    """The stream job's own parse and wiring, on a TestStream of ``messages``."""
    options, opts, methods, heavy = stream.parse(argv)
    pipeline = beam.Pipeline(runner=BundleBasedDirectRunner(), options=options)
    source = pipeline | "Messages" >> messages
    stream.build(pipeline, opts, methods, source, heavy)
    pipeline.run().wait_until_finish()


def read_panes(folder):
    panes = []
    for path in sorted(glob.glob(f"{folder}/heavy_hitters-*.json")):
        with open(path) as f:
            panes.append(json.load(f))
    return panes


@pytest.mark.parametrize("name", sorted(PROTOCOL_FLAGS))
def test_each_window_equals_the_batch_job_on_its_reports(tmp_path, name):
    records = simulated_records(tmp_path, name, users=12_000)
    chunks = [records[i:i + 1500] for i in range(0, len(records), 1500)]
    bad = [dict(records[0], report_id="bad-1", bucket=10**6)]  # a refused report
    events = [TimestampedValue(PubsubMessage(formats.encode_message(c), {}), 1)
              for c in chunks]
    events.append(TimestampedValue(PubsubMessage(formats.encode_message(chunks[2]), {}), 2))
    events.append(TimestampedValue(PubsubMessage(formats.encode_message(bad), {}), 3))
    messages = (TestStream().advance_watermark_to(0).add_elements(events)
                .advance_watermark_to(3 * WINDOW_MS // 1000).advance_watermark_to_infinity())
    run_stream(["--subscription=projects/p/subscriptions/s", f"--output={tmp_path}/panes",
                "--window_size=60", f"--protocol={name}"], messages)
    panes = read_panes(tmp_path / "panes")
    assert [(p["window_start"], p["pane"]) for p in panes] == [(0, "ON_TIME"),
                                                               (WINDOW_MS, "ON_TIME")]
    for pane in panes:
        start = pane["window_start"]
        mine = [r for r in records if start <= r["event_time"] < start + WINDOW_MS]
        expected = batch_document(mine, tmp_path / f"batch-{start}", name)
        assert pane["n"] == len(mine) and pane["error"] is None
        assert pane["top_k"], "the window found no heavy hitter"
        # a copy is counted in the window of its event time, a refused report in that of
        # its message
        assert pane["duplicates"] == sum(1 for r in chunks[2]
                                         if start <= r["event_time"] < start + WINDOW_MS)
        assert pane["dead_letters"]["total"] == (1 if start == 0 else 0)
        assert pane["records"] == pane["n"] + pane["duplicates"] + pane["dead_letters"]["total"]
        got = comparable(pane)
        for field in ("records", "duplicates", "dead_letters"):  # checked above
            got.pop(field)
            expected.pop(field)
        got["results"][0]["dead_letters"] = expected["results"][0]["dead_letters"]
        assert got == comparable(expected)  # same candidates, counts and heavy hitters
        assert 0 < pane["kept_bytes"] < 40 * len(mine)


def test_flags_check_the_reports_configuration(tmp_path):
    """A stated parameter the reports do not have makes them dead letters, counted in
    their window's document (the stream cannot fail a job on its first report)."""
    records = simulated_records(tmp_path, "treehist", users=2000)
    messages = (TestStream().advance_watermark_to(0)
                .add_elements([TimestampedValue(PubsubMessage(
                    formats.encode_message(records), {}), 1)])
                .advance_watermark_to_infinity())
    run_stream(["--subscription=projects/p/subscriptions/s", f"--output={tmp_path}/panes",
                "--window_size=60", "--protocol=treehist", "--k=8", "--bits=16",
                "--step_bits=4"], messages)
    (pane,) = read_panes(tmp_path / "panes")  # the messages' window: their dead letters
    assert pane["n"] == 0 and pane["error"] == "no valid reports"
    assert pane["dead_letters"] == {"total": 2000, "by_reason": {
        "parameter mismatch: step_bits 8, expected 4": 2000}}


@pytest.mark.parametrize("argv,message", [
    (["--k=8"], "--k is a heavy-hitter flag: give --protocol"),
    (["--protocol=pem", "--k=8"], "--k and --bits go together"),
    (["--protocol=pem", "--fragment_bits=4"], "--fragment_bits is not a parameter of pem"),
    (["--protocol=spm", "--survivors=4"], "--survivors: spm has no such server option"),
    (["--protocol=pem", "--expect_domain_size=8"],
     "--expect_domain_size is for frequency-oracle"),
    (["--protocol=pem", "--expect_epsilon=0"], "--expect_epsilon"),
    (["--protocol=pem", "--methods=base"], "--methods post-processes frequency estimates"),
    (["--protocol=pem", "--k=8", "--bits=99"], "ldpflow stream: error: "),
])
def test_bad_heavy_hitter_flags_are_one_line_usage_errors(argv, message, tmp_path):
    with pytest.raises(SystemExit) as caught:
        stream.parse(["--subscription=projects/p/subscriptions/s",
                      f"--output={tmp_path}", *argv])
    text = str(caught.value.code)
    assert message in text and text.startswith("ldpflow stream: error: ")
    assert "\n" not in text


# -- the emulator --------------------------------------------------------------------------


@pytest.mark.pubsub
@pytest.mark.parametrize("name", ["pem", "treehist"])
def test_stream_from_the_emulator_equals_the_batch_job(emulator, tmp_path, name):  # noqa: F811
    from google.cloud import pubsub_v1

    from ldpflow.testing.pubsub import cancel_streaming
    from tests.pipelines.test_stream_pubsub import pull_until, stream_topics

    subscription, check = stream_topics(emulator, f"hh-{name}", f"hh-{name}-out")
    records = simulated_records(tmp_path, name, users=8000)
    start = (int(time.time() * 1000) // WINDOW_MS - 5) * WINDOW_MS  # five minutes ago
    for record in records:  # one window
        record["event_time"] = start + record["event_time"] % WINDOW_MS
    result = stream.start([
        f"--subscription={subscription}", f"--output_topic={emulator.topic(f'hh-{name}-out')}",
        "--window_size=60", "--allowed_lateness=3600", f"--protocol={name}"])
    try:
        publisher = pubsub_v1.PublisherClient()
        futures = []
        for lo in range(0, len(records), 1000):
            body = formats.encode_message(records[lo:lo + 1000])
            futures.append(publisher.publish(emulator.topic(f"hh-{name}"), body))
            if lo == 2000:  # at-least-once: one batch arrives twice
                futures.append(publisher.publish(emulator.topic(f"hh-{name}"), body))
        for future in futures:
            future.result(timeout=30)
        panes = pull_until(check, lambda got: any(p["n"] >= len(records) for p in got))
    finally:
        cancel_streaming(result, emulator.topic(f"hh-{name}"))
    assert panes, "no heavy hitters arrived from the streaming job"
    final = max(panes, key=lambda p: p["n"])
    assert final["n"] == len(records)  # the batch that arrived twice changed nothing
    assert (final["window_start"], final["window_end"]) == (start, start + WINDOW_MS)
    expected = batch_document(records, tmp_path / "batch", name)
    got = comparable(final)
    for field in ("records", "duplicates"):
        got.pop(field)
        expected.pop(field)
    assert got == comparable(expected)
