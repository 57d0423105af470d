"""Records -> batches and dead letters: every record lands in exactly one of the two."""

from __future__ import annotations

import numpy as np
import pytest

import ldpflow
from ldpflow.core.dedup import report_id_hashes
from tests.wire_support import ReportBatch, parse_records, reports_to_records


def make_records(name, n=20, d=16, seed=0, **params):
    oracle = ldpflow.oracle(name, epsilon=1.0, domain_size=d, **params)
    rng = np.random.default_rng(seed)
    reports = oracle.perturb(rng.integers(0, d, n), rng=rng)
    ids = [f"{name}-{seed}-{i}" for i in range(n)]
    return oracle, reports, reports_to_records(oracle, reports, ids, [f"u{i}" for i in range(n)],
                                               np.arange(n) * 1000)


@pytest.mark.parametrize("name", list(ldpflow.ORACLES))
@pytest.mark.parametrize("trusted", [True, False])
def test_valid_records_round_trip_to_the_same_counts(name, trusted):
    oracle, reports, records = make_records(name, n=50)
    batches, dead = parse_records(records, trusted=trusted)
    assert dead == []
    (batch,) = batches.values()
    assert batch.key == oracle.key
    assert oracle.aggregate(batch.reports) == oracle.aggregate(reports)
    assert batch.id_hashes.tolist() == report_id_hashes([r["report_id"] for r in records]).tolist()
    assert batch.event_times.tolist() == [r["event_time"] for r in records]


def test_keys_are_never_mixed():
    records = []
    for name, d in [("grr", 16), ("grr", 32), ("olh", 16), ("oue", 16)]:
        records += make_records(name, n=10, d=d)[2]
    records += make_records("olh", n=10, d=16, hash_range=8)[2]
    batches, dead = parse_records(records, trusted=True)
    assert not dead
    assert sorted(len(b) for b in batches.values()) == [10] * 5
    assert len({b.key for b in batches.values()}) == 5


CASES = [
    (lambda r: r.pop("user_id"), "malformed record: missing field 'user_id'"),
    (lambda r: r.update(event_time="noon"),
     "malformed record: field 'event_time' must be an integer, got str"),
    (lambda r: r.update(epsilon=True),
     "malformed record: field 'epsilon' must be a number, got bool"),
    (lambda r: r.update(oracle="rappor"), "unknown oracle 'rappor'"),
    (lambda r: r.update(epsilon=-1.0), "invalid parameters: epsilon must be in (0, inf)"),
    (lambda r: r.update(domain_size=1), "invalid parameters: domain_size must be >= 2"),
    (lambda r: r.update(hash_range=3), "invalid parameters: hash_range must be a power of two"),
    (lambda r: r.update(seed=None), "missing payload field 'seed' for oracle olh"),
    (lambda r: r.update(bucket="3"),
     "malformed record: field 'bucket' must be an integer, got str"),
    (lambda r: r.update(bucket=4), "bucket outside [0, 4)"),
    (lambda r: r.update(value=7), "unexpected payload field 'value' for oracle olh"),
]


@pytest.mark.parametrize("mutate,reason", CASES)
def test_each_kind_of_bad_record_is_a_dead_letter_with_its_reason(mutate, reason):
    oracle, _, records = make_records("olh", n=12)
    mutate(records[5])
    batches, dead = parse_records(records, source="file.jsonl")
    assert len(dead) == 1
    assert dead[0].reason.startswith(reason), dead[0].reason
    assert dead[0].source == "file.jsonl"
    assert sum(len(b) for b in batches.values()) == 11


def test_bits_of_the_wrong_length_are_a_dead_letter():
    _, _, records = make_records("oue", n=5, d=20)
    records[2]["bits"] = records[2]["bits"][:2]
    batches, dead = parse_records(records, trusted=True)
    assert [d.reason for d in dead] == ["payload 'bits' has 2 bytes, expected 3 for domain_size 20"]
    assert len(next(iter(batches.values()))) == 4


def test_parameter_mismatch_against_expectations():
    _, _, a = make_records("grr", n=4, d=16)
    _, _, b = make_records("grr", n=3, d=32)
    batches, dead = parse_records(a + b, expect={"domain_size": 16})
    assert [len(x) for x in batches.values()] == [4]
    assert {d.reason for d in dead} == {"parameter mismatch: domain_size 32, expected 16"}
    assert all(d.key is not None for d in dead)


def test_non_object_records_are_dead_letters():
    batches, dead = parse_records([["not", "a", "record"], 3])
    assert not batches and len(dead) == 2
    assert dead[0].reason == "malformed record: expected an object, got list"


def test_unsigned_json_seeds_equal_signed_avro_seeds():
    oracle, reports, records = make_records("olh", n=30)
    unsigned = [dict(r, seed=r["seed"] % 2**64) for r in records]
    a, _ = parse_records(records, trusted=True)
    b, _ = parse_records(unsigned)
    np.testing.assert_array_equal(a[oracle.key].reports.seed, reports.seed)
    np.testing.assert_array_equal(b[oracle.key].reports.seed, reports.seed)


def test_report_batches_slice_and_concatenate():
    _, _, records = make_records("grr", n=10)
    (batch,) = parse_records(records)[0].values()
    joined = ReportBatch.concat([batch[:3], batch[3:]])
    assert joined.id_hashes.tolist() == batch.id_hashes.tolist()
    np.testing.assert_array_equal(joined.reports.value, batch.reports.value)


def test_the_id_column_gives_the_rows_whose_hashes_the_batches_would_hold():
    # keep with id_column: the batches leave their id hashes to the caller, who gets the
    # report_id column and each key's rows, in the batch's order (bad rows left out).
    from ldpflow.wire.parse import (
        ID_COLUMN,
        AcceptancePolicy,
        id_column_hashes,
        parse_table,
        records_to_table,
    )

    grr = ldpflow.oracle("grr", epsilon=1.0, domain_size=8)
    olh = ldpflow.oracle("olh", epsilon=1.0, domain_size=64)
    rng = np.random.default_rng(3)
    records = []
    for oracle, tag in ((grr, "g"), (olh, "o")):
        reports = oracle.perturb(rng.integers(0, oracle.domain_size, 300), rng=rng)
        records += reports_to_records(oracle, reports, [f"{tag}-{i}" * (1 + i % 3)
                                                        for i in range(300)],
                                      [f"u{i}" for i in range(300)], range(300))
    records[5]["epsilon"] = -1.0  # dead letters in the middle
    records[400]["report_id"] = None
    order = rng.permutation(len(records))  # the keys' rows interleaved
    table, dead = records_to_table([records[i] for i in order])
    assert not dead
    policy = AcceptancePolicy(id_key=bytes(range(16)))
    plain = parse_table(table, policy=policy, keep=("id_hashes",))
    deferred = parse_table(table, policy=policy, keep=("id_hashes", ID_COLUMN))
    assert plain.id_columns == {} and len(deferred.dead_letters) == len(plain.dead_letters) == 2
    assert deferred.batches.keys() == plain.batches.keys() == deferred.id_columns.keys()
    for key, batch in plain.batches.items():
        column, rows = deferred.id_columns[key]
        assert deferred.batches[key].id_hashes is None
        for threads in (True, False):
            assert np.array_equal(id_column_hashes(column, rows, policy.id_key, threads),
                                  batch.id_hashes)
    empty = parse_table(table.slice(0, 0), policy=policy, keep=("id_hashes", ID_COLUMN))
    assert empty.batches == {} and empty.id_columns == {}
    with pytest.raises(ValueError, match="keep must name"):
        parse_table(table, policy=policy, keep=("id_hash",))


@pytest.mark.parametrize("threads", [True, False])
def test_the_id_column_hashes_follow_the_rows_order_when_they_cover_the_column(threads):
    # every row of the column, reordered: the hashes come in the rows' order, not the column's
    import pyarrow as pa

    from ldpflow.core import dedup
    from ldpflow.wire.parse import id_column_hashes

    ids = [f"id-{i}" * (1 + i % 4) for i in range(50)]
    column = pa.array(ids)
    key = bytes(range(16))
    rows = np.random.default_rng(5).permutation(len(ids))
    one_by_one = np.array([dedup.string_hashes(np.array([0, len(ids[i])]),
                                               np.frombuffer(ids[i].encode(), np.uint8), key)[0]
                           for i in rows])
    assert np.array_equal(id_column_hashes(column, rows, key, threads), one_by_one)
    assert np.array_equal(id_column_hashes(column, np.arange(50), key, threads),
                          one_by_one[np.argsort(rows)])
