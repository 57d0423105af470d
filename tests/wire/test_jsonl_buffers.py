"""The JSON reader's spare chunk buffers (``jsonl._buffer``, ``jsonl._give_back``): a
buffer is reused only once nothing views it, and a read with spare buffers gives what a
read without them gives."""

from __future__ import annotations

import io
import time

import numpy as np
import pyarrow as pa
import pytest

from ldpflow.wire import jsonl
from ldpflow.wire.parse import AcceptancePolicy
from tests.wire.test_jsonl import _hostile_file, _read_all


@pytest.fixture(autouse=True)
def _no_spares_left(monkeypatch):
    monkeypatch.setattr(jsonl, "_SPARE", [])
    monkeypatch.setattr(jsonl, "_READERS", 0)
    monkeypatch.setattr(jsonl, "_FREEING", None)
    monkeypatch.setattr(jsonl, "_SPARE_IDLE_SECONDS", 0.0)  # freed at once (see below)
    yield


def test_a_buffer_given_back_is_reused_at_the_size_asked(monkeypatch):
    monkeypatch.setattr(jsonl, "_JSON_CHUNK_BYTES", 1000)
    first = jsonl._buffer(1200)
    first[:] = b"x" * 1200
    jsonl._give_back(first)
    again = jsonl._buffer(1300)  # larger: grown
    assert again is first and len(again) == 1300
    jsonl._give_back(again)
    smaller = jsonl._buffer(700)  # smaller: cut
    assert smaller is first and len(smaller) == 700


def test_a_buffer_still_viewed_is_never_reused(monkeypatch):
    monkeypatch.setattr(jsonl, "_JSON_CHUNK_BYTES", 1000)
    data = bytearray(b'{"a":1}\n' * 200)
    arrow = pa.py_buffer(data)  # a view (what pyarrow.json's input holds)
    jsonl._give_back(data)
    assert jsonl._SPARE == []
    codes = np.frombuffer(data, dtype=np.uint8)
    del arrow
    jsonl._give_back(data)
    assert jsonl._SPARE == []
    del codes
    jsonl._give_back(data)
    assert jsonl._SPARE == [data]
    assert bytes(data) == b'{"a":1}\n' * 200  # the trial resize left it as it was


def test_small_chunks_and_bytes_are_not_kept(monkeypatch):
    monkeypatch.setattr(jsonl, "_JSON_CHUNK_BYTES", 1000)
    jsonl._give_back(bytearray(100))
    jsonl._give_back(b"x" * 2000)
    assert jsonl._SPARE == []
    jsonl._give_back(bytearray(600))
    assert len(jsonl._buffer(10)) == 10 and len(jsonl._SPARE) == 1  # a new one for a small read


def test_at_most_the_spare_count_is_kept(monkeypatch):
    monkeypatch.setattr(jsonl, "_JSON_CHUNK_BYTES", 1000)
    for _ in range(jsonl._SPARE_BUFFERS + 3):
        jsonl._give_back(bytearray(1000))
    assert len(jsonl._SPARE) == jsonl._SPARE_BUFFERS


@pytest.mark.parametrize("keep", [(), ("id_hashes", "event_times", "user_ids")])
@pytest.mark.parametrize("threads", ["1", "2"])
def test_reads_with_spare_buffers_give_what_reads_without_them_give(monkeypatch, keep,
                                                                    threads):
    monkeypatch.setenv("LDPFLOW_THREADS", threads)
    monkeypatch.setattr(jsonl, "MAX_LINE_BYTES", 4096)
    monkeypatch.setattr(jsonl, "_JSON_CHUNK_BYTES", 40_000)  # many chunks
    data = _hostile_file()
    monkeypatch.setattr(jsonl, "_SPARE_BUFFERS", 0)
    expected = _read_all(data, keep)
    monkeypatch.setattr(jsonl, "_SPARE_BUFFERS", 4)
    reused = []
    buffer = jsonl._buffer

    def spy(size):
        spare = list(jsonl._SPARE)
        made = buffer(size)
        reused.append(any(made is s for s in spare))
        return made

    monkeypatch.setattr(jsonl, "_buffer", spy)
    for _ in range(3):
        assert _read_all(data, keep) == expected
        assert jsonl._READERS == 0
        _wait_freed()
    assert sum(reused) > len(reused) // 2


def test_spare_buffers_live_while_a_read_runs_and_are_freed_by_the_last_to_end(monkeypatch):
    monkeypatch.setenv("LDPFLOW_THREADS", "1")
    monkeypatch.setattr(jsonl, "_JSON_CHUNK_BYTES", 1000)
    data = b"".join(b'{"report_id":"r%d","oracle":"grr"}\n' % i for i in range(400))
    policy = AcceptancePolicy()

    def chunks():
        return jsonl.read_chunks(io.BytesIO(data), "in.jsonl", 0, None, policy, ())

    first, second = chunks(), chunks()
    next(first), next(first)  # its first chunk's buffer given back, taken by the next
    assert jsonl._READERS == 1
    next(second), next(second)
    assert jsonl._READERS == 2
    list(first)  # one read ends, the other still runs: its last buffer stays a spare
    assert jsonl._READERS == 1 and jsonl._SPARE
    second.close()  # abandoned part way: it ends too, and the last frees them
    assert jsonl._READERS == 0
    _wait_freed()


def _wait_freed(timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while (jsonl._SPARE or jsonl._FREEING is not None) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert jsonl._SPARE == [] and jsonl._FREEING is None


def test_a_read_that_begins_while_the_spares_wait_to_be_freed_keeps_them(monkeypatch):
    monkeypatch.setattr(jsonl, "_SPARE_IDLE_SECONDS", 60.0)
    monkeypatch.setattr(jsonl, "_JSON_CHUNK_BYTES", 1000)
    jsonl._reading(+1)
    jsonl._give_back(bytearray(1000))
    jsonl._reading(-1)  # the last read ended: the spares wait to be freed
    waiting = jsonl._FREEING
    assert waiting is not None and waiting.is_alive() and len(jsonl._SPARE) == 1
    jsonl._reading(+1)  # the next file's read: the freeing is called off
    waiting.join(5)
    assert not waiting.is_alive() and len(jsonl._SPARE) == 1 and jsonl._FREEING is None
    jsonl._free_spares()  # a timer that fired as it was called off: it frees nothing
    assert len(jsonl._SPARE) == 1
    jsonl._reading(-1)
    later = jsonl._FREEING
    jsonl._reading(+1)
    jsonl._reading(-1)  # a newer timer replaces it; the older one, firing, frees nothing
    assert jsonl._FREEING is not later and len(jsonl._SPARE) == 1
    jsonl._reading(+1)
    monkeypatch.setattr(jsonl, "_SPARE_IDLE_SECONDS", 0.0)
    jsonl._reading(-1)
    _wait_freed()
