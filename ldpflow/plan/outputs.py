"""The bytes of ``ldpflow estimate``'s output files, and their atomic commit, without Beam.

:func:`estimates_files` and :func:`dead_letter_file` give the names and bytes every
engine writes (the Beam job's writers call them too, so the files are byte-identical);
:func:`commit_outputs` moves a run's staged files into the output directory, each by one
rename over its predecessor, then removes the previous run's dead-letter files that this
run did not write and the staging folder: a failed run leaves the previous output as it
was. Local (or mounted) paths.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["estimates_files", "dead_letter_file", "staging_folder", "write_staged",
           "commit_outputs"]

DEAD_LETTERS = "dead_letters"


def estimates_files(document: Mapping[str, Any], run: Mapping[str, Any] | None
                    ) -> dict[str, bytes]:
    """``{"estimates.json": ..., "estimates.avro": ...}`` of an estimates document; the Avro
    records carry ``run``'s deterministic metadata only (no times)."""
    from ldpflow.wire import formats
    from ldpflow.wire.results import estimate_records

    records = [rec for result in document["results"]
               for rec in estimate_records(result, run=run)]
    avro = io.BytesIO()
    formats.write_records(avro, "avro", records, schema="estimate")
    return {"estimates.json": json.dumps(document, indent=1).encode("utf-8"),
            "estimates.avro": avro.getvalue()}


def dead_letter_file(source: str, lines: Iterable[str]) -> tuple[str, bytes, int]:
    """``(path under the output, bytes, count)`` of one source's dead letters (JSON lines,
    sorted): ``dead_letters/NAME-HASH.jsonl``."""
    digest = hashlib.sha1(source.encode("utf-8")).hexdigest()[:10]
    base = os.path.basename(source.rstrip("/")) or "records"
    lines = sorted(lines)
    return (f"{DEAD_LETTERS}/{base}-{digest}.jsonl", ("\n".join(lines) + "\n").encode("utf-8"),
            len(lines))


def staging_folder(output: str) -> str:
    """A fresh folder under ``output`` where one run writes before :func:`commit_outputs`."""
    return f"{output.rstrip('/')}/.staging-{uuid.uuid4().hex}"


def write_staged(staging: str, name: str, data: bytes) -> str:
    """Write ``data`` as ``staging/name``; returns the path."""
    path = os.path.join(staging, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return path


def commit_outputs(output: str, staging: str) -> int:
    """Move the staged files into ``output`` (see the module notes); returns how many."""
    output, staging = output.rstrip("/"), staging.rstrip("/")
    staged = []
    for folder, _, names in os.walk(staging):
        staged += [os.path.join(folder, name) for name in names]
    staged.sort()
    kept = set()
    for path in staged:
        target = output + path[len(staging):]
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.replace(path, target)
        kept.add(target)
    letters = os.path.join(output, DEAD_LETTERS)
    if os.path.isdir(letters) and not os.path.islink(letters):
        for name in os.listdir(letters):
            path = os.path.join(letters, name)
            if path not in kept and os.path.isfile(path) and not os.path.islink(path):
                os.remove(path)
    shutil.rmtree(staging, ignore_errors=True)
    return len(kept)
