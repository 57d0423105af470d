"""The heavy-hitter contract suite: every protocol of ``PROTOCOLS`` against one contract
(validation, identity, pickling, client randomness, groups, privacy budget, refusal of bad
reports, identification of clear heavy hitters, ``top_k`` and pruning)."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest

from ldpflow.core import heavy_hitters as hh
from ldpflow.core.validation import InvalidReportError
from tests.core.heavy_hitter_contract import (
    HEAVY,
    SMALL,
    make,
    population,
    ratios_are_tight,
    shares_sum_to_epsilon,
)

KEYS = sorted(hh.PROTOCOLS)


def test_every_protocol_has_a_small_configuration():
    assert set(SMALL) == set(hh.PROTOCOLS) == {"pem", "spm", "mcm", "treehist", "sfp"}
    for name, cls in hh.PROTOCOLS.items():
        assert cls.name == name and issubclass(cls, hh.HeavyHitterProtocol)


@pytest.mark.parametrize("name", KEYS)
@pytest.mark.parametrize("params, error, message", [
    (dict(top_k=0), ValueError, r"top_k must be >= 1, got 0"),
    (dict(top_k=2.5), TypeError, r"top_k must be an integer"),
    (dict(value_bits=65), ValueError, r"value_bits must be in \[1, 64\], got 65"),
    (dict(epsilon=0.0), ValueError, r"epsilon must be in \(0, inf\), got 0.0"),
    (dict(epsilon="4"), TypeError, r"epsilon must be a real number"),
])
def test_bad_parameters_are_named(name, params, error, message):
    with pytest.raises(error, match=message):
        make(name, **params)


@pytest.mark.parametrize("name", KEYS)
def test_configuration_is_frozen_hashable_picklable_and_keyed(name):
    protocol = make(name)
    assert pickle.loads(pickle.dumps(protocol)) == protocol
    assert hash(protocol) == hash(make(name))
    with pytest.raises(dataclasses.FrozenInstanceError):
        protocol.top_k = 5  # type: ignore[misc]
    assert type(protocol).from_key(protocol.key) == protocol
    assert protocol.key.name == name
    with pytest.raises(ValueError, match=f"key must be a '{name}' key"):
        type(protocol).from_key(("other",))


@pytest.mark.parametrize("name", KEYS)
def test_privacy_shares_sum_to_epsilon_and_each_ratio_is_tight(name):
    for epsilon in (0.5, 4.0):
        protocol = make(name, epsilon=epsilon)
        assert shares_sum_to_epsilon(protocol)
        assert ratios_are_tight(protocol)


@pytest.mark.parametrize("name", KEYS)
def test_perturb_is_seeded_or_secure_one_report_per_user_in_its_group(name):
    protocol = make(name)
    values = population(400, 1)
    ids = np.array([f"user-{i}" for i in range(400)])
    one = protocol.perturb(values, ids, np.random.default_rng(3))
    two = protocol.perturb(values, ids, np.random.default_rng(3))
    assert len(one) == 400 and one.oracle == name
    for column in one.columns:
        np.testing.assert_array_equal(one.columns[column], two.columns[column])
    secure = protocol.perturb(values, ids)  # the OS CSPRNG: differs from the seeded run
    assert not np.array_equal(secure.columns["seed"], one.columns["seed"])
    groups = protocol.group_of(ids)
    np.testing.assert_array_equal(one.columns["group"], groups)
    assert groups.min() >= 0 and groups.max() < protocol.num_groups
    np.testing.assert_array_equal(groups, hh.assign_groups(ids, protocol.num_groups))
    record = protocol.perturb_one(int(values[0]), "user-0", np.random.default_rng(4))
    assert set(record) == set(one.columns)


@pytest.mark.parametrize("name", KEYS)
def test_perturb_refuses_values_of_2_to_the_m_and_mismatched_ids(name):
    protocol = make(name)
    with pytest.raises(ValueError, match=r"values must lie in \[0, 2\*\*16\), got 65536"):
        protocol.perturb([1, 2**16], [0, 1])
    with pytest.raises(ValueError, match="user_ids must hold one id per value"):
        protocol.perturb([1, 2], [0])


@pytest.mark.parametrize("name", KEYS)
def test_malformed_and_out_of_range_reports_are_refused(name):
    protocol = make(name)
    reports = protocol.perturb(population(300, 2), np.arange(300), np.random.default_rng(5))
    with pytest.raises(InvalidReportError):
        protocol.validate({"seed": reports.columns["seed"]})  # missing columns
    bad = dict(reports.columns)
    bad["bucket"] = bad["bucket"].copy()
    bad["bucket"][7] = 10**6
    with pytest.raises(InvalidReportError, match="row 7"):
        protocol.identify(bad)
    bad = dict(reports.columns)
    bad["group"] = bad["group"].copy()
    bad["group"][3] = protocol.num_groups
    with pytest.raises(InvalidReportError, match="row 3"):
        protocol.identify(bad)


@pytest.mark.parametrize("name", KEYS)
def test_clear_heavy_hitters_are_found_best_first(name):
    protocol = make(name)
    n = 20_000
    values = population(n, 6)
    result = protocol.identify(protocol.perturb(values, np.arange(n), np.random.default_rng(7)))
    assert result.values.tolist() == HEAVY.tolist()  # 30 %, 20 %, 15 %: in order
    assert result.population == n == sum(result.group_sizes)
    freqs = result.frequencies
    assert np.all(np.diff(freqs) <= 0)
    # Loose sanity bound on the shares (the exact variances are each protocol's own tests').
    np.testing.assert_allclose(freqs, [0.30, 0.20, 0.15], atol=0.1)
    np.testing.assert_allclose(result.counts, freqs * n)
    assert [r["value"] for r in result.to_records()] == HEAVY.tolist()


@pytest.mark.parametrize("name", KEYS)
def test_top_k_is_a_server_argument_and_pruned_values_never_return(name):
    protocol = make(name)
    n = 20_000
    reports = protocol.perturb(population(n, 8), np.arange(n), np.random.default_rng(9))
    assert protocol.identify(reports, top_k=1).values.tolist() == [int(HEAVY[0])]

    def no_beef(codes, bits):
        return codes != (HEAVY[0] >> np.uint64(16 - bits))

    found = protocol.identify(reports, valid=no_beef).values.tolist()
    assert int(HEAVY[0]) not in found and int(HEAVY[1]) in found
