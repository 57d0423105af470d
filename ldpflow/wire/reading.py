"""What every report reader shares: the fields a parse must read, damage as dead letters,
and the guards around one range's chunks (unreadable bytes, the dead-letter bound).

The format readers (:mod:`~ldpflow.wire.avro`, :mod:`~ldpflow.wire.jsonl`,
:mod:`~ldpflow.wire.parquet`) each yield :class:`~ldpflow.wire.parse.Parsed` chunks of one
byte range; :func:`guarded` is what :func:`ldpflow.wire.formats.read_reports` (and the
message decoder) wraps them in.
"""

from __future__ import annotations

import io
import queue
import threading
import zlib
from collections.abc import Iterable, Iterator
from typing import TypeVar

from ldpflow.core.keys import HEAVY_HITTERS, PEM
from ldpflow.wire.compression import TruncatedError
from ldpflow.wire.envelope import PARAMETER_FIELDS, PAYLOAD_FIELDS, REQUIRED_FIELDS, DeadLetter
from ldpflow.wire.parse import AcceptancePolicy, Parsed

__all__ = ["CHUNK_ROWS", "CHUNK_BYTES", "unread_records", "needed_fields", "damage",
           "lost_file", "guarded", "read_ahead"]

T = TypeVar("T")

#: Rows handed to one parse call, at most; and the bytes of data they may hold, at most
#: (wide reports, e.g. unary encodings of a large domain, make fewer rows per chunk).
CHUNK_ROWS = 1 << 19
CHUNK_BYTES = 256 << 20


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


def needed_fields(keep: Iterable[str], policy: AcceptancePolicy) -> tuple[list[str], set[str]]:
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




def _until_unreadable(chunks: Iterator[Parsed], source: str) -> Iterator[Parsed]:
    """The chunks of a file until its bytes cannot be read (a damaged gzip stream, a file
    cut short, an I/O error): what was read is kept, and the damage is one dead letter."""
    records = 0
    try:
        for parsed in chunks:
            records += parsed.records
            yield parsed
    except TruncatedError as exc:
        yield damage(source, f"truncated file: {exc}; the {records} records before the cut "
                              "were read, the rest of the file is lost (how many records: "
                              "unknown)", None)
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        yield damage(source, f"unreadable data after {records} records: "
                              f"{type(exc).__name__}: {exc} (the rest of the file is lost; "
                              "how many records: unknown)", None)


def damage(source: str, reason: str, count: int | None, lost_bytes: int | None = None
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


def lost_file(source: str, stream, what: str) -> Parsed:
    size = _file_bytes(stream)
    shown = "" if size is None else f"{size} bytes, "
    return damage(source, f"{what}; the file is lost ({shown}how many records: unknown)", None,
                   size)



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




_END = object()


def read_ahead(items: Iterator[T]) -> Iterator[T]:
    """``items`` in their order, each made on a thread while the caller works on the one
    before it: at most one item ahead (the memory of one more chunk).

    For a reader whose items are chunks read, decompressed and parsed by code that releases
    the GIL (file reads, zlib, ``pyarrow.json``): the next chunk is read and parsed while
    the caller counts this one. Nothing else changes: an exception raised making an item
    (a truncated or damaged file, a parse error) is raised here where that item would have
    been yielded, after every item before it; closing this iterator stops the thread once
    the item it is making is made, and closes ``items`` (on that thread).
    """
    made: queue.SimpleQueue = queue.SimpleQueue()
    wanted = threading.Semaphore(1)  # the items the thread may make before the caller asks
    stop = threading.Event()

    def make() -> None:
        try:
            while True:
                wanted.acquire()
                if stop.is_set():
                    return
                try:
                    item = next(items)
                except StopIteration:
                    made.put((_END, None))
                    return
                made.put((item, None))
        except BaseException as exc:  # handed to the caller, raised there
            made.put((None, exc))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=make, name="ldpflow-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            item, error = made.get()
            if error is not None:
                raise error
            if item is _END:
                return
            wanted.release()  # the next one is made while the caller works on this one
            yield item
    finally:
        stop.set()
        wanted.release()
        thread.join()


def guarded(chunks: Iterator[Parsed], policy: AcceptancePolicy, source: str
            ) -> Iterator[Parsed]:
    """One range's chunks, read until its bytes cannot be read, with at most
    ``policy.max_dead_records`` dead letters that hold their record."""
    return _bounded(_until_unreadable(chunks, source), policy.max_dead_records, source)
