"""Damaged and foreign files: nothing crashes, every record is accounted for, and every
intact record is counted (random corruptions with fixed seeds)."""

from __future__ import annotations

import io
import json

import fastavro
import numpy as np
import pytest

import ldpflow
from ldpflow.schemas import schema_json
from ldpflow.wire import avro, formats

ORACLE = ldpflow.oracle("grr", epsilon=1.0, domain_size=32)


def _reports(n, seed):
    rng = np.random.default_rng(seed)
    reports = ORACLE.perturb(rng.integers(0, 32, n), rng=rng)
    table = formats.reports_table(ORACLE, reports, formats.numbered_ids("r-", 0, n),
                                  formats.numbered_ids("u-", 0, n), np.arange(n))
    return reports, table


def _read(data: bytes, fmt: str):
    parsed = list(formats.read_reports(io.BytesIO(data), fmt, source="f"))
    counts = np.zeros(32, dtype=np.int64)
    for p in parsed:
        for b in p.batches.values():
            counts += ORACLE.count_valid(b.reports).counts
    reports = sum(p.reports for p in parsed)
    dead = sum(d.count for p in parsed for d in p.dead_letters)
    return parsed, counts, reports, dead


@pytest.mark.parametrize("codec", ["null", "deflate", "snappy"])
@pytest.mark.parametrize("seed", range(12))
def test_random_avro_corruption_loses_only_damaged_blocks(codec, seed):
    rng = np.random.default_rng(seed)
    reports, table = _reports(4000, seed)
    data = bytearray(avro.encode_container(table, schema_json("report"), codec=codec,
                                           block_rows=250))
    header = avro.read_header(io.BytesIO(bytes(data)))
    blocks = list(avro.iter_blocks(io.BytesIO(bytes(data)), header))
    flips = rng.integers(header.end, len(data), size=int(rng.integers(1, 4)))
    for at in flips:
        data[at] ^= int(rng.integers(1, 256))
    touched = {i for i, b in enumerate(blocks) for at in flips
               if b.offset <= at < b.offset + len(b.raw)}
    parsed, counts, n, dead = _read(bytes(data), "avro")
    intact = np.zeros(32, dtype=np.int64)
    for i in set(range(len(blocks))) - touched:
        intact += np.bincount(reports.columns["value"][250 * i:250 * (i + 1)], minlength=32)
    assert (counts - intact >= 0).all()  # every record of every intact block is counted
    assert n >= 250 * (len(blocks) - len(touched))
    assert sum(p.records for p in parsed) == n + dead  # every record read is accounted for


@pytest.mark.parametrize("seed", range(12))
def test_random_json_corruption_loses_only_damaged_lines(seed):
    rng = np.random.default_rng(100 + seed)
    reports, table = _reports(3000, seed)
    lines = formats.json_lines(table).splitlines(keepends=True)
    hit = set(rng.choice(len(lines), size=int(rng.integers(1, 20)), replace=False).tolist())
    for i in hit:
        line = bytearray(lines[i])
        for _ in range(int(rng.integers(1, 4))):
            line[int(rng.integers(0, len(line) - 1))] = int(rng.integers(0, 256))
        lines[i] = bytes(line).replace(b"\n", b" ") + b"\n"
    parsed, counts, n, dead = _read(b"".join(lines), "json")
    untouched = np.bincount(np.delete(reports.columns["value"], sorted(hit)), minlength=32)
    assert (counts - untouched >= 0).all()
    assert n + dead == 3000 == sum(p.records for p in parsed)


def test_an_avro_file_of_a_foreign_schema_is_refused_per_record_without_a_crash():
    foreign = {"type": "record", "name": "Other", "fields": [
        {"name": "report_id", "type": "string"}, {"name": "user_id", "type": "string"},
        {"name": "event_time", "type": "long"}, {"name": "oracle", "type": "string"},
        {"name": "epsilon", "type": "double"}, {"name": "domain_size", "type": "long"},
        {"name": "value", "type": ["null", "string", "long"]},
        {"name": "extra", "type": {"type": "map", "values": "long"}}]}
    records = [{"report_id": f"r{i}", "user_id": "u", "event_time": i, "oracle": "grr",
                "epsilon": 1.0, "domain_size": 32,
                "value": (str(i % 32) if i % 3 == 0 else i % 32), "extra": {"a": 1}}
               for i in range(300)]
    buffer = io.BytesIO()
    fastavro.writer(buffer, fastavro.parse_schema(foreign), records)
    parsed, counts, n, dead = _read(buffer.getvalue(), "avro")
    assert n == 200 and dead == 100  # the string values are refused, no coercion
    reasons = {d.reason for p in parsed for d in p.dead_letters}
    assert reasons == {"malformed record: field 'value' must be an integer, got str"}
    assert counts.sum() == 200


def test_damaged_parquet_is_a_dead_letter_not_a_crash():
    import pyarrow.parquet as pq

    _, table = _reports(5000, 1)
    buffer = io.BytesIO()
    formats.write_reports(buffer, "parquet", table)
    data = buffer.getvalue()
    chunk = next(c for rg in [pq.ParquetFile(io.BytesIO(data)).metadata.row_group(0)]
                 for c in (rg.column(i) for i in range(rg.num_columns))
                 if c.path_in_schema == "value")
    at = chunk.data_page_offset + chunk.total_compressed_size // 2
    flipped = data[:at] + bytes([data[at] ^ 0x5A]) + data[at + 1:]  # a payload column
    for damaged, lost in ((data[: len(data) // 2], 0), (flipped, 5000)):
        parsed, counts, n, dead = _read(damaged, "parquet")
        letters = [d for p in parsed for d in p.dead_letters]
        assert len(letters) == 1 and "Parquet" in letters[0].reason, letters
        assert dead == lost and n == 0  # one row group: nothing readable, all counted


def test_a_truncated_json_line_at_the_end_is_one_dead_letter():
    _, table = _reports(100, 2)
    data = formats.json_lines(table)
    parsed, counts, n, dead = _read(data[:-30], "json")
    assert n == 99 and dead == 1
    assert json.loads(data.splitlines()[0])["oracle"] == "grr"


def test_files_ldpflow_writes_carry_checksums_so_a_flipped_bit_is_found():
    reports, table = _reports(2000, 3)
    buffer = io.BytesIO()
    formats.write_reports(buffer, "avro", table)  # snappy: CRC32 per block
    data = bytearray(buffer.getvalue())
    header = avro.read_header(io.BytesIO(bytes(data)))
    assert header.codec == "snappy"
    (block,) = list(avro.iter_blocks(io.BytesIO(bytes(data)), header))
    data[block.offset + len(block.raw) - 20] ^= 0x01  # one bit of the block's last bytes
    parsed, counts, n, dead = _read(bytes(data), "avro")
    (letter,) = [d for p in parsed for d in p.dead_letters]
    assert n == 0 and dead == 2000 and "CRC32" in letter.reason
    assert list(fastavro.reader(io.BytesIO(buffer.getvalue())))[0]["oracle"] == "grr"
