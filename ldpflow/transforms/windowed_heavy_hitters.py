"""Heavy hitters per window of a stream: every protocol of :mod:`ldpflow.core.heavy_hitters`.

Contract:

* Input: windowed ``(key, element)`` pairs of one protocol's keys
  (:meth:`~ldpflow.core.keys.ProtocolKey.heavy_hitters`), where ``element`` is a
  deduplicated :class:`~ldpflow.wire.envelope.ReportBatch`, a :class:`Duplicates` tally of
  the copies the deduplication dropped, or a keyed
  :class:`~ldpflow.wire.envelope.DeadLetter`.
* :class:`WindowPassesCombineFn` keeps, per key and window, what the protocol's passes need
  (:class:`WindowPasses`) and runs them when a pane fires. Pass ``0`` needs no earlier
  result, so the reports of the groups only it reads are counted into its sums (exact
  integer sums, whose size does not depend on the reports) in runs of :data:`COUNT_RUN`;
  the reports of the groups a later pass reads are kept as compact columns (narrowest
  integer dtypes, a column constant over a group stored once), because pass ``s`` can
  count them only for what pass ``s - 1`` found, which is known when the window's reports
  are. Each user is in exactly one group, so a report is held once.
* Passes are estimated with the batch job's own steps (:func:`~ldpflow.transforms.
  heavy_hitters.advance_pass`, :func:`~ldpflow.transforms.heavy_hitters.assemble_result`
  under one :class:`~ldpflow.transforms.heavy_hitters.ServerRule`), so a pane's result
  equals the batch job's on the same reports: same candidates, counts, survivors and heavy
  hitters (the counts are integers and every step is deterministic). Only a pass's
  ``batches`` figure differs (how the reports arrived).
* :class:`FormatHeavyHitterPaneFn` makes the batch job's ``heavy_hitters.json`` document
  (:func:`~ldpflow.wire.results.heavy_hitters_document`) of one key's result, tagged with
  ``window_start``, ``window_end`` (ms since the epoch), ``pane`` (``EARLY``, ``ON_TIME``,
  ``LATE``) and ``pane_index``.

Memory per open window and key: pass 0's sums (as the batch job's first pass holds) plus,
for the reports of the groups a later pass reads, their columns at a few bytes each (PEM,
TreeHist: ``(g - 1) / g`` of the window's ``n`` reports, ``g`` groups, 9 bytes a report at
64 bits; SPM, MCM, SFP re-read every group, so every report is kept: 28, 42 and 19 bytes).
``docs/streaming.md`` gives the figures and how they scale.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import apache_beam as beam
import numpy as np

from ldpflow.core import heavy_hitters as hh
from ldpflow.core.keys import ProtocolKey
from ldpflow.core.oracles import Reports
from ldpflow.core.registry import is_heavy_hitter
from ldpflow.plan.packed import (  # the compact columns the plan's passes spill too
    ALL_GROUPS,
    FAN_IN,
    PackedReports,
    compact,
    concat_packed,
    later_groups,
    rereads_all,
)
from ldpflow.plan.steps import add_tallies, dead_letter_summary, letter_tally
from ldpflow.transforms.heavy_hitters import (
    PassOutcome,
    PassPartial,
    ServerRule,
    advance_pass,
    assemble_result,
)
from ldpflow.transforms.streaming import (
    DEAD_LETTERS,
    PANE_TIMING,
    Duplicates,
    WindowReports,
    WindowSpec,
)
from ldpflow.wire.envelope import DeadLetter, ReportBatch
from ldpflow.wire.results import heavy_hitters_document

__all__ = [
    "PackedReports",
    "WindowPasses",
    "WindowPassesCombineFn",
    "FormatHeavyHitterPaneFn",
    "later_groups",
    "rereads_all",
    "ALL_GROUPS",
    "COUNT_RUN",
    "FAN_IN",
    "IdentifyHeavyHittersStream",
    "window_document_key",
]

#: Reports of pass 0's own groups counted together (pass 0's sums are allocated once a run).
COUNT_RUN = 1 << 16


@dataclasses.dataclass(eq=False)
class WindowPasses:
    """What one key's passes need of one window's reports (mergeable, exact).

    A report of a group that a later pass reads is kept (``kept``); one of a group only
    pass 0 reads is counted into pass 0's sums (``first``), in runs of at least
    :data:`COUNT_RUN` reports (``pending`` until then), so that the sums, whose size does
    not depend on the reports, are allocated once a run and not once a message.

    Attributes
    ----------
    key : tuple
        The heavy-hitter key (configuration and codec); None until an input names it.
    first : PassCounts or None
        Pass 0's sums of the counted reports of the groups only it reads.
    pending : list of PackedReports
        Reports of those groups not yet counted (fewer than :data:`COUNT_RUN`).
    kept : dict of int to list of PackedReports
        The reports of each group a later pass reads.
    group_counts : ndarray of int64
        Reports per group.
    pass_batches : ndarray of int64
        Batches that held reports of each pass's groups.
    dead : dict
        Keyed dead letters per reason (:func:`~ldpflow.plan.steps.letter_tally` tallies).
    duplicates : int
        Copies of report ids dropped by the deduplication.
    """

    key: tuple | None = None
    first: hh.PassCounts | None = None
    pending: list = dataclasses.field(default_factory=list)
    kept: dict = dataclasses.field(default_factory=dict)
    group_counts: np.ndarray | None = None
    pass_batches: np.ndarray | None = None
    dead: dict = dataclasses.field(default_factory=dict)
    duplicates: int = 0

    @property
    def kept_bytes(self) -> int:
        """Bytes of the report columns held (kept and pending)."""
        return (sum(c.nbytes for chunks in self.kept.values() for c in chunks)
                + sum(c.nbytes for c in self.pending))

    def _start(self, key: tuple, protocol: hh.HeavyHitterProtocol) -> None:
        if self.key is None:
            self.key = key
        elif self.key != key:
            raise ValueError(f"reports of {key} given to the window of {self.key}")
        if self.group_counts is None:
            self.group_counts = np.zeros(protocol.num_groups, dtype=np.int64)
            self.pass_batches = np.zeros(protocol.num_passes, dtype=np.int64)

    def add_reports(self, key: tuple, protocol: hh.HeavyHitterProtocol,
                    reports: Reports) -> WindowPasses:
        """Keep or count ``reports`` (valid reports: checked by the wire parse)."""
        if len(reports) == 0:
            return self
        self._start(key, protocol)
        groups = reports.columns["group"]
        present = np.bincount(groups, minlength=protocol.num_groups)[: protocol.num_groups]
        self.group_counts += present
        for pass_index in range(protocol.num_passes):
            if present[list(protocol.pass_groups(pass_index))].any():
                self.pass_batches[pass_index] += 1
        if rereads_all(protocol):
            self.kept[ALL_GROUPS] = compact(self.kept.get(ALL_GROUPS, [])
                                             + [PackedReports(reports)])
            return self
        later = set(later_groups(protocol))
        distinct = np.flatnonzero(present).tolist()
        if len(distinct) == 1:
            parts = [(distinct[0], reports)]
        else:
            order = np.argsort(groups, kind="stable")
            bounds = np.searchsorted(groups[order], np.arange(protocol.num_groups + 1))
            parts = [(g, reports[order[bounds[g]:bounds[g + 1]]]) for g in distinct]
        for g, part in parts:
            if g in later:
                self.kept[g] = compact(self.kept.get(g, []) + [PackedReports(part)])
            else:  # read by pass 0 only
                self.pending.append(PackedReports(part))
        self._count_pending(protocol)
        return self

    def _count_pending(self, protocol: hh.HeavyHitterProtocol) -> None:
        """Count the pending reports into pass 0's sums once there are ``COUNT_RUN``."""
        if sum(c.size for c in self.pending) < COUNT_RUN:
            return
        counts = protocol.accumulate(0, concat_packed(self.pending), protocol.initial_state())
        self.first = counts if self.first is None else self.first.merge(counts)
        self.pending = []

    def add_dead(self, key: tuple, letter: DeadLetter) -> WindowPasses:
        if self.key is None:
            self.key = key
        tally = letter_tally(letter)
        self.dead = add_tallies(self.dead, {letter.reason: tally})
        return self

    def merge(self, other: WindowPasses) -> WindowPasses:
        """Add ``other`` into ``self`` (mutating only ``self``) and return ``self``."""
        if other.key is None:
            return self
        if self.key is None:
            self.key = other.key
        elif self.key != other.key:
            raise ValueError(f"cannot merge the window of {other.key} into that of {self.key}")
        if other.group_counts is not None:
            if self.group_counts is None:
                self.group_counts = other.group_counts.copy()
                self.pass_batches = other.pass_batches.copy()
            else:
                self.group_counts = self.group_counts + other.group_counts
                self.pass_batches = self.pass_batches + other.pass_batches
        if other.first is not None:
            self.first = other.first.copy() if self.first is None else self.first.merge(
                other.first)
        for g, chunks in other.kept.items():
            self.kept[g] = compact(self.kept.get(g, []) + list(chunks))
        if other.pending:
            self.pending = self.pending + list(other.pending)
            self._count_pending(ProtocolKey.coerce(self.key).protocol)
        self.dead = add_tallies(self.dead, other.dead)
        self.duplicates += other.duplicates
        return self

    def runs_of(self, groups: Sequence[int]):
        """The kept reports of ``groups``, in runs of :data:`COUNT_RUN` to
        ``2 * COUNT_RUN`` reports (the last may be shorter), so that a pane counts a pass
        a run at a time: its peak allocation is then that of a run, not of the window."""
        wanted = np.asarray(groups, dtype=np.int64)
        together = ALL_GROUPS in self.kept
        chunks = (self.kept[ALL_GROUPS] if together
                  else [c for g in groups for c in self.kept.get(g, [])])
        pending, size = [], 0
        for chunk in chunks:
            for lo in range(0, chunk.size, COUNT_RUN):  # unpacked a run at a time
                part = chunk.unpack(lo, lo + COUNT_RUN)
                if together:  # every pass of these protocols reads every group
                    mine = np.isin(part.columns["group"], wanted)
                    part = part if mine.all() else part[mine]
                pending.append(part)
                size += len(part)
                if size >= COUNT_RUN:
                    yield pending[0] if len(pending) == 1 else Reports.concat(pending)
                    pending, size = [], 0
        if size:
            yield pending[0] if len(pending) == 1 else Reports.concat(pending)

    def reports_of(self, groups: Sequence[int]) -> Reports | None:
        """The kept reports of ``groups`` (None: none)."""
        runs = list(self.runs_of(groups))
        return None if not runs else runs[0] if len(runs) == 1 else Reports.concat(runs)

    def _count(self, protocol: hh.HeavyHitterProtocol, pass_index: int, state: hh.PassState,
               counts: hh.PassCounts | None = None) -> hh.PassCounts | None:
        """``counts`` (None: none yet) plus pass ``pass_index``'s sums of the kept reports of
        its groups, a run at a time."""
        for run in self.runs_of(protocol.pass_groups(pass_index)):
            part = protocol.accumulate(pass_index, run, state)
            counts = part if counts is None else counts.merge(part)
        return counts

    def _first_counts(self, protocol: hh.HeavyHitterProtocol) -> hh.PassCounts:
        """Pass 0's sums of every report of its groups: those counted, those pending and
        those kept for a later pass (a new object: the state is not changed)."""
        initial = protocol.initial_state()
        counts = (protocol.create_pass_counts(0, initial) if self.first is None
                  else self.first.copy())
        if self.pending:
            counts.merge(protocol.accumulate(0, concat_packed(self.pending), initial))
        return self._count(protocol, 0, initial, counts)

    def result(self, protocol: hh.HeavyHitterProtocol, rule: ServerRule) -> dict[str, Any]:
        """The batch job's result of these reports (:func:`~ldpflow.transforms.heavy_hitters.
        assemble_result`); reads the state without changing it, so every pane of an
        accumulating window can ask."""
        key = self.key
        grouped: dict[str, list] = {"dead": [sum(t[0] for t in self.dead.values())]}
        previous: dict[tuple, PassOutcome] = {}
        sizes = (self.group_counts if self.group_counts is not None
                 else np.zeros(protocol.num_groups, dtype=np.int64))
        for pass_index in range(protocol.num_passes):
            groups = list(protocol.pass_groups(pass_index))
            read = np.zeros(protocol.num_groups, dtype=np.int64)
            read[groups] = sizes[groups]
            if read.sum() == 0:  # as in the batch job: a pass with no reports has no outcome
                previous = {}
                continue
            if pass_index == 0:
                counts = self._first_counts(protocol)
            else:
                before = previous.get(key)
                state = None if before is None else before.state
                counts = None if state is None else self._count(protocol, pass_index, state)
            partial = PassPartial(counts, read, int(self.pass_batches[pass_index]))
            _, outcome = advance_pass((key, partial), pass_index, rule, previous)
            grouped[f"pass{pass_index}"] = [outcome]
            previous = {key: outcome}
        return assemble_result((key, grouped), protocol.num_passes, rule)


class WindowPassesCombineFn(beam.CombineFn):
    """``ReportBatch``, :class:`Duplicates` and keyed ``DeadLetter`` inputs of one key and
    window -> :class:`WindowPasses`; the output is the pane's result dict
    (:meth:`WindowPasses.result`)."""

    def __init__(self, rule: ServerRule | None = None):
        super().__init__()
        self._rule = rule or ServerRule()

    def setup(self):
        self._configs: dict[tuple, hh.HeavyHitterProtocol] = {}

    def _protocol(self, key: tuple) -> hh.HeavyHitterProtocol:
        configs = getattr(self, "_configs", None)
        if configs is None:
            configs = self._configs = {}
        protocol = configs.get(key)
        if protocol is None:
            protocol = configs[key] = ProtocolKey.coerce(key).protocol
        return protocol

    def create_accumulator(self) -> WindowPasses:
        return WindowPasses()

    def add_input(self, accumulator: WindowPasses, element) -> WindowPasses:
        if isinstance(element, ReportBatch):
            key = tuple(element.key)
            return accumulator.add_reports(key, self._protocol(key), element.reports)
        if isinstance(element, Duplicates):
            if accumulator.key is None:  # a window's pane may hold only copies
                accumulator.key = element.key
            accumulator.duplicates += element.count
            return accumulator
        if isinstance(element, DeadLetter):
            return accumulator.add_dead(tuple(element.key), element)
        raise TypeError(f"expected a ReportBatch, Duplicates or DeadLetter, got "
                        f"{type(element).__name__}")

    def merge_accumulators(self, accumulators) -> WindowPasses:
        merged = None
        for accumulator in accumulators:  # may be a one-shot iterator: iterate once
            merged = accumulator if merged is None else merged.merge(accumulator)
        return merged if merged is not None else WindowPasses()

    def extract_output(self, accumulator: WindowPasses) -> dict[str, Any]:
        protocol = self._protocol(accumulator.key)
        result = accumulator.result(protocol, self._rule)
        # The document's figures of the window, popped by FormatHeavyHitterPaneFn.
        result["_window"] = {"dead_letters": dead_letter_summary(accumulator.dead),
                             "duplicates": accumulator.duplicates,
                             "kept_bytes": accumulator.kept_bytes}
        return result


class FormatHeavyHitterPaneFn(beam.DoFn):
    """``(key, result)`` of one pane -> the batch job's document of that result, tagged with
    the window and the pane."""

    def process(self, element, win=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
        _, result = element
        result = dict(result)
        extra = result.pop("_window")
        document = heavy_hitters_document([result], extra["dead_letters"], None,
                                          extra["duplicates"])
        if "scores" in result and result["n"] > 0:
            document["scores"] = result["scores"]
        document["window_start"] = int(win.start.micros // 1000)
        document["window_end"] = int(win.end.micros // 1000)
        document["pane"] = PANE_TIMING.get(int(pane.timing), "UNKNOWN")
        document["pane_index"] = int(pane.index)
        document["kept_bytes"] = int(extra["kept_bytes"])
        yield document


def window_document_key(document: Mapping[str, Any]) -> str:
    """The key text of a pane's document (its one result's)."""
    results = document.get("results") or [{}]
    return str(results[0].get("key"))


def _of_protocol(letter, name):  # no annotations: Beam would read them as type hints
    return letter.key is not None and letter.key[0] == name


class IdentifyHeavyHittersStream(beam.PTransform):
    """Messages -> ``{"heavy_hitters": documents per window, key and pane, "dead_letters":
    every dead letter}``.

    Parameters
    ----------
    protocol : str
        The heavy-hitter protocol whose reports are counted (``expect`` should name it: the
        reports of others are dead letters at the parse).
    windows : WindowSpec
        Windows, firings and lateness.
    expect : AcceptancePolicy or mapping, optional
        What the parse accepts (the configuration is each report's own; the policy only
        checks what the flags state).
    rule : ServerRule, optional
        The server's options, pruning, truth and poisoning test, for every key and window.
    timestamp_attribute : str, optional
        The message attribute that gives the event time.
    max_reports_per_user : int, optional
        The contribution cap per user and window (as in the frequency stream).

    A key's dead letters (reports of the protocol refused at the parse) are counted in the
    window of their message's timestamp; dead letters of no key (an undecodable message)
    are in ``dead_letters`` only.
    """

    def __init__(self, protocol: str, windows: WindowSpec,
                 expect: Any = None, rule: ServerRule | None = None,
                 timestamp_attribute: str | None = None,
                 max_reports_per_user: int | None = None):
        super().__init__()
        if not is_heavy_hitter(protocol):
            raise ValueError(f"protocol must be one of {' '.join(sorted(hh.PROTOCOLS))}, got "
                             f"{protocol!r}")
        self._name = protocol
        self._windows = windows
        self._rule = rule or ServerRule()
        self._reports = WindowReports(windows, expect, timestamp_attribute,
                                      max_reports_per_user, count=False,
                                      tally_duplicates=True)

    def expand(self, messages):
        out = messages | "WindowReports" >> self._reports
        keyed_dead = (
            out["dead_letters"]
            | "KeyedDeadLetters" >> beam.Filter(_of_protocol, self._name)
            | "DeadLetterKeys" >> beam.Map(lambda letter: (tuple(letter.key), letter))
            | "DeadLetterWindows" >> self._windows.window_into()
        )
        documents = (
            (out["reports"], keyed_dead)
            | "WithDeadLetters" >> beam.Flatten()
            | "Passes" >> beam.CombinePerKey(WindowPassesCombineFn(self._rule))
            | "Document" >> beam.ParDo(FormatHeavyHitterPaneFn())
        )
        return {"heavy_hitters": documents, DEAD_LETTERS: out[DEAD_LETTERS]}
