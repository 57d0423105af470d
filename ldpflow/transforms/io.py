"""Reading report files and writing estimates, as Beam transforms.

``ReadReports`` matches a glob, cuts every file into byte ranges (Parquet at row groups;
:func:`ldpflow.wire.formats.plan_ranges`), spreads the ranges over the workers and reads
each one column by column through the wire layer's one parse path
(:func:`ldpflow.wire.formats.read_reports`). It emits ``(key, ReportBatch)`` elements and
:class:`DeadLetter` elements (with a reason) in one PCollection; ``SplitDeadLetters``
separates them. (One output split by filters rather than tagged outputs: some runners,
Dask among them, mishandle tagged outputs.) Counters (namespace ``ldpflow``): ``records``,
``reports``, ``dead_letters``, ``files``, ``ranges``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from ldpflow.wire import formats
from ldpflow.wire.envelope import DeadLetter
from ldpflow.wire.parse import AcceptancePolicy
from ldpflow.wire.results import estimate_records, estimates_document

__all__ = [
    "CommitOutputs",
    "staging_folder",
    "ReadReports",
    "PlanRangesFn",
    "ReadRangeFn",
    "SplitDeadLetters",
    "WriteEstimates",
    "WriteDeadLetters",
    "as_policy",
]

_LOGGER = logging.getLogger(__name__)
_PROGRESS_SECONDS = 10.0


def as_policy(policy: AcceptancePolicy | Mapping[str, Any] | None) -> AcceptancePolicy:
    """An :class:`AcceptancePolicy` (a mapping is the parameters to expect)."""
    if policy is None:
        return AcceptancePolicy()
    if isinstance(policy, AcceptancePolicy):
        return policy
    return AcceptancePolicy(expect=dict(policy))


def _format_of(path: str, fmt: str | None) -> str:
    return fmt or formats.detect_format(path)


class PlanRangesFn(beam.DoFn):
    """A matched file -> ``(path, format, start, end)`` ranges to read separately."""

    def __init__(self, fmt: str | None = None, range_bytes: int = formats.RANGE_BYTES):
        super().__init__()
        if fmt is not None and fmt not in formats.FORMATS:
            raise ValueError(f"format must be one of {', '.join(formats.FORMATS)}, got {fmt!r}")
        self._format = fmt
        self._range_bytes = range_bytes

    def process(self, readable_file):
        metadata = readable_file.metadata
        path, size = metadata.path, metadata.size_in_bytes
        fmt = _format_of(path, self._format)
        splittable = not formats.is_compressed(path)
        if splittable and size > self._range_bytes:
            with FileSystems.open(path) as stream:
                ranges = formats.plan_ranges(stream, fmt, size, True, self._range_bytes)
        else:
            ranges = [(0, None)]
        for start, end in ranges:
            yield path, fmt, start, end


class ReadRangeFn(beam.DoFn):
    """Reads one range of one file into ``(key, ReportBatch)`` elements and dead letters."""

    def __init__(self, policy: AcceptancePolicy | Mapping[str, Any] | None = None,
                 keep: Iterable[str] = ()):
        super().__init__()
        self._policy = as_policy(policy)
        self._keep = tuple(keep)
        self._records = Metrics.counter("ldpflow", "records")
        self._reports = Metrics.counter("ldpflow", "reports")
        self._dead = Metrics.counter("ldpflow", "dead_letters")
        self._ranges = Metrics.counter("ldpflow", "ranges")
        self._files = Metrics.counter("ldpflow", "files")

    def process(self, element):
        path, fmt, start, end = element
        started = last_log = time.monotonic()
        records = reports = dead = 0
        with FileSystems.open(path) as stream:
            for parsed in formats.read_reports(stream, fmt, source=path, start=start, end=end,
                                               policy=self._policy, keep=self._keep):
                refused = sum(letter.count for letter in parsed.dead_letters)
                records += parsed.records
                reports += parsed.reports
                dead += refused
                self._records.inc(parsed.records)
                self._reports.inc(parsed.reports)
                self._dead.inc(refused)
                for key, batch in parsed.batches.items():
                    yield tuple(key), batch  # Beam keys: plain tuples encode deterministically
                yield from parsed.dead_letters
                now = time.monotonic()
                if now - last_log >= _PROGRESS_SECONDS:
                    _LOGGER.info("%s [%d, %s): %d records so far (%.0f/s)", path, start, end,
                                 records, records / (now - started))
                    last_log = now
        self._ranges.inc()
        if start == 0:
            self._files.inc()
        _LOGGER.info("read %s [%d, %s): %d records, %d reports, %d dead letters in %.1fs", path,
                     start, end if end is not None else "end", records, reports, dead,
                     time.monotonic() - started)


class ReadReports(beam.PTransform):
    """Report files matching ``file_pattern`` -> ``(key, ReportBatch)`` and ``DeadLetter``s.

    Parameters
    ----------
    file_pattern : str
        A glob (any Beam file system).
    fmt : str, optional
        The format of every file (default: from each file's name).
    policy : AcceptancePolicy or mapping, optional
        What to accept (a mapping: the parameters to expect).
    keep : iterable of str
        Envelope columns the batches keep (``id_hashes`` for deduplication, ...).
    """

    def __init__(self, file_pattern: str, fmt: str | None = None,
                 policy: AcceptancePolicy | Mapping[str, Any] | None = None,
                 keep: Iterable[str] = (), range_bytes: int = formats.RANGE_BYTES):
        super().__init__()
        self._pattern = file_pattern
        self._plan = PlanRangesFn(fmt, range_bytes)
        self._read = ReadRangeFn(policy, keep)

    def expand(self, pbegin):
        return (
            pbegin
            | "Match" >> fileio.MatchFiles(self._pattern)
            | "Open" >> fileio.ReadMatches()
            | "PlanRanges" >> beam.ParDo(self._plan)
            | "SpreadRanges" >> beam.Reshuffle()  # ranges go to all workers, not one bundle
            | "ReadRanges" >> beam.ParDo(self._read)
        )


def _is_dead_letter(element) -> bool:
    return isinstance(element, DeadLetter)


class SplitDeadLetters(beam.PTransform):
    """Mixed elements -> ``{"reports": (key, ReportBatch)..., "dead_letters": DeadLetter...}``."""

    def expand(self, mixed):
        return {
            "reports": mixed | "Reports" >> beam.Filter(lambda e: not _is_dead_letter(e)),
            "dead_letters": mixed | "DeadLetters" >> beam.Filter(_is_dead_letter),
        }


class _WriteEstimateFilesFn(beam.DoFn):
    def __init__(self, output: str, dedup: bool):
        super().__init__()
        self._output = output.rstrip("/")
        self._dedup = dedup

    def process(self, results, dead_letters):
        document = estimates_document(results, dead_letters, self._dedup)
        with FileSystems.create(f"{self._output}/estimates.json") as f:
            f.write(json.dumps(document, indent=1).encode("utf-8"))
        records = [rec for result in document["results"] for rec in estimate_records(result)]
        with FileSystems.create(f"{self._output}/estimates.avro") as f:
            formats.write_records(f, "avro", records, schema="estimate")
        yield document


class WriteEstimates(beam.PTransform):
    """Write result dicts as ``OUTPUT/estimates.json`` and ``OUTPUT/estimates.avro``.

    ``dead_letter_summary`` is a singleton PCollection (``{"total", "by_reason"}``) merged into
    the JSON document, with ``records = reports_estimated + duplicates + dead_letters.total``.
    """

    def __init__(self, output: str, dead_letter_summary, dedup: bool = True):
        super().__init__()
        self._output = output
        self._summary = dead_letter_summary
        self._dedup = dedup

    def expand(self, results):
        return (
            results
            | "Collect" >> beam.combiners.ToList()
            | "WriteFiles" >> beam.ParDo(_WriteEstimateFilesFn(self._output, self._dedup),
                                         beam.pvalue.AsSingleton(self._summary))
        )


class _WriteDeadLetterFileFn(beam.DoFn):
    def __init__(self, folder: str):
        super().__init__()
        self._folder = folder

    def process(self, element):
        source, lines = element
        digest = hashlib.sha1(source.encode("utf-8")).hexdigest()[:10]
        base = os.path.basename(source.rstrip("/")) or "records"
        path = f"{self._folder}/{base}-{digest}.jsonl"
        lines = sorted(lines)
        with FileSystems.create(path) as f:
            f.write(("\n".join(lines) + "\n").encode("utf-8"))
        yield path, len(lines)


class WriteDeadLetters(beam.PTransform):
    """Dead letters as JSON lines, one file per source: ``OUTPUT/dead_letters/NAME-HASH.jsonl``.

    Outputs ``(path, count)`` per file written.
    """

    def __init__(self, output: str):
        super().__init__()
        self._folder = output.rstrip("/") + "/dead_letters"

    def expand(self, dead_letters):
        return (
            dead_letters
            | "BySource" >> beam.Map(lambda letter: (letter.source, letter.to_json()))
            | "Group" >> beam.GroupByKey()
            | "WriteFiles" >> beam.ParDo(_WriteDeadLetterFileFn(self._folder))
        )


def staging_folder(output: str) -> str:
    """A fresh folder under ``output`` where one run writes before :class:`CommitOutputs`."""
    return f"{output.rstrip('/')}/.staging-{uuid.uuid4().hex}"


class _CommitFn(beam.DoFn):
    def __init__(self, output: str, staging: str):
        super().__init__()
        self._output, self._staging = output.rstrip("/"), staging.rstrip("/")

    def process(self, _, *written):
        patterns = [f"{self._staging}/*.json", f"{self._staging}/*.avro",
                    f"{self._staging}/dead_letters/*.jsonl"]
        staged = sorted(m.path for result in FileSystems.match(patterns)
                        for m in result.metadata_list)
        targets = [self._output + path[len(self._staging):] for path in staged]
        folders = sorted({target.rsplit("/", 1)[0] for target in targets})
        for folder in folders:
            try:
                FileSystems.mkdirs(folder)
            except OSError:  # it exists
                pass
        # Each file replaces its predecessor in one rename; then the previous run's dead
        # letters that this run did not write go, so no stale file sits beside new results.
        FileSystems.rename(staged, targets)
        kept = set(targets)
        old = [m.path for m in FileSystems.match([f"{self._output}/dead_letters/*"])[0]
               .metadata_list if m.path not in kept]
        if old:
            FileSystems.delete(old)
        FileSystems.delete([self._staging])
        yield len(targets)


class CommitOutputs(beam.PTransform):
    """Moves a run's staged files into ``output`` once every writer has finished.

    The writers write under ``staging`` (:func:`staging_folder`); applied to the tuple of
    their output PCollections, this step waits for all of them (side inputs), then renames
    each staged file over its final name and deletes the previous run's dead-letter files
    that this run did not write. A failed run leaves the previous output as it was.
    """

    def __init__(self, output: str, staging: str):
        super().__init__()
        self._fn = _CommitFn(output, staging)

    def expand(self, written):
        waits = [beam.pvalue.AsList(pcoll) for pcoll in written]
        return (written[0].pipeline
                | "Start" >> beam.Create([None])
                | "Commit" >> beam.ParDo(self._fn, *waits))
