"""Poisoning detection and recovery per key, on Beam (the math: :mod:`ldpflow.core.poisoning`).

:class:`DetectPoisoning` takes the ``(key, ReportBatch)`` PCollection the estimate job counts
and yields one ``(key, section)`` per key of a supported oracle, ``section`` being
:meth:`~ldpflow.core.poisoning.PoisoningReport.to_dict` (``flagged``, ``test``, ``level``,
``suspected``, ``recovered_estimates``, ..., and in ``details.dispersion`` the population test
of many values with excess: its ``name``, ``value``, ``threshold``, ``p_value``, ``level``
and ``alarm``). The defence's :data:`NUM_PASSES` passes are
unrolled at graph construction: per pass, each batch is tallied against its key's plan (a
side input), the tallies of a key are merged exactly, and the next plan is derived.
:class:`AttachPoisoning` adds the sections to the estimate job's result dicts by key.

Counter (namespace ``ldpflow``): ``reports_flagged_as_poisoning``.
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam.metrics import Metrics

from ldpflow.core import poisoning, validation
from ldpflow.core.keys import ProtocolKey
from ldpflow.core.oracles import registry
from ldpflow.plan.steps import attach_poisoning  # the one attach every engine uses
from ldpflow.wire.envelope import ReportBatch

__all__ = ["PoisoningTallyFn", "MergePoisoningTalliesCombineFn", "DetectPoisoning",
           "AttachPoisoning"]


def _oracle_of(key):
    """The oracle of ``key`` if the defence handles it, else None."""
    key = ProtocolKey.coerce(key)
    if key.name not in poisoning.SUPPORTED:
        return None
    return registry.from_key(key)


class PoisoningTallyFn(beam.DoFn):
    """``(key, ReportBatch)`` -> ``(key, PoisoningTally)`` of one pass.

    The first pass builds each key's plan from the key; later passes take the plans of the
    previous step as a side input (a dict by key) and skip keys without one. Elements that
    are no :class:`ReportBatch` (the tallies of duplicates and capped reports that
    deduplication and caps put among the batches) are skipped.
    """

    def __init__(self, pass_index: int, level: float, population_level: float):
        super().__init__()
        self._pass_index = pass_index
        self._level = level
        self._population_level = population_level

    def process(self, element, plans=None):
        key, batch = element
        if not isinstance(batch, ReportBatch) or not len(batch):
            return
        if self._pass_index == 0:
            oracle = _oracle_of(key)
            if oracle is None:
                return
            plan = poisoning.initial_plan(oracle, self._level, self._population_level)
        else:
            plan = plans.get(key)
            if plan is None:
                return
        yield key, poisoning.tally(plan, batch.reports)


class MergePoisoningTalliesCombineFn(beam.CombineFn):
    """Merges the tallies of one pass and key exactly (only the first accumulator mutates,
    and it is a copy of an input, never an input itself)."""

    def create_accumulator(self):
        return None

    def add_input(self, accumulator, tally):
        if accumulator is None:
            return poisoning.PoisoningTally(
                tally.pass_index, {name: value.copy() for name, value in tally.counts.items()})
        return accumulator.merge(tally)

    def merge_accumulators(self, accumulators):
        merged = None
        for accumulator in accumulators:
            if accumulator is None:
                continue
            merged = accumulator if merged is None else merged.merge(accumulator)
        return merged

    def extract_output(self, accumulator):
        return accumulator


class _AdvanceFn(beam.DoFn):
    def __init__(self, pass_index: int, level: float, population_level: float):
        super().__init__()
        self._pass_index = pass_index
        self._level = level
        self._population_level = population_level

    def process(self, element, plans=None):
        key, tally = element
        if self._pass_index == 0:
            plan = poisoning.initial_plan(_oracle_of(key), self._level, self._population_level)
        else:
            plan = plans[key]
        yield key, poisoning.advance(plan, tally)


class _FinishFn(beam.DoFn):
    def __init__(self):
        super().__init__()
        self._flagged = Metrics.counter("ldpflow", "reports_flagged_as_poisoning")

    def process(self, element, plans):
        key, tally = element
        report = poisoning.finish(plans[key], tally)
        self._flagged.inc(report.flagged)
        yield key, report.to_dict()


class DetectPoisoning(beam.PTransform):
    """``(key, ReportBatch)`` -> ``(key, poisoning section)`` for every key of a supported
    oracle (``poisoning.SUPPORTED``); other keys (and heavy-hitter keys) yield nothing.

    Parameters
    ----------
    level : float, optional
        Per-report level (the share of genuine reports a per-report test may flag); by
        default each oracle family's (``poisoning.DEFAULT_LEVELS``).
    population_level : float
        Family-wise level of the population tests.

    The batches are read :data:`~ldpflow.core.poisoning.NUM_PASSES` times; give it the
    batches the estimate counts (after deduplication and caps, if any), so that both see
    the same reports.
    """

    def __init__(self, level: float | None = None,
                 population_level: float = poisoning.DEFAULT_POPULATION_LEVEL):
        super().__init__()
        # Checked here, before any pipeline runs (the oracle is checked per key).
        if level is not None:
            validation.check_probability(level, name="level", open_interval=True)
        validation.check_probability(population_level, name="population_level",
                                               open_interval=True)
        self._level = level
        self._population_level = population_level

    def expand(self, reports):
        levels = (self._level, self._population_level)
        plans = None
        for pass_index in range(poisoning.NUM_PASSES):
            side = {} if plans is None else {"plans": beam.pvalue.AsDict(plans)}
            tallies = (
                reports
                | f"Tally{pass_index}" >> beam.ParDo(PoisoningTallyFn(pass_index, *levels), **side)
                | f"Merge{pass_index}" >> beam.CombinePerKey(MergePoisoningTalliesCombineFn())
            )
            if pass_index < poisoning.NUM_PASSES - 1:
                plans = tallies | f"Advance{pass_index}" >> beam.ParDo(
                    _AdvanceFn(pass_index, *levels), **side
                )
        return tallies | "Finish" >> beam.ParDo(_FinishFn(), plans=beam.pvalue.AsDict(plans))


class AttachPoisoning(beam.PTransform):
    """Result dicts (``EstimateReports``) -> the same dicts with a ``poisoning`` section.

    Input: ``{"results": PCollection[dict], "poisoning": PCollection[(key, section)]}``. A
    key the defence does not cover gets ``{"error": ...}``; a key without reports keeps its
    result as it is.
    """

    def expand(self, inputs):
        return inputs["results"] | "Attach" >> beam.Map(
            attach_poisoning, beam.pvalue.AsDict(inputs["poisoning"]))
