"""Streaming estimation: Pub/Sub messages -> deduplicated, windowed, consistent estimates.

``EstimateStream`` takes a PCollection of messages (``PubsubMessage`` or raw bytes; a
message holds an Avro container of reports, or JSON) and returns ``{"estimates": ...,
"dead_letters": ...}``:

1. ``DecodeMessagesFn`` decodes and validates every report (dead letters with reasons)
   and splits each batch by event-time cell, timestamped at the cell's start (reports carry
   their own event time, or the message's ``--timestamp_attribute`` sets it); without a
   cap, a bundle's Avro messages are joined and decoded once (message by message when
   anything is refused), which gives the same rows in the same order;
3. ``DeduplicateReportsFn`` (stateful, per key, cell and id-hash bucket, the top
   ``ID_BUCKET_BITS`` bits of the id hash; one bucket with a cap) drops reports whose id
   was seen before, so redelivery changes no estimate (copies share their id and event
   time, so one state holds every copy), and counts the rest into an exact integer
   accumulator. The state keeps the keyed id hashes with the full ids, as sorted arrays,
   and a hash seen before marks a duplicate only when its id is the one seen: a distinct
   report is never dropped;
4. windows (fixed or sliding) with watermark, early and late firings and *accumulating*
   panes; ``CombinePerKey`` of the exact integer accumulators, so every pane is estimated
   from the merged counts of all the window's reports and is consistent on its own;
5. ``FormatPaneFn`` estimates and post-processes, tagging window and pane.

With ``max_reports_per_user``, ``CapUsersFn`` (stateful, per user-hash bucket and window)
keeps each user's first reports in a window up to the cap, between 3 and 4: in arrival
order across batches (a stream cannot wait for a window's earliest reports), by event time
then the public hash of the report id within a batch (``caps.tie_breaks``). Sliding windows
cap each window on its own.

Steps 1 to 4 (and the cap) are :class:`WindowReports`, which the windowed heavy hitters
(:mod:`ldpflow.transforms.windowed_heavy_hitters`) share: there the deduplication also
yields a :class:`Duplicates` count per cell that dropped copies.

Counters (namespace ``ldpflow``): ``messages``, ``records``, ``reports``, ``dead_letters``,
``duplicates``, ``reports_capped``.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import math
import typing
from collections.abc import Mapping, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.coders import PickleCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms import trigger, window
from apache_beam.transforms.userstate import CombiningValueStateSpec
from apache_beam.utils.timestamp import Duration, Timestamp
from apache_beam.utils.windowed_value import WindowedValue

from ldpflow.core import validation
from ldpflow.core.dedup import SeenIds, first_copies
from ldpflow.core.keys import ProtocolKey
from ldpflow.core.postprocess import postprocess
from ldpflow.plan.steps import bucket_parts
from ldpflow.transforms.caps import tie_breaks
from ldpflow.transforms.combine import FrequencyOracleCombineFn
from ldpflow.transforms.io import as_policy
from ldpflow.wire import avro, formats
from ldpflow.wire.envelope import DeadLetter
from ldpflow.wire.messages import join_avro_messages
from ldpflow.wire.parse import AcceptancePolicy
from ldpflow.wire.results import estimate_result

__all__ = [
    "WindowSpec",
    "DecodeMessagesFn",
    "split_cells",
    "ID_BUCKET_BITS",
    "JOIN_BYTES",
    "DeduplicateReportsFn",
    "FormatPaneFn",
    "CapUsersFn",
    "EstimateStream",
    "WindowReports",
    "Duplicates",
    "parse_event_time",
]

_LOGGER = logging.getLogger(__name__)
PANE_TIMING = {0: "EARLY", 1: "ON_TIME", 2: "LATE", 3: "UNKNOWN"}


def parse_event_time(text: str) -> int:
    """Milliseconds since the epoch from an attribute: an integer, or RFC 3339 text."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    stamp = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if stamp.tzinfo is None:
        raise ValueError(f"event time {text!r} has no time zone")
    return int(round(stamp.timestamp() * 1000))


class WindowSpec:
    """Windows, firings and lateness of a streaming estimate (all times in seconds).

    Parameters
    ----------
    size : float
        Window length, > 0.
    period : float, optional
        Sliding windows start every ``period`` seconds (``size`` must be a multiple of it);
        ``None`` for fixed windows.
    allowed_lateness : float
        Late reports update their window (a LATE pane each) until the watermark passes the
        window's end by this much; later ones are dropped.
    early_firing : float
        Emit an EARLY pane every this many seconds of processing time while data arrives
        (0: none).
    """

    def __init__(self, size: float, period: float | None = None, allowed_lateness: float = 0.0,
                 early_firing: float = 0.0):
        if not size > 0:
            raise ValueError(f"window_size must be > 0 seconds, got {size!r}")
        if period is not None:
            if not 0 < period <= size:
                raise ValueError(f"window_period must be in (0, window_size], got {period!r}")
            if round(size / period) * period != size:
                raise ValueError(
                    f"window_size must be a multiple of window_period, got {size!r} and {period!r}")
        if not allowed_lateness >= 0:
            raise ValueError(f"allowed_lateness must be >= 0 seconds, got {allowed_lateness!r}")
        if not early_firing >= 0:
            raise ValueError(f"early_firing must be >= 0 seconds, got {early_firing!r}")
        self.size, self.period = float(size), (None if period is None else float(period))
        self.allowed_lateness, self.early_firing = float(allowed_lateness), float(early_firing)

    @property
    def cell(self) -> float:
        """The event-time cell: every report of a cell lies in the same windows."""
        return self.period if self.period is not None else self.size

    def window_fn(self):
        if self.period is None:
            return window.FixedWindows(self.size)
        return window.SlidingWindows(self.size, self.period)

    def window_into(self) -> beam.WindowInto:
        # AfterProcessingTime takes whole seconds.
        early = (trigger.AfterProcessingTime(int(math.ceil(self.early_firing)))
                 if self.early_firing else None)
        late = trigger.AfterCount(1) if self.allowed_lateness else None
        return beam.WindowInto(
            self.window_fn(),
            trigger=trigger.AfterWatermark(early=early, late=late),
            accumulation_mode=trigger.AccumulationMode.ACCUMULATING,
            allowed_lateness=Duration(seconds=self.allowed_lateness),
        )

    def cell_window_into(self) -> beam.WindowInto:
        return beam.WindowInto(window.FixedWindows(self.cell),
                               allowed_lateness=Duration(seconds=self.allowed_lateness))


DEAD_LETTERS = "dead_letters"
#: The seen-id state is kept per key, event-time cell and id-hash bucket (the hash's top
#: bits): each state holds about 1/2**bits of a cell's ids, so a cell's ids are spread over
#: that many keys (and workers) and no one state grows with the whole cell.
ID_BUCKET_BITS = 2


class DecodeMessagesFn(beam.DoFn):
    """Messages -> ``(key text, ReportBatch)`` per event-time cell, timestamped at the cell's
    start, and a ``dead_letters`` output of :class:`DeadLetter`.

    Every report of a cell lies in the same windows, and every copy of a report in the same
    cell (copies share their event time), so deduplication and windowing can work on cells.

    With ``join`` (as :class:`WindowReports` has it without a cap), the Avro messages of a
    bundle are decoded together, at the bundle's end: each run of consecutive messages of
    one header (but for the sync marker), one timestamp attribute value and one window, of
    up to :data:`JOIN_BYTES` in all, is joined into one container
    (:func:`~ldpflow.wire.messages.join_avro_messages`) and decoded once, since a decode's
    fixed cost (about 2 ms, a 1,000-report message's whole decode) would otherwise be paid
    per message. The joined rows are the messages' rows in arrival order, so every later
    step gives what it gives on the messages one by one; when the joined decode refuses
    anything, the run's messages are decoded one by one instead, so every dead letter names
    its own message. A capped stream decodes message by message (``join=False``, the
    default): the cap ranks the reports of one batch together (by event time, then id), and
    across batches in arrival order, so a joined run would change which reports it keeps.
    """

    def __init__(self, cell_seconds: float,
                 expect: AcceptancePolicy | Mapping[str, Any] | None = None,
                 timestamp_attribute: str | None = None, keep: tuple[str, ...] = (),
                 bucket_bits: int = ID_BUCKET_BITS, join: bool = False):
        super().__init__()
        self._bucket_bits = int(bucket_bits)
        self._keep = _KEEP + tuple(keep)
        self._cell_ms = int(round(cell_seconds * 1000))
        self._policy = as_policy(expect)
        self._attribute = timestamp_attribute
        self._join = bool(join)
        self._pending: list = []
        self._messages = Metrics.counter("ldpflow", "messages")
        self._records = Metrics.counter("ldpflow", "records")
        self._reports = Metrics.counter("ldpflow", "reports")
        self._dead = Metrics.counter("ldpflow", "dead_letters")
        _import_avro_reader()  # where the pipeline is built: part of a job's start

    def setup(self):
        _import_avro_reader()

    def start_bundle(self):
        self._pending = []

    def process(self, message, timestamp=beam.DoFn.TimestampParam, win=beam.DoFn.WindowParam):
        if self._join:  # decoded at the bundle's end, with the bundle's other messages
            self._pending.append((message, timestamp, win))
            return
        for tag, value, stamp in self._decode_one(message):
            if tag is None:
                yield window.TimestampedValue(value, stamp)
            else:  # the message's own timestamp
                yield beam.pvalue.TaggedOutput(tag, value)

    def finish_bundle(self):
        pending, self._pending = self._pending, []
        for run in self._runs(pending):
            joined = self._decode_run([m for m, _, _ in run]) if len(run) > 1 else None
            if joined is not None:  # every output is a cell, at the cell's start
                outputs = [(output, None, run[0][2]) for output in joined]
            else:
                outputs = [(output, timestamp, win) for message, timestamp, win in run
                           for output in self._decode_one(message)]
            for (tag, value, stamp), timestamp, win in outputs:
                value = WindowedValue(value, timestamp if stamp is None else stamp, (win,))
                yield value if tag is None else beam.pvalue.TaggedOutput(tag, value)

    def _event_time(self, message) -> tuple[int | None, str | None]:
        """The timestamp attribute's event time (ms), or the problem with it."""
        if not self._attribute:
            return None, None
        attributes = getattr(message, "attributes", None) or {}
        try:
            return parse_event_time(str(attributes[self._attribute])), None
        except (KeyError, ValueError, OverflowError) as exc:
            return None, f"message attribute {self._attribute!r} missing or invalid: {exc!r}"

    def _runs(self, pending):
        """Runs of consecutive ``(message, timestamp, window)`` that may be joined: Avro
        bodies of one event-time attribute and window (any other message is a run of its
        own). A joined run's outputs are all cells, timestamped by their event times, so
        the messages' own timestamps may differ."""
        run, run_key, run_bytes = [], None, 0
        for message, timestamp, win in pending:
            data = getattr(message, "data", message)
            stamp, problem = self._event_time(message)
            joinable = (problem is None and isinstance(data, (bytes, bytearray))
                        and data[:4] == avro.MAGIC)
            key = (stamp, win) if joinable else None
            if run and (key is None or key != run_key or
                        run_bytes + len(data) > JOIN_BYTES):
                yield run
                run, run_bytes = [], 0
            if key is None:
                yield [(message, timestamp, win)]
                continue
            run.append((message, timestamp, win))
            run_key, run_bytes = key, run_bytes + len(data)
        if run:
            yield run

    def _decode_run(self, run):
        """The outputs of a run of messages decoded as one container, or None when they do
        not join or their joined decode refuses anything."""
        joined = join_avro_messages([getattr(m, "data", m) for m in run])
        if joined is None:
            return None
        parsed = formats.decode_message(joined, "pubsub:joined", self._policy, self._keep)
        if any(p.dead_letters for p in parsed):
            return None
        stamp, _ = self._event_time(run[0])
        self._messages.inc(len(run))
        return list(self._cell_outputs(parsed, stamp))

    def _decode_one(self, message):
        """``(None, cell value, cell start)`` and ``(DEAD_LETTERS, letter, None)`` outputs
        of one message (None: the message's timestamp)."""
        data = getattr(message, "data", message)
        source = f"pubsub:{getattr(message, 'message_id', None) or 'message'}"
        self._messages.inc()
        stamp, problem = self._event_time(message)
        parsed = formats.decode_message(data, source, self._policy, self._keep)
        dead = [letter for p in parsed for letter in p.dead_letters]
        if problem is not None:  # the message's reports have no event time
            dead += [DeadLetter(source, problem, None, key, len(batch))
                     for p in parsed for key, batch in p.batches.items()]
            parsed = [dataclasses.replace(p, batches={}) for p in parsed]
        self._dead.inc(sum(letter.count for letter in dead))
        yield from self._cell_outputs(parsed, stamp)
        for letter in dead:
            yield DEAD_LETTERS, letter, None

    def _cell_outputs(self, parsed, stamp):
        self._records.inc(sum(p.records for p in parsed))
        batches = [(key, batch) for p in parsed for key, batch in p.batches.items()]
        if stamp is not None:
            for _, batch in batches:
                batch.event_times[:] = stamp
        self._reports.inc(sum(len(b) for _, b in batches))
        for key, batch in batches:
            for cell in split_cells(ProtocolKey.coerce(key).to_json(), batch, self._cell_ms,
                                    self._bucket_bits):
                yield None, cell.value, cell.timestamp


def _import_avro_reader() -> None:
    """Import the Avro decode's reader (polars, about a second on a busy machine) when the
    decode is made and set up, rather than inside the first bundle of reports."""
    try:
        import polars  # noqa: F401
    except ImportError:  # pragma: no cover - messages then decode record by record
        pass


_KEEP = ("id_hashes", "report_ids", "event_times")
#: The most message bytes decoded as one joined container (a larger run is cut in runs of
#: up to this size): the decode's memory grows with it, its fixed cost is paid per run.
JOIN_BYTES = 32 << 20
_USER_BUCKET_BITS = 4  # state cells per window for the contribution cap


def split_cells(key: str, batch, cell_ms: int, bucket_bits: int = 0):
    """One ``TimestampedValue((state key, sub-batch))`` per event-time cell of ``batch`` and,
    with ``bucket_bits``, per id-hash bucket (the plan's split,
    :func:`ldpflow.plan.steps.bucket_parts`): the state key is then ``key`` and the bucket
    (``KEY#BUCKET``), and every copy of a report (one id, one event time) lands in one. Each
    sub-batch keeps its rows in the batch's order."""
    cells = batch.event_times // cell_ms
    distinct = np.unique(cells).tolist()
    for cell in distinct:
        part = batch if len(distinct) == 1 else batch[cells == cell]
        start = Timestamp(micros=cell * cell_ms * 1000)
        if not bucket_bits:
            yield window.TimestampedValue((key, part), start)
            continue
        for bucket, rows in bucket_parts(part.id_hashes, bucket_bits):
            yield window.TimestampedValue((f"{key}#{bucket}", part if rows is None
                                           else part[rows]), start)


class SeenIdsCombineFn(beam.CombineFn):
    """The state of :class:`DeduplicateReportsFn`: a :class:`SeenIds` of keyed 64-bit id
    hashes with their full ids; an input is ``(hashes, ids)``."""

    def create_accumulator(self):
        return SeenIds()

    def add_input(self, seen, hashes_and_ids):
        seen.add_new(*hashes_and_ids)
        return seen

    def merge_accumulators(self, accumulators):
        merged = None
        for seen in accumulators:
            merged = seen if merged is None else merged.union(seen)
        return merged if merged is not None else SeenIds()

    def extract_output(self, seen):
        return seen


class DeduplicateReportsFn(beam.DoFn):
    """Drops reports whose id this key and event-time cell has seen (state per key, window),
    and counts the new ones: ``(key text, ReportBatch)`` -> ``(key, Accumulator)``."""

    SEEN = CombiningValueStateSpec("seen", PickleCoder(), SeenIdsCombineFn())

    def __init__(self, count: bool = True, tally: bool = False):
        super().__init__()
        self._count = count  # False: yield the new reports' batch, to be capped first
        self._tally = tally  # True: also yield (key, Duplicates) of the copies dropped
        self._duplicates = Metrics.counter("ldpflow", "duplicates")

    # The plan's dedup steps (plan.steps.repeated_ids, drop_copies) resolve a whole
    # shuffle group of id hashes at once and keep the copy of smallest payload; a stream
    # sees a cell's reports batch by batch and cannot take back a counted copy, so it keeps
    # the first to arrive. It shares their core: first_copies within a batch (by full id)
    # and SeenIds, sorted runs of hashes and ids, across batches (one read, one add of the
    # new rows, per batch and state key).
    def process(self, element, seen=beam.DoFn.StateParam(SEEN)):
        _, batch = element  # keyed by the key's text form: a deterministic state key
        key = tuple(batch.key)
        # In hash order: the lookups into the state's sorted runs then walk them forward
        # (numpy's searchsorted narrows each search by the one before), several times
        # faster than random probes; the state's add finds the run already sorted.
        order, hashes = _hash_order(batch.id_hashes)
        ids = batch.report_ids[order]
        new_sorted, _ = first_copies(hashes, (), ids)  # first occurrences, by full id
        new_sorted &= ~seen.read().contains(hashes, ids)
        duplicates = int(hashes.size - np.count_nonzero(new_sorted))
        if duplicates:
            self._duplicates.inc(duplicates)
            if self._tally:
                yield key, Duplicates(duplicates, key)
        if new_sorted.any():
            seen.add((hashes[new_sorted], ids[new_sorted]))
            new = np.empty_like(new_sorted)
            new[order] = new_sorted
            fresh = batch if duplicates == 0 else batch[new]
            if self._count:  # the ids are needed no more (the cap breaks ties by them)
                fresh = dataclasses.replace(fresh, report_ids=None)
            yield key, (batch.protocol.count_valid(fresh.reports) if self._count else fresh)


def _hash_order(hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(order, hashes[order])``: the stable argsort of ``hashes`` (equal hashes in
    arrival order, so the first copy stays first). Distinct hashes have one sorted order,
    which numpy's default sort finds several times faster than its stable one; only when
    two are equal (a copy in the batch) is the stable sort run."""
    order = np.argsort(hashes)
    ordered = hashes[order]
    if ordered.size > 1 and bool((ordered[1:] == ordered[:-1]).any()):
        order = np.argsort(hashes, kind="stable")
        ordered = hashes[order]
    return order, ordered


def _every_copy(element, count: bool):
    """``(key text, batch)`` -> ``(key, Accumulator or batch)`` without deduplication."""
    _, batch = element
    return tuple(batch.key), batch.protocol.count_valid(batch.reports) if count else batch


@dataclasses.dataclass(frozen=True)
class Duplicates:
    """Copies of report ids that :class:`DeduplicateReportsFn` dropped in one cell (a
    count, timestamped with the cell, so that a window can report its duplicates)."""

    count: int
    key: tuple | None = None


def _add_counts(a: tuple, b: tuple) -> tuple:
    users = np.concatenate([a[0], b[0]])
    distinct, inverse = np.unique(users, return_inverse=True)
    sums = np.bincount(inverse.reshape(-1), weights=np.concatenate([a[1], b[1]]),
                       minlength=distinct.size).astype(np.int64)
    return distinct, sums


class UserCountsCombineFn(beam.CombineFn):
    """The state of :class:`CapUsersFn`: reports kept per user, as sorted user hashes and
    their counts (two arrays)."""

    def create_accumulator(self):
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)

    def add_input(self, counts, update):
        return _add_counts(counts, update)

    def merge_accumulators(self, accumulators):
        merged = self.create_accumulator()
        for counts in accumulators:
            merged = _add_counts(merged, counts)
        return merged

    def extract_output(self, counts):
        return counts


def _user_bucket(element, bits: int):
    _, batch = element
    buckets = (batch.user_hashes >> np.uint64(64 - bits)).astype(np.int64)
    for b in np.unique(buckets).tolist():
        yield b, batch[buckets == b]


class CapUsersFn(beam.DoFn):
    """``(bucket, ReportBatch)`` of one window -> ``(key, ReportBatch)`` of the reports
    within their users' caps (state per bucket and window: the reports kept per user)."""

    KEPT = CombiningValueStateSpec("kept", PickleCoder(), UserCountsCombineFn())

    def __init__(self, cap: int):
        super().__init__()
        self._cap = cap
        self._capped = Metrics.counter("ldpflow", "reports_capped")

    # Not the plan's cap (plan.steps.cap_users, core.contribution.capped_rows): those keep
    # each user's cap earliest reports of all the reports, seen at once; here each user has
    # the room left by the reports kept from earlier batches (the state), so the ranks
    # within a batch are compared with a per-user room, not with one cap.
    def process(self, element, kept=beam.DoFn.StateParam(KEPT)):
        _, batch = element
        known, known_counts = kept.read()
        distinct, inverse = np.unique(batch.user_hashes, return_inverse=True)
        inverse = inverse.reshape(-1)
        room = np.full(distinct.size, self._cap, dtype=np.int64)
        if known.size:
            at = np.minimum(np.searchsorted(known, distinct), known.size - 1)
            seen = known[at] == distinct
            room[seen] -= known_counts[at[seen]]
        order = np.lexsort((tie_breaks(batch.report_ids), batch.event_times, inverse))
        ranked = inverse[order]
        starts = np.flatnonzero(np.r_[True, ranked[1:] != ranked[:-1]])
        rank = np.arange(ranked.size) - np.repeat(starts, np.diff(np.r_[starts, ranked.size]))
        keep = np.zeros(ranked.size, dtype=bool)
        keep[order] = rank < room[ranked]
        counts = np.bincount(inverse[keep], minlength=distinct.size)
        kept.add((distinct[counts > 0], counts[counts > 0]))
        dropped = int(keep.size - np.count_nonzero(keep))
        if dropped:
            self._capped.inc(dropped)
        if keep.any():
            yield tuple(batch.key), batch if dropped == 0 else batch[keep]


class FormatPaneFn(beam.DoFn):
    """``(key, Accumulator)`` of one pane -> a result dict tagged with window and pane."""

    def __init__(self, methods: Sequence[str]):
        super().__init__()
        self._methods = tuple(methods)

    def process(self, element, win=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
        key, accumulator = element
        result = estimate_result(key, accumulator, 0, self._methods, postprocess)
        result.pop("dead_letters")  # streaming dead letters are counted in their own output
        result["window_start"] = int(win.start.micros // 1000)
        result["window_end"] = int(win.end.micros // 1000)
        result["pane"] = PANE_TIMING.get(int(pane.timing), "UNKNOWN")
        result["pane_index"] = int(pane.index)
        yield result


class WindowReports(beam.PTransform):
    """Messages -> ``{"reports": windowed (key, batch) pairs, "dead_letters": ...}``: steps
    1 to 4 of the module docstring, before any counting.

    With ``count`` the batches are counted into accumulators at the deduplication (the
    frequency stream, uncapped); without it ``reports`` holds the new reports'
    :class:`~ldpflow.wire.envelope.ReportBatch` (capped with ``max_reports_per_user``).
    With ``tally_duplicates`` it also holds a ``(key, Duplicates)`` per cell that dropped
    copies (never capped). ``deduplicate=False`` counts every copy (no seen-id state; for
    at-most-once sources, and to measure what the deduplication costs).
    """

    def __init__(self, windows: WindowSpec,
                 expect: AcceptancePolicy | Mapping[str, Any] | None = None,
                 timestamp_attribute: str | None = None,
                 max_reports_per_user: int | None = None, count: bool = True,
                 tally_duplicates: bool = False, deduplicate: bool = True):
        super().__init__()
        cap = max_reports_per_user
        if cap is not None:
            validation.check_limit(cap, name="max_reports_per_user")
        self._windows = windows
        self._expect = expect
        self._attribute = timestamp_attribute
        self._cap = cap
        self._count = count and cap is None
        self._tally = tally_duplicates
        self._deduplicate = bool(deduplicate)

    def expand(self, messages):
        capping = self._cap is not None
        # The cap ranks a message's reports together (by event time, then id), so a capped
        # stream keeps one seen-id state per key and cell rather than splitting a message
        # over id buckets.
        decode = DecodeMessagesFn(self._windows.cell, self._expect, self._attribute,
                                  ("user_hashes",) if capping else (),
                                  bucket_bits=0 if capping else ID_BUCKET_BITS,
                                  join=not capping)
        # Typed keys (str here, int for the user buckets), so that the stateful DoFns' keys
        # get deterministic coders.
        decoded = messages | "Decode" >> beam.ParDo(decode).with_output_types(
            tuple[str, typing.Any]).with_outputs(DEAD_LETTERS, main="reports")
        if self._deduplicate:
            first = "Deduplicate" >> beam.ParDo(DeduplicateReportsFn(
                count=self._count, tally=self._tally)).with_input_types(tuple[str, typing.Any])
        else:
            first = "EveryCopy" >> beam.Map(_every_copy, self._count)
        windowed = (
            decoded.reports
            | "Cells" >> self._windows.cell_window_into()
            | first
            | "Windows" >> self._windows.window_into()
        )
        if capping:
            tallies = None
            if self._tally:
                tallies = windowed | "DuplicateTallies" >> beam.Filter(
                    lambda element: isinstance(element[1], Duplicates))
                windowed = windowed | "NewReports" >> beam.Filter(
                    lambda element: not isinstance(element[1], Duplicates))
            windowed = (
                windowed
                | "UserBuckets" >> beam.FlatMap(_user_bucket, _USER_BUCKET_BITS
                                               ).with_output_types(tuple[int, typing.Any])
                | "CapUsers" >> beam.ParDo(CapUsersFn(self._cap)).with_input_types(
                    tuple[int, typing.Any])
            )
            if tallies is not None:
                windowed = (windowed, tallies) | "WithDuplicates" >> beam.Flatten()
        return {"reports": windowed, "dead_letters": decoded[DEAD_LETTERS]}


class EstimateStream(beam.PTransform):
    """Messages -> ``{"estimates": result dicts per window/key/pane, "dead_letters": ...}``."""

    def __init__(self, methods: Sequence[str], windows: WindowSpec,
                 expect: AcceptancePolicy | Mapping[str, Any] | None = None,
                 timestamp_attribute: str | None = None,
                 max_reports_per_user: int | None = None, deduplicate: bool = True):
        super().__init__()
        self._methods = tuple(methods)
        self._reports = WindowReports(windows, expect, timestamp_attribute,
                                      max_reports_per_user, deduplicate=deduplicate)

    def expand(self, messages):
        # The stages keep their labels of before WindowReports (streaming update
        # compatibility depends on them).
        out = self._reports.expand(messages)
        estimates = (
            out["reports"]
            | "Count" >> beam.CombinePerKey(FrequencyOracleCombineFn())
            | "Estimate" >> beam.ParDo(FormatPaneFn(self._methods))
        )
        return {"estimates": estimates, "dead_letters": out["dead_letters"]}


def result_to_message(result: dict) -> bytes:
    """A pane's result as a Pub/Sub message body (JSON)."""
    return json.dumps(result, sort_keys=True).encode("utf-8")
