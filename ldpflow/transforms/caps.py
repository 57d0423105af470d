"""Contribution caps as a Beam transform: at most ``cap`` reports per user in a run.

``CapContributions`` takes ``(key, ReportBatch)`` elements that kept their user-id hashes,
event times and report ids (``keep=CAP_KEEP``), cuts every batch into buckets by the top
bits of its user hashes (all of a user's reports, of every key, land in one bucket),
gathers each bucket in one place and keeps each user's ``cap`` earliest reports
(:func:`ldpflow.core.contribution.capped_rows`; ties of event time broken by
:func:`tie_breaks`, the public hash of the full report id: the choice depends neither on
arrival order nor on the run's secret id-hash key, so reruns agree). The cap is per user
across keys, since a user's privacy loss adds up over every report it sends.

Main output: the kept batches and a :class:`~ldpflow.transforms.dedup.Tally` per key
counting the reports capped (``capped``). Tagged output ``users``: per bucket ``(users,
largest epsilon one user spent)``, which :class:`ContributionSummaryFn` combines.

:class:`CapUserReportsFn` is an adapter over the job plan's step
:func:`ldpflow.plan.steps.cap_users` (its ``keep_rows`` form: Beam counts the kept rows
where they arrive), which the other engines run.

Counters (namespace ``ldpflow``): ``reports_capped``, ``users``.
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam.metrics import Metrics

from ldpflow.core import validation
from ldpflow.core.contribution import tie_breaks
from ldpflow.plan.steps import CAP_KEEP, USER_BUCKET_BITS, bucket_parts, cap_users
from ldpflow.transforms.dedup import Tally, is_tally

__all__ = ["CapContributions", "CapUserReportsFn", "ContributionSummaryFn", "CAP_KEEP",
           "USERS", "tie_breaks"]

USERS = "users"


def _user_buckets(element, bits: int):
    key, batch = element
    if batch.user_hashes is None or batch.event_times is None or batch.report_ids is None:
        raise ValueError(f"contribution caps need batches read with keep={CAP_KEEP}")
    for b, rows in bucket_parts(batch.user_hashes, bits):
        yield b, (key, batch if rows is None else batch[rows])


class CapUserReportsFn(beam.DoFn):
    """One bucket of users' batches (of any keys) -> each user's ``cap`` earliest reports
    (``(key, ReportBatch)``), ``(key, Tally)`` of the reports capped, and per bucket
    ``(users, largest epsilon)`` (output ``users``): :func:`ldpflow.plan.steps.cap_users`
    with ``keep_rows``."""

    def __init__(self, cap: int):
        super().__init__()
        self._cap = cap
        self._capped = Metrics.counter("ldpflow", "reports_capped")
        self._users = Metrics.counter("ldpflow", "users")

    def process(self, element):
        _, pieces = element
        kept, (count, largest) = cap_users(pieces, self._cap, keep_rows=True)
        self._users.inc(count)
        yield beam.pvalue.TaggedOutput(USERS, (count, largest))
        for key, value in kept:
            if isinstance(value, Tally) and value.capped:
                self._capped.inc(value.capped)
            yield key, value


class ContributionSummaryFn(beam.CombineFn):
    """Per-bucket ``(users, largest epsilon)`` -> ``{"users", "max_epsilon_per_user"}``."""

    def create_accumulator(self):
        return 0, 0.0

    def add_input(self, accumulator, element):
        return accumulator[0] + element[0], max(accumulator[1], element[1])

    def merge_accumulators(self, accumulators):
        users, largest = 0, 0.0
        for count, eps in accumulators:
            users, largest = users + count, max(largest, eps)
        return users, largest

    def extract_output(self, accumulator):
        return {"users": accumulator[0], "max_epsilon_per_user": accumulator[1]}


class CapContributions(beam.PTransform):
    """``(key, ReportBatch | Tally)`` -> the same with at most ``cap`` reports per user.

    Tallies pass through. Returns ``{"reports": ..., "summary": PCollection[dict]}``: the
    capped elements, and one ``{"max_reports_per_user", "users", "max_epsilon_per_user"}``.
    """

    def __init__(self, cap: int):
        super().__init__()
        self._cap = validation.check_limit(cap, name="cap")

    def expand(self, elements):
        batches, tallies = elements | "SplitTallies" >> beam.Partition(
            lambda element, _: int(is_tally(element)), 2)
        capped = (
            batches
            | "UserBuckets" >> beam.FlatMap(_user_buckets, USER_BUCKET_BITS)
            | "GatherUsers" >> beam.GroupByKey()
            | "CapUsers" >> beam.ParDo(CapUserReportsFn(self._cap)).with_outputs(
                USERS, main="reports")
        )
        cap = self._cap
        summary = (
            capped[USERS]
            | "SummariseUsers" >> beam.CombineGlobally(ContributionSummaryFn())
            | "WithCap" >> beam.Map(lambda found: {"max_reports_per_user": cap, **found})
        )
        return {"reports": (capped["reports"], tallies) | "Rejoin" >> beam.Flatten(),
                "summary": summary}
