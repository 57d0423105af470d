"""Every format, read whole or by ranges, gives the accumulators of the reports written."""

from __future__ import annotations

import io

import numpy as np
import pytest

import ldpflow
from ldpflow.wire import formats

N = 3000


def _table(name, n=N, seed=3, **params):
    oracle = ldpflow.oracle(name, epsilon=1.0, domain_size=40, **params)
    rng = np.random.default_rng(seed)
    kwargs = {"columns": rng.permutation(n) % oracle.order} if name == "onebit" else {}
    reports = oracle.perturb(rng.integers(0, 40, n), rng=rng, **kwargs)
    table = formats.reports_table(oracle, reports, formats.numbered_ids("r-", 0, n),
                                  formats.numbered_ids("u-", 0, n), np.arange(n) * 10)
    return oracle, reports, table


def _read(data, fmt, ranges=None, **kw):
    parsed = []
    for start, end in ranges or [(0, None)]:
        parsed += list(formats.read_reports(io.BytesIO(data), fmt, start=start, end=end, **kw))
    return parsed


@pytest.mark.parametrize("fmt", formats.FORMATS)
@pytest.mark.parametrize("name", list(ldpflow.ORACLES))
def test_written_reports_read_back_to_the_same_accumulator(fmt, name):
    oracle, reports, table = _table(name)
    buffer = io.BytesIO()
    formats.write_reports(buffer, fmt, table)
    parsed = _read(buffer.getvalue(), fmt)
    assert not [d for p in parsed for d in p.dead_letters]
    batches = [b for p in parsed for b in p.batches.values()]
    total = oracle.create_accumulator()
    for batch in batches:
        assert batch.key == oracle.key
        total.merge(oracle.count_valid(batch.reports))
    assert total == oracle.aggregate(reports)


@pytest.mark.parametrize("fmt", ["avro", "json"])
def test_byte_ranges_read_every_record_exactly_once(fmt):
    oracle, reports, table = _table("olh", n=20_000)
    buffer = io.BytesIO()
    if fmt == "avro":
        buffer.write(__import__("ldpflow.wire.avro", fromlist=["x"]).encode_container(
            table, __import__("ldpflow.schemas", fromlist=["x"]).schema_json("report"),
            block_rows=700))
    else:
        formats.write_reports(buffer, fmt, table)
    data = buffer.getvalue()
    cuts = [0, 1, 17, len(data) // 3, len(data) // 2 + 5, len(data) - 3]
    ranges = [(lo, hi) for lo, hi in zip(cuts, cuts[1:], strict=False)] + [(cuts[-1], None)]
    parsed = _read(data, fmt, ranges, keep=("id_hashes",))
    hashes = np.concatenate([b.id_hashes for p in parsed for b in p.batches.values()])
    assert hashes.size == 20_000 and np.unique(hashes).size == 20_000
    total = oracle.create_accumulator()
    for p in parsed:
        for b in p.batches.values():
            total.merge(oracle.count_valid(b.reports))
    assert total == oracle.aggregate(reports)


def test_a_damaged_avro_block_loses_that_block_alone():
    from ldpflow.schemas import schema_json
    from ldpflow.wire import avro

    oracle, reports, table = _table("grr", n=10_000)
    data = bytearray(avro.encode_container(table, schema_json("report"), codec="null",
                                           block_rows=1000))
    header = avro.read_header(io.BytesIO(bytes(data)))
    blocks = list(avro.iter_blocks(io.BytesIO(bytes(data)), header))
    assert [b.count for b in blocks] == [1000] * 10
    third = blocks[3]
    data[third.offset + len(third.raw) - 5] ^= 0xFF  # break its sync marker
    parsed = _read(bytes(data), "avro")
    n = sum(p.reports for p in parsed)
    dead = [d for p in parsed for d in p.dead_letters]
    assert n == 9000
    assert len(dead) == 1 and dead[0].count == 1000 and "1000 records lost" in dead[0].reason


def test_json_chunk_with_one_mistyped_line_refuses_that_line_alone():
    oracle, reports, table = _table("olh", n=2000)
    lines = formats.json_lines(table).splitlines(keepends=True)
    lines[0] = lines[0].replace(b'"hash_range":4', b'"hash_range":4.0')
    parsed = _read(b"".join(lines), "json")
    dead = [d for p in parsed for d in p.dead_letters]
    assert [d.reason for d in dead] == [
        "malformed record: field 'hash_range' must be an integer, got float"]
    assert sum(p.reports for p in parsed) == 1999


def test_a_damaged_gzip_stream_keeps_the_lines_before_the_damage():
    import gzip

    oracle, reports, table = _table("grr", n=200_000)
    raw = io.BytesIO()
    formats.write_reports(raw, "json", table)
    packed = bytearray(gzip.compress(raw.getvalue()))
    packed[len(packed) // 2] ^= 0xFF
    parsed = list(formats.read_reports(gzip.GzipFile(fileobj=io.BytesIO(bytes(packed))),
                                       "json", source="r.jsonl.gz"))
    dead = [d for p in parsed for d in p.dead_letters]
    kept = sum(p.reports for p in parsed)
    assert 0 < kept < 200_000  # what came before the damage is kept
    (damage,) = [d for d in dead if d.reason.startswith("unreadable data after")]
    assert "BadGzipFile" in damage.reason
    assert sum(p.records for p in parsed) == kept + sum(d.count for d in dead)


@pytest.mark.parametrize("hostile,reason", [
    ({"domain_size": 2**40}, "policy: domain_size 1099511627776 exceeds the limit"),
    ({"domain_size": 10**30}, "malformed record: field 'domain_size' is out of range"),
    ({"epsilon": 1000.0}, "policy: epsilon 1000.0 exceeds the limit"),
    ({"epsilon": 10**400 if False else float("inf")}, "invalid parameters: epsilon must be"),
    ({"hash_range": 2**40}, "malformed record: field 'hash_range' is out of range"),
    ({"epsilon": 20.0, "hash_range": None}, "policy: hash_range"),
    ({"event_time": 2**70}, "malformed record: field 'event_time' is out of range"),
    ({"bucket": 467.5}, "malformed record: field 'bucket' must be an integer, got float"),
    ({"bucket": "1"}, "malformed record: field 'bucket' must be an integer, got str"),
])
def test_one_hostile_json_line_is_one_dead_letter_and_the_rest_is_exact(hostile, reason):
    import json

    oracle, reports, table = _table("olh", n=5000)
    lines = formats.json_lines(table).splitlines(keepends=True)
    record = json.loads(lines[2500])
    record.update(hostile)
    lines[2500] = (json.dumps(record) + "\n").encode()
    parsed = _read(b"".join(lines), "json")
    dead = [d for p in parsed for d in p.dead_letters]
    assert len(dead) == 1 and dead[0].reason.startswith(reason), [d.reason for d in dead]
    total = oracle.create_accumulator()
    for p in parsed:
        for b in p.batches.values():
            total.merge(oracle.count_valid(b.reports))
    keep = np.ones(5000, dtype=bool)
    keep[2500] = False
    assert total == oracle.aggregate(reports[keep])


@pytest.mark.parametrize("depth", [500, 1000])
def test_deeply_nested_json_is_one_dead_letter(depth):
    oracle, reports, table = _table("grr", n=300)
    lines = formats.json_lines(table).splitlines(keepends=True)
    lines[7] = b'{"report_id": ' + b"[" * depth + b"]" * depth + b"}\n"
    parsed = _read(b"".join(lines), "json")
    dead = [d for p in parsed for d in p.dead_letters]
    assert len(dead) == 1 and sum(p.reports for p in parsed) == 299
    assert dead[0].reason == "policy: JSON at line 8 nested deeper than 64 levels"


def test_json_lines_of_a_slice_leave_null_bits_out():
    import pyarrow as pa

    oracle, reports, table = _table("oue", n=10)
    bits = table.column("bits").combine_chunks().to_pylist()
    bits[3] = None
    table = table.set_column(table.column_names.index("bits"), "bits",
                             pa.array(bits, type=pa.binary()))
    lines = formats.json_lines(table.slice(2, 5)).splitlines()
    assert len(lines) == 5 and b'"bits"' not in lines[1]
    assert all(b'"bits":"' in line and b'"bits":""' not in line
               for i, line in enumerate(lines) if i != 1)


@pytest.mark.parametrize("codec", ["null", "deflate", "snappy"])
@pytest.mark.parametrize("schema", ["compact", "full"])
def test_messages_of_every_codec_and_either_schema_decode_to_the_same_reports(codec, schema):
    from ldpflow.schemas import compact_schema, schema_json
    from ldpflow.wire import avro

    _, _, table = _table("olh", n=700)
    body = avro.encode_container(
        table, compact_schema("report") if schema == "compact" else schema_json("report"),
        codec=codec)
    reference = avro.encode_container(table, schema_json("report"), codec="null")
    keep = ("id_hashes", "report_ids", "event_times")

    def flat(data):
        out = []
        for parsed in formats.decode_message(data, "m", None, keep):
            assert not parsed.dead_letters
            for key, batch in parsed.batches.items():
                out.append((key, {c: v.tolist() for c, v in batch.reports.columns.items()},
                            batch.id_hashes.tolist(), batch.report_ids.tolist(),
                            batch.event_times.tolist()))
        return out

    assert flat(body) == flat(reference) and sum(len(b[3]) for b in flat(body)) == 700


def test_messages_are_deflated_with_the_compact_schema_by_default():
    from ldpflow.pipelines import options
    from ldpflow.schemas import compact_schema
    from ldpflow.wire import avro, messages

    _, _, table = _table("grr", n=1000)
    body = formats.encode_message(table)
    header = avro.read_header(io.BytesIO(body))
    assert header.codec == messages.MESSAGE_CODEC == "deflate"
    assert header.schema == compact_schema("report") and header.end < 3500
    assert len(body) < len(formats.encode_message(table, codec="null")) / 2
    assert options.MESSAGE_CODECS == avro.CODECS  # ldpflow pubsub publish --message_codec
    with pytest.raises(ValueError, match="message codec must be one of null, deflate, snappy, "
                                         "got 'xz'"):
        formats.encode_message(table, codec="xz")


def test_a_deflated_message_whose_block_is_damaged_is_one_dead_letter_of_its_reports():
    from ldpflow.wire import avro

    _, _, table = _table("grr", n=1000)
    body = bytearray(formats.encode_message(table))
    header = avro.read_header(io.BytesIO(bytes(body)))
    (block,) = list(avro.iter_blocks(io.BytesIO(bytes(body)), header))
    body[block.offset + len(block.raw) // 2] ^= 0xFF  # inside the deflated data
    parsed = formats.decode_message(bytes(body), "pubsub:m")
    dead = [d for p in parsed for d in p.dead_letters]
    assert sum(p.reports for p in parsed) == 0
    assert sum(d.count for d in dead) == 1000 and all(d.source == "pubsub:m" for d in dead)
