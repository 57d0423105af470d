"""Intervals of the heavy-hitter frequencies: exact form and measured coverage."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ldpflow.core import heavy_hitters as hh
from tests.core.heavy_hitter_contract import HEAVY, SHARES, make, population

KEYS = sorted(hh.PROTOCOLS)


def test_standard_errors_are_the_olh_variance_plus_the_groups_sampling():
    f = np.array([-0.01, 0.0, 0.2, 1.3])
    se = hh.heavy_hitter_standard_errors(f, 1000, 4000, 1.0, 4, math.nan)
    plug = np.array([0.0, 0.0, 0.2, 1.0])
    expected = np.sqrt(hh.olh_variance(1000, 1.0, 4, plug)
                       + plug * (1 - plug) * (1 / 1000 - 1 / 4000))
    np.testing.assert_array_equal(se, expected)
    # The group is the whole population: no sampling term.
    np.testing.assert_array_equal(hh.heavy_hitter_standard_errors(f, 1000, 1000, 1.0, 4, 0.0),
                                  np.sqrt(hh.olh_variance(1000, 1.0, 4, plug)))
    # Without the OLH parameters: the pass's sigma at frequency 0.
    np.testing.assert_array_equal(hh.heavy_hitter_standard_errors(f, 1000, 1000, None, None,
                                                                  0.01), np.full(4, 0.01))


@pytest.mark.parametrize("name", KEYS)
def test_results_carry_intervals_around_each_frequency(name):
    protocol = make(name)
    n = 20_000
    values = population(n, 6)
    result = protocol.identify(protocol.perturb(values, np.arange(n), np.random.default_rng(7)))
    assert result.standard_errors is not None and result.standard_errors.shape == (3,)
    assert np.all(result.standard_errors > 0)
    for record in result.to_records():
        z = (record["high"] - record["frequency"]) / record["se"]
        assert z == pytest.approx(1.959963984540054, rel=1e-12)
        assert record["low"] < record["frequency"] < record["high"]


@pytest.mark.statistical
@pytest.mark.parametrize("name", KEYS)
def test_heavy_hitter_intervals_cover_the_true_shares(name):
    """R = 60 runs of n = 20000 users (the three heavy values at 30, 20, 15 %, found every
    time at this size): N = 180 intervals, 3 binomial standard deviations of a proportion
    0.95 (+/- 0.049). The shares are far above the selection threshold, so the winner's
    curse does not bias them."""
    protocol = make(name)
    n, runs, confidence = 20_000, 60, 0.95
    covered = total = 0
    for run in range(runs):
        values = population(n, 100 + run)
        truth = dict(zip(HEAVY.tolist(), SHARES, strict=True))
        result = protocol.identify(
            protocol.perturb(values, np.arange(n), np.random.default_rng(500 + run)))
        for record in result.to_records():
            share = truth.get(record["value"])
            if share is None:
                continue
            share = int(n * share) / n
            covered += int(record["low"] <= share <= record["high"])
            total += 1
    assert total >= 3 * runs - 3  # found
    band = 3 * math.sqrt(confidence * (1 - confidence) / total)
    assert abs(covered / total - confidence) <= band, (name, covered / total)
