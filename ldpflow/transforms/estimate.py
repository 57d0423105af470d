"""Keyed estimation: count report batches per oracle/parameter key, estimate, post-process."""

from __future__ import annotations

from collections.abc import Sequence

import apache_beam as beam

from ldpflow.core.postprocess import postprocess
from ldpflow.transforms.combine import FrequencyOracleCombineFn
from ldpflow.transforms.records import DeadLetter, estimate_result

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
        counts[letter.reason] = counts.get(letter.reason, 0) + 1
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
    key, grouped = element
    accumulators = [a for a in grouped["counts"] if a is not None]
    accumulator = accumulators[0] if accumulators else None
    return estimate_result(key, accumulator, sum(grouped["dead"]), methods, postprocess)


class EstimateReports(beam.PTransform):
    """Reports and their dead letters -> one result dict per key (see ``estimate_result``).

    Input: a dict ``{"reports": PCollection[(key, ReportBatch)], "dead_letters":
    PCollection[DeadLetter]}``. Keys whose every report was refused still get a result (n = 0
    and their dead-letter count), so no record goes unaccounted for.
    """

    def __init__(self, methods: Sequence[str]):
        super().__init__()
        self._methods = tuple(methods)

    def expand(self, inputs):
        counts = inputs["reports"] | "Count" >> CountReports()
        dead = (
            inputs["dead_letters"]
            | "Keyed" >> beam.Filter(lambda letter: letter.key is not None)
            | "DeadKey" >> beam.Map(lambda letter: (letter.key, 1))
            | "DeadPerKey" >> beam.CombinePerKey(sum)
        )
        return (
            {"counts": counts, "dead": dead}
            | "Join" >> beam.CoGroupByKey()
            | "Estimate" >> beam.Map(_result, self._methods)
        )
