"""The wire forms of the heavy-hitter protocols: written by ``reports_table`` in every format,
read and parsed back to the same columns and key, and every hostile record one counted dead
letter with its reason."""

from __future__ import annotations

import ast
import copy
import io
import json
import pathlib

import numpy as np
import pyarrow as pa
import pytest

from ldpflow.core import heavy_hitters as hh
from ldpflow.core.keys import HEAVY_HITTERS, PEM, ProtocolKey
from ldpflow.wire import formats
from ldpflow.wire.envelope import (
    PAYLOAD_FIELDS,
    UNSIGNED_FIELDS,
    ReportBatch,
    nested_parameter_fields,
    nested_payload_fields,
    payload_columns,
)
from ldpflow.wire.parse import AcceptancePolicy
from tests.core.heavy_hitter_contract import SMALL, population
from tests.wire_support import json_safe, write_avro, write_parquet

#: The contract's small configurations, with more than one group each (so that a report can
#: claim another user's group) and a 64-bit public key where the protocol has one.
CONFIGS = {
    "pem": SMALL["pem"],
    "spm": {**SMALL["spm"], "num_segments": 4},
    "mcm": {**SMALL["mcm"], "channel_seed": 2**64 - 5},
    "treehist": SMALL["treehist"],
    "sfp": {**SMALL["sfp"], "hash_seed": 2**63 + 11},
}
NAMES = list(CONFIGS)
N = 300
VICTIM = 7


def _protocol(name, **overrides):
    return hh.make(name, **{**CONFIGS[name], **overrides})


def _made(name, n=N, seed=5, codec=None, **overrides):
    """A protocol, its perturbed reports of ``n`` users and their envelope table."""
    protocol = _protocol(name, **overrides)
    users = np.array([f"user-{i}" for i in range(n)], dtype=object)
    rng = np.random.default_rng(seed)
    reports = protocol.perturb(population(n, seed), users, rng)
    table = formats.reports_table(protocol, reports, formats.numbered_ids(f"{name}-", 0, n),
                                  list(users), np.arange(n, dtype=np.int64) * 1000, codec=codec)
    return protocol, reports, table


def _policy(name, **kwargs):
    return AcceptancePolicy(expect={"oracle": name}, **kwargs)


def _file(table, fmt):
    buffer = io.BytesIO()
    formats.write_reports(buffer, fmt, table)
    return buffer.getvalue()


def _record_file(records, fmt):
    """Hand-made (or broken) records as a file of ``fmt``, through the test writers."""
    buffer = io.BytesIO()
    if fmt == "avro":
        write_avro(buffer, records)
    elif fmt == "parquet":
        write_parquet(buffer, records)
    else:
        buffer.write(b"".join((json.dumps(json_safe(r)) + "\n").encode() for r in records))
    return buffer.getvalue()


def _read(data, fmt, policy, keep=()):
    return list(formats.read_reports(io.BytesIO(data), fmt, source=f"in.{fmt}", policy=policy,
                                     keep=keep))


def _summary(parsed):
    dead = [d for p in parsed for d in p.dead_letters]
    return (sum(p.records for p in parsed), sum(p.reports for p in parsed),
            sum(d.count for d in dead), [d.reason for d in dead])


def _batches(parsed):
    out: dict = {}
    for p in parsed:
        for key, batch in p.batches.items():
            out.setdefault(key, []).append(batch)
    return out


def _only_batch(parsed):
    """The key of the one key parsed, and its reports over every chunk."""
    ((key, batches),) = _batches(parsed).items()
    return key, ReportBatch.concat(batches)


def _assert_columns_equal(got, want):
    assert got.oracle == want.oracle
    assert set(got.columns) == set(want.columns)
    for column, values in want.columns.items():
        assert got.columns[column].dtype == values.dtype, column
        assert np.array_equal(got.columns[column], values), column


# -- round trips -----------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", formats.FORMATS)
@pytest.mark.parametrize("name", NAMES)
def test_reports_round_trip_exactly_in_every_format(name, fmt):
    protocol, reports, table = _made(name)
    parsed = _read(_file(table, fmt), fmt, _policy(name), keep=("user_ids", "event_times"))
    assert _summary(parsed) == (N, N, 0, [])
    ((key, batches),) = _batches(parsed).items()
    assert key == ProtocolKey.heavy_hitters(protocol, "int")
    assert key.name == name and key.codec == "int" and key.protocol == protocol
    (batch,) = batches
    _assert_columns_equal(batch.reports, reports)
    assert batch.user_ids.tolist() == [f"user-{i}" for i in range(N)]
    assert batch.event_times.tolist() == (np.arange(N) * 1000).tolist()
    assert not protocol.invalid_rows(batch.reports)[0].size


@pytest.mark.parametrize("name", NAMES)
def test_the_envelope_carries_the_configuration(name):
    protocol, _, table = _made(name)
    row = table.slice(0, 1).to_pylist()[0]
    assert row["oracle"] == name and row["epsilon"] == protocol.epsilon
    assert row["domain_size"] == protocol.num_groups
    assert row["hash_range"] == protocol.hash_range
    nested = row[name]
    for field in nested_parameter_fields(name):
        if field == "codec":
            assert nested[field] == "int"
        elif field == "group_hash":
            assert nested[field] == protocol.group_hash == hh.DEFAULT_GROUP_HASH
        else:
            assert nested[field] % 2**64 == getattr(protocol, field), field
    for other in HEAVY_HITTERS:
        if other != name:
            assert row[other] is None


@pytest.mark.parametrize("fmt", formats.FORMATS)
@pytest.mark.parametrize("name", NAMES)
def test_the_codec_travels_in_the_key(name, fmt):
    protocol, reports, table = _made(name, codec="string")
    parsed = _read(_file(table, fmt), fmt,
                   AcceptancePolicy(expect={"oracle": name, "codec": "string"}))
    key, batch = _only_batch(parsed)
    assert key == ProtocolKey.heavy_hitters(protocol, "string") and key.codec == "string"
    _assert_columns_equal(batch.reports, reports)
    wrong = _read(_file(table, fmt), fmt, AcceptancePolicy(expect={"oracle": name,
                                                                  "codec": "int"}))
    assert _summary(wrong)[:3] == (N, 0, N)
    assert set(_summary(wrong)[3]) == {"parameter mismatch: codec 'string', expected 'int'"}


@pytest.mark.parametrize("name", NAMES)
def test_a_codec_the_values_cannot_have_is_refused_when_writing(name):
    protocol = _protocol(name)
    reports = protocol.empty_reports()
    with pytest.raises(ValueError):
        formats.reports_table(protocol, reports, [], [], [], codec="nope")


def test_frequency_oracles_take_no_codec():
    import ldpflow

    olh = ldpflow.oracle("olh", epsilon=1.0, domain_size=8)
    with pytest.raises(ValueError, match="codec applies to heavy-hitter reports"):
        formats.reports_table(olh, olh.empty_reports(), [], [], [], codec="int")


@pytest.mark.parametrize("name", ["spm", "sfp", "mcm"])
def test_unsigned_json_seeds_equal_signed_ones(name):
    protocol, reports, table = _made(name)
    records = table.to_pylist()
    for record in records:  # every 64-bit field written unsigned, as a JSON client may
        record["seed"] %= 2**64
        for label in UNSIGNED_FIELDS:
            parent, _, child = label.partition(".")
            if parent == name:
                record[name][child] %= 2**64
    assert any(r["seed"] >= 2**63 for r in records)
    parsed = _read(_record_file(records, "json"), "json", _policy(name))
    assert _summary(parsed) == (N, N, 0, [])
    key, batch = _only_batch(parsed)
    assert key == ProtocolKey.heavy_hitters(protocol)
    _assert_columns_equal(batch.reports, reports)


def test_one_file_of_every_protocol_gives_each_reader_its_own_reports():
    made = {name: _made(name, n=60, seed=i) for i, name in enumerate(NAMES)}
    data = _file(pa.concat_tables([t for _, _, t in made.values()]), "parquet")
    for name, (protocol, reports, _) in made.items():
        parsed = _read(data, "parquet", _policy(name))
        records, valid, dead, reasons = _summary(parsed)
        assert (records, valid, dead) == (300, 60, 240)
        key, batch = _only_batch(parsed)
        assert key == ProtocolKey.heavy_hitters(protocol)
        _assert_columns_equal(batch.reports, reports)
        assert {r for r in reasons} == {
            f"oracle {other!r} reports are heavy-hitter reports of another protocol: this "
            f"reader expects {name!r} reports" for other in NAMES if other != name}


# -- refusals ------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", formats.FORMATS)
@pytest.mark.parametrize("name", NAMES)
def test_heavy_hitter_reports_are_not_frequency_oracle_reports(name, fmt):
    _, _, table = _made(name, n=40)
    for policy in (AcceptancePolicy(), AcceptancePolicy(expect={"oracle": "olh"})):
        records, valid, dead, reasons = _summary(_read(_file(table, fmt), fmt, policy))
        assert (records, valid, dead) == (40, 0, 40)
        assert set(reasons) == {f"oracle {name!r} reports are heavy-hitter reports (ldpflow "
                                "heavy-hitters), not frequency-oracle reports"}


def test_frequency_oracle_reports_are_refused_by_a_heavy_hitter_reader():
    import ldpflow

    olh = ldpflow.oracle("olh", epsilon=1.0, domain_size=16)
    reports = olh.perturb(np.arange(10) % 16, rng=np.random.default_rng(1))
    table = formats.reports_table(olh, reports, formats.numbered_ids("r", 0, 10),
                                  formats.numbered_ids("u", 0, 10), np.zeros(10, np.int64))
    records, valid, dead, reasons = _summary(_read(_file(table, "avro"), "avro",
                                                   _policy("spm")))
    assert (records, valid, dead) == (10, 0, 10)
    assert set(reasons) == {"parameter mismatch: oracle 'olh', expected 'spm'"}


def _other(name):
    return NAMES[(NAMES.index(name) + 1) % len(NAMES)]


def _wrong_group(protocol, record):
    """The victim claims the next group, consistently (its prefix length too)."""
    name = protocol.name
    group = (record[name]["group"] + 1) % protocol.num_groups
    record[name]["group"] = group
    if name == "pem":
        record[name]["prefix_bits"] = protocol.prefix_bits[group]
    if name == "treehist":
        record[name]["prefix_bits"] = protocol.group_bits[group]


def _bad_hash_range(protocol, record):
    if protocol.name in ("pem", "treehist"):  # a parameter: any power of two is a config
        record["hash_range"] = 3
        return "invalid parameters: hash_range must be a power of two, got 3"
    record["hash_range"] = protocol.hash_range * 2
    return (f"invalid parameters: hash_range of a {protocol.name} report must be "
            f"{protocol.hash_range} (derived from epsilon")


def _foreign_record(protocol, record):
    """The victim also carries PEM's record (which every reader decodes)."""
    record[PEM] = _made(PEM, n=1)[2].to_pylist()[0][PEM]
    return f"unexpected payload field 'pem' for oracle {protocol.name}"


def _foreign_oracle(protocol, record):
    other = _other(protocol.name)
    record["oracle"] = other
    return (f"oracle {other!r} reports are heavy-hitter reports of another protocol: this "
            f"reader expects {protocol.name!r} reports")


def _set(field, value):
    def mutate(protocol, record):
        record[field] = value

    return mutate


def _nested(field, value):
    def mutate(protocol, record):
        record[protocol.name][field] = value

    return mutate


#: (case, mutation (returns the reason when it depends on the protocol), reason or None,
#: formats that can carry the broken record)
HOSTILE = [
    ("wrong group", _wrong_group, "group does not match the hash of user_id", formats.FORMATS),
    ("group out of range", lambda p, r: r[p.name].update(group=p.num_groups),
     None, formats.FORMATS),
    ("bucket out of range", lambda p, r: r.update(bucket=p.hash_range),
     None, formats.FORMATS),
    ("missing nested record", lambda p, r: r.update({p.name: None}),
     None, formats.FORMATS),
    ("wrong hash_range", _bad_hash_range, None, formats.FORMATS),
    ("wrong domain_size", lambda p, r: r.update(domain_size=p.num_groups + 1),
     "invalid parameters: domain_size of a", formats.FORMATS),
    ("pem's record too", _foreign_record, None, formats.FORMATS),
    ("another protocol's name", _foreign_oracle, None, formats.FORMATS),
    ("value_bits 0", _nested("value_bits", 0), "invalid parameters: value_bits must be",
     formats.FORMATS),
    ("top_k 0", _nested("top_k", 0), "invalid parameters: top_k must be >= 1",
     formats.FORMATS),
    ("unknown codec", _nested("codec", "rot13"), "invalid parameters:", formats.FORMATS),
    ("missing nested parameter", _nested("top_k", None), None, ("json", "parquet")),
    ("mistyped nested field", _nested("group", "1"), None, ("json",)),
    ("missing seed", _set("seed", None), None, formats.FORMATS),
]
_REASONS = {
    "group out of range": lambda p: f"group outside [0, {p.num_groups})",
    "bucket out of range": lambda p: f"bucket outside [0, {p.hash_range})",
    "missing nested record": lambda p: f"missing field {p.name!r} for oracle {p.name}",
    "missing nested parameter": lambda p: f"missing field '{p.name}.top_k' for oracle {p.name}",
    "mistyped nested field": lambda p: (f"malformed record: field '{p.name}.group' must be "
                                        "an integer, got str"),
    "missing seed": lambda p: f"missing payload field 'seed' for oracle {p.name}",
}
CASES = [pytest.param(name, fmt, mutate, reason, id=f"{name}-{fmt}-{case}")
         for case, mutate, reason, fmts in HOSTILE for name in NAMES for fmt in fmts
         for reason in [reason or _REASONS.get(case)]
         if not (name == PEM and mutate is _foreign_record)]


@pytest.mark.parametrize("name,fmt,mutate,reason", CASES)
def test_each_hostile_record_is_one_counted_dead_letter_with_its_reason(name, fmt, mutate,
                                                                        reason):
    protocol, reports, table = _made(name)
    records = table.to_pylist()
    given = mutate(protocol, records[VICTIM])
    reason = reason(protocol) if callable(reason) else reason or given
    parsed = _read(_record_file(records, fmt), fmt, _policy(name), keep=("id_hashes",))
    total, valid, dead, reasons = _summary(parsed)
    assert (total, valid, dead) == (N, N - 1, 1), reasons
    assert reasons[0].startswith(reason), reasons
    letter = [d for p in parsed for d in p.dead_letters][0]
    assert letter.source == f"in.{fmt}" and letter.record["report_id"] == f"{name}-{VICTIM}"
    key, batch = _only_batch(parsed)
    assert key == ProtocolKey.heavy_hitters(protocol)
    keep = np.ones(N, dtype=bool)
    keep[VICTIM] = False
    _assert_columns_equal(batch.reports, reports[keep])


def test_readers_leave_the_records_of_protocols_they_cannot_accept_unread():
    assert set(formats.unread_records(AcceptancePolicy())) == {"spm", "mcm", "treehist", "sfp"}
    assert set(formats.unread_records(_policy("sfp"))) == {"spm", "mcm", "treehist"}
    assert set(formats.unread_records(_policy("pem"))) == {"spm", "mcm", "treehist", "sfp"}


@pytest.mark.parametrize("fmt", [*formats.FORMATS, "json-slow"])
def test_a_record_of_a_protocol_not_expected_is_never_read(fmt):
    """An spm report that also carries sfp's record (malformed, even) reads as if the
    reader's schema lacked that field, on the columnar and the record-by-record paths."""
    protocol, reports, table = _made("spm")
    records = table.to_pylist()
    records[VICTIM]["sfp"] = _made("sfp", n=1)[2].to_pylist()[0]["sfp"]
    if fmt == "json-slow":
        records[VICTIM + 1]["sfp"] = {"group": "not a number"}
    data = _record_file(records, fmt.split("-")[0])
    if fmt == "json-slow":
        data += b"{bad json\n"  # a neighbour that sends the chunk line by line
    parsed = _read(data, fmt.split("-")[0], _policy("spm"))
    extra = 1 if fmt == "json-slow" else 0
    assert _summary(parsed)[:3] == (N + extra, N, extra)
    key, batch = _only_batch(parsed)
    _assert_columns_equal(batch.reports, reports)


# -- the group hash version --------------------------------------------------------------------
def _old_file(records, fmt):
    """``records`` as a file of before the group hash version: Avro of the schema without
    the field, JSON lines without the key, Parquet with the field null."""
    records = [{k: ({f: x for f, x in v.items() if f != "group_hash"}
                    if isinstance(v, dict) else v) for k, v in r.items()} for r in records]
    if fmt != "avro":
        return _record_file(records, fmt)
    import fastavro

    from ldpflow.schemas import schema_json

    schema = copy.deepcopy(schema_json("report"))  # the loaded schema is shared
    for field in schema["fields"]:
        kind = field["type"]
        if isinstance(kind, list) and isinstance(kind[-1], dict):
            kind[-1]["fields"] = [f for f in kind[-1]["fields"] if f["name"] != "group_hash"]
    assert "group_hash" not in json.dumps(schema)
    buffer = io.BytesIO()
    fastavro.writer(buffer, fastavro.parse_schema(schema), records)
    return buffer.getvalue()


@pytest.mark.parametrize("fmt", formats.FORMATS)
@pytest.mark.parametrize("version", hh.GROUP_HASHES)
@pytest.mark.parametrize("name", NAMES)
def test_each_group_hash_version_round_trips_and_is_checked(name, version, fmt):
    protocol, reports, table = _made(name, group_hash=version)
    assert table.column(name).combine_chunks().field("group_hash").to_pylist() == [version] * N
    parsed = _read(_file(table, fmt), fmt, _policy(name))
    assert _summary(parsed) == (N, N, 0, [])
    key, batch = _only_batch(parsed)
    assert key == ProtocolKey.heavy_hitters(protocol, "int") and "group_hash" not in key.to_json()
    _assert_columns_equal(batch.reports, reports)
    # The groups of the other version are refused (they are not this version's groups).
    other = hh.GROUP_HASHES[version % len(hh.GROUP_HASHES)]
    records = table.to_pylist()
    for record in records:
        record[name]["group_hash"] = other
    theirs = hh.assign_groups([r["user_id"] for r in records], protocol.num_groups,
                              group_hash=other)
    wrong = int(np.count_nonzero(theirs != reports.columns["group"]))
    assert wrong > N // 4
    parsed = _read(_record_file(records, fmt.split("-")[0]), fmt.split("-")[0], _policy(name))
    reports_kept, refused, reasons = _summary(parsed)[1:4]
    assert (reports_kept, refused) == (N - wrong, wrong)
    assert set(reasons) == {"group does not match the hash of user_id"}


@pytest.mark.parametrize("fmt", formats.FORMATS)
@pytest.mark.parametrize("name", NAMES)
def test_files_of_before_the_version_read_and_check_as_version_1(name, fmt):
    protocol, reports, table = _made(name, group_hash=1)
    base = fmt.split("-")[0]
    data = _old_file(table.to_pylist(), base)
    parsed = _read(data, base, _policy(name))
    assert _summary(parsed) == (N, N, 0, [])
    key, batch = _only_batch(parsed)
    assert key == ProtocolKey.heavy_hitters(protocol, "int")
    _assert_columns_equal(batch.reports, reports)
    records = table.to_pylist()
    _wrong_group(protocol, records[VICTIM])
    parsed = _read(_old_file(records, base), base, _policy(name))
    assert _summary(parsed)[1:4] == (N - 1, 1, ["group does not match the hash of user_id"])


@pytest.mark.parametrize("name", NAMES)
def test_reports_of_both_versions_are_counted_together(name):
    old, old_reports, old_table = _made(name, group_hash=1)
    new, new_reports, new_table = _made(name, seed=6)
    table = pa.concat_tables([old_table, new_table])
    parsed = _read(_file(table, "avro"), "avro", _policy(name))
    assert _summary(parsed) == (2 * N, 2 * N, 0, [])
    key, batch = _only_batch(parsed)  # one key: the version is no parameter
    assert key == ProtocolKey.heavy_hitters(new, "int") == ProtocolKey.heavy_hitters(old, "int")
    _assert_columns_equal(batch.reports, type(old_reports).concat([old_reports, new_reports]))


@pytest.mark.parametrize("name", NAMES)
def test_an_unknown_group_hash_is_a_dead_letter_with_its_reason(name):
    _, _, table = _made(name)
    records = table.to_pylist()
    records[VICTIM][name]["group_hash"] = 3
    parsed = _read(_record_file(records, "avro"), "avro", _policy(name))
    assert _summary(parsed)[1:4] == (
        N - 1, 1, ["invalid parameters: group_hash must be one of 1, 2, got 3"])


@pytest.mark.parametrize("name", NAMES)
def test_unchecked_groups_let_a_consistent_report_in_another_group_through(name):
    protocol, _, table = _made(name)
    records = table.to_pylist()
    _wrong_group(protocol, records[VICTIM])
    data = _record_file(records, "avro")
    assert _summary(_read(data, "avro", _policy(name)))[1:3] == (N - 1, 1)
    assert _summary(_read(data, "avro", _policy(name, check_groups=False)))[1:3] == (N, 0)


def test_channel_bits_of_the_wrong_width_are_refused():
    protocol, _, table = _made("mcm")
    records = table.to_pylist()
    width = len(records[0]["bits"])
    records[VICTIM]["bits"] = records[VICTIM]["bits"] + b"\0"
    records[VICTIM + 1]["bits"] = bytes([255]) * width  # padding bits set (2 T = 24: none)
    parsed = _read(_record_file(records, "json"), "json", _policy("mcm"))
    total, valid, dead, reasons = _summary(parsed)
    assert reasons[0] == (f"payload 'bits' has {width + 1} bytes, expected {width} for "
                          f"num_channels {protocol.num_channels}")
    assert total == N == valid + dead


@pytest.mark.parametrize("name", NAMES)
def test_the_policy_limits_the_groups_and_hash_range_of_heavy_hitters(name):
    protocol, _, table = _made(name, n=20)
    data = _file(table, "json")
    few = _policy(name, max_domain_size=protocol.num_groups - 1)
    assert set(_summary(_read(data, "json", few))[3]) == {
        f"policy: domain_size {protocol.num_groups} exceeds the limit "
        f"{protocol.num_groups - 1} (--max_domain_size)"}
    narrow = _policy(name, max_hash_range=protocol.hash_range // 2)
    assert set(_summary(_read(data, "json", narrow))[3]) == {
        f"policy: hash_range {protocol.hash_range} exceeds the limit "
        f"{protocol.hash_range // 2} (--max_hash_range)"}


@pytest.mark.parametrize("name", ["spm", "mcm", "sfp"])
def test_a_null_hash_range_is_the_derived_one(name):
    protocol, reports, table = _made(name, n=30)
    records = [dict(r, hash_range=None) for r in table.to_pylist()]
    parsed = _read(_record_file(records, "json"), "json", _policy(name))
    key, batch = _only_batch(parsed)
    assert key == ProtocolKey.heavy_hitters(protocol)
    _assert_columns_equal(batch.reports, reports)


# -- keys and fields -------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_heavy_hitter_keys_build_their_protocol_and_round_trip_as_text(name):
    protocol = _protocol(name)
    for codec in ("int", "string"):
        key = ProtocolKey.heavy_hitters(protocol, codec)
        assert key.name == name and key.codec == codec
        assert key.protocol == protocol
        assert ProtocolKey.from_json(key.to_json()) == key
    assert ProtocolKey.heavy_hitters(protocol, None).codec == "int"
    assert ProtocolKey(name, protocol.parameters).codec == "int"  # a key without codec


def test_heavy_hitter_names_are_the_registry_and_oracles_have_no_codec():
    assert set(HEAVY_HITTERS) == set(hh.PROTOCOLS) and PEM == "pem"
    import ldpflow

    assert ldpflow.oracle("grr", epsilon=1.0, domain_size=4).key.codec is None
    with pytest.raises(ValueError, match="heavy-hitter keys are of"):
        ProtocolKey.heavy_hitters(ldpflow.oracle("grr", epsilon=1.0, domain_size=4))


def test_keys_import_no_protocol_at_module_import():
    """keys.py imports the registry only (a leaf: it imports nothing of ldpflow)."""
    core = pathlib.Path(__file__).resolve().parents[2] / "ldpflow" / "core"
    for name, allowed in (("keys.py", {("ldpflow.core", "registry")}), ("registry.py", set())):
        tree = ast.parse((core / name).read_text(encoding="utf-8"))
        imported = {(node.module, alias.name) for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom)
                    and (node.module or "").startswith("ldpflow") for alias in node.names}
        imported |= {(alias.name, None) for node in ast.walk(tree)
                     if isinstance(node, ast.Import) for alias in node.names
                     if alias.name.startswith("ldpflow")}
        assert imported == allowed, (name, imported)


@pytest.mark.parametrize("name", NAMES)
def test_nested_fields_are_the_column_spec_and_the_parameters(name):
    protocol = _protocol(name)
    nested = {c.name for c in payload_columns(protocol) if len(c.path) == 2}
    assert set(nested_payload_fields(name)) == nested
    assert all(c.path == (name, c.name) for c in payload_columns(protocol) if len(c.path) == 2)
    top_level = {"epsilon", "hash_range", "num_groups"}  # envelope fields (num_groups: pem's)
    assert set(nested_parameter_fields(name)) == \
        set(protocol.parameters) - top_level | {"codec", "group_hash"}
    assert name in PAYLOAD_FIELDS
    spec = getattr(__import__(f"ldpflow.core.heavy_hitters.{name}", fromlist=["x"]),
                   "COLUMN_SPECS", None)
    if spec is not None:  # every module spec but mcm's (its bits width is the instance's)
        assert spec == protocol._column_specs()
    unsigned = {c.label for c in payload_columns(protocol) if c.dtype is np.uint64}
    assert unsigned <= set(UNSIGNED_FIELDS)


def test_unsigned_fields_are_longs_of_the_schema():
    from ldpflow.wire.envelope import field_kind

    for label in UNSIGNED_FIELDS:
        assert field_kind(tuple(label.split("."))) == "int", label


def test_the_document_names_the_protocol_of_several_configurations():
    from ldpflow.wire.results import heavy_hitters_document

    def result(name, epsilon, n):
        protocol = _protocol(name, epsilon=epsilon)
        return {"key": ProtocolKey.heavy_hitters(protocol).to_json(), "n": n,
                "configuration": {**protocol.parameters, "codec": "int"}, "top_k": [],
                "group_sizes": [], "passes": [], "error": None}

    document = heavy_hitters_document([result("spm", 2.0, 5), result("spm", 4.0, 3)],
                                      {"total": 0})
    assert document["warnings"][0].startswith(
        "the input holds 2 SPM configurations (epsilon 2.0, 4.0)")
    assert document["n"] == 5 and document["records"] == 8
    document = heavy_hitters_document([result("spm", 2.0, 5), result("sfp", 2.0, 3)],
                                      {"total": 0})
    assert document["warnings"][0].startswith(
        "the input holds 2 heavy-hitter configurations (epsilon 2.0)")


@pytest.mark.parametrize("fmt", ["avro", "json", "json-array"])
@pytest.mark.parametrize("name", NAMES)
def test_messages_carry_heavy_hitter_reports(name, fmt):
    protocol, reports, table = _made(name, n=25)
    if fmt == "json-array":
        body = json.dumps([json_safe(r) for r in table.to_pylist()]).encode()
    else:
        body = formats.encode_message(table, fmt)
    parsed = formats.decode_message(body, "pubsub:1", _policy(name))
    assert _summary(parsed) == (25, 25, 0, [])
    key, batch = _only_batch(parsed)
    assert key == ProtocolKey.heavy_hitters(protocol)
    _assert_columns_equal(batch.reports, reports)
