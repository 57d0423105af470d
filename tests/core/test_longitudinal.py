"""Longitudinal clients: exact privacy of both steps, reports distributed as fresh ones,
and a lifetime budget that does not grow with the number of rounds."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from ldpflow.core import bitvectors, simulation
from ldpflow.core.longitudinal import (
    LONGITUDINAL_PROTOCOLS,
    LongitudinalClient,
    LongitudinalLocalHashing,
    MemoizedUnaryEncoding,
    simulate_rounds,
)
from ldpflow.core.randomness import NumpySource

CASES = [MemoizedUnaryEncoding(epsilon=1.0, epsilon_permanent=3.0, domain_size=32),
         LongitudinalLocalHashing(epsilon=1.0, epsilon_permanent=3.0, domain_size=32),
         LongitudinalLocalHashing(epsilon=0.5, epsilon_permanent=4.0, domain_size=100,
                                  hash_range=8)]


@pytest.mark.parametrize("protocol", CASES, ids=lambda p: f"{p.name}-{p.parameters}")
def test_each_step_has_its_exact_budget_and_a_report_has_epsilon(protocol):
    p1, q1, p2 = protocol.permanent_p, protocol.permanent_q, protocol.instant_p
    if protocol.name == "rappor":  # per bit; two bits differ between two values
        assert math.isclose(2 * math.log(p1 / q1), protocol.epsilon_permanent, rel_tol=1e-12)
        composed = p1 * p2 + q1 * (1 - p2)  # P(report bit 1 | true bit 1)
        assert math.isclose(2 * math.log(composed / (1 - composed)), protocol.epsilon,
                            rel_tol=1e-12)
        assert math.isclose(composed, protocol.oracle.p, rel_tol=1e-12)
    else:
        g = protocol.hash_range
        assert math.isclose(math.log(p1 / q1), protocol.epsilon_permanent, rel_tol=1e-12)
        q2 = (1 - p2) / (g - 1)
        keep = p1 * p2 + (1 - p1) * q2  # P(report = H(v)); every other bucket: (1-keep)/(g-1)
        assert math.isclose(math.log(keep / ((1 - keep) / (g - 1))), protocol.epsilon,
                            rel_tol=1e-12)
        assert math.isclose(keep, protocol.oracle.p, rel_tol=1e-12)
        assert protocol.oracle.hash_range == g
    assert 0 < p2 < 1


def test_a_report_budget_at_or_above_the_permanent_one_is_refused():
    with pytest.raises(ValueError, match="must be smaller than epsilon_permanent"):
        MemoizedUnaryEncoding(epsilon=2.0, epsilon_permanent=2.0, domain_size=8)
    with pytest.raises(ValueError, match="epsilon_permanent"):
        LongitudinalLocalHashing(epsilon=1.0, epsilon_permanent=-1.0, domain_size=8)
    with pytest.raises(ValueError, match="hash_range"):
        LongitudinalLocalHashing(epsilon=1.0, epsilon_permanent=2.0, domain_size=8,
                                 hash_range=3)


@pytest.mark.statistical
@pytest.mark.parametrize("protocol", CASES[:2], ids=lambda p: p.name)
def test_every_rounds_estimate_is_unbiased_within_k_sigma(protocol):
    rng = np.random.default_rng(21)
    n, d, rounds = 40_000, protocol.domain_size, 3
    first = simulation.parse_distribution("zipf:1.1").sample(d, n, rng)
    values = np.stack([first, first, rng.permutation(first)])  # the last round: changed values
    values[1, : n // 4] = rng.integers(0, d, n // 4)  # some devices change value
    oracle = protocol.oracle
    z = stats.norm.ppf(1 - 1e-3 / (2 * d * rounds))
    for row, reports in zip(values, simulate_rounds(protocol, values, rng), strict=True):
        truth = np.bincount(row, minlength=d) / n
        estimate = oracle.estimate(oracle.aggregate(reports)).frequencies
        sd = np.sqrt(oracle.variance(n, truth))
        assert np.all(np.abs(estimate - truth) <= z * sd)


@pytest.mark.statistical
@pytest.mark.parametrize("protocol", CASES[:2], ids=lambda p: p.name)
def test_repeated_reports_reveal_the_permanent_response_not_more(protocol):
    """A device reporting one value 4000 times: its reports average to the instantaneous
    response of its permanent one, whatever the true value."""
    client = LongitudinalClient(protocol, secret=b"k" * 32,
                                source=NumpySource(np.random.default_rng(5)))
    reports = [client.report(7) for _ in range(4000)]
    memo = client.permanent(7)
    p2, trials = protocol.instant_p, len(reports)
    if protocol.name == "rappor":
        bits = bitvectors.unpack(np.concatenate([r.columns["bits"] for r in reports]),
                                 protocol.domain_size)
        memo_bits = bitvectors.unpack(memo[None, :], protocol.domain_size)[0].astype(bool)
        shown = bits.mean(axis=0)
        want = np.where(memo_bits, p2, 1 - p2)
    else:
        buckets = np.array([int(r.columns["bucket"][0]) for r in reports])
        assert {int(r.columns["seed"][0]) for r in reports} == {client.seed}  # one seed
        shown = np.bincount(buckets, minlength=protocol.hash_range) / trials
        want = np.full(protocol.hash_range, (1 - p2) / (protocol.hash_range - 1))
        want[memo] = p2
    z = stats.norm.ppf(1 - 1e-3 / (2 * want.size))
    assert np.all(np.abs(shown - want) <= z * np.sqrt(want * (1 - want) / trials))
    assert client.memos == 1 and client.epsilon_spent == protocol.epsilon_permanent


def test_the_lifetime_budget_counts_memos_not_rounds():
    loloha = LongitudinalLocalHashing(epsilon=1.0, epsilon_permanent=2.0, domain_size=1000)
    client = LongitudinalClient(loloha, secret=bytes(range(32)))
    for value in range(200):  # 200 distinct values, but only g = 2 hashed ones
        client.report(value)
    assert client.memos == 2 and client.epsilon_spent == 2 * 2.0
    rappor = MemoizedUnaryEncoding(epsilon=1.0, epsilon_permanent=2.0, domain_size=16)
    client = LongitudinalClient(rappor, secret=bytes(range(32)))
    for _ in range(50):
        client.report(3)
    client.report(4)
    assert client.memos == 2 and client.epsilon_spent == 4.0


@pytest.mark.parametrize("protocol", CASES, ids=lambda p: p.name)
def test_the_state_is_the_secret_and_restores_the_same_permanent_responses(protocol):
    client = LongitudinalClient(protocol)
    first = client.permanent(5)
    restored = LongitudinalClient.from_state(client.state())
    assert np.array_equal(np.asarray(restored.permanent(5)), np.asarray(first))
    assert restored.seed == client.seed and restored.memos == client.memos
    other = LongitudinalClient(protocol)  # another device: another secret
    assert other.state()["secret"] != client.state()["secret"]
    assert LONGITUDINAL_PROTOCOLS[protocol.name] is type(protocol)


def test_reports_are_those_of_the_fresh_oracle():
    rappor = CASES[0]
    reports = LongitudinalClient(rappor).report(3)
    rappor.oracle.aggregate(reports)  # the SUE oracle counts them as its own
    loloha = CASES[2]
    reports = LongitudinalClient(loloha).report(99)
    assert loloha.oracle.aggregate(reports).n == 1
    with pytest.raises(ValueError):
        LongitudinalClient(loloha).report(100)  # outside the domain
