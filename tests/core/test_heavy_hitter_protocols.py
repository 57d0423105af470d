"""The heavy-hitter contract suite: every protocol of ``PROTOCOLS`` against one contract
(validation, identity, pickling, client randomness, groups, privacy budget, refusal of bad
reports, identification of clear heavy hitters, ``top_k`` and pruning, and the server's
passes: sharded counting, refusals, pickling and options)."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest

from ldpflow.core import heavy_hitters as hh
from ldpflow.core.validation import InvalidReportError
from tests.core.heavy_hitter_contract import (
    HEAVY,
    SERVER_OPTIONS,
    SMALL,
    make,
    no_beef,
    population,
    ratios_are_tight,
    reports,
    run_passes,
    same_data,
    same_state,
    shares_sum_to_epsilon,
    split_pass,
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

    found = protocol.identify(reports, valid=no_beef).values.tolist()
    assert int(HEAVY[0]) not in found and int(HEAVY[1]) in found


# -- the passes -----------------------------------------------------------------------------
#: Server arguments each sharded run is checked with (beyond the defaults).
PASS_ARGUMENTS = {
    "pem": [dict(top_k=5, survivors=4, threshold_sigma=1.0), dict(refine_sigma=None)],
    "spm": [dict(top_k=5)],
    "mcm": [dict(top_k=5)],
    "treehist": [dict(top_k=5, survivors=7, threshold_sigma=None), dict(threshold=0.05)],
    "sfp": [dict(top_k=5, survivors=9, threshold_sigma=None), dict(threshold=0.05)],
}


def _assert_same_result(a, b):
    assert a.values.dtype == b.values.dtype == np.uint64
    np.testing.assert_array_equal(a.values, b.values)
    assert a.frequencies.tolist() == b.frequencies.tolist()  # exactly, not approximately
    assert a.counts.tolist() == b.counts.tolist()
    assert a.population == b.population and a.group_sizes == b.group_sizes
    assert a.pass_candidates == b.pass_candidates
    assert a.pass_survivors == b.pass_survivors


@pytest.mark.parametrize("name", KEYS)
@pytest.mark.parametrize("n, seed", [(20_000, 6), (3_000, 11)])
def test_passes_on_random_shards_merged_in_any_order_equal_identify(name, n, seed):
    protocol, batch = reports(name, n, seed, seed + 1)
    rng = np.random.default_rng(seed + 2)
    for arguments in [{}, dict(valid=no_beef), *PASS_ARGUMENTS[name]]:
        expected = protocol.identify(batch, **arguments)
        for _ in range(2):
            result, state = run_passes(protocol, batch, rng, **arguments)
            _assert_same_result(result, expected)
        assert len(state.figures) == protocol.num_passes
    assert expected.values.size > 0  # the runs compared found something


@pytest.mark.parametrize("name", KEYS)
def test_passes_are_consistent_and_cover_every_group(name):
    protocol = make(name)
    passes = protocol.num_passes
    assert isinstance(passes, int) and passes >= 1
    read = set()
    for pass_index in range(passes):
        groups = protocol.pass_groups(pass_index)
        assert isinstance(groups, tuple) and groups == tuple(sorted(set(groups)))
        assert all(0 <= g < protocol.num_groups for g in groups) and groups
        read.update(groups)
        assert isinstance(protocol.pass_label(pass_index), str) and protocol.pass_label(pass_index)
    assert read == set(range(protocol.num_groups))
    labels = [protocol.pass_label(pass_index) for pass_index in range(passes)]
    assert len(set(labels)) == passes
    for bad in (passes, -1):
        with pytest.raises(ValueError, match="pass_index must be"):  # PEM: pass
            protocol.pass_groups(bad)
        with pytest.raises(ValueError, match="pass_index must be"):  # PEM: pass
            protocol.pass_label(bad)
    # The figures of a run name each pass and the reports it read.
    _, batch = reports(name, 3_000, 11, 12)
    _, state = run_passes(protocol, batch, np.random.default_rng(0))
    sizes = np.bincount(batch.columns["group"], minlength=protocol.num_groups)
    assert state.group_sizes == tuple(int(s) for s in sizes)
    for pass_index, figures in enumerate(state.figures):
        assert figures.pass_index == pass_index and figures.label == labels[pass_index]
        assert figures.reports == int(sizes[list(protocol.pass_groups(pass_index))].sum())
        assert 0 <= figures.survivors
    assert state.population == 3_000


@pytest.mark.parametrize("name", KEYS)
def test_accumulate_refuses_reports_of_a_group_the_pass_does_not_read(name):
    protocol, batch = reports(name, 3_000, 11, 12)
    group = batch.columns["group"]
    state = protocol.initial_state()
    narrow = [pass_index for pass_index in range(protocol.num_passes)
              if len(protocol.pass_groups(pass_index)) < protocol.num_groups]
    if name in ("pem", "treehist"):  # pass i reads group i only
        assert narrow == list(range(protocol.num_passes))
        assert [protocol.pass_groups(s) for s in narrow] == [(s,) for s in narrow]
    else:
        assert narrow == []
    for pass_index in narrow:
        row = int(np.flatnonzero(~np.isin(group, protocol.pass_groups(pass_index)))[0])
        mixed = batch[
            np.array([*np.flatnonzero(np.isin(group, protocol.pass_groups(pass_index)))[:5], row])
        ]
        with pytest.raises(InvalidReportError,
                           match=rf"pass {pass_index} counts the reports of group\(s\) "
                                 rf"\[{protocol.pass_groups(pass_index)[0]}\], got group "
                                 rf"{int(group[row])} at row 5"):
            protocol.accumulate(pass_index, mixed, state)
        counts = protocol.accumulate(pass_index, split_pass(protocol, batch, pass_index), state)
        state = protocol.advance(pass_index, counts, state)


@pytest.mark.parametrize("name", KEYS)
def test_advance_refuses_counts_of_another_pass_state_or_configuration(name):
    protocol, batch = reports(name, 3_000, 11, 12)
    # Another population (every value xor 0x5A5A) leads to another state after pass 0.
    other = protocol.perturb(population(3_000, 11) ^ np.uint64(0x5A5A), np.arange(3_000),
                             np.random.default_rng(12))
    start = protocol.initial_state()
    first = protocol.accumulate(0, split_pass(protocol, batch, 0), start)
    state = protocol.advance(0, first, start)
    elsewhere = protocol.advance(0, protocol.accumulate(0, split_pass(protocol, other, 0),
                                                        start), start)
    if protocol.num_passes == 1:  # pragma: no cover - every protocol has two passes or more
        return
    with pytest.raises(ValueError, match=r"counts of pass 0 .* given to pass 1"):
        protocol.advance(1, first, state)
    with pytest.raises(ValueError, match=r"pass 1 needs the state after 1 passes, got the "
                                         r"state after 0"):
        protocol.advance(1, first, start)
    second = protocol.accumulate(1, split_pass(protocol, batch, 1), state)
    assert not same_data(second.context, protocol.create_pass_counts(1, elsewhere).context)
    with pytest.raises(ValueError, match="counts of pass 1 were made for another state"):
        protocol.advance(1, second, elsewhere)
    with pytest.raises(ValueError, match="cannot merge counts of pass 1 made for different"):
        second.copy().merge(protocol.create_pass_counts(1, elsewhere))
    foreign = make(name, epsilon=2.0)
    with pytest.raises(ValueError, match="state of .* given to"):
        foreign.advance(0, first, start)
    with pytest.raises(ValueError, match=r"counts of pass 0 of .* given to pass 0 of"):
        foreign.advance(0, first, foreign.initial_state())
    with pytest.raises(TypeError, match="counts must be PassCounts, got dict"):
        protocol.advance(0, {}, start)
    # The same reports in every pass: a group that changes size between passes is refused.
    if set(protocol.pass_groups(0)) & set(protocol.pass_groups(1)):
        fewer = split_pass(protocol, batch, 1)[np.arange(1, len(split_pass(protocol, batch, 1)))]
        with pytest.raises(ValueError, match="every pass must read the same reports"):
            protocol.advance(1, protocol.accumulate(1, fewer, state), state)


@pytest.mark.parametrize("name", KEYS)
def test_result_refuses_an_unfinished_state(name):
    protocol, batch = reports(name, 3_000, 11, 12)
    state = protocol.initial_state()
    passes = protocol.num_passes
    for pass_index in range(passes):
        with pytest.raises(ValueError, match=rf"the result needs all {passes} passes, got the "
                                             rf"state after {pass_index}"):
            protocol.result(state)
        state = protocol.advance(
            pass_index,
            protocol.accumulate(pass_index, split_pass(protocol, batch, pass_index), state),
            state,
        )
    assert protocol.result(state).values.size > 0
    with pytest.raises(ValueError, match="state of .* given to"):
        make(name, epsilon=2.0).result(state)


@pytest.mark.parametrize("name", KEYS)
def test_pass_counts_and_states_survive_pickle(name):
    protocol, batch = reports(name, 3_000, 11, 12)
    state = protocol.initial_state()
    for pass_index in range(protocol.num_passes):
        counts = protocol.accumulate(pass_index, split_pass(protocol, batch, pass_index), state)
        copy = pickle.loads(pickle.dumps(counts))
        assert copy == counts and copy is not counts
        assert all(a.dtype == np.int64 for a in counts.arrays.values())
        following = protocol.advance(pass_index, copy, state)
        assert same_state(following, protocol.advance(pass_index, counts, state))
        state = pickle.loads(pickle.dumps(following))
        assert same_state(state, following)
        assert len(pickle.dumps(state)) < 2**20  # small enough for a side input
    assert [f.pass_index for f in state.figures] == list(range(protocol.num_passes))


@pytest.mark.parametrize("name", KEYS)
def test_unknown_server_options_are_refused_naming_the_protocols(name):
    protocol, batch = reports(name, 3_000, 11, 12)
    assert tuple(protocol.server_options) == SERVER_OPTIONS[name]
    have = ", ".join(SERVER_OPTIONS[name]) or "none"
    message = rf"{name} has no server option 'bogus' \(its options: {have}\)"
    with pytest.raises(TypeError, match=message):
        protocol.identify(batch, bogus=1)
    start = protocol.initial_state()
    counts = protocol.accumulate(0, split_pass(protocol, batch, 0), start)
    with pytest.raises(TypeError, match=message):
        protocol.advance(0, counts, start, bogus=1)
    for old in ("max_frontier", "max_pairs"):  # the names these options had before
        with pytest.raises(TypeError, match=f"no server option '{old}'"):
            protocol.identify(batch, **{old: 3})
