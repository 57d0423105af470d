"""A block's record count against its data: a count that understates the records refuses the
block (never a silent loss of the records past it), one that overstates them too, and every
record a block claims is accounted for (``records = reports + dead letters``)."""

from __future__ import annotations

import copy
import io
import re
import zlib

import cramjam
import fastavro
import fastavro.write
import pytest

from ldpflow.schemas import schema_json
from ldpflow.wire import avro, formats
from ldpflow.wire.parse import AcceptancePolicy

BLOCK = 250
BLOCKS = 4
CODECS = ["null", "deflate", "snappy"]


def _record(i: int) -> dict:
    fields = {f["name"]: None for f in schema_json("report")["fields"]}
    fields.update(report_id=f"r-{i}", user_id=f"u-{i:0{i % 7 + 1}d}", event_time=1000 + i,
                  oracle="grr", epsilon=1.0, domain_size=32, value=(i * 7) % 32)
    return fields


RECORDS = [_record(i) for i in range(BLOCK * BLOCKS)]


def _varint(value: int) -> bytes:
    """An Avro long: zigzag, then 7 bits a byte, low bits first."""
    z = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte, z = z & 0x7F, z >> 7
        out.append(byte | 0x80 if z else byte)
        if not z:
            return bytes(out)


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = z = 0
    while True:
        byte = buf[pos]
        pos += 1
        z |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (z >> 1) ^ -(z & 1), pos


def _container(codec: str, schema: dict | None = None, records: list | None = None,
               block: int = BLOCK) -> bytes:
    """A file fastavro writes, ``block`` records a block."""
    schema = fastavro.parse_schema(schema or schema_json("report"))
    records = RECORDS if records is None else records
    buffer = io.BytesIO()
    writer = fastavro.write.Writer(buffer, schema, codec=codec, sync_interval=1 << 30)
    for lo in range(0, len(records), block):
        for record in records[lo:lo + block]:
            writer.write(record)
        writer.flush()
    return buffer.getvalue()


def _blocks(data: bytes) -> list[tuple[int, int]]:
    """``(offset, length)`` of each block, by walking the framing."""
    header = avro.read_header(io.BytesIO(data))
    out, pos = [], header.end
    while pos < len(data):
        _, at = _read_varint(data, pos)
        size, at = _read_varint(data, at)
        out.append((pos, at + size + 16 - pos))
        pos = at + size + 16
    return out


def _with_count(data: bytes, index: int, count: int) -> bytes:
    """``data`` with block ``index``'s record count replaced (its size, data and marker
    unchanged; the count's varint may change length)."""
    offset, length = _blocks(data)[index]
    _, at = _read_varint(data, offset)
    return data[:offset] + _varint(count) + data[at:offset + length] + data[offset + length:]


def _encoded(records: list, schema: dict | None = None) -> int:
    """The bytes ``records`` take in a block's (uncompressed) data."""
    parsed = fastavro.parse_schema(schema or schema_json("report"))
    buffer = io.BytesIO()
    for record in records:
        fastavro.schemaless_writer(buffer, parsed, record)
    return len(buffer.getvalue())


def _read(data: bytes):
    parsed = list(formats.read_reports(io.BytesIO(data), "avro", source="f"))
    letters = [(d.reason, d.count) for p in parsed for d in p.dead_letters]
    reports = sum(p.reports for p in parsed)
    records = sum(p.records for p in parsed)
    assert records == reports + sum(count for _, count in letters)  # the bookkeeping
    return reports, records, letters


@pytest.mark.parametrize("codec", CODECS)
def test_the_intact_file_is_read_whole(codec):
    data = _container(codec)
    assert [length > 0 for _, length in _blocks(data)] == [True] * BLOCKS
    assert [b.count for b in avro.iter_blocks(io.BytesIO(data), avro.read_header(
        io.BytesIO(data)))] == [BLOCK] * BLOCKS
    assert _read(data) == (1000, 1000, [])


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("claimed", [200, 249, 1])
def test_a_count_below_the_records_refuses_the_block_and_names_the_surplus(codec, claimed):
    data = _with_count(_container(codec), 1, claimed)
    surplus = _encoded(RECORDS[BLOCK + claimed:2 * BLOCK])  # the records past the count
    reports, records, letters = _read(data)
    assert (reports, records) == (750, 750 + claimed)
    ((reason, count),) = letters
    assert count == claimed  # the records the block claims are counted as lost
    noun = "record" if claimed == 1 else "records"
    assert f"Avro block holds {surplus} bytes past its {claimed} {noun}" in reason
    offset = _blocks(data)[1][0]
    assert reason.startswith(f"damaged Avro data at byte {offset}: ")


@pytest.mark.parametrize("codec", CODECS)
def test_a_block_that_claims_no_records_but_holds_some_is_damage(codec):
    data = _with_count(_container(codec), 2, 0)
    reports, records, letters = _read(data)
    assert (reports, records) == (750, 750)
    ((reason, count),) = letters
    assert count == 0  # how many records it holds is unknown
    surplus = _encoded(RECORDS[2 * BLOCK:3 * BLOCK])
    assert f"Avro block holds {surplus} bytes past its 0 records" in reason


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("claimed", [251, 300])
def test_a_count_above_the_records_refuses_the_block(codec, claimed):
    data = _with_count(_container(codec), 3, claimed)
    reports, records, letters = _read(data)
    assert (reports, records) == (750, 750 + claimed)
    ((reason, count),) = letters
    assert count == claimed
    offset = _blocks(data)[3][0]
    assert reason.startswith(f"undecodable Avro block at byte {offset} ({claimed} records lost)")


@pytest.mark.parametrize("codec", CODECS)
def test_two_damaged_blocks_are_counted_separately_and_the_others_kept(codec):
    data = _with_count(_with_count(_container(codec), 0, 100), 3, 400)
    reports, records, letters = _read(data)
    assert (reports, records) == (500, 1000)
    assert [count for _, count in letters] == [100, 400]
    assert "bytes past its 100 records" in letters[0][0]
    assert "undecodable" in letters[1][0]


def _empty_block(codec: str, sync: bytes) -> bytes:
    data = {"null": b"",
            "deflate": zlib.compress(b"")[2:-4],  # raw deflate of nothing
            "snappy": bytes(cramjam.snappy.compress_raw(b"")) + zlib.crc32(b"").to_bytes(4, "big")
            }[codec]
    return _varint(0) + _varint(len(data)) + data + sync


@pytest.mark.parametrize("codec", CODECS)
def test_a_legal_empty_block_is_no_damage(codec):
    data = _container(codec)
    header = avro.read_header(io.BytesIO(data))
    offset, _ = _blocks(data)[2]
    patched = data[:offset] + _empty_block(codec, header.sync) + data[offset:]
    assert len(_blocks(patched)) == BLOCKS + 1
    assert _read(patched) == (1000, 1000, [])


@pytest.mark.parametrize("codec", CODECS)
def test_an_empty_block_of_no_bytes_at_all_is_no_damage(codec):
    data = _container(codec)
    header = avro.read_header(io.BytesIO(data))
    offset, _ = _blocks(data)[2]
    patched = data[:offset] + _varint(0) + _varint(0) + header.sync + data[offset:]
    assert _read(patched) == (1000, 1000, [])


@pytest.mark.parametrize("codec", ["deflate", "snappy"])
def test_an_empty_block_whose_data_does_not_decompress_is_damage(codec):
    data = _container(codec)
    header = avro.read_header(io.BytesIO(data))
    offset, _ = _blocks(data)[1]
    garbage = b"\xff" * 9
    patched = data[:offset] + _varint(0) + _varint(9) + garbage + header.sync + data[offset:]
    reports, records, letters = _read(patched)
    assert (reports, records) == (1000, 1000)
    ((reason, count),) = letters
    assert count == 0
    assert "Avro block of 0 records holds 9 bytes that do not decompress" in reason


FOREIGN = {"type": "record", "name": "Other", "fields": [  # a map: polars cannot read it
    {"name": "report_id", "type": "string"}, {"name": "user_id", "type": "string"},
    {"name": "event_time", "type": "long"}, {"name": "oracle", "type": "string"},
    {"name": "epsilon", "type": "double"}, {"name": "domain_size", "type": "long"},
    {"name": "value", "type": "long"}, {"name": "extra", "type": {"type": "map",
                                                                 "values": "long"}}]}


def _foreign(i: int) -> dict:
    return {"report_id": f"r{i}", "user_id": "u", "event_time": i, "oracle": "grr",
            "epsilon": 1.0, "domain_size": 32, "value": i % 32, "extra": {"a": i}}


@pytest.mark.parametrize("codec", ["null", "deflate"])
def test_a_foreign_schema_is_checked_too(codec):
    records = [_foreign(i) for i in range(300)]
    data = _container(codec, FOREIGN, records, block=100)
    assert _read(data) == (300, 300, [])
    reports, records_read, letters = _read(_with_count(data, 1, 60))
    assert (reports, records_read) == (200, 260)
    surplus = _encoded(records[160:200], FOREIGN)
    assert letters == [(letters[0][0], 60)]
    assert f"Avro block holds {surplus} bytes past its 60 records" in letters[0][0]


def _payload(data: bytes, index: int) -> tuple[avro.Header, int, bytes]:
    header = avro.read_header(io.BytesIO(data))
    offset, _ = _blocks(data)[index]
    count, at = _read_varint(data, offset)
    size, at = _read_varint(data, at)
    return header, count, data[at:at + size]


@pytest.mark.parametrize("polars", [True, False])
def test_surplus_bytes_is_exact_with_or_without_the_columnar_probe(polars, monkeypatch):
    if not polars:  # the records are then walked with fastavro
        monkeypatch.setattr(avro, "_polars_reads", lambda header: False)
    header, count, data = _payload(_container("null"), 1)
    assert count == BLOCK
    lengths = [_encoded([r]) for r in RECORDS[BLOCK:2 * BLOCK]]
    assert sum(lengths) == len(data)
    assert avro.surplus_bytes(header, BLOCK, data) == 0
    for claimed in (0, 1, 17, 249):
        assert avro.surplus_bytes(header, claimed, data) == sum(lengths[claimed:])
    assert avro.surplus_bytes(header, BLOCK, data + b"\x00") == 1
    # Records that do not fit leave nothing over (the decoder refuses the block).
    assert avro.surplus_bytes(header, BLOCK + 1, data) == 0
    assert avro.surplus_bytes(header, BLOCK, data[:-1]) == 0
    assert avro.surplus_bytes(header, 0, b"") == 0


def test_the_message_names_where_the_block_is():
    data = _with_count(_container("null"), 1, 10)
    (reason, _), = _read(data)[2]
    match = re.search(r"at byte (\d+): Avro block holds (\d+) bytes past its 10 records "
                      r"\(10 records lost\)$", reason)
    assert match, reason
    offset, _ = _blocks(data)[1]
    assert int(match[1]) == offset
    assert int(match[2]) == _encoded(RECORDS[BLOCK + 10:2 * BLOCK])


def test_the_surplus_is_measured_by_bisection_where_fastavro_cannot_walk(monkeypatch):
    monkeypatch.setattr(avro, "_walked_surplus", lambda *args: 0)
    header, _, data = _payload(_container("null"), 1)
    lengths = [_encoded([r]) for r in RECORDS[BLOCK:2 * BLOCK]]
    for claimed in (1, 200, 249):
        assert avro.surplus_bytes(header, claimed, data) == sum(lengths[claimed:])
    assert avro.surplus_bytes(header, BLOCK, data) == 0


@pytest.mark.parametrize("codec", ["bzip2", "xz"])
def test_codecs_ldpflow_does_not_decompress_itself_are_read_by_fastavro(codec):
    buffer = io.BytesIO()
    fastavro.writer(buffer, fastavro.parse_schema(schema_json("report")), RECORDS,
                    codec=codec, sync_interval=2000)
    parsed = list(formats.read_reports(io.BytesIO(buffer.getvalue()), "avro", source="x",
                                       policy=AcceptancePolicy()))
    assert sum(len(b) for p in parsed for b in p.batches.values()) == len(RECORDS)
    assert not [d for p in parsed for d in p.dead_letters]


def test_a_nullable_string_field_carries_the_sentinel_and_ldpflow_strings_only_it():
    schema = copy.deepcopy(schema_json("report"))
    for field in schema["fields"]:
        if field["name"] in ("oracle", "report_id"):
            field["type"] = ["null", "string"]
    mark = avro.sentinel(schema, ["report_id", "oracle", "seed"])
    assert mark is not None and mark.column == "oracle"
    record = fastavro.schemaless_reader(io.BytesIO(mark.encoded), fastavro.parse_schema(schema))
    assert record["oracle"] == mark.nonce
    assert [k for k, v in record.items() if isinstance(v, str) and v] == ["oracle"]
    assert avro.sentinel(schema, ["seed"]) is None  # no decoded string: the slow check
