"""Batch deduplication by report id, at scale: hash buckets of numpy arrays, not elements.

``DeduplicateReports`` takes ``(key, ReportBatch)`` elements that kept their report-id
hashes (``keep=("id_hashes",)``), cuts every batch into ``buckets`` parts by the top bits
of the hash (every copy of a report lands in the same bucket), gathers each key's bucket in
one place and keeps one copy per id (:func:`ldpflow.core.dedup.first_copies`: the choice
does not depend on arrival order, so reruns give identical estimates). Output: the
batches of the kept reports, and a :class:`Tally` of the copies dropped per key and bucket.

Counters (namespace ``ldpflow``): ``duplicates``, ``conflicting_duplicates``.
"""

from __future__ import annotations

import dataclasses

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from ldpflow.core.dedup import first_copies
from ldpflow.core.keys import ProtocolKey
from ldpflow.core.oracles import Accumulator
from ldpflow.transforms.combine import FrequencyOracleCombineFn
from ldpflow.wire.envelope import ReportBatch

__all__ = ["Tally", "TallyCombineFn", "DeduplicateReports", "DropRepeatsFn", "DEFAULT_BUCKETS",
           "is_tally"]

#: Buckets per key: how many workers can share one key's deduplication.
DEFAULT_BUCKETS = 16


@dataclasses.dataclass(eq=False)
class Tally:
    """One key's exact counts, with the copies not counted and the records refused."""

    accumulator: Accumulator | None
    duplicates: int = 0
    conflicting: int = 0
    dead_letters: int = 0

    def merge(self, other: Tally) -> Tally:
        if other.accumulator is not None:
            self.accumulator = (other.accumulator.copy() if self.accumulator is None
                                else self.accumulator.merge(other.accumulator))
        self.duplicates += other.duplicates
        self.conflicting += other.conflicting
        self.dead_letters += other.dead_letters
        return self


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
    if batch.id_hashes is None:
        raise ValueError("deduplication needs batches read with keep=('id_hashes',)")
    text = ProtocolKey.coerce(key).to_json()  # a deterministic shuffle key
    # uint16 buckets: numpy's stable argsort of 16-bit keys is a radix sort, O(n).
    bucket = (batch.id_hashes >> np.uint64(64 - bits)).astype(np.uint16) if bits else \
        np.zeros(len(batch), dtype=np.uint16)
    present = np.flatnonzero(np.bincount(bucket, minlength=1 << bits))
    if present.size == 1:
        yield (text, int(present[0])), batch
        return
    order = np.argsort(bucket, kind="stable")
    bounds = np.searchsorted(bucket[order], np.append(present, present[-1] + 1))
    for i, b in enumerate(present.tolist()):
        yield (text, b), batch[order[bounds[i]:bounds[i + 1]]]


class DropRepeatsFn(beam.DoFn):
    """One key's bucket of batches -> ``(key, ReportBatch)`` holding one copy per report id,
    and ``(key, Tally)`` counting the copies dropped (when there were any)."""

    def __init__(self):
        super().__init__()
        self._duplicates = Metrics.counter("ldpflow", "duplicates")
        self._conflicting = Metrics.counter("ldpflow", "conflicting_duplicates")

    def process(self, element):
        (text, _), batches = element
        batches = list(batches)
        batch = batches[0] if len(batches) == 1 else ReportBatch.concat(batches)
        keep, conflicting = first_copies(batch.id_hashes, batch.reports.columns.values())
        duplicates = int(keep.size - np.count_nonzero(keep))
        key = tuple(batch.key)
        if duplicates:
            self._duplicates.inc(duplicates)
            if conflicting:
                self._conflicting.inc(conflicting)
            yield key, Tally(None, duplicates, conflicting)
            batch = batch[keep]
        yield key, batch


class DeduplicateReports(beam.PTransform):
    """``(key, ReportBatch)`` with id hashes -> ``(key, ReportBatch)`` with one copy per
    report id, and ``(key, Tally)`` elements counting the copies dropped;
    :class:`TallyCombineFn` takes both."""

    def __init__(self, buckets: int = DEFAULT_BUCKETS):
        super().__init__()
        if isinstance(buckets, bool) or not isinstance(buckets, int) or \
                not 1 <= buckets <= 1 << 16 or buckets & (buckets - 1):
            raise ValueError(f"buckets must be a power of two in [1, 2**16], got {buckets!r}")
        self._bits = buckets.bit_length() - 1

    def expand(self, reports):
        return (
            reports
            | "Buckets" >> beam.FlatMap(_split_buckets, self._bits)
            | "GatherBuckets" >> beam.GroupByKey()
            | "DropRepeats" >> beam.ParDo(DropRepeatsFn())
        )
