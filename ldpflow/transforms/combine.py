"""The CombineFn that adds batches of reports into an oracle's integer accumulator."""

from __future__ import annotations

from collections.abc import Iterable

import apache_beam as beam

from ldpflow.core.oracles import Accumulator, FrequencyOracle, Reports
from ldpflow.plan.steps import count_batch
from ldpflow.wire.envelope import ReportBatch

__all__ = ["FrequencyOracleCombineFn"]


class FrequencyOracleCombineFn(beam.CombineFn):
    """Adds whole batches of reports into an :class:`Accumulator`; merges exactly.

    Parameters
    ----------
    oracle : FrequencyOracle, optional
        With an oracle, every input must belong to it and the empty accumulator is its own.
        Without one (the keyed form, for ``CombinePerKey`` over many oracle/parameter keys),
        the accumulator is ``None`` until the first :class:`ReportBatch` names its key.

    A :class:`ReportBatch` comes from the wire parse, which has checked every row, so it
    is counted without a second check (:func:`ldpflow.plan.steps.count_batch`, as every
    engine counts); bare :class:`Reports` are checked.

    The output is the accumulator itself, so a streaming pane (or a caller) can estimate and
    post-process from the merged counts. Inputs are :class:`ReportBatch`, accumulators
    counted upstream, or (with an oracle) :class:`Reports`; the math lives in the oracle,
    this class only forwards calls.
    """

    def __init__(self, oracle: FrequencyOracle | None = None):
        super().__init__()
        self._oracle = oracle

    def create_accumulator(self) -> Accumulator | None:
        return None if self._oracle is None else self._oracle.create_accumulator()

    def add_input(self, accumulator: Accumulator | None,
                  batch: ReportBatch | Reports | Accumulator):
        if isinstance(batch, Accumulator):  # counted upstream (e.g. after deduplication)
            if self._oracle is not None and batch.key != self._oracle.key:
                raise ValueError(
                    f"counts of {batch.key} given to the combiner of {self._oracle.key}")
            return batch.copy() if accumulator is None else accumulator.merge(batch)
        if isinstance(batch, ReportBatch):  # checked once, by the parse
            counted = count_batch(batch)
            if self._oracle is not None and counted.key != self._oracle.key:
                raise ValueError(
                    f"reports of {counted.key} given to the combiner of {self._oracle.key}")
        else:
            if self._oracle is None:
                raise TypeError("the keyed FrequencyOracleCombineFn needs ReportBatch inputs")
            counted = self._oracle.aggregate(batch)
        return counted if accumulator is None else accumulator.merge(counted)

    def add_inputs(self, accumulator, elements: Iterable):
        for element in elements:
            accumulator = self.add_input(accumulator, element)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[Accumulator | None]):
        merged = None
        for accumulator in accumulators:  # may be a one-shot iterator: iterate once
            if accumulator is None:
                continue
            merged = accumulator if merged is None else merged.merge(accumulator)
        return merged if merged is not None else self.create_accumulator()

    def extract_output(self, accumulator: Accumulator | None) -> Accumulator | None:
        return accumulator
