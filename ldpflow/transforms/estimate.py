"""Keyed estimation: count report batches per oracle/parameter key (deduplicated by report
id, or not), estimate, post-process.

The DoFns and CombineFns are adapters over the job plan's steps
(:mod:`ldpflow.plan.steps`), which the other engines run: :class:`EstimateFn` calls
:func:`~ldpflow.plan.steps.estimate_key`, :class:`DeadLetterSummaryFn`
:func:`~ldpflow.plan.steps.add_letter`, :func:`~ldpflow.plan.steps.add_tallies` and
:func:`~ldpflow.plan.steps.dead_letter_summary`, :class:`AdmitKeysFn`
:func:`~ldpflow.plan.steps.admit_keys` and :func:`~ldpflow.plan.steps.admission_letter`.

Counter (namespace ``ldpflow``): ``reports_estimated``, the reports behind the results;
distribution ``estimate_ms``: milliseconds to estimate and post-process one key.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics

from ldpflow.plan.steps import (
    add_letter,
    add_tallies,
    admission_letter,
    admit_keys,
    dead_letter_summary,
    estimate_key,
    reason_class,
)
from ldpflow.transforms.caps import CapContributions
from ldpflow.transforms.combine import FrequencyOracleCombineFn
from ldpflow.transforms.dedup import DEFAULT_BUCKETS, DeduplicateReports, Tally, TallyCombineFn
from ldpflow.wire.envelope import DeadLetter

__all__ = ["CountReports", "EstimateReports", "EstimateFn", "DeadLetterSummaryFn",
           "CountDeadLettersFn", "AdmitKeysFn", "reason_class"]


class CountReports(beam.PTransform):
    """``(key, ReportBatch)`` -> ``(key, Accumulator)``: one exact accumulator per key."""

    def expand(self, reports):
        return reports | "CombinePerKey" >> beam.CombinePerKey(FrequencyOracleCombineFn())


class DeadLetterSummaryFn(beam.CombineFn):
    """Dead letters -> ``{"total": N, "by_reason": {reason: count}}``, and when parts of files
    were lost whole (an unknown number of records) ``"lost": {"parts", "bytes",
    "unsized", "by_reason": {reason: parts}}`` (``bytes``: the bytes of the parts of known
    size; ``unsized``: the parts of unknown size, such as the tail of a truncated file)."""

    def create_accumulator(self):
        return {}

    def add_input(self, counts, letter: DeadLetter):
        return add_letter(counts, letter)  # the combiner's own accumulator

    def merge_accumulators(self, accumulators):
        merged: dict[str, tuple[int, ...]] = {}
        for counts in accumulators:
            merged = add_tallies(merged, counts)
        return merged

    def extract_output(self, counts):
        return dead_letter_summary(counts)


#: Distinct reason counters one worker reports at most (reasons hold values: a hostile input
#: could make one per record); the others are counted under ``other reasons``.
MAX_REASON_COUNTERS = 50


class CountDeadLettersFn(beam.DoFn):
    """Dead letters -> Beam counters (namespace ``ldpflow``) that a job's verdict reads:
    ``reason: <class>`` (records refused per :func:`reason_class`; a part lost whole counts
    1), and for parts lost whole ``lost_parts``, ``lost_bytes`` (their bytes, where known) and
    ``lost_unsized`` (those of unknown size). Yields nothing."""

    def __init__(self):
        super().__init__()
        self._lost_parts = Metrics.counter("ldpflow", "lost_parts")
        self._lost_bytes = Metrics.counter("ldpflow", "lost_bytes")
        self._lost_unsized = Metrics.counter("ldpflow", "lost_unsized")

    def setup(self):
        self._reasons: dict[str, Any] = {}

    def process(self, letter: DeadLetter):
        name = reason_class(letter.reason)
        counter = self._reasons.get(name)
        if counter is None:
            if len(self._reasons) >= MAX_REASON_COUNTERS:
                name = "other reasons"
            counter = self._reasons.setdefault(name, Metrics.counter("ldpflow",
                                                                     f"reason: {name}"))
        counter.inc(letter.count if not letter.count_unknown else 1)
        if letter.count_unknown:
            self._lost_parts.inc()
            if letter.bytes is None:
                self._lost_unsized.inc()
            else:
                self._lost_bytes.inc(letter.bytes)
        return iter(())


class EstimateFn(beam.DoFn):
    """``(key, Tally)`` -> the key's result dict (``estimate_result``), post-processed."""

    def __init__(self, methods: Sequence[str]):
        super().__init__()
        self._methods = tuple(methods)
        self._estimated = Metrics.counter("ldpflow", "reports_estimated")
        self._estimate_ms = Metrics.distribution("ldpflow", "estimate_ms")

    def process(self, element):
        started = time.perf_counter()
        result = estimate_key(element, self._methods)
        self._estimated.inc(result["n"])
        self._estimate_ms.update(int(1000 * (time.perf_counter() - started)))
        yield result


def _dead_tally(letter: DeadLetter):
    return tuple(letter.key), Tally(None, dead_letters=letter.count)


def _census(element):
    key, tally = element
    return tuple(key), tally.reports_read


def _refused_keys(census, budget: int):
    return admit_keys(dict(census), budget)


class AdmitKeysFn(beam.DoFn):
    """``(key, Tally)`` -> the admitted keys' elements (main output) and, for a key the
    job-wide budget refused (:func:`ldpflow.plan.steps.admit_keys`, a side input: the
    refused keys), one dead letter of its reports (output ``refused``), so that its result
    is never built."""

    def __init__(self, source: str):
        super().__init__()
        self._source = source
        self._dead = Metrics.counter("ldpflow", "dead_letters")  # as the read counts its own

    def process(self, element, refused):
        key, tally = element
        reason = refused.get(tuple(key))
        if reason is None:
            yield element
            return
        count = tally.reports_read
        if count:
            self._dead.inc(count)
            yield beam.pvalue.TaggedOutput("refused", admission_letter(self._source, key,
                                                                       reason, count))


class EstimateReports(beam.PTransform):
    """Reports and their dead letters -> one result dict per key (see ``estimate_result``).

    Input: a dict ``{"reports": PCollection[(key, ReportBatch)], "dead_letters":
    PCollection[DeadLetter]}``; with dedup optionally ``"repeats"``, the rows of repeated
    ids that the read split off (``ReadReports(..., repeated=RepeatedIds)``), so that only
    those are shuffled and ``"reports"`` are counted where they were read.
    Keys whose every report was refused still get a result (n = 0
    and their dead-letter count), so no record goes unaccounted for. With ``dedup`` (the
    batches must keep their id hashes) one copy of each report id is counted and the others
    are counted as ``duplicates``. With ``max_reports_per_user`` (the batches must keep
    ``CAP_KEEP``), each user's earliest reports up to the cap are counted and the others
    as ``capped`` (:class:`~ldpflow.transforms.caps.CapContributions`; its summary is
    ``self.contribution`` once expanded; ``self.reports`` is what is counted, after
    deduplication and the cap). Counts, duplicates, capped reports and dead
    letters of a key meet in one exact combine
    (:class:`~ldpflow.transforms.dedup.TallyCombineFn`).
    """

    def __init__(self, methods: Sequence[str], dedup: bool = False,
                 buckets: int = DEFAULT_BUCKETS, max_reports_per_user: int | None = None,
                 max_job_bytes: int | None = None, source: str = ""):
        super().__init__()
        self._max_job_bytes = max_job_bytes
        self._source = source
        #: The dead letters of the keys the job-wide budget refused (a PCollection once
        #: expanded; empty without ``max_job_bytes``).
        self.refused = None
        self._methods = tuple(methods)
        self._dedup = dedup
        self._buckets = buckets
        self._cap = max_reports_per_user
        self.contribution = None
        self._parts: list = []
        self._counted = None

    @property
    def reports(self):
        """What is counted (after deduplication and the cap), as one PCollection of
        batches and tallies, for other analyses of the same reports; built on first use
        (a Flatten no one reads would still hold every batch on some runners)."""
        if self._counted is None and self._parts:
            self._counted = (self._parts[0] if len(self._parts) == 1 else
                             tuple(self._parts) | "Counted" >> beam.Flatten())
        return self._counted

    def expand(self, inputs):
        reports = inputs["reports"]
        parts = []  # counted separately, then gathered: a Flatten before the count would
        # hold every batch in memory on some runners (the FnApiRunner buffers it whole)
        if self._dedup:
            if "repeats" in inputs:  # the read split off the rows of repeated ids
                resolved = inputs["repeats"] | "Deduplicate" >> DeduplicateReports(
                    self._buckets, keep_ids=self._cap is not None)  # the cap's tie-break
                if self._cap is None:
                    parts.append(resolved)
                else:  # the cap must see all of a user's reports at once
                    reports = (reports, resolved) | "Rejoin" >> beam.Flatten()
            else:
                reports = reports | "Deduplicate" >> DeduplicateReports(
                    self._buckets, keep_ids=self._cap is not None)
        if self._cap is not None:  # after deduplication: a copy is not a second report
            capped = reports | "CapContributions" >> CapContributions(self._cap)
            reports, self.contribution = capped["reports"], capped["summary"]
        parts.insert(0, reports)
        self._parts, self._counted = parts, None
        # Counted where they arrive (combiner lifting): without dedup, where they are read.
        counted = [part | f"Count{'' if i == 0 else i}" >> beam.CombinePerKey(TallyCombineFn())
                   for i, part in enumerate(parts)]
        dead = (
            inputs["dead_letters"]
            | "Keyed" >> beam.Filter(lambda letter: letter.key is not None)
            | "DeadTally" >> beam.Map(_dead_tally)
        )
        tallies = (
            (*counted, dead)
            | "Gather" >> beam.Flatten()
            | "Tally" >> beam.CombinePerKey(TallyCombineFn())  # a few tallies per key
        )
        if self._max_job_bytes is not None:  # before any result is built
            refused = (tallies
                       | "Census" >> beam.Map(_census)
                       | "CensusList" >> beam.combiners.ToList()
                       | "RefusedKeys" >> beam.Map(_refused_keys, self._max_job_bytes))
            split = tallies | "AdmitKeys" >> beam.ParDo(
                AdmitKeysFn(self._source), beam.pvalue.AsSingleton(refused)).with_outputs(
                    "refused", main="admitted")
            tallies, self.refused = split.admitted, split.refused
        else:
            self.refused = tallies.pipeline | "NoRefusedKeys" >> beam.Create([])
        return tallies | "Estimate" >> beam.ParDo(EstimateFn(self._methods))
