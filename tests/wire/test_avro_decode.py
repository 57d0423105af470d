"""The columnar Avro decode of a run of blocks gives the columns, batches and dead letters of
the straightforward construction, bit for bit: the container with its sentinels built in one
join, and the blocks' slices (without their sentinels) joined column by column (a struct
child by child)."""

from __future__ import annotations

import io
import json

import numpy as np
import pyarrow as pa
import pytest

import ldpflow
from ldpflow.core import heavy_hitters as hh
from ldpflow.schemas import schema_json
from ldpflow.wire import avro, formats
from ldpflow.wire.parse import AcceptancePolicy
from tests.core.heavy_hitter_contract import SMALL, population

BLOCK_ROWS = 37  # several blocks a decode, none of the same size as a protocol's run


def _mixed_table() -> pa.Table:
    """PEM reports interleaved with OLH reports (their ``pem`` record is null), one PEM
    report claiming another user's group and one with its prefix out of range."""
    pem = hh.make("pem", **SMALL["pem"])
    n = 160
    users = np.array([f"user-{i}" for i in range(n)], dtype=object)
    reports = pem.perturb(population(n, 3), users, np.random.default_rng(3))
    table = formats.reports_table(pem, reports, formats.numbered_ids("pem-", 0, n),
                                  list(users), np.arange(n, dtype=np.int64))
    olh = ldpflow.oracle("olh", epsilon=1.0, domain_size=16)
    other = olh.perturb(np.arange(60) % 16, rng=np.random.default_rng(4))
    foreign = formats.reports_table(olh, other, formats.numbered_ids("olh-", 0, 60),
                                    formats.numbered_ids("u", 0, 60), np.zeros(60, np.int64))
    rows = table.to_pylist()
    rows[5]["user_id"] = rows[6]["user_id"]  # likely another group: a dead letter if so
    rows[9]["pem"] = {**rows[9]["pem"], "group": 10**6}
    mixed = []
    for i, row in enumerate(rows):
        mixed.append(row)
        if i % 3 == 0 and i // 3 < 60:
            mixed.append(foreign.to_pylist()[i // 3])
    return pa.Table.from_pylist(mixed, schema=table.schema)


def _reference_joined(parts: list[pa.Table]) -> pa.Table:
    """What the decode did before: the slices concatenated, every column combined."""
    return pa.concat_tables(parts).combine_chunks()


def _reference_with_sentinels(blocks, mark, sync, prefix=b""):
    parts = []
    for block in blocks:
        count, pos = avro._read_varint(block.raw, 0)
        size, pos = avro._read_varint(block.raw, pos)
        data = block.raw[pos:pos + size] + mark.encoded
        parts.append(avro._zigzag_varints(np.array([count + 1, len(data)])))
        mat, lengths = parts[-1]
        parts[-1] = (mat[0, :lengths[0]].tobytes() + mat[1, :lengths[1]].tobytes() + data
                     + sync)
    return prefix + b"".join(parts)


def _container(codec: str) -> bytes:
    return avro.encode_container(_mixed_table(), schema_json("report"), codec=codec,
                                 block_rows=BLOCK_ROWS)


def _parsed(data: bytes, keep=("id_hashes",)):
    policy = AcceptancePolicy(expect={"oracle": "pem"})
    return list(formats.read_reports(io.BytesIO(data), "avro", source="in.avro",
                                     policy=policy, keep=keep))


def _flat(parsed):
    """Everything a read gives, in order, as plain values."""
    out = []
    for chunk in parsed:
        batches = {}
        for key, batch in chunk.batches.items():
            batches[key] = ({c: v.tolist() for c, v in batch.reports.columns.items()},
                            {c: v.dtype.str for c, v in batch.reports.columns.items()},
                            batch.id_hashes.tolist())
        out.append((chunk.records, batches, [d.to_json() for d in chunk.dead_letters]))
    return out


def test_one_varint_is_the_vectorised_encoding_and_reads_back():
    edges = [0, 1, -1, 63, -64, 64, -65, 127, 128, 8191, 8192, (1 << 31) - 1, -(1 << 31),
             (1 << 62), -(1 << 62) - 1, (1 << 63) - 1, -(1 << 63)]
    values = np.concatenate([np.array(edges, dtype=np.int64),
                             np.random.default_rng(3).integers(-(1 << 63), (1 << 63) - 1,
                                                               2000, dtype=np.int64)])
    mat, lengths = avro._zigzag_varints(values)
    for v, row, length in zip(values.tolist(), mat, lengths.tolist(), strict=True):
        encoded = avro._varint(v)
        assert encoded == row[:length].tobytes(), v
        assert avro._read_varint(encoded, 0) == (v, len(encoded))
    for bad in (1 << 63, -(1 << 63) - 1):
        with pytest.raises(OverflowError):
            avro._varint(bad)


@pytest.mark.parametrize("codec", avro.CODECS)
def test_the_sentinel_container_is_the_bytes_of_the_reference_construction(codec):
    data = _container(codec)
    stream = io.BytesIO(data)
    header = avro.read_header(stream)
    blocks = list(avro.iter_blocks(stream, header))
    assert len(blocks) > 3 and all(isinstance(b, avro.Block) for b in blocks)
    header, blocks = avro.to_null(header, blocks)
    mark = avro.sentinel(header.schema, ["oracle", "pem"])
    got = avro.with_sentinels(blocks, mark, header.sync, header.raw)
    assert got == _reference_with_sentinels(blocks, mark, header.sync, header.raw)
    assert avro.with_sentinels(blocks, mark, header.sync) == _reference_with_sentinels(
        blocks, mark, header.sync)


def test_joined_slices_equal_the_combined_concatenation():
    table = _mixed_table().combine_chunks()
    cuts = [0, 37, 38, 80, 81, 150, 151, table.num_rows]
    parts = [table.slice(a, b - a) for a, b in zip(cuts[::2], cuts[1::2], strict=True)]
    got, want = avro._joined(parts), _reference_joined(parts)
    assert got.schema == want.schema
    assert got.num_rows == want.num_rows == sum(p.num_rows for p in parts)
    for name in got.column_names:
        assert got.column(name).num_chunks == 1, name
        assert got.column(name).chunk(0).equals(want.column(name).chunk(0)), name
        assert got.column(name).null_count == want.column(name).null_count, name
    assert want.column("pem").null_count > 0  # the struct with nulls: joined child by child


@pytest.mark.parametrize("codec", avro.CODECS)
def test_a_read_gives_what_the_reference_decode_gives(codec, monkeypatch):
    data = _container(codec)
    got = _flat(_parsed(data))
    monkeypatch.setattr(avro, "_joined", _reference_joined)
    monkeypatch.setattr(avro, "with_sentinels", _reference_with_sentinels)
    want = _flat(_parsed(data))
    assert got == want
    records = sum(r for r, _, _ in got)
    reports = sum(len(c[0]["group"]) for _, b, _ in got for c in b.values())
    dead = sum(json.loads(d)["count"] for _, _, letters in got for d in letters)
    assert records == _mixed_table().num_rows == 214  # 160 PEM reports, 54 OLH
    assert reports + dead == records and dead >= 54 + 1  # the OLH reports, the bad group
