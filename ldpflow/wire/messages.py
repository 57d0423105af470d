"""Pub/Sub message bodies: a batch of reports as one message, and back through the file
readers.

A body is an Avro container of reports (the default: the report schema without its docs,
its block deflated; any codec and either schema is read), JSON lines (one report a line) or
a JSON array of reports; one that is none of these is one dead letter.
"""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa

from ldpflow.schemas import compact_schema
from ldpflow.wire import avro, jsonl
from ldpflow.wire.envelope import DeadLetter
from ldpflow.wire.jsonl import json_lines, unhex_bits
from ldpflow.wire.parse import AcceptancePolicy, Parsed, parse_table, records_to_table
from ldpflow.wire.reading import guarded, unread_records

__all__ = ["MESSAGE_CODEC", "encode_message", "decode_message", "join_avro_messages"]


#: The codec of an Avro message's blocks: deflate (zlib, on every platform) makes a message of
#: 1,000 GRR reports 13.3 KB instead of 47.8 KB, under a third of the bytes Pub/Sub carries
#: (and bills), its emulator handles and the job receives, for about 0.7 ms more to encode it
#: and 0.04 ms to inflate it.
MESSAGE_CODEC = "deflate"


def encode_message(table: pa.Table, fmt: str = "avro", codec: str = MESSAGE_CODEC) -> bytes:
    """A Pub/Sub message body carrying a batch of reports: an Avro container or JSON lines.

    The container's header holds the report schema without its docs
    (:func:`ldpflow.schemas.compact_schema`: 3 KB rather than 7 KB in every message), and
    its block is compressed with ``codec`` (:data:`MESSAGE_CODEC` by default; ``null``,
    ``deflate`` or ``snappy``). The readers take any of these, and messages with the full
    schema or uncompressed as before."""
    if fmt == "avro":
        if codec not in avro.CODECS:
            raise ValueError(f"message codec must be one of {', '.join(avro.CODECS)}, "
                             f"got {codec!r}")
        return avro.encode_container(table, compact_schema("report"), codec=codec)
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
        parsed = _read(data, avro, source, policy, keep)
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
                if unhex_bits(item):
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
    parsed = _read(text + b"\n", jsonl, source, policy, keep)
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


def _read(data: bytes, reader: Any, source: str, policy: AcceptancePolicy,
          keep: Iterable[str]) -> list[Parsed]:
    """The parsed chunks of a whole body read as a file by ``reader`` (:mod:`avro` or
    :mod:`jsonl`), guarded as :func:`ldpflow.wire.formats.read_reports` guards a range."""
    chunks = reader.read_chunks(io.BytesIO(data), source, 0, None, policy, tuple(keep))
    return list(guarded(chunks, policy, source))


def join_avro_messages(bodies: Sequence[bytes]) -> bytes | None:
    """One Avro container holding the blocks of ``bodies``, in order, when every body is an
    intact Avro container whose header is the first's byte for byte but for the sync
    marker (so one schema and codec); None otherwise (the caller then decodes them one by
    one). Decoding the joined container gives the rows of decoding each body, in order:
    a message's decode has a fixed cost (its header, the columnar decode's set-up, the
    checks), which many small messages then pay once.
    """
    if not bodies or any(not isinstance(b, (bytes, bytearray)) for b in bodies):
        return None
    first = bytes(bodies[0])
    try:
        header = avro.read_header(io.BytesIO(first))
    except avro.AvroFormatError:
        return None
    prefix = header.raw[:-len(header.sync)]
    out = [header.raw]
    for body in bodies:
        body = bytes(body)
        end = len(header.raw)
        if not body.startswith(prefix) or len(body) < end:
            return None
        own = dataclasses.replace(header, raw=body[:end], sync=body[len(prefix):end])
        for block in avro.iter_blocks(io.BytesIO(body), own):
            if not isinstance(block, avro.Block):  # damage: decoded alone, it is reported
                return None
            out.append(block.raw[:-len(own.sync)])
            out.append(header.sync)
    return b"".join(out)
