"""Avro report files: container framing (header, block index, resync, columnar writes) and
the report reader and writers.

An Avro container is a header (magic ``Obj\\x01``, a metadata map holding the writer's
schema and codec, a 16-byte sync marker) and blocks, each ``count`` (varint), ``size``
(varint), ``size`` bytes of (compressed) records and the sync marker again. This module
reads that framing itself, so that

* a file is split into byte ranges that workers read separately (a block belongs to the
  range its first byte lies in);
* the header plus any run of blocks is itself a valid container, which a columnar decoder
  (polars) reads in one call;
* a damaged block is found and skipped: the reader resynchronises at the next sync marker,
  and only that block is lost (its record count is reported when its header is readable);
* a block's record count is checked against its data: the columnar decode appends a
  :class:`Sentinel` record to every block and checks that it comes back (one decode checks
  every count; :func:`surplus_bytes` measures a failing block, and checks the blocks of the
  record-by-record path). A block whose data holds bytes past its ``count`` records (a
  count damaged, or written to hide records from readers that trust it) is refused whole,
  as a :class:`Damage` ``"Avro block holds N bytes past its M records"`` counting the
  ``M`` records it claims:
  its count is proven wrong, so which of its records are genuine is unknown, and a block is
  kept whole or not at all. A block that claims more records than its data holds fails to
  decode and is refused whole the same way (by the decoder). An empty block (count 0) must
  hold no data once uncompressed; one that does is damage counting 0 records.

:func:`encode_container` writes a table of envelopes as a container, vectorised with numpy
over rows (no per-record Python): each field's bytes are laid out as whole columns.

Reports are read by :func:`read_chunks` (one byte range): runs of container blocks decoded
by polars into Arrow columns. A run polars cannot decode is retried block by block, then
with fastavro record by record (a foreign schema is resolved that way); a block nothing can
decode is one dead letter with its record count, and reading goes on at the next block.
:func:`write_records` writes a few records given as dicts (fastavro).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import zlib
from collections.abc import Iterator
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ldpflow.wire import reading
from ldpflow.wire.buffers import offsets_and_data
from ldpflow.wire.envelope import field_kind
from ldpflow.wire.parse import Parsed, parse_table, records_to_table
from ldpflow.wire.reading import CHUNK_BYTES, CHUNK_ROWS, unread_records

__all__ = ["MAGIC", "Header", "Block", "Damage", "read_header", "iter_blocks",
           "ContainerWriter", "encode_container", "to_null", "plausible_count",
           "surplus_bytes", "Sentinel", "sentinel", "with_sentinels", "sentinel_rows",
           "block_surplus", "count_damage", "CODECS", "read_chunks", "write_records"]

MAGIC = b"Obj\x01"
CODECS = ("null", "deflate", "snappy")
_SYNC_SIZE = 16
_READ = 1 << 20
_MAX_HEADER_BYTES = 16 << 20


class AvroFormatError(ValueError):
    """The bytes are not an Avro container (or its header is damaged)."""


@dataclasses.dataclass(frozen=True)
class Header:
    raw: bytes  # the header's bytes, to prefix a run of blocks with
    schema: dict
    codec: str
    sync: bytes

    @property
    def end(self) -> int:
        return len(self.raw)


@dataclasses.dataclass(frozen=True)
class Block:
    offset: int  # of the block's first byte in the file
    count: int  # records
    raw: bytes  # the whole block: count, size, data and sync marker


@dataclasses.dataclass(frozen=True)
class Damage:
    offset: int  # where the unreadable bytes begin
    skipped: int  # bytes skipped to the next sync marker (or the end)
    count: int | None  # the records the damaged block claimed, when its header was readable
    reason: str


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint (Avro long) at ``pos``: ``(value, next position)``."""
    shift = result = 0
    while True:
        if pos >= len(buf):
            raise EOFError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 64 bits")
    return (result >> 1) ^ -(result & 1), pos


def read_header(stream: IO[bytes]) -> Header:
    """The container header at the stream's start (the stream is left after it)."""
    buf = stream.read(_READ)
    while True:
        try:
            return _parse_header(buf)
        except EOFError:
            if len(buf) >= _MAX_HEADER_BYTES:
                raise AvroFormatError(f"Avro header longer than {_MAX_HEADER_BYTES} bytes"
                                      ) from None
            more = stream.read(len(buf))  # doubling: parses stay linear overall
            if not more:
                raise AvroFormatError("truncated Avro header") from None
            buf += more
        except (ValueError, UnicodeDecodeError) as exc:  # AvroFormatError is a ValueError
            if isinstance(exc, AvroFormatError):
                raise
            raise AvroFormatError(f"damaged Avro header: {exc}") from None


def _parse_header(buf: bytes) -> Header:
    if buf[:4] != MAGIC:
        raise AvroFormatError("not an Avro container file (no magic bytes)")
    pos = 4
    meta: dict[str, bytes] = {}
    while True:
        count, pos = _read_varint(buf, pos)
        if count == 0:
            break
        if count < 0:
            _, pos = _read_varint(buf, pos)  # block size in bytes
            count = -count
        if count > len(buf):  # each entry takes bytes: a damaged count
            raise EOFError
        for _ in range(count):
            size, pos = _read_varint(buf, pos)
            if size < 0:
                raise AvroFormatError(f"damaged Avro header: negative key length {size}")
            if pos + size > len(buf):
                raise EOFError
            key = buf[pos:pos + size].decode("utf-8", "replace")
            pos += size
            size, pos = _read_varint(buf, pos)
            if size < 0:
                raise AvroFormatError(f"damaged Avro header: negative value length {size}")
            if pos + size > len(buf):
                raise EOFError
            meta[key] = buf[pos:pos + size]
            pos += size
    if pos + _SYNC_SIZE > len(buf):
        raise EOFError
    sync = buf[pos:pos + _SYNC_SIZE]
    try:
        schema = json.loads(meta["avro.schema"].decode("utf-8"))
    except (KeyError, ValueError) as exc:
        raise AvroFormatError(f"Avro header has no readable schema: {exc}") from None
    codec = meta.get("avro.codec", b"null").decode("utf-8", "replace")
    return Header(buf[:pos + _SYNC_SIZE], schema, codec, sync)


class _Window:
    """Buffered forward reading of a stream from a position, with look-ahead."""

    def __init__(self, stream: IO[bytes], position: int):
        self.stream = stream
        self.base = position  # file offset of buf[0]
        self.buf = bytearray()
        self.eof = False
        try:
            stream.seek(position)
        except (OSError, io.UnsupportedOperation):
            self._skip_to(position)

    def _skip_to(self, position: int) -> None:  # streams that cannot seek
        try:
            at = self.stream.tell()
        except (OSError, io.UnsupportedOperation):
            at = 0
        while at < position:
            chunk = self.stream.read(min(_READ, position - at))
            if not chunk:
                break
            at += len(chunk)

    def need(self, size: int) -> bool:
        """At least ``size`` bytes buffered (False at the end of the stream)."""
        while len(self.buf) < size and not self.eof:
            chunk = self.stream.read(max(_READ, min(size - len(self.buf), _MAX_BLOCK_BYTES)))
            if not chunk:
                self.eof = True
            self.buf += chunk
        return len(self.buf) >= size

    def consume(self, size: int) -> None:
        del self.buf[:size]
        self.base += size

    def skip_to_marker(self, marker: bytes) -> bool:
        """Drop bytes up to and including the next ``marker`` (reading on, keeping at most a
        buffer's worth in memory); False when the stream ends first (all dropped)."""
        while True:
            found = self.buf.find(marker)
            if found >= 0:
                self.consume(found + len(marker))
                return True
            keep = len(marker) - 1  # a marker may straddle the next read
            if len(self.buf) > keep:
                self.consume(len(self.buf) - keep)
            if self.eof or not self.need(len(self.buf) + _READ):
                if self.buf.find(marker) < 0:
                    self.consume(len(self.buf))
                    return False


#: The largest block a reader accepts: a damaged size field claims anything.
_MAX_BLOCK_BYTES = 1 << 28
#: The data a block that ldpflow writes holds, about (rows are never split).
BLOCK_BYTES = 16 << 20
#: The most records a block may claim per byte of its data (a count beyond it is damage).
_MAX_RECORDS_PER_BYTE = 256


def plausible_count(count: int | None, size: int) -> int | None:
    """A damaged block's record count when its header is believable, else None."""
    if count is None or count < 0 or count > max(size, 1) * _MAX_RECORDS_PER_BYTE:
        return None
    return count


def iter_blocks(stream: IO[bytes], header: Header, start: int = 0, end: int | None = None
                ) -> Iterator[Block | Damage]:
    """The blocks that begin in ``[start, end)`` (all from ``start`` when ``end`` is None),
    and a :class:`Damage` for every run of unreadable bytes, after which the reading goes on
    at the next sync marker.

    A block belongs to the range of the intact sync marker (or header) before it, which is
    where the next range's reader looks for its first block: so after damage whose own marker
    is broken, this reader goes on past ``end`` to the next intact marker, and no block is
    read by two ranges or by none.
    """
    sync = header.sync
    if start <= header.end:
        window = _Window(stream, header.end)
    else:  # the first block after a sync marker that ends at or after start
        window = _Window(stream, start - _SYNC_SIZE)
        if not window.skip_to_marker(sync):
            return
    anchored = True  # the current position follows an intact sync marker (or the header)
    while end is None or window.base < end or not anchored:
        if not window.need(1):
            return
        offset = window.base
        problem, count, size, body = None, None, 0, 0
        try:
            window.need(20)
            count, pos = _read_varint(window.buf, 0)
            size, pos = _read_varint(window.buf, pos)
            if count < 0 or size < 0:
                raise ValueError(f"negative block count {count} or size {size}")
            if size > _MAX_BLOCK_BYTES:
                raise ValueError(f"block claims {size} bytes, more than {_MAX_BLOCK_BYTES}")
            body = pos + size
            if not window.need(body + _SYNC_SIZE):
                raise EOFError(f"truncated block: {size} bytes claimed")
            if window.buf[body:body + _SYNC_SIZE] != sync:
                raise ValueError("block does not end with the file's sync marker")
        except (EOFError, ValueError) as exc:
            problem = str(exc)
        if problem is None:
            raw = bytes(window.buf[:body + _SYNC_SIZE])
            window.consume(body + _SYNC_SIZE)
            anchored = True
            # An empty block (legal) must hold no data; the counts of the others are
            # checked where they are decoded (:func:`with_sentinels`).
            problem = None if count else _count_problem(header, count, raw[pos:body])
            if problem is not None:
                yield Damage(offset, len(raw), plausible_count(count, size), problem)
            elif count:
                yield Block(offset, count, raw)
            continue
        if body and _block_at(window, body + _SYNC_SIZE, sync):
            # Only the block's own marker is broken: the next block follows it, and it is
            # this range's (its reader cannot find it from the broken marker).
            window.consume(body + _SYNC_SIZE)
            anchored = False
            yield Damage(offset, body + _SYNC_SIZE, plausible_count(count, size), problem)
            continue
        before = window.base
        window.consume(1)  # resync: the next sync marker ends the damaged block
        window.skip_to_marker(sync)
        anchored = True
        yield Damage(offset, window.base - before, plausible_count(count, size), problem)


def _records(count: int) -> str:
    return f"{count} record" if count == 1 else f"{count} records"


def _uncompressed(codec: str, data: bytes) -> bytes | None:
    """A block's data uncompressed (None: it does not decompress, or the codec is unknown)."""
    if codec == "null":
        return data
    try:
        if codec == "deflate":
            return zlib.decompress(data, -15)
        if codec == "snappy":
            import cramjam

            return bytes(cramjam.snappy.decompress_raw(data[:-4]))
    except Exception:  # noqa: BLE001 - zlib and cramjam raise their own error types
        return None
    return None


def _count_problem(header: Header, count: int, data: bytes) -> str | None:
    """Why a block's ``count`` does not describe its (compressed) ``data``, or None."""
    if header.codec not in CODECS:  # not decoded by ldpflow either: nothing to check
        return None
    if not data:  # nothing at all: an empty block of any codec
        return None if count == 0 else f"Avro block of {_records(count)} holds no data"
    payload = _uncompressed(header.codec, data)
    if payload is None:
        if count:
            return None  # the decoder refuses it, with its own reason
        return f"Avro block of 0 records holds {len(data)} bytes that do not decompress"
    surplus = surplus_bytes(header, count, payload)
    if surplus:
        return f"Avro block holds {surplus} bytes past its {_records(count)}"
    return None


def _block_bytes(count: int, data: bytes, sync: bytes) -> bytes:
    return b"".join(_block_parts(count, data, sync))


def _block_parts(count: int, data, sync: bytes, extra: bytes = b"") -> list:
    """A block's bytes as parts to join (``data`` may be a memoryview: nothing is copied
    until the join), with ``extra`` bytes after ``data`` counted in its size."""
    return [_varint(count) + _varint(len(data) + len(extra)), data, extra, sync]


#: Whether polars reads a writer's schema, by the null-codec header (a few files at a time).
_POLARS_READS: dict[bytes, bool] = {}


def _polars_reads(null_header: bytes) -> bool:
    known = _POLARS_READS.get(null_header)
    if known is None:
        import polars as pl

        try:
            pl.read_avro(io.BytesIO(null_header))
            known = True
        except BaseException as exc:  # noqa: BLE001 - polars panics on schemas it lacks
            if isinstance(exc, (KeyboardInterrupt, SystemExit, MemoryError)):
                raise
            known = False
        if len(_POLARS_READS) >= 64:
            _POLARS_READS.clear()
        _POLARS_READS[null_header] = known
    return known


def _probe_column(schema: Any) -> list[str] | None:
    """One top-level field to decode (a number if there is one: the cheapest to build)."""
    fields = schema.get("fields") if isinstance(schema, dict) else None
    if not isinstance(fields, list) or not fields:
        return None

    def numeric(avro_type: Any) -> bool:
        if isinstance(avro_type, list):
            branches = [t for t in avro_type if t != "null"]
            return len(branches) == 1 and numeric(branches[0])
        return avro_type in ("boolean", "int", "long", "float", "double")

    names = [f["name"] for f in fields if isinstance(f, dict) and isinstance(f.get("name"), str)]
    if len(names) != len(fields):
        return None
    return [next((f["name"] for f in fields if numeric(f.get("type"))), names[0])]


def surplus_bytes(header: Header, count: int, data: bytes) -> int:
    """The bytes of a block's uncompressed ``data`` left over after its ``count`` records.

    0 when the records end where the data ends (as every writer writes them), and when
    ``count`` records do not fit in ``data`` or do not decode (the decoder refuses such a
    block whole, with its own reason); more is a block whose count understates its records.

    The common case costs one columnar decode of one field: ``count`` records are decoded
    from the data less its last byte, which fails exactly when they need that byte, i.e.
    when nothing is left over. When they do decode, the records are walked with fastavro,
    which tells where they end (or, should fastavro not decode them, the shortest prefix of
    the data that polars decodes them from is searched for by bisection). For schemas
    polars does not read, the records are walked with fastavro from the start.
    """
    if count == 0 or not data:
        return len(data)
    null_header = header.raw if header.codec == "null" else \
        _header(header.schema, "null", header.sync)
    if _polars_reads(null_header):
        import polars as pl

        columns = _probe_column(header.schema)

        def decodes(size: int) -> bool | None:
            """``count`` records decode from ``data[:size]`` (None: polars fails otherwise)."""
            probe = null_header + _block_bytes(count, data[:size], header.sync)
            try:
                return pl.read_avro(io.BytesIO(probe), columns=columns).height == count
            except OSError:  # "failed to fill whole buffer": the records need more bytes
                return False
            except BaseException as exc:  # noqa: BLE001 - polars raises (and panics) many types
                if isinstance(exc, (KeyboardInterrupt, SystemExit, MemoryError)):
                    raise
                return None

        whole = decodes(len(data) - 1)
        if whole is False:
            return 0
        if whole:  # bytes are left over: fastavro tells where the records end, else the
            # shortest prefix they decode from does (polars may panic on short prefixes)
            walked = _walked_surplus(null_header, count, data, header.sync)
            if walked:
                return walked
            low, high = 0, len(data) - 1
            while low < high:
                middle = (low + high) // 2
                if decodes(middle):
                    high = middle
                else:
                    low = middle + 1
            return len(data) - low
    return _walked_surplus(null_header, count, data, header.sync)


def _walked_surplus(null_header: bytes, count: int, data: bytes, sync: bytes) -> int:
    """:func:`surplus_bytes` by fastavro: decode the records, then see where they end."""
    import fastavro

    try:
        block = next(iter(fastavro.block_reader(
            io.BytesIO(null_header + _block_bytes(count, data, sync)))))
        decoded = sum(1 for _ in block)
        end = block.bytes_.tell()
    except Exception:  # noqa: BLE001 - fastavro raises many types on corrupt input
        return 0
    return len(data) - end if decoded == count else 0


def _block_at(window: _Window, at: int, sync: bytes) -> bool:
    """A whole block (or the end of the file) begins ``at`` bytes into the window."""
    if not window.need(at + 1):
        return len(window.buf) == at
    try:
        window.need(at + 20)
        count, pos = _read_varint(window.buf, at)
        size, pos = _read_varint(window.buf, pos)
    except (EOFError, ValueError):
        return False
    if count < 0 or not 0 <= size <= _MAX_BLOCK_BYTES or \
            not window.need(pos + size + _SYNC_SIZE):
        return False
    return window.buf[pos + size:pos + size + _SYNC_SIZE] == sync


# -- writing -----------------------------------------------------------------------------------
def _varint(value: int) -> bytes:
    """One Avro long as its zigzag varint bytes (a block's count and size, a header's
    lengths: the vectorised :func:`_zigzag_varints` costs more than this for one value)."""
    if not -(1 << 63) <= value < 1 << 63:
        raise OverflowError(f"{value} does not fit an Avro long")
    z = ((value << 1) ^ (value >> 63)) & 0xFFFF_FFFF_FFFF_FFFF
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _zigzag_varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Avro longs: a (n, 10) uint8 matrix of zigzag varint bytes and each row's length."""
    v = values.astype(np.int64)
    z = (v.view(np.uint64) << np.uint64(1)) ^ (v >> np.int64(63)).view(np.uint64)
    out = np.zeros((v.size, 10), dtype=np.uint8)
    lengths = np.ones(v.size, dtype=np.int64)
    rest = z.copy()
    for i in range(10):
        byte = (rest & np.uint64(0x7F)).astype(np.uint8)
        rest >>= np.uint64(7)
        more = rest != 0
        out[:, i] = byte | (more.astype(np.uint8) << 7)
        lengths += more
        if not more.any():
            break
    return out, lengths


class _Rows:
    """The rows of an encoded block under construction: segments appended field by field."""

    def __init__(self, n: int):
        self.n = n
        self.parts: list[tuple[str, Any]] = []
        self.lengths = np.zeros(n, dtype=np.int64)

    def matrix(self, mat: np.ndarray, lengths: np.ndarray) -> None:
        self.parts.append(("matrix", (mat, lengths, self.lengths.copy())))
        self.lengths += lengths

    def fixed(self, mat: np.ndarray) -> None:
        self.matrix(mat, np.full(self.n, mat.shape[1], dtype=np.int64))

    def varbytes(self, offsets: np.ndarray, data: np.ndarray, present: np.ndarray) -> None:
        lengths = np.where(present, np.diff(offsets), 0)
        self.parts.append(("bytes", (offsets, data, lengths, self.lengths.copy())))
        self.lengths += lengths

    def assemble(self) -> bytes:
        starts = np.zeros(self.n + 1, dtype=np.int64)
        np.cumsum(self.lengths, out=starts[1:])
        out = np.zeros(int(starts[-1]), dtype=np.uint8)
        row = starts[:-1]
        for kind, part in self.parts:
            if kind == "matrix":
                mat, lengths, at = part
                for k in range(mat.shape[1]):
                    rows = np.flatnonzero(lengths > k)
                    if rows.size == 0:
                        break
                    out[row[rows] + at[rows] + k] = mat[rows, k]
            else:
                offsets, data, lengths, at = part
                total = int(lengths.sum())
                if total == 0:
                    continue
                src_start = offsets[:-1].astype(np.int64)
                delta = row + at - src_start
                rows = np.flatnonzero(lengths)
                src = np.repeat(src_start[rows] - np.concatenate(
                    [[0], np.cumsum(lengths[rows])[:-1]]), lengths[rows]) + np.arange(total)
                out[src + np.repeat(delta[rows], lengths[rows])] = data[src]
        return out.tobytes()


def _encode_value(rows: _Rows, avro_type: Any, array: pa.Array, mask: np.ndarray) -> None:
    """Append ``array``'s values (``mask``: rows that hold a value) as ``avro_type``."""
    if isinstance(avro_type, list):  # ["null", T]
        present = mask & _valid(array)
        branch = np.where(present, 2, 0).astype(np.uint8).reshape(-1, 1)  # zigzag(1 | 0)
        (inner,) = [t for t in avro_type if t != "null"]
        rows.matrix(branch, np.where(mask, 1, 0).astype(np.int64))
        _encode_value(rows, inner, array, present)
        return
    if isinstance(avro_type, dict):
        if avro_type["type"] == "record":
            for field in avro_type["fields"]:
                child = (pc.struct_field(array, [field["name"]]) if array is not None
                         else None)
                _encode_value(rows, field["type"], child, mask)
            return
        _encode_value(rows, avro_type["type"], array, mask)
        return
    if array is None:  # a null union branch or record: nothing to write
        return
    if avro_type in ("long", "int"):
        raw = array.fill_null(0).to_numpy(zero_copy_only=False)
        values = raw.astype(np.int64) if raw.dtype != np.uint64 else raw.view(np.int64)
        mat, lengths = _zigzag_varints(values)
        rows.matrix(mat, np.where(mask, lengths, 0))
    elif avro_type == "double":
        values = np.asarray(array.fill_null(0).to_numpy(zero_copy_only=False), dtype="<f8")
        rows.matrix(values.view(np.uint8).reshape(-1, 8),
                    np.where(mask, 8, 0).astype(np.int64))
    elif avro_type in ("string", "bytes"):
        if pa.types.is_fixed_size_binary(array.type):
            array = array.cast(pa.binary())
        offsets, data = offsets_and_data(array)
        lengths = np.where(mask, np.diff(offsets), 0)
        mat, vlen = _zigzag_varints(lengths)
        rows.matrix(mat, np.where(mask, vlen, 0))
        rows.varbytes(offsets, data, mask)
    elif avro_type == "boolean":
        values = np.asarray(array.fill_null(False).to_numpy(zero_copy_only=False), dtype=np.uint8)
        rows.matrix(values.reshape(-1, 1), np.where(mask, 1, 0).astype(np.int64))
    else:
        raise ValueError(f"cannot encode Avro type {avro_type!r}")


def _valid(array: pa.Array | None) -> np.ndarray | bool:
    if array is None:
        return False
    if array.null_count == 0:
        return True
    return np.asarray(pc.is_valid(array).to_numpy(zero_copy_only=False), dtype=bool)


def _header(schema: dict, codec: str, sync: bytes) -> bytes:
    meta = {"avro.schema": json.dumps(schema, separators=(",", ":")).encode("utf-8"),
            "avro.codec": codec.encode("utf-8")}
    out = bytearray(MAGIC)
    out += _varint(len(meta))
    for key, value in meta.items():
        out += _varint(len(key)) + key.encode("utf-8") + _varint(len(value)) + value
    out += _varint(0) + sync
    return bytes(out)


class ContainerWriter:
    """Writes an Avro container to a stream a table at a time: the header with the first
    table, then blocks of ``block_rows`` rows (encoded a block at a time, so memory stays
    that of one block). Columns absent from a table are written as null (their fields must
    be nullable); ``sync`` defaults to random bytes (fix it for byte-identical output)."""

    def __init__(self, stream: IO[bytes], schema: dict, codec: str = "snappy",
                 block_rows: int = 1 << 16, sync: bytes | None = None, level: int = 6):
        if codec not in CODECS:
            raise ValueError(f"codec must be one of {', '.join(CODECS)}, got {codec!r}")
        self._stream, self._schema, self._codec = stream, schema, codec
        self._block_rows, self._level = block_rows, level
        self._sync = os.urandom(_SYNC_SIZE) if sync is None else sync
        self._started = False

    def _start(self) -> None:
        if not self._started:
            self._stream.write(_header(self._schema, self._codec, self._sync))
            self._started = True

    def write(self, table: pa.Table) -> None:
        for field in self._schema["fields"]:
            nullable = isinstance(field["type"], list) and "null" in field["type"]
            if field["name"] not in table.column_names and not nullable:
                raise ValueError(f"field {field['name']!r} is not nullable and the table has "
                                 "no such column")
        self._start()
        # At most block_rows rows and about BLOCK_BYTES of data per block, so that wide
        # reports are encoded (and later decoded) in bounded memory.
        row_bytes = max(1, table.nbytes // max(table.num_rows, 1))
        step = max(1, min(self._block_rows, BLOCK_BYTES // row_bytes))
        for lo in range(0, table.num_rows, step):
            part = table.slice(lo, step)
            data = _encode_rows(part, self._schema)
            data = _compress(data, self._codec, self._level)
            self._stream.write(_varint(part.num_rows) + _varint(len(data)) + data
                               + self._sync)

    def close(self) -> None:
        self._start()  # an empty file is still a valid container


def _compress(data: bytes, codec: str, level: int = 6) -> bytes:
    if codec == "deflate":
        compressor = zlib.compressobj(level, zlib.DEFLATED, -15)
        return compressor.compress(data) + compressor.flush()
    if codec == "snappy":  # Avro's snappy: the raw snappy block, then CRC32 (big-endian)
        import cramjam

        return bytes(cramjam.snappy.compress_raw(data)) + zlib.crc32(data).to_bytes(4, "big")
    return data


def to_null(header: Header, blocks: list[Block]) -> tuple[Header, list[Block | Damage]]:
    """A container's blocks uncompressed: the header of the same container with the null
    codec, and each block uncompressed (``snappy``: checked against its CRC32), or a
    :class:`Damage` where the data does not decompress or its checksum does not match."""
    if header.codec == "null":
        return header, list(blocks)
    out: list[Block | Damage] = []
    for block in blocks:
        count, pos = _read_varint(block.raw, 0)
        size, pos = _read_varint(block.raw, pos)
        payload = block.raw[pos:pos + size]
        data = _uncompressed(header.codec, payload)
        if data is not None and header.codec == "snappy" and \
                zlib.crc32(data).to_bytes(4, "big") != payload[-4:]:
            data = None
        if data is None:
            reason = ("snappy block fails its CRC32 checksum" if header.codec == "snappy"
                      else f"{header.codec} block does not decompress")
            out.append(Damage(block.offset, len(block.raw), count, reason))
            continue
        out.append(Block(block.offset, count, _block_bytes(count, data, header.sync)))
    null = Header(_header(header.schema, "null", header.sync), header.schema, "null",
                  header.sync)
    return null, out


@dataclasses.dataclass(frozen=True)
class Sentinel:
    """A record appended to every block of a decode, to prove each block's count.

    Its check field (a top-level string) is ``nonce``, a random value of this process, and
    every other field is null, zero or empty; a block of ``count`` records is decoded as
    ``count + 1`` with the sentinel's bytes after its data. Where the count is right, the
    extra record is the sentinel; where the block holds bytes past its ``count`` records (its
    count understates them), the extra record is decoded from those bytes instead, which do
    not hold the nonce. So one columnar decode checks every count, at the cost of a record
    per block.
    """

    encoded: bytes
    nonce: str
    column: str  # the top-level string field whose value is checked


def sentinel(schema: Any, columns: list[str]) -> Sentinel | None:
    """The sentinel of a writer's schema whose check field is among the decoded
    ``columns``: a top-level string field (nullable or not), ``oracle`` where it is one
    (None when no decoded field is a string: the slow check then)."""
    import secrets

    import fastavro

    fields = schema.get("fields") if isinstance(schema, dict) else None
    if not isinstance(fields, list):
        return None

    def stringy(avro_type: Any) -> bool:
        return avro_type == "string" or (isinstance(avro_type, list) and "string" in avro_type)

    strings = [f["name"] for f in fields if isinstance(f, dict) and stringy(f.get("type"))]
    column = next((c for c in ("oracle", *strings) if c in strings and c in columns), None)
    if column is None:
        return None
    nonce = f"ldpflow-sentinel-{secrets.token_hex(16)}"
    try:
        parsed = fastavro.parse_schema(schema)
        record = {f["name"]: _sentinel_value(f["type"]) for f in parsed["fields"]}
        record[column] = nonce  # only here: no other field can pass for the check column
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed, record)
    except Exception:  # noqa: BLE001 - a schema fastavro cannot encode: the slow check then
        return None
    return Sentinel(buffer.getvalue(), nonce, column)


def _sentinel_value(avro_type: Any) -> Any:
    """The neutral value of a type: null where a union allows it, else zero or empty."""
    if isinstance(avro_type, list):  # a union: null where it may be, else its first branch
        return None if "null" in avro_type else _sentinel_value(avro_type[0])
    if isinstance(avro_type, dict):
        kind = avro_type.get("type")
        if kind == "record":
            return {f["name"]: _sentinel_value(f["type"]) for f in avro_type["fields"]}
        if kind == "enum":
            return avro_type["symbols"][0]
        if kind == "array":
            return []
        if kind == "map":
            return {}
        if kind == "fixed":
            return bytes(avro_type["size"])
        return _sentinel_value(kind)
    return {"null": None, "boolean": False, "int": 0, "long": 0, "float": 0.0, "double": 0.0,
            "bytes": b"", "string": ""}.get(avro_type)


def with_sentinels(blocks: list[Block], mark: Sentinel, sync: bytes, prefix: bytes = b""
                   ) -> bytes:
    """Null-codec blocks, each with the sentinel after its records (count + 1), after
    ``prefix`` (a header: the container is built with one copy of the blocks' data)."""
    parts = [prefix]
    for block in blocks:
        count, pos = _read_varint(block.raw, 0)
        size, pos = _read_varint(block.raw, pos)
        parts += _block_parts(count + 1, memoryview(block.raw)[pos:pos + size], sync,
                              mark.encoded)
    return b"".join(parts)


def sentinel_rows(blocks: list[Block]) -> np.ndarray:
    """The row of each block's sentinel in a decode of :func:`with_sentinels`."""
    return np.cumsum(np.array([b.count + 1 for b in blocks], dtype=np.int64)) - 1


def block_surplus(header: Header, block: Block) -> int:
    """:func:`surplus_bytes` of a block of a null-codec container."""
    count, pos = _read_varint(block.raw, 0)
    size, pos = _read_varint(block.raw, pos)
    return surplus_bytes(header, count, block.raw[pos:pos + size])


def count_damage(header: Header, block: Block, surplus: int | None = None) -> Damage:
    """The :class:`Damage` of a block of a null-codec container whose count is proven wrong
    (refused whole)."""
    count = block.count
    surplus = block_surplus(header, block) if surplus is None else surplus
    what = (f"Avro block holds {surplus} bytes past its {_records(count)}" if surplus else
            f"Avro block's {_records(count)} do not match its data")
    return Damage(block.offset, len(block.raw), count, what)


def encode_container(table: pa.Table, schema: dict, codec: str = "snappy",
                     block_rows: int = 1 << 16, sync: bytes | None = None,
                     level: int = 6) -> bytes:
    """A table's rows as one Avro container of ``schema`` (:class:`ContainerWriter`)."""
    buffer = io.BytesIO()
    writer = ContainerWriter(buffer, schema, codec, block_rows, sync, level)
    writer.write(table)
    writer.close()
    return buffer.getvalue()


def _encode_rows(table: pa.Table, schema: dict) -> bytes:
    n = table.num_rows
    rows = _Rows(n)
    for field in schema["fields"]:
        name = field["name"]
        array = table.column(name).combine_chunks() if name in table.column_names else None
        if array is not None and pa.types.is_dictionary(array.type):
            array = array.dictionary_decode()
        _encode_value(rows, field["type"], array, np.ones(n, dtype=bool))
    return rows.assemble()


# -- reading reports ---------------------------------------------------------------------------
_AVRO_KIND = {"string": "string", "long": "int", "int": "int", "double": "float",
              "float": "float", "bytes": "bytes"}


def _avro_projection(schema: dict, fields: list[str], optional: set[str]):
    """Columns to decode, and the required fields the writer's schema proves present."""
    top = {f["name"]: f["type"] for f in schema.get("fields", [])} if isinstance(schema, dict) \
        else {}
    columns, known_present = [], []
    for name in fields:
        if name not in top:
            continue
        if name in optional and isinstance(top[name], str) and \
                _AVRO_KIND.get(top[name]) == field_kind((name,)):
            known_present.append(name)
            continue
        columns.append(name)
    return columns, known_present


def read_chunks(stream, source, start, end, policy, keep):
    try:
        header = read_header(stream)
    except (AvroFormatError, OSError) as exc:
        if start == 0:
            yield reading.lost_file(source, stream, f"unreadable Avro file: {exc}")
        return
    fields, optional = reading.needed_fields(keep, policy)
    columns, known_present = _avro_projection(header.schema, fields, optional)
    cache: dict = {}
    pending: list[Block] = []
    rows = size = 0
    # Damage right after the header, with no intact block after it, is the signature of a
    # damaged header (a flipped bit in its metadata or its sync marker): the counts the
    # "blocks" claim are then garbage, so the file is lost whole, of unknown count.
    held: list[Damage] | None = [] if start == 0 else None
    for item in iter_blocks(stream, header, start, end):
        if isinstance(item, Damage):
            if held is not None and (held or item.offset == header.end):
                held.append(item)
                continue
            yield from _avro_decode(header, pending, columns, known_present, source, policy,
                                    keep, cache)
            pending, rows, size = [], 0, 0
            yield _avro_damage(source, item)
            continue
        if held:  # an intact block after all: the damage is what it says
            for damage in held:
                yield _avro_damage(source, damage)
        held = None
        pending.append(item)
        rows += item.count
        size += len(item.raw)
        if rows >= CHUNK_ROWS or size >= CHUNK_BYTES // 4:  # compressed: leave room to expand
            yield from _avro_decode(header, pending, columns, known_present, source, policy,
                                    keep, cache)
            pending, rows, size = [], 0, 0
    yield from _avro_decode(header, pending, columns, known_present, source, policy, keep,
                            cache)
    if held:  # the header and what was skipped after it (this range's part of the file)
        lost = header.end + sum(d.skipped for d in held)
        yield reading.damage(source, f"unreadable Avro file: no intact block follows the header, "
                                     f"which is damaged or not this file's ({held[0].reason}); the "
                                     f"file is lost ({lost} bytes, how many records: unknown)",
                             None, lost)


def _avro_damage(source: str, item: Damage) -> Parsed:
    lost = (" (how many records: unknown)" if item.count is None else
            f" ({item.count} records lost)")
    return reading.damage(source, f"damaged Avro data at byte {item.offset}: {item.reason}; "
                                  f"skipped {item.skipped} bytes to the next block{lost}",
                          item.count, item.skipped)


def _polars_table(data: bytes, columns: list[str]) -> pa.Table:
    import polars as pl

    frame = pl.read_avro(io.BytesIO(data), columns=columns or None)
    return frame.to_arrow()


def _avro_decode(header, blocks, columns, known_present, source, policy, keep, cache):
    """A run of blocks in one columnar decode, each block's count proven by a sentinel
    (:class:`ldpflow.wire.Sentinel`); a run polars does not decode is retried block by
    block, and a block it does not decode is read record by record."""
    if not blocks:
        return
    if header.codec not in CODECS:  # bzip2, xz, ...: fastavro reads them, record by
        for block in blocks:            # record (their counts are not checked)
            yield from _avro_records(header, block, source, policy, keep, cache)
        return
    if header.codec != "null":  # uncompressed here (snappy: checked against its CRC32)
        header, checked = to_null(header, blocks)
        for damage in (b for b in checked if isinstance(b, Damage)):
            yield reading.damage(source, f"damaged Avro data at byte {damage.offset}: "
                                         f"{damage.reason} ({damage.count} records lost)",
                                 damage.count)
        blocks = [b for b in checked if isinstance(b, Block)]
        if not blocks:
            return
    key = ("sentinel", header.raw, tuple(columns))
    if key not in cache:
        cache[key] = sentinel(header.schema, columns)
    mark = cache[key]
    if mark is None:  # no string column decoded: every block is checked on its own
        for block in blocks:
            yield from _avro_records(header, block, source, policy, keep, cache)
        return
    data = with_sentinels(blocks, mark, header.sync, header.raw)
    try:
        table = _polars_table(data, columns)
        if table.num_rows != sum(b.count + 1 for b in blocks):  # polars stopped short
            raise ValueError(f"decoded {table.num_rows} of {sum(b.count for b in blocks)} "
                             "records")
    except BaseException as exc:  # noqa: BLE001 - polars raises (and panics) many types
        if isinstance(exc, (KeyboardInterrupt, SystemExit, MemoryError)):
            raise
        if len(blocks) > 1:
            for block in blocks:
                yield from _avro_decode(header, [block], columns, known_present, source,
                                        policy, keep, cache)
            return
        yield from _avro_records(header, blocks[0], source, policy, keep, cache)
        return
    rows = sentinel_rows(blocks)
    marks = table.column(mark.column).take(pa.array(rows)).to_numpy(zero_copy_only=False)
    proven = marks == mark.nonce
    parts, first = [], 0
    for block, last, ok in zip(blocks, rows.tolist(), proven.tolist(), strict=True):
        if ok:
            parts.append(table.slice(first, last - first))
        else:  # its count understates its records: refused whole (see ldpflow.wire.avro)
            damage = count_damage(header, block)
            yield reading.damage(source, f"damaged Avro data at byte {damage.offset}: "
                                         f"{damage.reason} ({damage.count} records lost)",
                                 damage.count)
        first = last + 1
    if not parts:
        return
    table = parts[0] if len(parts) == 1 else _joined(parts)
    yield parse_table(table, source=source, policy=policy, keep=keep,
                      known_present=known_present, protocols=cache)


def _joined(parts: list[pa.Table]) -> pa.Table:
    """Slices of one table (the blocks of a decode, without their sentinels) as one table
    of single-chunk columns, the same values as ``pa.concat_tables(parts)`` combined: a
    struct column is joined child by child (Arrow joins the chunks of a struct holding
    nulls an order of magnitude slower than its children's)."""
    return pa.Table.from_arrays([_joined_array([p.column(i).chunk(0) if p.column(i).num_chunks
                                                == 1 else p.column(i).combine_chunks()
                                                for p in parts])
                                 for i in range(parts[0].num_columns)],
                                schema=parts[0].schema)


def _joined_array(chunks: list[pa.Array]) -> pa.Array:
    kind = chunks[0].type
    if not pa.types.is_struct(kind):
        return pa.concat_arrays(chunks)
    children = [_joined_array([c.field(i) for c in chunks]) for i in range(kind.num_fields)]
    mask = None
    if any(c.null_count for c in chunks):
        mask = pa.concat_arrays([pc.is_null(c) for c in chunks])
    return pa.StructArray.from_arrays(children, fields=list(kind), mask=mask)


def _avro_records(header, block, source, policy, keep, cache):
    """One block record by record with fastavro (foreign schemas resolve here)."""
    import fastavro

    data = header.raw + block.raw
    try:
        records = list(fastavro.reader(io.BytesIO(data)))
        if len(records) != block.count:
            raise ValueError(f"decoded {len(records)} of {block.count} records")
        surplus = block_surplus(header, block) if header.codec == "null" else 0
    except Exception as exc:  # noqa: BLE001 - fastavro raises many types on corrupt input
        lost = plausible_count(block.count, len(block.raw))
        yield reading.damage(source, f"undecodable Avro block at byte {block.offset} "
                                     f"({'an unknown number of' if lost is None else lost} records "
                                     f"lost): {type(exc).__name__}: {exc}", lost, len(block.raw))
        return
    if surplus:  # its count understates its records: refused whole (see ldpflow.wire.avro)
        damage = count_damage(header, block, surplus)
        yield reading.damage(source, f"damaged Avro data at byte {damage.offset}: "
                                     f"{damage.reason} ({damage.count} records lost)",
                             damage.count)
        return
    table, dead = records_to_table(records, source, ignore=unread_records(policy))
    parsed = parse_table(table, source=source, policy=policy, keep=keep, protocols=cache)
    parsed.dead_letters[:0] = dead
    parsed.records += len(dead)
    yield parsed


def write_records(stream: IO[bytes], records, schema: str = "report",
                  codec: str = "snappy") -> None:
    """Write records given as Python dicts through fastavro (a few result records, or
    hand-made reports in tests and tools)."""
    import fastavro

    from ldpflow.schemas import load_schema

    # A fixed sync marker (of the schema's name): the same records give the same bytes.
    sync = hashlib.sha256(f"ldpflow-{schema}".encode()).digest()[:16]
    fastavro.writer(stream, load_schema(schema), records, codec=codec,
                    sync_interval=1 << 20, sync_marker=sync)
