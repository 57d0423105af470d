"""Compressed report files are decompressed in bounded steps (a small file that expands to
gigabytes holds one chunk in memory, not its whole content), and a compressed stream cut
short is reported as truncated, of an unknown number of lost records."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import tracemalloc
import zlib

import numpy as np
import pytest

import ldpflow
from ldpflow.wire import formats, jsonl

ORACLE = ldpflow.oracle("grr", epsilon=1.0, domain_size=8)
LINE = json.dumps({"report_id": "r", "user_id": "u", "event_time": 0, "oracle": "grr",
                   "epsilon": 1.0, "domain_size": 8, "value": 3},
                  separators=(",", ":")).encode() + b"\n"
BOMB_BYTES = 24 << 20  # expands to this; compresses to about 50 KiB
READ = 256 << 10


def _compress(data: bytes, suffix: str) -> bytes:
    if suffix == ".gz":
        return gzip.compress(data, compresslevel=1)
    if suffix == ".bz2":
        return bz2.compress(data, compresslevel=1)
    if suffix == ".deflate":
        return zlib.compress(data, 1)
    import zstandard

    return zstandard.ZstdCompressor(level=1).compress(data)


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return LINE * (BOMB_BYTES // len(LINE))


class _Counting(io.RawIOBase):
    """A raw stream that records the largest read asked of it and the bytes handed out."""

    def __init__(self, data: bytes):
        super().__init__()
        self._data = io.BytesIO(data)

    def readable(self):
        return True

    def readinto(self, buffer):
        data = self._data.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".deflate", ".zst"])
def test_each_read_of_a_decompression_bomb_is_bounded_by_its_size(bomb, suffix):
    if suffix == ".bz2":  # slow to compress: a smaller bomb, still 32 reads or more
        bomb = bomb[: 8 << 20]
    packed = _compress(bomb, suffix)
    assert len(packed) < len(bomb) // 50
    stream = formats.decompressed(io.BufferedReader(_Counting(packed)), "r.jsonl" + suffix)
    largest = total = 0
    tracemalloc.start()
    try:
        while part := stream.read(READ):
            largest = max(largest, len(part))
            total += len(part)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert total == len(bomb) and largest <= READ
    # Nothing of the size of the expanded content was ever held (Beam's CompressedFile
    # holds all of it: it expands 16 MiB of compressed input at once).
    assert peak < 8 * READ, peak


def test_the_largest_buffer_handed_to_the_json_parser_is_one_chunk(bomb, monkeypatch):
    seen: list[int] = []
    parse = jsonl._json_parse

    def spy(chunk, *args, **kwargs):
        seen.append(len(chunk))
        return parse(chunk, *args, **kwargs)

    monkeypatch.setattr(jsonl, "_json_parse", spy)
    monkeypatch.setattr(jsonl, "_JSON_CHUNK_BYTES", 4 << 20)
    stream = formats.decompressed(io.BytesIO(_compress(bomb, ".gz")), "r.jsonl.gz")
    records = sum(p.records for p in formats.read_reports(stream, "json"))
    assert records == len(bomb) // len(LINE)
    assert max(seen) <= (4 << 20) + len(LINE) and sum(seen) == len(bomb)


def test_the_beam_read_decompresses_in_bounded_steps(bomb, tmp_path):
    from ldpflow.transforms.io import open_input

    path = tmp_path / "bomb.jsonl.gz"
    path.write_bytes(_compress(bomb, ".gz"))
    tracemalloc.start()
    try:
        with open_input(str(path)) as stream:
            total = 0
            while part := stream.read(READ):
                total += len(part)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert total == len(bomb) and peak < 8 * READ, peak


def _lines(n: int) -> bytes:
    rng = np.random.default_rng(1)
    reports = ORACLE.perturb(rng.integers(0, 8, n), rng=rng)
    return formats.json_lines(formats.reports_table(
        ORACLE, reports, formats.numbered_ids("r-", 0, n), formats.numbered_ids("u-", 0, n),
        np.arange(n)))


# zstandard's stream reader ends a cut frame silently: a truncated .zst file still reads as
# a malformed last line (not covered).
@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".deflate"])
def test_a_truncated_compressed_file_is_reported_as_truncated_not_as_a_malformed_line(
        suffix):
    data = _lines(2000)
    packed = _compress(data, suffix)
    cut = packed[: len(packed) * 2 // 3]
    stream = formats.decompressed(io.BytesIO(cut), "r.jsonl" + suffix)
    chunks = list(formats.read_reports(stream, "json", source="r.jsonl" + suffix))
    letters = [d for p in chunks for d in p.dead_letters]
    reports = sum(p.reports for p in chunks)
    assert 0 < reports < 2000
    (letter,) = letters
    assert letter.reason.startswith("truncated file: the compressed stream is truncated")
    assert letter.count_unknown and letter.count == 0 and letter.bytes is None
    assert not any("malformed" in d.reason for d in letters)
    assert json.loads(letter.to_json())["count_unknown"] is True


def test_an_intact_multi_member_gzip_file_reads_whole():
    data = _lines(300)
    packed = gzip.compress(data[:9000]) + gzip.compress(data[9000:])
    stream = formats.decompressed(io.BytesIO(packed), "r.jsonl.gz")
    chunks = list(formats.read_reports(stream, "json"))
    assert sum(p.reports for p in chunks) == 300
    assert not [d for p in chunks for d in p.dead_letters]
