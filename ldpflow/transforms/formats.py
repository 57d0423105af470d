"""Report file formats: Avro (the default), JSON lines and Parquet, read in chunks.

Readers yield ``(records, dead_letters, trusted)`` chunks: ``records`` are report envelopes
as dicts (``schemas/report.avsc``, bytes fields as ``bytes``), ``dead_letters`` the lines or
rows that could not even be decoded, and ``trusted`` tells :func:`records.parse_records`
whether a schema-checked decoder produced the records. Avro is read a whole block at a time
with fastavro (Beam's per-record ``ReadFromAvro`` is several times slower here).

JSON lines carry the same fields; ``bits`` is a hex string, ``seed`` a (signed or unsigned)
64-bit integer.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Iterator
from typing import IO, Any

from ldpflow.transforms.records import DeadLetter, json_safe

__all__ = [
    "FORMATS",
    "detect_format",
    "read_chunks",
    "write_avro",
    "write_json_lines",
    "write_parquet",
    "to_json_record",
    "from_json_record",
    "decode_message",
    "encode_message",
]

FORMATS = ("avro", "json", "parquet")
_SUFFIXES = {
    ".avro": "avro", ".json": "json", ".jsonl": "json", ".ndjson": "json",
    ".parquet": "parquet", ".pq": "parquet",
}
CHUNK_RECORDS = 20_000


def detect_format(path: str) -> str:
    """The format of a report file from its name (``.avro``, ``.jsonl``, ``.parquet``; ``.gz`` ok)."""
    name = path.lower()
    for compressed in (".gz", ".bz2", ".zst", ".deflate"):
        if name.endswith(compressed):
            name = name[: -len(compressed)]
    for suffix, fmt in _SUFFIXES.items():
        if name.endswith(suffix):
            return fmt
    raise ValueError(
        f"cannot tell the format of {path!r} from its name: use one of "
        f"{', '.join(sorted(_SUFFIXES))} or pass the format explicitly"
    )


def to_json_record(record: dict[str, Any]) -> dict[str, Any]:
    """A report envelope as JSON-ready values (bytes as hex)."""
    return {k: json_safe(v) for k, v in record.items()}


def from_json_record(obj: Any) -> Any:
    """Undo :func:`to_json_record` (hex ``bits`` back to bytes); invalid hex raises ValueError."""
    if isinstance(obj, dict) and isinstance(obj.get("bits"), str):
        obj = dict(obj)
        try:
            obj["bits"] = bytes.fromhex(obj["bits"])
        except ValueError:
            raise ValueError("payload field 'bits' is not a hex string") from None
    return obj


def _avro_chunks(stream: IO[bytes], source: str) -> Iterator[tuple[list, list, bool]]:
    import fastavro

    pending: list = []
    read = 0
    try:
        for block in fastavro.block_reader(stream):
            pending.extend(block)
            if len(pending) >= CHUNK_RECORDS:
                read += len(pending)
                yield pending, [], True
                pending = []
    except Exception as exc:  # noqa: BLE001 - fastavro raises many types on corrupt input
        # The records decoded so far are valid; what follows cannot be read: one dead letter.
        reason = (f"unreadable Avro data after {read + len(pending)} records: "
                  f"{type(exc).__name__}: {exc}")
        yield pending, [DeadLetter(source, reason, None)], True
        return
    if pending:
        yield pending, [], True


def _json_chunks(stream: IO[bytes], source: str) -> Iterator[tuple[list, list, bool]]:
    records: list = []
    dead: list = []
    for number, line in enumerate(iter(stream.readline, b""), start=1):
        text = line.strip()
        if not text:
            continue
        try:
            records.append(from_json_record(json.loads(text)))
        except ValueError as exc:  # json.JSONDecodeError and bad hex are ValueErrors
            snippet = text[:200].decode("utf-8", "replace") if isinstance(text, bytes) else text[:200]
            dead.append(DeadLetter(source, f"malformed JSON at line {number}: {exc}", snippet))
        if len(records) + len(dead) >= CHUNK_RECORDS:
            yield records, dead, False
            records, dead = [], []
    if records or dead:
        yield records, dead, False


def _parquet_chunks(stream: IO[bytes], source: str) -> Iterator[tuple[list, list, bool]]:
    import pyarrow.parquet as pq

    data = stream.read()
    table_file = pq.ParquetFile(io.BytesIO(data))
    for batch in table_file.iter_batches(batch_size=CHUNK_RECORDS):
        yield batch.to_pylist(), [], False


def read_chunks(stream: IO[bytes], fmt: str, source: str = "") -> Iterator[tuple[list, list, bool]]:
    """Chunks ``(records, dead_letters, trusted)`` of a report file opened in binary mode."""
    readers = {"avro": _avro_chunks, "json": _json_chunks, "parquet": _parquet_chunks}
    if fmt not in readers:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    return readers[fmt](stream, source)


def write_avro(stream: IO[bytes], records: Iterable[dict], schema: str = "report",
               codec: str = "deflate") -> None:
    """Write records as one Avro container file with large blocks (fast block reads)."""
    import fastavro

    from ldpflow.schemas import load_schema

    fastavro.writer(stream, load_schema(schema), records, codec=codec, sync_interval=1 << 20)


def write_json_lines(stream: IO[str], records: Iterable[dict]) -> None:
    for record in records:
        stream.write(json.dumps(to_json_record(record), separators=(",", ":")) + "\n")


def _arrow_type(avro_type: Any):
    """The Arrow type of an Avro type of the report schema (nullable unions -> the type)."""
    import pyarrow as pa

    if isinstance(avro_type, list):  # ["null", T]
        (inner,) = [t for t in avro_type if t != "null"]
        return _arrow_type(inner)
    if isinstance(avro_type, dict):
        if avro_type["type"] == "record":
            return pa.struct([(f["name"], _arrow_type(f["type"])) for f in avro_type["fields"]])
        return _arrow_type(avro_type["type"])
    return {"string": pa.string(), "long": pa.int64(), "int": pa.int32(),
            "double": pa.float64(), "bytes": pa.binary(), "boolean": pa.bool_()}[avro_type]


def write_parquet(path: str, records: list[dict]) -> None:
    """Write report envelopes as Parquet, with the columns of the Avro report schema."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ldpflow.schemas import schema_json

    fields = schema_json("report")["fields"]
    schema = pa.schema([(f["name"], _arrow_type(f["type"])) for f in fields])
    pq.write_table(pa.Table.from_pylist(records, schema=schema), path)


_AVRO_MAGIC = b"Obj\x01"


def encode_message(records: Iterable[dict], fmt: str = "avro") -> bytes:
    """A Pub/Sub message body carrying a batch of reports: an Avro container (default) or
    JSON lines."""
    if fmt == "avro":
        buffer = io.BytesIO()
        write_avro(buffer, records, codec="null")
        return buffer.getvalue()
    if fmt == "json":
        text = io.StringIO()
        write_json_lines(text, records)
        return text.getvalue().encode("utf-8")
    raise ValueError(f"message format must be avro or json, got {fmt!r}")


def decode_message(data: bytes, source: str = "") -> tuple[list, list, bool]:
    """The reports of one message: ``(records, dead_letters, trusted)``.

    A message holds an Avro container file of reports (collectors batch device reports), one
    JSON report, a JSON array of reports, or JSON lines. A body that is none of these is one
    dead letter.
    """
    if not isinstance(data, (bytes, bytearray)):
        return [], [DeadLetter(source, f"message body must be bytes, got {type(data).__name__}",
                               repr(data)[:200])], False
    if data[:4] == _AVRO_MAGIC:
        import fastavro

        try:
            return list(fastavro.reader(io.BytesIO(data))), [], True
        except Exception as exc:  # noqa: BLE001 - fastavro raises many types on corrupt input
            return [], [DeadLetter(source, f"malformed Avro message: {type(exc).__name__}: {exc}",
                                   data[:200])], False
    text = bytes(data).strip()
    try:
        decoded = json.loads(text)
        items = decoded if isinstance(decoded, list) else [decoded]
        return [from_json_record(item) for item in items], [], False
    except ValueError:
        pass
    records, dead = [], []
    for chunk, undecodable, _ in _json_chunks(io.BytesIO(text), source):
        records += chunk
        dead += undecodable
    if not records and dead:  # not JSON lines either: one bad message, not N bad lines
        return [], [DeadLetter(source, "malformed message: neither Avro nor JSON", data[:200])], False
    return records, dead, False
