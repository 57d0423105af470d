"""Keyed estimation: count report batches per oracle/parameter key (deduplicated by report
id, or not), estimate, post-process."""

from __future__ import annotations

from collections.abc import Sequence

import apache_beam as beam

from ldpflow.core.postprocess import postprocess
from ldpflow.transforms.combine import FrequencyOracleCombineFn
from ldpflow.transforms.dedup import DEFAULT_BUCKETS, DeduplicateReports, Tally, TallyCombineFn
from ldpflow.wire.envelope import DeadLetter
from ldpflow.wire.results import estimate_result

__all__ = ["CountReports", "EstimateReports", "DeadLetterSummaryFn"]


class CountReports(beam.PTransform):
    """``(key, ReportBatch)`` -> ``(key, Accumulator)``: one exact accumulator per key."""

    def expand(self, reports):
        return reports | "CombinePerKey" >> beam.CombinePerKey(FrequencyOracleCombineFn())


class DeadLetterSummaryFn(beam.CombineFn):
    """Dead letters -> ``{"total": N, "by_reason": {reason: count}}``."""

    def create_accumulator(self):
        return {}

    def add_input(self, counts, letter: DeadLetter):
        counts[letter.reason] = counts.get(letter.reason, 0) + letter.count
        return counts

    def merge_accumulators(self, accumulators):
        merged: dict[str, int] = {}
        for counts in accumulators:
            for reason, count in counts.items():
                merged[reason] = merged.get(reason, 0) + count
        return merged

    def extract_output(self, counts):
        return {"total": sum(counts.values()),
                "by_reason": dict(sorted(counts.items(), key=lambda kv: -kv[1]))}


def _result(element, methods: Sequence[str]):
    key, tally = element
    return estimate_result(key, tally.accumulator, tally.dead_letters, methods, postprocess,
                           duplicates=tally.duplicates)


def _dead_tally(letter: DeadLetter):
    return tuple(letter.key), Tally(None, dead_letters=letter.count)


class EstimateReports(beam.PTransform):
    """Reports and their dead letters -> one result dict per key (see ``estimate_result``).

    Input: a dict ``{"reports": PCollection[(key, ReportBatch)], "dead_letters":
    PCollection[DeadLetter]}``. Keys whose every report was refused still get a result (n = 0
    and their dead-letter count), so no record goes unaccounted for. With ``dedup`` (the
    batches must keep their id hashes) one copy of each report id is counted and the others
    are counted as ``duplicates``. Counts, duplicates and dead letters of a key meet in one
    exact combine (:class:`~ldpflow.transforms.dedup.TallyCombineFn`).
    """

    def __init__(self, methods: Sequence[str], dedup: bool = False,
                 buckets: int = DEFAULT_BUCKETS):
        super().__init__()
        self._methods = tuple(methods)
        self._dedup = dedup
        self._buckets = buckets

    def expand(self, inputs):
        reports = inputs["reports"]
        if self._dedup:
            reports = reports | "Deduplicate" >> DeduplicateReports(self._buckets)
        # Counted where they arrive (combiner lifting): without dedup, where they are read.
        counted = reports | "Count" >> beam.CombinePerKey(TallyCombineFn())
        dead = (
            inputs["dead_letters"]
            | "Keyed" >> beam.Filter(lambda letter: letter.key is not None)
            | "DeadTally" >> beam.Map(_dead_tally)
        )
        return (
            (counted, dead)
            | "Gather" >> beam.Flatten()
            | "Tally" >> beam.CombinePerKey(TallyCombineFn())  # a few tallies per key
            | "Estimate" >> beam.Map(_result, self._methods)
        )
