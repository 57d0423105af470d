"""Windowed heavy hitters: the per-window state without a pipeline (compact columns, merge
in any order, panes that read it unchanged, equal to the core's identify), then TestStream
panes: early, on time, late, sliding, capped."""

from __future__ import annotations

import numpy as np
import pytest

from ldpflow.core import codecs
from ldpflow.core import heavy_hitters as hh
from ldpflow.core.oracles import Reports
from ldpflow.wire.envelope import ReportBatch
from tests import wire_support as formats
from tests.core.heavy_hitter_contract import SMALL
from tests.wire_support import reports_to_records

beam = pytest.importorskip("apache_beam")
from apache_beam.io.gcp.pubsub import PubsubMessage  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions  # noqa: E402
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner  # noqa: E402
from apache_beam.testing.test_stream import TestStream  # noqa: E402
from apache_beam.testing.util import assert_that, equal_to  # noqa: E402
from apache_beam.transforms.window import TimestampedValue  # noqa: E402

from ldpflow.transforms import windowed_heavy_hitters as windowed  # noqa: E402
from ldpflow.transforms.streaming import Duplicates, WindowSpec  # noqa: E402
from ldpflow.transforms.windowed_heavy_hitters import (  # noqa: E402
    IdentifyHeavyHittersStream,
    PackedReports,
    WindowPasses,
    WindowPassesCombineFn,
    later_groups,
)

#: The core contract suite's small configuration per protocol (16-bit values, k = 3).
CONFIGS = SMALL


def protocol_of(name):
    return hh.PROTOCOLS[name](**CONFIGS[name])


def skewed(protocol, n, seed):
    """Reports of ``n`` users whose values are Zipf(1.3) (clear heavy hitters)."""
    rng = np.random.default_rng(seed)
    values = np.minimum(rng.zipf(1.3, n), 2**protocol.value_bits - 1).astype(np.uint64)
    users = [f"u{seed}-{i}" for i in range(n)]
    return protocol.perturb(values, users, rng), users


def batches_of(protocol, reports, pieces):
    cuts = np.linspace(0, len(reports), pieces + 1).astype(int)
    return [ReportBatch(hh_key(protocol), reports[a:b])
            for a, b in zip(cuts[:-1], cuts[1:], strict=True)]


def hh_key(protocol):
    from ldpflow.core.keys import ProtocolKey

    return ProtocolKey.heavy_hitters(protocol, "int")


# -- the state, without a pipeline -----------------------------------------------------------


@pytest.mark.parametrize("name", ["pem", "mcm", "sfp"])
def test_packed_reports_restore_columns_values_and_dtypes(name):
    protocol = protocol_of(name)
    reports, _ = skewed(protocol, 500, seed=1)
    part = reports[reports.columns["group"] == 0]
    packed = PackedReports(part)
    restored = packed.unpack()
    assert restored.columns.keys() == part.columns.keys()
    for column, values in part.columns.items():
        assert restored.columns[column].dtype == values.dtype
        np.testing.assert_array_equal(restored.columns[column], values)
    assert packed.columns["group"][0] == "constant"  # one group: its column held once
    assert packed.nbytes < sum(c.nbytes for c in part.columns.values())
    # joined: packed alike (one copy), or not (two groups' constants, narrower buckets)
    small = reports[(reports.columns["group"] == 1) & (reports.columns["seed"] % 2 == 0)]
    parts = [part, part, small]
    if "bucket" in small.columns:
        small.columns["bucket"][:] = 0
    joined = PackedReports.join([PackedReports(p) for p in parts]).unpack()
    whole = Reports.concat(parts)
    for column, values in whole.columns.items():
        assert joined.columns[column].dtype == values.dtype
        np.testing.assert_array_equal(joined.columns[column], values)


@pytest.mark.parametrize("run", [None, 500])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_shards_merged_in_any_order_equal_the_core_identify(name, run, monkeypatch):
    if run is not None:  # pass 0's own groups counted in runs of 500, not at the pane
        monkeypatch.setattr(windowed, "COUNT_RUN", run)
    protocol = protocol_of(name)
    reports, _ = skewed(protocol, 6000, seed=2)
    batches = batches_of(protocol, reports, 7)
    fn = WindowPassesCombineFn()
    fn.setup()
    shards = []
    for i in range(3):
        acc = fn.create_accumulator()
        for batch in batches[i::3]:
            acc = fn.add_input(acc, batch)
        shards.append(acc)
    acc = fn.add_input(shards[0], Duplicates(5))
    merged = fn.merge_accumulators([shards[2], acc, shards[1]])
    first = fn.extract_output(merged)
    second = fn.extract_output(merged)  # a pane reads the state; it does not change it
    assert first == second
    expected = protocol.identify(
        reports, valid=codecs.make_codec("int", bits=protocol.value_bits).valid_prefixes)
    assert [t["value"] for t in first["top_k"]] == expected.values.tolist()
    assert [t["frequency"] for t in first["top_k"]] == expected.frequencies.tolist()
    assert first["group_sizes"] == list(expected.group_sizes) and first["n"] == 6000
    assert first["top_k"] and first["error"] is None
    assert first["_window"]["duplicates"] == 5
    assert [s["batches"] for s in first["passes"]] == [7] * protocol.num_passes


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_only_the_reports_of_later_passes_groups_are_kept(name):
    protocol = protocol_of(name)
    reports, _ = skewed(protocol, 3000, seed=3)
    batches = batches_of(protocol, reports, 4)
    acc = WindowPasses()
    for batch in batches:
        acc.add_reports(tuple(batch.key), protocol, batch.reports)
    groups = reports.columns["group"]
    later = later_groups(protocol)
    kept = sum(c.size for chunks in acc.kept.values() for c in chunks)
    assert kept == int(np.isin(groups, later).sum())
    first_only = [g for g in protocol.pass_groups(0) if g not in later]
    assert acc.first is None  # fewer than COUNT_RUN: pending
    assert sum(c.size for c in acc.pending) == int(np.isin(groups, first_only).sum())
    if name in ("pem", "treehist"):  # pass s reads group s only: group 0 is counted, not kept
        assert later == tuple(range(1, protocol.num_groups))
        assert not windowed.rereads_all(protocol) and set(acc.kept) == set(later)
    else:  # every pass reads every group: kept together, one chunk a message at most
        assert later == tuple(range(protocol.num_groups))
        assert windowed.rereads_all(protocol) and set(acc.kept) == {windowed.ALL_GROUPS}
        assert len(acc.kept[windowed.ALL_GROUPS]) <= len(batches)


def test_a_window_of_many_small_messages_holds_few_chunks():
    pem = protocol_of("pem")
    reports, _ = skewed(pem, 6000, seed=6)
    acc = WindowPasses()
    for batch in batches_of(pem, reports, 300):  # 20 reports a message
        acc.add_reports(tuple(batch.key), pem, batch.reports)
    for g, chunks in acc.kept.items():
        sizes = [c.size for c in chunks]
        tiers = np.floor(np.log(sizes) / np.log(windowed.FAN_IN)).astype(int)
        assert np.bincount(tiers).max() < windowed.FAN_IN  # fewer than FAN_IN a tier
        assert len(chunks) <= (windowed.FAN_IN - 1) * (tiers.max() + 1) < 300 // 4
        np.testing.assert_array_equal(  # the reports of the group, in some order
            np.sort(acc.reports_of([g]).columns["seed"]),
            np.sort(reports.columns["seed"][reports.columns["group"] == g]))


def test_a_pane_of_copies_or_dead_letters_only_has_no_valid_reports():
    pem = protocol_of("pem")
    key = tuple(hh_key(pem))
    fn = WindowPassesCombineFn()
    result = fn.extract_output(fn.add_input(fn.create_accumulator(), Duplicates(3, key)))
    assert (result["n"], result["error"], result["_window"]["duplicates"]) == (
        0, "no valid reports", 3)
    assert result["key"] == hh_key(pem).to_json()


def test_reports_of_another_key_are_refused():
    pem = protocol_of("pem")
    other = hh.PrefixExtendingMethod(**{**CONFIGS["pem"], "epsilon": 2.0})
    a, _ = skewed(pem, 100, seed=4)
    b, _ = skewed(other, 100, seed=5)
    fn = WindowPassesCombineFn()
    acc = fn.add_input(fn.create_accumulator(), ReportBatch(hh_key(pem), a))
    with pytest.raises(ValueError, match="given to the window of"):
        fn.add_input(acc, ReportBatch(hh_key(other), b))


# -- panes, with TestStream ------------------------------------------------------------------


def message(protocol, n, seed, seconds, user_ids=None, ids=None):
    reports, users = skewed(protocol, n, seed)
    if user_ids is not None:
        users = user_ids
        reports = protocol.perturb(np.ones(n, dtype=np.uint64), users,
                                   np.random.default_rng(seed))
    records = reports_to_records(protocol, reports, ids or [f"r{seed}-{i}" for i in range(n)],
                                 users, (np.asarray(seconds) * 1000 + np.zeros(n)).astype(
                                     np.int64))
    return PubsubMessage(formats.encode_message(records), {})


def run(stream, windows, checks, name="treehist", cap=None):
    options = PipelineOptions([])
    options.view_as(StandardOptions).streaming = True
    with beam.Pipeline(runner=BundleBasedDirectRunner(), options=options) as p:
        out = p | stream | IdentifyHeavyHittersStream(
            name, windows, {"oracle": name}, max_reports_per_user=cap)
        checks(out["heavy_hitters"])


def view(document):
    return document["window_start"] // 1000, document["pane"], document["n"]


@pytest.mark.pipeline
def test_early_on_time_and_late_panes_accumulate():
    th = protocol_of("treehist")
    stream = (TestStream().advance_watermark_to(0)
              .add_elements([TimestampedValue(message(th, 300, 1, 5), 5)])
              .advance_processing_time(20)          # early: 300 so far
              .add_elements([TimestampedValue(message(th, 200, 2, 6), 6)])
              .advance_watermark_to(61)             # on time: 500
              .add_elements([TimestampedValue(message(th, 100, 3, 7), 62)])  # late: 600
              .advance_watermark_to(300)
              .add_elements([TimestampedValue(message(th, 50, 4, 8), 301)])  # too late
              .advance_watermark_to_infinity())

    def checks(docs):
        assert_that(docs | beam.Map(view), equal_to([(0, "EARLY", 300), (0, "ON_TIME", 500),
                                                     (0, "LATE", 600)]))

    run(stream, WindowSpec(60, allowed_lateness=60, early_firing=10), checks)


@pytest.mark.pipeline
def test_sliding_windows_find_the_heavy_hitters_of_each_window():
    pem = protocol_of("pem")
    stream = (TestStream().advance_watermark_to(0)
              .add_elements([TimestampedValue(message(pem, 400, 5, 10), 1),
                             TimestampedValue(message(pem, 600, 6, 40), 1)])
              .advance_watermark_to_infinity())

    def checks(docs):
        assert_that(docs | beam.Map(view),
                    equal_to([(-30, "ON_TIME", 400), (0, "ON_TIME", 1000),
                              (30, "ON_TIME", 600)]), label="windows")
        assert_that(docs | beam.Map(lambda d: d["top_k"][0]["value"]), equal_to([1, 1, 1]),
                    label="top")

    run(stream, WindowSpec(60, period=30), checks, name="pem")


@pytest.mark.pipeline
def test_the_cap_keeps_each_users_first_reports_in_a_window():
    th = protocol_of("treehist")
    users = [f"same-{i % 50}" for i in range(200)]  # 50 users, 4 reports each
    stream = (TestStream().advance_watermark_to(0)
              .add_elements([TimestampedValue(message(th, 200, 7, 5, user_ids=users), 1),
                             TimestampedValue(message(th, 200, 7, 5, user_ids=users), 2)])
              .advance_watermark_to_infinity())

    def checks(docs):
        assert_that(docs | beam.Map(lambda d: (d["n"], d["duplicates"])),
                    equal_to([(100, 200)]))

    run(stream, WindowSpec(60), checks, cap=2)
