"""PEM reports in the envelope (parse, keys, dead letters) and the pass DoFn / CombineFn
without a pipeline: split, count per bundle, merge in any order, select."""

from __future__ import annotations

import copy
import io
import json

import fastavro
import numpy as np
import pytest

import ldpflow
from ldpflow.core import heavy_hitters as hh
from ldpflow.core.keys import ProtocolKey
from ldpflow.core.oracles import Reports
from ldpflow.schemas import schema_json
from ldpflow.transforms import heavy_hitters as thh
from tests import wire_support as formats
from tests.wire_support import (
    ReportBatch,
    key_from_json,
    key_to_json,
    parse_records,
    pem_from_key,
    pem_key,
    reports_to_records,
)

PEM = hh.PrefixExtendingMethod
EXPECT = {"oracle": "pem"}


def small(**overrides):
    """Prefix bits (6, 10, 14, 16): four passes, small enough for exhaustive checks."""
    params = dict(top_k=3, value_bits=16, epsilon=2.0, query_limit=2**6)
    params.update(overrides)
    return PEM(**params)


def make(pem, n=40, seed=0, codec=None, values=None):
    rng = np.random.default_rng(seed)
    if values is None:
        values = rng.integers(0, 2**pem.value_bits, n, dtype=np.uint64)
    n = len(values)
    users = [f"user-{seed}-{i}" for i in range(n)]
    reports = pem.perturb(values, users, rng)
    records = reports_to_records(pem, reports, [f"r{seed}-{i}" for i in range(n)], users,
                                 np.arange(n) * 1000, codec=codec)
    return reports, records


def avro_round_trip(records):
    buffer = io.BytesIO()
    formats.write_avro(buffer, records)
    buffer.seek(0)
    return list(fastavro.reader(buffer))


# -- records ----------------------------------------------------------------------------------


@pytest.mark.parametrize("trusted", [True, False])
def test_pem_records_round_trip_to_the_same_reports(trusted):
    pem = small()
    reports, records = make(pem, n=60)
    assert avro_round_trip(records) == records
    batches, dead = parse_records(records, trusted=trusted, expect=EXPECT)
    assert dead == []
    ((key, batch),) = batches.items()
    assert key == pem_key(pem, "int") and pem_from_key(key) == (pem, "int")
    assert batch.protocol == pem
    for column in ("seed", "bucket", "group", "prefix_bits"):
        np.testing.assert_array_equal(batch.reports.columns[column], reports.columns[column])
    assert batch.user_ids.tolist() == [r["user_id"] for r in records]
    assert pem.aggregate(0, batch.reports[batch.reports.group == 0]) == pem.aggregate(
        0, reports[reports.group == 0])


def test_pem_records_round_trip_through_json_lines():
    _, records = make(small(), n=10)
    text = io.StringIO()
    formats.write_json_lines(text, records)
    back = [formats.from_json_record(json.loads(line)) for line in text.getvalue().splitlines()]
    assert back == records


def test_pem_keys_are_never_mixed():
    records = []
    for pem, codec in [(small(), None), (small(top_k=2), None), (small(epsilon=3.0), None),
                       (small(), "string"), (small(hash_range=4), None)]:
        records += make(pem, n=10, codec=codec)[1]
    batches, dead = parse_records(records, trusted=True, expect=EXPECT)
    assert not dead
    assert sorted(len(b) for b in batches.values()) == [10] * 5
    assert {pem_from_key(k)[1] for k in batches} == {"int", "string"}


def test_keys_survive_their_json_form():
    key = pem_key(small(), "string")
    assert key_from_json(key_to_json(key)) == key
    with pytest.raises(ValueError, match="key must be a 'pem' key"):
        pem_from_key(ldpflow.oracle("grr", epsilon=1.0, domain_size=4).key)


def _set(path, value):
    def mutate(record):
        if "." in path:
            head, inner = path.split(".")
            record[head] = dict(record[head], **{inner: value})
        else:
            record[path] = value
    return mutate


def _drop(path):
    def mutate(record):
        head, inner = path.split(".")
        record[head] = {k: v for k, v in record[head].items() if k != inner}
    return mutate


CASES = [
    (_set("pem.prefix_bits", 65), "prefix_bits does not match the group's length"),
    (_set("pem.prefix_bits", 14), "prefix_bits does not match the group's length"),
    (_set("pem.group", 4), "group outside [0, 4)"),
    (_set("pem.group", -1), "group outside [0, 4)"),
    (_set("bucket", 8), "bucket outside [0, 8)"),
    (_set("seed", None), "missing payload field 'seed' for oracle pem"),
    (_set("pem", None), "missing field 'pem' for oracle pem"),
    (_set("pem", [1, 2]), "malformed record: field 'pem' must be a record, got list"),
    (_drop("pem.top_k"), "missing field 'pem.top_k' for oracle pem"),
    (_set("pem.value_bits", 65), "invalid parameters: value_bits must be in [1, 64], got 65"),
    (_set("pem.top_k", 1.5), "malformed record: field 'pem.top_k' must be an integer, got float"),
    (_set("pem.codec", "utf16"), "invalid parameters: codec must be one of ['int', 'string']"),
    (_set("domain_size", 7), "invalid parameters: domain_size of a pem report must be its "
                             "number of groups, 4; got 7"),
    (_set("hash_range", 6), "invalid parameters: hash_range must be a power of two"),
    (_set("value", 3), "unexpected payload field 'value' for oracle pem"),
    (_set("pem.group", "1"), "malformed record: field 'pem.group' must be an integer, got str"),
    (_set("pem.top_k", [3]), "malformed record: field 'pem.top_k' must be an integer, got list"),
]


@pytest.mark.parametrize("mutate,reason", CASES)
def test_each_kind_of_bad_pem_record_is_a_dead_letter_with_its_reason(mutate, reason):
    pem = small()
    _, records = make(pem, n=12, seed=1)
    assert pem.hash_range == 8 and pem.prefix_bits == (6, 10, 14, 16)
    records[5]["pem"] = dict(records[5]["pem"])
    records[5]["pem"]["group"] = 1  # a group whose prefix length (10) differs from the last
    records[5]["pem"]["prefix_bits"] = 10
    mutate(records[5])
    batches, dead = parse_records(records, source="f.jsonl", expect=EXPECT)
    assert len(dead) == 1, [d.reason for d in dead]
    assert dead[0].reason.startswith(reason), dead[0].reason
    assert dead[0].source == "f.jsonl" and dead[0].record["report_id"] == records[5]["report_id"]
    assert sum(len(b) for b in batches.values()) == 11


def test_pem_records_need_the_heavy_hitter_reader():
    _, records = make(small(), n=5)
    batches, dead = parse_records(records, trusted=True)
    assert not batches and len(dead) == 5
    assert dead[0].reason.startswith("oracle 'pem' reports are heavy-hitter reports")


def test_the_heavy_hitter_reader_refuses_other_oracles_and_configurations():
    olh = ldpflow.oracle("olh", epsilon=1.0, domain_size=16)
    rng = np.random.default_rng(2)
    olh_records = reports_to_records(olh, olh.perturb(rng.integers(0, 16, 4), rng=rng),
                                     list("abcd"), list("abcd"), np.zeros(4, int))
    _, mine = make(small(), n=6)
    _, other_k = make(small(top_k=2), n=3)
    _, strings = make(small(), n=2, codec="string")
    expect = {**EXPECT, "top_k": 3, "epsilon": 2.0, "codec": "int"}
    batches, dead = parse_records(olh_records + mine + other_k + strings, expect=expect)
    assert [len(b) for b in batches.values()] == [6]
    assert sorted(d.reason for d in dead) == sorted(
        ["parameter mismatch: oracle 'olh', expected 'pem'"] * 4
        + ["parameter mismatch: top_k 2, expected 3"] * 3
        + ["parameter mismatch: codec 'string', expected 'int'"] * 2)


def test_other_oracles_must_leave_the_pem_record_null():
    olh = ldpflow.oracle("olh", epsilon=1.0, domain_size=16)
    rng = np.random.default_rng(3)
    records = reports_to_records(olh, olh.perturb(rng.integers(0, 16, 5), rng=rng),
                                 list("abcde"), list("abcde"), np.zeros(5, int))
    records[2]["pem"] = {"group": 0}
    for trusted in (True, False):
        batches, dead = parse_records(records, trusted=trusted)
        assert [d.reason for d in dead] == ["unexpected payload field 'pem' for oracle olh"]
        assert [len(b) for b in batches.values()] == [4]
    with pytest.raises(ValueError, match="codec applies to heavy-hitter reports"):
        reports_to_records(olh, olh.perturb(np.zeros(1, int), rng=rng), ["a"], ["a"], [0],
                           codec="int")


def test_an_unhashable_parameter_is_a_dead_letter_not_a_crash():
    olh = ldpflow.oracle("olh", epsilon=1.0, domain_size=16)
    rng = np.random.default_rng(5)
    records = reports_to_records(olh, olh.perturb(rng.integers(0, 16, 4), rng=rng),
                                 list("abcd"), list("abcd"), np.zeros(4, int))
    records[1]["hash_range"] = [4]  # JSON gave a list where a number belongs
    batches, dead = parse_records(records)
    assert [d.reason for d in dead] == [
        "malformed record: field 'hash_range' must be an integer, got list"]
    assert [len(b) for b in batches.values()] == [3]


def test_files_written_before_the_pem_field_still_parse():
    """Evolution: Avro files of the schema without ``pem`` decode without the key at all."""
    older = copy.deepcopy(schema_json("report"))
    older["fields"] = [f for f in older["fields"] if f["name"] != "pem"]
    olh = ldpflow.oracle("olh", epsilon=1.0, domain_size=16)
    rng = np.random.default_rng(4)
    reports = olh.perturb(rng.integers(0, 16, 30), rng=rng)
    records = reports_to_records(olh, reports, [str(i) for i in range(30)],
                                 [str(i) for i in range(30)], np.zeros(30, int))
    buffer = io.BytesIO()
    fastavro.writer(buffer, fastavro.parse_schema(older),
                    [{k: v for k, v in r.items() if k != "pem"} for r in records])
    buffer.seek(0)
    decoded = list(fastavro.reader(buffer))
    assert "pem" not in decoded[0]
    batches, dead = parse_records(decoded, trusted=True)
    assert not dead
    assert olh.aggregate(batches[olh.key].reports) == olh.aggregate(reports)


# -- pass transforms without a pipeline ------------------------------------------------------
#: One small configuration per protocol (the core contract suite's), k = 3.
SMALL = {
    "pem": dict(top_k=3, value_bits=16, epsilon=2.0, query_limit=2**6),
    "spm": dict(top_k=3, value_bits=16, epsilon=4.0),
    "mcm": dict(top_k=3, value_bits=16, epsilon=4.0),
    "treehist": dict(top_k=3, value_bits=16, epsilon=4.0, step_bits=8),
    "sfp": dict(top_k=3, value_bits=16, epsilon=4.0, fragment_bits=8, hash_bits=4),
}


def protocol_of(name, **overrides):
    return hh.make(name, **{**SMALL[name], **overrides})


def skewed(n, seed):
    """Three heavy 16-bit values (30%, 20%, 15%) and uniform noise, shuffled."""
    rng = np.random.default_rng(seed)
    heavy = np.repeat(np.array([0xBEEF, 0x0042, 0xF00D], dtype=np.uint64),
                      [int(n * 0.3), int(n * 0.2), int(n * 0.15)])
    rest = rng.integers(0, 2**16, size=n - heavy.size, dtype=np.uint64)
    return rng.permutation(np.concatenate([heavy, rest]))


def batches_of(protocol, reports, cuts, codec="int"):
    key = ProtocolKey.heavy_hitters(protocol, codec)
    bounds = [0, *cuts, len(reports)]
    pairs = zip(bounds, bounds[1:], strict=False)
    return key, [(key, ReportBatch(key, reports[a:b])) for a, b in pairs]


def count(pass_index, key, parts, previous=None, shard=0):
    """CountPassFn on one gathered (key, shard) element, as the pipeline calls it."""
    fn = thh.CountPassFn(pass_index)
    fn.setup()
    element = ((key, shard), iter(parts))  # a one-shot iterable, like a GroupByKey's
    if previous is None:
        return list(fn.process(element))
    return list(fn.process(element, previous))


def test_split_groups_puts_every_report_in_exactly_its_group():
    pem = small()
    reports, _ = make(pem, n=500, seed=5)
    key, batches = batches_of(pem, reports, [100, 101, 350])
    fn = thh.SplitGroupsFn()
    out = [e for _, batch in batches for e in fn.process((key, batch))]
    assert all(k == key for k, _, _ in out)
    assert sum(len(r) for _, _, r in out) == 500
    for _, group, part in out:
        assert set(part.group.tolist()) == {group}
    seeds = np.sort(np.concatenate([r.seed for _, _, r in out]))
    np.testing.assert_array_equal(seeds, np.sort(reports.seed))


def run_passes(protocol, key, batches, order, rule=None, name=None):
    """The pipeline's passes with the DoFns and CombineFn, three shards merged in ``order``;
    checks each merge against the core's counts. Returns the outcomes by pass."""
    split = thh.SplitGroupsFn()
    by_group = [e for _, batch in batches for e in split.process((key, batch))]
    previous: dict = {}
    state = protocol.initial_state()
    outcomes = {}
    rule = rule or thh.ServerRule(prune=False)
    for pass_index in range(protocol.num_passes):
        groups = protocol.pass_groups(pass_index)
        several = len(groups) > 1  # as the pipeline shards: by group when a pass reads many
        mine = [thh._shard(e, 3, several) for e in by_group if e[1] in groups]
        shards = {}
        for (_, shard), part in mine:
            shards.setdefault(shard, []).append(part)
        spread = sorted({g % 3 for g in groups}) if several else [0, 1, 2]
        assert sorted(shards) == spread  # the batches spread over the shards
        partials = [p for shard, parts in shards.items()
                    for p in count(pass_index, key, parts, previous if pass_index else None, shard)]
        assert len(partials) == len(spread)
        combine = thh.MergePassCountsCombineFn()
        accs = [combine.add_input(combine.create_accumulator(), partials[i][1])
                for i in order if i < len(partials)]
        snapshot = [p[1].counts.copy() for p in partials]
        if name == "sfp" and pass_index == 0:  # a shard holds the sums of its positions only
            assert all(len(p[1].counts.arrays) < protocol.positions for p in partials)
        merged = combine.extract_output(combine.merge_accumulators(iter(accs)))
        for p, before in zip(partials, snapshot, strict=True):  # inputs are never mutated
            assert p[1].counts == before
        part = Reports.concat([r for (_, _, r) in by_group if _ in groups])
        assert merged.counts == protocol.accumulate(pass_index, part, state)
        assert merged.n == len(part) and merged.batches == len(mine)
        _, outcome = thh.advance_pass((key, merged), pass_index, rule, previous or None)
        assert outcome.error is None
        state = protocol.advance(pass_index, protocol.accumulate(pass_index, part, state), state)
        assert outcome.state.figures == state.figures
        previous = {key: outcome}
        outcomes[f"pass{pass_index}"] = [outcome]
    return outcomes


@pytest.mark.parametrize("name", sorted(SMALL))
@pytest.mark.parametrize("order", [[0, 1, 2], [2, 0, 1]])
def test_sharded_passes_merge_to_the_core_counts_and_result_in_any_order(name, order):
    protocol = protocol_of(name)
    values = skewed(6000, 6)
    rng = np.random.default_rng(60)
    reports = protocol.perturb(values, [f"u{i}" for i in range(values.size)], rng)
    key, batches = batches_of(protocol, reports, list(range(150, 6000, 150)))
    outcomes = run_passes(protocol, key, batches, order, name=name)
    out = thh.assemble_result((key, outcomes), protocol.num_passes)
    expected = protocol.identify(reports)
    assert [t["value"] for t in out["top_k"]] == expected.values.tolist()
    assert [t["frequency"] for t in out["top_k"]] == expected.frequencies.tolist()
    assert out["n"] == len(reports) and out["error"] is None
    assert out["group_sizes"] == list(expected.group_sizes)
    assert [s["candidates"] for s in out["passes"]] == list(expected.pass_candidates)
    assert [s["label"] for s in out["passes"]] == [
        protocol.pass_label(s) for s in range(protocol.num_passes)]
    assert out["protocol"] == name


def test_a_failed_pass_fails_the_later_ones_with_a_reason():
    pem = small()
    key = pem_key(pem)
    reports, _ = make(pem, n=300, seed=7)
    group2 = reports[reports.group == 2]
    partial = count(2, key, [group2], previous={})  # pass 1 has no outcome
    assert partial[0][1].counts is None and partial[0][1].n == len(group2)
    _, outcome = thh.advance_pass(partial[0], 2, None, {})
    assert outcome.error == "pass 1 (prefixes of 10 bits) had no reports"
    assert outcome.state is None
    grouped = {"pass0": [], "pass2": [outcome]}
    out = thh.assemble_result((key, grouped), pem.num_passes)
    assert out["error"] == "pass 0 (prefixes of 6 bits): group 0 had no reports"
    assert out["top_k"] == [] and out["n"] == len(group2)
    assert out["passes"][0]["error"] == "pass 1 (prefixes of 10 bits) had no reports"


def test_an_empty_group_is_an_error_of_its_pass_not_a_guess():
    spm = protocol_of("spm")
    key = ProtocolKey.heavy_hitters(spm, "int")
    values = skewed(900, 9)
    reports = spm.perturb(values, [f"u{i}" for i in range(900)], np.random.default_rng(9))
    without = reports[reports.group != 0]  # no reports of segment pair (0, 1)
    ((_, partial),) = count(0, key, [without])
    _, outcome = thh.advance_pass((key, partial), 0)
    assert outcome.state is None and outcome.error.startswith("group 0 has no reports")


def test_results_decode_values_with_the_key_codec():
    pem = small(top_k=2, value_bits=16, query_limit=2**8)
    codec = ldpflow.core.codecs.StringCodec(bits=16)
    words = ["hi"] * 400 + ["yo"] * 300 + [f"{i:02d}" for i in range(60)]
    _, records = make(pem, values=codec.encode(words), codec="string", seed=8)
    (key, batch), = parse_records(records, expect=EXPECT)[0].items()
    split = thh.SplitGroupsFn()
    grouped, previous = {}, {}
    for pass_index in range(pem.num_groups):
        parts = [e[2] for e in split.process((key, batch)) if e[1] == pass_index]
        ((_, counts),) = count(pass_index, key, parts, previous if pass_index else None)
        _, result = thh.advance_pass((key, counts), pass_index, None, previous or None)
        grouped[f"pass{pass_index}"] = [result]
        previous = {key: result}
    out = thh.assemble_result((key, grouped), pem.num_groups)
    assert [t["value"] for t in out["top_k"]] == ["hi", "yo"]
    assert out["configuration"]["codec"] == "string" and out["n"] == len(words)
    assert out["top_k"][0]["count"] == pytest.approx(out["top_k"][0]["frequency"] * len(words))


def test_the_rule_refuses_options_the_protocol_does_not_have():
    with pytest.raises(TypeError, match="spm has no server option 'survivors'"):
        thh.IdentifyHeavyHitters(protocol_of("spm"), thh.ServerRule(options={"survivors": 4}))
    with pytest.raises(ValueError, match="survivors must be"):
        thh.IdentifyHeavyHitters(protocol_of("treehist"),
                                 thh.ServerRule(options={"survivors": 0}))


def test_document_reports_the_largest_configuration_and_every_record():
    def result(n, key, top):
        return {"n": n, "key": key, "top_k": top, "configuration": {"k": key},
                "group_sizes": [n], "passes": [], "error": None if n else "no valid reports"}

    dead = {"total": 5, "by_reason": {"x": 5}}
    doc = thh.heavy_hitters_document([result(10, "b", [1]), result(30, "a", [2]),
                                      result(0, "c", [])], dead, 1.23456)
    assert doc["top_k"] == [2] and doc["n"] == 30 and doc["configuration"] == {"k": "a"}
    assert [r["key"] for r in doc["results"]] == ["a", "b", "c"]
    assert doc["records"] == 45 and doc["reports"] == 40 and doc["elapsed_seconds"] == 1.235
    empty = thh.heavy_hitters_document([], {"total": 0, "by_reason": {}})
    assert empty["top_k"] == [] and empty["error"] == "no valid reports" and empty["records"] == 0


def test_scores_of_json_values_above_2_to_the_63_are_exact():
    """JSON gives Python ints; ``np.asarray`` of ints >= 2**63 would round them to floats."""
    truth = [2**64 - 1, 2**63 + 1, 5]
    assert hh.score_top_k([2**64 - 1, 2**63 + 1, 5], truth, 3)["f1"] == 1.0
    assert hh.score_top_k([2**63, 5, 7], truth, 3)["f1"] == pytest.approx(1 / 3)
    assert hh.true_top([2**63 + 1, 2**63 + 1, 4]) == [{"value": 2**63 + 1, "count": 2},
                                                     {"value": 4, "count": 1}]
