"""Deduplication by report id: shuffling only the id hashes gives exactly the result of
shuffling every report."""

from __future__ import annotations

import typing

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

import ldpflow
from ldpflow.transforms.dedup import (
    DEDUP_KEEP,
    DeduplicateReports,
    RepeatedIds,
    TallyCombineFn,
    split_repeated,
)
from tests.wire_support import parse_records, reports_to_records

pytestmark = pytest.mark.pipeline


def batches_with_copies():
    rng = np.random.default_rng(5)
    out = []
    for name, n in (("grr", 3000), ("olh", 2000)):
        oracle = ldpflow.oracle(name, epsilon=1.0, domain_size=32)
        reports = oracle.perturb(rng.integers(0, 32, n), rng=rng)
        ids = [f"{name}-{i}" for i in rng.integers(0, n // 2, n)]  # about 40% repeated ids
        records = reports_to_records(oracle, reports, ids, [f"u{i}" for i in range(n)],
                                     np.zeros(n, dtype=int))
        for lo in range(0, n, 700):  # several batches per key, copies across batches
            (batch,) = parse_records(records[lo:lo + 700])[0].values()
            out.append((tuple(batch.key), batch))
    return out


@beam.typehints.with_output_types(tuple[typing.Any, typing.Any])
class SplitFn(beam.DoFn):
    """What ReadRangeFn does with the side input ``repeated``."""

    def process(self, element, repeated):
        unique, repeats = split_repeated(*element, repeated)
        if unique is not None:
            yield element[0], unique
        if repeats is not None:
            yield beam.pvalue.TaggedOutput("repeats", (element[0], repeats))


def summary(element):
    key, tally = element
    return (key[0], tally.accumulator.n, tuple(tally.accumulator.counts.tolist()),
            tally.duplicates, tally.conflicting)


@pytest.mark.parametrize("buckets", [1, 16])
def test_shuffling_ids_only_equals_shuffling_every_report(buckets):
    batches = batches_with_copies()
    with TestPipeline(runner="FnApiRunner") as p:
        data = p | "Batches" >> beam.Create(batches)
        ids = data | "Ids" >> beam.MapTuple(lambda key, batch: (key, batch.id_hashes))
        repeated = ids | RepeatedIds(buckets)
        whole = (data | "Whole" >> DeduplicateReports(buckets)
                 | "CountWhole" >> beam.CombinePerKey(TallyCombineFn())
                 | "SumWhole" >> beam.Map(summary))
        parts = data | "Split" >> beam.ParDo(SplitFn(), beam.pvalue.AsDict(repeated)
                                             ).with_outputs("repeats", main="unique")
        light = ((parts["unique"], parts["repeats"] | "Light" >> DeduplicateReports(buckets))
                 | "Rejoin" >> beam.Flatten()
                 | "CountLight" >> beam.CombinePerKey(TallyCombineFn())
                 | "SumLight" >> beam.Map(summary))
        expected = []
        for name in ("grr", "olh"):
            rows = [b for k, b in batches if k[0] == name]
            hashes = np.concatenate([b.id_hashes for b in rows])
            expected.append((name, np.unique(hashes).size, hashes.size - np.unique(hashes).size))
        assert_that(light | "Shape" >> beam.Map(lambda s: (s[0], s[1], s[3])),
                    equal_to(expected), label="counts")
        both = ((whole | "TagWhole" >> beam.Map(lambda s: (s, "whole")),
                 light | "TagLight" >> beam.Map(lambda s: (s, "light")))
                | beam.Flatten() | beam.GroupByKey()
                | beam.MapTuple(lambda s, tags: sorted(tags)))
        assert_that(both, equal_to([["light", "whole"], ["light", "whole"]]), label="equal")


@pytest.mark.parametrize("key", [None, bytes(range(16))])
def test_a_report_whose_id_hash_collides_is_kept(key):
    from ldpflow.core.dedup import report_id_hashes
    from ldpflow.wire.parse import AcceptancePolicy, parse_table, records_to_table
    from tests.core.test_dedup import printable_collision

    victim = "victim-report-01"
    attacker = printable_collision(victim)
    assert report_id_hashes([attacker])[0] == report_id_hashes([victim])[0]
    oracle = ldpflow.oracle("grr", epsilon=1.0, domain_size=32)
    n = 20
    reports = oracle.perturb(np.arange(n) % 32, rng=np.random.default_rng(3))
    ids = [victim, attacker] + [f"r{i}" for i in range(n - 2)]
    records = reports_to_records(oracle, reports, ids, [f"u{i}" for i in range(n)],
                                 np.zeros(n, dtype=int))
    table, _ = records_to_table(records + records[1:2], "")  # the attacker's report twice
    policy = AcceptancePolicy(id_key=key)
    (batch,) = parse_table(table, policy=policy, keep=DEDUP_KEEP).batches.values()
    element = (tuple(batch.key), batch)
    with TestPipeline(runner="FnApiRunner") as p:
        out = (p | beam.Create([element]) | DeduplicateReports()
               | beam.CombinePerKey(TallyCombineFn())
               | beam.MapTuple(lambda k, t: (t.accumulator.n, t.duplicates)))
        assert_that(out, equal_to([(n, 1)]))  # every distinct report, one copy dropped


def test_the_secret_id_key_stays_out_of_the_run_metadata_and_reprs():
    from ldpflow.core.dedup import new_id_key
    from ldpflow.wire.parse import AcceptancePolicy
    from ldpflow.wire.results import run_metadata

    key = new_id_key()
    assert len(key) == 16 and new_id_key() != key
    policy = AcceptancePolicy(id_key=key)
    metadata = run_metadata(inputs="x", files=1, runner="r", policy=policy, methods=[],
                            started="s")
    assert "id_key" not in metadata["policy"] and key.hex() not in repr(metadata)
    assert repr(key) not in repr(policy)
