"""JSON lines read ahead on a thread (``ldpflow.wire.reading.read_ahead``): the same chunks,
reports, dead letters and errors, in the same order, as a read in the caller's thread."""

from __future__ import annotations

import gzip
import io
import json
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ldpflow.wire import formats, jsonl, reading
from ldpflow.wire.parse import KEEP_FIELDS
from tests.wire.test_jsonl import _hostile_file, _read_all


def _made(n: int, log: list, fail_at: int | None = None):
    try:
        for i in range(n):
            if i == fail_at:
                raise ValueError(f"item {i} cannot be made")
            log.append(("made", i, threading.get_ident()))
            yield i
    finally:
        log.append(("closed",))


def test_items_come_in_order_made_on_a_thread_at_most_one_ahead():
    log: list = []
    seen = []
    for item in reading.read_ahead(_made(6, log)):
        made = [entry[1] for entry in log if entry[0] == "made"]
        assert max(made) <= item + 1  # never more than the next one made before asked
        seen.append(item)
    assert seen == list(range(6))
    assert {entry[2] for entry in log if entry[0] == "made"} != {threading.get_ident()}
    assert log[-1] == ("closed",)


def test_an_error_is_raised_where_its_item_would_have_come():
    log: list = []
    seen = []
    with pytest.raises(ValueError, match="item 3 cannot be made"):
        for item in reading.read_ahead(_made(6, log, fail_at=3)):
            seen.append(item)
    assert seen == [0, 1, 2]


def test_closing_early_stops_the_thread_and_closes_the_items():
    log: list = []
    items = reading.read_ahead(_made(100, log))
    assert next(items) == 0
    items.close()
    assert log[-1] == ("closed",)
    assert len([entry for entry in log if entry[0] == "made"]) <= 2
    assert not any(t.name == "ldpflow-read-ahead" for t in threading.enumerate())


@pytest.fixture(autouse=True)
def _two_threads(monkeypatch):
    """The stages run on threads when this process may use more than one
    (``LDPFLOW_THREADS``): two here, whatever the environment the tests run in."""
    monkeypatch.setenv("LDPFLOW_THREADS", "2")


def _spy_threads(monkeypatch, module=jsonl) -> list:
    """The read-aheads started through ``module.read_ahead`` (``jsonl``: the check stage;
    ``reading``: the read and parse stages)."""
    started: list = []
    ahead = reading.read_ahead

    def spy(items):
        started.append(True)
        return ahead(items)

    monkeypatch.setattr(module, "read_ahead", spy)
    return started


def _in_the_callers_thread(monkeypatch) -> None:
    monkeypatch.setattr(jsonl, "read_ahead", lambda items: items)


@pytest.mark.parametrize("keep", [(), KEEP_FIELDS])
def test_a_hostile_file_read_ahead_gives_what_the_callers_thread_gives(monkeypatch, keep):
    data = _hostile_file()
    monkeypatch.setattr(jsonl, "MAX_LINE_BYTES", 4096)
    monkeypatch.setattr(jsonl, "_JSON_CHUNK_BYTES", 40_000)  # many chunks
    started = _spy_threads(monkeypatch)
    ahead = _read_all(data, keep)
    assert started == [True]
    _in_the_callers_thread(monkeypatch)
    assert ahead == _read_all(data, keep)
    assert len(ahead) > 10 and sum(len(p[3]) for p in ahead) >= 10


def _records(parsed_chunks) -> list:
    return [(p.records, p.reports, [letter.to_json() for letter in p.dead_letters])
            for p in parsed_chunks]


def _truncated_gzip(data: bytes) -> bytes:
    packed = gzip.compress(data, compresslevel=1)
    return packed[: len(packed) * 2 // 3]


def _cut_reads(monkeypatch, start, end):
    """A read of a hostile file of many chunks: ``read(False)`` of the range ``[start,
    end)``, ``read(True)`` of the whole file gzipped and truncated."""
    monkeypatch.setattr(jsonl, "MAX_LINE_BYTES", 4096)
    monkeypatch.setattr(jsonl, "_JSON_CHUNK_BYTES", 20_000)
    data = _hostile_file()

    def read(compressed: bool):
        if compressed:
            stream = formats.decompressed(io.BytesIO(_truncated_gzip(data)), "f.jsonl.gz")
            return _records(formats.read_reports(stream, "json", source="f.jsonl.gz"))
        return _records(formats.read_reports(io.BytesIO(data), "json", source="f.jsonl",
                                             start=start, end=end))

    return read


@pytest.mark.parametrize("start,end", [(0, None), (0, 150_000), (150_000, None)])
def test_a_truncated_or_split_file_read_ahead_fails_where_it_did(monkeypatch, start, end):
    read = _cut_reads(monkeypatch, start, end)
    started = _spy_threads(monkeypatch)
    ahead = {compressed: read(compressed) for compressed in (False, True)}
    assert started == [True, True]
    _in_the_callers_thread(monkeypatch)
    for compressed, chunks in ahead.items():
        assert chunks == read(compressed)
    assert json.loads(ahead[True][-1][2][0])["reason"].startswith("truncated file: ")
    assert sum(c[0] for c in ahead[True][:-1]) > 1000


def test_a_message_or_a_small_file_is_read_in_the_callers_thread(monkeypatch):
    started = _spy_threads(monkeypatch)
    data = _hostile_file()
    assert len(data) < jsonl._JSON_CHUNK_BYTES
    assert _read_all(data, ())
    formats.decode_message(data[: data.index(b"\n") + 1], "m", None, ())
    assert started == []
    assert jsonl._several_chunks(io.BytesIO(b"x" * 100), 0, None) is False
    assert jsonl._several_chunks(io.BytesIO(b"x" * (jsonl._JSON_CHUNK_BYTES + 1)), 0,
                                 None) is True
    stream = formats.decompressed(io.BytesIO(gzip.compress(b"{}\n")), "m.jsonl.gz")
    assert jsonl._several_chunks(stream, 0, None) is True


def test_whether_to_read_ahead_is_told_without_moving_or_decompressing_the_stream(
        monkeypatch, tmp_path):
    monkeypatch.setattr(jsonl, "_JSON_CHUNK_BYTES", 1000)
    monkeypatch.setattr(jsonl, "MAX_LINE_BYTES", 100)  # a range's last line may run on
    data = b'{"a":1}\n' * 500
    packed = gzip.GzipFile(fileobj=io.BytesIO(gzip.compress(data)))
    assert jsonl._several_chunks(packed, 0, None) is True
    assert packed.tell() == 0  # not sought: the end of a gzip stream is all of it inflated
    path = tmp_path / "r.jsonl"
    path.write_bytes(data)
    with open(path, "rb") as f:
        f.seek(7)
        assert jsonl._several_chunks(f, 0, None) is True
        assert jsonl._several_chunks(f, 0, 500) is False
        assert jsonl._several_chunks(f, len(data) - 900, None) is False
        assert f.tell() == 7


def _all_in_the_callers_thread(monkeypatch) -> None:
    """No stage on a thread: the read as one loop in the caller's thread."""
    _in_the_callers_thread(monkeypatch)
    monkeypatch.setattr(reading, "read_ahead", lambda items: items)


@pytest.mark.parametrize("keep", [(), KEEP_FIELDS])
def test_the_three_stages_give_what_one_loop_in_the_callers_thread_gives(monkeypatch, keep):
    data = _hostile_file()
    monkeypatch.setattr(jsonl, "MAX_LINE_BYTES", 4096)
    monkeypatch.setattr(jsonl, "_JSON_CHUNK_BYTES", 40_000)  # many chunks
    monkeypatch.setattr(jsonl, "_SCAN_BYTES", 1024)  # lines measured a slice at a time
    threads = _spy_threads(monkeypatch)
    stages = _spy_threads(monkeypatch, reading)
    staged = _read_all(data, keep)
    assert threads == [True] and stages == [True, True]  # checking, parsing, reading
    _all_in_the_callers_thread(monkeypatch)
    assert staged == _read_all(data, keep)
    assert len(staged) > 10 and sum(len(p[3]) for p in staged) >= 10


@pytest.mark.parametrize("start,end", [(0, None), (0, 150_000), (150_000, None)])
def test_the_three_stages_fail_and_cut_where_one_loop_does(monkeypatch, start, end):
    read = _cut_reads(monkeypatch, start, end)
    stages = _spy_threads(monkeypatch, reading)
    staged = {compressed: read(compressed) for compressed in (False, True)}
    assert len(stages) == 4
    _all_in_the_callers_thread(monkeypatch)
    for compressed, chunks in staged.items():
        assert chunks == read(compressed)
    assert json.loads(staged[True][-1][2][0])["reason"].startswith("truncated file: ")


def test_closing_a_staged_read_early_stops_every_stage(monkeypatch, tmp_path):
    monkeypatch.setattr(jsonl, "_JSON_CHUNK_BYTES", 20_000)
    path = tmp_path / "r.jsonl"
    path.write_bytes(_hostile_file())
    with open(path, "rb") as f:
        chunks = formats.read_reports(f, "json", source="r.jsonl")
        assert next(chunks).records > 0
        assert sum(t.name == "ldpflow-read-ahead" for t in threading.enumerate()) == 3
        chunks.close()
    assert not any(t.name == "ldpflow-read-ahead" for t in threading.enumerate())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([b"\n", b"\n\n", b"a", b" ", b"{\"x\":1}"]), min_size=1,
                max_size=200),
       st.sampled_from([2, 4, 6, 64]))
def test_newlines_and_empty_lines_measured_in_slices_are_those_of_the_bytes(parts, scan):
    data = b"".join(parts)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jsonl, "_SCAN_BYTES", scan)
        for chunk in (data, bytearray(data)):
            assert jsonl._count_newlines(chunk) == data.count(b"\n")
            assert jsonl._has_empty_line_inside(chunk) == (b"\n\n" in data)
            expected = sum(1 for line in data.split(b"\n") if line)
            assert jsonl._nonblank_lines(chunk) == expected


def test_one_thread_configured_reads_in_the_callers_thread(monkeypatch):
    """LDPFLOW_THREADS=1 (Dask and Spark workers) starts no stage, whatever the range."""
    data = _hostile_file()
    monkeypatch.setattr(jsonl, "MAX_LINE_BYTES", 4096)
    monkeypatch.setattr(jsonl, "_JSON_CHUNK_BYTES", 40_000)
    in_caller = _read_all(data, ())
    started = _spy_threads(monkeypatch)
    reading_started = _spy_threads(monkeypatch, reading)
    monkeypatch.setenv("LDPFLOW_THREADS", "1")
    assert _read_all(data, ()) == in_caller
    assert started == [] and reading_started == []


def test_the_size_of_a_stream_in_memory_is_told_without_a_copy():
    import tracemalloc

    data = b"x" * (8 << 20)  # held here too, as a message's bytes are: the stream shares them
    stream = io.BytesIO(data)
    stream.seek(5)
    tracemalloc.start()
    assert jsonl._bytes_left(stream) == (8 << 20) - 5
    assert jsonl._several_chunks(stream, 0, None) is False
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert stream.tell() == 5
    assert peak < 1 << 20, peak
