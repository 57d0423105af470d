"""``ldpflow heavy-hitters`` as a job plan over a :class:`~ldpflow.plan.backend.Backend`,
and the Beam-free steps every engine's heavy-hitter job shares.

The plan (each pass's step a pure function; :mod:`ldpflow.plan.steps` and
:mod:`ldpflow.plan.job` for what estimate shares):

1. plan ranges (driver): the matched files cut into byte ranges
   (:func:`ldpflow.plan.job.plan_ranges`);
2. pass 0 is a map over the ranges that reads and validates each range (the wire layer's
   one parse path, with the run's acceptance policy), accounts for its records and dead
   letters, emits the reports' 8-byte id hashes by id-hash bucket and counts pass 0 of
   every key with exact integer sums (:class:`PassTally`); a merge per key adds them (pure
   ``+``);
3. deduplication as estimate's: a shuffle of the id hashes by (key, bucket) finds the
   repeated ids and the ranges holding them; only those ranges are read again, for the rows
   of repeated ids alone, which a second shuffle resolves
   (:func:`ldpflow.plan.steps.drop_copies`: one copy of each id, whatever the arrival
   order). The driver keeps those rows only (few: the copies and their originals), and each
   pass's counts are corrected exactly: ``all - repeated rows + kept rows`` (every sum is
   linear in the reports);
4. pass ``s > 0`` is a map over what pass 0 spilled of its groups (while pass 0 reads a
   range it writes the rows of the groups a later pass reads as compact columns to a
   temporary folder beside the output's staging folder, :mod:`ldpflow.plan.packed`; the
   input is decoded once), in pieces for ``2 * parallelism`` tasks (:func:`spill_tasks`,
   :func:`read_spilled`): count pass ``s`` of those rows against the candidates pass
   ``s - 1`` left, shipped to the tasks as :class:`~ldpflow.core.heavy_hitters.PassState`
   per key, and a merge (``pass_store="reread"``: a map over the ranges again). Reports
   are never held in memory between passes, and a task (a run of consecutive ranges,
   :func:`task_lists`, or of spill pieces) holds one running sum, so what a task holds is
   one range's chunks (or one piece) and the candidates' sums (``docs/engines.md`` has the
   measured peaks);
5. :func:`advance_pass` (estimates, candidate selection, the next pass's candidates) runs on
   the driver, once per key and pass; then :func:`assemble_result` per key, the document
   (:func:`heavy_hitters_file`: the bytes the Beam job writes too), the dead-letter files
   (written by the workers, one per source) and the commit of the staged outputs.

The integer counts of each pass, the dead letters by reason, the duplicates and the bytes of
``heavy_hitters.json`` (but for ``elapsed_seconds``) equal the Beam job's
(``tests/plan/test_heavy_hitter_engines.py``). A pass's ``batches`` is, on every engine,
the number of (id-hash bucket, group) parts the pass counted.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import IO, Any

import numpy as np

from ldpflow.core import codecs, parallel, poisoning, queries
from ldpflow.core import heavy_hitters as hh
from ldpflow.core.keys import ProtocolKey
from ldpflow.plan import job as estimate_plan
from ldpflow.plan import outputs, packed, steps
from ldpflow.plan.backend import Backend
from ldpflow.plan.files import match, open_file
from ldpflow.plan.steps import RangeTask
from ldpflow.wire.envelope import ReportBatch
from ldpflow.wire.reading import read_ahead
from ldpflow.wire.results import heavy_hitters_document

__all__ = [
    "POISONING_CHOICES",
    "ServerRule",
    "PassPartial",
    "PassOutcome",
    "PassTally",
    "advance_pass",
    "poisoning_section",
    "assemble_result",
    "heavy_hitters_file",
    "first_configuration",
    "HeavyHittersJob",
    "HeavyHittersRead",
    "HeavyHittersPart",
    "read_pass",
    "read_ranges",
    "pass_tally",
    "corrected_tallies",
    "read_spilled",
    "spill_tasks",
    "task_lists",
    "PASS_STORES",
    "count_pass",
    "run_heavy_hitters",
]

_LOGGER = logging.getLogger(__name__)
#: The values of ``--poisoning`` (those of ``ldpflow estimate``).
POISONING_CHOICES = ("none", "detect")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServerRule:
    """The server's choices (nothing a client sends depends on them).

    Attributes
    ----------
    options : mapping
        The protocol's server options (:attr:`~ldpflow.core.heavy_hitters.
        HeavyHitterProtocol.server_options`: PEM's ``survivors``, ``threshold_sigma``,
        ``threshold``, ``refine_sigma``; TreeHist's and SFP's ``survivors``,
        ``threshold_sigma``, ``threshold``); the protocol's defaults for the others.
    prune : bool, default True
        Prune candidates that cannot be (prefixes of) values of the key's codec.
    truth : tuple, optional
        The true top values (decoded, in rank order) to score the results against.
    poisoning : {"none", "detect"}, default "none"
        ``detect``: test each pass's counts for data poisoning (PEM: the dispersion test of
        each pass, :func:`~ldpflow.core.poisoning.prefix_pass_test`) and add a
        ``poisoning`` section to each result (:func:`poisoning_section`).
    """

    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    prune: bool = True
    truth: tuple | None = None
    poisoning: str = "none"

    def __post_init__(self) -> None:
        if self.poisoning not in POISONING_CHOICES:
            raise ValueError(f"poisoning must be one of {' '.join(POISONING_CHOICES)}, got "
                             f"{self.poisoning!r}")

    def advance(self, protocol: hh.HeavyHitterProtocol, codec: str, pass_index: int,
                counts: hh.PassCounts, state: hh.PassState) -> hh.PassState:
        """``protocol.advance`` of a pass's counts under this rule."""
        valid = None
        if self.prune:
            valid = codecs.make_codec(codec, bits=protocol.value_bits).valid_prefixes
        return protocol.advance(pass_index, counts, state, valid=valid, **self.options)


def _configuration(key: tuple) -> tuple[hh.HeavyHitterProtocol, str]:
    key = ProtocolKey.coerce(key)
    return key.protocol, key.codec


@dataclasses.dataclass(eq=False)
class PassPartial:
    """Partial counts of one pass for one key: mergeable.

    Attributes
    ----------
    counts : PassCounts or None
        ``None`` when the previous pass left nothing to count for (it failed, or its groups
        had no reports); the reports are still counted in ``group_counts``.
    group_counts : ndarray of int64
        Reports read by the pass, per group.
    batches : int
    """

    counts: hh.PassCounts | None
    group_counts: np.ndarray
    batches: int = 1

    @property
    def n(self) -> int:
        """Reports read by the pass."""
        return int(self.group_counts.sum())

    def merge(self, other: PassPartial) -> PassPartial:
        """Add ``other`` into ``self`` (mutating only ``self``) and return ``self``."""
        if (self.counts is None) != (other.counts is None):
            raise ValueError("cannot merge counts of a pass with and without a state")
        if self.counts is not None:
            self.counts.merge(other.counts)
        self.group_counts = self.group_counts + other.group_counts
        self.batches += other.batches
        return self

    def __add__(self, other: PassPartial) -> PassPartial:
        """The sum, as a new partial (neither input changes)."""
        return self.copy().merge(other)

    def copy(self) -> PassPartial:
        counts = None if self.counts is None else self.counts.copy()
        return dataclasses.replace(self, counts=counts, group_counts=self.group_counts.copy())


@dataclasses.dataclass(eq=False)
class PassOutcome:
    """The outcome of one pass for one key.

    Attributes
    ----------
    pass_index : int
    group_counts : ndarray of int64
        Reports the pass read, per group.
    batches : int
    state : PassState or None
        What the server knows after the pass (None when it failed).
    error : str or None
        Why the pass has no state (a failed or empty earlier pass, an empty group).
    poisoning : dict or None
        The pass's poisoning test (:func:`~ldpflow.core.poisoning.prefix_pass_test`), when
        the rule asks for one and the protocol has one.

    Timings are not carried here: they are Beam metrics (see the module docstring).
    """

    pass_index: int
    group_counts: np.ndarray
    batches: int
    state: hh.PassState | None
    error: str | None = None
    poisoning: dict | None = None

    @property
    def n(self) -> int:
        """Reports the pass read."""
        return int(self.group_counts.sum())

    def figures(self, protocol: hh.HeavyHitterProtocol) -> dict[str, Any]:
        """The JSON-ready figures of this pass."""
        if self.state is not None:
            out = self.state.figures[-1].to_dict()
        else:
            out = {"pass_index": self.pass_index, "label": protocol.pass_label(self.pass_index),
                   "reports": int(self.n), "candidates": 0, "survivors": 0, "sigma": None}
        out["pass"] = out.pop("pass_index")
        out.update(batches=int(self.batches), error=self.error)
        return out


def advance_pass(
    element: tuple[tuple, PassPartial],
    pass_index: int,
    rule: ServerRule | None = None,
    previous: Mapping[tuple, PassOutcome] | None = None,
) -> tuple[tuple, PassOutcome]:
    """``(key, PassPartial)`` -> ``(key, PassOutcome)``: estimate and keep what the next
    pass needs."""
    key, partial = element
    rule = rule or ServerRule()
    protocol, codec = _configuration(key)
    state, error, test = None, None, None
    if partial.counts is None:
        before = (previous or {}).get(key)
        error = (f"pass {pass_index - 1} ({protocol.pass_label(pass_index - 1)}) had no reports"
                 if before is None else f"pass {pass_index - 1} failed: {before.error}")
    else:
        if pass_index == 0:
            before_state = protocol.initial_state()
        else:
            before_state = previous[key].state  # type: ignore[index]
        try:
            state = rule.advance(protocol, codec, pass_index, partial.counts, before_state)
        except ValueError as exc:
            error = str(exc)
        if rule.poisoning == "detect" and protocol.name in poisoning.HEAVY_HITTER_SUPPORTED:
            # From the counts the pass already holds: the reports are not read again.
            test = poisoning.prefix_pass_test(protocol, partial.counts)
    return key, PassOutcome(pass_index, partial.group_counts, partial.batches, state, error, test)


def poisoning_section(protocol: hh.HeavyHitterProtocol,
                      outcomes: Iterable[PassOutcome | None]) -> dict[str, Any]:
    """A configuration's ``poisoning`` section from its passes' tests
    (:func:`~ldpflow.core.poisoning.prefix_section`: the layout of ``ldpflow estimate``'s
    section); ``{"error": ...}`` for a protocol the defence does not cover."""
    if protocol.name not in poisoning.HEAVY_HITTER_SUPPORTED:
        return {"error": f"no poisoning defence for heavy-hitter protocol {protocol.name!r}; "
                         f"it covers {' '.join(poisoning.HEAVY_HITTER_SUPPORTED)}"}
    return poisoning.prefix_section(protocol, [o.poisoning for o in outcomes
                                               if o is not None and o.poisoning is not None])


def assemble_result(
    element: tuple[tuple, Mapping[str, list]],
    num_passes: int,
    rule: ServerRule | None = None,
) -> dict[str, Any]:
    """One key's pass outcomes (and dead-letter count) -> its JSON-ready result.

    ``{"configuration", "protocol", "n", "group_sizes", "dead_letters", "top_k": [{"value",
    "frequency", "count"}], "passes": [...], "error", "shortfall"}``: values decoded by the
    key's codec (``shortfall``: why fewer than ``top_k`` were found, see
    :func:`~ldpflow.core.heavy_hitters.shortfall`; None when all were),
    ``count`` the estimated number of users (``frequency * n``, ``n`` the reports of all
    groups); with a truth list in ``rule``, also ``"scores": {"precision", "recall", "f1",
    "ncr"}``.
    """
    key, grouped = element
    rule = rule or ServerRule()
    protocol, codec_name = _configuration(key)
    outcomes: list[PassOutcome | None] = []
    for pass_index in range(num_passes):
        found = grouped.get(f"pass{pass_index}") or []
        outcomes.append(found[0] if found else None)
    # Every pass that reads a group reads all of its reports: a group's size is what any
    # pass read of it (the largest, for groups some pass found empty of this key).
    sizes = np.zeros(protocol.num_groups, dtype=np.int64)
    for found in outcomes:
        if found is not None:
            sizes = np.maximum(sizes, found.group_counts)
    group_sizes = [int(s) for s in sizes]
    population = sum(group_sizes)
    result: dict[str, Any] = {
        "configuration": {**protocol.parameters, "codec": codec_name},
        "protocol": protocol.name,
        "key": ProtocolKey.coerce(key).to_json(),
        "n": population,
        "group_sizes": group_sizes,
        "dead_letters": int(sum(grouped.get("dead") or [])),
        "top_k": [],
        "passes": [o.figures(protocol) for o in outcomes if o is not None],
        "error": None,
    }
    if rule.poisoning == "detect":
        result["poisoning"] = poisoning_section(protocol, outcomes)
    if population == 0:
        result["error"] = "no valid reports"
        return result
    for pass_index, found in enumerate(outcomes):
        if found is None:
            groups = protocol.pass_groups(pass_index)
            which = f"group {groups[0]}" if len(groups) == 1 else f"groups {list(groups)}"
            result["error"] = (
                f"pass {pass_index} ({protocol.pass_label(pass_index)}): {which} had no reports"
            )
            return result
        if found.error is not None:
            result["error"] = f"pass {pass_index}: {found.error}"
            return result
    last = outcomes[-1].state  # type: ignore[union-attr]
    final = protocol.result(last, top_k=protocol.top_k)  # type: ignore[arg-type]
    codec = codecs.make_codec(codec_name, bits=protocol.value_bits)
    result["top_k"] = final.to_records(codec)
    result["shortfall"] = hh.shortfall(len(result["top_k"]), protocol.top_k,
                                       last.figures)  # type: ignore[union-attr]
    if rule.truth is not None:
        values = [r["value"] for r in result["top_k"]]
        scores = queries.score_identified(values, rule.truth, protocol.top_k)
        result["scores"] = dataclasses.asdict(scores)
    return result


def heavy_hitters_file(results: list[Mapping[str, Any]], dead_letters: Mapping[str, Any],
                       elapsed_seconds: float | None = None, duplicates: int = 0
                       ) -> tuple[dict[str, Any], bytes]:
    """The ``heavy_hitters.json`` document of all keys' results and its bytes (what every
    engine writes): :func:`~ldpflow.wire.results.heavy_hitters_document`, with the top-level
    ``scores`` of the top-level configuration when a truth list scored it."""
    document = heavy_hitters_document(results, dead_letters, elapsed_seconds, duplicates)
    ranked = document["results"]
    if ranked and ranked[0]["n"] > 0 and "scores" in ranked[0]:
        document["scores"] = ranked[0]["scores"]  # of the top-level configuration
    return document, json.dumps(document, indent=1).encode("utf-8")


#: The byte ranges :func:`first_configuration` reads a file in, one after the other, until
#: one holds a valid report (the last runs to the file's end): a few blocks, not the whole
#: first chunk (up to ``2**19`` reports) of the file, are decoded to find the
#: configuration.
PROBE_BYTES = (1 << 16, 1 << 20)


def first_configuration(paths: Iterable[str], fmt: str | None, protocol: str,
                        opener: Callable[[str], IO[bytes]] = open_file
                        ) -> hh.HeavyHitterProtocol | None:
    """The configuration of the first valid ``protocol`` report of the first of ``paths``
    (in path order) that holds one, None when none does: what the clients used, read
    before any job runs.

    An uncompressed Avro or JSON-lines file is read in consecutive byte ranges
    (:data:`PROBE_BYTES`; each reader starts at the first block or line that begins in its
    range, so the ranges read the file's records in order, each once) and the reading
    stops at the first range with a valid report; other files are read whole."""
    from ldpflow.wire import formats
    from ldpflow.wire.parse import AcceptancePolicy

    policy = AcceptancePolicy(expect={"oracle": protocol})
    for path in sorted(paths):
        kind = fmt or formats.detect_format(path)
        bounds: list[tuple[int, int | None]] = [(0, None)]
        if kind in ("avro", "json") and not formats.is_compressed(path):
            edges = (0, *PROBE_BYTES)
            bounds = [*zip(edges[:-1], edges[1:], strict=True), (edges[-1], None)]
        for start, end in bounds:
            with opener(path) as stream:
                chunks = formats.read_reports(stream, kind, source=path, start=start, end=end,
                                              policy=policy)
                try:
                    for parsed in chunks:
                        for key in parsed.batches:
                            return key.protocol
                finally:
                    close = getattr(chunks, "close", None)  # a generator: a reader left
                    if close is not None:  # early stops here (and its stages)
                        close()
    return None


# -- the plan ----------------------------------------------------------------------------------
#: The byte ranges of a heavy-hitter job (smaller than estimate's): a range's decode is
#: what a task holds, and every pass reads the input again (10^7 PEM reports: 0.93 GB at
#: 16 MiB ranges, 3.1 GB at 64 MiB; ``docs/engines.md``).
RANGE_BYTES = 16 << 20
#: Reports counted by one call of ``accumulate`` at most (a call has a fixed cost: PEM's
#: scatter over its projected counters, SFP's sums), as the Beam job's counting tasks.
MAX_REPORTS_PER_COUNT = 1 << 20
#: The most rows of a spill piece one thread counts while others count theirs
#: (:func:`read_spilled`): a multiple of :data:`ldpflow.plan.packed.SPILL_BLOCK`, small
#: enough that the threads end together.
THREAD_PIECE_ROWS = 4 * packed.SPILL_BLOCK
_BUCKETS = 1 << steps.ID_BUCKET_BITS


@dataclasses.dataclass(eq=False)
class PassTally:
    """One key's exact sums of one pass over some reports: the pass's counts (None when the
    pass has no state for the key: its previous pass found nothing), the reports per group,
    and per (id-hash bucket, group). ``a + b`` and ``a - b`` are new tallies (pure)."""

    counts: hh.PassCounts | None
    group_counts: np.ndarray
    parts: np.ndarray

    def _with(self, other: PassTally, sign: int) -> PassTally:
        if (self.counts is None) != (other.counts is None):
            raise ValueError("cannot add counts of a pass with and without a state")
        counts = None if self.counts is None else (
            self.counts + other.counts if sign > 0 else self.counts - other.counts)
        return PassTally(counts, self.group_counts + sign * other.group_counts,
                         self.parts + sign * other.parts)

    def __add__(self, other: PassTally) -> PassTally:
        return self._with(other, 1)

    def merge(self, other: PassTally) -> PassTally:
        """Add ``other`` into this tally (in place) and return it: for a task that owns its
        running sum (it made it), which then holds one copy of a pass's sums, not two."""
        if (self.counts is None) != (other.counts is None):
            raise ValueError("cannot add counts of a pass with and without a state")
        if self.counts is not None:
            self.counts.merge(other.counts)
        self.group_counts += other.group_counts
        self.parts += other.parts
        return self

    def __sub__(self, other: PassTally) -> PassTally:
        return self._with(other, -1)

    @property
    def n(self) -> int:
        return int(self.group_counts.sum())

    def partial(self) -> PassPartial:
        """The Beam job's :class:`PassPartial` of these sums (``batches``: the (id-hash
        bucket, group) parts counted, which is what the Beam job's counting tasks see)."""
        return PassPartial(self.counts, self.group_counts.copy(),
                           int(np.count_nonzero(self.parts)))


def pass_tally(protocol: hh.HeavyHitterProtocol, pass_index: int,
               state: hh.PassState | None, batches: Sequence[ReportBatch]
               ) -> PassTally | None:
    """Pass ``pass_index``'s :class:`PassTally` of the rows of its groups in ``batches`` (one key,
    kept with their id hashes); None when none is of its groups."""
    groups = protocol.pass_groups(pass_index)
    num = protocol.num_groups
    mine = []
    for batch in batches:
        if len(groups) < num:
            rows = np.flatnonzero(np.isin(batch.reports.columns["group"],
                                          np.asarray(groups, dtype=np.int64)))
            if rows.size < len(batch):
                batch = batch[rows]
        if len(batch):
            mine.append(batch)
    if not mine:
        return None
    batch = mine[0] if len(mine) == 1 else ReportBatch.concat(mine)
    return _sums(protocol, pass_index, state, batch.reports, _id_buckets(batch))


def _id_buckets(batch: ReportBatch) -> np.ndarray:
    """The id-hash bucket of each report of ``batch`` (uint8: one byte a report)."""
    if batch.id_hashes is None:
        raise ValueError("heavy-hitter passes need batches read with keep=('id_hashes',)")
    return (batch.id_hashes >> np.uint64(64 - steps.ID_BUCKET_BITS)).astype(np.uint8)


def _sums(protocol: hh.HeavyHitterProtocol, pass_index: int, state: hh.PassState | None,
          reports, buckets: np.ndarray) -> PassTally:
    """Pass ``pass_index``'s :class:`PassTally` of ``reports`` (of one key and of the pass's
    groups), whose id-hash buckets are ``buckets``: the one count of every read."""
    num = protocol.num_groups
    group = reports.columns["group"].astype(np.int64)
    parts = np.bincount(buckets.astype(np.int64) * num + group,
                        minlength=_BUCKETS * num).reshape(_BUCKETS, num)
    counts = None if state is None else protocol.accumulate(pass_index, reports, state)
    return PassTally(counts, np.bincount(group, minlength=num)[:num].astype(np.int64),
                     parts.astype(np.int64))


def _protocol(key: tuple, cache: dict) -> hh.HeavyHitterProtocol:
    if key not in cache:
        cache[key] = ProtocolKey.coerce(key).protocol
    return cache[key]


def _state(key: tuple, pass_index: int, states: Mapping[tuple, hh.PassState | None] | None,
           cache: dict) -> hh.PassState | None:
    if pass_index == 0:
        return _protocol(key, cache).initial_state()
    return (states or {}).get(key)


@dataclasses.dataclass(eq=False)
class HeavyHittersRead:
    """What one read of one range gives: pass ``pass_index``'s :class:`PassTally` per key and,
    for the read that accounts (pass 0), what :class:`~ldpflow.plan.steps.RangeRead` holds
    of the records, dead letters (by reason, by source and per key) and id-hash pieces."""

    index: int
    pass_index: int
    tallies: dict[tuple, PassTally] = dataclasses.field(default_factory=dict)
    records: int = 0
    reports: int = 0
    reasons: dict[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    letters: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    dead: dict[tuple, int] = dataclasses.field(default_factory=dict)
    ids: list[tuple[tuple, int, np.ndarray]] = dataclasses.field(default_factory=list)
    spilled: list[tuple[tuple, int, str, int]] = dataclasses.field(default_factory=list)
    read_ms: int = 0


def _spill_path(folder: str, index: int, key: tuple, group: int) -> str:
    digest = hashlib.blake2b(_text(key).encode("utf-8"), digest_size=8).hexdigest()
    name = "all" if group == packed.ALL_GROUPS else f"g{group:03d}"
    return os.path.join(folder, f"pass-{index:06d}-{digest}-{name}.pak")


def _kept_groups(protocol: hh.HeavyHitterProtocol) -> tuple[int, ...]:
    """The groups whose reports pass 0 spills for the later passes (by group), or
    ``(ALL_GROUPS,)`` when every pass reads every group (kept together)."""
    if protocol.num_passes < 2:
        return ()
    return (packed.ALL_GROUPS,) if packed.rereads_all(protocol) else packed.later_groups(
        protocol)


def read_pass(task: RangeTask, policy, pass_index: int,
              states: Mapping[tuple, hh.PassState | None] | None = None, *,
              account: bool = False, ids: bool = False, spill: str | None = None,
              opener=None, progress=None, chunks: Iterable | None = None
              ) -> HeavyHittersRead:
    """Read one range and count pass ``pass_index`` of every key in it (the rows of the pass's
    groups, for the candidates of ``states[key]``; pass 0 needs no state); with
    ``account``, also its records and dead letters, and with ``ids`` its reports' id
    hashes by id-hash bucket (:func:`ldpflow.plan.steps.bucket_parts`). Chunks of one key
    are counted together, up to :data:`MAX_REPORTS_PER_COUNT` reports a call.

    With ``spill`` (a folder every worker of the job sees), the rows of the groups a later
    pass reads are also written there, one file per key and group
    (:func:`ldpflow.plan.packed.write_spill`: their columns, narrowed, and their id-hash
    buckets), listed in ``spilled`` as ``(key, group, path, rows)``: the later passes read
    those (:func:`read_spilled`) instead of the range. ``progress`` (with ``account``): the
    job's progress lines (:class:`~ldpflow.plan.progress.ProgressSpec`). ``chunks``: the
    range's parsed chunks, already being read (:func:`read_ranges` reads the next range's
    on a thread); default: :func:`ldpflow.plan.steps.scan_range` of ``task`` here."""
    opener = opener or open_file
    started = time.perf_counter()
    out = HeavyHittersRead(task.index, pass_index)
    cache: dict = {}
    pending: dict[tuple, list[ReportBatch]] = {}
    sizes: dict[tuple, int] = {}
    kept: dict[tuple[tuple, int], list[tuple[packed.PackedReports, np.ndarray]]] = {}

    def keep(key: tuple, batch: ReportBatch) -> None:
        groups = _kept_groups(_protocol(key, cache))
        if not groups:
            return
        if groups == (packed.ALL_GROUPS,):
            parts = [(packed.ALL_GROUPS, batch)]
        else:
            column = batch.reports.columns["group"]
            parts = [(g, batch[rows]) for g in groups
                     if (rows := np.flatnonzero(column == g)).size]
        for g, part in parts:
            kept.setdefault((key, g), []).append(
                (packed.PackedReports(part.reports), _id_buckets(part)))

    def count(key: tuple) -> None:
        protocol = _protocol(key, cache)
        tally = pass_tally(
            protocol, pass_index, _state(key, pass_index, states, cache), pending.pop(key)
        )
        sizes.pop(key)
        if tally is not None:  # this read's own sums: added in place
            out.tallies[key] = out.tallies[key].merge(tally) if key in out.tallies else tally

    if chunks is None:
        chunks = _range_chunks(task, policy, opener, progress if account else None)
    for parsed in chunks:
        if account:
            out.records += parsed.records
            out.reports += parsed.reports
            for letter in parsed.dead_letters:
                steps.add_letter(out.reasons, letter)
                out.letters.setdefault(letter.source, []).append(letter.to_json())
                if letter.key is not None:
                    key = tuple(letter.key)
                    out.dead[key] = out.dead.get(key, 0) + letter.count
        for key, batch in parsed.batches.items():
            key = tuple(key)
            if ids:
                for bucket, rows in steps.bucket_parts(batch.id_hashes,
                                                       steps.ID_BUCKET_BITS):
                    out.ids.append((key, bucket, batch.id_hashes if rows is None
                                    else batch.id_hashes[rows]))
            if spill is not None:
                keep(key, batch)
            pending.setdefault(key, []).append(batch)
            sizes[key] = sizes.get(key, 0) + len(batch)
            if sizes[key] >= MAX_REPORTS_PER_COUNT:
                count(key)
    for key in list(pending):
        count(key)
    for (key, group), chunks in sorted(kept.items(), key=lambda kv: (_text(kv[0][0]),
                                                                      kv[0][1])):
        joined = packed.PackedReports.join([c for c, _ in chunks])
        path = _spill_path(spill, task.index, key, group)  # type: ignore[arg-type]
        packed.write_spill(path, joined, {"id_bucket": np.concatenate([b for _, b in chunks])})
        out.spilled.append((key, group, path, joined.size))
    out.read_ms = int(1000 * (time.perf_counter() - started))
    return out


@dataclasses.dataclass(eq=False)
class HeavyHittersPart:
    """What one task of a pass gives: the pass's tallies of its ranges, added as they were
    read (so that a task holds one running sum, not one per range), and each range's
    accounts (:class:`HeavyHittersRead` without tallies)."""

    tallies: dict[tuple, PassTally]
    reads: list[HeavyHittersRead]


def _range_chunks(task: RangeTask, policy, opener=None, progress=None) -> Iterator:
    """The parsed chunks of one range, kept with their id hashes (what a pass counts)."""
    return iter(steps.scan_range(task, policy, ("id_hashes",), opener=opener or open_file,
                                 progress=progress))


def _ahead() -> bool:
    """Whether a task reads the next range on a thread while it counts this one: when
    this process may use more than one thread (``LDPFLOW_THREADS``,
    :func:`ldpflow.core.parallel.threads`; one on Dask and Spark workers, whose cores the
    other workers use)."""
    return parallel.threads() > 1


_END_OF_RANGE = object()


def _chunks_of(stream: Iterator, ranges: int) -> Iterator[Iterator]:
    """``ranges`` iterators over the items of ``stream`` (one range's chunks, each range's
    run ended by :data:`_END_OF_RANGE`), in order; each must be read to its end before the
    next (:func:`read_pass` does)."""
    def one() -> Iterator:
        for item in stream:
            if item is _END_OF_RANGE:
                return
            yield item

    for _ in range(ranges):
        yield one()


def read_ranges(tasks: Sequence[RangeTask], policy, pass_index: int,
                states: Mapping[tuple, hh.PassState | None] | None = None, *,
                account: bool = False, ids: bool = False, spill: str | None = None,
                progress=None) -> HeavyHittersPart:
    """:func:`read_pass` of several ranges, one after the other, their tallies added.

    With more than one thread (:func:`_ahead`), the ranges' chunks are read and decoded on
    a thread one chunk ahead of the counting (:func:`ldpflow.wire.reading.read_ahead`:
    polars, Arrow and numpy release the interpreter lock), across the ranges' ends: the
    same chunks in the same order, so the same tallies, records and dead letters, and an
    error reading a range is raised where it was (after every chunk before it)."""
    tallies: dict[tuple, PassTally] = {}
    reads = []
    account_progress = progress if account else None
    streams: Iterator[Iterator | None]
    stream = None
    if _ahead() and tasks:
        def made() -> Iterator:
            for task in tasks:
                yield from _range_chunks(task, policy, None, account_progress)
                yield _END_OF_RANGE
        stream = read_ahead(made())
        streams = _chunks_of(stream, len(tasks))
    else:
        streams = iter([None] * len(tasks))
    try:
        for task, chunks in zip(tasks, streams, strict=True):
            read = read_pass(task, policy, pass_index, states, account=account, ids=ids,
                             spill=spill, progress=progress, chunks=chunks)
            for key, tally in read.tallies.items():  # this task's own sums: added in place
                tallies[key] = tallies[key].merge(tally) if key in tallies else tally
            read.tallies = {}
            reads.append(read)
    finally:
        if stream is not None:
            stream.close()  # stops the thread (an error here, or a reader left early)
    return HeavyHittersPart(tallies, reads)


def task_lists(tasks: Sequence[RangeTask], backend: Backend) -> list[list[RangeTask]]:
    """The ranges cut into ``2 * backend.parallelism`` runs of consecutive ranges (one on
    an engine of one worker): one task each, so that the partial sums held at once for a
    merge are a few per worker, not one per range (SFP's first pass holds ``2**22`` counters
    a position, whatever the number of reports)."""
    workers = backend.parallelism
    fan = min(1 if workers <= 1 else 2 * workers, max(len(tasks), 1))
    bounds = np.linspace(0, len(tasks), fan + 1).astype(int)
    return [list(tasks[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]


#: A piece of a spill file a pass reads: ``(key, group, path, start row, stop row)``.
SpillPiece = tuple[tuple, int, str, int, int]


def spill_tasks(spilled: Sequence[tuple[tuple, int, str, int]], pass_index: int,
                backend: Backend) -> list[list[SpillPiece]]:
    """The spill files (``(key, group, path, rows)``, :func:`read_pass`) of pass ``pass_index``'s
    groups, cut into pieces of whole blocks (:data:`ldpflow.plan.packed.SPILL_BLOCK`) of at
    most :data:`MAX_REPORTS_PER_COUNT` rows, small enough for ``2 * backend.parallelism``
    tasks of about equal rows (one task on an engine of one worker), whatever the number of
    input files; each task is a run of consecutive pieces."""
    cache: dict = {}
    files = [(key, group, path, rows) for key, group, path, rows in spilled if rows and (
        group == packed.ALL_GROUPS or group in _protocol(key, cache).pass_groups(pass_index))]
    total = sum(rows for *_, rows in files)
    if not total:
        return []
    workers = backend.parallelism
    fan = 1 if workers <= 1 else 2 * workers
    block = packed.SPILL_BLOCK
    size = min(MAX_REPORTS_PER_COUNT, max(block, -(-total // (fan * block)) * block))
    pieces = [(key, group, path, lo, min(lo + size, rows))
              for key, group, path, rows in files for lo in range(0, rows, size)]
    starts = np.cumsum([0] + [b - a for *_, a, b in pieces[:-1]])
    owner = (starts * fan) // total  # the task of each piece: by its first row
    return [list(pieces[a:b]) for a, b in zip(
        np.searchsorted(owner, np.arange(fan)), np.searchsorted(owner, np.arange(1, fan + 1)),
        strict=True) if b > a]


def read_spilled(pieces: Sequence[SpillPiece], pass_index: int,
                 states: Mapping[tuple, hh.PassState | None] | None = None
                 ) -> HeavyHittersPart:
    """Pass ``pass_index`` of the spilled rows of ``pieces`` (:func:`spill_tasks`), one piece a
    count, added into one running sum per key: the tallies :func:`read_ranges` gives of
    the same rows read from the input.

    With more than one thread (:func:`ldpflow.core.parallel.threads`), the pieces are cut
    into parts of whole blocks, at most :data:`THREAD_PIECE_ROWS` rows and at least one part
    a thread when the rows allow, each read and counted whole on one thread, as many at
    once as there are threads (:func:`ldpflow.core.parallel.map_ordered`; a single part is
    counted in the calling thread, on every thread):
    every step of a count (the hash rows, the sort, the sums) runs in parallel, not only
    its inner loops. The sums are integers, added in the pieces' order: the same tallies."""
    cache: dict = {}
    for key, *_ in pieces:  # made here, read by the threads
        _protocol(key, cache)
    workers = parallel.threads()
    if workers > 1:  # parts of whole blocks, at least one a thread when there are enough
        block = packed.SPILL_BLOCK
        total = sum(stop - start for *_, start, stop in pieces)
        size = max(block, min(THREAD_PIECE_ROWS, -(-total // (workers * block)) * block))
        pieces = [(key, group, path, lo, min(stop, lo + size))
                  for key, group, path, start, stop in pieces for lo in range(start, stop, size)]
        if len(pieces) == 1:  # one part: counted here, on every thread
            workers = 1

    def tally(piece: SpillPiece) -> tuple[tuple, PassTally | None]:
        key, group, path, start, stop = piece
        reports, extra = packed.read_spill(path, start, stop)
        return key, _spilled_tally(key, group, reports, extra, pass_index, states, cache)

    tallies: dict[tuple, PassTally] = {}
    for key, tally_ in parallel.map_ordered(tally, pieces, workers):
        if tally_ is not None:
            tallies[key] = tallies[key].merge(tally_) if key in tallies else tally_
    return HeavyHittersPart(tallies, [])


def _spilled_tally(key: tuple, group: int, reports, extra: Mapping[str, np.ndarray],
                   pass_index: int, states, cache: dict) -> PassTally | None:
    """Pass ``pass_index``'s tally of one spill piece's rows (None when none is of its
    groups)."""
    protocol = _protocol(key, cache)
    buckets = extra["id_bucket"]
    groups = protocol.pass_groups(pass_index)
    if group == packed.ALL_GROUPS and len(groups) < protocol.num_groups:
        mine = np.isin(reports.columns["group"], np.asarray(groups, dtype=np.int64))
        reports, buckets = reports[mine], buckets[mine]
    if not len(reports):
        return None
    return _sums(
        protocol, pass_index, _state(key, pass_index, states, cache), reports, buckets
    )


def _pass_tallies(part: HeavyHittersPart):
    return list(part.tallies.items())


def _reads_of(part: HeavyHittersPart):
    return part.reads


def count_pass(backend: Backend, tasks: Sequence[RangeTask], policy, pass_index: int,
               states: Mapping[tuple, hh.PassState | None] | None,
               spilled: Sequence[tuple[tuple, int, str, int]] | None = None
               ) -> dict[tuple, PassTally]:
    """Pass ``pass_index > 0`` on ``backend``: a map over the ranges (:func:`read_pass`), or over
    the pieces of what pass 0 spilled of them (``spilled``: :func:`spill_tasks`,
    :func:`read_spilled`), and a merge per key (pure ``+``, combined where the tallies
    are, then shuffled)."""
    if spilled is not None:
        reads = backend.map(backend.parallelize(spill_tasks(spilled, pass_index, backend)),
                            functools.partial(read_spilled, pass_index=pass_index,
                                              states=dict(states or {})))
    else:
        reads = backend.map(backend.parallelize(task_lists(tasks, backend)),
                            functools.partial(read_ranges, policy=policy, pass_index=pass_index,
                                              states=dict(states or {})))
    return estimate_plan._merged(backend.collect(backend.combine_per_key(
        backend.flat_map(reads, _pass_tallies), estimate_plan._add)))


def corrected_tallies(tallies: dict[tuple, PassTally], pass_index: int,
                      states: Mapping[tuple, hh.PassState | None] | None,
                      repeats: Sequence[tuple[tuple, ReportBatch]],
                      kept: Sequence[tuple[tuple, ReportBatch]]) -> dict[tuple, PassTally]:
    """Pass ``pass_index``'s tallies of every report less the rows of repeated ids, plus the
    copies kept of them (exact: the sums are linear); keys left with no report dropped."""
    out = dict(tallies)
    cache: dict = {}
    for sign, pieces in ((-1, repeats), (1, kept)):
        for key, batch in pieces:
            tally = pass_tally(
                _protocol(key, cache), pass_index, _state(key, pass_index, states, cache), [batch]
            )
            if tally is None:
                continue
            if sign < 0:
                out[key] = out[key] - tally
            else:
                out[key] = out[key] + tally if key in out else tally
    return {key: t for key, t in out.items() if t.n > 0}


@dataclasses.dataclass(frozen=True)
class HeavyHittersJob:
    """What one ``ldpflow heavy-hitters`` run on the plan does (its flags, checked)."""

    input: str
    output: str
    protocol: hh.HeavyHitterProtocol
    policy: Any
    rule: ServerRule = dataclasses.field(default_factory=lambda: ServerRule())
    fmt: str | None = None
    started: float | None = None  # Unix time the job was launched (elapsed_seconds)
    range_bytes: int | None = None  # default: RANGE_BYTES, or less (_range_bytes)
    input_bytes: int | None = None
    #: Where the passes after the first find their reports: ``disk`` (what pass 0 spilled,
    #: in a temporary folder beside the output's staging folder, which every worker must
    #: see: it sees the staging folder already) or ``reread`` (the input, read and decoded
    #: again each pass).
    pass_store: str = "disk"
    #: The job's progress lines (``ldpflow.plan.progress``, told of pass 0's reads; None:
    #: none).
    progress: Any = None

    def __post_init__(self) -> None:
        if self.pass_store not in PASS_STORES:
            raise ValueError(f"pass_store must be one of {' '.join(PASS_STORES)}, got "
                             f"{self.pass_store!r}")


#: The values of :attr:`HeavyHittersJob.pass_store`.
PASS_STORES = ("disk", "reread")
#: The smallest byte range pass 0 is cut into to give every worker two tasks.
MIN_RANGE_BYTES = 1 << 20


def _range_bytes(job: HeavyHittersJob, backend: Backend) -> int:
    """The byte ranges of pass 0: ``job.range_bytes``, else :data:`RANGE_BYTES`, cut
    smaller (down to :data:`MIN_RANGE_BYTES`) when the input would give fewer than two
    ranges a worker (a few files on several workers)."""
    if job.range_bytes:
        return job.range_bytes
    workers = backend.parallelism
    if workers <= 1:
        return RANGE_BYTES
    total = sum(size for _, size in match(job.input))
    return int(min(RANGE_BYTES, max(MIN_RANGE_BYTES, -(-total // (2 * workers)))))


def _text(key) -> str:
    return ProtocolKey.coerce(key).to_json()


def run_heavy_hitters(backend: Backend, job: HeavyHittersJob) -> dict[str, Any]:
    """Run the plan on ``backend``; returns the run's counts, as the Beam job's ``run``:
    ``{"output", "state", "engine", "seconds", "records", "reports", "estimated",
    "duplicates", "dead_letters", "lost_parts", "lost_bytes", "lost_unsized", "reasons",
    "input_bytes", "candidates", "survivors", "timings_ms", "passes"}`` (and
    ``poisoning_alarms`` with ``--poisoning detect``)."""
    spill = None
    if job.pass_store == "disk" and job.protocol.num_passes > 1:
        os.makedirs(job.output, exist_ok=True)  # beside the staging folder (dedup's too)
        spill = tempfile.mkdtemp(prefix=".ldpflow-passes-", dir=job.output)
    try:
        with outputs.staged(job.output) as staging:  # removed if the run fails
            return _run_heavy_hitters(backend, job, spill, staging)
    finally:
        if spill is not None:
            shutil.rmtree(spill, ignore_errors=True)


def _run_heavy_hitters(backend: Backend, job: HeavyHittersJob, spill: str | None,
                       staging: str) -> dict[str, Any]:
    started = time.perf_counter()
    marks: dict[str, float] = {}

    def mark(name: str) -> None:
        marks[name] = round(time.perf_counter() - started, 3)

    protocol, rule, policy = job.protocol, job.rule, job.policy
    tasks = estimate_plan.plan_ranges(job.input, job.fmt, _range_bytes(job, backend))
    mark("plan_ranges")
    parts = backend.persist(backend.map(backend.parallelize(task_lists(tasks, backend)),
                                        functools.partial(read_ranges, policy=policy, pass_index=0,
                                                          account=True, ids=True,
                                                          spill=spill,
                                                          progress=job.progress)))
    first = estimate_plan._merged(backend.collect(backend.combine_per_key(
        backend.flat_map(parts, _pass_tallies), estimate_plan._add)))
    reads = backend.flat_map(parts, _reads_of)
    mark("pass0")
    repeated, ranges = estimate_plan._repeated_set(
        backend, backend.flat_map(reads, estimate_plan._id_pieces))
    repeats: list[tuple[tuple, ReportBatch]] = []
    kept: list[tuple[tuple, ReportBatch]] = []
    duplicates = 0
    if repeated:  # read again, for the rows of repeated ids alone
        again = backend.persist(backend.flat_map(
            backend.map(backend.parallelize([tasks[i] for i in ranges]), functools.partial(
                steps.read_range, policy=policy, keep=("id_hashes", "report_ids"),
                account=False, count=False, repeated=repeated, unique=False)),
            estimate_plan._repeat_pieces))
        repeats = [(key, batch) for _, (key, _, batch) in backend.collect(again)]
        for key, value in backend.collect(backend.flat_map(
                backend.group_by_key(again),
                functools.partial(estimate_plan._dropped, keep_rows=True))):
            if isinstance(value, steps.Tally):
                duplicates += value.duplicates
            else:
                kept.append((key, value))
        backend.release(again)
    mark("deduplicate")
    accounts = backend.collect(backend.map(reads, _accounts))  # one small record a range
    stats = [(records, reasons, ms) for records, reasons, ms, *_ in accounts]
    spilled = None if spill is None else [entry for a in accounts for entry in a[5]]
    reports = sum(a[3] for a in accounts)
    from ldpflow.plan.progress import finished

    finished(job.progress, sum(a[0] for a in accounts))  # pass 0 read every range
    dead = estimate_plan._merged(item for a in accounts for item in a[4].items())
    backend.collect(backend.flat_map(  # the workers write them, one file per source
        backend.group_by_key(backend.flat_map(reads, estimate_plan._letter_pieces)),
        functools.partial(estimate_plan._write_letters, staging=staging)))
    backend.release(parts)
    mark("dead_letters")
    passes: list[dict[tuple, PassOutcome]] = []
    previous: dict[tuple, PassOutcome] = {}
    candidates = survivors = tested = alarms = 0
    for pass_index in range(protocol.num_passes):
        states = {key: outcome.state for key, outcome in previous.items()}
        tallies = (
            first
            if pass_index == 0
            else count_pass(backend, tasks, policy, pass_index, states, spilled)
        )
        tallies = corrected_tallies(tallies, pass_index, states, repeats, kept)
        current: dict[tuple, PassOutcome] = {}
        for key in sorted(tallies, key=_text):
            _, outcome = advance_pass((key, tallies[key].partial()), pass_index, rule, previous)
            current[key] = outcome
            if outcome.state is not None:
                candidates += outcome.state.figures[-1].candidates
                survivors += outcome.state.figures[-1].survivors
            test = outcome.poisoning
            if test is not None and test["dispersion"] is not None:
                tested += 1
                alarms += int(test["dispersion"]["alarm"])
        passes.append(current)
        previous = current
        mark(f"pass{pass_index}_advance")
    keys = {key for by_key in passes for key in by_key} | {
        key for key in dead if key[0] == protocol.name}
    results = []
    for key in sorted(keys, key=_text):
        grouped: dict[str, list] = {f"pass{s}": [by_key[key]] for s, by_key in
                                    enumerate(passes) if key in by_key}
        if key in dead:
            grouped["dead"] = [dead[key]]
        results.append(assemble_result((key, grouped), protocol.num_passes, rule))
    reasons: dict[str, tuple[int, ...]] = {}
    for _, by_reason, _ in stats:
        reasons = steps.add_tallies(reasons, by_reason)
    if spill is not None:  # the passes are done: nothing of the spill is committed
        shutil.rmtree(spill, ignore_errors=True)
    elapsed = None if job.started is None else time.time() - job.started
    _, data = heavy_hitters_file(results, steps.dead_letter_summary(reasons), elapsed,
                                 duplicates)
    outputs.write_staged(staging, "heavy_hitters.json", data)
    outputs.commit_outputs(job.output, staging)
    mark("commit")
    read_ms = [s[2] for s in stats]
    summary: dict[str, Any] = {
        "output": job.output, "state": "DONE", "engine": backend.description,
        "seconds": round(time.perf_counter() - started, 3),
        "timings_ms": {"range_read_ms": {"count": len(read_ms), "sum": sum(read_ms),
                                         "max": max(read_ms, default=0)},
                       "steps_s": marks},
        "records": sum(s[0] for s in stats), "reports": reports, "duplicates": duplicates,
        "estimated": reports - duplicates, **steps.verdict_counts(reasons),
        "input_bytes": job.input_bytes, "candidates": candidates, "survivors": survivors,
        "passes": [{key_text: outcome.figures(protocol) for key_text, outcome in
                    ((_text(k), o) for k, o in by_key.items())} for by_key in passes],
    }
    if rule.poisoning == "detect":
        summary["poisoning_alarms"] = alarms
        summary["poisoning_passes_tested"] = tested
    return summary


def _accounts(read: HeavyHittersRead) -> tuple:
    return read.records, read.reasons, read.read_ms, read.reports, read.dead, read.spilled
