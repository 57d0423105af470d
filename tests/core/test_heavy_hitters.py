"""The prefix extending method (PEM): configuration, grouping, client, exact candidate
counting against the naive grid, mergeable accumulators, selection and whole runs."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ldpflow.core import hashing
from ldpflow.core import heavy_hitters as hh
from ldpflow.core.codecs import StringCodec
from ldpflow.core.oracles import OptimizedLocalHashing, Reports, optimal_hash_range
from ldpflow.core.validation import InvalidReportError
from tests.core.reference import keyed_string_hash, splitmix64

PEM = hh.PrefixExtendingMethod


def small(**overrides):
    """A 3-pass configuration small enough for the naive grid: prefix bits (6, 10, 14, 16)."""
    params = dict(top_k=3, value_bits=16, epsilon=2.0, query_limit=2**6)
    params.update(overrides)
    return PEM(**params)


def reports_for(pem, n, seed, values=None):
    rng = np.random.default_rng(seed)
    if values is None:
        values = rng.integers(0, 2**pem.value_bits, size=n, dtype=np.uint64)
    return pem.perturb(values, np.arange(len(values)), rng)


# -- configuration ----------------------------------------------------------------------------


def test_paper_defaults_for_64_bits_top_32():
    pem = PEM(top_k=32, value_bits=64, epsilon=4.0)
    assert pem.query_limit == 2**20
    assert (pem.start_bits, pem.step_bits, pem.num_groups) == (5, 15, 4)
    assert pem.prefix_bits == (20, 35, 50, 64)  # the last step takes the remainder, 14
    assert [pem.suffix_bits(s) for s in range(4)] == [20, 15, 15, 14]
    assert pem.hash_range == optimal_hash_range(4.0)
    assert [pem.max_candidates(s) for s in range(4)] == [2**20, 2**20, 2**20, 2**19]


@pytest.mark.parametrize(
    "k, m, limit, expected",
    [
        (30, 64, 2**20, (5, 15, (20, 35, 50, 64))),  # 30 * 2**15 <= 2**20 < 30 * 2**16
        (33, 64, 2**20, (6, 14, (20, 34, 48, 62, 64))),
        (1, 64, 2**20, (0, 20, (20, 40, 60, 64))),
        (8, 16, 2**20, (3, 13, (16,))),  # 2**16 <= Q: one group, exhaustive
        (32, 4, 2**20, (3, 1, (4,))),  # start bits capped below m
        (10, 64, 1000, (4, 5, tuple(list(range(9, 64, 5)) + [64]))),  # Q not a power of two
    ],
)
def test_default_start_and_step_follow_the_paper(k, m, limit, expected):
    pem = PEM(top_k=k, value_bits=m, epsilon=1.0, query_limit=limit)
    assert (pem.start_bits, pem.step_bits, pem.prefix_bits) == expected
    assert pem.num_groups == len(expected[2]) == math.ceil((m - pem.start_bits) / pem.step_bits)
    assert all(pem.max_candidates(s) <= limit for s in range(pem.num_groups))


def test_num_groups_alone_derives_the_step():
    pem = PEM(top_k=4, value_bits=32, epsilon=1.0, num_groups=3)
    assert (pem.start_bits, pem.step_bits, pem.prefix_bits) == (2, 10, (12, 22, 32))


@given(
    k=st.integers(1, 300),
    m=st.integers(1, 64),
    log_limit=st.integers(1, 28),
    extra=st.integers(0, 1000),
)
@settings(max_examples=200, deadline=None)
def test_no_stage_may_estimate_more_than_the_query_limit(k, m, log_limit, extra):
    limit = max(2, 2**log_limit - extra)
    try:
        pem = PEM(top_k=k, value_bits=m, epsilon=1.0, query_limit=limit)
    except ValueError as err:
        assert "query_limit must" in str(err)
        assert limit < max(2 * k, 2 ** (min((k - 1).bit_length(), m - 1) + 1))
        return
    assert pem.prefix_bits[-1] == m and list(pem.prefix_bits) == sorted(set(pem.prefix_bits))
    assert all(pem.max_candidates(s) <= limit for s in range(pem.num_groups))
    assert pem.step_bits >= 1


@pytest.mark.parametrize(
    "params, error, message",
    [
        (dict(top_k=0), ValueError, r"top_k must be >= 1, got 0"),
        (dict(top_k=2.5), TypeError, r"top_k must be an integer"),
        (dict(value_bits=65), ValueError, r"value_bits must be in \[1, 64\], got 65"),
        (dict(epsilon=0.0), ValueError, r"epsilon must be in \(0, inf\), got 0.0"),
        (dict(query_limit=2**29), ValueError, r"query_limit must be <= 2\*\*28, got 536870912"),
        (dict(query_limit=4), ValueError, r"query_limit must allow a step of at least one bit"),
        (dict(start_bits=16), ValueError, r"start_bits must be < value_bits=16, got 16"),
        (dict(start_bits=1, step_bits=5), ValueError, r"query_limit must be >= 96, got 64"),
        (dict(start_bits=5, step_bits=2), ValueError, r"pass 0 estimates all 2\*\*7 prefixes"),
        (dict(num_groups=2, step_bits=4), ValueError, r"num_groups must equal .* = 4, got 2"),
        (dict(hash_range=6), ValueError, r"hash_range must be a power of two, got 6"),
    ],
)
def test_bad_parameters_are_named(params, error, message):
    with pytest.raises(error, match=message):
        small(**params)


def test_config_is_frozen_hashable_and_picklable():
    pem = PEM(top_k=32, value_bits=64, epsilon=4.0)
    assert pickle.loads(pickle.dumps(pem)) == pem
    assert hash(pem) == hash(PEM(top_k=32, value_bits=64, epsilon=4.0, start_bits=5))
    with pytest.raises(dataclasses.FrozenInstanceError):
        pem.top_k = 3  # type: ignore[misc]


def test_stage_index_is_checked():
    with pytest.raises(ValueError, match=r"pass_index must be in \[0, 4\), got 4"):
        small().oracle(4)


# -- groups -----------------------------------------------------------------------------------


def reference_group(user_id, num_groups, group_hash=1):
    """The documented rule, written independently: splitmix64(key) mod g."""
    if isinstance(user_id, str) and group_hash == 1:
        key = int.from_bytes(hashlib.blake2b(user_id.encode(), digest_size=8).digest(), "little")
    elif isinstance(user_id, str):
        key = keyed_string_hash(user_id.encode(), int.from_bytes(b"ldpgrp02", "little"))
    else:
        key = user_id % 2**64
    return splitmix64(key, 1)[0] % num_groups


@pytest.mark.parametrize("group_hash", [1, 2])
@pytest.mark.parametrize("num_groups", [1, 3, 4, 7])
def test_groups_follow_the_documented_rule(num_groups, group_hash):
    ids = [0, 1, 2**63, 2**64 - 1, -1, -(2**63), 12345678901234, "alice", "", "日本",
           "exactly8", "nine bytes", "x" * 300, "a\x00", "a"]
    objects = np.empty(len(ids), dtype=object)
    objects[:] = ids
    got = hh.assign_groups(objects, num_groups, group_hash=group_hash)
    assert got.tolist() == [reference_group(i, num_groups, group_hash) for i in ids]
    assert got.tolist()[4] == got.tolist()[3]  # -1 and 2**64 - 1 are the same 64 bits
    strings = [i for i in ids if isinstance(i, str)]
    np.testing.assert_array_equal(hh.assign_groups(strings, num_groups, group_hash=group_hash),
                                  got[-len(strings):])


def test_groups_are_stable_test_vectors():
    # Published values: a change here breaks every deployment's user grouping.
    assert hh.assign_groups(np.arange(8), 4).tolist() == [
        reference_group(i, 4) for i in range(8)
    ]
    for version in (1, 2):
        assert hh.assign_groups(["alice", "bob", "carol"], 4, group_hash=version).tolist() == [
            reference_group(s, 4, version) for s in ("alice", "bob", "carol")
        ]


def test_default_group_hash_is_the_keyed_one():
    words = [f"user-{i}" for i in range(50)]
    assert hh.DEFAULT_GROUP_HASH == hh.GROUP_HASH_KEYED == 2
    np.testing.assert_array_equal(hh.assign_groups(words, 7),
                                  hh.assign_groups(words, 7, group_hash=2))
    assert hh.GROUP_HASH_KEY == 0x323070726770646C  # "ldpgrp02", little-endian


def test_string_keys_of_a_column_equal_user_keys():
    words = ["", "a", "ab", "exactly8", "more than eight", "日本語のテキスト", "x" * 70] * 3
    encoded = [w.encode() for w in words]
    offsets = np.concatenate([[0], np.cumsum([len(b) for b in encoded])])
    data = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    for version in (1, 2):
        np.testing.assert_array_equal(hh.string_keys(offsets, data, group_hash=version),
                                      hh.user_keys(words, group_hash=version))
        # A slice of the offsets into the whole data (how the parser hashes in parts).
        np.testing.assert_array_equal(hh.string_keys(offsets[5:12], data, group_hash=version),
                                      hh.user_keys(words[5:11], group_hash=version))


def test_unknown_group_hash_is_refused():
    with pytest.raises(ValueError, match="group_hash must be one of 1, 2, got 3"):
        hh.assign_groups(["a"], 2, group_hash=3)
    with pytest.raises(ValueError, match="group_hash must be one of 1, 2, got 0"):
        PEM(top_k=4, value_bits=16, epsilon=1.0, group_hash=0)
    with pytest.raises(TypeError, match="group_hash must be an integer, got str"):
        PEM(top_k=4, value_bits=16, epsilon=1.0, group_hash="2")


@pytest.mark.parametrize("name", sorted(hh.PROTOCOLS))
def test_group_hash_is_no_parameter_of_the_key(name):
    cls = hh.PROTOCOLS[name]
    old = cls(top_k=4, value_bits=32, epsilon=2.0, group_hash=1)
    new = cls(top_k=4, value_bits=32, epsilon=2.0)
    assert new.group_hash == 2 and old.group_hash == 1
    assert old.key == new.key and "group_hash" not in new.parameters
    assert old == new and hash(old) == hash(new)  # one configuration, counted together
    assert pickle.loads(pickle.dumps(old)).group_hash == 1
    ids = [f"user-{i}" for i in range(200)]
    reports = old.perturb(np.zeros(200, dtype=np.uint64), ids, np.random.default_rng(1))
    np.testing.assert_array_equal(reports.columns["group"],
                                  hh.assign_groups(ids, old.num_groups, group_hash=1))
    reports = new.perturb(np.zeros(200, dtype=np.uint64), ids, np.random.default_rng(1))
    np.testing.assert_array_equal(reports.columns["group"],
                                  hh.assign_groups(ids, new.num_groups, group_hash=2))


def test_groups_agree_across_id_containers():
    as_int = hh.assign_groups(np.arange(-50, 50, dtype=np.int64), 5)
    as_list = hh.assign_groups(list(range(-50, 50)), 5)
    as_objects = hh.assign_groups(np.array(list(range(-50, 50)), dtype=object), 5)
    np.testing.assert_array_equal(as_int, as_list)
    np.testing.assert_array_equal(as_int, as_objects)
    words = [f"user-{i}" for i in range(100)]
    np.testing.assert_array_equal(
        hh.assign_groups(words, 5), hh.assign_groups(np.array(words, dtype=object), 5)
    )
    np.testing.assert_array_equal(
        hh.assign_groups(words, 5), hh.assign_groups([w.encode() for w in words], 5)
    )


@pytest.mark.parametrize("ids", [np.arange(60_000), [f"u{i}" for i in range(60_000)]])
def test_groups_are_equal_in_size_within_4_sigma(ids):
    g = 4
    counts = np.bincount(hh.assign_groups(ids, g), minlength=g)
    n = len(ids)
    sigma = math.sqrt(n * (1 / g) * (1 - 1 / g))
    assert np.all(np.abs(counts - n / g) < 4 * sigma)


def test_no_users_no_groups():
    assert hh.assign_groups([], 3).shape == (0,)
    reports = small().perturb([], [])
    assert len(reports) == 0 and set(reports.columns) == set(small().empty_reports().columns)


def test_bad_user_ids_are_named():
    with pytest.raises(TypeError, match="user_ids must be integers or strings, got dtype float64"):
        hh.assign_groups(np.array([1.5]), 3)
    with pytest.raises(TypeError, match="got bool at position 1"):
        hh.assign_groups(np.array([1, True], dtype=object), 3)
    message = r"user_ids must lie in \[-2\*\*63, 2\*\*64\), got 18446744073709551616"
    with pytest.raises(ValueError, match=message):
        hh.assign_groups(np.array([2**64], dtype=object), 3)
    with pytest.raises(TypeError, match="got a single string"):
        hh.assign_groups("alice", 3)


# -- client -----------------------------------------------------------------------------------


def test_each_user_reports_once_in_its_own_group():
    pem = small()
    ids = np.array([f"user{i}" for i in range(500)], dtype=object)
    values = np.random.default_rng(3).integers(0, 2**16, size=500)
    reports = pem.perturb(values, ids, np.random.default_rng(4))
    assert len(reports) == 500 and reports.oracle == "pem"
    np.testing.assert_array_equal(reports.group, pem.group_of(ids))
    np.testing.assert_array_equal(reports.prefix_bits, np.array(pem.prefix_bits)[reports.group])
    assert reports.seed.dtype == np.uint64 and reports.bucket.dtype == np.int64
    assert set(np.unique(reports.group)) == set(range(pem.num_groups))
    parts = pem.split_groups(reports)
    assert sum(len(p) for p in parts) == 500
    assert invalid_count(pem, reports) == 0


def invalid_count(pem, reports):
    return pem.invalid_rows(reports)[0].size


@pytest.mark.parametrize("value_bits", [16, 64])
def test_client_reports_its_prefix_through_olh(value_bits):
    # At epsilon = 40 the bucket is H_s(prefix) except with probability < 1e-15.
    pem = PEM(top_k=3, value_bits=value_bits, epsilon=40.0, query_limit=2**6, hash_range=8)
    rng = np.random.default_rng(5)
    values = rng.integers(0, 2**value_bits, size=400, dtype=np.uint64)
    reports = pem.perturb(values, np.arange(400), rng)
    for pass_index, bits in enumerate(pem.prefix_bits):
        rows = reports.group == pass_index
        prefixes = values[rows] >> np.uint64(value_bits - bits)
        hashed = hashing.hash_values(reports.seed[rows], prefixes, bits, pem.hash_range)
        np.testing.assert_array_equal(reports.bucket[rows], hashed)


def test_perturb_is_reproducible_with_a_seed_and_secure_by_default():
    pem = small()
    values = np.arange(100)
    a = pem.perturb(values, values, np.random.default_rng(9))
    b = pem.perturb(values, values, np.random.default_rng(9))
    for name in a.columns:
        np.testing.assert_array_equal(a.columns[name], b.columns[name])
    c = pem.perturb(values, values)  # the CSPRNG
    assert not np.array_equal(a.seed, c.seed)


def test_perturb_one_returns_plain_ints():
    pem = PEM(top_k=32, value_bits=64, epsilon=4.0)
    record = pem.perturb_one(2**64 - 1, "alice", np.random.default_rng(1))
    assert set(record) == {"seed", "bucket", "group", "prefix_bits"}
    assert all(type(v) is int for v in record.values())
    assert record["group"] == reference_group("alice", 4, pem.group_hash)


def test_perturb_rejects_values_of_2_to_the_m_and_mismatched_ids():
    pem = small()
    message = r"values must lie in \[0, 2\*\*16\), got 65536 at position 2"
    with pytest.raises(ValueError, match=message):
        pem.perturb([1, 2, 2**16], [1, 2, 3])
    with pytest.raises(ValueError, match=r"user_ids must hold one id per value \(2\), got 3"):
        pem.perturb([1, 2], [1, 2, 3])


def test_invalid_values_are_listed_with_countable_reasons():
    pem = PEM(top_k=4, value_bits=64, epsilon=1.0)
    rows, reasons = pem.invalid_values(np.array([0, 2**64, -3, 2**64 - 1, 1.5], dtype=object))
    assert rows.tolist() == [1, 2, 4]
    assert reasons == ["value outside [0, 2**64)"] * 2 + ["value is not an integer"]
    rows, reasons = small().invalid_values(np.array([5, 65536, 70000, -1]))
    assert rows.tolist() == [1, 2, 3] and set(reasons) == {"value outside [0, 2**16)"}


# -- report validation ------------------------------------------------------------------------


def test_invalid_rows_name_a_reason_each():
    pem = small()
    reports = reports_for(pem, 40, 1)
    cols = {k: v.copy() for k, v in reports.columns.items()}
    cols["group"][3] = 7  # no such group
    cols["prefix_bits"][5] = pem.prefix_bits[cols["group"][5]] + 1  # wrong length for group
    cols["bucket"][8] = pem.hash_range  # bucket out of range
    cols["group"][9] = -1
    cols["bucket"][9] = -1  # first failing check wins
    rows, reasons = pem.invalid_rows(Reports("pem", cols))
    assert rows.tolist() == [3, 5, 8, 9]
    assert reasons == [
        "group outside [0, 4)",
        "prefix_bits does not match the group's length",
        f"bucket outside [0, {pem.hash_range})",
        "group outside [0, 4)",
    ]
    with pytest.raises(InvalidReportError, match="4 invalid pem report.*first at row 3"):
        pem.identify(Reports("pem", cols))


def test_malformed_batches_are_refused():
    pem = small()
    good = reports_for(pem, 10, 2)
    with pytest.raises(InvalidReportError, match="need columns"):
        pem.invalid_rows({"seed": good.seed, "bucket": good.bucket})
    with pytest.raises(InvalidReportError, match="reports of oracle 'olh' given to 'pem'"):
        pem.invalid_rows(Reports("olh", good.columns))
    bad = dict(good.columns, bucket=good.bucket.astype(float))
    with pytest.raises(InvalidReportError, match="must hold integers"):
        pem.invalid_rows(bad)
    with pytest.raises(TypeError, match="reports must be Reports or a mapping"):
        pem.invalid_rows([1, 2])


def test_aggregate_refuses_reports_of_another_group():
    pem = small()
    reports = reports_for(pem, 50, 3)
    with pytest.raises(InvalidReportError,
                       match=r"pass 0 counts the reports of group\(s\) \[0\], got group 3"):
        pem.aggregate(0, reports)


# -- exact candidate counting -----------------------------------------------------------------


def naive_counts(pem, pass_index, group_reports, candidates):
    return hashing.naive_support_counts(
        group_reports.seed, group_reports.bucket, pem.prefix_bits[pass_index], pem.hash_range,
        candidates,
    )


@pytest.mark.parametrize("batch", [None, 1, 2, 3])
@pytest.mark.parametrize(
    "params",
    [
        dict(top_k=3, value_bits=16, epsilon=2.0, query_limit=2**6),
        dict(top_k=5, value_bits=64, epsilon=1.0, query_limit=2**8),  # 63- and 64-bit prefixes
        dict(top_k=2, value_bits=12, epsilon=4.0, query_limit=2**5, hash_range=32),
    ],
)
def test_candidate_counts_equal_the_naive_grid(params, batch, monkeypatch):
    if batch is not None:
        monkeypatch.setattr(hh.counting, "batch_size", lambda *args: batch)
    pem = PEM(**params)
    rng = np.random.default_rng(11)
    reports = reports_for(pem, 100 * pem.num_groups, 12)
    prefixes = None
    for pass_index, group in enumerate(pem.split_groups(reports)):
        est = pem.count_candidates(pass_index, group, prefixes)
        np.testing.assert_array_equal(est.candidates, pem.candidates(pass_index, prefixes))
        np.testing.assert_array_equal(
            est.support_counts, naive_counts(pem, pass_index, group, est.candidates)
        )
        # The next pass extends arbitrary prefixes, including 0 and the largest one.
        top = np.uint64(2**pem.prefix_bits[pass_index] - 1)
        pool = rng.integers(0, top, size=pem.top_k - 2, dtype=np.uint64, endpoint=True)
        prefixes = np.unique(np.concatenate([[np.uint64(0), top], pool]))


def test_stage_zero_counts_equal_the_full_domain_olh_oracle():
    pem = small()
    group = pem.split_groups(reports_for(pem, 400, 13))[0]
    oracle = OptimizedLocalHashing(epsilon=2.0, domain_size=2**6, hash_range=pem.hash_range)
    olh = oracle.estimate(oracle.aggregate({"seed": group.seed, "bucket": group.bucket}))
    est = pem.count_candidates(0, group)
    np.testing.assert_array_equal(est.support_counts, olh.support_counts)
    np.testing.assert_allclose(est.frequencies, olh.frequencies)
    assert est.sigma == pytest.approx(olh.sigma)


def test_candidates_extend_each_prefix_by_every_suffix():
    out = hh.extend_prefixes(np.array([5, 2], dtype=np.uint64), 2)
    assert out.tolist() == [20, 21, 22, 23, 8, 9, 10, 11]
    assert out.dtype == np.uint64
    pem = PEM(top_k=32, value_bits=64, epsilon=4.0)
    last = pem.candidates(3, [2**50 - 1])
    assert int(last[-1]) == 2**64 - 1 and last.size == 2**14


def test_prefixes_are_checked():
    pem = small()
    with pytest.raises(ValueError, match="prefixes of pass 0 must be None"):
        pem.candidates(0, [3])
    with pytest.raises(ValueError, match="prefixes of pass 1 must be the survivors of pass 0"):
        pem.candidates(1)
    with pytest.raises(ValueError, match=r"prefixes must lie in \[0, 2\*\*6\), got 64"):
        pem.candidates(1, [1, 64])
    with pytest.raises(ValueError,
                       match=r"prefixes must hold at most query_limit // 2\*\*4 = 4, got 5"):
        pem.candidates(1, [1, 2, 3, 4, 5])
    with pytest.raises(ValueError, match="prefixes must be distinct"):
        pem.candidates(1, [1, 1])


# -- accumulators -----------------------------------------------------------------------------


@given(cuts=st.lists(st.integers(0, 300), max_size=4), order=st.randoms())
@settings(max_examples=25, deadline=None)
def test_merging_shards_equals_pooling_in_any_order(cuts, order):
    pem = small()
    group = pem.split_groups(reports_for(pem, 1200, 21))[1]
    prefixes = np.array([7, 0, 63], dtype=np.uint64)
    whole = pem.aggregate(1, group, prefixes)
    bounds = [0, *sorted(min(c, len(group)) for c in cuts), len(group)]
    pairs = zip(bounds[:-1], bounds[1:], strict=True)
    shards = [pem.aggregate(1, group[a:b], prefixes) for a, b in pairs]
    order.shuffle(shards)
    merged = pem.create_accumulator(1, prefixes)
    for shard in shards:
        assert merged.merge(shard) is merged
    assert merged == whole
    assert merged.n == len(group)


def test_merge_refuses_other_stages_prefixes_and_parameters():
    pem = small()
    groups = pem.split_groups(reports_for(pem, 400, 22))
    acc = pem.aggregate(1, groups[1], [1, 2])
    with pytest.raises(ValueError, match="made for different candidates"):
        acc.merge(pem.aggregate(1, groups[1], [2, 1]))
    with pytest.raises(ValueError, match="cannot merge counts of pass 2"):
        acc.merge(pem.aggregate(2, groups[2], [1, 2]))
    other = small(epsilon=3.0)
    with pytest.raises(ValueError, match="cannot merge"):
        acc.merge(other.create_accumulator(1, [1, 2]))
    with pytest.raises(TypeError, match="can only merge PassCounts"):
        acc.merge(pem.oracle(1).create_accumulator())
    with pytest.raises(ValueError, match="accumulator of .* given to"):
        other.estimate(acc)


def test_accumulator_copy_and_pickle():
    pem = small()
    acc = pem.aggregate(0, pem.split_groups(reports_for(pem, 100, 23))[0])
    twin = pickle.loads(pickle.dumps(acc))
    assert twin == acc and twin is not acc
    copy = acc.copy()
    copy.arrays["counts"][0, 0] += 1
    assert copy != acc
    copy = acc.copy()
    copy.group_counts[0] += 1
    assert copy != acc


def test_empty_group_with_candidates_is_undefined_not_zero():
    pem = small()
    empty = pem.empty_reports()
    with pytest.raises(ValueError, match="group 0 has no reports; the frequencies of pass 0"):
        pem.count_candidates(0, empty)
    est = pem.count_candidates(1, empty, np.zeros(0, dtype=np.uint64))
    assert est.candidates.size == 0 and est.frequencies.size == 0


# -- selection --------------------------------------------------------------------------------


def test_select_top_breaks_ties_towards_the_smaller_candidate():
    cand = np.array([9, 4, 7, 1], dtype=np.uint64)
    score = np.array([0.5, 0.5, 0.9, 0.1])
    assert hh.select_top(cand, score, 3).tolist() == [2, 1, 0]
    assert hh.select_top(cand, score, 10, threshold=0.5).tolist() == [2, 1, 0]
    assert hh.select_top(cand, score, 2, threshold=0.95).tolist() == []
    with pytest.raises(ValueError, match="one length"):
        hh.select_top(cand, score[:2], 1)


def test_threshold_variant_keeps_only_prefixes_above_it():
    values = np.repeat(np.array([0x1234, 0xABCD, 0x0F0F], dtype=np.uint64), [3000, 2000, 50])
    pem = small(epsilon=4.0)
    result = pem.identify(reports_for(pem, 0, 31, values=values), threshold=0.2)
    assert sorted(result.values.tolist()) == [0x1234, 0xABCD]
    assert all(s <= 2 * pem.default_survivors for s in result.pass_survivors)


def test_threshold_in_sigmas_is_a_server_argument():
    values = np.repeat(np.array([0x1234, 0xABCD, 0x0F0F], dtype=np.uint64), [3000, 2000, 50])
    pem = small(epsilon=4.0)
    reports = reports_for(pem, 0, 32, values=values)
    est = pem.count_candidates(0, pem.split_groups(reports)[0])
    kept = pem.select(est, threshold_sigma=6.0)
    assert np.all(kept.frequencies >= 6.0 * est.sigma)
    assert np.all(np.sort(est.frequencies)[::-1][: kept.prefixes.size] == np.sort(
        kept.frequencies)[::-1])  # exactly the candidates above the cut, best first
    with pytest.raises(ValueError, match="threshold_sigma must be finite"):
        pem.select(est, threshold_sigma=math.nan)
    with pytest.raises(TypeError, match="threshold must be a real number or None"):
        pem.select(est, threshold="0.1")
    with pytest.raises(ValueError, match=r"survivors must be <= query_limit // 2\*\*step_bits"):
        pem.select(est, survivors=5)
    assert "threshold" not in pem.parameters  # not wire configuration


# -- whole runs -------------------------------------------------------------------------------


def test_identify_finds_clear_heavy_hitters_within_the_query_limit():
    pem = PEM(top_k=4, value_bits=32, epsilon=4.0, query_limit=2**10)
    rng = np.random.default_rng(41)
    heavy = np.array([0xDEADBEEF, 0x00000001, 0xFFFFFFFF, 0x12345678], dtype=np.uint64)
    noise = rng.integers(0, 2**32, size=2000, dtype=np.uint64)
    values = np.concatenate([np.repeat(heavy, [4000, 3000, 2500, 2000]), noise])
    result = pem.identify(pem.perturb(values, np.arange(values.size), rng))
    assert result.values.tolist() == heavy.tolist()
    assert result.population == values.size == sum(result.group_sizes)
    assert all(c <= pem.query_limit for c in result.pass_candidates)
    assert result.pass_candidates[0] == 2 ** pem.prefix_bits[0]
    # Frequencies are unbiased shares of the population: within 5 sigma of the truth.
    truth = np.array([4000, 3000, 2500, 2000]) / values.size
    sigma = np.sqrt(pem.variance(min(result.group_sizes), truth))
    assert np.all(np.abs(result.frequencies - truth) < 5 * sigma)
    np.testing.assert_allclose(result.counts, result.frequencies * values.size)
    records = result.to_records()
    assert records[0]["value"] == 0xDEADBEEF and type(records[0]["value"]) is int


def test_identify_with_the_string_codec_decodes_words():
    codec = StringCodec(bits=32)
    words = ["the"] * 3000 + ["of"] * 2000 + ["and"] * 1500 + [f"w{i}" for i in range(500)]
    pem = PEM(top_k=3, value_bits=32, epsilon=4.0, query_limit=2**8)
    ids = [f"user-{i}" for i in range(len(words))]
    reports = pem.perturb(codec.encode(words), ids, np.random.default_rng(5))
    result = pem.identify(reports)
    assert [r["value"] for r in result.to_records(codec)] == ["the", "of", "and"]


@pytest.mark.statistical
def test_stage_zero_estimates_are_unbiased_with_the_olh_variance():
    pem = PEM(top_k=8, value_bits=16, epsilon=2.0, query_limit=2**10)
    rng = np.random.default_rng(51)
    values = hh.sample_values(40_000, num_distinct=300, value_bits=16, rng=rng)
    reports = pem.perturb(values, np.arange(values.size), rng)
    group = reports.group == 0
    est = pem.count_candidates(0, reports[np.flatnonzero(group)])
    shift = np.uint64(16 - pem.prefix_bits[0])
    truth = np.bincount((values[group] >> shift).astype(np.int64), minlength=2**10) / est.n
    z = (est.frequencies - truth) / np.sqrt(pem.variance(est.n, truth))
    assert np.max(np.abs(z)) < 5  # 1024 candidates: P[any |z| > 5] < 1e-3
    # The mean of z^2 is 1 within 4 standard errors of chi-square(1024) / 1024.
    assert abs(np.mean(z**2) - 1) < 4 * math.sqrt(2 / z.size)


@pytest.mark.statistical
def test_pem_top_k_equals_the_exhaustive_olh_top_k_on_16_bits():
    k, m, epsilon, n = 8, 16, 4.0, 300_000
    rng = np.random.default_rng(61)
    heavy = hh.distinct_values(k + 3000, m, rng)
    shares = np.linspace(0.12, 0.05, k)  # gaps of 0.01
    counts = np.concatenate([np.round(shares * n), np.full(3000, 0)]).astype(int)
    counts[k:] = rng.multinomial(n - counts[:k].sum(), np.full(3000, 1 / 3000))
    values = rng.permutation(np.repeat(heavy, counts))
    truth = heavy[:k].tolist()

    pem = PEM(top_k=k, value_bits=m, epsilon=epsilon, query_limit=2**10)
    assert pem.prefix_bits == (10, 16)
    found = pem.identify(pem.perturb(values, np.arange(n), rng))

    olh = OptimizedLocalHashing(epsilon=epsilon, domain_size=2**m)
    est = olh.estimate(olh.aggregate(olh.perturb(values.astype(np.int64), rng=rng)))
    exhaustive = np.argsort(-est.frequencies, kind="stable")[:k].tolist()

    # The gaps (0.01 between heavy values, > 0.04 to the rest) exceed 5 standard deviations
    # of a difference of two PEM estimates, whose groups hold n / 2 users each.
    assert 0.01 > 5 * math.sqrt(2 * pem.variance(n // 2, 0.12))
    assert found.values.tolist() == exhaustive == truth


@pytest.mark.slow
@pytest.mark.statistical
def test_a_million_64_bit_zipf_values_find_the_clear_heavy_hitters():
    pem = PEM(top_k=32, value_bits=64, epsilon=4.0)
    rng = np.random.default_rng(71)
    values = hh.sample_values(1_000_000, num_distinct=100_000, value_bits=64, rng=rng)
    truth = hh.true_top(values, 32)
    result = pem.identify(pem.perturb(values, np.arange(values.size), rng))
    assert all(c <= pem.query_limit for c in result.pass_candidates)
    # Every true top-16 value at 8 sigma above zero in each group is identified ...
    sigma = math.sqrt(pem.variance(min(result.group_sizes)))
    clear = [t["value"] for t in truth[:16] if t["count"] / values.size > 8 * sigma]
    assert len(clear) >= 10
    found = dict(zip(result.values.tolist(), result.frequencies.tolist(), strict=True))
    assert set(clear) <= set(found)
    # ... with an estimate within 5 sigma of its share.
    for t in truth[:16]:
        if t["value"] in found:
            share = t["count"] / values.size
            tol = 5 * math.sqrt(pem.variance(min(result.group_sizes), share))
            assert abs(found[t["value"]] - share) < tol
    assert hh.score_top_k(result.values, truth, 32)["f1"] > 0.8


# -- simulation helpers -----------------------------------------------------------------------


def test_rank_probabilities():
    zipf = hh.rank_probabilities(4, "zipf", exponent=1.0)
    np.testing.assert_allclose(zipf, np.array([1, 1 / 2, 1 / 3, 1 / 4]) / (25 / 12))
    np.testing.assert_allclose(hh.rank_probabilities(4, "uniform"), 0.25)
    geo = hh.rank_probabilities(3, "geometric", ratio=0.5)
    np.testing.assert_allclose(geo, np.array([4, 2, 1]) / 7)
    message = r"distribution must be one of \['zipf', 'uniform', 'geometric'\]"
    with pytest.raises(ValueError, match=message):
        hh.rank_probabilities(3, "pareto")
    with pytest.raises(ValueError, match=r"ratio must be in \(0, 1\), got 1.0"):
        hh.rank_probabilities(3, "geometric", ratio=1.0)


@pytest.mark.parametrize("bits", [4, 20, 64])
def test_distinct_values_are_distinct_and_in_range(bits):
    count = min(16, 2**bits)
    values = hh.distinct_values(count, bits, 3)
    assert values.dtype == np.uint64 and np.unique(values).size == count
    assert int(values.max()) < 2**bits
    with pytest.raises(ValueError, match="count must be <= 2\\*\\*value_bits = 16, got 17"):
        hh.distinct_values(17, 4, 3)


def test_sample_values_is_seeded_and_follows_the_ranks():
    a = hh.sample_values(50_000, num_distinct=50, value_bits=64, rng=7)
    b = hh.sample_values(50_000, num_distinct=50, value_bits=64, rng=np.random.default_rng(7))
    np.testing.assert_array_equal(a, b)
    top = hh.true_top(a)
    assert len(top) <= 50 and top[0]["count"] > top[-1]["count"]
    probs = hh.rank_probabilities(50, "zipf")
    counts = np.array([t["count"] for t in top[:5]])
    sd = np.sqrt(50_000 * probs[:5] * (1 - probs[:5]))
    assert np.all(np.abs(counts - 50_000 * probs[:5]) < 5 * sd)


def test_true_top_sorts_by_count_then_value():
    values = np.array([5, 3, 3, 9, 9, 1], dtype=np.uint64)
    assert hh.true_top(values) == [
        {"value": 3, "count": 2}, {"value": 9, "count": 2},
        {"value": 1, "count": 1}, {"value": 5, "count": 1},
    ]
    assert hh.true_top(values, 1) == [{"value": 3, "count": 2}]


def test_score_top_k_uses_set_metrics_and_ncr():
    truth = [{"value": v, "count": c} for v, c in [(10, 9), (20, 8), (30, 7), (40, 6)]]
    scores = hh.score_top_k(np.array([10, 30, 99], dtype=np.uint64), truth, 3)
    assert scores["precision"] == pytest.approx(2 / 3)
    assert scores["recall"] == pytest.approx(2 / 3)
    assert scores["f1"] == pytest.approx(2 / 3)
    assert scores["ncr"] == pytest.approx((3 + 1) / 6)
    full = hh.score_top_k([2**64 - 1], [2**64 - 1], 1)
    assert full == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "ncr": 1.0}


# -- automatic configuration, survivors and the combined ranking --------------------------


@pytest.mark.parametrize("epsilon, expected", [(1.0, 4), (2.0, 8), (4.0, 32), (8.0, 64)])
def test_cost_aware_hash_range_is_the_cheapest_within_10_percent_capped(epsilon, expected):
    from ldpflow.core.heavy_hitters.config import olh_variance_factor

    g = hh.cost_aware_hash_range(epsilon)
    assert g == expected
    best = optimal_hash_range(epsilon)
    if g < 64:  # not capped: within 10 % of the optimum, and half of it is not
        assert olh_variance_factor(epsilon, g) <= 1.1 * olh_variance_factor(epsilon, best)
        assert g == 2 or olh_variance_factor(epsilon, g // 2) > 1.1 * olh_variance_factor(
            epsilon, best)
    assert hh.cost_aware_hash_range(8.0, max_hash_range=4096) == 2048
    assert hh.cost_aware_hash_range(8.0, max_hash_range=256) == 256
    assert hh.cost_aware_hash_range(epsilon, tolerance=0.0, max_hash_range=2**20) == best


def test_configure_takes_the_fewest_groups_within_the_budget():
    pem = hh.configure(top_k=32, value_bits=64, epsilon=4.0, users=10**6)
    assert pem.num_groups == 4 and pem.hash_range == 32
    assert pem.default_survivors == 64  # 2 k fits: the query limit was sized for it
    assert max(pem.max_candidates(s) for s in range(4)) <= pem.query_limit <= 2**22
    assert pem.query_limit >> pem.suffix_bits(1) >= 2 * pem.default_survivors  # pass 0
    # No configuration with 3 groups keeps 64 survivors within 2**22 candidates:
    # 3 groups need 2**(gamma + eta) <= 2**22 and 64 * 2**eta <= 2**22, so gamma + 3 eta
    # <= 22 + 2 * 16 = 54 < 64.
    small_m = hh.configure(top_k=8, value_bits=16, epsilon=1.0, users=1000)
    assert small_m.num_groups == 1 and small_m.prefix_bits == (16,)  # exhaustive
    assert hh.configure(top_k=16, value_bits=32, epsilon=4.0, users=10**6).num_groups == 2
    more = hh.configure(top_k=32, value_bits=64, epsilon=4.0, users=10**6,
                        max_candidates=2**26)
    assert more.num_groups == 3  # a larger budget buys a group
    with pytest.raises(ValueError, match="max_candidates must allow 128 survivors of pass 0"):
        hh.configure(top_k=32, value_bits=64, epsilon=4.0, users=10, max_candidates=255)
    for budget in (2**20, 2**22, 2**24):  # the budget holds whatever the configuration
        pem = hh.configure(top_k=32, value_bits=64, epsilon=4.0, users=10**6,
                           max_candidates=budget)
        assert pem.query_limit <= budget


def test_stage_zero_keeps_twice_the_survivors_when_the_next_stage_fits():
    pem = hh.configure(top_k=4, value_bits=32, epsilon=4.0, users=20_000)
    reports = reports_for(pem, 20_000, 51)
    est = pem.count_candidates(0, pem.split_groups(reports)[0])
    assert pem.select(est, significance=None).prefixes.size == 2 * pem.default_survivors == 16


def _pass_index(bits, prefixes, freqs, sigma):
    prefixes = np.asarray(prefixes, dtype=np.uint64)
    freqs = np.asarray(freqs, dtype=float)
    return hh.PassSurvivors(bits, prefixes, freqs, sigma, freqs)


def test_combine_is_the_inverse_variance_mean_of_agreeing_ancestors():
    history = [_pass_index(4, [0b1010, 0b0001], [0.30, 0.10], 0.01),
               _pass_index(8, [0b10100110, 0b00011111], [0.32, 0.50], 0.02)]
    pool = np.array([0b101001101111, 0b000111110000], dtype=np.uint64)
    scores = hh.combine(pool, [0.31, 0.05], 0.01, 12, history, z=3.0)
    w = np.array([1 / 0.01**2, 1 / 0.01**2, 1 / 0.02**2])
    assert scores[0] == pytest.approx(np.dot(w, [0.31, 0.30, 0.32]) / w.sum())
    # The second value's ancestors are far heavier (other values below them): own only.
    assert scores[1] == 0.05


def test_combine_never_lends_an_ancestor_to_a_noisier_sibling_or_a_stranger():
    history = [_pass_index(4, [0b1010], [0.30], 0.01)]
    pool = np.array([0b10100001, 0b10100010, 0b01010101], dtype=np.uint64)
    scores = hh.combine(pool, [0.29, 0.28, 0.29], 0.01, 8, history, z=3.0)
    assert scores[0] == pytest.approx((0.29 + 0.30) / 2)  # the best child below 1010
    assert scores[1] == 0.28 and scores[2] == 0.29  # a sibling; no kept ancestor
    assert hh.combine(pool, [0.29, 0.28, 0.29], 0.01, 8, []).tolist() == [0.29, 0.28, 0.29]


def test_string_pruning_keeps_words_from_growing_past_their_end():
    codec = StringCodec(bits=32)
    words = ["the"] * 6000 + ["of"] * 4000 + ["when"] * 3000 + ["a"] * 2000
    words += [f"x{i % 1000:03d}" for i in range(5000)]
    pem = PEM(top_k=4, value_bits=32, epsilon=4.0, query_limit=2**13, start_bits=2,
              step_bits=10)  # 8 survivors per pass
    reports = reports_for(pem, 0, 52, values=codec.encode(words))
    pruned = pem.identify(reports, valid=codec.valid_prefixes)
    assert sorted(codec.decode(pruned.values)) == ["a", "of", "the", "when"]
    assert codec.valid_prefixes(pruned.values, 32).all()
    loose = pem.identify(reports, top_k=8, survivors=8, significance=None)
    # Without pruning, the noisy extensions of words past their end compete as values.
    assert not codec.valid_prefixes(loose.values, 32).all()
    strict = pem.identify(reports, top_k=8, survivors=8, valid=codec.valid_prefixes,
                          significance=None)
    assert codec.valid_prefixes(strict.values, 32).all()


@pytest.mark.parametrize("count", [5, 300])
def test_candidate_support_of_any_set_equals_the_naive_grid(count):
    rng = np.random.default_rng(61)
    seeds = rng.integers(0, 2**64, size=500, dtype=np.uint64)
    buckets = rng.integers(0, 8, size=500)
    cand = np.unique(rng.integers(0, 2**40, size=count, dtype=np.uint64))
    cand = np.concatenate([cand, cand[:3] ^ np.uint64(1)])  # neighbours share a prefix
    got = hh.counting.candidate_support(seeds, buckets, cand, 40, 8)
    np.testing.assert_array_equal(got, hashing.naive_support_counts(seeds, buckets, 40, 8,
                                                                    cand))


def test_published_group_hash_vectors_follow_the_written_rule():
    import json
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[2] / "docs/testvectors/group_hash.json"
    vectors = json.loads(path.read_text(encoding="utf-8"))
    key = int(vectors["key"])
    assert key == hh.GROUP_HASH_KEY
    for case in vectors["ids"]:
        data = bytes.fromhex(case["utf8"])
        assert data == case["user_id"].encode("utf-8")
        assert int(case["keyed_hash"]) == keyed_string_hash(data, key)
        assert int(case["keys"]["1"]) == int.from_bytes(
            hashlib.blake2b(data, digest_size=8).digest(), "little")
        assert case["keys"]["2"] == case["keyed_hash"]
        for version, groups in case["groups"].items():
            for g, group in groups.items():
                assert group == reference_group(case["user_id"], int(g), int(version))
    assert len(vectors["keyed_hashes"]) >= 20
    for case in vectors["keyed_hashes"]:
        assert int(case["hash"]) == keyed_string_hash(bytes.fromhex(case["bytes"]),
                                                         int(case["key"]))
