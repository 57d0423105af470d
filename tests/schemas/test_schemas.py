"""The Avro schemas load, follow the evolution rules, and round-trip records."""

from __future__ import annotations

import io
import json

import fastavro
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ldpflow
from ldpflow.schemas import SCHEMAS, compact_schema, load_schema, schema_json
from tests import wire_support as formats
from tests.wire_support import reports_to_records

REQUIRED = {
    "report": {"report_id", "user_id", "event_time", "oracle", "epsilon", "domain_size"},
    "estimate": {"oracle", "epsilon", "domain_size", "parameters", "n", "method",
                 "frequencies", "sigma"},
}


@pytest.mark.parametrize("name", SCHEMAS)
def test_schema_loads_and_optional_fields_have_defaults(name):
    parsed = load_schema(name)
    assert parsed["name"] == f"ldpflow.{name.capitalize()}"
    for field in schema_json(name)["fields"]:
        if field["name"] not in REQUIRED[name]:
            assert "default" in field, f"{name}.{field['name']} needs a default (evolution rule)"


def test_unknown_schema_is_refused():
    with pytest.raises(ValueError, match="schema must be one of report, estimate, got 'x'"):
        schema_json("x")


def _keys(node):
    if isinstance(node, dict):
        return set(node) | {k for v in node.values() for k in _keys(v)}
    if isinstance(node, list):
        return {k for v in node for k in _keys(v)}
    return set()


@pytest.mark.parametrize("name", SCHEMAS)
def test_the_compact_schema_is_the_schema_without_its_docs(name):
    full, compact = schema_json(name), compact_schema(name)
    assert "doc" in _keys(full) and "doc" not in _keys(compact)
    # the same schema once docs are left out: names, types, defaults, order
    assert fastavro.schema.to_parsing_canonical_form(fastavro.parse_schema(compact)) == \
        fastavro.schema.to_parsing_canonical_form(fastavro.parse_schema(full))
    assert [(f["name"], f.get("default", "none")) for f in compact["fields"]] == \
        [(f["name"], f.get("default", "none")) for f in full["fields"]]
    assert len(json.dumps(compact)) < len(json.dumps(full)) / 2
    assert "doc" in _keys(schema_json(name))  # the source is left as it was


def test_a_default_holding_a_doc_key_is_data_and_kept():
    from ldpflow.schemas import _undocumented

    node = {"type": "record", "name": "R", "doc": "gone", "fields": [
        {"name": "m", "doc": "gone", "type": {"type": "map", "values": "string"},
         "default": {"doc": "kept"}}]}
    assert _undocumented(node) == {"type": "record", "name": "R", "fields": [
        {"name": "m", "type": {"type": "map", "values": "string"}, "default": {"doc": "kept"}}]}


@pytest.mark.parametrize("name", list(ldpflow.ORACLES))
@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 30))
def test_report_records_round_trip_through_avro_and_json(name, seed, n):
    oracle = ldpflow.oracle(name, epsilon=1.0, domain_size=37)
    rng = np.random.default_rng(seed)
    reports = oracle.perturb(rng.integers(0, 37, n), rng=rng)
    records = reports_to_records(oracle, reports, [f"r{i}" for i in range(n)],
                                 [f"u{i}" for i in range(n)], rng.integers(0, 2**40, n))
    buffer = io.BytesIO()
    formats.write_avro(buffer, records)
    buffer.seek(0)
    assert list(fastavro.reader(buffer)) == records
    text = io.StringIO()
    formats.write_json_lines(text, records)
    back = [formats.from_json_record(__import__("json").loads(line))
            for line in text.getvalue().splitlines()]
    assert back == records


def test_old_readers_read_records_with_fields_added_later():
    """Evolution: a record written by a newer schema with an extra defaulted field reads back."""
    newer = schema_json("report")
    newer = {**newer, "fields": [*newer["fields"],
                                 {"name": "collector", "type": "string", "default": "x"}]}
    record = {"report_id": "r", "user_id": "u", "event_time": 1, "oracle": "grr",
              "epsilon": 1.0, "domain_size": 4, "value": 2, "collector": "c1"}
    buffer = io.BytesIO()
    fastavro.writer(buffer, fastavro.parse_schema(newer), [record])
    buffer.seek(0)
    (read,) = list(fastavro.reader(buffer, reader_schema=load_schema("report")))
    assert read["value"] == 2 and "collector" not in read


def test_estimate_records_and_the_estimate_schema_of_before_read_each_other():
    """The fields added for uncertainty and run metadata are nullable with defaults: a
    reader of the schema without them reads new records, and a new reader reads old ones."""
    current = schema_json("estimate")
    added = {"base_standard_errors", "base_interval_low", "base_interval_high",
             "interval_confidence", "ldpflow_version", "input_pattern", "input_files",
             "methods", "value_labels_version", "value_labels"}
    assert added <= {f["name"] for f in current["fields"]}
    older = {**current, "fields": [f for f in current["fields"] if f["name"] not in added]}
    old_record = {"window_start": None, "window_end": None, "oracle": "grr", "epsilon": 1.0,
                  "domain_size": 2, "parameters": {"epsilon": "1.0"}, "n": 10,
                  "dead_letters": 0, "method": "base", "frequencies": [0.4, 0.6],
                  "sigma": 0.1, "pane": None}
    new_record = {**old_record, "base_standard_errors": [0.1, 0.1],
                  "base_interval_low": [0.2, 0.4], "base_interval_high": [0.6, 0.8],
                  "interval_confidence": 0.95, "ldpflow_version": "0.1.0",
                  "input_pattern": "/in/*.avro", "input_files": 3, "methods": ["base"]}
    buffer = io.BytesIO()
    fastavro.writer(buffer, load_schema("estimate"), [new_record])
    buffer.seek(0)
    (read,) = list(fastavro.reader(buffer, reader_schema=fastavro.parse_schema(older)))
    assert read == old_record
    buffer = io.BytesIO()
    fastavro.writer(buffer, fastavro.parse_schema(older), [old_record])
    buffer.seek(0)
    (read,) = list(fastavro.reader(buffer, reader_schema=load_schema("estimate")))
    assert read == {**old_record, **{name: None for name in added}}


#: The nested records of the heavy-hitter protocols other than PEM, added after it.
HEAVY_HITTER_RECORDS = ("spm", "mcm", "treehist", "sfp")


def _older_report_schema() -> dict:
    """The report schema before the heavy-hitter records other than PEM's were added."""
    current = schema_json("report")
    return {**current, "fields": [f for f in current["fields"]
                                  if f["name"] not in HEAVY_HITTER_RECORDS]}


def test_heavy_hitter_records_are_nullable_documented_and_named_after_their_protocol():
    from ldpflow.core import heavy_hitters as hh
    from ldpflow.wire.envelope import UNSIGNED_FIELDS, nested_parameter_fields

    fields = {f["name"]: f for f in schema_json("report")["fields"]}
    assert set(hh.PROTOCOLS) == {"pem", *HEAVY_HITTER_RECORDS}
    for name in hh.PROTOCOLS:
        field = fields[name]
        assert field["default"] is None and field["type"][0] == "null" and field["doc"]
        (record,) = field["type"][1:]
        assert record["type"] == "record"
        children = {f["name"]: f for f in record["fields"]}
        assert children["group"]["type"] == "int"
        assert children["codec"] == {**children["codec"], "type": "string", "default": "int"}
        assert all(f.get("doc") for f in record["fields"]), name
        parameters = {f.name for f in __import__("dataclasses").fields(hh.PROTOCOLS[name])}
        assert set(nested_parameter_fields(name)) == (
            parameters - {"epsilon", "hash_range", "num_groups"}) | {"codec"}
        for child, spec in children.items():
            if f"{name}.{child}" in UNSIGNED_FIELDS:
                assert spec["type"] == "long", (name, child)


def test_pem_record_is_unchanged_by_the_other_protocols():
    (pem,) = [f for f in schema_json("report")["fields"] if f["name"] == "pem"]
    fields = pem["type"][1]["fields"]
    names = [f["name"] for f in fields]
    assert names == ["group", "prefix_bits", "value_bits", "top_k", "query_limit", "start_bits",
                     "step_bits", "codec", "group_hash"]
    assert fields[-1]["default"] is None  # added later: files without it still read


def _heavy_hitter_records(name, n, seed=0):
    from ldpflow.core import heavy_hitters as hh
    from tests.core.heavy_hitter_contract import SMALL, population

    protocol = hh.make(name, **SMALL[name])
    users = np.array([f"u{i}" for i in range(n)], dtype=object)
    rng = np.random.default_rng(seed)
    reports = protocol.perturb(population(n, seed), users, rng)
    return protocol, reports, reports_to_records(protocol, reports, [f"r{i}" for i in range(n)],
                                                 list(users), np.arange(n))


@pytest.mark.parametrize("name", ["pem", *HEAVY_HITTER_RECORDS])
@settings(max_examples=5, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 30))
def test_heavy_hitter_records_round_trip_through_avro_and_json(name, seed, n):
    _, _, records = _heavy_hitter_records(name, n, seed)
    buffer = io.BytesIO()
    formats.write_avro(buffer, records)
    buffer.seek(0)
    assert list(fastavro.reader(buffer)) == records
    text = io.StringIO()
    formats.write_json_lines(text, records)
    back = [formats.from_json_record(__import__("json").loads(line))
            for line in text.getvalue().splitlines()]
    assert back == records


def _oracle_records(n=50):
    olh = ldpflow.oracle("olh", epsilon=1.0, domain_size=37)
    rng = np.random.default_rng(3)
    reports = olh.perturb(rng.integers(0, 37, n), rng=rng)
    return olh, reports, reports_to_records(olh, reports, [f"r{i}" for i in range(n)],
                                            [f"u{i}" for i in range(n)], np.arange(n))


@pytest.mark.parametrize("kind", ["pem", "olh"])
def test_files_of_the_schema_before_the_new_records_still_read(kind):
    """Evolution: PEM and oracle files written with the schema of before (no spm, mcm,
    treehist or sfp field) read back to the same reports, and a reader of that schema reads
    the records written now."""
    from ldpflow.core.keys import ProtocolKey
    from ldpflow.wire.formats import read_reports
    from ldpflow.wire.parse import AcceptancePolicy

    if kind == "pem":
        protocol, reports, records = _heavy_hitter_records("pem", 200)
        key, policy = ProtocolKey.heavy_hitters(protocol), AcceptancePolicy(
            expect={"oracle": "pem"})
    else:
        protocol, reports, records = _oracle_records()
        key, policy = protocol.key, AcceptancePolicy()
    older = fastavro.parse_schema(_older_report_schema())
    old_records = [{k: v for k, v in r.items() if k not in HEAVY_HITTER_RECORDS}
                   for r in records]
    buffer = io.BytesIO()
    fastavro.writer(buffer, older, old_records)
    parsed = list(read_reports(io.BytesIO(buffer.getvalue()), "avro", policy=policy))
    assert not [d for p in parsed for d in p.dead_letters]
    (batch,) = [b for p in parsed for b in p.batches.values()]
    assert batch.key == key
    for column, values in reports.columns.items():
        assert np.array_equal(batch.reports.columns[column], values), column
    buffer = io.BytesIO()
    fastavro.writer(buffer, load_schema("report"), records)
    buffer.seek(0)
    assert list(fastavro.reader(buffer, reader_schema=older)) == old_records


def test_the_report_schema_stays_small():
    """Every Avro container, one per Pub/Sub message too, carries the schema: its doc strings
    stay short (the specification pages hold the fields' full meaning)."""
    compact = __import__("json").dumps(schema_json("report"), separators=(",", ":"))
    assert len(compact) <= 8192
