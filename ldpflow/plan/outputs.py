"""The bytes of ``ldpflow estimate``'s output files, and their atomic commit, without Beam.

:func:`estimates_files` and :func:`dead_letter_file` give the names and bytes every
engine writes (the Beam job's writers call them too, so the files are byte-identical);
:func:`commit_outputs` moves a run's staged files into the output directory with the Beam
jobs' commit (:func:`ldpflow.wire.outputs.commit`): each by one rename over its
predecessor, then the previous run's dead-letter files that this run did not write, and
only files ldpflow wrote, never through a link; a failed run leaves the previous output as
it was. Local (or mounted) paths.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import shutil
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from ldpflow.wire import outputs

__all__ = ["estimates_files", "dead_letter_file", "staging_folder", "staged", "write_staged",
           "commit_outputs"]

DEAD_LETTERS = outputs.DEAD_LETTERS

_LOGGER = logging.getLogger(__name__)


def estimates_files(document: Mapping[str, Any], run: Mapping[str, Any] | None
                    ) -> dict[str, bytes]:
    """``{"estimates.json": ..., "estimates.avro": ...}`` of an estimates document, and
    ``"estimates.csv"`` if ``run`` asks for it (``"formats"``); the Avro records carry
    ``run``'s deterministic metadata only (no times)."""
    from ldpflow.wire import formats
    from ldpflow.wire.results import estimate_records, estimates_csv

    records = [rec for result in document["results"]
               for rec in estimate_records(result, run=run)]
    avro = io.BytesIO()
    formats.write_records(avro, "avro", records, schema="estimate")
    files = {"estimates.json": json.dumps(document, indent=1).encode("utf-8"),
             "estimates.avro": avro.getvalue()}
    if "csv" in ((run or {}).get("formats") or ()):
        files["estimates.csv"] = estimates_csv(document)
    return files


def dead_letter_file(source: str, lines: Iterable[str]) -> tuple[str, bytes, int]:
    """``(path under the output, bytes, count)`` of one source's dead letters (JSON lines,
    sorted): ``dead_letters/NAME-HASH.jsonl``."""
    lines = sorted(lines)
    return (f"{DEAD_LETTERS}/{outputs.dead_letter_file_name(source)}",
            ("\n".join(lines) + "\n").encode("utf-8"), len(lines))


def staging_folder(output: str) -> str:
    """A fresh folder under ``output`` where one run writes before :func:`commit_outputs`."""
    return f"{output.rstrip('/')}/.staging-{uuid.uuid4().hex}"


@contextlib.contextmanager
def staged(output: str):
    """A run's staging folder (:func:`staging_folder`, made when first written): if the
    run fails, that folder (its partial files) is removed before the error goes on, and no
    other: a run beside it on the same output keeps its own."""
    staging = staging_folder(output)
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        _LOGGER.info("removed the failed run's staging folder %s", staging)
        raise


def write_staged(staging: str, name: str, data: bytes) -> str:
    """Write ``data`` as ``staging/name``; returns the path."""
    path = os.path.join(staging, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return path


def commit_outputs(output: str, staging: str) -> int:
    """Move the staged files into ``output`` as the Beam jobs do
    (:func:`ldpflow.wire.outputs.commit`: a manifest, and only ldpflow's files removed, never
    through a link); returns how many."""
    return outputs.commit(output, staging, outputs.LocalFiles())
