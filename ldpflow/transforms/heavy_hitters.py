"""Heavy-hitter discovery (PEM, the prefix extending method) as Beam transforms.

Contract (:mod:`ldpflow.core.heavy_hitters` holds all the math):

* Input: ``(key, ReportBatch)`` elements of PEM reports, ``key`` a
  :meth:`~ldpflow.core.keys.ProtocolKey.heavy_hitters` (configuration and value codec). Reports of
  different keys are never mixed: every configuration present gets its own result.
* :class:`IdentifyHeavyHitters` unrolls the ``g`` stages at graph construction. The reports
  are split by group with one ``beam.Partition``; stage ``s`` counts group ``s``'s reports for
  the extensions of stage ``s - 1``'s survivors, which reach it as a side input (``AsDict``
  by key; stage 0 extends the empty prefix): the group's batches are gathered by key and
  shard (a few shards per key), :class:`CountStageFn` counts each shard into one
  :class:`~ldpflow.core.heavy_hitters.CandidateAccumulator` (exact integer sums),
  :class:`MergeStageCountsCombineFn` merges the shards' partial counts per key, and
  :func:`select_stage` estimates the candidates and applies the server's
  :class:`SurvivorRule` (:meth:`~ldpflow.core.heavy_hitters.PrefixExtendingMethod.select`,
  with the earlier stages' survivors and the codec's pruning). The output is one
  JSON-ready result dict per key (:func:`assemble_result`), scored against a truth list
  when one is given.
* Results equal :meth:`PrefixExtendingMethod.identify` on the same reports and rule exactly:
  the counts are integers and every step is deterministic.

Counts and timings are Beam metrics (namespace ``ldpflow``): counters
``heavy_hitter_reports``, ``heavy_hitter_candidates`` and ``heavy_hitter_survivors`` (summed
over stages and keys), the same per stage (``stageS_reports``, ``stageS_candidates``,
``stageS_survivors``, with ``stageS_aggregate_ms`` and ``stageS_estimate_ms``; summed over
keys) and distributions ``stage_aggregate_ms`` and ``stage_estimate_ms``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from ldpflow.core import codecs
from ldpflow.core import heavy_hitters as hh
from ldpflow.core.keys import ProtocolKey
from ldpflow.core.oracles import Reports
from ldpflow.wire.envelope import ReportBatch
from ldpflow.wire.results import heavy_hitters_document

__all__ = [
    "SurvivorRule",
    "StageCounts",
    "StageResult",
    "SplitGroupsFn",
    "CountStageFn",
    "MergeStageCountsCombineFn",
    "select_stage",
    "DEFAULT_SHARDS",
    "assemble_result",
    "IdentifyHeavyHitters",
    "WriteHeavyHitters",
    "heavy_hitters_document",
]

_LOGGER = logging.getLogger(__name__)
#: Counting tasks per key and stage.
DEFAULT_SHARDS = 4


@dataclasses.dataclass(frozen=True, kw_only=True)
class SurvivorRule:
    """The server's choices (nothing a client sends depends on them).

    Attributes
    ----------
    survivors : int, optional
        Prefixes kept per stage (default: the configuration's ``default_survivors``).
    threshold_sigma : float, optional
        Keep only candidates estimated at this many standard deviations or more.
    threshold : float, optional
        Keep only candidates of at least this estimated frequency.
    refine_sigma : float or None, default 3
        :func:`ldpflow.core.heavy_hitters.combine`'s ``z`` (None: each stage's own estimates).
    prune : bool, default True
        Prune candidates that cannot be prefixes of a value of the key's codec.
    truth : tuple, optional
        The true top values (decoded, in rank order) to score the results against.
    """

    survivors: int | None = None
    threshold_sigma: float | None = None
    threshold: float | None = None
    refine_sigma: float | None = hh.DEFAULT_REFINE_SIGMA
    prune: bool = True
    truth: tuple | None = None

    def select(self, pem: hh.PrefixExtendingMethod, codec: str, estimate: hh.StageEstimate,
               history: Sequence[hh.StageSurvivors]) -> hh.StageSurvivors:
        """``pem.select`` of an estimate under this rule."""
        valid = None
        if self.prune:
            valid = codecs.make_codec(codec, bits=pem.value_bits).valid_prefixes
        return pem.select(estimate, history=history, survivors=self.survivors,
                          threshold_sigma=self.threshold_sigma, threshold=self.threshold,
                          valid=valid, refine_sigma=self.refine_sigma)


def _configuration(key: tuple) -> tuple[hh.PrefixExtendingMethod, str]:
    key = ProtocolKey.coerce(key)
    return key.build(), key.codec


@dataclasses.dataclass(eq=False)
class StageCounts:
    """Partial counts of one stage for one key: mergeable.

    Attributes
    ----------
    accumulator : CandidateAccumulator or None
        ``None`` when the previous stage gave no survivors to extend (it failed or its group
        had no reports); the reports are still counted in ``n``.
    n : int
        Reports of the stage's group.
    batches : int
    """

    accumulator: hh.CandidateAccumulator | None
    n: int
    batches: int = 1

    def merge(self, other: StageCounts) -> StageCounts:
        """Add ``other`` into ``self`` (mutating only ``self``) and return ``self``."""
        if (self.accumulator is None) != (other.accumulator is None):
            raise ValueError("cannot merge counts of a stage with and without prefixes")
        if self.accumulator is not None:
            self.accumulator.merge(other.accumulator)
        self.n += other.n
        self.batches += other.batches
        return self

    def copy(self) -> StageCounts:
        acc = None if self.accumulator is None else self.accumulator.copy()
        return dataclasses.replace(self, accumulator=acc)


@dataclasses.dataclass(eq=False)
class StageResult:
    """The outcome of one stage for one key: the survivors and the stage's figures.

    Attributes
    ----------
    stage, prefix_bits : int
    n : int
        Reports of the stage's group.
    candidates : int
        How many candidates the stage estimated (at most the query limit).
    history : tuple of StageSurvivors
        The survivors of this stage and of every earlier one (the last entry is this
        stage's: the next stage's prefixes; the last stage's values).
    sigma : float
        The standard deviation of one estimated frequency at true frequency 0.
    batches : int
    error : str or None
        Why the stage has no survivors (a failed or empty earlier stage, an empty group).

    Timings are not carried here: they are Beam metrics (see the module docstring).
    """

    stage: int
    prefix_bits: int
    n: int
    candidates: int
    history: tuple
    sigma: float
    batches: int
    error: str | None = None

    @property
    def prefixes(self) -> np.ndarray:
        """This stage's survivors, best first."""
        return self.history[-1].prefixes if self.history else np.zeros(0, dtype=np.uint64)

    @property
    def frequencies(self) -> np.ndarray:
        """This stage's scores of its survivors (combined estimates)."""
        return self.history[-1].scores if self.history else np.zeros(0)

    def figures(self) -> dict[str, Any]:
        """The JSON-ready per-stage figures (no survivors)."""
        return {
            "stage": self.stage,
            "prefix_bits": self.prefix_bits,
            "reports": int(self.n),
            "candidates": int(self.candidates),
            "survivors": int(self.prefixes.size),
            "sigma": None if math.isnan(self.sigma) else float(self.sigma),
            "batches": int(self.batches),
            "error": self.error,
        }


class SplitGroupsFn(beam.DoFn):
    """``(key, ReportBatch)`` -> ``(key, group, Reports)``: one element per group present."""

    def __init__(self, num_stages: int):
        super().__init__()
        self._num_stages = num_stages

    def process(self, element):
        key, batch = element
        if not isinstance(batch, ReportBatch) or key[0] != hh.NAME:
            raise TypeError(f"expected (pem key, ReportBatch) elements, got key {key!r}")
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


def _shard(element, shards):
    """``(key, group, Reports)`` -> ``((key, shard), Reports)``: spread a key's batches over
    ``shards`` counting tasks (by the first report's random seed)."""
    key, _, reports = element
    return (key, int(reports.columns["seed"][0] % np.uint64(shards))), reports


class CountStageFn(beam.DoFn):
    """Counts one stage's group: ``((key, shard), [Reports, ...])`` -> ``(key, StageCounts)``.

    The input is grouped by key and shard, so each task emits one partial accumulator per
    key and shard for the merge (a few 8 MB accumulators, not one per batch; the raw
    reports, 32 bytes each, are what crosses the shuffle). Batches are counted together, up
    to ``2**20`` reports per call. Stage ``s > 0`` takes the previous stage's
    :class:`StageResult` per key as a side input (``AsDict``).
    """

    _MAX_REPORTS_PER_CALL = 1 << 20

    def __init__(self, stage: int):
        super().__init__()
        self._stage = stage
        self._reports = Metrics.counter("ldpflow", "heavy_hitter_reports")
        self._stage_reports = Metrics.counter("ldpflow", f"stage{stage}_reports")
        self._stage_ms = Metrics.counter("ldpflow", f"stage{stage}_aggregate_ms")
        self._aggregate_ms = Metrics.distribution("ldpflow", "stage_aggregate_ms")

    def setup(self):
        self._configs: dict[tuple, hh.PrefixExtendingMethod] = {}

    def process(self, element, previous: Mapping[tuple, StageResult] | None = None):
        (key, _), batches = element
        pem = self._configs.get(key)
        if pem is None:
            pem = self._configs[key] = _configuration(key)[0]
        prefixes, counted = None, self._stage == 0
        if self._stage > 0:
            before = (previous or {}).get(key)
            counted = before is not None and before.error is None
            prefixes = before.prefixes if counted else None
        total: StageCounts | None = None
        pending: list = []
        size = 0

        def count(parts):
            clock = time.perf_counter()
            reports = parts[0] if len(parts) == 1 else Reports.concat(parts)
            accumulator = pem.aggregate(self._stage, reports, prefixes) if counted else None
            seconds = time.perf_counter() - clock
            self._reports.inc(len(reports))
            self._stage_reports.inc(len(reports))
            self._stage_ms.inc(int(seconds * 1000))
            self._aggregate_ms.update(int(seconds * 1000))
            return StageCounts(accumulator, len(reports), len(parts))

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


class MergeStageCountsCombineFn(beam.CombineFn):
    """Merges the partial :class:`StageCounts` of one stage and key (exact sums)."""

    def create_accumulator(self) -> StageCounts | None:
        return None

    def add_input(self, accumulator: StageCounts | None, counts: StageCounts):
        # Inputs are never mutated: the first one is copied, later ones added into it.
        return counts.copy() if accumulator is None else accumulator.merge(counts)

    def merge_accumulators(self, accumulators: Iterable[StageCounts | None]):
        merged = None
        for accumulator in accumulators:  # may be a one-shot iterator: iterate once
            if accumulator is None:
                continue
            merged = accumulator if merged is None else merged.merge(accumulator)
        return merged

    def extract_output(self, accumulator: StageCounts | None) -> StageCounts | None:
        return accumulator


def select_stage(
    element: tuple[tuple, StageCounts],
    stage: int,
    rule: SurvivorRule | None = None,
    previous: Mapping[tuple, StageResult] | None = None,
) -> tuple[tuple, StageResult]:
    """``(key, StageCounts)`` -> ``(key, StageResult)``: estimate and keep the survivors."""
    key, counts = element
    rule = rule or SurvivorRule()
    pem, codec = _configuration(key)
    before = (previous or {}).get(key)
    history: tuple = () if before is None else tuple(before.history)
    kept: tuple = ()
    candidates, sigma, error = 0, math.nan, None
    if counts.accumulator is None:
        error = (f"group {stage - 1} has no reports" if before is None
                 else f"stage {stage - 1} failed: {before.error}")
    else:
        try:
            estimate = pem.estimate(counts.accumulator)
        except ValueError as exc:
            error = str(exc)
        else:
            kept = (*history, rule.select(pem, codec, estimate, history))
            candidates, sigma = int(estimate.candidates.size), estimate.sigma
    return key, StageResult(stage, pem.prefix_bits[stage], counts.n, candidates, kept,
                            sigma, counts.batches, error)


def assemble_result(
    element: tuple[tuple, Mapping[str, list]],
    num_stages: int,
    rule: SurvivorRule | None = None,
) -> dict[str, Any]:
    """One key's stage results (and dead-letter count) -> its JSON-ready result.

    ``{"configuration", "n", "group_sizes", "dead_letters", "top_k": [{"value", "frequency",
    "count"}], "stages": [...], "error"}``: values decoded by the key's codec, ``count`` the
    estimated number of users (``frequency * n``, ``n`` the reports of all groups); with a
    truth list in ``rule``, also ``"scores": {"precision", "recall", "f1", "ncr"}``.
    """
    key, grouped = element
    rule = rule or SurvivorRule()
    pem, codec_name = _configuration(key)
    stages: list[StageResult | None] = []
    for stage in range(num_stages):
        found = grouped.get(f"stage{stage}") or []
        stages.append(found[0] if found else None)
    group_sizes = [0 if s is None else int(s.n) for s in stages]
    population = sum(group_sizes)
    result: dict[str, Any] = {
        "configuration": {**pem.parameters, "codec": codec_name},
        "key": ProtocolKey.coerce(key).to_json(),
        "n": population,
        "group_sizes": group_sizes,
        "dead_letters": int(sum(grouped.get("dead") or [])),
        "top_k": [],
        "stages": [s.figures() for s in stages if s is not None],
        "error": None,
    }
    if population == 0:
        result["error"] = "no valid reports"
        return result
    for stage, found in enumerate(stages):
        if found is None:
            result["error"] = f"group {stage} has no reports"
            return result
        if found.error is not None:
            result["error"] = f"stage {stage}: {found.error}"
            return result
    last = stages[-1]
    codec = codecs.make_codec(codec_name, bits=pem.value_bits)
    top, freqs = last.history[-1].top(pem.top_k)
    values = codec.decode(top)
    if isinstance(codec, codecs.IntegerCodec):
        values = [int(v) for v in values]
    result["top_k"] = [
        {"value": v, "frequency": float(f), "count": float(f) * population}
        for v, f in zip(values, freqs.tolist(), strict=True)
    ]
    if rule.truth is not None:
        result["scores"] = score_against(values, rule.truth, pem.top_k)
    return result


def score_against(values: Sequence[Any], truth: Sequence[Any], k: int) -> dict[str, float]:
    """Precision, recall, F1 and NCR of decoded values against the first ``k`` true ones
    (:func:`ldpflow.core.heavy_hitters.score_top_k`; strings are compared as strings)."""
    ranked = list(dict.fromkeys(truth))[:k]
    index = {v: i for i, v in enumerate(dict.fromkeys([*ranked, *values]))}
    return hh.score_top_k([index[v] for v in values], [index[v] for v in ranked], k)


class _SelectStageFn(beam.DoFn):
    """:func:`select_stage` as a DoFn (without annotations Beam would read as type hints)."""

    def __init__(self, stage, rule):
        super().__init__()
        self._stage, self._rule = stage, rule
        self._candidates = Metrics.counter("ldpflow", "heavy_hitter_candidates")
        self._survivors = Metrics.counter("ldpflow", "heavy_hitter_survivors")
        self._stage_candidates = Metrics.counter("ldpflow", f"stage{stage}_candidates")
        self._stage_survivors = Metrics.counter("ldpflow", f"stage{stage}_survivors")
        self._stage_ms = Metrics.counter("ldpflow", f"stage{stage}_estimate_ms")
        self._estimate_ms = Metrics.distribution("ldpflow", "stage_estimate_ms")

    def process(self, element, previous=None):
        clock = time.perf_counter()
        key, result = select_stage(element, self._stage, self._rule, previous)
        milliseconds = int((time.perf_counter() - clock) * 1000)
        kept = int(result.prefixes.size)
        for total, per_stage, value in (
                (self._candidates, self._stage_candidates, result.candidates),
                (self._survivors, self._stage_survivors, kept)):
            total.inc(value)
            per_stage.inc(value)
        self._stage_ms.inc(milliseconds)
        self._estimate_ms.update(milliseconds)
        yield key, result


class _AssembleResultFn(beam.DoFn):
    def __init__(self, num_stages, rule):
        super().__init__()
        self._num_stages, self._rule = num_stages, rule

    def process(self, element):
        yield assemble_result(element, self._num_stages, self._rule)


class IdentifyHeavyHitters(beam.PTransform):
    """``(key, ReportBatch)`` of PEM reports -> one result dict per key (:func:`assemble_result`).

    Parameters
    ----------
    num_stages : int
        ``g``, fixed when the pipeline is built; every key must have this many groups (the
        reader refuses other configurations as dead letters).
    rule : SurvivorRule, optional
        The server's survivor rule, pruning and truth (applied to every key).
    dead_letters : PCollection of DeadLetter, optional
        Counted per key into the results (``dead_letters``); keys whose every report was
        refused get a result too, with ``n = 0``.
    shards : int, default 4
        How many counting tasks share one key's stage (each holds one accumulator of up to
        ``Q`` counters); they merge exactly.
    """

    def __init__(self, num_stages: int, rule: SurvivorRule | None = None, dead_letters=None,
                 shards: int = DEFAULT_SHARDS):
        super().__init__()
        for name, value in (("num_stages", num_stages), ("shards", shards)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self._num_stages = num_stages
        self._shards = shards
        self._rule = rule or SurvivorRule()
        self._dead = dead_letters

    def expand(self, reports):
        by_group = (reports
                    | "SplitGroups" >> beam.ParDo(SplitGroupsFn(self._num_stages))
                    | "PartitionGroups" >> beam.Partition(_by_group, self._num_stages))
        results: dict[str, Any] = {}
        previous = None
        for stage in range(self._num_stages):
            group = (by_group[stage]
                     | f"Shard{stage}" >> beam.Map(_shard, self._shards)
                     | f"Gather{stage}" >> beam.GroupByKey())
            count_fn = CountStageFn(stage)
            if previous is None:
                partial = group | f"Count{stage}" >> beam.ParDo(count_fn)
            else:
                partial = group | f"Count{stage}" >> beam.ParDo(
                    count_fn, beam.pvalue.AsDict(previous))
            counts = partial | f"Merge{stage}" >> beam.CombinePerKey(MergeStageCountsCombineFn())
            side = () if previous is None else (beam.pvalue.AsDict(previous),)
            previous = counts | f"Select{stage}" >> beam.ParDo(
                _SelectStageFn(stage, self._rule), *side)
            results[f"stage{stage}"] = previous
        if self._dead is not None:
            results["dead"] = (
                self._dead
                | "PemDeadLetters" >> beam.Filter(
                    lambda letter: letter.key is not None and letter.key[0] == hh.NAME)
                | "DeadKey" >> beam.Map(lambda letter: (tuple(letter.key), letter.count))
                | "DeadPerKey" >> beam.CombinePerKey(sum)
            )
        return (
            results
            | "JoinStages" >> beam.CoGroupByKey()
            | "Assemble" >> beam.ParDo(_AssembleResultFn(self._num_stages, self._rule))
        )


class _WriteHeavyHittersFn(beam.DoFn):
    def __init__(self, output: str, started: float | None):
        super().__init__()
        self._output = output.rstrip("/")
        self._started = started

    def process(self, results, dead_letters, duplicates=0):
        elapsed = None if self._started is None else time.time() - self._started
        document = heavy_hitters_document(results, dead_letters, elapsed, duplicates)
        ranked = document["results"]
        if ranked and ranked[0]["n"] > 0 and "scores" in ranked[0]:
            document["scores"] = ranked[0]["scores"]  # of the top-level configuration
        with FileSystems.create(f"{self._output}/heavy_hitters.json") as f:
            f.write(json.dumps(document, indent=1).encode("utf-8"))
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
