"""JSON lines report files: the report reader (by byte range) and writer.

Reading (:func:`read_chunks`): chunks of about 32 MiB of whole lines (a line belongs to the
range it begins in), parsed by ``pyarrow.json`` against the report schema; a chunk that
fails is halved until the failing lines are found, and only those are parsed one by one
(``bits`` is hex text, ``seed`` signed or unsigned). A line longer than
:data:`MAX_LINE_BYTES` or nested deeper than :data:`MAX_JSON_DEPTH` is refused unread. A
range of several chunks is read, parsed and checked by three stages on threads, with the
same chunks, dead letters and errors as one loop (:func:`read_chunks`).

Writing (:func:`json_lines`, :func:`write_table`, :func:`write_records`): the envelope
columns as JSON text by Arrow string kernels; null fields left out, ``bits`` as hex.
"""

from __future__ import annotations

import functools
import io
import json
import re
import threading
import zlib
from collections.abc import Iterable, Iterator
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ldpflow.core import parallel
from ldpflow.wire import reading
from ldpflow.wire.buffers import offsets_and_data
from ldpflow.wire.envelope import DeadLetter, field_kind, json_safe
from ldpflow.wire.parse import Parsed, arrow_schema, parse_table, records_to_table
from ldpflow.wire.reading import read_ahead, unread_records

__all__ = ["MAX_LINE_BYTES", "MAX_JSON_DEPTH", "read_chunks", "unhex_bits", "json_lines",
           "write_table", "write_records"]

_JSON_CHUNK_BYTES = 32 << 20
_JSON_BLOCK_BYTES = 2 << 20  # pyarrow parses blocks in parallel; > the longest line
_JSON_LINE_FALLBACK = 64  # a failing JSON chunk of at most this many lines: line by line
MAX_LINE_BYTES = 1 << 20
#: Deeper JSON is refused before it is decoded (a report nests one level).
MAX_JSON_DEPTH = 64


_HEX_TEXT = re.compile(r"(?:[0-9a-fA-F]{2})*")
_HEX = np.full(256, 255, dtype=np.uint8)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    _HEX[_c] = 10 + _i


def read_chunks(stream, source, start, end, policy, keep):
    """The :class:`~ldpflow.wire.parse.Parsed` chunks of the lines that begin in ``[start,
    end)``.

    A range of more than one chunk is read in three stages, each on its own thread
    (:func:`ldpflow.wire.reading.read_ahead`) and one chunk ahead of the next: chunk i + 2
    is read and its lines measured (:class:`_Chunk`, numpy), chunk i + 1 parsed by
    ``pyarrow.json`` (:func:`_tried`), chunk i checked (:func:`_json_chunk`), while the
    caller counts chunk i - 1. The chunks, dead letters and errors are those of a read in
    the caller's thread, in the same order: every stage takes its chunks in order, and an
    error is raised where its chunk would have come. With ``LDPFLOW_THREADS=1`` (Dask and
    Spark workers, whose other cores are the other workers') no thread is started.
    """
    if parallel.threads() <= 1 or not _several_chunks(stream, start, end):
        return _parsed_chunks(stream, source, start, end, policy, keep)
    return read_ahead(_parsed_chunks(stream, source, start, end, policy, keep, ahead=True))


def _parsed_chunks(stream, source, start, end, policy, keep, ahead=False):
    unread = unread_records(policy)
    measured = _measured(_json_chunks(stream, start, end))
    if ahead:
        measured = reading.read_ahead(measured)
    tried = _tried(measured, unread)
    if ahead:
        tried = reading.read_ahead(tried)
    cache: dict = {}
    number = 1 if start == 0 else 0  # line numbers are known when reading from the start
    _reading(+1)
    try:
        for chunk in tried:
            yield from _json_chunk(chunk, number, source, policy, keep, cache)
            if number:
                number += chunk.lines
            data = chunk.data
            del chunk  # not held while the next one is awaited
            _give_back(data)
            del data
    finally:
        tried.close()
        _reading(-1)


class _Chunk:
    """One chunk of whole lines (``data``: bytes or a bytearray, never changed once made),
    measured: its ``lines`` (a last line without a newline counts), the ``too_long`` ones
    (line indices, with their ``starts`` and ``ends``; empty when none), its ``nonblank``
    lines (None where lines are too long: counted once they are cut out), and ``table``:
    the whole chunk parsed by :func:`_json_try`, or :data:`_UNTRIED`."""

    __slots__ = ("data", "lines", "too_long", "starts", "ends", "nonblank", "table")

    def __init__(self, data):
        self.data = data
        newlines = _count_newlines(data)
        self.lines = newlines + (0 if data.endswith(b"\n") or not data else 1)
        self.too_long = _NO_LINES
        self.starts = self.ends = _NO_LINES
        if not _lines_are_short(data):  # where the long lines are
            ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
            if ends.size == 0 or ends[-1] != len(data) - 1:  # a last line with no newline
                ends = np.append(ends, len(data))
            starts = np.concatenate([[0], ends[:-1] + 1])
            self.too_long = np.flatnonzero((ends - starts) > MAX_LINE_BYTES)
            self.starts, self.ends = starts, ends
        self.nonblank = None if self.too_long.size else _nonblank_lines(data, newlines)
        self.table = _UNTRIED


_NO_LINES = np.zeros(0, dtype=np.int64)
_UNTRIED = object()


def _measured(chunks: Iterator) -> Iterator[_Chunk]:
    """The first stage: each chunk of lines, measured."""
    try:
        for data in chunks:
            yield _Chunk(data)
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


def _tried(chunks: Iterator[_Chunk], unread: tuple[str, ...]) -> Iterator[_Chunk]:
    """The second stage: each chunk of lines none too long parsed whole (its ``table``: the
    table, or None where the parse fails and the chunk is to be halved)."""
    try:
        for chunk in chunks:
            data = chunk.data
            if not chunk.too_long.size and data and not data.isspace():
                chunk.table = _json_try(data, unread, chunk.nonblank)
            yield chunk
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


def _several_chunks(stream, start: int, end: int | None) -> bool:
    """Whether ``[start, end)`` of ``stream`` may hold more than one chunk: more than
    :data:`_JSON_CHUNK_BYTES` left in a stream whose size is known without moving it (bytes
    in memory, an open file), or any other stream (compressed: what it expands to is
    unknown). A message body or a small file starts no thread. The stream is never sought
    here: seeking a decompressing stream to its end would decompress all of it."""
    import os

    if isinstance(stream, io.BytesIO):
        size = _memory_size(stream)
    elif isinstance(stream, (io.BufferedReader, io.FileIO)) and not hasattr(stream, "compressed"):
        try:
            size = os.fstat(stream.fileno()).st_size
        except (OSError, AttributeError, ValueError, io.UnsupportedOperation):
            return True
    else:
        return True
    stop = size if end is None else min(end + MAX_LINE_BYTES, size)
    return stop - start > _JSON_CHUNK_BYTES


def _json_chunks(stream, start: int, end: int | None) -> Iterator[bytes | bytearray]:
    """The whole lines that begin in ``[start, end)``, in chunks of about 32 MiB.

    Every line belongs to exactly one range whatever its length: offsets are those of the
    file (``line_start``, where the line being carried begins; ``read_to``, the end of what
    was read), never derived from what is kept of a line, since of a line longer than
    :data:`MAX_LINE_BYTES` only the head is kept (for its dead letter). What is read is
    read after the line carried over, into one buffer (:func:`_read_up_to`), which is cut
    at its last newline in place: a chunk is made without a copy of it.
    """
    carry, line_start, read_to = b"", 0, 0
    pending: bytes | None = None  # bytes read but not yet looked at (from read_to - len)
    if start > 0:  # begin at the first line that starts at or after start
        stream.seek(start - 1)
        read_to = start - 1
        while True:
            head = stream.read(1 << 16)
            if not head:
                return
            read_to += len(head)
            cut = head.find(b"\n")
            if cut >= 0:
                line_start = read_to - len(head) + cut + 1
                pending = head[cut + 1:] or None
                break
    while end is None or line_start < end:
        if pending is None:
            try:
                buffer, got = _read_up_to(stream, _JSON_CHUNK_BYTES, carry)
            except _ReadFailed as failure:  # keep the whole lines read before the damage
                cut = failure.data.rfind(b"\n")
                if cut >= 0:
                    yield from _json_tail(carry, failure.data[: cut + 1], read_to, end)
                raise failure.error from None
            if not got:
                if carry:
                    yield carry
                return
            read_to += got
        else:
            buffer, got, pending = carry + pending, len(pending), None
        at = len(buffer) - got  # where the bytes just read begin in buffer (after carry)
        block_start = read_to - got  # the file offset of buffer[at]
        cut = buffer.rfind(b"\n", at)
        if cut < 0:
            carry = buffer
            if len(carry) > MAX_LINE_BYTES:  # keep its head (for the dead letter) only
                carry = carry[: MAX_LINE_BYTES + 1]
            continue
        next_start = read_to - len(buffer) + cut + 1  # where the first line not complete begins
        if end is not None and next_start > end:
            # Keep the lines that begin before end; the next range has the others.
            last = buffer.find(b"\n", at + max(end - 1 - block_start, 0))
            yield _head(buffer, last + 1)
            return
        carry, line_start = bytes(buffer[cut + 1:]), next_start
        yield _head(buffer, cut + 1)


def _head(buffer: bytes | bytearray, size: int) -> bytes | bytearray:
    """The first ``size`` bytes of ``buffer``: a bytearray cut in place (no copy)."""
    if isinstance(buffer, bytearray):
        del buffer[size:]
        return buffer
    return buffer[:size]


def _json_tail(carry: bytes, data: bytes, read_to: int, end: int | None) -> Iterator[bytes]:
    """The whole lines of ``carry + data`` (read up to a failure) that begin before
    ``end``."""
    chunk = carry + data
    if end is None or read_to + len(data) <= end:
        yield chunk
        return
    last = data.find(b"\n", max(end - 1 - read_to, 0))
    if last >= 0:
        yield carry + data[: last + 1]


class _ReadFailed(Exception):
    def __init__(self, data: bytes, error: BaseException):
        super().__init__(str(error))
        self.data, self.error = data, error


def _read_up_to(stream, size: int, carry: bytes | bytearray = b""
                ) -> tuple[bytearray, int]:
    """``carry`` followed by up to ``size`` bytes read, and how many were read.

    A plain file (or bytes in memory) is read into one bytearray after ``carry`` (the chunk
    is that buffer: no copy of it is made). A decompressing stream is read 4 MiB at a time,
    so that what was read before an error (a damaged gzip member) is not lost with it.
    """
    if isinstance(stream, (io.BufferedReader, io.BytesIO, io.FileIO)):
        left = _bytes_left(stream)
        buffer = _buffer(len(carry) + (size if left is None else min(size, left)))
        buffer[: len(carry)] = carry
        view, got = memoryview(buffer), len(carry)
        try:
            while got < len(buffer):
                part = stream.readinto(view[got:])
                if not part:
                    break
                got += part
        except (OSError, EOFError) as exc:
            raise _ReadFailed(bytes(view[len(carry):got]), exc) from None
        finally:
            view.release()
        del buffer[got:]
        return buffer, got - len(carry)
    parts: list[bytes] = [carry]
    got = 0
    while got < size:
        try:
            part = stream.read(min(4 << 20, size - got))
        except (OSError, EOFError, zlib.error) as exc:
            raise _ReadFailed(b"".join(parts[1:]), exc) from None
        if not part:
            break
        parts.append(part)
        got += len(part)
    return bytearray().join(parts), got  # one copy, cut in place by _head


#: Chunk buffers done with, kept for the next chunk's read (at most :data:`_SPARE_BUFFERS`,
#: of at least half a chunk each: as many as the stages hold at once, so a read never holds
#: more buffers than before). A buffer of 32 MiB and more is above glibc's largest mmap
#: threshold: made afresh, each chunk's buffer is new pages, faulted in one by one as it is
#: read into; a spare one is mapped. They are kept while reads run (:data:`_READERS`, the
#: reads under way in this process) and for :data:`_SPARE_IDLE_SECONDS` after the last one
#: ends, so a job's next file starts with them, and are then freed: an idle process holds
#: none (up to 128 MiB did stay after a read).
_SPARE: list[bytearray] = []
_SPARE_BUFFERS = 4
_SPARE_IDLE_SECONDS = 2.0
_SPARE_LOCK = threading.Lock()
_READERS = 0
_FREEING: threading.Timer | None = None


def _reading(change: int) -> None:
    """One read begins (+1) or ends (-1): the spare buffers are freed once no read has run
    for :data:`_SPARE_IDLE_SECONDS` (a read that begins meanwhile keeps them)."""
    global _READERS, _FREEING
    with _SPARE_LOCK:
        _READERS = max(0, _READERS + change)
        if _FREEING is not None:
            _FREEING.cancel()
            _FREEING = None
        if _READERS == 0 and _SPARE:
            _FREEING = threading.Timer(_SPARE_IDLE_SECONDS, _free_spares)
            _FREEING.daemon = True
            _FREEING.start()


def _free_spares() -> None:
    global _FREEING
    with _SPARE_LOCK:
        if _FREEING is not threading.current_thread():  # called off, or a later one waits
            return
        _FREEING = None
        if _READERS == 0:
            _SPARE.clear()


def _buffer(size: int) -> bytearray:
    """A bytearray of ``size`` bytes, whose contents are to be overwritten: a spare one
    (:func:`_give_back`) where there is one and ``size`` is of a chunk, else a new one."""
    if size < _JSON_CHUNK_BYTES // 2:
        return bytearray(size)
    with _SPARE_LOCK:
        buffer = _SPARE.pop() if _SPARE else None
    if buffer is None:
        return bytearray(size)
    if len(buffer) >= size:
        del buffer[size:]
    else:  # a few bytes more than the last chunk held (what its cut left off)
        buffer.extend(bytes(size - len(buffer)))
    return buffer


def _give_back(data: bytes | bytearray) -> None:
    """Keep a chunk's buffer for the next read, once nothing holds a view of it.

    Only a chunk's own bytearray read by :func:`_read_up_to` is given back, after its
    chunk was checked and its batches made (what they hold was copied out of it by the
    parse). Anything that still holds a view of the buffer (an Arrow buffer, a numpy
    array) forbids its resizing, so a buffer still viewed is never reused: the trial
    resize raises and the buffer is left to be freed."""
    if not isinstance(data, bytearray) or len(data) < _JSON_CHUNK_BYTES // 2:
        return
    try:
        data.append(0)  # BufferError while a view of it is held
    except BufferError:
        return
    del data[-1]
    with _SPARE_LOCK:
        if len(_SPARE) < _SPARE_BUFFERS:
            _SPARE.append(data)


def _memory_size(stream: io.BytesIO) -> int:
    """The size of a stream in memory, without ``getbuffer()`` (which copies a buffer the
    stream shares with the bytes it was made from) and where it stands unchanged."""
    here = stream.tell()
    size = stream.seek(0, io.SEEK_END)
    stream.seek(here)
    return size


def _bytes_left(stream) -> int | None:
    """The bytes left to read in a plain stream (bytes in memory, a regular file), or None
    when its size cannot be told (a pipe: then the buffer is of a whole chunk)."""
    import os
    import stat

    try:
        if isinstance(stream, io.BytesIO):
            size = _memory_size(stream)
        else:
            status = os.fstat(stream.fileno())
            if not stat.S_ISREG(status.st_mode):
                return None
            size = status.st_size
        return max(size - stream.tell(), 0)
    except (OSError, AttributeError, ValueError, io.UnsupportedOperation):
        return None


def _json_chunk(chunk: _Chunk, number: int, source, policy, keep, cache):
    """Check one measured chunk of lines (a generator of Parsed)."""
    dead: list[DeadLetter] = []
    data, nonblank, table = chunk.data, chunk.nonblank, chunk.table
    if chunk.too_long.size:  # refused unread; an empty line keeps the others' numbers
        starts, ends = chunk.starts, chunk.ends
        pieces, at = [], 0
        for i in chunk.too_long.tolist():
            line = data[starts[i]:ends[i]]
            dead.append(DeadLetter(source, f"policy: JSON line{_at(number, i)} longer than "
                                           f"{MAX_LINE_BYTES} bytes",
                                   line[:200].decode("utf-8", "replace")))
            pieces.append(data[at:starts[i]])
            at = ends[i]
        pieces.append(data[at:])
        data = b"".join(pieces)
        nonblank, table = None, _UNTRIED
    yield from _json_parse(data, number, source, policy, keep, cache, dead, nonblank, table)


def _count_newlines(data: bytes | bytearray) -> int:
    """The newlines of ``data``: by numpy (which leaves the GIL to the other stages) a slice
    of :data:`_SCAN_BYTES` at a time (a mask of a whole chunk would be fresh pages each
    time, which cost more than the count)."""
    if len(data) < _SCAN_BYTES:
        return data.count(b"\n")
    codes = np.frombuffer(data, dtype=np.uint8)
    return sum(int(np.count_nonzero(codes[lo:lo + _SCAN_BYTES] == 10))
               for lo in range(0, codes.size, _SCAN_BYTES))


def _has_empty_line_inside(data: bytes | bytearray) -> bool:
    """Whether ``data`` holds two newlines in a row: as 16-bit words at even and at odd
    offsets (numpy, no copy, a slice at a time), faster than a search for the two bytes."""
    if len(data) < _SCAN_BYTES:
        return b"\n\n" in data
    pair, step = 0x0A0A, _SCAN_BYTES // 2
    for offset in (0, 1):
        words = np.frombuffer(data, dtype=np.uint16, count=(len(data) - offset) // 2,
                              offset=offset)
        if any(bool((words[lo:lo + step] == pair).any()) for lo in range(0, words.size, step)):
            return True
    return False


_SCAN_BYTES = 1 << 20


def _lines_are_short(chunk: bytes) -> bool:
    """True when no line of ``chunk`` is longer than :data:`MAX_LINE_BYTES` by a cheap
    proof: every window of ``MAX_LINE_BYTES // 2`` bytes holds a newline, so a line spans at
    most two windows (and the search in each window stops at its first newline). False when
    a window holds none: then a line may be too long, and the lines are measured."""
    step = max(MAX_LINE_BYTES // 2, 1)
    return all(chunk.find(b"\n", lo, lo + step) >= 0 for lo in range(0, len(chunk), step))


def _at(number: int, offset: int) -> str:
    return f" at line {number + offset}" if number else ""


def _json_read(chunk: bytes, unread: tuple[str, ...] = ()) -> pa.Table:
    """The lines of ``chunk`` as the envelope table (without the fields left unread),
    exactly as ``pyarrow.json`` parses them against the whole envelope schema.

    The lines of a file mostly hold the same fields (those of one protocol), and most of the
    envelope's fields (the other protocols' payloads, their nested records) are in none of
    them; parsing a field no line holds still costs a column. So a chunk is first parsed
    against the fields the last chunk held (:func:`_held_fields`), with any other field an
    error: where that succeeds, every other field is proven absent from every line, and is
    added as a null column (what the whole schema gives it). Where it fails (a line holds
    another field, or is malformed), the chunk is parsed against the whole schema, as it
    always was, and the fields it holds are remembered for the next chunk.
    """
    full = _json_schema(unread)
    held = _HELD.get(unread)
    if held is not None and held not in _HELD_MISSES:
        try:
            table = _pyarrow_json(chunk, _json_schema(unread, held), "error")
        except pa.ArrowException:  # the whole schema says what is wrong, if anything
            pass
        else:
            return _with_nulls(table, full)
    table = _pyarrow_json(chunk, full, "ignore")
    now = _held_fields(table)
    if now == held:  # the same fields failed: a field held null, or an unknown field
        if len(_HELD_MISSES) >= 64:
            _HELD_MISSES.clear()
        _HELD_MISSES.add(held)
    _HELD[unread] = now
    return table


#: The fields the last chunk held, by the records left unread; and field sets that failed
#: again after they were learned (their lines hold other fields, null or unknown ones:
#: those chunks are parsed against the whole schema at once).
_HELD: dict[tuple[str, ...], tuple[str, ...]] = {}
_HELD_MISSES: set[tuple[str, ...]] = set()


def _held_fields(table: pa.Table) -> tuple[str, ...]:
    """The top-level fields that hold a value in some row of ``table``."""
    return tuple(name for name, column in zip(table.column_names, table.columns, strict=True)
                 if column.null_count < len(column))


def _pyarrow_json(chunk: bytes, schema: pa.Schema, unexpected: str) -> pa.Table:
    import pyarrow.json as pj

    return pj.read_json(
        pa.BufferReader(chunk),  # zero-copy (a Python file object is read through copies)
        read_options=pj.ReadOptions(use_threads=True, block_size=_JSON_BLOCK_BYTES),
        parse_options=pj.ParseOptions(explicit_schema=schema,
                                      unexpected_field_behavior=unexpected),
    )


def _with_nulls(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with the fields of ``schema`` it lacks as null columns, in schema order."""
    n = table.num_rows
    columns = [table.column(f.name) if f.name in table.column_names
               else pa.chunked_array([pa.nulls(n, f.type)]) for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)


@functools.cache
def _json_schema(unread: tuple[str, ...] = (), only: tuple[str, ...] | None = None
                 ) -> pa.Schema:
    """The envelope as the JSON reader parses it, without the fields left unread (and with
    only the fields ``only`` names, when given)."""
    schema = arrow_schema(json_form=True, nullable=True)
    fields = [f for f in schema if f.name not in unread and (only is None or f.name in only)]
    return pa.schema(fields) if unread or only is not None else schema


def _json_try(chunk, unread: tuple[str, ...], nonblank: int | None = None
              ) -> pa.Table | None:
    """The lines of ``chunk`` parsed whole, or None where that fails (a line malformed, or
    holding other than one JSON object)."""
    try:
        table = _json_read(chunk, unread)
        if nonblank is None:
            nonblank = _nonblank_lines(chunk)
        if table.num_rows != nonblank:  # e.g. two objects on one line
            raise pa.ArrowInvalid("a line holds other than one JSON object")
    except (pa.ArrowInvalid, pa.ArrowException):
        return None
    return table


def _json_parse(chunk, number, source, policy, keep, cache, dead, nonblank=None,
                table=_UNTRIED) -> Iterator[Parsed]:
    """The chunk's lines parsed (``nonblank``: :func:`_nonblank_lines` of ``chunk``, when it
    is known; ``table``: :func:`_json_try` of it, when it was tried)."""
    if not chunk or chunk.isspace():
        if dead:
            yield Parsed({}, dead, len(dead))
        return
    if table is _UNTRIED:
        table = _json_try(chunk, unread_records(policy), nonblank)
    if table is None:
        lines = chunk.count(b"\n") + (0 if chunk.endswith(b"\n") else 1)
        if lines > _JSON_LINE_FALLBACK:  # halve: the failing lines are parsed one by one
            middle = chunk.find(b"\n", len(chunk) // 2)
            if 0 <= middle < len(chunk) - 1:
                first, second = chunk[: middle + 1], chunk[middle + 1:]
                yield from _json_parse(first, number, source, policy, keep, cache, dead)
                second_number = number + first.count(b"\n") if number else 0
                yield from _json_parse(second, second_number, source, policy, keep, cache, [])
                return
        yield from _json_lines_one_by_one(chunk, number, source, policy, keep, cache, dead)
        return
    table, bad = _hex_bits(table, source)
    parsed = parse_table(table, source=source, policy=policy, keep=keep, protocols=cache)
    parsed.dead_letters[:0] = dead + bad
    parsed.records += len(dead) + len(bad)
    yield parsed


def _nonblank_lines(chunk: bytes, newlines: int | None = None) -> int:
    """The number of lines of ``chunk``, less the empty ones.

    The newlines are counted by ``bytes.count`` (a C loop: no array of the chunk's bytes);
    only a chunk that holds an empty line (two newlines in a row: a search, as cheap) has
    its empty lines counted by numpy. A line of spaces also counts; a chunk holding one
    reads fewer rows than this and goes the line-by-line way, which is right either way.
    ``newlines``: ``chunk.count(b"\\n")``, when it is known.
    """
    if newlines is None:
        newlines = _count_newlines(chunk)
    lines = newlines + (0 if chunk.endswith(b"\n") else 1)
    # Each newline right after a newline (or at the start) ends an empty line.
    empty = int(chunk.startswith(b"\n"))
    if _has_empty_line_inside(chunk):
        newline = np.frombuffer(chunk, dtype=np.uint8) == 10
        empty += int(np.count_nonzero(newline[1:] & newline[:-1]))
    return lines - empty


def _json_lines_one_by_one(chunk, number, source, policy, keep, cache, dead):
    records = []
    for i, line in enumerate(chunk.split(b"\n")):
        text = line.strip()
        if not text:
            continue
        if text.count(b"[") + text.count(b"{") > MAX_JSON_DEPTH and \
                _json_depth(text) > MAX_JSON_DEPTH:
            dead.append(DeadLetter(source, f"policy: JSON{_at(number, i)} nested deeper than "
                                           f"{MAX_JSON_DEPTH} levels",
                                   text[:200].decode("utf-8", "replace")))
            continue
        try:
            record = json.loads(text)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
            reason = ("nested too deeply" if isinstance(exc, RecursionError) else str(exc))
            dead.append(DeadLetter(source, f"malformed JSON{_at(number, i)}: {reason}",
                                   text[:200].decode("utf-8", "replace")))
            continue
        if not unhex_bits(record):
            dead.append(DeadLetter(source, "payload field 'bits' is not a hex string", record))
            continue
        records.append(record)
    table, refused = records_to_table(records, source, ignore=unread_records(policy))
    parsed = parse_table(table, source=source, policy=policy, keep=keep, protocols=cache)
    parsed.dead_letters[:0] = dead + refused
    parsed.records += len(dead) + len(refused)
    yield parsed


def unhex_bits(record: Any) -> bool:
    """A decoded JSON record's ``bits`` from hex text to bytes, in place (as strict as the
    columnar path); False when they are not hex."""
    if isinstance(record, dict) and isinstance(record.get("bits"), str):
        if not _HEX_TEXT.fullmatch(record["bits"]):
            return False
        record["bits"] = bytes.fromhex(record["bits"])
    return True


def _json_depth(text: bytes) -> int:
    """The deepest nesting of arrays and objects in one JSON text (brackets in strings do
    not count)."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in text:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


def _hex_bits(table: pa.Table, source: str) -> tuple[pa.Table, list[DeadLetter]]:
    """The ``bits`` column from hex text to bytes (vectorised); rows of bad hex refused."""
    if "bits" not in table.column_names:
        return table, []
    column = table.column("bits").combine_chunks()
    if column.null_count == len(column):
        return table.set_column(table.column_names.index("bits"), "bits",
                                pa.nulls(len(column), pa.binary())), []
    offsets, data = offsets_and_data(column)
    lengths = np.diff(offsets)
    valid = np.asarray(pc.is_valid(column).to_numpy(zero_copy_only=False), dtype=bool)
    nibbles = _HEX[data[offsets[0]:offsets[-1]]]
    bad_byte = nibbles == 255
    bad = valid & (lengths % 2 == 1)
    if bad_byte.any():
        owner = np.repeat(np.arange(len(column)), lengths)
        bad[np.unique(owner[bad_byte])] = True
    dead = []
    if bad.any():
        rows = np.flatnonzero(bad)
        for record in table.take(pa.array(rows)).to_pylist():
            dead.append(DeadLetter(source, "payload field 'bits' is not a hex string", record))
        good = np.flatnonzero(~bad)
        table = table.take(pa.array(good))
        return _hex_bits(table, source)[0], dead
    pairs = nibbles.reshape(-1, 2)
    out = (pairs[:, 0] << 4) | pairs[:, 1]
    new_offsets = ((offsets - offsets[0]) // 2).astype(np.int32)
    validity = column.buffers()[0] if column.null_count else None
    binary = pa.Array.from_buffers(pa.binary(), len(column),
                                   [validity, pa.py_buffer(new_offsets), pa.py_buffer(out)],
                                   null_count=column.null_count, offset=0)
    if column.offset and validity is not None:  # validity bitmaps of sliced arrays
        binary = pa.array(binary.to_pylist(), type=pa.binary())
    return table.set_column(table.column_names.index("bits"), "bits", binary), dead



# -- writing -----------------------------------------------------------------------------------
_NEEDS_ESCAPE = r'[\x00-\x1f"\\]'
_WRITE_ROWS = 1 << 16


def _json_values(array: pa.Array, path: tuple[str, ...]) -> pa.Array:
    """JSON text of each value of the field at ``path`` (null where the value is null)."""
    kind = field_kind(path)
    if kind == "record":
        parts = []
        for i, child in enumerate(array.type):
            values = _json_values(pc.struct_field(array, [i]), (*path, child.name))
            parts.append(pc.binary_join_element_wise(f'"{child.name}":', values, ""))
        text = pc.binary_join_element_wise(*parts, ",", null_handling="skip")
        return pc.if_else(pc.is_valid(array),
                          pc.binary_join_element_wise("{", text, "}", ""), None)
    if kind == "string":
        if pc.any(pc.match_substring_regex(array, _NEEDS_ESCAPE)).as_py():
            return pa.array([None if v is None else json.dumps(v) for v in array.to_pylist()],
                            type=pa.string())
        return pc.binary_join_element_wise('"', array, '"', "")
    if kind == "bytes":
        if array.offset:  # a slice: rebase it, so that its validity bitmap lines up
            array = pa.concat_arrays([array])
        offsets, data = offsets_and_data(array)
        digits = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
        body = data[offsets[0]:offsets[-1]]
        hexed = np.empty(body.size * 2, dtype=np.uint8)
        hexed[0::2], hexed[1::2] = digits[body >> 4], digits[body & 15]
        text = pa.Array.from_buffers(pa.string(), len(array), [
            array.buffers()[0] if array.null_count else None,
            pa.py_buffer(((offsets - offsets[0]) * 2).astype(np.int32)), pa.py_buffer(hexed)])
        return pc.binary_join_element_wise('"', text, '"', "")
    return pc.cast(array, pa.string())


def json_lines(table: pa.Table) -> bytes:
    """JSON lines of an envelope table: null fields left out, ``bits`` as hex (vectorised)."""
    if table.num_rows == 0:
        return b""
    parts = []
    for name in table.column_names:
        array = table.column(name).combine_chunks()
        if array.null_count == len(array):
            continue
        values = _json_values(array, (name,))
        parts.append(pc.binary_join_element_wise(f'"{name}":', values, ""))
    body = pc.binary_join_element_wise(*parts, ",", null_handling="skip")
    lines = pc.binary_join_element_wise("{", body, "}\n", "")
    offsets, data = offsets_and_data(lines)
    return data[offsets[0]:offsets[-1]].tobytes()




def write_table(stream: IO[bytes], table: pa.Table) -> None:
    """An envelope table as JSON lines, a slice of rows at a time (bounded memory)."""
    for lo in range(0, table.num_rows, _WRITE_ROWS):
        stream.write(json_lines(table.slice(lo, _WRITE_ROWS)))


def write_records(stream: IO[bytes], records: Iterable[dict]) -> None:
    """Records given as Python dicts as JSON lines (bytes as hex)."""
    for record in records:
        stream.write((json.dumps(json_safe(record), separators=(",", ":")) + "\n").encode(
            "utf-8"))
