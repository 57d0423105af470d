"""The Avro schemas load, follow the evolution rules, and round-trip records."""

from __future__ import annotations

import io

import fastavro
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ldpflow
from ldpflow.schemas import SCHEMAS, load_schema, schema_json
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
             "methods"}
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
