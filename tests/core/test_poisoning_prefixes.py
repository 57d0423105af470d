"""PEM's poisoning test from its pass counts (``poisoning.prefix_pass_test``): the
dispersion test over a pass's candidates, at ``population_level / g`` per pass."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ldpflow.core import poisoning, simulation
from ldpflow.core.heavy_hitters import PrefixExtendingMethod, TreeHist
from ldpflow.core.oracles import Reports

PEM = PrefixExtendingMethod(top_k=16, value_bits=10, epsilon=1.0, step_bits=2)


def honest(n, seed, point=False):
    rng = np.random.default_rng(seed)
    values = (np.zeros(n, dtype=np.int64) if point else
              simulation.RankDistribution("zipf", 1.1).sample(1 << PEM.value_bits, n, rng))
    return PEM.perturb(values, np.arange(n), rng), rng


def pass_counts(reports, pass_index, state=None):
    part = reports[np.flatnonzero(reports.columns["group"] == pass_index)]
    return PEM.accumulate(pass_index, part, state or PEM.initial_state()), part


def test_stage_zero_is_the_olh_oracles_dispersion_test_over_the_full_domain():
    """Pass 0 counts every prefix: its test is the core test of the pass's OLH oracle on
    the same reports, counted by the oracle itself."""
    reports, _ = honest(6000, 3)
    counts, part = pass_counts(reports, 0)
    oracle = PEM.oracle(0)
    olh = Reports(oracle.name, {"seed": part.columns["seed"], "bucket": part.columns["bucket"]})
    support = oracle.support_counts(oracle.count_valid(olh))
    level = poisoning.prefix_pass_level(PEM, 1e-3)
    test = poisoning.prefix_pass_test(PEM, counts, 1e-3)
    assert level == 1e-3 / PEM.num_groups
    assert test["candidates"] == 1 << PEM.prefix_bits[0] and test["n"] == len(part)
    assert test["dispersion"] == poisoning.dispersion_test(oracle, support, len(part), level)


def test_a_later_stage_tests_its_candidates_with_their_mass_at_most_one():
    reports, _ = honest(6000, 4)
    counts0, _ = pass_counts(reports, 0)
    # Few survivors, so that pass 1 estimates fewer candidates than its domain (pass 0
    # ranks without cutting): the test then bounds the candidates' mass by one.
    state = PEM.advance(0, counts0, PEM.initial_state(), survivors=8)
    counts1, part = pass_counts(reports, 1, state)
    estimate = PEM.estimate(counts1)
    test = poisoning.prefix_pass_test(PEM, counts1)["dispersion"]
    c = estimate.support_counts.astype(np.float64)
    n, q, k = len(part), PEM.q, c.size
    assert 0 < k < 1 << PEM.prefix_bits[1]
    # the statistic, from its definition
    assert test["value"] == pytest.approx(np.sum((c - n * q) ** 2) / (n * q * (1 - q)),
                                          rel=1e-12)
    mean, variance = poisoning.dispersion_moments(PEM.oracle(1), n, values=k,
                                                  mass_bound=test["mass_bound"])
    assert test["null_mean"] == pytest.approx(float(mean), rel=1e-12)
    assert test["null_sd"] == pytest.approx(math.sqrt(float(variance)), rel=1e-12)
    assert test["level"] == poisoning.DEFAULT_POPULATION_LEVEL / PEM.num_groups / 2


def test_dispersion_test_refuses_more_counts_than_values():
    oracle = PEM.oracle(0)
    with pytest.raises(ValueError, match="support must count 1 .. domain_size=64"):
        poisoning.dispersion_test(oracle, np.zeros(65), 100, 1e-3)


def test_other_protocols_have_no_prefix_defence():
    tree = TreeHist(top_k=4, value_bits=16, epsilon=4.0)
    with pytest.raises(ValueError, match="protocol must be one of pem, got 'treehist'"):
        poisoning.prefix_pass_level(tree, 1e-3)
    assert poisoning.HEAVY_HITTER_SUPPORTED == ("pem",)


def test_the_section_has_the_estimate_layout():
    reports, _ = honest(6000, 5)
    section = poisoning.defend_prefixes(PEM, reports)
    report_keys = set(poisoning.PoisoningReport("olh", "", 0.1, 0.1, 0, 0, (), np.zeros(2),
                                                True, {}).to_dict())
    assert set(section) == report_keys | {"alarm"}
    assert section["n"] == len(reports) and section["flagged"] == 0
    assert [s["pass"] for s in section["details"]["passes"]] == [0, 1, 2]


@pytest.mark.statistical
@pytest.mark.slow
def test_honest_alarm_rate_is_within_the_stage_level():
    """A point mass (the least favourable population): each pass's statistic alarms at
    most at its nominal rate ``population_level / g / 2`` (4 sigma over 200 runs)."""
    level, runs = 0.2, 200
    nominal = level / PEM.num_groups / 2
    alarms = np.zeros(PEM.num_groups)
    rng = np.random.default_rng(2024)
    for _ in range(runs):
        reports = PEM.perturb(np.zeros(5000, dtype=np.int64), np.arange(5000), rng)
        section = poisoning.defend_prefixes(PEM, reports, population_level=level)
        alarms += [s["dispersion"]["alarm"] for s in section["details"]["passes"]]
    sigma = math.sqrt(nominal * (1 - nominal) / runs)
    assert np.all(alarms / runs <= nominal + 4 * sigma), alarms / runs
