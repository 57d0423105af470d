"""The steps of ``ldpflow estimate`` as pure functions over core and wire objects.

Every engine (:mod:`ldpflow.plan.backend`) runs the same steps; only how their inputs
reach them differs. A step never changes its inputs: tallies and accumulators are added
with ``+`` (a new object), so an engine may hand one result to several consumers.

* :func:`scan_range`: the parsed chunks of one byte range of one file, the job's progress
  told of each: the one read loop of every engine (Beam's ``ReadRangeFn`` streams them).
* :func:`read_range`: one byte range of one file through the wire layer's one parse path
  (:func:`ldpflow.wire.formats.read_reports`, with the run's
  :class:`~ldpflow.wire.parse.AcceptancePolicy`) -> a :class:`RangeRead`: records, dead
  letters by reason and by source, the valid reports counted per key (exact integer
  :class:`Tally`), and what the shuffles need: id-hash pieces (8 bytes a report) by
  id-hash bucket, the rows of repeated ids, or the kept batches by user-hash bucket.
* :func:`repeated_ids`: one id-hash bucket -> the hashes seen more than once, and the
  ranges that hold them.
* :func:`drop_copies`: one bucket of the rows of repeated ids -> the copies dropped
  (:func:`ldpflow.core.dedup.first_copies`), as a :class:`Tally` to take away, or the
  kept rows.
* :func:`cap_users`: one user-hash bucket -> each user's earliest ``cap`` reports counted
  (:func:`ldpflow.core.contribution.capped_rows`), the others as ``capped``.
* :func:`estimate_key`: one key's tally -> its result (:mod:`ldpflow.wire.results`).

The Beam batch job (:mod:`ldpflow.transforms`) calls these same functions from its DoFns
and CombineFns; where Beam counts the rows a step keeps instead of taking the dropped ones
away, the step has a ``keep_rows`` form (:func:`drop_copies`, :func:`cap_users`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import re
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ldpflow.core import parallel
from ldpflow.core.contribution import capped_rows, epsilon_per_user, payload_ranks, tie_breaks
from ldpflow.core.dedup import first_copies, repeated_hashes
from ldpflow.core.keys import ProtocolKey
from ldpflow.core.oracles import Accumulator, registry
from ldpflow.wire.envelope import ReportBatch
from ldpflow.wire.parse import ID_COLUMN, id_column_hashes

__all__ = [
    "Tally",
    "RangeTask",
    "RangeRead",
    "ID_BUCKET_BITS",
    "USER_BUCKET_BITS",
    "CAP_KEEP",
    "bucket_parts",
    "split_repeated",
    "count_batch",
    "shuffle_key",
    "scan_range",
    "read_range",
    "repeated_ids",
    "SpilledIds",
    "IdSpill",
    "PASS_CUT_BITS",
    "spill_ids",
    "DEDUP_PASS_BYTES",
    "drop_copies",
    "cap_users",
    "estimate_key",
    "dead_letter_summary",
    "letter_tally",
    "add_letter",
    "add_tallies",
    "reason_class",
    "verdict_counts",
    "add_counts",
    "DEFAULT_MAX_JOB_BYTES",
    "key_memory",
    "admit_keys",
    "admission_letter",
    "file_ranges",
]

#: Id-hash buckets per key (2**4 = 16): how many workers can share one key's dedup.
ID_BUCKET_BITS = 4
#: User-hash buckets (16), across keys: how many workers can share the contribution cap.
USER_BUCKET_BITS = 4
#: The most id hashes (in bytes, 8 a report) one pass of the dedup on disk holds at once:
#: a group of spilled hashes (one key, one bucket) is resolved in successive hash ranges of
#: about this size, so the peak does not depend on the number of reports. 8 MiB: a pass's
#: buffer and its sorted copy stay under glibc's largest mmap threshold (32 MiB), so they
#: are reused from the heap instead of being mapped and faulted in afresh each pass (32 MiB
#: passes cost 5 to 10 times the system time), and its sort runs in cache.
DEDUP_PASS_BYTES = 8 << 20
#: The envelope columns the batches keep for the contribution cap.
CAP_KEEP = ("user_hashes", "event_times", "id_hashes", "report_ids")
#: The most memory, in bytes, the parameter sets of one job may need together
#: (``--max_job_bytes``): a third of the 24 GiB machines the project is measured on, two
#: parameter sets of the largest size one may take (``--max_key_bytes``, 4 GiB).
DEFAULT_MAX_JOB_BYTES = 8 * 2**30


@dataclasses.dataclass(eq=False)
class Tally:
    """One key's exact counts, with the copies not counted, the reports over a user's cap
    and the records refused. ``a + b`` is a new tally (pure); :meth:`merge` adds in place
    (for a Beam ``CombineFn``, which owns its first accumulator)."""

    accumulator: Accumulator | None
    duplicates: int = 0
    conflicting: int = 0
    dead_letters: int = 0
    capped: int = 0

    @property
    def reports_read(self) -> int:
        """The valid reports read of the key, before dedup and the cap: those counted, the
        copies dropped and those capped (what a range's ``census`` counts where it reads)."""
        counted = 0 if self.accumulator is None else int(self.accumulator.n)
        return counted + self.duplicates + self.capped

    def merge(self, other: Tally) -> Tally:
        if other.accumulator is not None:
            self.accumulator = (other.accumulator.copy() if self.accumulator is None
                                else self.accumulator.merge(other.accumulator))
        self.duplicates += other.duplicates
        self.conflicting += other.conflicting
        self.dead_letters += other.dead_letters
        self.capped += other.capped
        return self

    def __add__(self, other: Tally) -> Tally:
        a, b = self.accumulator, other.accumulator
        return Tally(a if b is None else b if a is None else a + b,
                     self.duplicates + other.duplicates, self.conflicting + other.conflicting,
                     self.dead_letters + other.dead_letters, self.capped + other.capped)

    def without(self, dropped: Tally) -> Tally:
        """This tally less the reports of ``dropped`` (copies counted here, then found to be
        duplicates), with ``dropped``'s duplicate counts added."""
        accumulator = self.accumulator
        if dropped.accumulator is not None:
            if accumulator is None:
                raise ValueError("cannot take reports out of a tally that counted none")
            accumulator = accumulator - dropped.accumulator
        return Tally(accumulator, self.duplicates + dropped.duplicates,
                     self.conflicting + dropped.conflicting,
                     self.dead_letters + dropped.dead_letters, self.capped + dropped.capped)


def add_counts(a: Mapping[Any, int], b: Mapping[Any, int]) -> dict[Any, int]:
    """The sum of two count mappings, as a new dict."""
    out = dict(a)
    for name, count in b.items():
        out[name] = out.get(name, 0) + count
    return out


def letter_tally(letter) -> tuple[int, int, int, int]:
    """What a dead letter adds to its reason's tally: ``(records, parts lost whole, their
    bytes, those of unknown size)``."""
    if not letter.count_unknown:
        return (letter.count, 0, 0, 0)
    return (letter.count, 1, letter.bytes or 0, 1 if letter.bytes is None else 0)


def add_letter(counts: dict[str, tuple[int, ...]], letter) -> dict[str, tuple[int, ...]]:
    """Adds one dead letter's tally (:func:`letter_tally`) to ``counts`` in place, and
    returns it: for a mapping its caller owns (a read's own, a ``CombineFn``'s
    accumulator), so that counting ``m`` letters of ``r`` reasons costs ``O(m)``, not the
    ``O(m r)`` of a new mapping per letter (:func:`add_tallies`)."""
    tally = letter_tally(letter)
    have = counts.get(letter.reason)
    counts[letter.reason] = tally if have is None else tuple(
        x + y for x, y in zip(have, tally, strict=True))
    return counts


def add_tallies(a: Mapping[str, Sequence[int]], b: Mapping[str, Sequence[int]]
                ) -> dict[str, tuple[int, ...]]:
    """The sum of two ``{reason: tally}`` mappings (:func:`letter_tally`), as a new dict."""
    out = {reason: tuple(t) for reason, t in a.items()}
    for reason, tally in b.items():
        have = out.get(reason, (0, 0, 0, 0))
        out[reason] = tuple(x + y for x, y in zip(have, tally, strict=True))
    return out


def dead_letter_summary(counts: Mapping[str, Sequence[int]]) -> dict[str, Any]:
    """Dead letters by reason (``{reason: (records, parts lost whole, bytes, unsized)}``,
    :func:`letter_tally`) -> ``{"total", "by_reason"}`` and, when parts of files were lost
    whole, ``"lost": {"parts", "bytes", "unsized", "by_reason": {reason: parts}}``; largest
    first, ties by reason, so the document does not depend on the order of the reads."""
    known = {reason: t[0] for reason, t in counts.items() if t[0] or not t[1]}
    out: dict[str, Any] = {"total": sum(known.values()), "by_reason": dict(
        sorted(known.items(), key=lambda kv: (-kv[1], kv[0])))}
    lost = {reason: t for reason, t in counts.items() if t[1]}
    if lost:
        out["lost"] = {"parts": sum(t[1] for t in lost.values()),
                       "bytes": sum(t[2] for t in lost.values()),
                       "unsized": sum(t[3] for t in lost.values()),
                       "by_reason": {reason: t[1] for reason, t in
                                     sorted(lost.items(), key=lambda kv: (-kv[1][1], kv[0]))}}
    return out


def reason_class(reason: str) -> str:
    """A reason without its numbers (line numbers, offsets, counts, values), so that letters
    of one cause share one count: ``damaged Avro data at byte # ...``."""
    return re.sub(r"\d+(?:[.,]\d+)*", "#", reason)[:160]


def verdict_counts(counts: Mapping[str, Sequence[int]]) -> dict[str, Any]:
    """What the verdict (``ldpflow.pipelines.verdict``) reads of the dead letters, from
    their tallies by reason, as the Beam jobs' counters give it."""
    classes: dict[str, int] = {}
    for reason, t in counts.items():
        name = reason_class(reason)
        classes[name] = classes.get(name, 0) + (t[0] if t[0] or not t[1] else 1)
    return {"dead_letters": sum(t[0] for t in counts.values()),
            "lost_parts": sum(t[1] for t in counts.values()),
            "lost_bytes": sum(t[2] for t in counts.values()),
            "lost_unsized": sum(t[3] for t in counts.values()),
            "reasons": dict(sorted(classes.items(), key=lambda kv: (-kv[1], kv[0])))}


@dataclasses.dataclass(frozen=True)
class RangeTask:
    """One byte range ``[start, end)`` of one file (``end`` None: to the end)."""

    index: int
    path: str
    fmt: str
    start: int = 0
    end: int | None = None


@dataclasses.dataclass(eq=False)
class RangeRead:
    """What one read of one range gives (the parts its flags asked for).

    ``tallies``: key -> :class:`Tally` (the valid reports counted, and the key's dead
    letters); ``reasons``: dead letters by reason; ``letters``: source -> dead letters as
    JSON lines; ``ids``: ``(key, bucket, hashes)`` pieces (an array, or a
    :class:`SpilledIds` with a spill); ``repeats``: ``(key, bucket, batch)`` pieces of the
    rows of repeated ids; ``users``: ``(bucket, key, batch)``
    pieces by user-hash bucket; ``census``: key -> the valid reports read (the accounting
    read); ``over``: the range's keys needed more than the job's budget, so it counted none
    (the driver reads it again for the keys admitted).
    """

    index: int
    records: int = 0
    census: dict[tuple, int] = dataclasses.field(default_factory=dict)
    over: bool = False
    tallies: dict[tuple, Tally] = dataclasses.field(default_factory=dict)
    reasons: dict[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    letters: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    ids: list[tuple[tuple, int, np.ndarray | SpilledIds]] = dataclasses.field(
        default_factory=list)
    repeats: list[tuple[tuple, int, ReportBatch]] = dataclasses.field(default_factory=list)
    users: list[tuple[int, tuple, ReportBatch]] = dataclasses.field(default_factory=list)
    read_ms: int = 0

    @property
    def dead_letters(self) -> int:
        return sum(t[0] for t in self.reasons.values())


def bucket_parts(hashes: np.ndarray, bits: int) -> Iterable[tuple[int, np.ndarray | None]]:
    """``(bucket, rows)`` of 64-bit hashes by their top ``bits`` bits (rows None: all)."""
    # uint16 buckets: numpy's stable argsort of 16-bit keys is a radix sort, O(n).
    bucket = (hashes >> np.uint64(64 - bits)).astype(np.uint16) if bits else \
        np.zeros(hashes.size, dtype=np.uint16)
    present = np.flatnonzero(np.bincount(bucket, minlength=1 << bits))
    if present.size == 1:
        yield int(present[0]), None
        return
    order = np.argsort(bucket, kind="stable")
    bounds = np.searchsorted(bucket[order], np.append(present, present[-1] + 1))
    for i, b in enumerate(present.tolist()):
        yield b, order[bounds[i]:bounds[i + 1]]


def _key_text(key) -> str:
    return ProtocolKey.coerce(key).to_json()


def shuffle_key(key, bucket: int) -> int:
    """A deterministic integer shuffle key of ``(key, bucket)``: the same in every process
    (engines partition by ``hash()``, which is salted per process for strings). Distinct
    pairs may share one; the grouped steps sort their pieces by the pair itself."""
    digest = hashlib.blake2b(_key_text(key).encode("utf-8"), digest_size=6).digest()
    return (int.from_bytes(digest, "little") << 16) | int(bucket)


def split_repeated(key, batch: ReportBatch, repeated: Mapping[str, np.ndarray]):
    """``(unique rows, repeated rows)`` of a batch: its rows whose id hash is not (is) in
    ``repeated[key text]`` (a sorted array); ``None`` for an empty part. The repeated rows
    take their full ids (``report_ids``) to the step that resolves them, which compares
    them; the unique rows are counted where they were read."""
    if batch.id_hashes is None or batch.report_ids is None:
        raise ValueError("deduplication needs batches read with keep=('id_hashes', "
                         "'report_ids')")
    known = repeated.get(_key_text(key))
    if known is None:
        return batch, None
    at = np.minimum(np.searchsorted(known, batch.id_hashes), known.size - 1)
    mask = known[at] == batch.id_hashes
    return (None if mask.all() else batch[~mask]), (batch[mask] if mask.any() else None)


def count_batch(batch: ReportBatch) -> Accumulator:
    """The exact counts of a batch the wire parse has checked (its oracle's
    ``count_valid``, without a second check): what every engine counts a key with."""
    return registry.from_key(batch.key).count_valid(batch.reports)


def scan_range(task: RangeTask, policy, keep: Sequence[str] = (), *, progress=None,
               opener=None) -> Iterable[Any]:
    """The parsed chunks (:class:`ldpflow.wire.parse.ParsedChunk`) of one range, through
    the wire layer's one parse path (:func:`ldpflow.wire.formats.read_reports`, with the
    run's acceptance policy, the batches keeping the envelope columns ``keep``); the job's
    ``progress`` (a :class:`~ldpflow.plan.progress.ProgressSpec`, or None) is told of each
    chunk and of the range's end. ``opener(path)`` -> a binary stream (default
    :func:`ldpflow.plan.files.open_file`; Beam passes its file systems'). The read loop of
    every engine: :func:`read_range` gathers the chunks of a range, Beam's ``ReadRangeFn``
    streams them."""
    from ldpflow.plan.progress import RangeProgress
    from ldpflow.wire import formats

    if opener is None:
        from ldpflow.plan.files import open_file as opener
    with opener(task.path) as stream:
        tracker = RangeProgress(progress, task.path, task.start, task.end, stream)
        for parsed in formats.read_reports(stream, task.fmt, source=task.path,
                                           start=task.start, end=task.end, policy=policy,
                                           keep=tuple(keep)):
            tracker.chunk(parsed.records)
            yield parsed
        tracker.done()


def read_range(task: RangeTask, policy, keep: Sequence[str] = (), *, account: bool = True,
               count: bool = True, ids: bool = False,
               repeated: Mapping[str, np.ndarray] | None = None, unique: bool = True,
               users: bool = False, max_job_bytes: int | None = None,
               refused: Collection[tuple] = (), spill: str | None = None,
               progress=None, opener=None) -> RangeRead:
    """Read one range; what it returns holds the parts asked for.

    Parameters
    ----------
    task : RangeTask
    policy : AcceptancePolicy
    keep : sequence of str
        Envelope columns the batches keep (``id_hashes`` for dedup, :data:`CAP_KEEP`).
    account : bool
        Count records and dead letters (the one read of a run that accounts for them).
    count : bool
        Count the valid reports per key (after the repeated rows are split off, when
        ``repeated`` is given).
    ids : bool
        Emit the id hashes of the valid reports, by id-hash bucket (``ids``).
    repeated : mapping, optional
        Key text -> sorted repeated id hashes: the rows of those ids go to ``repeats``
        (by id-hash bucket) instead of being counted; ``unique=False`` drops the others.
    users : bool
        Emit the (remaining) batches by user-hash bucket (``users``) instead of counting.
    max_job_bytes : int, optional
        The job's budget (``--max_job_bytes``): before the range allocates the accumulator
        of a key, the memory of its keys (:func:`key_memory`) is checked against it; past
        it the range drops its counts and only takes its ``census`` (``over``).
    refused : collection of tuple
        Keys refused by :func:`admit_keys`: their reports are neither counted nor emitted.
    spill : str, optional
        With ``ids``: a folder (on a disk every worker of the job sees) where the range's id
        hashes are written as they are read, one file per key of sorted runs
        (:class:`IdSpill`); the ``ids`` pieces are then :class:`SpilledIds` (where each
        bucket's hashes lie in the file) instead of the hashes, and :func:`repeated_ids`
        reads them in passes of bounded size.
    progress : ProgressSpec, optional
        The job's progress (:mod:`ldpflow.plan.progress`), which the accounting read adds
        its records and bytes to.
    opener : callable, optional
        ``opener(path)`` -> a binary stream (default :func:`ldpflow.plan.files.open_file`).
    """
    started = time.perf_counter()
    out = RangeRead(task.index)
    refused = frozenset(tuple(key) for key in refused)
    spilled: dict[tuple, IdSpill] = {}
    # One thread sorts and writes the spill of every key of the range (in order per key).
    pool = _spill_pool() if ids and spill is not None else None
    if pool is not None and repeated is None and not users and "id_hashes" in keep:
        # The id hashes are only spilled: the spill thread computes them too (from the
        # report_id column), while this thread counts.
        keep = (*keep, ID_COLUMN)
    try:
        _read_into(out, task, policy, keep, account, count, ids, repeated, unique, users,
                   max_job_bytes, refused, spill, spilled, progress, opener, pool)
        for key, writer in spilled.items():  # sorted and written while the range was read
            out.ids.extend((key, bucket, piece) for bucket, piece in writer.finish())
    finally:  # the thread ends first: no write runs into a closed file
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        for writer in spilled.values():
            writer.close()
    out.read_ms = int(1000 * (time.perf_counter() - started))
    return out


def _read_into(out: RangeRead, task: RangeTask, policy, keep, account, count, ids, repeated,
               unique, users, max_job_bytes, refused, spill, spilled, progress, opener,
               pool) -> None:
    """The body of :func:`read_range`: the range's chunks into ``out`` (and the id
    hashes into the range's :class:`IdSpill` writers, ``spilled``, by key)."""
    ahead: list = []  # the writes of all the range's keys waiting on the spill thread
    held = 0  # the memory of the keys this range counts (key_memory), within max_job_bytes
    for parsed in scan_range(task, policy, keep, progress=progress if account else None,
                             opener=opener):
        if account:
            out.records += parsed.records
            for letter in parsed.dead_letters:
                add_letter(out.reasons, letter)  # the range's own mapping
                out.letters.setdefault(letter.source, []).append(letter.to_json())
                if letter.key is not None:
                    key = tuple(letter.key)
                    out.tallies[key] = out.tallies.get(key, Tally(None)) + \
                        Tally(None, dead_letters=letter.count)
        for key, batch in parsed.batches.items():
            key = tuple(key)
            if key in refused:
                continue
            if account:
                out.census[key] = out.census.get(key, 0) + len(batch)
            if ids and spill is not None:  # sorted and written on a thread as they come
                if key not in spilled:
                    spilled[key] = IdSpill(spill, task.index, key, pool, ahead)
                if batch.id_hashes is not None:
                    spilled[key].add(batch.id_hashes)
                else:  # hashed on the spill thread (keep has ID_COLUMN)
                    column, rows = parsed.id_columns[batch.key]
                    spilled[key].add_column(column, rows, policy.id_key)
            elif ids:
                for bucket, rows in bucket_parts(batch.id_hashes, ID_BUCKET_BITS):
                    out.ids.append((key, bucket, batch.id_hashes if rows is None
                                    else batch.id_hashes[rows]))
            if repeated is not None:
                rest, repeats = split_repeated(key, batch, repeated)
                if repeats is not None:
                    for bucket, rows in bucket_parts(repeats.id_hashes, ID_BUCKET_BITS):
                        out.repeats.append((key, bucket,
                                            repeats if rows is None else repeats[rows]))
                batch = rest if unique else None
            if batch is None or not len(batch):
                continue
            if users:
                if batch.user_hashes is None:
                    raise ValueError(f"contribution caps need batches read with "
                                     f"keep={CAP_KEEP}")
                for bucket, rows in bucket_parts(batch.user_hashes, USER_BUCKET_BITS):
                    out.users.append((bucket, key, batch if rows is None else batch[rows]))
            elif count and not out.over:
                have = out.tallies.get(key)
                if max_job_bytes is not None and (have is None or have.accumulator is None):
                    held += key_memory(key)  # checked before the key's first allocation
                    if held > max_job_bytes:  # counted again once keys are admitted
                        out.over = True
                        out.tallies = {k: Tally(None, dead_letters=t.dead_letters)
                                       for k, t in out.tallies.items()}
                        continue
                out.tallies[key] = (have or Tally(None)) + Tally(count_batch(batch))


#: The hash ranges a spilled run is cut into within one id-hash bucket (2**7 = 128): a pass
#: of the disk dedup takes whole ones, so a bucket is resolved in at most 128 passes, each
#: read from the file by position (no map of the file, no search in it). With
#: :data:`DEDUP_PASS_BYTES`, passes stay that size up to 16 GiB of one key's hashes
#: (2 * 10^9 reports); the cut rows cost 1,032 bytes a run and bucket.
PASS_CUT_BITS = 7


@dataclasses.dataclass(frozen=True, eq=False)
class SpilledIds:
    """One range's id hashes of one key and one id-hash bucket, on disk, in the file
    ``path`` (raw little-endian uint64, :class:`IdSpill`): ``marks[i]`` are the rows of
    run ``i`` (each run sorted) where the bucket's ``2**PASS_CUT_BITS`` equal hash ranges
    start, and its end. What the id-hash shuffle moves instead of the hashes."""

    path: str
    marks: np.ndarray  # int64, shape (runs, 2**PASS_CUT_BITS + 1)

    @property
    def size(self) -> int:
        return int((self.marks[:, -1] - self.marks[:, 0]).sum())


_CUTS = 1 << PASS_CUT_BITS
#: The first hash of every cut of every id-hash bucket, and one past the last (2**64).
_EDGES = [i << (64 - ID_BUCKET_BITS - PASS_CUT_BITS)
          for i in range(1 << (ID_BUCKET_BITS + PASS_CUT_BITS))] + [1 << 64]
_EDGE_VALUES = np.array(_EDGES[:-1], dtype=np.uint64)


def _sorted_run(hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``hashes`` sorted, and where each cut of each id-hash bucket starts in them (and
    the end): one binary search for all of them."""
    ordered = np.sort(hashes)
    edges = np.empty(len(_EDGES), dtype=np.int64)
    edges[:-1] = np.searchsorted(ordered, _EDGE_VALUES)
    edges[-1] = ordered.size
    return ordered, edges


class IdSpill:
    """Writes one range's id hashes of one key to ``folder`` as they are read: each
    array given to :meth:`add` is sorted and appended to one file with one write (raw
    uint64, no header), and its id-hash buckets (and their cuts for the passes) are slices
    between edges found by one binary search (no per-bucket copy). With more than one
    thread (``LDPFLOW_THREADS``, :func:`ldpflow.core.parallel.threads`), the sort and the
    write run on a thread of their own while the range goes on being read and counted
    (NumPy's sort and the write release the interpreter lock); with one, in the caller.
    ``pool``: a one-thread executor to share (the writers of one range's keys), else the
    writer starts its own; ``ahead``: the list of writes waiting on it, shared by those
    writers, so that at most :data:`_SPILL_AHEAD` wait in all. :meth:`finish` gives the
    ``(bucket, SpilledIds)`` pieces, :meth:`close` stops an own thread (always call it)."""

    def __init__(self, folder: str, index: int, key, pool=None,
                 ahead: list | None = None) -> None:
        import os

        digest = hashlib.blake2b(_key_text(key).encode("utf-8"), digest_size=8).hexdigest()
        self.path = os.path.join(folder, f"ids-{int(index):06d}-{digest}.u64")
        self._file = open(self.path, "wb")  # noqa: SIM115 - closed by finish/close
        self._rows = 0
        self._runs: list[np.ndarray] = []  # each run's edges, as rows of the file
        self._pending: list[Any] = []  # the writes submitted and not yet waited for
        self._ahead: list[Any] = [] if ahead is None else ahead
        self._own = pool is None
        self._pool = _spill_pool() if pool is None else pool

    def _write(self, hashes: np.ndarray) -> None:
        ordered, edges = _sorted_run(hashes)
        self._file.write(ordered.astype("<u8", copy=False).data.cast("B"))
        self._runs.append(edges + self._rows)
        self._rows += ordered.size

    def add(self, hashes: np.ndarray) -> None:
        """Spill one array of id hashes (taken as it is: the caller does not change it)."""
        if len(hashes):
            self._submit(self._write, hashes)

    def add_column(self, column, rows: np.ndarray, key: bytes | None) -> None:
        """Spill the id hashes of ``rows`` of a ``report_id`` column (a parse's
        ``id_columns``; ``key``: the run's id key), computed on the writer's thread
        (:func:`ldpflow.wire.parse.id_column_hashes`): the same hashes, the same file."""
        if len(rows):
            self._submit(self._write_column, column, rows, key)

    def _write_column(self, column, rows: np.ndarray, key: bytes | None) -> None:
        self._write(id_column_hashes(column, rows, key, threads=False))

    def _submit(self, function, *args) -> None:
        """Run one write here with no thread; else queue it (one worker: the runs are
        written in order), at most :data:`_SPILL_AHEAD` waiting on the thread, whichever
        writers of the range queued them (the memory of as many chunks' ids), else the
        caller waits for the oldest."""
        if self._pool is None:
            function(*args)
            return
        waiting = []
        for pending in self._pending:
            if pending.done():
                pending.result()  # raises what the write raised
            else:
                waiting.append(pending)
        future = self._pool.submit(function, *args)
        self._pending = [*waiting, future]
        self._ahead[:] = [pending for pending in self._ahead if not pending.done()]
        self._ahead.append(future)
        while len(self._ahead) > _SPILL_AHEAD:
            self._ahead.pop(0).result()

    def finish(self) -> list[tuple[int, SpilledIds]]:
        """Wait for the writes, close the file; the ``(bucket, SpilledIds)`` of every
        bucket that has hashes."""
        for pending in self._pending:
            pending.result()  # raises what the write raised
        self._pending = []
        self.close()
        if not self._runs:
            return []
        edges = np.stack(self._runs)
        out = []
        for bucket in range(1 << ID_BUCKET_BITS):
            marks = edges[:, bucket * _CUTS:(bucket + 1) * _CUTS + 1]
            marks = marks[marks[:, -1] > marks[:, 0]]  # the runs with hashes of the bucket
            if marks.size:
                out.append((bucket, SpilledIds(self.path, np.ascontiguousarray(marks))))
        return out

    def close(self) -> None:
        if self._own and self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        self._pool = None
        self._file.close()


#: The chunks' id hashes (or id columns) that may wait for the spill thread.
_SPILL_AHEAD = 2


def _spill_pool():
    """A one-thread executor for :class:`IdSpill` (None with one thread,
    ``LDPFLOW_THREADS=1``: the caller sorts and writes)."""
    if parallel.threads() <= 1:
        return None
    import concurrent.futures

    return concurrent.futures.ThreadPoolExecutor(1, "ldpflow-spill")


def spill_ids(folder: str, index: int, key, parts: Sequence[np.ndarray]
              ) -> list[tuple[int, SpilledIds]]:
    """Write one range's id hashes of one key (``parts``, arrays of any buckets) with an
    :class:`IdSpill`; returns the ``(bucket, SpilledIds)`` pieces that the id-hash shuffle
    moves instead of the hashes."""
    writer = IdSpill(folder, index, key)
    try:
        for part in parts:
            writer.add(np.asarray(part, dtype=np.uint64))
        return writer.finish()
    finally:
        writer.close()


def _read_pass(parts: Sequence[tuple[int, str, tuple[int, int]]]
               ) -> list[tuple[int, np.ndarray]]:
    """One pass's ``(range, hashes)``: the rows ``[start, stop)`` of ``(range, path,
    (start, stop) rows)`` read from the files into one buffer (the parts are views of it)."""
    from ldpflow.plan.packed import SpillError

    rows = [int(b - a) for _, _, (a, b) in parts]
    buffer = np.empty(sum(rows), dtype=np.uint64)
    out: list[tuple[int, np.ndarray]] = []
    at = 0
    handles: dict[str, Any] = {}
    try:
        for (r, path, (start, _)), count in zip(parts, rows, strict=True):
            handle = handles.get(path)
            if handle is None:
                try:
                    handle = handles[path] = open(path, "rb")  # noqa: SIM115 - closed below
                except FileNotFoundError:
                    raise SpillError(f"spill file {path} is missing (the run's temporary "
                                     "folder was changed)") from None
            handle.seek(8 * int(start))
            view = buffer[at:at + count]
            if handle.readinto(view.data.cast("B")) != 8 * count:
                raise SpillError(f"spill file {path} is damaged: its id hashes end before "
                                 f"row {int(start) + count}")
            out.append((r, view))
            at += count
    finally:
        for handle in handles.values():
            handle.close()
    return out


def _spilled_passes(parts: list[tuple[int, SpilledIds]], pass_bytes: int, at_least: int = 1
                    ) -> list[list[tuple[int, str, tuple[int, int]]]]:
    """The passes over one spilled group (the runs of one bucket): each a list of
    ``(range, path, (start, stop))`` row slices to read (:func:`_read_pass`), successive
    hash ranges of about ``pass_bytes`` together (at least ``at_least`` of them, for as
    many threads; at most ``2**PASS_CUT_BITS``). A pass takes whole cuts of the bucket
    (:data:`PASS_CUT_BITS`), whose rows in every run the spill recorded: each hash is read
    once, and every copy of a hash falls in one pass (the cuts are hash values; the keyed
    hashes are uniform, so the passes are even)."""
    total = 8 * sum(piece.size for _, piece in parts)
    passes = max(1, int(at_least), -(-total // max(int(pass_bytes), 8)))
    passes = min(passes, _CUTS)
    bounds = [(_CUTS * i) // passes for i in range(passes + 1)]
    out: list[list[tuple[int, str, tuple[int, int]]]] = [[] for _ in range(passes)]
    for r, piece in parts:
        for marks in piece.marks:
            for i in range(passes):
                start, stop = int(marks[bounds[i]]), int(marks[bounds[i + 1]])
                if stop > start:
                    out[i].append((r, piece.path, (start, stop)))
    return out


def _resolve_pass(slices: Sequence[tuple[int, str, tuple[int, int]]], ranges: bool
                  ) -> tuple[np.ndarray, set[int]]:
    return _repeated_of(_read_pass(slices), ranges)


def _grouped(pieces: Iterable[tuple]) -> dict[tuple, list]:
    """Pieces ``(a, b, value)`` gathered by ``(a, b)``, in a deterministic order."""
    groups: dict[tuple, list] = {}
    for a, b, value in pieces:
        groups.setdefault((a, b), []).append(value)
    return dict(sorted(groups.items(), key=lambda kv: (_key_text(kv[0][0]), kv[0][1])))


def _repeated_of(parts: list[tuple[int, np.ndarray]], ranges: bool = True
                 ) -> tuple[np.ndarray, set[int]]:
    """The hashes seen more than once among ``(range, hashes)`` parts, and (``ranges``)
    the ranges holding them. A thin call into :func:`ldpflow.core.dedup.repeated_hashes`."""
    if not parts:
        return np.zeros(0, dtype=np.uint64), set()
    hashes = np.asarray(parts[0][1]) if len(parts) == 1 else \
        np.concatenate([h for _, h in parts])
    repeated = repeated_hashes(hashes)
    if not repeated.size or not ranges:
        return repeated, set()
    holding = set()
    for r, h in parts:
        if r not in holding:
            at = np.minimum(np.searchsorted(repeated, h), repeated.size - 1)
            if (repeated[at] == h).any():
                holding.add(r)
    return repeated, holding


def repeated_ids(pieces: Iterable[tuple[tuple, int, int, np.ndarray | SpilledIds]],
                 pass_bytes: int = DEDUP_PASS_BYTES, ranges: bool = True
                 ) -> list[tuple[str, np.ndarray, list[int]]]:
    """One id-hash shuffle group of ``(key, bucket, range index, hashes)`` pieces ->
    ``(key text, sorted hashes seen more than once, ranges holding them)`` per key and
    bucket that has any. ``hashes`` is an array, or a :class:`SpilledIds` (runs of a file
    written by :func:`spill_ids`): then the group is resolved in passes over hash ranges
    of about ``pass_bytes`` (:data:`DEDUP_PASS_BYTES`), with the same result; the passes
    run on :func:`ldpflow.core.parallel.threads` threads (a large group is cut into at
    least that many). ``ranges=False``: the ranges are not looked for (an empty list;
    Beam's read takes every range's rows of the repeated ids with a side input instead of
    reading those ranges again)."""
    out = []
    for (key, _), parts in _grouped((k, b, (r, h)) for k, b, r, h in pieces).items():
        on_disk = [(r, h) for r, h in parts if isinstance(h, SpilledIds)]
        in_memory = [(r, h) for r, h in parts if not isinstance(h, SpilledIds)]
        if on_disk and in_memory:
            raise ValueError("an id-hash group must be all on disk or all in memory")
        if not on_disk:
            results = [_repeated_of(in_memory, ranges)]
        else:
            workers = parallel.threads()
            rows = sum(piece.size for _, piece in on_disk)
            passes = _spilled_passes(on_disk, pass_bytes, min(workers, rows // parallel.MIN_ROWS))
            workers = min(workers, len(passes))
            resolve = functools.partial(_resolve_pass, ranges=ranges)
            # each thread reads its pass when it starts it
            results = parallel.map_parts(resolve, passes, workers)
        found = [repeated for repeated, _ in results if repeated.size]
        if found:
            holding = set().union(*(where for _, where in results))
            out.append((_key_text(key), np.concatenate(found), sorted(holding)))
    return out


def drop_copies(pieces: Iterable[tuple[tuple, int, ReportBatch]], keep_rows: bool = False
                ) -> list[tuple[tuple, Any]]:
    """One shuffle group of the rows of repeated ids, ``(key, bucket, batch)`` pieces ->
    per key ``(key, Tally)``: the copies dropped (``accumulator``: their counts, to take
    away from a tally that counted them; ``duplicates``, ``conflicting``). With
    ``keep_rows`` also ``(key, batch)`` of the kept rows (for the contribution cap), and
    the tally without counts (Beam's form: it counts the kept rows). Which copy is kept
    does not depend on arrival order (:func:`ldpflow.core.dedup.first_copies`)."""
    out: list[tuple[tuple, Any]] = []
    for (key, _), batches in _grouped(pieces).items():
        batch = batches[0] if len(batches) == 1 else ReportBatch.concat(batches)
        kept, conflicting = first_copies(batch.id_hashes, batch.reports.columns.values(),
                                         ids=batch.report_ids)
        dropped = int(kept.size - np.count_nonzero(kept))
        if keep_rows:
            out.append((key, Tally(None, dropped, conflicting)))
            out.append((key, batch[kept] if dropped else batch))
        elif dropped:
            out.append((key, Tally(count_batch(batch[~kept]), dropped, conflicting)))
    return out


def _payload_order(pieces: Sequence[tuple[tuple, ReportBatch]]) -> tuple[np.ndarray, np.ndarray]:
    """The cap's last tie-break of copies of one report (same user, time and id: only
    without dedup) over the concatenated rows of ``pieces`` (sorted by key text): the rank
    of each row's key text, then of its payload among its key's rows (:func:`payload_ranks`),
    so which copies the cap keeps does not depend on arrival order."""
    texts = [_key_text(key) for key, _ in pieces]
    rank_of = {text: i for i, text in enumerate(sorted(set(texts)))}
    sizes = [len(batch) for _, batch in pieces]
    key_rank = np.repeat(np.array([rank_of[t] for t in texts], dtype=np.int64), sizes)
    payload = np.zeros(key_rank.size, dtype=np.int64)
    ends = np.cumsum(sizes)
    for text in rank_of:
        mine = [i for i, t in enumerate(texts) if t == text]
        rows = np.concatenate([np.arange(ends[i] - sizes[i], ends[i]) for i in mine])
        batch = ReportBatch.concat([pieces[i][1] for i in mine]) if len(mine) > 1 \
            else pieces[mine[0]][1]
        payload[rows] = payload_ranks(list(batch.reports.columns.values()))
    return key_rank, payload


def cap_users(pieces: Iterable[tuple[tuple, ReportBatch]], cap: int, keep_rows: bool = False
              ) -> tuple[list[tuple[tuple, Any]], tuple[int, float]]:
    """One user-hash bucket's ``(key, batch)`` pieces, of any keys -> per key the
    :class:`Tally` of each user's ``cap`` earliest reports (and the others as ``capped``),
    and ``(users, the largest epsilon one user spent)``. With ``keep_rows`` (Beam's form:
    it counts the kept rows where they arrive), the tallies hold no counts (only
    ``capped``) and are followed by the ``(key, batch)`` pieces of the kept rows (none
    empty)."""
    pieces = sorted(pieces, key=lambda kb: _key_text(kb[0]))  # order-free: capped_rows ranks
    if not pieces:
        return [], (0, 0.0)
    batches = [batch for _, batch in pieces]
    user_hashes = np.concatenate([b.user_hashes for b in batches])
    keep = capped_rows(user_hashes, np.concatenate([b.event_times for b in batches]),
                       tie_breaks(np.concatenate([b.report_ids for b in batches])), cap,
                       ties=lambda: _payload_order(pieces))
    epsilons = np.concatenate([np.full(len(b), float(b.protocol.epsilon)) for b in batches])
    summary = epsilon_per_user(user_hashes[keep], epsilons[keep])
    tallies: dict[tuple, Tally] = {}
    rows: list[tuple[tuple, ReportBatch]] = []
    start = 0
    for key, batch in pieces:
        mine = keep[start:start + len(batch)]
        start += len(batch)
        capped = int(mine.size - np.count_nonzero(mine))
        kept = batch[mine] if capped else batch
        if keep_rows:
            tally = Tally(None, capped=capped)
            if len(kept):
                rows.append((key, kept))
        else:
            tally = Tally(count_batch(kept) if len(kept) else None, capped=capped)
        tallies[key] = tallies[key] + tally if key in tallies else tally
    return [*tallies.items(), *rows], summary


def key_memory(key) -> int:
    """The memory, in bytes, one key needs from its first report to its result
    (:func:`ldpflow.wire.parse.key_bytes`, decided from the parameters alone; 0 for a key
    that is not a frequency oracle's)."""
    from ldpflow.wire.parse import key_bytes

    return key_bytes(ProtocolKey.coerce(key).protocol) or 0


def _mib(size: int) -> str:
    return f"{size / 2**20:,.1f} MiB"


def admit_keys(census: Mapping[tuple, int], budget: int | None) -> dict[tuple, str]:
    """The job-wide admission of parameter sets: ``{key: valid reports read}`` -> the keys
    refused, with their reason (``{}``: all admitted).

    Keys are taken by reports read, most first, ties by key text, and each is admitted while
    the memory of the keys admitted (:func:`key_memory`) stays within ``budget``
    (``--max_job_bytes``; None: no budget); a key that does not fit is refused and the next
    ones are still tried, so the outcome depends on the set of keys and their counts only,
    never on the order they were read in. Every engine decides with this function."""
    if budget is None:
        return {}
    order = sorted(census.items(), key=lambda kv: (-int(kv[1]), _key_text(kv[0])))
    used, refused = 0, {}
    for key, _ in order:
        need = key_memory(key)
        if used + need <= budget:
            used += need
            continue
        protocol = ProtocolKey.coerce(key)
        size = dict(protocol.parameters).get("domain_size")
        refused[tuple(key)] = (
            f"policy: past the job's memory budget of {_mib(budget)} for all parameter sets "
            f"(--max_job_bytes): oracle {protocol.name} with domain_size {size} needs about "
            f"{_mib(need)}, and the sets with more reports took the budget")
    return refused


def admission_letter(source: str, key, reason: str, count: int):
    """The dead letter of a key refused by :func:`admit_keys`: its ``count`` valid reports,
    without a record (``source``: the job's input pattern, so every engine writes it to one
    file of one name)."""
    from ldpflow.wire.envelope import DeadLetter

    return DeadLetter(source, reason, None, tuple(key), int(count))


def estimate_key(item: tuple[tuple, Tally], methods: Sequence[str]) -> dict[str, Any]:
    """One key's tally -> its result dict (:func:`ldpflow.wire.results.estimate_result`,
    post-processed by every method)."""
    from ldpflow.core.postprocess import postprocess
    from ldpflow.wire.results import estimate_result

    key, tally = item
    return estimate_result(key, tally.accumulator, tally.dead_letters, tuple(methods),
                           postprocess, duplicates=tally.duplicates, capped=tally.capped)


def file_ranges(path: str, size: int, fmt: str, range_bytes: int, opener=None
                ) -> list[tuple[int, int | None]]:
    """The byte ranges ``(start, end)`` one file of ``size`` bytes is read in: a
    compressed file, or one of at most ``range_bytes``, whole (``[(0, None)]``); else
    :func:`ldpflow.wire.formats.plan_ranges` (Parquet at row groups). ``opener(path)`` ->
    a binary stream (default :func:`ldpflow.plan.files.open_file`)."""
    from ldpflow.wire import formats

    if formats.is_compressed(path) or size <= range_bytes:
        return [(0, None)]
    if opener is None:
        from ldpflow.plan.files import open_file as opener
    with opener(path) as stream:
        return list(formats.plan_ranges(stream, fmt, size, True, range_bytes))


# -- poisoning detection over the reports counted (the math: ldpflow.core.poisoning) ----------
__all__ += ["poisoning_plans", "poisoning_tallies", "add_poisoning", "advance_poisoning",
            "poisoning_sections", "attach_poisoning"]


def poisoning_plans(keys: Iterable[tuple], level: float | None = None,
                    population_level: float | None = None) -> dict[tuple, Any]:
    """The first pass's :class:`~ldpflow.core.poisoning.DefencePlan` of every key of an
    oracle the defence covers (``poisoning.SUPPORTED``; other keys get none)."""
    from ldpflow.core import poisoning

    if population_level is None:
        population_level = poisoning.DEFAULT_POPULATION_LEVEL
    return {tuple(key): poisoning.initial_plan(registry.from_key(key), level, population_level)
            for key in keys if ProtocolKey.coerce(key).name in poisoning.SUPPORTED}


def poisoning_tallies(pieces: Iterable[tuple[tuple, Any]], plans: Mapping[tuple, Any]
                      ) -> list[tuple[tuple, Any]]:
    """One pass of the defence over ``(key, batch)`` pieces of the reports counted: per key
    that has a plan, the :class:`~ldpflow.core.poisoning.PoisoningTally` of its pieces
    (added exactly, :func:`add_poisoning`). Pieces that are no non-empty
    :class:`ReportBatch` (the tallies of copies dropped) are skipped."""
    from ldpflow.core import poisoning

    out: dict[tuple, Any] = {}
    for key, batch in pieces:
        key = tuple(key)
        plan = plans.get(key)
        if plan is None or not isinstance(batch, ReportBatch) or not len(batch):
            continue
        found = poisoning.tally(plan, batch.reports)
        out[key] = add_poisoning(out[key], found) if key in out else found
    return list(out.items())


def add_poisoning(a, b):
    """The sum of two tallies of one pass, as a new tally (neither input changes)."""
    from ldpflow.core.poisoning import PoisoningTally

    first = PoisoningTally(a.pass_index, {name: value.copy() for name, value in a.counts.items()})
    return first.merge(b)


def advance_poisoning(plans: Mapping[tuple, Any], tallies: Mapping[tuple, Any]
                      ) -> dict[tuple, Any]:
    """The next pass's plans: of the keys whose reports this pass tallied."""
    from ldpflow.core import poisoning

    return {key: poisoning.advance(plans[key], tally) for key, tally in tallies.items()}


def poisoning_sections(plans: Mapping[tuple, Any], tallies: Mapping[tuple, Any]
                       ) -> dict[tuple, dict[str, Any]]:
    """After the last pass: key -> its ``poisoning`` section
    (:meth:`~ldpflow.core.poisoning.PoisoningReport.to_dict`)."""
    from ldpflow.core import poisoning

    return {key: poisoning.finish(plans[key], tally).to_dict()
            for key, tally in tallies.items()}


def attach_poisoning(result: dict[str, Any], sections: Mapping[Any, dict]) -> dict[str, Any]:
    """A key's result dict with its ``poisoning`` section: from ``sections`` (by key), or
    an error for an oracle the defence does not cover; a covered key without reports keeps
    its result as it is. Every engine attaches the sections with this function."""
    from ldpflow.core import poisoning

    key = ProtocolKey(result["oracle"], result["parameters"])
    section = sections.get(key)
    if section is None and key.name not in poisoning.SUPPORTED:
        section = {"error": f"no poisoning defence for oracle {key.name!r}; it covers "
                            f"{' '.join(poisoning.SUPPORTED)}"}
    return result if section is None else {**result, "poisoning": section}


__all__ += ["capped_batches"]


def capped_batches(pieces: Iterable[tuple[tuple, ReportBatch]], cap: int
                   ) -> list[tuple[tuple, ReportBatch]]:
    """One user-hash bucket's ``(key, batch)`` pieces -> the rows :func:`cap_users` counts
    (each user's ``cap`` earliest reports, :func:`ldpflow.core.contribution.capped_rows`),
    as ``(key, batch)`` pieces: what the poisoning defence examines after a cap."""
    pieces = list(pieces)
    if not pieces:
        return []
    keep = capped_rows(np.concatenate([b.user_hashes for _, b in pieces]),
                       np.concatenate([b.event_times for _, b in pieces]),
                       tie_breaks(np.concatenate([b.report_ids for _, b in pieces])), cap)
    out, start = [], 0
    for key, batch in pieces:
        mine = keep[start:start + len(batch)]
        start += len(batch)
        if mine.any():
            out.append((key, batch[mine]))
    return out
