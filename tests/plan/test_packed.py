"""Compact report columns and their spill files: exact round trips, pieces of whole blocks,
and a clear error for a spill file that is missing or damaged."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from ldpflow.core.oracles import Reports
from ldpflow.plan import packed

ROWS = 37


def _reports() -> Reports:
    rng = np.random.default_rng(3)
    return Reports("pem", {
        "seed": rng.integers(0, 2**64, ROWS, dtype=np.uint64),  # full width: not narrowed
        "bucket": rng.integers(0, 200, ROWS).astype(np.int64),  # narrowed to one byte
        "group": np.full(ROWS, 3, dtype=np.int64),  # one value: stored once
        "signed": rng.integers(-40000, 40000, ROWS).astype(np.int64),
        "bits": rng.integers(0, 2, (ROWS, 5)).astype(np.int8),  # two-dimensional
    })


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(packed, "SPILL_BLOCK", 8)  # pieces of a file this small
    return 8


def _equal(a: Reports, b: Reports) -> None:
    assert a.oracle == b.oracle and a.columns.keys() == b.columns.keys()
    for name, column in a.columns.items():
        assert b.columns[name].dtype == column.dtype, name
        assert np.array_equal(b.columns[name], column), name


def test_spill_round_trip_is_exact_whole_and_in_pieces(tmp_path, small_blocks):
    reports = _reports()
    buckets = np.arange(ROWS, dtype=np.uint8) % 16
    path = str(tmp_path / "a.pak")
    size = packed.write_spill(path, packed.PackedReports(reports), {"id_bucket": buckets})
    assert os.path.getsize(path) == size
    assert packed.spill_size(path) == ROWS
    whole, extra = packed.read_spill(path)
    _equal(reports, whole)
    assert extra["id_bucket"].dtype == np.uint8 and np.array_equal(extra["id_bucket"], buckets)
    pieces = [packed.read_spill(path, lo, min(lo + 2 * small_blocks, ROWS))
              for lo in range(0, ROWS, 2 * small_blocks)]
    _equal(reports, Reports.concat([p for p, _ in pieces]))
    assert np.array_equal(np.concatenate([e["id_bucket"] for _, e in pieces]), buckets)
    # narrowest types on disk: the header says how each column is stored
    with open(path, "rb") as f:
        header, _ = packed._header(f, path)
    stored = {c["name"]: (c["kind"], c.get("stored")) for c in header["columns"]}
    assert stored["bucket"] == ("array", "|u1") and stored["group"][0] == "constant"
    assert stored["signed"] == ("array", "<i4") and stored["seed"] == ("array", "<u8")


def test_spill_piece_must_be_whole_blocks(tmp_path, small_blocks):
    path = str(tmp_path / "a.pak")
    packed.write_spill(path, packed.PackedReports(_reports()))
    with pytest.raises(ValueError, match="whole blocks of 8 rows"):
        packed.read_spill(path, 3, 16)
    with pytest.raises(ValueError, match="whole blocks of 8 rows"):
        packed.read_spill(path, 8, 12)


def test_missing_spill_file_is_a_clear_error(tmp_path):
    with pytest.raises(packed.SpillError, match="spill file .* is missing"):
        packed.read_spill(str(tmp_path / "gone.pak"))
    with pytest.raises(packed.SpillError, match="is missing"):
        packed.spill_size(str(tmp_path / "gone.pak"))


def _damaged(path: str, at: int, data: bytes | None = None, cut: bool = False) -> None:
    with open(path, "r+b") as f:
        if cut:
            f.truncate(at)
            return
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(data if data is not None else bytes([byte[0] ^ 0xFF]))


@pytest.mark.parametrize("damage, message", [
    ("data", "do not match their checksum"),
    ("header", "header does not match"),
    ("magic", "does not start as a spill file"),
    ("cut", "bytes, its header says"),
])
def test_damaged_spill_file_is_a_clear_error(tmp_path, small_blocks, damage, message):
    path = str(tmp_path / "a.pak")
    size = packed.write_spill(path, packed.PackedReports(_reports()))
    at = {"data": size - 3, "header": len(packed.MAGIC) + 12, "magic": 0, "cut": size - 1}
    _damaged(path, at[damage], cut=damage == "cut")
    with pytest.raises(packed.SpillError, match=message):
        packed.read_spill(path)


def test_damage_outside_a_piece_is_not_read(tmp_path, small_blocks):
    """A piece checks its own blocks: damage in the last block fails that block's read
    only (every block of a file is read by exactly one piece of a pass)."""
    path = str(tmp_path / "a.pak")
    size = packed.write_spill(path, packed.PackedReports(_reports()))
    _damaged(path, size - 1)
    packed.read_spill(path, 0, 8)
    with pytest.raises(packed.SpillError, match="rows 32.. do not match"):
        packed.read_spill(path, 32)


def test_packed_header_is_json_with_the_data_size(tmp_path):
    path = str(tmp_path / "a.pak")
    size = packed.write_spill(path, packed.PackedReports(_reports()))
    with open(path, "rb") as f:
        f.seek(len(packed.MAGIC))
        length = int.from_bytes(f.read(4), "little")
        f.seek(len(packed.MAGIC) + 8)
        header = json.loads(f.read(length))
    assert header["size"] == ROWS and header["oracle"] == "pem"
    assert size == len(packed.MAGIC) + 8 + length + header["data_bytes"]
