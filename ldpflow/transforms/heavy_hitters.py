"""Heavy-hitter discovery (every protocol of :mod:`ldpflow.core.heavy_hitters`) as Beam
transforms.

Contract (:mod:`ldpflow.core.heavy_hitters` holds all the math):

* Input: ``(key, ReportBatch)`` elements of one heavy-hitter protocol's reports, ``key`` a
  :meth:`~ldpflow.core.keys.ProtocolKey.heavy_hitters` (configuration and value codec).
  Reports of different keys are never mixed: every configuration present gets its own
  result.
* :class:`IdentifyHeavyHitters` unrolls the protocol's ``num_passes`` passes at graph
  construction (the family's pass contract, :mod:`ldpflow.core.heavy_hitters.base`). The
  reports are split by group with one ``beam.Partition``; pass ``s`` reads the groups
  ``pass_groups(s)`` and what pass ``s - 1`` found (its :class:`PassOutcome` per key, a side
  input ``AsDict``): the batches are gathered by key and shard (a few shards per key),
  :class:`CountPassFn` counts each shard into one :class:`~ldpflow.core.heavy_hitters.
  PassCounts` (exact integer sums), :class:`MergePassCountsCombineFn` merges the shards'
  partial counts per key, and :func:`advance_pass` estimates and keeps what the next pass
  needs under the server's :class:`ServerRule` (options, codec pruning). The output is one
  JSON-ready result dict per key (:func:`assemble_result`), scored against a truth list when
  one is given.
* :class:`IdentifyHeavyHittersOfFiles` is what ``ldpflow heavy-hitters`` runs on Beam: the
  same passes over the job's input files, with no report in a shuffle. Pass 0 is counted
  where the reports are read (:class:`CountReportsFn`, one running sum per key and bundle),
  each pass ``s > 0`` reads the input's ranges again (:class:`CountRangesFn`, the job
  plan's ``read_pass``) for the candidates pass ``s - 1`` left, and each pass's sums
  (:class:`~ldpflow.plan.heavy_hitters.PassTally`, merged by
  :class:`AddTalliesCombineFn`) are corrected for the copies of repeated report ids
  (:class:`CorrectPassFn`: ``all - repeated rows + kept rows``, the plan's correction);
  deduplication shuffles only the id hashes and the rows of repeated ids
  (:mod:`ldpflow.transforms.dedup`). Its sums, documents and dead letters equal the job
  plan's on every engine to the last integer and byte
  (``tests/plan/test_heavy_hitter_engines.py``).
* Results equal the protocol's ``identify`` on the same reports and rule exactly: the counts
  are integers and every step is deterministic.

Counts and timings are Beam metrics (namespace ``ldpflow``): counters
``heavy_hitter_reports``, ``heavy_hitter_candidates`` and ``heavy_hitter_survivors`` (summed
over passes and keys), the same per pass (``stageS_reports``, ``stageS_candidates``,
``stageS_survivors``, with ``stageS_aggregate_ms`` and ``stageS_estimate_ms``; summed over
keys) and distributions ``pass_aggregate_ms`` and ``pass_estimate_ms``; with
``ServerRule(poisoning="detect")``, ``poisoning_passes_tested`` and ``poisoning_alarms``
(passes tested and passes whose test raised its alarm, over keys).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.io import fileio
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows

from ldpflow.core import heavy_hitters as hh
from ldpflow.core import validation
from ldpflow.core.keys import ProtocolKey
from ldpflow.core.oracles import Reports
from ldpflow.plan.heavy_hitters import (  # the Beam-free steps every engine shares
    MAX_REPORTS_PER_COUNT,
    POISONING_CHOICES,
    RANGE_BYTES,
    PassOutcome,
    PassPartial,
    PassTally,
    ServerRule,
    _configuration,
    advance_pass,
    assemble_result,
    corrected_tallies,
    heavy_hitters_file,
    pass_tally,
    poisoning_section,
    read_pass,
)
from ldpflow.plan.steps import RangeTask
from ldpflow.transforms.io import PlanRangesFn, open_input
from ldpflow.wire.envelope import ReportBatch
from ldpflow.wire.results import heavy_hitters_document

__all__ = [
    "ServerRule",
    "PassPartial",
    "PassOutcome",
    "SplitGroupsFn",
    "CountPassFn",
    "MergePassCountsCombineFn",
    "advance_pass",
    "DEFAULT_SHARDS",
    "POISONING_CHOICES",
    "poisoning_section",
    "assemble_result",
    "IdentifyHeavyHitters",
    "CountReportsFn",
    "CountRangesFn",
    "AddTalliesCombineFn",
    "CorrectPassFn",
    "IdentifyHeavyHittersOfFiles",
    "WriteHeavyHitters",
    "heavy_hitters_document",
]

_LOGGER = logging.getLogger(__name__)
#: Counting tasks per key and pass.
DEFAULT_SHARDS = 4


class SplitGroupsFn(beam.DoFn):
    """``(key, ReportBatch)`` -> ``(key, group, Reports)``: one element per group present."""

    def process(self, element):
        key, batch = element
        if not isinstance(batch, ReportBatch) or ProtocolKey.coerce(key).codec is None:
            raise TypeError(f"expected (heavy-hitter key, ReportBatch) elements, got key "
                            f"{key!r}")
        groups = batch.reports.columns["group"]
        if groups.size == 0:
            return
        present = np.unique(groups)
        if present.size == 1:  # files written in group order, or small batches
            yield key, int(present[0]), batch.reports
            return
        order = np.argsort(groups, kind="stable")
        bounds = np.searchsorted(groups[order], present, side="left").tolist() + [groups.size]
        for i, group in enumerate(present.tolist()):
            yield key, int(group), batch.reports[order[bounds[i] : bounds[i + 1]]]


def _by_group(element, num_partitions):  # no annotations: Beam would read them as type hints
    return element[1]


def _shard(element, shards, by_group=False):
    """``(key, group, Reports)`` -> ``((key, shard), Reports)``: spread a key's batches over
    ``shards`` counting tasks: by the first report's random seed, or (a pass that reads
    several groups) by group, so that a task holds the sums of a few groups only (SFP: one
    ``2**piece_bits`` sum per position)."""
    key, group, reports = element
    if by_group:
        return (key, group % shards), reports
    return (key, int(reports.columns["seed"][0] % np.uint64(shards))), reports


class CountPassFn(beam.DoFn):
    """Counts one pass: ``((key, shard), [Reports, ...])`` -> ``(key, PassPartial)``.

    The input is grouped by key and shard, so each task emits one partial count per key and
    shard for the merge (a few accumulators, not one per batch; the raw reports are what
    crosses the shuffle). Batches are counted together, up to ``2**20`` reports per call.
    Pass ``s > 0`` takes the previous pass's :class:`PassOutcome` per key as a side input
    (``AsDict``).
    """

    _MAX_REPORTS_PER_CALL = MAX_REPORTS_PER_COUNT

    def __init__(self, pass_index: int):
        super().__init__()
        self._pass_index = pass_index
        self._reports = Metrics.counter("ldpflow", "heavy_hitter_reports")
        self._pass_reports = Metrics.counter("ldpflow", f"pass{pass_index}_reports")
        self._pass_ms = Metrics.counter("ldpflow", f"pass{pass_index}_aggregate_ms")
        self._aggregate_ms = Metrics.distribution("ldpflow", "pass_aggregate_ms")

    def setup(self):
        self._configs: dict[tuple, hh.HeavyHitterProtocol] = {}

    def process(self, element, previous: Mapping[tuple, PassOutcome] | None = None):
        (key, _), batches = element
        protocol = self._configs.get(key)
        if protocol is None:
            protocol = self._configs[key] = _configuration(key)[0]
        if self._pass_index == 0:
            state: hh.PassState | None = protocol.initial_state()
        else:
            before = (previous or {}).get(key)
            state = None if before is None else before.state
        total: PassPartial | None = None
        pending: list = []
        size = 0

        def count(parts):
            clock = time.perf_counter()
            reports = parts[0] if len(parts) == 1 else Reports.concat(parts)
            counts = (
                None if state is None else protocol.accumulate(self._pass_index, reports, state)
            )
            seconds = time.perf_counter() - clock
            self._reports.inc(len(reports))
            self._pass_reports.inc(len(reports))
            self._pass_ms.inc(int(seconds * 1000))
            self._aggregate_ms.update(int(seconds * 1000))
            read = np.bincount(reports.columns["group"], minlength=protocol.num_groups)
            return PassPartial(counts, read[: protocol.num_groups].astype(np.int64), len(parts))

        for reports in batches:  # may be a one-shot iterable: iterate once
            pending.append(reports)
            size += len(reports)
            if size >= self._MAX_REPORTS_PER_CALL:
                part = count(pending)
                total = part if total is None else total.merge(part)
                pending, size = [], 0
        if pending:
            part = count(pending)
            total = part if total is None else total.merge(part)
        if total is not None:
            yield key, total


class MergePassCountsCombineFn(beam.CombineFn):
    """Merges the partial :class:`PassPartial` of one pass and key (exact sums)."""

    def create_accumulator(self) -> PassPartial | None:
        return None

    def add_input(self, accumulator: PassPartial | None, partial: PassPartial):
        # Inputs are never mutated: the first one is copied, later ones added into it.
        return partial.copy() if accumulator is None else accumulator.merge(partial)

    def merge_accumulators(self, accumulators: Iterable[PassPartial | None]):
        merged = None
        for accumulator in accumulators:  # may be a one-shot iterator: iterate once
            if accumulator is None:
                continue
            merged = accumulator if merged is None else merged.merge(accumulator)
        return merged

    def extract_output(self, accumulator: PassPartial | None) -> PassPartial | None:
        return accumulator


class _AdvancePassFn(beam.DoFn):
    """:func:`advance_pass` as a DoFn (without annotations Beam would read as type hints)."""

    def __init__(self, pass_index, rule):
        super().__init__()
        self._pass_index, self._rule = pass_index, rule
        self._candidates = Metrics.counter("ldpflow", "heavy_hitter_candidates")
        self._survivors = Metrics.counter("ldpflow", "heavy_hitter_survivors")
        self._pass_candidates = Metrics.counter("ldpflow", f"pass{pass_index}_candidates")
        self._pass_survivors = Metrics.counter("ldpflow", f"pass{pass_index}_survivors")
        self._pass_ms = Metrics.counter("ldpflow", f"pass{pass_index}_estimate_ms")
        self._estimate_ms = Metrics.distribution("ldpflow", "pass_estimate_ms")
        self._tested = Metrics.counter("ldpflow", "poisoning_passes_tested")
        self._alarms = Metrics.counter("ldpflow", "poisoning_alarms")

    def process(self, element, previous=None):
        clock = time.perf_counter()
        key, outcome = advance_pass(element, self._pass_index, self._rule, previous)
        milliseconds = int((time.perf_counter() - clock) * 1000)
        if outcome.state is not None:
            figures = outcome.state.figures[-1]
            for total, per_pass, value in (
                    (self._candidates, self._pass_candidates, figures.candidates),
                    (self._survivors, self._pass_survivors, figures.survivors)):
                total.inc(value)
                per_pass.inc(value)
        self._pass_ms.inc(milliseconds)
        self._estimate_ms.update(milliseconds)
        test = outcome.poisoning
        if test is not None and test["dispersion"] is not None:
            self._tested.inc()
            self._alarms.inc(int(test["dispersion"]["alarm"]))
        yield key, outcome


class _AssembleResultFn(beam.DoFn):
    def __init__(self, num_passes, rule):
        super().__init__()
        self._num_passes, self._rule = num_passes, rule

    def process(self, element):
        yield assemble_result(element, self._num_passes, self._rule)


class IdentifyHeavyHitters(beam.PTransform):
    """``(key, ReportBatch)`` of one protocol's reports -> one result dict per key
    (:func:`assemble_result`).

    Parameters
    ----------
    protocol : HeavyHitterProtocol
        The configuration the reader accepts (its epsilon may differ per key): it fixes the
        groups and passes when the pipeline is built.
    rule : ServerRule, optional
        The server's options, pruning and truth (applied to every key).
    dead_letters : PCollection of DeadLetter, optional
        Counted per key into the results (``dead_letters``); keys whose every report was
        refused get a result too, with ``n = 0``.
    shards : int, default 4
        How many counting tasks share one key's pass (each holds one accumulator); they merge
        exactly.
    """

    def __init__(self, protocol: hh.HeavyHitterProtocol, rule: ServerRule | None = None,
                 dead_letters=None, shards: int = DEFAULT_SHARDS):
        super().__init__()
        if not isinstance(protocol, hh.HeavyHitterProtocol):
            raise TypeError(f"protocol must be a HeavyHitterProtocol, got "
                            f"{type(protocol).__name__}")
        validation.check_limit(shards, name="shards")
        self._protocol = protocol
        self._shards = shards
        self._rule = rule or ServerRule()
        protocol.check_options(self._rule.options)
        self._dead = dead_letters

    def expand(self, reports):
        protocol = self._protocol
        split = reports | "SplitGroups" >> beam.ParDo(SplitGroupsFn())
        by_group = None
        if any(len(protocol.pass_groups(s)) < protocol.num_groups
               for s in range(protocol.num_passes)):
            by_group = split | "PartitionGroups" >> beam.Partition(_by_group,
                                                                   protocol.num_groups)
        results: dict[str, Any] = {}
        previous = None
        for pass_index in range(protocol.num_passes):
            groups = protocol.pass_groups(pass_index)
            if len(groups) == protocol.num_groups:
                source = split
            elif len(groups) == 1:
                source = by_group[groups[0]]
            else:
                source = (tuple(by_group[g] for g in groups)
                          | f"Groups{pass_index}" >> beam.Flatten())
            gathered = (source
                        | f"Shard{pass_index}" >> beam.Map(_shard, self._shards, len(groups) > 1)
                        | f"Gather{pass_index}" >> beam.GroupByKey())
            side = () if previous is None else (beam.pvalue.AsDict(previous),)
            partial = gathered | f"Count{pass_index}" >> beam.ParDo(CountPassFn(pass_index), *side)
            counts = partial | f"Merge{pass_index}" >> beam.CombinePerKey(
                MergePassCountsCombineFn()
            )
            previous = counts | f"Select{pass_index}" >> beam.ParDo(
                _AdvancePassFn(pass_index, self._rule), *side)
            results[f"pass{pass_index}"] = previous
        return _assemble(results, self._dead, protocol, self._rule)


def _assemble(results: dict[str, Any], dead_letters, protocol: hh.HeavyHitterProtocol,
              rule: ServerRule):
    """Each key's pass outcomes (``results["stageS"]``) and dead letters -> its result dict
    (:func:`assemble_result`): the last steps of both identifying transforms."""
    if dead_letters is not None:
        name = protocol.name
        results["dead"] = (
            dead_letters
            | "HeavyHitterDeadLetters" >> beam.Filter(
                lambda letter: letter.key is not None and letter.key[0] == name)
            | "DeadKey" >> beam.Map(lambda letter: (tuple(letter.key), letter.count))
            | "DeadPerKey" >> beam.CombinePerKey(sum)
        )
    return (
        results
        | "JoinStages" >> beam.CoGroupByKey()
        | "Assemble" >> beam.ParDo(_AssembleResultFn(protocol.num_passes, rule))
    )


# -- the job's passes over its files: reports counted where they are read ----------------------
class _BundleTalliesFn(beam.DoFn):
    """One running :class:`~ldpflow.plan.heavy_hitters.PassTally` per key and bundle (added
    in place: this DoFn made them), emitted when the bundle ends: a task holds one pass's
    sums, not one per batch or range, and no report crosses a shuffle."""

    def __init__(self, pass_index: int):
        super().__init__()
        self._pass_index = pass_index
        self._pass_ms = Metrics.counter("ldpflow", f"pass{pass_index}_aggregate_ms")
        self._aggregate_ms = Metrics.distribution("ldpflow", "pass_aggregate_ms")

    def start_bundle(self):
        self._sums: dict[tuple, PassTally] = {}

    def _took(self, seconds: float) -> None:
        self._pass_ms.inc(int(seconds * 1000))
        self._aggregate_ms.update(int(seconds * 1000))

    def _add(self, key: tuple, tally: PassTally | None) -> None:
        if tally is not None:
            self._sums[key] = self._sums[key].merge(tally) if key in self._sums else tally

    def finish_bundle(self):
        sums, self._sums = self._sums, {}
        for key, tally in sums.items():
            yield GlobalWindows.windowed_value((key, tally))


class CountReportsFn(_BundleTalliesFn):
    """Pass 0 where the reports are read: ``(key, ReportBatch)`` (with their id hashes) ->
    ``(key, PassTally)``, one per key and bundle. A key's batches are counted together, up
    to ``2**20`` reports a call (:data:`~ldpflow.plan.heavy_hitters.MAX_REPORTS_PER_COUNT`,
    as every engine)."""

    _MAX_REPORTS_PER_CALL = MAX_REPORTS_PER_COUNT

    def __init__(self):
        super().__init__(0)

    def setup(self):
        self._configs: dict[tuple, hh.HeavyHitterProtocol] = {}

    def start_bundle(self):
        super().start_bundle()
        self._pending: dict[tuple, list[ReportBatch]] = {}
        self._sizes: dict[tuple, int] = {}

    def process(self, element):
        key, batch = element
        key = tuple(key)
        if batch.report_ids is not None:  # needed only where copies are resolved
            batch = dataclasses.replace(batch, report_ids=None)
        self._pending.setdefault(key, []).append(batch)
        self._sizes[key] = self._sizes.get(key, 0) + len(batch)
        if self._sizes[key] >= self._MAX_REPORTS_PER_CALL:
            self._count(key)

    def _count(self, key: tuple) -> None:
        protocol = self._configs.get(key)
        if protocol is None:
            protocol = self._configs[key] = _configuration(key)[0]
        clock = time.perf_counter()
        del self._sizes[key]
        self._add(key, pass_tally(protocol, 0, protocol.initial_state(), self._pending.pop(key)))
        self._took(time.perf_counter() - clock)

    def finish_bundle(self):
        for key in list(self._pending):
            self._count(key)
        yield from super().finish_bundle()


class CountRangesFn(_BundleTalliesFn):
    """Pass ``pass_index > 0`` over the input again: a range ``(path, format, start, end)`` ->
    ``(key, PassTally)`` of every valid report of the pass's groups in it
    (:func:`~ldpflow.plan.heavy_hitters.read_pass`, the plan's read: the same parse path and
    acceptance policy as the first read), counted for the candidates pass ``pass_index - 1``
    left (its :class:`PassOutcome` per key, a side input ``AsDict``); one tally per key and
    bundle. Reports are never held between passes."""

    def __init__(self, pass_index: int, policy):
        super().__init__(pass_index)
        self._policy = policy

    def process(self, element, previous: Mapping[tuple, PassOutcome] | None = None):
        path, fmt, start, end = element
        states = {key: outcome.state for key, outcome in (previous or {}).items()}
        clock = time.perf_counter()
        read = read_pass(RangeTask(0, path, fmt, start, end), self._policy, self._pass_index,
                         states, opener=open_input)
        self._took(time.perf_counter() - clock)
        for key, tally in read.tallies.items():
            self._add(key, tally)
        return ()


class AddTalliesCombineFn(beam.CombineFn):
    """Adds the :class:`~ldpflow.plan.heavy_hitters.PassTally` of one pass and key (exact
    integer sums; ``+`` is pure, so no input is changed)."""

    def create_accumulator(self) -> PassTally | None:
        return None

    def add_input(self, accumulator: PassTally | None, tally: PassTally) -> PassTally:
        return tally if accumulator is None else accumulator + tally

    def merge_accumulators(self, accumulators: Iterable[PassTally | None]):
        merged = None
        for accumulator in accumulators:  # may be a one-shot iterator: iterate once
            if accumulator is not None:
                merged = accumulator if merged is None else merged + accumulator
        return merged

    def extract_output(self, accumulator: PassTally | None) -> PassTally | None:
        return accumulator


class CorrectPassFn(beam.DoFn):
    """``(key, PassTally)`` of every report read -> ``(key, PassPartial)`` of one copy of
    each report id: less the rows of repeated ids, plus the copies kept of them (the
    plan's :func:`~ldpflow.plan.heavy_hitters.corrected_tallies`, exact: every sum is linear in
    the reports). The rows of repeated ids and the copies kept (few) are side inputs
    (``AsList``); pass ``s > 0`` also takes pass ``s - 1``'s outcome per key."""

    def __init__(self, pass_index: int):
        super().__init__()
        self._pass_index = pass_index
        self._reports = Metrics.counter("ldpflow", "heavy_hitter_reports")
        self._pass_reports = Metrics.counter("ldpflow", f"pass{pass_index}_reports")

    def process(self, element, repeats, kept, previous=None):
        key, tally = element
        states = {k: outcome.state for k, outcome in (previous or {}).items()}
        mine = [(k, batch) for k, batch in repeats if tuple(k) == key]
        copies = [(k, batch) for k, batch in kept if tuple(k) == key]
        out = corrected_tallies({key: tally}, self._pass_index, states, mine, copies)
        if key in out:  # a key whose every report was a copy of another is gone
            n = out[key].n
            self._reports.inc(n)
            self._pass_reports.inc(n)
            yield key, out[key].partial()


class IdentifyHeavyHittersOfFiles(beam.PTransform):
    """The job's passes over its input files -> one result dict per key
    (:func:`assemble_result`), with the results of :class:`IdentifyHeavyHitters` on the
    same deduplicated reports, and of the job plan (``ldpflow.plan.heavy_hitters``) to the
    last integer.

    Input: a dict of PCollections ``{"reports": (key, ReportBatch) of the rows read once
    (with their id hashes), "repeats": the rows of repeated ids split off by the read
    (``ReadReports(..., repeated=...)``), "kept": one copy of each of those
    (:class:`~ldpflow.transforms.dedup.DeduplicateReports`' batches)}``. Pass 0 is counted
    where the reports are read (:class:`CountReportsFn`); each pass ``s > 0`` reads the
    ranges of ``file_pattern`` again (:class:`CountRangesFn`) with pass ``s - 1``'s outcome
    as a side input. Each pass's sums are merged per key (:class:`AddTalliesCombineFn`),
    corrected for the copies (:class:`CorrectPassFn`) and advanced (:func:`advance_pass`).
    No report crosses a shuffle and none is held between passes: what a task holds is a
    range's chunks and the pass's sums; what grows with n is the rows of repeated ids.

    Parameters
    ----------
    file_pattern, fmt, policy
        The input and the acceptance policy of the job's first read (the same run key:
        the id hashes of every read agree).
    protocol, rule, dead_letters
        As :class:`IdentifyHeavyHitters`.
    range_bytes : int
        The ranges each later pass reads (the plan's, by default).
    """

    def __init__(self, file_pattern: str, fmt: str | None, policy,
                 protocol: hh.HeavyHitterProtocol, rule: ServerRule | None = None,
                 dead_letters=None, range_bytes: int = RANGE_BYTES):
        super().__init__()
        if not isinstance(protocol, hh.HeavyHitterProtocol):
            raise TypeError(f"protocol must be a HeavyHitterProtocol, got "
                            f"{type(protocol).__name__}")
        self._pattern, self._fmt, self._policy = file_pattern, fmt, policy
        self._protocol = protocol
        self._rule = rule or ServerRule()
        protocol.check_options(self._rule.options)
        self._dead = dead_letters
        self._range_bytes = range_bytes

    def expand(self, inputs):
        protocol = self._protocol
        repeats = beam.pvalue.AsList(inputs["repeats"])
        kept = beam.pvalue.AsList(inputs["kept"])
        ranges = None
        if protocol.num_passes > 1:
            ranges = (
                inputs["reports"].pipeline
                | "MatchAgain" >> fileio.MatchFiles(self._pattern)
                | "OpenAgain" >> fileio.ReadMatches()
                | "PlanRangesAgain" >> beam.ParDo(PlanRangesFn(self._fmt, self._range_bytes))
                | "SpreadRangesAgain" >> beam.Reshuffle()
            )
        results: dict[str, Any] = {}
        previous = None
        for pass_index in range(protocol.num_passes):
            side = () if previous is None else (beam.pvalue.AsDict(previous),)
            if pass_index == 0:  # each counted in the read's pass; only the sums are flattened
                # (a Flatten of the reports would hold them all: FnApiRunner materialises it)
                tallies = (
                    (inputs["reports"] | "Count0" >> beam.ParDo(CountReportsFn()),
                     inputs["repeats"] | "CountRepeats0" >> beam.ParDo(CountReportsFn()))
                    | "EveryRow0" >> beam.Flatten())
            else:
                tallies = ranges | f"Count{pass_index}" >> beam.ParDo(
                    CountRangesFn(pass_index, self._policy), *side)
            merged = tallies | f"Merge{pass_index}" >> beam.CombinePerKey(AddTalliesCombineFn())
            partial = merged | f"Correct{pass_index}" >> beam.ParDo(
                CorrectPassFn(pass_index), repeats, kept, *side
            )
            previous = partial | f"Select{pass_index}" >> beam.ParDo(
                _AdvancePassFn(pass_index, self._rule), *side)
            results[f"pass{pass_index}"] = previous
        return _assemble(results, self._dead, protocol, self._rule)


class _WriteHeavyHittersFn(beam.DoFn):
    def __init__(self, output: str, started: float | None):
        super().__init__()
        self._output = output.rstrip("/")
        self._started = started

    def process(self, results, dead_letters, duplicates=0):
        elapsed = None if self._started is None else time.time() - self._started
        document, data = heavy_hitters_file(results, dead_letters, elapsed, duplicates)
        with FileSystems.create(f"{self._output}/heavy_hitters.json") as f:
            f.write(data)
        yield document


class WriteHeavyHitters(beam.PTransform):
    """Result dicts -> ``OUTPUT/heavy_hitters.json`` (:func:`heavy_hitters_document`).

    ``dead_letter_summary`` is a singleton PCollection (``{"total", "by_reason"}``), and
    ``duplicates`` (optional) one of the number of repeated reports dropped;
    ``started`` (Unix time, e.g. when the job was launched) gives ``elapsed_seconds``.
    Outputs the document.
    """

    def __init__(self, output: str, dead_letter_summary, started: float | None = None,
                 duplicates=None):
        super().__init__()
        self._output = output
        self._summary = dead_letter_summary
        self._started = started
        self._duplicates = duplicates

    def expand(self, results):
        sides = [beam.pvalue.AsSingleton(self._summary)]
        if self._duplicates is not None:
            sides.append(beam.pvalue.AsSingleton(self._duplicates))
        return (
            results
            | "Collect" >> beam.combiners.ToList()
            | "WriteFile" >> beam.ParDo(_WriteHeavyHittersFn(self._output, self._started),
                                        *sides)
        )
