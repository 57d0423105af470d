"""Batch deduplication by report id, at scale: hash buckets of numpy arrays, not elements.

``DeduplicateReports`` takes ``(key, ReportBatch)`` elements that kept their report-id
hashes and ids (``keep=DEDUP_KEEP``), cuts every batch into ``buckets`` parts by the top
bits of the hash (every copy of a report lands in the same bucket), gathers each key's
bucket in one place and keeps one copy per id (:func:`ldpflow.core.dedup.first_copies`:
the rows of a repeated hash are grouped by their full ids, so a distinct report whose id
shares a hash is never dropped; the choice does not depend on arrival order, so reruns give
identical estimates). Output: the batches of the kept reports (without their ids), and a
:class:`Tally` of the copies dropped per key and bucket. The hashes are keyed with the
run's secret (``AcceptancePolicy.id_key``), so collisions cannot be planned to make rows
take the heavy path.

At scale only the hashes go through the shuffle: a first, light read
(``ReadReports(..., ids_only=True)``) gives ``(key, id hashes)``, :class:`RepeatedIds`
finds the hashes that occur more than once, and the main read
(``ReadReports(..., repeated=...)``, :func:`split_repeated`) counts every other row where
it was read and sends only the rows of repeated ids to ``DeduplicateReports``. The
shuffle then moves 8 bytes per report plus the repeated reports, not every report's
payload (at d = 50,000, a unary encoding's report is 6 KB), with the same result.

The DoFns are adapters over the job plan's steps (:mod:`ldpflow.plan.steps`), which the
other engines run: :class:`RepeatedIdsFn` calls :func:`~ldpflow.plan.steps.repeated_ids`,
:class:`DropRepeatsFn` :func:`~ldpflow.plan.steps.drop_copies` (its ``keep_rows`` form:
Beam counts the kept rows where they arrive).

Counters (namespace ``ldpflow``): ``duplicates``, ``conflicting_duplicates``.
"""

from __future__ import annotations

import dataclasses

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from ldpflow.core import validation
from ldpflow.core.keys import ProtocolKey
from ldpflow.plan.steps import Tally, bucket_parts, drop_copies, repeated_ids, split_repeated
from ldpflow.transforms.combine import FrequencyOracleCombineFn
from ldpflow.wire.envelope import ReportBatch

__all__ = ["DEDUP_KEEP", "Tally", "TallyCombineFn", "DeduplicateReports", "DropRepeatsFn",
           "RepeatedIds",
           "RepeatedIdsFn", "split_repeated", "DEFAULT_BUCKETS", "is_tally"]

#: Buckets per key: how many workers can share one key's deduplication.
DEFAULT_BUCKETS = 16

#: What a read keeps of the envelope for deduplication: the keyed id hashes and the ids.
DEDUP_KEEP = ("id_hashes", "report_ids")


def _without_ids(batch: ReportBatch) -> ReportBatch:
    """The batch without its full ids (needed only until its copies are resolved)."""
    return batch if batch.report_ids is None else dataclasses.replace(batch, report_ids=None)


class TallyCombineFn(beam.CombineFn):
    """Merges :class:`Tally` values exactly (integer sums); a :class:`ReportBatch` input
    is counted into the tally of its key (by :class:`FrequencyOracleCombineFn`)."""

    def __init__(self):
        super().__init__()
        self._counts = FrequencyOracleCombineFn()

    def create_accumulator(self) -> Tally:
        return Tally(None)

    def add_input(self, tally: Tally, other: Tally | ReportBatch) -> Tally:
        if isinstance(other, ReportBatch):
            tally.accumulator = self._counts.add_input(tally.accumulator, other)
            return tally
        return tally.merge(other)

    def merge_accumulators(self, tallies):
        merged = Tally(None)
        for tally in tallies:
            merged.merge(tally)
        return merged

    def extract_output(self, tally: Tally) -> Tally:
        return tally


def is_tally(element) -> bool:
    """Whether a ``(key, value)`` element of :class:`DeduplicateReports` is a tally."""
    return isinstance(element[1], Tally)


def _split_buckets(element, bits: int):
    key, batch = element
    if batch.id_hashes is None or batch.report_ids is None:
        raise ValueError(f"deduplication needs batches read with keep={DEDUP_KEEP!r}")
    text = ProtocolKey.coerce(key).to_json()  # a deterministic shuffle key
    for b, rows in bucket_parts(batch.id_hashes, bits):
        yield (text, b), batch if rows is None else batch[rows]


def _split_id_buckets(element, bits: int):
    key, hashes = element
    key = tuple(key)
    text = ProtocolKey.coerce(key).to_json()
    for b, rows in bucket_parts(hashes, bits):
        yield (text, b), (key, hashes if rows is None else hashes[rows])


class RepeatedIdsFn(beam.DoFn):
    """One key's bucket of ``(key, id hashes)`` -> ``(key text, the hashes seen more than
    once)``: :func:`ldpflow.plan.steps.repeated_ids` (without the ranges, which Beam's
    read does not need: it splits every range's rows with a side input)."""

    def process(self, element):
        (_, bucket), parts = element
        pieces = ((key, bucket, 0, hashes) for key, hashes in parts)
        for text, repeated, _ in repeated_ids(pieces, ranges=False):
            yield text, repeated


def _union(parts) -> np.ndarray:
    parts = list(parts)
    return np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.uint64)


class RepeatedIds(beam.PTransform):
    """``(key, id hashes)`` -> ``(key text, sorted hashes seen more than once)``: what a
    read splits off for :class:`ResolveRepeats` (``ReadReports(..., repeated=...)``)."""

    def __init__(self, buckets: int = DEFAULT_BUCKETS):
        super().__init__()
        self._bits = _bucket_bits(buckets)

    def expand(self, ids):
        return (
            ids
            | "IdBuckets" >> beam.FlatMap(_split_id_buckets, self._bits)
            | "GatherIds" >> beam.GroupByKey()
            | "RepeatedIds" >> beam.ParDo(RepeatedIdsFn())
            | "GatherRepeated" >> beam.GroupByKey()
            | "UnionRepeated" >> beam.MapTuple(lambda text, parts: (text, _union(parts)))
        )


class DropRepeatsFn(beam.DoFn):
    """One key's bucket of batches -> ``(key, ReportBatch)`` holding one copy per report id
    (rows of one hash are grouped by their full ids: never a distinct report dropped), and
    ``(key, Tally)`` counting the copies dropped: :func:`ldpflow.plan.steps.drop_copies`
    with ``keep_rows``. ``keep_ids``: the kept batches keep their full ids (else dropped
    here, as only the cap after this step needs them)."""

    def __init__(self, keep_ids: bool = False):
        super().__init__()
        self._keep_ids = keep_ids
        self._duplicates = Metrics.counter("ldpflow", "duplicates")
        self._conflicting = Metrics.counter("ldpflow", "conflicting_duplicates")

    def process(self, element):
        (_, bucket), batches = element
        pieces = ((tuple(batch.key), bucket, batch) for batch in batches)
        for key, value in drop_copies(pieces, keep_rows=True):
            if isinstance(value, Tally):
                if value.duplicates:  # counters only where there were copies
                    self._duplicates.inc(value.duplicates)
                if value.conflicting:
                    self._conflicting.inc(value.conflicting)
                yield key, value
            else:
                yield key, value if self._keep_ids else _without_ids(value)


def _bucket_bits(buckets: int) -> int:
    if not validation.is_integer(buckets) or not 1 <= buckets <= 1 << 16 \
            or buckets & (buckets - 1):
        raise ValueError(f"buckets must be a power of two in [1, 2**16], got {buckets!r}")
    return buckets.bit_length() - 1


class DeduplicateReports(beam.PTransform):
    """``(key, ReportBatch)`` with id hashes -> ``(key, ReportBatch)`` with one copy per
    report id, and ``(key, Tally)`` elements counting the copies dropped;
    :class:`TallyCombineFn` takes both. Given only the rows of repeated ids (what a read
    splits off with :class:`RepeatedIds`) it gives the same result for those rows.
    ``keep_ids``: the kept batches keep their full ids (a contribution cap after this step
    breaks ties by them); else they are dropped here."""

    def __init__(self, buckets: int = DEFAULT_BUCKETS, keep_ids: bool = False):
        super().__init__()
        self._bits = _bucket_bits(buckets)
        self._keep_ids = keep_ids

    def expand(self, reports):
        return (
            reports
            | "Buckets" >> beam.FlatMap(_split_buckets, self._bits)
            | "GatherBuckets" >> beam.GroupByKey()
            | "DropRepeats" >> beam.ParDo(DropRepeatsFn(self._keep_ids))
        )

