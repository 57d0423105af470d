"""Report files and messages, by format: the front of the wire layer's readers and writers.

One module per format, each with its reader and writer: :mod:`~ldpflow.wire.avro`,
:mod:`~ldpflow.wire.jsonl` (JSON lines), :mod:`~ldpflow.wire.parquet`, and
:mod:`~ldpflow.wire.messages` (Pub/Sub message bodies). What they share:
:mod:`~ldpflow.wire.reading` (the fields a parse needs, damage as dead letters),
:mod:`~ldpflow.wire.compression` (bounded decompression) and
:mod:`~ldpflow.wire.tables` (the envelope as Arrow columns).

This module tells the format of a file from its name (:func:`detect_format`), cuts a file
into byte ranges (:func:`plan_ranges`), and dispatches:

* reading: :func:`read_reports` reads one byte range of one file and yields one
  :class:`~ldpflow.wire.parse.Parsed` per chunk, all through
  :func:`~ldpflow.wire.parse.parse_table`, until the bytes cannot be read (one dead
  letter), with at most ``policy.max_dead_records`` dead letters that hold their record;
* writing: :func:`reports_table` builds the envelope as Arrow columns, and
  :class:`ReportWriter` (:func:`write_reports`) or :func:`encode_message` encode whole
  columns at once; :func:`write_records` writes a few records given as dicts.

The names other packages import from here stay here (re-exported from the format modules).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import IO, Any

import pyarrow as pa

from ldpflow.schemas import schema_json
from ldpflow.wire import avro, compression, jsonl, parquet, reading
from ldpflow.wire.compression import TruncatedError, decompressed, is_compressed
from ldpflow.wire.jsonl import json_lines
from ldpflow.wire.messages import decode_message, encode_message
from ldpflow.wire.parse import AcceptancePolicy, Parsed
from ldpflow.wire.reading import CHUNK_BYTES, CHUNK_ROWS, unread_records
from ldpflow.wire.tables import numbered_ids, reports_table

__all__ = [
    "FORMATS",
    "detect_format",
    "is_compressed",
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
    "CHUNK_ROWS",
    "CHUNK_BYTES",
    "decompressed",
    "TruncatedError",
]

FORMATS = ("avro", "json", "parquet")
_SUFFIXES = {
    ".avro": "avro", ".json": "json", ".jsonl": "json", ".ndjson": "json",
    ".parquet": "parquet", ".pq": "parquet",
}
#: A file larger than this is read as several ranges (by several workers).
RANGE_BYTES = 64 << 20
_READERS = {"avro": avro.read_chunks, "json": jsonl.read_chunks,
            "parquet": parquet.read_chunks}


def detect_format(path: str) -> str:
    """The format of a report file from its name (``.avro``, ``.jsonl``, ``.parquet``;
    ``.gz`` ok)."""
    name = path.lower()
    for compressed in compression.SUFFIXES:
        if name.endswith(compressed):
            name = name[: -len(compressed)]
    for suffix, fmt in _SUFFIXES.items():
        if name.endswith(suffix):
            return fmt
    raise ValueError(
        f"cannot tell the format of {path!r} from its name: use one of "
        f"{', '.join(sorted(_SUFFIXES))} or pass the format explicitly"
    )


def plan_ranges(stream: IO[bytes], fmt: str, size: int, splittable: bool = True,
                range_bytes: int = RANGE_BYTES) -> list[tuple[int, int | None]]:
    """Byte ranges of one file for separate reads; ``(0, None)`` is the whole file.

    Avro and JSON lines are cut at any byte (the readers align to the next block or line);
    Parquet at row-group boundaries. Compressed files are not splittable.
    """
    if not splittable or size <= range_bytes:
        return [(0, None)]
    if fmt == "parquet":
        return parquet.plan_ranges(stream, range_bytes)
    bounds = list(range(0, size, range_bytes))
    return [(lo, hi) for lo, hi in zip(bounds, bounds[1:], strict=False)] + [(bounds[-1], None)]


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
    if fmt not in _READERS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    policy = policy or AcceptancePolicy()
    chunks = _READERS[fmt](stream, source, start, end, policy, tuple(keep))
    return reading.guarded(chunks, policy, source)


class ReportWriter:
    """Writes one report file of ``fmt`` a table at a time (bounded memory for any size):
    Avro blocks (``codec`` null or deflate; ``sync``: the container's sync marker, random
    unless given), JSON lines, Parquet row groups."""

    def __init__(self, stream: IO[bytes], fmt: str, *, codec: str = "snappy", level: int = 6,
                 sync: bytes | None = None):
        if fmt not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
        self._avro = avro.ContainerWriter(stream, schema_json("report"), codec=codec,
                                          level=level, sync=sync) if fmt == "avro" else None
        self._parquet = parquet.TableWriter(stream) if fmt == "parquet" else None
        self._stream = stream

    def write(self, table: pa.Table) -> None:
        if self._avro is not None:
            self._avro.write(table)
        elif self._parquet is not None:
            self._parquet.write(table)
        else:
            jsonl.write_table(self._stream, table)

    def close(self) -> None:
        if self._avro is not None:
            self._avro.close()
        elif self._parquet is not None:
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


def write_records(stream: IO[bytes], fmt: str, records: Iterable[dict], *,
                  schema: str = "report", codec: str = "snappy") -> None:
    """Write records given as Python dicts (a few result records, or hand-made reports in
    tests and tools): Avro through fastavro, or JSON lines (bytes as hex)."""
    if fmt == "avro":
        avro.write_records(stream, records, schema=schema, codec=codec)
    elif fmt == "json":
        jsonl.write_records(stream, records)
    else:
        raise ValueError(f"records are written as avro or json, got {fmt!r}")
