"""Report files and messages, read and written column by column: Avro, JSON lines, Parquet.

Reading: :func:`read_reports` reads one byte range of one file (:func:`plan_ranges` cuts a
file into ranges that workers read separately) and yields one
:class:`~ldpflow.wire.parse.Parsed` per chunk, all through
:func:`~ldpflow.wire.parse.parse_table`:

* **Parquet**: row groups as Arrow record batches, only the columns the parse needs; a
  column that the file's schema or its row-group statistics prove free of nulls (or all
  null) is not read at all.
* **Avro**: runs of container blocks decoded by polars into Arrow columns
  (:mod:`ldpflow.wire.avro` finds the blocks). A run polars cannot decode is retried block
  by block, then with fastavro record by record (a foreign schema is resolved that way); a
  block nothing can decode is one dead letter with its record count, and reading goes on
  at the next block.
* **JSON lines**: chunks parsed by ``pyarrow.json`` against the report schema; a chunk
  that fails is halved until the failing lines are found, and only those are parsed one
  by one (``bits`` is hex text, ``seed`` signed or unsigned).

Writing (:func:`reports_table`, :func:`write_reports`, :func:`encode_message`) builds the
envelope as Arrow columns and encodes whole columns at once.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import logging
import re
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ldpflow.core import codecs
from ldpflow.core.keys import HEAVY_HITTERS, PEM
from ldpflow.core.oracles import Reports
from ldpflow.schemas import schema_json
from ldpflow.wire import avro
from ldpflow.wire.buffers import offsets_and_data
from ldpflow.wire.envelope import (
    PARAMETER_FIELDS,
    PAYLOAD_FIELDS,
    REQUIRED_FIELDS,
    UNSIGNED_FIELDS,
    DeadLetter,
    field_kind,
    json_safe,
    nested_parameter_fields,
    payload_columns,
)
from ldpflow.wire.parse import (
    AcceptancePolicy,
    Parsed,
    accepts_kind,
    arrow_schema,
    parse_table,
    records_to_table,
)

__all__ = [
    "FORMATS",
    "detect_format",
    "plan_ranges",
    "read_reports",
    "unread_records",
    "reports_table",
    "ReportWriter",
    "write_reports",
    "write_records",
    "numbered_ids",
    "json_lines",
    "encode_message",
    "decode_message",
    "RANGE_BYTES",
    "decompressed",
    "TruncatedError",
]

_LOGGER = logging.getLogger(__name__)
FORMATS = ("avro", "json", "parquet")
_SUFFIXES = {
    ".avro": "avro", ".json": "json", ".jsonl": "json", ".ndjson": "json",
    ".parquet": "parquet", ".pq": "parquet",
}
_COMPRESSED = (".gz", ".bz2", ".zst", ".deflate")
#: A file larger than this is read as several ranges (by several workers).
RANGE_BYTES = 64 << 20
#: Rows handed to one parse call, at most; and the bytes of data they may hold, at most
#: (wide reports, e.g. unary encodings of a large domain, make fewer rows per chunk).
CHUNK_ROWS = 1 << 19
CHUNK_BYTES = 256 << 20
_JSON_CHUNK_BYTES = 32 << 20
_JSON_BLOCK_BYTES = 2 << 20  # pyarrow parses blocks in parallel; > the longest line
_JSON_LINE_FALLBACK = 64  # a failing JSON chunk of at most this many lines: line by line
MAX_LINE_BYTES = 1 << 20
#: Deeper JSON is refused before it is decoded (a report nests one level).
MAX_JSON_DEPTH = 64


def detect_format(path: str) -> str:
    """The format of a report file from its name (``.avro``, ``.jsonl``, ``.parquet``;
    ``.gz`` ok)."""
    name = path.lower()
    for compressed in _COMPRESSED:
        if name.endswith(compressed):
            name = name[: -len(compressed)]
    for suffix, fmt in _SUFFIXES.items():
        if name.endswith(suffix):
            return fmt
    raise ValueError(
        f"cannot tell the format of {path!r} from its name: use one of "
        f"{', '.join(sorted(_SUFFIXES))} or pass the format explicitly"
    )


def is_compressed(path: str) -> bool:
    return path.lower().endswith(_COMPRESSED)


#: Compressed bytes fed to a decompressor at a time; what it returns is bounded by the size
#: each read asks for (at most 4 MiB, see ``_read_up_to``), never by what the input expands to.
_COMPRESSED_INPUT_BYTES = 64 << 10


class TruncatedError(EOFError):
    """A compressed stream that ends before its end-of-stream marker (a file cut short)."""


def decompressed(stream: IO[bytes], path: str) -> IO[bytes]:
    """``stream`` (the raw bytes of ``path``) decompressed as its name says (``.gz``,
    ``.bz2``, ``.zst``, ``.deflate``; other names as they are), in bounded steps: a read of
    ``n`` bytes decompresses at most about ``n`` bytes, so the memory of a read is
    independent of what the file expands to (a 4 MB gzip "bomb" of 2.2 GB holds no more
    than one chunk). A stream cut short raises :class:`TruncatedError` once the bytes
    before the cut are read."""
    import bz2
    import gzip

    name = path.lower()
    if name.endswith(".gz"):
        return _Guarded(gzip.GzipFile(fileobj=stream, mode="rb"), stream)
    if name.endswith(".bz2"):
        return _Guarded(bz2.BZ2File(stream, mode="rb"), stream)
    if name.endswith(".deflate"):
        return _Guarded(io.BufferedReader(_Inflating(stream, zlib.MAX_WBITS)), stream)
    if name.endswith(".zst"):
        import zstandard

        return _Guarded(zstandard.ZstdDecompressor(max_window_size=1 << 27).stream_reader(
            stream, read_across_frames=True), stream)
    return stream


class _Guarded(io.RawIOBase):
    """A decompressing reader whose end-of-stream error is a :class:`TruncatedError`;
    ``compressed`` is the stream it reads."""

    def __init__(self, inner: Any, compressed: IO[bytes]):
        super().__init__()
        self._inner, self.compressed = inner, compressed

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes, from one step of the decompressor (``read1``): the bytes of
        the steps before a damage are handed out before the damage is raised."""
        try:
            if size is None or size < 0:
                return self._inner.read()
            return self._inner.read1(size)
        except EOFError as exc:
            raise TruncatedError(f"the compressed stream is truncated: {exc}") from None
        except Exception as exc:  # zstandard.ZstdError: damaged data
            if type(exc).__name__ == "ZstdError":
                raise OSError(f"damaged zstd data: {exc}") from None
            raise

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def seekable(self) -> bool:  # by decompressing again from the start, as gzip does
        return bool(getattr(self._inner, "seekable", lambda: False)())

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        try:
            return self._inner.seek(offset, whence)
        except EOFError as exc:
            raise TruncatedError(f"the compressed stream is truncated: {exc}") from None

    def tell(self) -> int:
        return self._inner.tell()

    def close(self) -> None:
        self._inner.close()
        super().close()


class _Inflating(io.RawIOBase):
    """A zlib stream (``.deflate``; concatenated streams too), decompressed in bounded steps."""

    def __init__(self, raw: IO[bytes], wbits: int):
        super().__init__()
        self._raw, self._wbits = raw, wbits
        self._inflate = zlib.decompressobj(wbits)
        self._pending = b""
        self._started = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def _read(self, size: int) -> bytes:
        while True:
            if self._inflate.eof:  # a stream ended: another may follow
                rest = self._inflate.unused_data or self._raw.read(_COMPRESSED_INPUT_BYTES)
                if not rest:
                    return b""
                self._inflate, self._pending, self._started = (
                    zlib.decompressobj(self._wbits), rest, False)
            data = self._inflate.unconsumed_tail or self._pending or \
                self._raw.read(_COMPRESSED_INPUT_BYTES)
            self._pending = b""
            if not data:  # the end of the file: what the decompressor still holds
                out = self._inflate.flush() if self._started else b""
                if out or self._inflate.eof:
                    return out
                if self._started:
                    raise TruncatedError("the compressed stream is truncated: it ends before "
                                         "its end-of-stream marker")
                return b""
            self._started = True
            out = self._inflate.decompress(data, max(size, 1))
            if out:
                return out


def unread_records(policy: AcceptancePolicy) -> tuple[str, ...]:
    """The nested heavy-hitter records the readers leave unread under ``policy``: those of
    the protocols other than ``pem`` and the expected one.

    Every report's envelope holds all the nested records, null but for its own protocol's;
    decoding a record costs a column per field even when it is null, so a reader decodes only
    the records whose reports it may accept, and ``pem``'s (which it has always read: a
    frequency-oracle report that carries one is refused). The others are treated as fields
    the reader's schema lacks, on every path (columnar and record by record): never decoded,
    never checked.
    """
    expected = policy.expect.get("oracle")
    return tuple(name for name in HEAVY_HITTERS if name not in (PEM, expected))


def _needed(keep: Iterable[str], policy: AcceptancePolicy) -> tuple[list[str], set[str]]:
    """The top-level fields a parse must read, and the required ones it may skip when the
    file proves them present (heavy-hitter reports need their user ids, to check groups)."""
    keep = set(keep)
    wanted = {"report_id": "id_hashes" in keep,
              "user_id": bool({"user_ids", "user_hashes"} & keep) or policy.checks_groups,
              "event_time": "event_times" in keep}
    unread = unread_records(policy)
    fields = [*PARAMETER_FIELDS, *(name for name in PAYLOAD_FIELDS if name not in unread)]
    optional = set()
    for name in REQUIRED_FIELDS:
        if name in fields:
            continue
        fields.append(name)
        if not wanted.get(name, True):
            optional.add(name)
    return fields, optional


# -- ranges ------------------------------------------------------------------------------------
def plan_ranges(stream: IO[bytes], fmt: str, size: int, splittable: bool = True,
                range_bytes: int = RANGE_BYTES) -> list[tuple[int, int | None]]:
    """Byte ranges of one file for separate reads; ``(0, None)`` is the whole file.

    Avro and JSON lines are cut at any byte (the readers align to the next block or line);
    Parquet at row-group boundaries. Compressed files are not splittable.
    """
    if not splittable or size <= range_bytes:
        return [(0, None)]
    if fmt == "parquet":
        import pyarrow.parquet as pq

        try:
            metadata = pq.ParquetFile(stream).metadata
        except (pa.ArrowException, OSError, ValueError):  # the read reports the lost file
            return [(0, None)]
        starts = sorted(_row_group_offset(metadata.row_group(i))
                        for i in range(metadata.num_row_groups))
        ranges, begin = [], 0
        for start in starts[1:]:
            if start - begin >= range_bytes:
                ranges.append((begin, start))
                begin = start
        ranges.append((begin, None))
        return ranges
    bounds = list(range(0, size, range_bytes))
    return [(lo, hi) for lo, hi in zip(bounds, bounds[1:], strict=False)] + [(bounds[-1], None)]


def _row_group_offset(row_group) -> int:
    column = row_group.column(0)
    offsets = [o for o in (column.dictionary_page_offset, column.data_page_offset) if o]
    return min(offsets) if offsets else 0


def read_reports(
    stream: IO[bytes],
    fmt: str,
    *,
    source: str = "",
    start: int = 0,
    end: int | None = None,
    policy: AcceptancePolicy | None = None,
    keep: Iterable[str] = (),
) -> Iterator[Parsed]:
    """The parsed chunks of the byte range ``[start, end)`` of one report file."""
    readers = {"avro": _avro_reports, "json": _json_reports, "parquet": _parquet_reports}
    if fmt not in readers:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    policy = policy or AcceptancePolicy()
    chunks = readers[fmt](stream, source, start, end, policy, tuple(keep))
    return _bounded(_until_unreadable(chunks, source), policy.max_dead_records, source)


def _until_unreadable(chunks: Iterator[Parsed], source: str) -> Iterator[Parsed]:
    """The chunks of a file until its bytes cannot be read (a damaged gzip stream, a file
    cut short, an I/O error): what was read is kept, and the damage is one dead letter."""
    records = 0
    try:
        for parsed in chunks:
            records += parsed.records
            yield parsed
    except TruncatedError as exc:
        yield _damage(source, f"truncated file: {exc}; the {records} records before the cut "
                              "were read, the rest of the file is lost (how many records: "
                              "unknown)", None)
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        yield _damage(source, f"unreadable data after {records} records: "
                              f"{type(exc).__name__}: {exc} (the rest of the file is lost; "
                              "how many records: unknown)", None)


def _damage(source: str, reason: str, count: int | None, lost_bytes: int | None = None
            ) -> Parsed:
    """A damaged part of a file: ``count`` records lost, or an unknown number (None) of
    ``lost_bytes`` bytes (None: unknown too)."""
    if count is None:
        return Parsed({}, [DeadLetter.lost(source, reason, lost_bytes)], 0)
    return Parsed({}, [DeadLetter(source, reason, None, None, count)], count)


def _file_bytes(stream) -> int | None:
    """The size of the file behind ``stream`` (compressed: of the compressed file), or None
    when it cannot be told cheaply; the position is kept."""
    raw = getattr(stream, "compressed", stream)
    try:
        here = raw.tell()
        size = raw.seek(0, io.SEEK_END)
        raw.seek(here)
        return int(size)
    except (OSError, AttributeError, ValueError):
        return None


def _lost_file(source: str, stream, what: str) -> Parsed:
    size = _file_bytes(stream)
    shown = "" if size is None else f"{size} bytes, "
    return _damage(source, f"{what}; the file is lost ({shown}how many records: unknown)", None,
                   size)


# -- Parquet -----------------------------------------------------------------------------------
def _parquet_reports(stream, source, start, end, policy, keep):
    import pyarrow.parquet as pq

    try:  # pages written with checksums are verified
        parquet = pq.ParquetFile(stream, page_checksum_verification=True)
    except (pa.ArrowException, OSError, ValueError) as exc:
        if start == 0:  # one dead letter for the whole file, from its first range
            yield _lost_file(source, stream, f"unreadable Parquet file: "
                                             f"{type(exc).__name__}: {exc}")
        return
    try:
        metadata = parquet.metadata
        schema = parquet.schema_arrow
        if len(set(schema.names)) != len(schema.names):
            raise ValueError(f"the file's schema repeats a column name: {schema.names}")
    except (pa.ArrowException, OSError, ValueError) as exc:
        if start == 0:
            yield _lost_file(source, stream, f"unreadable Parquet file: "
                                             f"{type(exc).__name__}: {exc}")
        return
    fields, optional = _needed(keep, policy)
    cache: dict = {}
    for index in range(metadata.num_row_groups):
        row_group = metadata.row_group(index)
        offset = _row_group_offset(row_group)
        if offset < start or (end is not None and offset >= end):
            continue
        done = 0  # rows of this row group already handed on
        try:
            columns, known_null, known_present, constants = _parquet_projection(
                schema, row_group, fields, optional)
            if not columns:  # everything is known from the statistics
                yield parse_table(pa.table({"_": pa.nulls(row_group.num_rows)}), source=source,
                                  policy=policy, keep=keep, known_null=known_null,
                                  known_present=known_present, constants=constants,
                                  protocols=cache)
                continue
            row_bytes = max(1, row_group.total_byte_size // max(row_group.num_rows, 1))
            rows = int(min(CHUNK_ROWS, max(1, CHUNK_BYTES // row_bytes)))
            for batch in parquet.iter_batches(batch_size=rows, row_groups=[index],
                                              columns=columns, use_threads=False):
                parsed = parse_table(pa.Table.from_batches([batch]), source=source,
                                     policy=policy, keep=keep, known_null=known_null,
                                     known_present=known_present, constants=constants,
                                     protocols=cache)
                done += batch.num_rows
                yield parsed
        except (pa.ArrowException, OSError, ValueError, KeyError, UnicodeDecodeError) as exc:
            lost = row_group.num_rows - done  # the rows not handed on: no row counted twice
            yield _damage(source, f"unreadable Parquet row group {index} ({lost} of "
                                  f"{row_group.num_rows} records): {type(exc).__name__}: {exc}",
                          lost)


_SHORT_CONSTANT = 32  # longer string statistics may be truncated prefixes


def _parquet_projection(schema: pa.Schema, row_group, fields: list[str], optional: set[str]):
    """Columns to read of one row group, and what the schema and statistics prove.

    A nullable field whose null count is the row count is all null, a required field of the
    right type (or null count 0) is present, and a parameter field whose minimum equals its
    maximum with no nulls is a constant: none of them is read. Integer and short string
    statistics only (float statistics leave NaN out).
    """
    rows = row_group.num_rows
    nulls: dict[str, list[int | None]] = {}
    single: dict[str, Any] = {}
    for i in range(row_group.num_columns):
        column = row_group.column(i)
        top = column.path_in_schema.split(".")[0]
        stats = column.statistics
        count = stats.null_count if stats is not None and stats.has_null_count else None
        nulls.setdefault(top, []).append(count)
        try:
            low, high = (stats.min, stats.max) if count == 0 and stats.has_min_max else (1, 0)
        except UnicodeDecodeError:  # statistics that are not UTF-8: not a proof
            low, high = 1, 0
        if (top in PARAMETER_FIELDS and "." not in column.path_in_schema and low == high
                and (isinstance(low, int) or (isinstance(low, str)
                                              and len(low) < _SHORT_CONSTANT))):
            single[top] = low
    columns, known_null, known_present, constants = [], [], [], {}
    for name in fields:
        if name not in schema.names:
            continue
        counts = nulls.get(name, [None])
        field = schema.field(name)
        kind_ok = accepts_kind(field.type, field_kind((name,)))
        if name in optional:
            if kind_ok and (not field.nullable or counts == [0]):
                known_present.append(name)
                continue
        elif name in single and kind_ok and not pa.types.is_floating(field.type):
            constants[name] = single[name]
            continue
        elif field.nullable and None not in counts and min(counts) == rows and name not in \
                REQUIRED_FIELDS:
            known_null.append(name)
            continue
        columns.append(name)
    return columns, known_null, known_present, constants


# -- Avro --------------------------------------------------------------------------------------
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


def _avro_reports(stream, source, start, end, policy, keep):
    try:
        header = avro.read_header(stream)
    except (avro.AvroFormatError, OSError) as exc:
        if start == 0:
            yield _lost_file(source, stream, f"unreadable Avro file: {exc}")
        return
    fields, optional = _needed(keep, policy)
    columns, known_present = _avro_projection(header.schema, fields, optional)
    cache: dict = {}
    pending: list[avro.Block] = []
    rows = size = 0
    # Damage right after the header, with no intact block after it, is the signature of a
    # damaged header (a flipped bit in its metadata or its sync marker): the counts the
    # "blocks" claim are then garbage, so the file is lost whole, of unknown count.
    held: list[avro.Damage] | None = [] if start == 0 else None
    for item in avro.iter_blocks(stream, header, start, end):
        if isinstance(item, avro.Damage):
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
        yield _damage(source, f"unreadable Avro file: no intact block follows the header, "
                              f"which is damaged or not this file's ({held[0].reason}); the "
                              f"file is lost ({lost} bytes, how many records: unknown)",
                      None, lost)


def _avro_damage(source: str, item: avro.Damage) -> Parsed:
    lost = (" (how many records: unknown)" if item.count is None else
            f" ({item.count} records lost)")
    return _damage(source, f"damaged Avro data at byte {item.offset}: {item.reason}; "
                           f"skipped {item.skipped} bytes to the next block{lost}",
                   item.count, item.skipped)


def _polars_table(data: bytes, columns: list[str]) -> pa.Table:
    import polars as pl

    frame = pl.read_avro(io.BytesIO(data), columns=columns or None)
    return frame.to_arrow()


def _avro_decode(header, blocks, columns, known_present, source, policy, keep, cache):
    """A run of blocks in one columnar decode, each block's count proven by a sentinel
    (:class:`ldpflow.wire.avro.Sentinel`); a run polars does not decode is retried block by
    block, and a block it does not decode is read record by record."""
    if not blocks:
        return
    if header.codec not in avro.CODECS:  # bzip2, xz, ...: fastavro reads them, record by
        for block in blocks:            # record (their counts are not checked)
            yield from _avro_records(header, block, source, policy, keep, cache)
        return
    if header.codec != "null":  # uncompressed here (snappy: checked against its CRC32)
        header, checked = avro.to_null(header, blocks)
        for damage in (b for b in checked if isinstance(b, avro.Damage)):
            yield _damage(source, f"damaged Avro data at byte {damage.offset}: {damage.reason} "
                                  f"({damage.count} records lost)", damage.count)
        blocks = [b for b in checked if isinstance(b, avro.Block)]
        if not blocks:
            return
    key = ("sentinel", header.raw, tuple(columns))
    if key not in cache:
        cache[key] = avro.sentinel(header.schema, columns)
    mark = cache[key]
    if mark is None:  # no string column decoded: every block is checked on its own
        for block in blocks:
            yield from _avro_records(header, block, source, policy, keep, cache)
        return
    data = header.raw + avro.with_sentinels(blocks, mark, header.sync)
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
    rows = avro.sentinel_rows(blocks)
    marks = table.column(mark.column).take(pa.array(rows)).to_numpy(zero_copy_only=False)
    proven = marks == mark.nonce
    parts, first = [], 0
    for block, last, ok in zip(blocks, rows.tolist(), proven.tolist(), strict=True):
        if ok:
            parts.append(table.slice(first, last - first))
        else:  # its count understates its records: refused whole (see ldpflow.wire.avro)
            damage = avro.count_damage(header, block)
            yield _damage(source, f"damaged Avro data at byte {damage.offset}: "
                                  f"{damage.reason} ({damage.count} records lost)",
                          damage.count)
        first = last + 1
    if not parts:
        return
    table = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
    yield parse_table(table, source=source, policy=policy, keep=keep,
                      known_present=known_present, protocols=cache)


def _avro_records(header, block, source, policy, keep, cache):
    """One block record by record with fastavro (foreign schemas resolve here)."""
    import fastavro

    data = header.raw + block.raw
    try:
        records = list(fastavro.reader(io.BytesIO(data)))
        if len(records) != block.count:
            raise ValueError(f"decoded {len(records)} of {block.count} records")
        surplus = avro.block_surplus(header, block) if header.codec == "null" else 0
    except Exception as exc:  # noqa: BLE001 - fastavro raises many types on corrupt input
        lost = avro.plausible_count(block.count, len(block.raw))
        yield _damage(source, f"undecodable Avro block at byte {block.offset} "
                              f"({'an unknown number of' if lost is None else lost} records "
                              f"lost): {type(exc).__name__}: {exc}", lost, len(block.raw))
        return
    if surplus:  # its count understates its records: refused whole (see ldpflow.wire.avro)
        damage = avro.count_damage(header, block, surplus)
        yield _damage(source, f"damaged Avro data at byte {damage.offset}: {damage.reason} "
                              f"({damage.count} records lost)", damage.count)
        return
    table, dead = records_to_table(records, source, ignore=unread_records(policy))
    parsed = parse_table(table, source=source, policy=policy, keep=keep, protocols=cache)
    parsed.dead_letters[:0] = dead
    parsed.records += len(dead)
    yield parsed


def _bounded(chunks: Iterator[Parsed], limit: int, source: str) -> Iterator[Parsed]:
    """The chunks of one range with at most ``limit`` dead letters that hold their record
    (the slow paths refuse line by line, with reasons that differ per line); the others
    are counted in one more dead letter at the end, so every record stays accounted for."""
    shown = extra = 0
    for parsed in chunks:
        kept = []
        for letter in parsed.dead_letters:
            if letter.record is None or shown < limit:
                kept.append(letter)
                shown += letter.record is not None
            else:
                extra += letter.count
        parsed.dead_letters = kept
        yield parsed
    if extra:
        yield Parsed({}, [DeadLetter(source, f"{extra} more records refused (the first "
                                             f"{limit} are listed)", None, None, extra)], 0)


# -- JSON lines --------------------------------------------------------------------------------
_HEX_TEXT = re.compile(r"(?:[0-9a-fA-F]{2})*")
_HEX = np.full(256, 255, dtype=np.uint8)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    _HEX[_c] = 10 + _i


def _json_reports(stream, source, start, end, policy, keep):
    cache: dict = {}
    number = 1 if start == 0 else 0  # line numbers are known when reading from the start
    for chunk in _json_chunks(stream, start, end):
        lines = yield from _json_chunk(chunk, number, source, policy, keep, cache)
        if number:
            number += lines


def _json_chunks(stream, start: int, end: int | None) -> Iterator[bytes]:
    """The whole lines that begin in ``[start, end)``, in chunks of about 32 MiB.

    Every line belongs to exactly one range whatever its length: offsets are those of the
    file (``line_start``, where the line being carried begins; ``read_to``, the end of what
    was read), never derived from what is kept of a line, since of a line longer than
    :data:`MAX_LINE_BYTES` only the head is kept (for its dead letter).
    """
    carry, line_start, read_to = b"", 0, 0
    block: bytes | None = None  # bytes read but not yet looked at (from read_to - len)
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
                block = head[cut + 1:] or None
                break
    while end is None or line_start < end:
        if block is None:
            try:
                block = _read_up_to(stream, _JSON_CHUNK_BYTES)
            except _ReadFailed as failure:  # keep the whole lines read before the damage
                cut = failure.data.rfind(b"\n")
                if cut >= 0:
                    yield from _json_tail(carry, failure.data[: cut + 1], read_to, end)
                raise failure.error from None
            if not block:
                if carry:
                    yield carry
                return
            read_to += len(block)
        block_start = read_to - len(block)  # the file offset of block[0]
        cut = block.rfind(b"\n")
        if cut < 0:
            carry += block
            if len(carry) > MAX_LINE_BYTES:  # keep its head (for the dead letter) only
                carry = carry[: MAX_LINE_BYTES + 1]
            block = None
            continue
        next_start = block_start + cut + 1  # where the first line not yet complete begins
        if end is not None and next_start > end:
            # Keep the lines that begin before end; the next range has the others.
            last = block.find(b"\n", max(end - 1 - block_start, 0))
            yield b"".join((carry, memoryview(block)[: last + 1]))
            return
        yield b"".join((carry, memoryview(block)[: cut + 1]))  # one copy
        carry, line_start = block[cut + 1:], next_start
        block = None


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


def _read_up_to(stream, size: int) -> bytes:
    """Up to ``size`` bytes. A decompressing stream is read 4 MiB at a time, so that what
    was read before an error (a damaged gzip member) is not lost with it; a plain file in
    one call (no copies)."""
    if isinstance(stream, (io.BufferedReader, io.BytesIO, io.FileIO)):
        try:
            return stream.read(size)
        except (OSError, EOFError) as exc:
            raise _ReadFailed(b"", exc) from None
    parts: list[bytes] = []
    got = 0
    while got < size:
        try:
            part = stream.read(min(4 << 20, size - got))
        except (OSError, EOFError, zlib.error) as exc:
            raise _ReadFailed(b"".join(parts), exc) from None
        if not part:
            break
        parts.append(part)
        got += len(part)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _json_chunk(chunk: bytes, number: int, source, policy, keep, cache):
    """Parse one chunk of lines (a generator of Parsed); returns its number of lines."""
    dead: list[DeadLetter] = []
    view = np.frombuffer(chunk, dtype=np.uint8)
    ends = np.flatnonzero(view == 10)
    lines = int(ends.size) + (0 if chunk.endswith(b"\n") or not chunk else 1)
    if ends.size == 0 or ends[-1] != len(chunk) - 1:  # a last line with no newline
        ends = np.append(ends, len(chunk))
    starts = np.concatenate([[0], ends[:-1] + 1])
    too_long = np.flatnonzero((ends - starts) > MAX_LINE_BYTES)
    if too_long.size:  # refused unread; an empty line keeps the others' numbers
        pieces, at = [], 0
        for i in too_long.tolist():
            line = chunk[starts[i]:ends[i]]
            dead.append(DeadLetter(source, f"policy: JSON line{_at(number, i)} longer than "
                                           f"{MAX_LINE_BYTES} bytes",
                                   line[:200].decode("utf-8", "replace")))
            pieces.append(chunk[at:starts[i]])
            at = ends[i]
        pieces.append(chunk[at:])
        chunk = b"".join(pieces)
    yield from _json_parse(chunk, number, source, policy, keep, cache, dead)
    return lines


def _at(number: int, offset: int) -> str:
    return f" at line {number + offset}" if number else ""


def _json_read(chunk: bytes, unread: tuple[str, ...] = ()) -> pa.Table:
    import pyarrow.json as pj

    return pj.read_json(
        io.BytesIO(chunk),
        read_options=pj.ReadOptions(use_threads=True, block_size=_JSON_BLOCK_BYTES),
        parse_options=pj.ParseOptions(explicit_schema=_json_schema(unread),
                                      unexpected_field_behavior="ignore"),
    )


@functools.cache
def _json_schema(unread: tuple[str, ...] = ()) -> pa.Schema:
    """The envelope as the JSON reader parses it, without the fields left unread."""
    schema = arrow_schema(json_form=True, nullable=True)
    return pa.schema([f for f in schema if f.name not in unread]) if unread else schema


def _json_parse(chunk, number, source, policy, keep, cache, dead) -> Iterator[Parsed]:
    if not chunk or chunk.isspace():
        if dead:
            yield Parsed({}, dead, len(dead))
        return
    try:
        table = _json_read(chunk, unread_records(policy))
        if table.num_rows != _nonblank_lines(chunk):  # e.g. two objects on one line
            raise pa.ArrowInvalid("a line holds other than one JSON object")
    except (pa.ArrowInvalid, pa.ArrowException):
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


def _nonblank_lines(chunk: bytes) -> int:
    """The number of lines of ``chunk``, less the empty ones (cheap: no scan in Python).

    A line of spaces also counts; a chunk holding one reads fewer rows than this and goes
    the line-by-line way, which is right either way.
    """
    lines = chunk.count(b"\n") + (0 if chunk.endswith(b"\n") else 1)
    empty = int(chunk.startswith(b"\n"))
    if b"\n\n" in chunk:  # runs of newlines: each newline after a newline ends an empty line
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
        if not _unhex_bits(record):
            dead.append(DeadLetter(source, "payload field 'bits' is not a hex string", record))
            continue
        records.append(record)
    table, refused = records_to_table(records, source, ignore=unread_records(policy))
    parsed = parse_table(table, source=source, policy=policy, keep=keep, protocols=cache)
    parsed.dead_letters[:0] = dead + refused
    parsed.records += len(dead) + len(refused)
    yield parsed


def _unhex_bits(record: Any) -> bool:
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
def reports_table(
    protocol: Any,
    reports: Reports,
    report_ids: Sequence[str] | pa.Array,
    user_ids: Sequence[str] | pa.Array,
    event_times: Sequence[int] | np.ndarray,
    *,
    codec: str | None = None,
) -> pa.Table:
    """The envelopes of a batch of one protocol's reports, as Arrow columns.

    For heavy-hitter reports (``pem``, ``spm``, ``mcm``, ``treehist``, ``sfp``) the envelope
    carries the configuration in the nested record named after the protocol, with ``codec``
    (default ``int``); ``domain_size`` is the number of groups and ``hash_range`` the OLH
    range of the reports (derived from epsilon for ``spm``, ``mcm`` and ``sfp``). Their user
    ids must be those the groups were drawn from.

    Raises
    ------
    ValueError
        If ``codec`` is given for a frequency oracle, or is no codec of the protocol's
        ``value_bits``.
    """
    n = len(reports)
    heavy = protocol.name in HEAVY_HITTERS
    if codec is not None and not heavy:
        raise ValueError(f"codec applies to heavy-hitter reports ({', '.join(HEAVY_HITTERS)}) "
                         f"only, got {codec!r} for {protocol.name}")
    columns: dict[str, pa.Array] = {
        "report_id": _strings(report_ids),
        "user_id": _strings(user_ids),
        "event_time": pa.array(np.asarray(event_times, dtype=np.int64)),
        "oracle": pa.repeat(pa.scalar(protocol.name), n),
        "epsilon": pa.repeat(pa.scalar(float(protocol.epsilon)), n),
        "domain_size": pa.repeat(pa.scalar(
            int(protocol.num_groups if heavy else protocol.domain_size), pa.int64()), n),
    }
    hash_range = getattr(protocol, "hash_range", None)
    columns["hash_range"] = (pa.repeat(pa.scalar(int(hash_range), pa.int32()), n)
                             if hash_range is not None else pa.nulls(n, pa.int32()))
    num_hashes = getattr(protocol, "num_hashes", None)
    columns["num_hashes"] = (pa.repeat(pa.scalar(int(num_hashes), pa.int32()), n)
                             if num_hashes is not None else pa.nulls(n, pa.int32()))
    schema = arrow_schema()
    nested: dict[str, pa.Array] = {}
    for column in payload_columns(protocol):
        values = reports.columns[column.name]
        if column.width is not None:
            array = pa.FixedSizeBinaryArray.from_buffers(
                pa.binary(column.width), n, [None, pa.py_buffer(np.ascontiguousarray(values))])
            array = array.cast(pa.binary())
        else:
            values = np.asarray(values)
            if values.dtype == np.uint64:
                values = values.view(np.int64)  # Avro long: two's complement
            target = schema.field(column.path[0]).type if len(column.path) == 1 else \
                schema.field(column.path[0]).type.field(column.path[1]).type
            array = pa.array(values.astype(np.int64)).cast(target)
        if len(column.path) == 1:
            columns[column.name] = array
        else:
            nested[column.path[1]] = array
    if heavy:
        name = protocol.name
        config = {field: int(getattr(protocol, field)) for field in nested_parameter_fields(name)
                  if field != "codec"}
        for field, value in config.items():
            if f"{name}.{field}" in UNSIGNED_FIELDS and value >= 2**63:
                config[field] = value - 2**64  # a 64-bit key as a two's-complement long
        config["codec"] = codecs.make_codec(codec or "int", bits=protocol.value_bits).name
        struct_type = schema.field(name).type
        children = []
        for child in struct_type:
            if child.name in nested:
                children.append(nested[child.name])
            else:
                children.append(pa.repeat(pa.scalar(config[child.name], child.type), n))
        columns[name] = pa.StructArray.from_arrays(children, fields=list(struct_type))
    out = []
    for field in schema:
        array = columns.get(field.name)
        out.append(array if array is not None else pa.nulls(n, field.type))
    return pa.Table.from_arrays(out, schema=schema)


def _strings(values: Sequence[str] | pa.Array) -> pa.Array:
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values if isinstance(values, pa.Array) else values.combine_chunks()
    return pa.array(values, type=pa.string())


def numbered_ids(prefix: str, start: int, stop: int) -> pa.Array:
    """``f"{prefix}{i}"`` for ``i`` in ``[start, stop)``, built column-wise."""
    numbers = pc.cast(pa.array(np.arange(start, stop, dtype=np.int64)), pa.string())
    return pc.binary_join_element_wise(pa.repeat(pa.scalar(prefix), stop - start), numbers, "")


class ReportWriter:
    """Writes one report file of ``fmt`` a table at a time (bounded memory for any size):
    Avro blocks (``codec`` null or deflate; ``sync``: the container's sync marker, random
    unless given), JSON lines, Parquet row groups."""

    def __init__(self, stream: IO[bytes], fmt: str, *, codec: str = "snappy", level: int = 6,
                 sync: bytes | None = None):
        if fmt not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
        self._stream, self._format = stream, fmt
        self._avro = avro.ContainerWriter(stream, schema_json("report"), codec=codec,
                                          level=level, sync=sync) if fmt == "avro" else None
        self._parquet = None

    def write(self, table: pa.Table) -> None:
        if self._avro is not None:
            self._avro.write(table)
        elif self._format == "json":
            for lo in range(0, table.num_rows, _WRITE_ROWS):  # a slice at a time
                self._stream.write(json_lines(table.slice(lo, _WRITE_ROWS)))
        else:
            import pyarrow.parquet as pq

            schema = arrow_schema()
            if self._parquet is None:  # page checksums: flipped bits are found, not counted
                self._parquet = pq.ParquetWriter(self._stream, schema, write_page_checksum=True)
            self._parquet.write_table(table if table.schema.equals(schema)
                                      else table.cast(schema), row_group_size=1 << 20)

    def close(self) -> None:
        if self._avro is not None:
            self._avro.close()
        elif self._format == "parquet":
            if self._parquet is None:
                import pyarrow.parquet as pq

                self._parquet = pq.ParquetWriter(self._stream, arrow_schema(),
                                                 write_page_checksum=True)
            self._parquet.close()

    def __enter__(self) -> ReportWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def write_reports(stream: IO[bytes], fmt: str, table: pa.Table, *, codec: str = "snappy",
                  level: int = 6, sync: bytes | None = None) -> None:
    """Write an envelope table as one file of ``fmt`` (:class:`ReportWriter`)."""
    with ReportWriter(stream, fmt, codec=codec, level=level, sync=sync) as writer:
        writer.write(table)


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


def encode_message(table: pa.Table, fmt: str = "avro") -> bytes:
    """A Pub/Sub message body carrying a batch of reports: an Avro container (default,
    uncompressed) or JSON lines."""
    if fmt == "avro":
        return avro.encode_container(table, schema_json("report"), codec="null")
    if fmt == "json":
        return json_lines(table)
    raise ValueError(f"message format must be avro or json, got {fmt!r}")


def decode_message(data: Any, source: str = "", policy: AcceptancePolicy | None = None,
                   keep: Iterable[str] = ()) -> list[Parsed]:
    """The reports of one message, through the file readers: an Avro container of reports,
    JSON lines (one report is one line), or a JSON array of reports. A body that is none of
    these is one dead letter."""
    if not isinstance(data, (bytes, bytearray)):
        letter = DeadLetter(source, f"message body must be bytes, got {type(data).__name__}",
                            repr(data)[:200])
        return [Parsed({}, [letter], 1)]
    data = bytes(data)
    policy = policy or AcceptancePolicy()
    if data[:4] == avro.MAGIC:
        parsed = list(read_reports(io.BytesIO(data), "avro", source=source, policy=policy,
                                   keep=keep))
        if sum(p.records for p in parsed) == 0:  # nothing decodable: the message is one record
            letter = DeadLetter(source, "; ".join(d.reason for p in parsed
                                                  for d in p.dead_letters)
                                or "malformed message: an empty Avro container", data[:200])
            return [Parsed({}, [letter], 1)]
        return parsed
    text = data.strip()
    if text.startswith(b"["):
        try:
            items = json.loads(text)
        except (ValueError, RecursionError):
            items = None
        if isinstance(items, list):
            kept, dead = [], []
            for item in items:  # bits travel as hex text in JSON, as in JSON lines
                if _unhex_bits(item):
                    kept.append(item)
                else:
                    dead.append(DeadLetter(source, "payload field 'bits' is not a hex string",
                                           item))
            table, refused = records_to_table(kept, source, ignore=unread_records(policy))
            dead += refused
            parsed = parse_table(table, source=source, policy=policy, keep=keep)
            parsed.dead_letters[:0] = dead
            parsed.records += len(dead)
            return [parsed]
    parsed = list(read_reports(io.BytesIO(text + b"\n"), "json", source=source, policy=policy,
                               keep=keep))
    letters = [d for p in parsed for d in p.dead_letters]
    if sum(p.reports for p in parsed) == 0 and letters and \
            all(d.reason.startswith("malformed JSON") for d in letters):
        try:  # one pretty-printed JSON object over several lines
            record = json.loads(text)
        except (ValueError, RecursionError):
            letter = DeadLetter(source, "malformed message: neither Avro nor JSON", data[:200])
            return [Parsed({}, [letter], 1)]
        if not isinstance(record, dict):
            letter = DeadLetter(source, "malformed message: neither Avro nor JSON", data[:200])
            return [Parsed({}, [letter], 1)]
        return decode_message(json.dumps(record).encode("utf-8"), source, policy, keep)
    return parsed


def write_records(stream: IO[bytes], fmt: str, records: Iterable[dict], *,
                  schema: str = "report", codec: str = "snappy") -> None:
    """Write records given as Python dicts (a few result records, or hand-made reports in
    tests and tools): Avro through fastavro, or JSON lines (bytes as hex)."""
    if fmt == "avro":
        import fastavro

        from ldpflow.schemas import load_schema

        # A fixed sync marker (of the schema's name): the same records give the same bytes.
        sync = hashlib.sha256(f"ldpflow-{schema}".encode()).digest()[:16]
        fastavro.writer(stream, load_schema(schema), records, codec=codec,
                        sync_interval=1 << 20, sync_marker=sync)
    elif fmt == "json":
        for record in records:
            stream.write((json.dumps(json_safe(record), separators=(",", ":")) + "\n").encode(
                "utf-8"))
    else:
        raise ValueError(f"records are written as avro or json, got {fmt!r}")
