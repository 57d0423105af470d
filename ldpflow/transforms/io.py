"""Reading report files and writing estimates, as Beam transforms.

``ReadReports`` matches a glob, cuts every file into byte ranges (Parquet at row groups;
:func:`ldpflow.wire.formats.plan_ranges`), spreads the ranges over the workers and reads
each one column by column through the wire layer's one parse path
(:func:`ldpflow.wire.formats.read_reports`). Its result has two tagged outputs:
``result["reports"]``, ``(key, ReportBatch)`` elements, and ``result["dead_letters"]``,
:class:`DeadLetter` elements with a reason. Counters (namespace ``ldpflow``): ``records``,
``reports``, ``dead_letters``, ``files``, ``ranges``; distributions ``range_records`` and
``range_read_ms`` (records and milliseconds per file range).
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from ldpflow.plan.outputs import dead_letter_file, estimates_files
from ldpflow.plan.progress import ProgressSpec
from ldpflow.plan.steps import RangeTask, file_ranges, scan_range, split_repeated
from ldpflow.wire import formats, outputs
from ldpflow.wire.parse import AcceptancePolicy
from ldpflow.wire.results import estimates_document, utc_now

__all__ = [
    "CommitOutputs",
    "staging_folder",
    "ReadReports",
    "PlanRangesFn",
    "ReadRangeFn",
    "WriteEstimates",
    "WriteDeadLetters",
    "as_policy",
    "open_input",
]

_LOGGER = logging.getLogger(__name__)


def as_policy(policy: AcceptancePolicy | Mapping[str, Any] | None) -> AcceptancePolicy:
    """An :class:`AcceptancePolicy` (a mapping is the parameters to expect)."""
    if policy is None:
        return AcceptancePolicy()
    if isinstance(policy, AcceptancePolicy):
        return policy
    return AcceptancePolicy(expect=dict(policy))


@contextlib.contextmanager
def open_input(path: str):
    """A report file to read, decompressed in bounded steps by the wire layer
    (:func:`ldpflow.wire.formats.decompressed`), not by Beam's ``CompressedFile``, which
    expands 16 MiB of compressed input at once whatever it expands to."""
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as raw:
        yield formats.decompressed(raw, path)


def _format_of(path: str, fmt: str | None) -> str:
    return fmt or formats.detect_format(path)


class PlanRangesFn(beam.DoFn):
    """A matched file -> ``(path, format, start, end)`` ranges to read separately
    (:func:`ldpflow.plan.steps.file_ranges`)."""

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
        for start, end in file_ranges(path, size, fmt, self._range_bytes, opener=open_input):
            yield path, fmt, start, end


class ReadRangeFn(beam.DoFn):
    """Reads one range of one file into ``(key, ReportBatch)`` elements (main output) and
    dead letters (tagged ``dead_letters``).

    With ``ids_only`` it yields ``(key, id hashes)`` only (no dead letters), counted under
    the namespace ``ldpflow-ids``: a second, light read for deduplication. Given the side
    input ``repeated`` (``ldpflow.transforms.dedup.RepeatedIds``), the rows of repeated ids
    go to the tagged output ``repeats`` instead of the main one.

    Every read adds its records and bytes to the job's progress (``progress``, a
    :class:`~ldpflow.plan.progress.ProgressSpec`; the light read of ids does not), which
    logs a line every 10 s. The read loop is the job plan's
    (:func:`ldpflow.plan.steps.scan_range`, through :func:`open_input`), and the split of
    the repeated rows its :func:`~ldpflow.plan.steps.split_repeated`; this DoFn streams the
    chunks' batches out (to be counted where they are read, by the lifted combiner)
    instead of gathering a range as :func:`~ldpflow.plan.steps.read_range` does.
    """

    DEAD_LETTERS = "dead_letters"
    REPEATS = "repeats"

    def __init__(self, policy: AcceptancePolicy | Mapping[str, Any] | None = None,
                 keep: Iterable[str] = (), ids_only: bool = False,
                 progress: ProgressSpec | None = None):
        super().__init__()
        self._progress = None if ids_only else (progress or ProgressSpec(uuid.uuid4().hex))
        self._policy = as_policy(policy)
        self._ids_only = ids_only
        self._keep = ("id_hashes",) if ids_only else tuple(keep)
        space = "ldpflow-ids" if ids_only else "ldpflow"
        self._records = Metrics.counter(space, "records")
        self._reports = Metrics.counter(space, "reports")
        self._dead = Metrics.counter(space, "dead_letters")
        self._ranges = Metrics.counter(space, "ranges")
        self._files = Metrics.counter(space, "files")
        self._range_records = Metrics.distribution(space, "range_records")
        self._range_ms = Metrics.distribution(space, "range_read_ms")

    def process(self, element, repeated=None):
        path, fmt, start, end = element
        started = time.monotonic()
        records = reports = dead = 0
        for parsed in scan_range(RangeTask(0, path, fmt, start, end), self._policy,
                                 self._keep, progress=self._progress, opener=open_input):
            refused = sum(letter.count for letter in parsed.dead_letters)
            records += parsed.records
            reports += parsed.reports
            dead += refused
            self._records.inc(parsed.records)
            self._reports.inc(parsed.reports)
            self._dead.inc(refused)
            if self._ids_only:
                for key, batch in parsed.batches.items():
                    yield tuple(key), batch.id_hashes
                continue
            for key, batch in parsed.batches.items():
                key = tuple(key)  # Beam keys: plain tuples encode deterministically
                if repeated is not None:
                    batch, repeats = split_repeated(key, batch, repeated)
                    if repeats is not None:
                        yield beam.pvalue.TaggedOutput(self.REPEATS, (key, repeats))
                if batch is not None:
                    yield key, batch
            for letter in parsed.dead_letters:
                yield beam.pvalue.TaggedOutput(self.DEAD_LETTERS, letter)
        self._ranges.inc()
        self._range_records.update(records)
        self._range_ms.update(int(1000 * (time.monotonic() - started)))
        if start == 0:
            self._files.inc()
        _LOGGER.log(logging.DEBUG if self._ids_only else logging.INFO,
                    "read %s [%d, %s)%s: %d records, %d reports, %d dead letters in %.1fs",
                    path, start, end if end is not None else "end",
                    " (report ids)" if self._ids_only else "", records, reports, dead,
                    time.monotonic() - started)


class ReadReports(beam.PTransform):
    """Report files matching ``file_pattern`` -> ``result["reports"]``, ``(key, ReportBatch)``
    elements, and ``result["dead_letters"]``, ``DeadLetter`` elements.

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
    ids_only : bool
        Yield ``(key, id hashes)`` of the valid reports instead (main output only; see
        :mod:`ldpflow.transforms.dedup`).
    repeated : PCollection, optional
        ``(key text, repeated id hashes)`` (``RepeatedIds``): the rows of those ids go to
        ``result["repeats"]`` instead of ``result["reports"]`` (needs ``id_hashes`` kept).
    progress : ProgressSpec, optional
        The job's progress lines (:mod:`ldpflow.plan.progress`; default: the read's own,
        of unknown size).
    """

    def __init__(self, file_pattern: str, fmt: str | None = None,
                 policy: AcceptancePolicy | Mapping[str, Any] | None = None,
                 keep: Iterable[str] = (), range_bytes: int = formats.RANGE_BYTES,
                 ids_only: bool = False, repeated=None, progress: ProgressSpec | None = None):
        super().__init__()
        self._pattern = file_pattern
        self._plan = PlanRangesFn(fmt, range_bytes)
        self._read = ReadRangeFn(policy, keep, ids_only, progress)
        self._repeated = repeated

    def expand(self, pbegin):
        # The side input makes the read wait for it: ranges wait, reports stream through.
        sides = [] if self._repeated is None else [beam.pvalue.AsDict(self._repeated)]
        return (
            pbegin
            | "Match" >> fileio.MatchFiles(self._pattern)
            | "Open" >> fileio.ReadMatches()
            | "PlanRanges" >> beam.ParDo(self._plan)
            | "SpreadRanges" >> beam.Reshuffle()  # ranges go to all workers, not one bundle
            | "ReadRanges" >> beam.ParDo(self._read, *sides).with_outputs(
                ReadRangeFn.DEAD_LETTERS, ReadRangeFn.REPEATS, main="reports")
        )


class _WriteEstimateFilesFn(beam.DoFn):
    def __init__(self, output: str, dedup: bool, run: Mapping[str, Any] | None = None):
        super().__init__()
        self._output = output.rstrip("/")
        self._dedup = dedup
        self._run = dict(run) if run is not None else None

    def process(self, results, dead_letters, contribution=None):
        # "finished": when the estimates were written (the last step before the commit).
        run = {**self._run, "finished": utc_now()} if self._run is not None else None
        document = estimates_document(results, dead_letters, self._dedup, contribution, run)
        # The Avro records take the run's deterministic metadata only (no times).
        for name, data in estimates_files(document, self._run).items():
            with FileSystems.create(f"{self._output}/{name}") as f:
                f.write(data)
        yield document


class WriteEstimates(beam.PTransform):
    """Write result dicts as ``OUTPUT/estimates.json`` and ``OUTPUT/estimates.avro``.

    ``dead_letter_summary`` is a singleton PCollection (``{"total", "by_reason"}``) merged into
    the JSON document, with ``records = reports_estimated + duplicates + capped +
    dead_letters.total``; ``contribution`` (with a contribution cap) a singleton of
    :class:`~ldpflow.transforms.caps.CapContributions`' summary. ``run``
    (:func:`~ldpflow.wire.results.run_metadata`) becomes the document's ``"run"``, with
    ``"finished"`` set when the files are written; the Avro records carry its deterministic
    part only (version, inputs, methods), so a rerun on the same input writes the same bytes.
    """

    def __init__(self, output: str, dead_letter_summary, dedup: bool = True,
                 contribution=None, run: Mapping[str, Any] | None = None):
        super().__init__()
        self._output = output
        self._summary = dead_letter_summary
        self._dedup = dedup
        self._contribution = contribution
        self._run = run

    def expand(self, results):
        sides = [beam.pvalue.AsSingleton(self._summary)]
        if self._contribution is not None:
            sides.append(beam.pvalue.AsSingleton(self._contribution))
        return (
            results
            | "Collect" >> beam.combiners.ToList()
            | "WriteFiles" >> beam.ParDo(_WriteEstimateFilesFn(self._output, self._dedup,
                                                               self._run), *sides)
        )


class _WriteDeadLetterFileFn(beam.DoFn):
    def __init__(self, folder: str):
        super().__init__()
        self._folder = folder

    def process(self, element):
        source, lines = element
        name, data, count = dead_letter_file(source, lines)
        path = f"{self._folder}/{name.split('/', 1)[1]}"
        with FileSystems.create(path) as f:
            f.write(data)
        yield path, count


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


def _read(path: str, limit: int | None = None) -> bytes | None:
    try:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            return f.read() if limit is None else f.readline(limit)
    except (OSError, ValueError):  # BeamIOError is an IOError
        return None


def _exists(path: str) -> bool:
    try:
        return FileSystems.exists(path)
    except (OSError, ValueError):
        return False


class _BeamFiles:
    """:class:`ldpflow.wire.outputs.Files` on Beam's ``FileSystems`` (any file system)."""

    match = staticmethod(lambda pattern: [m.path for m in
                                          FileSystems.match([pattern])[0].metadata_list])
    create = staticmethod(FileSystems.create)
    rename = staticmethod(FileSystems.rename)
    delete = staticmethod(FileSystems.delete)
    read = staticmethod(_read)
    exists = staticmethod(_exists)

    @staticmethod
    def mkdirs(path: str) -> None:
        try:
            FileSystems.mkdirs(path)
        except OSError:  # it exists
            pass


class _CommitFn(beam.DoFn):
    def __init__(self, output: str, staging: str):
        super().__init__()
        self._output, self._staging = output.rstrip("/"), staging.rstrip("/")

    def process(self, _, *written):
        yield outputs.commit(self._output, self._staging, _BeamFiles())


class CommitOutputs(beam.PTransform):
    """Moves a run's staged files into ``output`` once every writer has finished.

    The writers write under ``staging`` (:func:`staging_folder`); applied to the tuple of
    their output PCollections, this step waits for all of them (side inputs), then renames
    each staged file over its final name and deletes the previous run's dead-letter files
    that this run did not write: only files ldpflow wrote (those the output's manifest lists,
    :mod:`ldpflow.wire.outputs`), never through a symbolic link. A failed run leaves the
    previous output as it was; :func:`ldpflow.pipelines.common.run_pipeline` then removes
    the ``staging`` folder.
    """

    def __init__(self, output: str, staging: str):
        super().__init__()
        self.output, self.staging = output, staging
        self._fn = _CommitFn(output, staging)

    def expand(self, written):
        waits = [beam.pvalue.AsList(pcoll) for pcoll in written]
        return (written[0].pipeline
                | "Start" >> beam.Create([None])
                | "Commit" >> beam.ParDo(self._fn, *waits))
