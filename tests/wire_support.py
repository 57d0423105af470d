"""Test support: envelopes as Python dicts, for tests that hand-make (and break) records.

The product reads and writes columns (:mod:`ldpflow.wire.formats`); tests often want one
record to mutate. These helpers build such records from the product's own column writer
(``reports_table``) and feed them back through its one parse path.
"""

from __future__ import annotations

import io
import json

import pyarrow as pa

from ldpflow.core.keys import ProtocolKey
from ldpflow.wire.envelope import ReportBatch, json_safe  # noqa: F401
from ldpflow.wire.formats import *  # noqa: F401,F403
from ldpflow.wire.formats import reports_table, write_records
from ldpflow.wire.parse import KEEP_FIELDS, AcceptancePolicy, parse_table, records_to_table


def reports_to_records(oracle, reports, report_ids, user_ids, event_times, *, codec=None):
    """Envelope dicts (seed as a signed long, bits as bytes) of a batch of reports."""
    return reports_table(oracle, reports, list(report_ids), list(user_ids), event_times,
                         codec=codec).to_pylist()


def parse_records(records, *, source="", expect=None, trusted=False, envelope=True):
    """``(batches by key, dead letters)`` of dict records, through the product's parse."""
    table, dead = records_to_table(list(records), source)
    parsed = parse_table(table, source=source, policy=AcceptancePolicy(expect=dict(expect or {})),
                         keep=KEEP_FIELDS if envelope else ())
    return parsed.batches, dead + parsed.dead_letters


def write_avro(stream, records, schema="report", codec="deflate"):
    write_records(stream, "avro", records, schema=schema, codec=codec)


def write_json_lines(stream, records):
    for record in records:
        stream.write(json.dumps(to_json_record(record), separators=(",", ":")) + "\n")


def write_parquet(path, records):
    import pyarrow.parquet as pq

    from ldpflow.wire.parse import arrow_schema

    pq.write_table(pa.Table.from_pylist(records, schema=arrow_schema()), path)


def to_json_record(record):
    return {k: json_safe(v) for k, v in record.items()}


def from_json_record(obj):
    if isinstance(obj, dict) and isinstance(obj.get("bits"), str):
        obj = dict(obj)
        obj["bits"] = bytes.fromhex(obj["bits"])
    return obj


def encode_message(records, fmt="avro"):
    if fmt == "avro":
        buffer = io.BytesIO()
        write_records(buffer, "avro", records, codec="null")
        return buffer.getvalue()
    text = io.StringIO()
    write_json_lines(text, records)
    return text.getvalue().encode("utf-8")


def key_to_json(key):
    return ProtocolKey.coerce(key).to_json()


def key_from_json(text):
    return ProtocolKey.from_json(text)


def pem_key(pem, codec="int"):
    return ProtocolKey.heavy_hitters(pem, codec)


def pem_from_key(key):
    key = ProtocolKey.coerce(key)
    if key.name != "pem":
        raise ValueError(f"key must be a 'pem' key, got {key!r}")
    return key.protocol, key.codec
