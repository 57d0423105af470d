"""DetectPoisoning on a TestPipeline (FnApiRunner): the same sections as the core defence,
exactly, for several keys whose reports arrive in several batches."""

from __future__ import annotations

import numpy as np
import pytest

import ldpflow
from ldpflow.core import poisoning
from ldpflow.core.oracles import Reports
from ldpflow.wire.envelope import ReportBatch

beam = pytest.importorskip("apache_beam")
from apache_beam.runners.portability.fn_api_runner import FnApiRunner  # noqa: E402
from apache_beam.testing.test_pipeline import TestPipeline  # noqa: E402
from apache_beam.testing.util import assert_that, equal_to  # noqa: E402

from ldpflow.transforms.dedup import Tally  # noqa: E402
from ldpflow.transforms.poisoning import (  # noqa: E402
    AttachPoisoning,
    DetectPoisoning,
    MergePoisoningTalliesCombineFn,
)

D = 128


def attacked_batches(name, seed, parts=4, **attack):
    oracle = ldpflow.oracle(name, epsilon=1.0, domain_size=D)
    rng = np.random.default_rng(seed)
    genuine = oracle.perturb(rng.integers(0, D, 4000), rng)
    if poisoning.supports(oracle):
        fakes = poisoning.maximal_gain_attack(oracle, [7, 90], 200, rng, **attack)
    else:  # no defence for it: the baseline attack, whose key must yield no section
        fakes = poisoning.input_manipulation(oracle, [7, 90], 200, rng)
    reports = Reports.concat([genuine, fakes])
    order = rng.permutation(len(reports))
    reports = reports[order]
    cuts = np.linspace(0, len(reports), parts + 1).astype(int)
    batches = [ReportBatch(oracle.key, reports[a:b])
               for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
    return oracle, reports, batches


@pytest.mark.pipeline
def test_detect_poisoning_equals_the_core_defence():
    keys = [attacked_batches("grr", 1), attacked_batches("oue", 2, variant="fixed-size"),
            attacked_batches("olh", 3, tries=64), attacked_batches("hr", 4)]
    elements = [(b.key, b) for _, _, batches in keys for b in batches]
    # Deduplication and caps put tallies of dropped reports among the batches: skipped.
    elements.insert(3, (keys[1][0].key, Tally(None, duplicates=2)))
    expected = [(oracle.key, poisoning.defend(oracle, reports).to_dict())
                for oracle, reports, _ in keys if poisoning.supports(oracle)]
    assert any(section["flagged"] for _, section in expected)
    with TestPipeline(runner=FnApiRunner()) as p:
        out = p | beam.Create(elements, reshuffle=False) | DetectPoisoning()
        assert_that(out, equal_to(expected))


@pytest.mark.pipeline
def test_attach_poisoning_adds_the_section_by_key():
    oue, reports, batches = attacked_batches("oue", 5, variant="naive")
    hr = ldpflow.oracle("hr", epsilon=1.0, domain_size=D)
    results = [{"oracle": "oue", "parameters": oue.parameters, "n": len(reports)},
               {"oracle": "hr", "parameters": hr.parameters, "n": 0}]
    section = poisoning.defend(oue, reports).to_dict()
    with TestPipeline(runner=FnApiRunner()) as p:
        found = p | "Reports" >> beam.Create([(b.key, b) for b in batches]) | DetectPoisoning()
        out = {"results": p | "Results" >> beam.Create(results),
               "poisoning": found} | AttachPoisoning()
        assert_that(out, equal_to([
            {**results[0], "poisoning": section},
            {**results[1], "poisoning": {"error": "no poisoning defence for oracle 'hr'; "
                                                  f"it covers {' '.join(poisoning.SUPPORTED)}"}},
        ]))


def test_merge_combine_fn_copies_its_first_input():
    oracle, reports, batches = attacked_batches("oue", 6)
    plan = poisoning.initial_plan(oracle)
    tallies = [poisoning.tally(plan, b.reports) for b in batches]
    before = tallies[0].counts["support"].copy()
    fn = MergePoisoningTalliesCombineFn()
    merged = fn.extract_output(fn.merge_accumulators(
        iter([fn.add_inputs(fn.create_accumulator(), tallies[:2]),
              fn.add_inputs(fn.create_accumulator(), tallies[2:])])))
    np.testing.assert_array_equal(tallies[0].counts["support"], before)
    whole = poisoning.tally(plan, reports)
    for field, value in whole.counts.items():
        np.testing.assert_array_equal(merged.counts[field], value)


def test_detect_poisoning_refuses_a_bad_level():
    with pytest.raises(ValueError, match=r"level must be in \(0, 1\)"):
        DetectPoisoning(level=1.5)


@pytest.mark.pipeline
def test_detect_poisoning_carries_the_dispersion_test_of_a_threshold_hugging_attack():
    # GRR fakes spread over 10 targets, each under the per-value threshold: only the
    # dispersion test sees them; its statistic reaches the section as the core gives it.
    oracle = ldpflow.oracle("grr", epsilon=1.0, domain_size=D)
    rng = np.random.default_rng(7)
    targets = np.arange(D - 10, D)
    genuine = oracle.perturb(rng.zipf(1.5, 20_000) % (D - 10), rng)
    reports = Reports.concat([genuine, poisoning.spread_attack(oracle, targets, 150, rng)])
    reports = reports[rng.permutation(len(reports))]
    batches = [ReportBatch(oracle.key, reports[i::3]) for i in range(3)]
    expected = poisoning.defend(oracle, reports).to_dict()
    test = expected["details"]["dispersion"]
    assert expected["details"]["value_count_suspected"] == []
    assert test["alarm"] and test["p_value"] < test["level"]
    assert expected["suspected"] and set(expected["suspected"]) <= set(targets.tolist())
    with TestPipeline(runner=FnApiRunner()) as p:
        out = p | beam.Create([(b.key, b) for b in batches], reshuffle=False) | DetectPoisoning()
        assert_that(out, equal_to([(oracle.key, expected)]))
