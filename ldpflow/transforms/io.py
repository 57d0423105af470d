"""Reading report files and writing estimates, as Beam transforms.

``ReadReports`` matches a glob, reads each file a whole Avro block (or JSON/Parquet chunk)
at a time into numpy columns, validates every record and emits ``(key, ReportBatch)``
elements and :class:`DeadLetter` elements (with a reason) in one PCollection;
``SplitDeadLetters`` separates them. (One output split by filters rather than tagged outputs:
some runners, Dask among them, mishandle tagged outputs.) Counters (namespace ``ldpflow``):
``records``, ``reports``, ``dead_letters``, ``files``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Mapping
from typing import Any

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from ldpflow.transforms import formats
from ldpflow.transforms.records import DeadLetter, estimate_records, parse_records

__all__ = [
    "ReadReports",
    "ReadReportFileFn",
    "SplitDeadLetters",
    "WriteEstimates",
    "WriteDeadLetters",
]

_LOGGER = logging.getLogger(__name__)
_PROGRESS_SECONDS = 10.0


class ReadReportFileFn(beam.DoFn):
    """Reads one matched file into ``(key, ReportBatch)`` elements and dead letters."""

    def __init__(self, fmt: str | None = None, expect: Mapping[str, Any] | None = None,
                 envelope: bool = False):
        super().__init__()
        self._envelope = envelope
        if fmt is not None and fmt not in formats.FORMATS:
            raise ValueError(f"format must be one of {', '.join(formats.FORMATS)}, got {fmt!r}")
        self._format = fmt
        self._expect = dict(expect) if expect else None
        self._records = Metrics.counter("ldpflow", "records")
        self._reports = Metrics.counter("ldpflow", "reports")
        self._dead = Metrics.counter("ldpflow", "dead_letters")
        self._files = Metrics.counter("ldpflow", "files")

    def process(self, readable_file):
        path = readable_file.metadata.path
        fmt = self._format or formats.detect_format(path)
        started = last_log = time.monotonic()
        records = reports = dead = 0
        with readable_file.open() as stream:
            for chunk, undecodable, trusted in formats.read_chunks(stream, fmt, path):
                batches, refused = parse_records(chunk, source=path, expect=self._expect,
                                                 trusted=trusted, envelope=self._envelope)
                refused = undecodable + refused
                valid = sum(len(b) for b in batches.values())
                records += len(chunk) + len(undecodable)
                reports += valid
                dead += len(refused)
                self._records.inc(len(chunk) + len(undecodable))
                self._reports.inc(valid)
                self._dead.inc(len(refused))
                yield from batches.items()
                yield from refused
                now = time.monotonic()
                if now - last_log >= _PROGRESS_SECONDS:
                    _LOGGER.info("%s: %d records so far (%.0f/s)", path, records,
                                 records / (now - started))
                    last_log = now
        self._files.inc()
        _LOGGER.info("read %s: %d records, %d reports, %d dead letters in %.1fs", path, records,
                     reports, dead, time.monotonic() - started)


class ReadReports(beam.PTransform):
    """Report files matching ``file_pattern`` -> ``(key, ReportBatch)`` and ``DeadLetter``s."""

    def __init__(self, file_pattern: str, fmt: str | None = None,
                 expect: Mapping[str, Any] | None = None, envelope: bool = False):
        super().__init__()
        self._pattern = file_pattern
        self._fn = ReadReportFileFn(fmt, expect, envelope)

    def expand(self, pbegin):
        return (
            pbegin
            | "Match" >> fileio.MatchFiles(self._pattern)
            | "SpreadFiles" >> beam.Reshuffle()  # files go to all workers, not one bundle
            | "Open" >> fileio.ReadMatches()
            | "ReadFiles" >> beam.ParDo(self._fn)
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
    def __init__(self, output: str):
        super().__init__()
        self._output = output.rstrip("/")

    def process(self, results, dead_letters):
        results = sorted(results, key=lambda r: (r["oracle"], json.dumps(r["parameters"],
                                                                          sort_keys=True)))
        estimated = sum(r["n"] for r in results)
        document = {
            "results": results,
            "records": estimated + dead_letters["total"],
            "reports_estimated": estimated,
            "dead_letters": dead_letters,
        }
        with FileSystems.create(f"{self._output}/estimates.json") as f:
            f.write(json.dumps(document, indent=1).encode("utf-8"))
        records = [rec for result in results for rec in estimate_records(result)]
        with FileSystems.create(f"{self._output}/estimates.avro") as f:
            formats.write_avro(f, records, schema="estimate")
        yield document


class WriteEstimates(beam.PTransform):
    """Write result dicts as ``OUTPUT/estimates.json`` and ``OUTPUT/estimates.avro``.

    ``dead_letter_summary`` is a singleton PCollection (``{"total", "by_reason"}``) merged into
    the JSON document, with ``records = reports_estimated + dead_letters.total``.
    """

    def __init__(self, output: str, dead_letter_summary):
        super().__init__()
        self._output = output
        self._summary = dead_letter_summary

    def expand(self, results):
        return (
            results
            | "Collect" >> beam.combiners.ToList()
            | "WriteFiles" >> beam.ParDo(_WriteEstimateFilesFn(self._output),
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
