"""The oracle CombineFn: first without a pipeline, then in a TestPipeline on the FnApiRunner."""

from __future__ import annotations

import numpy as np
import pytest

import ldpflow
from tests.wire_support import parse_records, reports_to_records

beam = pytest.importorskip("apache_beam")
from apache_beam.runners.portability.fn_api_runner import FnApiRunner  # noqa: E402
from apache_beam.testing.test_pipeline import TestPipeline  # noqa: E402
from apache_beam.testing.util import assert_that, equal_to  # noqa: E402

from ldpflow.transforms.combine import FrequencyOracleCombineFn  # noqa: E402
from ldpflow.transforms.estimate import CountReports  # noqa: E402


def batches_of(name, n, d=16, seed=0, parts=5):
    oracle = ldpflow.oracle(name, epsilon=1.0, domain_size=d)
    rng = np.random.default_rng(seed)
    reports = oracle.perturb(rng.integers(0, d, n), rng=rng)
    records = reports_to_records(oracle, reports, [f"r{i}" for i in range(n)],
                                 [f"u{i}" for i in range(n)], np.zeros(n, dtype=int))
    cuts = np.linspace(0, n, parts + 1).astype(int)
    out = []
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        (batch,) = parse_records(records[a:b], trusted=True)[0].values()
        out.append(batch)
    return oracle, reports, out


@pytest.mark.parametrize("name", list(ldpflow.ORACLES))
def test_sharded_combine_equals_apply_to_all(name):
    oracle, reports, batches = batches_of(name, 200)
    fn = FrequencyOracleCombineFn()
    shards = [fn.add_inputs(fn.create_accumulator(), batches[i::2]) for i in range(2)]
    merged = fn.extract_output(fn.merge_accumulators(iter(shards)))  # a one-shot iterator
    assert merged == oracle.aggregate(reports)
    assert fn.extract_output(fn.apply(batches)) == oracle.aggregate(reports)


def test_combine_of_one_oracle_refuses_another():
    oracle, _, batches = batches_of("grr", 20)
    other = ldpflow.oracle("grr", epsilon=2.0, domain_size=16)
    fn = FrequencyOracleCombineFn(other)
    with pytest.raises(ValueError, match="given to the combiner of"):
        fn.add_input(fn.create_accumulator(), batches[0])
    bound = FrequencyOracleCombineFn(oracle)
    assert bound.apply([b.reports for b in batches]).n == 20
    assert FrequencyOracleCombineFn().merge_accumulators([None, None]) is None


@pytest.mark.pipeline
def test_count_reports_in_a_test_pipeline():
    grr, grr_reports, grr_batches = batches_of("grr", 300, seed=1)
    olh, olh_reports, olh_batches = batches_of("olh", 200, seed=2)
    elements = [(b.key, b) for b in grr_batches + olh_batches]
    expected = [(grr.key, grr.aggregate(grr_reports).counts.tolist()),
                (olh.key, olh.aggregate(olh_reports).counts.tolist())]
    with TestPipeline(runner=FnApiRunner()) as p:
        counts = (p | beam.Create(elements, reshuffle=False)
                  | CountReports()
                  | beam.MapTuple(lambda key, acc: (key, acc.counts.tolist())))
        assert_that(counts, equal_to(expected))
