"""Streaming estimation with TestStream: windows, watermark, lateness, firings, duplicates."""

from __future__ import annotations

import json
import math
import typing

import numpy as np
import pytest

import ldpflow
from tests import wire_support as formats
from tests.wire_support import reports_to_records

beam = pytest.importorskip("apache_beam")
from apache_beam.io.gcp.pubsub import PubsubMessage  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions  # noqa: E402
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner  # noqa: E402
from apache_beam.testing.test_stream import TestStream  # noqa: E402
from apache_beam.testing.util import assert_that, equal_to  # noqa: E402
from apache_beam.transforms.window import TimestampedValue  # noqa: E402

from ldpflow.transforms.streaming import EstimateStream, WindowSpec, parse_event_time  # noqa: E402

pytestmark = pytest.mark.pipeline
ORACLE = ldpflow.oracle("olh", epsilon=1.0, domain_size=32)


def make_reports(prefix, times_s, seed):
    n = len(times_s)
    rng = np.random.default_rng(seed)
    reports = ORACLE.perturb(rng.integers(0, 32, n), rng=rng)
    records = reports_to_records(ORACLE, reports, [f"{prefix}{i}" for i in range(n)],
                                 [f"user-{prefix}{i}" for i in range(n)],
                                 (np.asarray(times_s) * 1000).astype(np.int64))
    return reports, records


def message(records, fmt="avro", attributes=None):
    return PubsubMessage(formats.encode_message(records, fmt), attributes or {})


def run_stream(stream, windows, *, checks, methods=("base", "norm-sub"), attribute=None):
    options = PipelineOptions([])
    options.view_as(StandardOptions).streaming = True
    with beam.Pipeline(runner=BundleBasedDirectRunner(), options=options) as p:
        out = p | stream | EstimateStream(list(methods), windows, timestamp_attribute=attribute)
        checks(out)


def pane_view(result):
    return (result["window_start"] // 1000, result["pane"], result["n"])


def test_windows_follow_event_time_and_duplicates_change_nothing():
    a_reports, a = make_reports("a", [5] * 40 + [50] * 20, seed=1)
    b_reports, b = make_reports("b", [61] * 30 + [119] * 10, seed=2)
    stream = (TestStream().advance_watermark_to(0)
              .add_elements([TimestampedValue(message(a), 1), TimestampedValue(message(a), 2)])
              .add_elements([TimestampedValue(message(b[:25]), 3)])
              .add_elements([TimestampedValue(message(b[20:] + a[:7]), 4)])  # overlaps again
              .advance_watermark_to(300)
              .advance_watermark_to_infinity())
    first = ORACLE.estimate(ORACLE.aggregate(a_reports)).frequencies.tolist()
    second = ORACLE.estimate(ORACLE.aggregate(b_reports)).frequencies.tolist()

    def checks(out):
        assert_that(out["estimates"] | beam.Map(pane_view),
                    equal_to([(0, "ON_TIME", 60), (60, "ON_TIME", 40)]), label="panes")
        assert_that(out["estimates"]
                    | beam.Map(lambda r: (r["window_start"], r["estimates"]["base"])),
                    equal_to([(0, first), (60000, second)]), label="exact")
        assert_that(out["estimates"]
                    | beam.Map(lambda r: math.isclose(sum(r["estimates"]["norm-sub"]), 1.0)),
                    equal_to([True, True]), label="consistent")

    run_stream(stream, WindowSpec(60), checks=checks)


def test_late_data_within_lateness_updates_and_beyond_is_dropped():
    _, on_time = make_reports("t", [10] * 30, seed=3)
    _, late = make_reports("l", [20] * 5, seed=4)
    _, too_late = make_reports("x", [30] * 7, seed=5)
    stream = (TestStream().advance_watermark_to(0)
              .add_elements([TimestampedValue(message(on_time), 10)])
              .advance_watermark_to(61)            # window [0, 60) fires ON_TIME with 30
              .add_elements([TimestampedValue(message(late), 62)])    # within 60 s lateness
              .add_elements([TimestampedValue(message(late), 63)])    # and redelivered
              .advance_watermark_to(200)           # past 60 + 60: the window is closed
              .add_elements([TimestampedValue(message(too_late), 201)])
              .advance_watermark_to_infinity())

    def checks(out):
        assert_that(out["estimates"] | beam.Map(pane_view),
                    equal_to([(0, "ON_TIME", 30), (0, "LATE", 35)]))

    run_stream(stream, WindowSpec(60, allowed_lateness=60), checks=checks)


def test_early_panes_accumulate():
    _, first = make_reports("e", [5] * 12, seed=6)
    _, second = make_reports("f", [6] * 8, seed=7)
    stream = (TestStream().advance_watermark_to(0)
              .add_elements([TimestampedValue(message(first), 5)])
              .advance_processing_time(20)          # early firing: 12 so far
              .add_elements([TimestampedValue(message(second), 6)])
              .advance_watermark_to(100)
              .advance_watermark_to_infinity())

    def checks(out):
        assert_that(out["estimates"] | beam.Map(pane_view),
                    equal_to([(0, "EARLY", 12), (0, "ON_TIME", 20)]))

    run_stream(stream, WindowSpec(60, early_firing=10), checks=checks)


def test_sliding_windows_count_each_report_in_every_window_it_lies_in():
    _, records = make_reports("s", [10] * 4 + [40] * 6 + [70] * 9, seed=8)
    stream = (TestStream().advance_watermark_to(0)
              .add_elements([TimestampedValue(message(records), 1)])
              .advance_watermark_to_infinity())

    def checks(out):
        assert_that(out["estimates"] | beam.Map(pane_view),
                    equal_to([(-30, "ON_TIME", 4), (0, "ON_TIME", 10), (30, "ON_TIME", 15),
                              (60, "ON_TIME", 9)]))

    run_stream(stream, WindowSpec(60, period=30), checks=checks)


def test_bad_messages_and_reports_are_dead_letters():
    _, good = make_reports("g", [5] * 10, seed=9)
    bad = [dict(good[0], report_id="bad", bucket=99)]
    stream = (TestStream().advance_watermark_to(0)
              .add_elements([TimestampedValue(message(good + bad, fmt="json"), 1),
                             TimestampedValue(PubsubMessage(b"\x00garbage", {}), 2)])
              .advance_watermark_to_infinity())

    def checks(out):
        assert_that(out["estimates"] | beam.Map(pane_view), equal_to([(0, "ON_TIME", 10)]),
                    label="estimates")
        assert_that(out["dead_letters"] | beam.Map(lambda d: d.reason.split(" (")[0]),
                    equal_to(["bucket outside [0, 4)",
                              "malformed message: neither Avro nor JSON"]), label="dead")

    run_stream(stream, WindowSpec(60), checks=checks)


def test_timestamp_attribute_sets_event_time():
    _, records = make_reports("m", [5] * 6, seed=10)
    stream = (TestStream().advance_watermark_to(0)
              .add_elements([TimestampedValue(message(records, attributes={"ts": "125000"}), 125),
                             TimestampedValue(message(records[:1], attributes={}), 126)])
              .advance_watermark_to_infinity())

    def checks(out):
        assert_that(out["estimates"] | beam.Map(pane_view), equal_to([(120, "ON_TIME", 6)]),
                    label="estimates")
        assert_that(out["dead_letters"] | beam.Map(lambda d: d.reason.split(":")[0]),
                    equal_to(["message attribute 'ts' missing or invalid"]), label="dead")

    run_stream(stream, WindowSpec(60), checks=checks, attribute="ts")


@pytest.mark.parametrize("text,ms", [("1700000000123", 1700000000123),
                                     ("2026-01-01T00:00:01Z", 1767225601000),
                                     ("2026-01-01T01:00:00.5+01:00", 1767225600500)])
def test_parse_event_time(text, ms):
    assert parse_event_time(text) == ms


def test_window_spec_validation():
    with pytest.raises(ValueError, match="window_size must be a multiple of window_period"):
        WindowSpec(60, period=25)
    with pytest.raises(ValueError, match="window_size must be > 0 seconds, got 0"):
        WindowSpec(0)
    with pytest.raises(ValueError, match="allowed_lateness must be >= 0"):
        WindowSpec(60, allowed_lateness=-1)


def test_hostile_messages_are_dead_letters_and_the_windows_keep_firing():
    _, good = make_reports("h", [5] * 8, seed=11)
    _, later = make_reports("k", [70] * 4, seed=12)
    nested = b'{"report_id": ' + b"[" * 1000 + b"]" * 1000 + b"}"
    hostile = [
        PubsubMessage(nested, {}),
        message([dict(good[0], report_id="e", epsilon=1000.0)], fmt="json"),
        message([dict(good[0], report_id="d", domain_size=2**40)], fmt="json"),
        message([dict(good[0], report_id="t", event_time=2**70)], fmt="json"),
        PubsubMessage(b"Obj\x01" + b"\xff" * 40, {}),  # an Avro magic and garbage
    ]
    stream = (TestStream().advance_watermark_to(0)
              .add_elements([TimestampedValue(message(good, fmt="json"), 1)]
                            + [TimestampedValue(m, 2) for m in hostile])
              .advance_watermark_to(65)  # the first window fires after the hostile messages
              .add_elements([TimestampedValue(message(later, fmt="json"), 70)])
              .advance_watermark_to_infinity())

    def checks(out):
        assert_that(out["estimates"] | beam.Map(pane_view),
                    equal_to([(0, "ON_TIME", 8), (60, "ON_TIME", 4)]), label="estimates")
        assert_that(out["dead_letters"] | beam.Map(lambda d: d.reason.split(":")[0]),
                    equal_to(["policy", "policy", "policy",
                              "malformed record", "unreadable Avro file"]), label="dead")

    run_stream(stream, WindowSpec(60), checks=checks)


def test_panes_carry_ibu_and_the_raw_estimates_intervals():
    reports, records = make_reports("u", [5] * 50, seed=9)
    stream = (TestStream().advance_watermark_to(0)
              .add_elements([TimestampedValue(message(records), 1)])
              .advance_watermark_to_infinity())
    est = ORACLE.estimate(ORACLE.aggregate(reports))
    from ldpflow.core import intervals
    from ldpflow.core.postprocess import postprocess

    want_ibu = tuple(postprocess(est, "ibu").tolist())
    bounds = intervals.confidence_intervals(est)
    want = (tuple(bounds.standard_errors.tolist()), tuple(bounds.low.tolist()),
            tuple(bounds.high.tolist()))

    def checks(out):
        assert_that(out["estimates"] | beam.Map(lambda r: tuple(r["estimates"]["ibu"])),
                    equal_to([want_ibu]), label="ibu")
        assert_that(out["estimates"]
                    | beam.Map(lambda r: (tuple(r["standard_errors"]),
                                          tuple(r["intervals"]["low"]),
                                          tuple(r["intervals"]["high"]))),
                    equal_to([want]), label="intervals")

    run_stream(stream, WindowSpec(60), checks=checks, methods=("base", "ibu"))


def test_max_reports_per_user_caps_each_window_on_its_own():
    rng = np.random.default_rng(12)
    n = 60
    users = np.repeat(np.arange(20), 3)  # 20 users, 3 reports each, in each window
    records = []
    for window_start in (0, 60):
        reports = ORACLE.perturb(rng.integers(0, 32, n), rng=rng)
        times = window_start + rng.integers(0, 50, n)
        records.append(reports_to_records(
            ORACLE, reports, [f"w{window_start}-{i}" for i in range(n)],
            [f"user-{u}" for u in users], (times * 1000).astype(np.int64)))
    # Arrival: a first batch with each user's first report, then the rest.
    first, rest = records[0][::3], [r for i, r in enumerate(records[0]) if i % 3]
    stream = (TestStream().advance_watermark_to(0)
              .add_elements([TimestampedValue(message(first), 1)])
              .add_elements([TimestampedValue(message(rest + records[1]), 2)])
              .advance_watermark_to_infinity())

    def kept(recs, cap):
        by_user: dict = {}
        for r in sorted(recs, key=lambda r: r["event_time"]):
            by_user.setdefault(r["user_id"], []).append(r)
        return [r for rs in by_user.values() for r in rs[:cap]]

    # Window 0: the first batch fills each user's cap of 1; window 60: earliest per user.
    want = {0: first, 60000: kept(records[1], 1)}
    expected = []
    for start, recs in want.items():
        batches, _ = formats.parse_records(recs)
        (batch,) = batches.values()
        estimate = ORACLE.estimate(ORACLE.aggregate(batch.reports)).frequencies.tolist()
        expected.append((start, len(recs), estimate))
    options = PipelineOptions([])
    options.view_as(StandardOptions).streaming = True
    with beam.Pipeline(runner=BundleBasedDirectRunner(), options=options) as p:
        out = p | stream | EstimateStream(["base"], WindowSpec(60), max_reports_per_user=1)
        assert_that(out["estimates"]
                    | beam.Map(lambda r: (r["window_start"], r["n"], r["estimates"]["base"])),
                    equal_to(expected))


def test_a_bad_streaming_cap_is_refused():
    with pytest.raises(ValueError, match="max_reports_per_user must be a positive integer"):
        EstimateStream(["base"], WindowSpec(60), max_reports_per_user=0)


def test_a_report_whose_id_hash_collides_is_counted_and_copies_are_not():
    from ldpflow.core.dedup import report_id_hashes
    from tests.core.test_dedup import printable_collision

    victim = "victim-report-01"
    attacker = printable_collision(victim)
    assert report_id_hashes([attacker])[0] == report_id_hashes([victim])[0]
    reports, records = make_reports("c", [5] * 6, seed=21)
    records[0] = dict(records[0], report_id=victim)
    records[1] = dict(records[1], report_id=attacker)
    stream = (TestStream().advance_watermark_to(0)
              .add_elements([TimestampedValue(message(records[1:2]), 1)])  # attacker first
              .add_elements([TimestampedValue(message(records), 2),  # then the victim
                             TimestampedValue(message(records[:3]), 3)])  # and copies
              .advance_watermark_to_infinity())
    expected = ORACLE.estimate(ORACLE.aggregate(reports)).frequencies.tolist()

    def checks(out):
        assert_that(out["estimates"] | beam.Map(lambda r: (r["n"], r["estimates"]["base"])),
                    equal_to([(6, expected)]))

    run_stream(stream, WindowSpec(60), checks=checks)


def test_an_unparseable_timestamp_attribute_is_a_dead_letter_and_windows_fire():
    _, records = make_reports("z", [5] * 6, seed=22)
    stream = (TestStream().advance_watermark_to(0)
              .add_elements([TimestampedValue(message(records[:2], attributes={"ts": "nope"}), 1),
                             TimestampedValue(message(records, attributes={"ts": "5000"}), 2)])
              .advance_watermark_to_infinity())

    def checks(out):
        assert_that(out["estimates"] | beam.Map(pane_view), equal_to([(0, "ON_TIME", 6)]),
                    label="estimates")
        assert_that(out["dead_letters"] | beam.Map(lambda d: (d.reason.split(":")[0], d.count)),
                    equal_to([("message attribute 'ts' missing or invalid", 2)]), label="dead")

    run_stream(stream, WindowSpec(60), checks=checks, attribute="ts")


class _UnhintedStateFn(beam.DoFn):
    """A stateful DoFn given no key type: Beam cannot know its key coder is deterministic."""

    SEEN = beam.transforms.userstate.ReadModifyWriteStateSpec("seen", beam.coders.PickleCoder())

    def process(self, element, seen=beam.DoFn.StateParam(SEEN)):  # noqa: B008 - Beam's form
        yield element


@pytest.mark.parametrize("cap", [None, 2])
def test_stateful_steps_have_deterministic_key_coders(caplog, cap):
    """Beam warns at construction when a stateful step's key coder may not be deterministic
    (on a distributed runner one key could then land in two states); none may remain."""
    import logging

    with caplog.at_level(logging.WARNING):
        control = beam.Pipeline(runner=BundleBasedDirectRunner())
        _ = (control | "Keys" >> beam.Create([("k", 1)])
             | "Map" >> beam.Map(lambda kv: kv).with_output_types(typing.Any)
             | beam.ParDo(_UnhintedStateFn()))
    assert any("may not be deterministic" in r.getMessage() for r in caplog.records)
    caplog.clear()
    options = PipelineOptions([])
    options.view_as(StandardOptions).streaming = True
    with caplog.at_level(logging.WARNING):
        p = beam.Pipeline(runner=BundleBasedDirectRunner(), options=options)
        _ = (p | TestStream().add_elements([message(make_reports("d", [1], seed=3)[1])])
             | EstimateStream(["base"], WindowSpec(60), max_reports_per_user=cap))
        stateful = [t for t in p.transforms_stack[0].parts[-1].parts
                    if t.full_label.rsplit("/", 1)[-1] in ("Deduplicate", "CapUsers")]
    assert [r.getMessage() for r in caplog.records
            if "deterministic" in r.getMessage()] == []
    assert len(stateful) == (1 if cap is None else 2)
    for transform in stateful:
        (pcoll,) = transform.inputs
        key_coder = beam.coders.registry.get_coder(pcoll.element_type).key_coder()
        assert key_coder.is_deterministic(), (transform.full_label, key_coder)


@pytest.mark.parametrize("bits", [0, 2, 4])
def test_decode_splits_by_cell_and_id_bucket_and_copies_share_a_state_key(bits):
    from ldpflow.transforms.streaming import ID_BUCKET_BITS, DecodeMessagesFn

    assert ID_BUCKET_BITS == 2  # the default: each seen-id state holds a quarter of a cell
    _, records = make_reports("s", [1] * 300 + [70] * 200, seed=4)
    body = message(records + records[:50] + records[400:])  # copies in both cells
    out = list(DecodeMessagesFn(60.0, bucket_bits=bits).process(body))
    places = [(tv.value[0], tv.timestamp) for tv in out]
    assert len(places) == len(set(places))  # one per cell and bucket with reports
    # 200 or more reports a cell: with 4 buckets none is empty but with odds of 1e-25
    assert len(places) == 2 * 2 ** bits if bits <= 2 else 2 < len(places) <= 32
    where = {}
    for tv in out:
        state_key, batch = tv.value
        cell = int(tv.timestamp.micros // 60_000_000)
        assert np.all(batch.event_times // 60_000 == cell)
        base, _, bucket = state_key.partition("#")
        assert json.loads(base)["oracle"] == "olh"
        if bits:
            assert np.all(batch.id_hashes >> np.uint64(64 - bits) == int(bucket))
        else:
            assert bucket == ""
        for rid in batch.report_ids.tolist():
            where.setdefault(rid, set()).add((state_key, cell))
    assert len(where) == 500  # every report, its copies with it: one state key each
    assert all(len(places) == 1 for places in where.values())


def _decoded(messages, join):
    """DecodeMessagesFn over one bundle of ``(message, timestamp)``: the cells as
    ``(state key, cell start, report ids in order)`` and the dead letters as ``(source,
    reason, timestamp)``, in output order."""
    from apache_beam.transforms.window import GlobalWindow
    from apache_beam.utils.timestamp import Timestamp

    from ldpflow.transforms.streaming import DecodeMessagesFn

    fn = DecodeMessagesFn(60.0, join=join)
    fn.start_bundle()
    out = []
    for m, t in messages:
        out += list(fn.process(m, Timestamp(t), GlobalWindow()))
    out += list(fn.finish_bundle())
    cells, dead = [], []
    for item in out:
        tagged = isinstance(item, beam.pvalue.TaggedOutput)
        value = item.value if tagged else item
        stamp = getattr(value, "timestamp", None)
        value = getattr(value, "value", value)
        if tagged:
            dead.append((value.source, value.reason, stamp))
        else:
            cells.append((value[0], stamp, value[1].report_ids.tolist()))
    return cells, dead


def test_joined_decode_gives_each_messages_rows_in_order_and_its_own_dead_letters():
    """A bundle's Avro messages are decoded as one container: the cells hold the messages'
    rows in arrival order (one element per cell and bucket, not one per message), and a
    run with a refused report is decoded message by message, so every dead letter names
    its message and has its timestamp."""
    _, a = make_reports("a", [5] * 300 + [70] * 100, seed=11)
    _, b = make_reports("b", [6] * 200, seed=12)
    good = [(PubsubMessage(formats.encode_message(part, "avro"), {}, message_id=f"m{i}"), i)
            for i, part in enumerate([a[:250], b, a[250:], a[:10]])]  # the last: copies
    per_message, none = _decoded(good, join=False)
    joined, none_joined = _decoded(good, join=True)
    assert none == none_joined == []
    assert len(joined) < len(per_message)  # joined: one element per cell and bucket
    by_place = {}
    for key, cell, ids in per_message:  # per message, in arrival order
        by_place.setdefault((key, cell), []).extend(ids)
    assert {(key, cell): ids for key, cell, ids in joined} == by_place
    bad = [dict(b[0], report_id="bad", bucket=99)]
    mixed = good[:2] + [(PubsubMessage(formats.encode_message(a[:5] + bad, "avro"), {},
                                       message_id="m-bad"), 7)] + good[2:]
    cells, dead = _decoded(mixed, join=True)
    expected_cells, expected_dead = _decoded(mixed, join=False)
    assert sorted(cells) == sorted(expected_cells)
    assert [d[:2] for d in dead] == [d[:2] for d in expected_dead] and len(dead) == 1
    # per message the letter keeps its message's timestamp implicitly; joined, explicitly
    assert dead[0][0] == "pubsub:m-bad" and dead[0][2].micros == 7_000_000


def test_join_avro_messages_only_joins_intact_containers_of_one_header():
    from ldpflow.wire import formats as wire
    from ldpflow.wire.messages import join_avro_messages

    _, a = make_reports("a", [5] * 20, seed=13)
    first, second = (formats.encode_message(part, "avro") for part in (a[:10], a[10:]))
    joined = join_avro_messages([first, second])
    keep = ("id_hashes", "report_ids")
    rows = [b.report_ids.tolist() for p in wire.decode_message(joined, "j", None, keep)
            for b in p.batches.values()]
    separate = [b.report_ids.tolist() for m in (first, second)
                for p in wire.decode_message(m, "s", None, keep) for b in p.batches.values()]
    assert rows == [separate[0] + separate[1]]
    assert join_avro_messages([first, second[:-3]]) is None  # a truncated block
    assert join_avro_messages([first, b"[{}]"]) is None  # not Avro
    other = second.replace(b"avro.codec", b"avro.codeX", 1)  # another header
    assert other != second and join_avro_messages([first, other]) is None


def test_without_deduplication_every_copy_counts():
    _, a = make_reports("a", [5] * 40, seed=14)
    options = PipelineOptions([])
    options.view_as(StandardOptions).streaming = True
    for deduplicate, n in ((True, 40), (False, 80)):
        stream = (TestStream().advance_watermark_to(0)
                  .add_elements([TimestampedValue(message(a), 1),
                                 TimestampedValue(message(a), 2)])
                  .advance_watermark_to_infinity())
        with beam.Pipeline(runner=BundleBasedDirectRunner(), options=options) as p:
            out = p | stream | EstimateStream(["base"], WindowSpec(60),
                                              deduplicate=deduplicate)
            assert_that(out["estimates"] | beam.Map(lambda r: r["n"]), equal_to([n]))


def test_a_joined_run_is_cut_at_join_bytes(monkeypatch):
    from ldpflow.transforms import streaming

    _, a = make_reports("a", [5] * 120, seed=15)
    good = [(PubsubMessage(formats.encode_message(a[lo:lo + 40], "avro"), {}), lo)
            for lo in range(0, 120, 40)]
    size = len(good[0][0].data)
    joined, _ = _decoded(good, join=True)
    monkeypatch.setattr(streaming, "JOIN_BYTES", 2 * size + size // 2)  # two a run
    cut, _ = _decoded(good, join=True)
    per_message, _ = _decoded(good, join=False)
    assert len(joined) < len(cut) < len(per_message)
    assert sorted(i for c in cut for i in c[2]) == sorted(i for c in joined for i in c[2])


def test_hash_order_is_the_stable_argsort():
    from ldpflow.transforms.streaming import _hash_order

    rng = np.random.default_rng(5)
    cases = [np.array([], np.uint64), np.array([7], np.uint64),
             rng.integers(0, 2**63, 1000).astype(np.uint64),  # distinct
             rng.integers(0, 50, 2000).astype(np.uint64),  # many ties
             np.zeros(5, np.uint64), np.array([3, 1, 3, 2, 1], np.uint64),
             np.array([9, 8, 7, 7], np.uint64)]  # one tie, at the end
    for hashes in cases:
        order, ordered = _hash_order(hashes)
        want = np.argsort(hashes, kind="stable")
        np.testing.assert_array_equal(order, want)
        np.testing.assert_array_equal(ordered, hashes[want])


def test_a_copy_within_one_message_keeps_the_first_to_arrive():
    reports, records = make_reports("w", [5] * 4, seed=31)
    # A later copy of report 0 with another payload, in the same message and cell.
    records[2] = dict(records[2], report_id=records[0]["report_id"])
    stream = (TestStream().advance_watermark_to(0)
              .add_elements([TimestampedValue(message(records), 1)])
              .advance_watermark_to_infinity())
    kept = reports[[0, 1, 3]]
    expected = ORACLE.estimate(ORACLE.aggregate(kept)).frequencies.tolist()

    def checks(out):
        assert_that(out["estimates"] | beam.Map(lambda r: (r["n"], r["estimates"]["base"])),
                    equal_to([(3, expected)]))

    run_stream(stream, WindowSpec(60), checks=checks)
