"""``ldpflow estimate`` as a job plan over a :class:`~ldpflow.plan.backend.Backend`.

The plan (each step a pure function of :mod:`ldpflow.plan.steps`):

1. plan ranges (driver): the matched files cut into byte ranges
   (:func:`ldpflow.wire.formats.plan_ranges`, Parquet at row groups);
2. read and validate every range (a map over the ranges), counting its valid reports per
   key where they are read; with dedup, the reports' 8-byte id hashes go to a shuffle by
   (key, id-hash bucket), which finds the ids seen more than once and the ranges that
   hold them;
3. only if there are any: those ranges are read again for the rows of repeated ids alone,
   which a second shuffle by id-hash bucket resolves (one copy of each id is kept,
   whatever the arrival order); the copies dropped are taken out of the counts exactly
   (integer counts: ``(a + b) - b == a``). Without repeated ids (the common case), dedup
   costs one shuffle of 8 bytes a report and no second read;
4. with a contribution cap, the (deduplicated) reports go to a shuffle by user-hash
   bucket instead of being counted where they are read; there each user's earliest
   ``cap`` reports are counted (the ids are then found by a light first read, as the
   cap must see the deduplicated reports);
5. merge per key (pure ``+``), estimate every key, and finish on the driver: the
   estimates document, the dead-letter files (written by the workers, one per source),
   and the commit of the staged outputs into ``--output``.

The counts, dead letters by reason, duplicates and capped reports equal the Beam job's
(``tests/plan``).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import os
import shutil
import tempfile
import time
from typing import Any

import numpy as np

from ldpflow.plan import outputs, steps
from ldpflow.plan.backend import Backend
from ldpflow.plan.files import match, open_file
from ldpflow.plan.steps import RangeRead, RangeTask, Tally

__all__ = ["EstimateJob", "Counted", "TASKS_PER_WORKER", "MIN_RANGE_BYTES", "range_size",
           "plan_ranges", "count_reports", "detect_poisoning", "run_estimate"]

_LOGGER = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class EstimateJob:
    """What one ``ldpflow estimate`` run does (its flags, checked)."""

    input: str
    output: str
    methods: tuple[str, ...]
    policy: Any
    fmt: str | None = None
    dedup: bool = True
    max_reports_per_user: int | None = None
    run: dict | None = None
    range_bytes: int | None = None
    input_bytes: int | None = None  # the input's size, for the verdict's share of lost parts
    #: The memory all parameter sets may need together (``--max_job_bytes``; None: no bound).
    max_job_bytes: int | None = steps.DEFAULT_MAX_JOB_BYTES
    #: With dedup, where the id hashes go: ``memory`` (shuffled as arrays) or ``disk``
    #: (written to a temporary folder and resolved in passes of bounded memory,
    #: ``steps.spill_ids``; the folder is under ``temp_location``, else the output's
    #: staging folder: a local disk every worker sees).
    dedup_store: str = "memory"
    temp_location: str | None = None
    #: The job's progress lines (``ldpflow.plan.progress``; None: none).
    progress: Any = None
    #: ``--poisoning detect``: each result gets the defence's section, computed from the
    #: reports counted (after dedup; :func:`detect_poisoning`).
    poisoning: bool = False


#: Read tasks per worker the plan aims at (so that a slow range does not leave the other
#: workers idle at the end of a step): files larger than their share are cut smaller.
TASKS_PER_WORKER = 4
#: The smallest range :func:`range_size` makes (a read has a fixed cost: opening the file,
#: its footer, the batches of each key).
MIN_RANGE_BYTES = 4 << 20


def range_size(total_bytes: int, parallelism: int) -> int:
    """The range size that gives every one of ``parallelism`` workers about
    :data:`TASKS_PER_WORKER` reads of ``total_bytes``, within ``[MIN_RANGE_BYTES,
    wire.formats.RANGE_BYTES]``."""
    from ldpflow.wire import formats

    share = int(total_bytes) // max(TASKS_PER_WORKER * int(parallelism), 1)
    return min(formats.RANGE_BYTES, max(MIN_RANGE_BYTES, share))


def plan_ranges(pattern: str, fmt: str | None = None, range_bytes: int | None = None,
                parallelism: int = 1) -> list[RangeTask]:
    """The byte ranges of every file matching ``pattern``, numbered in path order; ranges
    of ``range_bytes`` (default: :func:`range_size` of the files for ``parallelism``
    workers; Parquet is cut at row groups, a compressed file not at all)."""
    from ldpflow.wire import formats

    files = match(pattern)
    range_bytes = range_bytes or range_size(sum(size for _, size in files), parallelism)
    tasks = []
    for path, size in files:
        kind = fmt or formats.detect_format(path)
        for start, end in steps.file_ranges(path, size, kind, range_bytes, open_file):
            tasks.append(RangeTask(len(tasks), path, kind, start, end))
    return tasks


# -- what the engines run (module-level, so that they pickle) ----------------------------------
def _tallies(read: RangeRead):
    return list(read.tallies.items())


def _add(a, b):
    return a + b


def _stats(read: RangeRead):
    return [(read.records, read.reasons, read.read_ms)]


def _census(read: RangeRead):
    return [(read.index, read.census, read.over)]


def _id_pieces(read: RangeRead):
    return [(steps.shuffle_key(key, bucket), (key, bucket, read.index, hashes))
            for key, bucket, hashes in read.ids]


def _repeated(group):
    return steps.repeated_ids(group[1])


def _repeat_pieces(read: RangeRead, refused: frozenset = frozenset()):
    return [(steps.shuffle_key(key, bucket), (key, bucket, batch))
            for key, bucket, batch in read.repeats if key not in refused]


def _dropped(group, keep_rows: bool = False):
    return steps.drop_copies(group[1], keep_rows)


def _text_key(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=7).digest(),
                          "little")


def _letter_pieces(read: RangeRead):
    return [(_text_key(source), (source, lines)) for source, lines in read.letters.items()]


def _write_letters(group, staging: str):
    by_source: dict[str, list[str]] = {}
    for source, lines in group[1]:
        by_source.setdefault(source, []).extend(lines)
    out = []
    for source, lines in sorted(by_source.items()):
        name, data, count = outputs.dead_letter_file(source, lines)
        out.append((outputs.write_staged(staging, name, data), count))
    return out


def _user_pieces(read: RangeRead, refused: frozenset = frozenset()):
    return [(bucket, (key, batch)) for bucket, key, batch in read.users if key not in refused]


def _kept_user_pieces(item):
    key, value = item
    if isinstance(value, Tally):
        return []
    return [(bucket, (key, value if rows is None else value[rows]))
            for bucket, rows in steps.bucket_parts(value.user_hashes, steps.USER_BUCKET_BITS)]


def _only_tallies(item):
    return [item] if isinstance(item[1], Tally) else []


def _counted_batches(read: RangeRead):
    return [(key, batch) for _, key, batch in read.users]


def _pass_tallies(pieces, plans):
    return steps.poisoning_tallies([pieces], plans)


def _poisoning_pieces(backend: Backend, job: EstimateJob, tasks: list[RangeTask],
                      repeated: dict | None, refused: frozenset):
    """The reports the estimate counts (no cap), as ``(key, batch)`` pieces kept on the
    workers: every range read again for its valid reports of the keys admitted, the rows of
    repeated ids resolved as the count resolves them (one copy kept)."""
    keep = ("user_hashes",) + (("id_hashes", "report_ids") if repeated else ())
    reads = backend.persist(backend.map(backend.parallelize(tasks), functools.partial(
        steps.read_range, policy=job.policy, keep=keep, account=False, count=False,
        users=True, repeated=repeated or None, refused=refused)))
    pieces = backend.flat_map(reads, _counted_batches)
    if repeated:
        pieces = backend.union(pieces, backend.flat_map(
            backend.group_by_key(backend.flat_map(reads, functools.partial(
                _repeat_pieces, refused=refused))),
            functools.partial(_dropped, keep_rows=True)))
    pieces = backend.persist(pieces)
    backend.release(reads)
    return pieces


def detect_poisoning(backend: Backend, pieces, keys) -> dict[tuple, dict]:
    """The defence (:mod:`ldpflow.core.poisoning`) of every key of ``keys`` it covers, over
    ``(key, batch)`` pieces (persisted: each pass maps over them): per pass the tallies of
    the pieces where they are, merged per key exactly, and the next plan on the driver;
    returns key -> its ``poisoning`` section."""
    from ldpflow.core import poisoning

    plans = steps.poisoning_plans(keys)
    tallies: dict[tuple, Any] = {}
    for pass_index in range(poisoning.NUM_PASSES):
        if pass_index:
            plans = steps.advance_poisoning(plans, tallies)
        found = backend.collect(backend.combine_per_key(
            backend.flat_map(pieces, functools.partial(_pass_tallies, plans=plans)),
            steps.add_poisoning))
        tallies = dict(sorted(found, key=lambda kv: steps._key_text(kv[0])))
    return steps.poisoning_sections(plans, tallies)


def _capped_kept(group, cap: int):
    return steps.capped_batches(group[1], cap)


def _capped(group, cap: int):
    tallies, users = steps.cap_users(group[1], cap)
    return [("tally", item) for item in tallies] + [("users", users)]


def _repeated_set(backend: Backend, id_pieces) -> tuple[dict[str, np.ndarray], list[int]]:
    """The id-hash shuffle: key text -> sorted repeated hashes, and the ranges holding them."""
    found = backend.collect(backend.flat_map(backend.group_by_key(id_pieces), _repeated))
    parts: dict[str, list[np.ndarray]] = {}
    ranges: set[int] = set()
    for text, hashes, where in found:
        parts.setdefault(text, []).append(hashes)
        ranges.update(where)
    return {text: np.unique(np.concatenate(p)) for text, p in parts.items()}, sorted(ranges)


@dataclasses.dataclass(frozen=True)
class Admission:
    """The job-wide admission of keys (:func:`ldpflow.plan.steps.admit_keys`) after the
    accounting read: the keys refused with their reasons, the valid reports read per key,
    and the ranges that counted nothing because their keys passed the budget."""

    refused: dict[tuple, str]
    census: dict[tuple, int]
    over: list[int]

    @property
    def refused_keys(self) -> frozenset:
        return frozenset(self.refused)

    def letters(self, source: str) -> list:
        """The dead letters of the refused keys (one a key, of its count, no record)."""
        return [steps.admission_letter(source, key, reason, self.census.get(key, 0))
                for key, reason in sorted(self.refused.items(),
                                          key=lambda kv: steps._key_text(kv[0]))
                if self.census.get(key, 0)]


def _admission(found: list, keys, budget: int | None) -> Admission:
    """Admit the keys (``keys``: every key a tally names) by the reads' census (``found``:
    the collected ``_census`` of every read)."""
    census: dict[tuple, int] = {}
    over = []
    for index, counts, is_over in found:
        census = steps.add_counts(census, counts)
        if is_over:
            over.append(index)
    every = {key: census.get(key, 0) for key in set(keys) | set(census)}
    return Admission(steps.admit_keys(every, budget), census, sorted(over))


def _merged(pairs) -> dict[tuple, Tally]:
    out: dict[tuple, Tally] = {}
    for key, tally in pairs:
        out[key] = out[key] + tally if key in out else tally
    return out


@dataclasses.dataclass(eq=False)
class Counted:
    """What the distributed part of the plan gives the driver: per key the exact
    :class:`Tally`, the records, dead letters by reason, the dead-letter files written
    (staged), each range's read time, and the contribution summary (with a cap)."""

    tallies: dict[tuple, Tally]
    records: int
    reasons: dict[str, tuple[int, ...]]
    letter_files: list[tuple[str, int]]
    read_ms: list[int]
    contribution: dict | None = None
    #: Seconds from the start to the end of each step, in order (the engine runs a step
    #: when its result is collected: reads overlap with what is collected first).
    step_seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    #: With ``job.poisoning``: key -> its ``poisoning`` section.
    poisoning: dict[tuple, dict] | None = None


def count_reports(backend: Backend, job: EstimateJob, staging: str) -> Counted:
    """Steps 1 to 4 of the plan on ``backend`` (dead-letter files staged in ``staging``);
    with ``job.dedup_store`` ``disk``, the id hashes go through a temporary folder, removed
    when the counts are done (or failed)."""
    if not (job.dedup and job.dedup_store == "disk"):
        return _count_reports(backend, job, staging, None)
    folder = job.temp_location or staging
    os.makedirs(folder, exist_ok=True)
    spill = tempfile.mkdtemp(prefix=".ldpflow-ids-", dir=folder)
    try:
        return _count_reports(backend, job, staging, spill)
    finally:
        shutil.rmtree(spill, ignore_errors=True)


def _count_reports(backend: Backend, job: EstimateJob, staging: str, spill: str | None
                   ) -> Counted:
    started = time.perf_counter()
    marks: dict[str, float] = {}

    def mark(name: str) -> None:
        marks[name] = round(time.perf_counter() - started, 3)

    tasks = plan_ranges(job.input, job.fmt, job.range_bytes, backend.parallelism)
    mark("plan_ranges")
    cap = job.max_reports_per_user
    # The read that counts (no cap) needs the id hashes only; the rows of repeated hashes
    # are read again with their full ids, which decide what is a copy.
    keep = tuple(dict.fromkeys((("id_hashes",) if job.dedup else ())
                               + (steps.CAP_KEEP if cap is not None else ())))
    read = functools.partial(steps.read_range, policy=job.policy, keep=keep,
                             max_job_bytes=job.max_job_bytes, progress=job.progress)
    ids_only = functools.partial(steps.read_range, policy=job.policy, keep=("id_hashes",),
                                 account=False, count=False)
    contribution = None
    sections = None
    if cap is None:
        reads = backend.persist(backend.map(backend.parallelize(tasks),
                                            functools.partial(read, ids=job.dedup,
                                                              spill=spill)))
        # One job for what every read gives the driver: merged tallies, census, stats.
        merged, census, stats = backend.collect_all(
            backend.combine_per_key(backend.flat_map(reads, _tallies), _add),
            backend.flat_map(reads, _census), backend.flat_map(reads, _stats))
        tallies = _merged(merged)
        admission = _admission(census, tallies, job.max_job_bytes)
        for key in admission.refused:
            tallies.pop(key, None)
        if admission.over:  # ranges that stopped counting: again, for the keys admitted
            again = backend.map(backend.parallelize([tasks[i] for i in admission.over]),
                                functools.partial(read, account=False,
                                                  refused=admission.refused_keys))
            for key, tally in _merged(backend.collect(backend.combine_per_key(
                    backend.flat_map(again, _tallies), _add))).items():
                tallies[key] = tallies[key] + tally if key in tallies else tally
        mark("read_and_count")
        if job.dedup:
            repeated, ranges = _repeated_set(backend, backend.flat_map(reads, _id_pieces))
            refused_texts = {steps._key_text(key) for key in admission.refused}
            repeated = {text: h for text, h in repeated.items() if text not in refused_texts}
            mark("repeated_ids")
            if repeated:  # read again, for the rows of repeated ids alone
                again = backend.map(backend.parallelize([tasks[i] for i in ranges]),
                                    functools.partial(ids_only, ids=False, repeated=repeated,
                                                      unique=False,
                                                      keep=("id_hashes", "report_ids")))
                drops = _merged(backend.collect(backend.flat_map(
                    backend.group_by_key(backend.flat_map(again, _repeat_pieces)), _dropped)))
                for key, dropped in drops.items():
                    tallies[key] = tallies[key].without(dropped)
                mark("drop_copies")
        if job.poisoning:
            pieces = _poisoning_pieces(backend, job, tasks,
                                       repeated if job.dedup else None, admission.refused_keys)
            sections = detect_poisoning(backend, pieces, tallies)
            backend.release(pieces)
            mark("poisoning")
    else:
        repeated = None
        if job.dedup:  # the cap must see the deduplicated reports: find the ids first
            ids = backend.map(backend.parallelize(tasks), functools.partial(ids_only, ids=True,
                                                                            spill=spill))
            repeated, _ = _repeated_set(backend, backend.flat_map(ids, _id_pieces))
            mark("repeated_ids")
        reads = backend.persist(backend.map(backend.parallelize(tasks), functools.partial(
            read, count=False, users=True, repeated=repeated or None)))
        found, census, stats = backend.collect_all(  # the tallies hold dead letters only
            backend.flat_map(reads, _tallies), backend.flat_map(reads, _census),
            backend.flat_map(reads, _stats))
        tallies = _merged(found)
        # Admitted before the cap's shuffle, where the accumulators are allocated.
        admission = _admission(census, tallies, job.max_job_bytes)
        refused = admission.refused_keys
        for key in refused:
            tallies.pop(key, None)
        users = backend.flat_map(reads, functools.partial(_user_pieces, refused=refused))
        if repeated:
            resolved = backend.persist(backend.flat_map(
                backend.group_by_key(backend.flat_map(reads, functools.partial(
                    _repeat_pieces, refused=refused))),
                functools.partial(_dropped, keep_rows=True)))
            for key, tally in _merged(backend.collect(
                    backend.flat_map(resolved, _only_tallies))).items():
                tallies[key] = tallies[key] + tally if key in tallies else tally
            users = backend.union(users, backend.flat_map(resolved, _kept_user_pieces))
        grouped = backend.group_by_key(users)
        if job.poisoning:  # the cap's groups, kept for the defence's passes over what it counts
            grouped = backend.persist(grouped)
        capped = backend.collect(backend.flat_map(grouped, functools.partial(_capped, cap=cap)))
        for key, tally in _merged(item for kind, item in capped if kind == "tally").items():
            tallies[key] = tallies[key] + tally if key in tallies else tally
        mark("cap_users")
        counts = [item for kind, item in capped if kind == "users"]
        contribution = {"max_reports_per_user": cap, "users": sum(c for c, _ in counts),
                        "max_epsilon_per_user": max((e for _, e in counts), default=0.0)}
        if job.poisoning:
            pieces = backend.persist(backend.flat_map(grouped, functools.partial(
                _capped_kept, cap=cap)))
            sections = detect_poisoning(backend, pieces, tallies)
            backend.release(pieces)
            backend.release(grouped)
            mark("poisoning")
    refused_letters = admission.letters(job.input)
    written = []
    if refused_letters or any(by_reason for _, by_reason, _ in stats):  # else no shuffle
        letter_pieces = backend.flat_map(reads, _letter_pieces)
        if refused_letters:
            letter_pieces = backend.union(letter_pieces, backend.parallelize(
                [(_text_key(letter.source), (letter.source, [letter.to_json()]))
                 for letter in refused_letters]))
        written = backend.collect(backend.flat_map(
            backend.group_by_key(letter_pieces),
            functools.partial(_write_letters, staging=staging)))
    backend.release(reads)
    mark("dead_letters")
    reasons: dict[str, tuple[int, ...]] = {}
    for _, by_reason, _ in stats:
        reasons = steps.add_tallies(reasons, by_reason)
    for letter in refused_letters:
        reasons = steps.add_tallies(reasons, {letter.reason: steps.letter_tally(letter)})
    return Counted(tallies, sum(s[0] for s in stats), reasons, sorted(written),
                   [s[2] for s in stats], contribution, marks, sections)


def run_estimate(backend: Backend, job: EstimateJob) -> dict[str, Any]:
    """Run the plan on ``backend``; returns the run's counts, as the Beam job's ``run``:
    ``{"output", "state", "seconds", "timings_ms", "records", "reports_estimated",
    "duplicates", "capped", "dead_letters", "engine"}``. A failed run removes its staging
    folder (:func:`ldpflow.plan.outputs.staged`) and raises."""
    with outputs.staged(job.output) as staging:  # removed if the run fails
        return _run_estimate(backend, job, staging)


def _run_estimate(backend: Backend, job: EstimateJob, staging: str) -> dict[str, Any]:
    from ldpflow.wire.results import estimates_document, utc_now

    started = time.perf_counter()
    counted = count_reports(backend, job, staging)
    from ldpflow.plan.progress import finished

    finished(job.progress, counted.records)  # the reads are done
    tallies = counted.tallies
    results = backend.collect(backend.map(
        backend.parallelize(sorted(tallies.items(), key=lambda kv: steps._key_text(kv[0]))),
        functools.partial(steps.estimate_key, methods=job.methods)))
    if counted.poisoning is not None:
        results = [steps.attach_poisoning(result, counted.poisoning) for result in results]
    run = {**job.run, "finished": utc_now()} if job.run is not None else None
    document = estimates_document(results, steps.dead_letter_summary(counted.reasons),
                                  job.dedup, counted.contribution, run)
    for name, data in outputs.estimates_files(document, job.run).items():
        outputs.write_staged(staging, name, data)
    outputs.commit_outputs(job.output, staging)
    read_ms = counted.read_ms
    summary = {
        "output": job.output, "state": "DONE", "engine": backend.description,
        "seconds": round(time.perf_counter() - started, 3),
        "timings_ms": {"range_read_ms": {"count": len(read_ms), "sum": sum(read_ms),
                                         "min": min(read_ms, default=0),
                                         "max": max(read_ms, default=0),
                                         "mean": sum(read_ms) / max(len(read_ms), 1)},
                       "steps_s": counted.step_seconds},
        "records": counted.records, "reports_estimated": document["reports_estimated"],
        "duplicates": document["duplicates"],
        "capped": sum(t.capped for t in tallies.values()),
        **steps.verdict_counts(counted.reasons),
        "input_bytes": job.input_bytes,
    }
    _LOGGER.info("ldpflow estimate (%s): %d records: %d estimated, %d duplicates, %d dead "
                 "letters in %.1fs -> %s", backend.description, counted.records,
                 summary["reports_estimated"], summary["duplicates"], summary["dead_letters"],
                 summary["seconds"], job.output)
    return summary
