"""What an output folder of ldpflow holds, and whether a job may write there (no Beam).

A batch job (``estimate``, ``heavy-hitters``) writes its files under a staging folder, then
moves them into ``OUTPUT`` and removes the dead-letter files of the previous run that it
did not write again (``ldpflow.transforms.io.CommitOutputs``). So that nothing else is ever
removed, the commit keeps a manifest, ``OUTPUT/.ldpflow-manifest.json``: the paths
(relative to ``OUTPUT``) of the files ldpflow put there. Only a file the manifest lists is
removed, never through a symbolic link. An output written before manifests existed has its
dead-letter files recognised by their content: ``NAME-HASH.jsonl`` whose first line is a
dead letter of a source whose base name is ``NAME`` and hash ``HASH``
(:func:`dead_letter_file_name`).

:func:`check_output` is run before any pipeline exists, on a local ``OUTPUT``: it refuses
(``OutputError``, a ``ValueError``) an output that is a file, cannot be created or written,
whose ``dead_letters`` is a symbolic link or not a folder, or whose ``dead_letters`` holds
anything ldpflow did not write. Outputs on other file systems (``gs://``, ...) have no
symbolic links; their writability is found by the runner.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterable
from typing import IO, Protocol

__all__ = [
    "MANIFEST",
    "DEAD_LETTERS",
    "OPTIONAL_FILES",
    "OutputError",
    "dead_letter_file_name",
    "manifest_bytes",
    "parse_manifest",
    "written_by_ldpflow",
    "is_local",
    "local_path",
    "check_output",
    "check_output_file",
    "Files",
    "LocalFiles",
    "commit",
]

#: The manifest of the files ldpflow put in an output folder (relative paths).
MANIFEST = ".ldpflow-manifest.json"
#: The folder of the dead-letter files, in an output folder.
DEAD_LETTERS = "dead_letters"
#: Files a run writes only when asked (``estimate --format csv``): like the dead-letter
#: files, removed by a run that does not write them again, so that none is left beside the
#: newer files it no longer matches.
OPTIONAL_FILES = ("estimates.csv",)
_SHOWN = 3  # foreign files named in a message


class OutputError(ValueError):
    """An output folder or file that a job must not (or cannot) write to."""


def dead_letter_file_name(source: str) -> str:
    """The name of the dead-letter file of ``source``: ``NAME-HASH.jsonl`` (``NAME`` the
    source's base name, ``HASH`` 10 hex digits of its SHA-1), one per source."""
    digest = hashlib.sha1(source.encode("utf-8")).hexdigest()[:10]
    base = os.path.basename(source.rstrip("/")) or "records"
    return f"{base}-{digest}.jsonl"


def manifest_bytes(files: Iterable[str]) -> bytes:
    """The manifest listing ``files`` (paths relative to the output folder)."""
    return (json.dumps({"written_by": "ldpflow", "files": sorted(set(files))}, indent=1)
            + "\n").encode("utf-8")


def parse_manifest(data: bytes | None) -> set[str] | None:
    """The relative paths a manifest lists (None: no manifest, or not one of ldpflow's)."""
    if data is None:
        return None
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    files = document.get("files") if isinstance(document, dict) else None
    if document.get("written_by") != "ldpflow" or not isinstance(files, list):
        return None
    return {name for name in files if isinstance(name, str)}


def written_by_ldpflow(relative: str, manifest: set[str] | None,
                       first_line: Callable[[], bytes | None]) -> bool:
    """Whether the file at ``relative`` (to the output folder) was written by ldpflow: the
    manifest lists it, or (an output without a manifest) it is a dead-letter file whose name
    is the one its first line's source gives (``first_line`` reads it; None if unreadable)."""
    if manifest is not None:
        return relative in manifest
    folder, _, name = relative.rpartition("/")
    if folder != DEAD_LETTERS or not name.endswith(".jsonl"):
        return False
    line = first_line()
    try:
        letter = json.loads(line.decode("utf-8")) if line else None
    except (UnicodeDecodeError, ValueError):
        return False
    source = letter.get("source") if isinstance(letter, dict) else None
    return isinstance(source, str) and dead_letter_file_name(source) == name


def is_local(path: str) -> bool:
    """Whether ``path`` is on this machine's file system (no scheme, or ``file://``)."""
    return "://" not in path or path.startswith("file://")


def local_path(path: str) -> str:
    return path[len("file://"):] if path.startswith("file://") else path


def _read_local(path: str, limit: int | None = None) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read() if limit is None else f.readline(limit)
    except OSError:
        return None


def _local_manifest(folder: str) -> set[str] | None:
    path = os.path.join(folder, MANIFEST)
    if os.path.islink(path) or not os.path.isfile(path):
        return None
    return parse_manifest(_read_local(path))


def _probe(folder: str, flag: str, shown: str) -> None:
    """Create and remove a file in ``folder``: the one sure test that it is writable."""
    try:
        handle, probe = tempfile.mkstemp(dir=folder, prefix=".ldpflow-probe-")
        os.close(handle)
        os.unlink(probe)
    except OSError as exc:
        raise OutputError(f"{flag} {shown} is not writable: {exc.strerror or exc}") from None


def _create(folder: str, flag: str, shown: str) -> None:
    try:
        os.makedirs(folder, exist_ok=True)
    except FileExistsError:
        raise OutputError(f"{flag} {shown} is a file, not a folder") from None
    except OSError as exc:
        raise OutputError(f"cannot create {flag} {shown}: {exc.strerror or exc}") from None


def check_output(output: str, *, flag: str = "--output", dead_letters: bool = True) -> None:
    """Before a job runs: refuse a local output folder it cannot or must not write to.

    Creates the folder if needed, checks that a file can be created in it and, with
    ``dead_letters`` (the batch jobs, whose commit replaces and removes files there), that
    ``OUTPUT/dead_letters`` is a real folder (not a symbolic link) holding only files
    ldpflow wrote. Does nothing for an output on another file system.

    Raises
    ------
    OutputError
        One line naming ``flag``, the folder and what is wrong.
    """
    if not is_local(output):
        return
    folder = local_path(output)
    shown = repr(output)
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise OutputError(f"{flag} {shown} is a file, not a folder")
    _create(folder, flag, shown)
    _probe(folder, flag, shown)
    if not dead_letters:
        return
    letters = os.path.join(folder, DEAD_LETTERS)
    if os.path.islink(letters):
        raise OutputError(
            f"{flag} {shown}: {DEAD_LETTERS} is a symbolic link (to {os.readlink(letters)!r}); "
            f"ldpflow replaces and removes files there and never follows a link: remove the "
            f"link or choose another {flag}")
    if not os.path.lexists(letters):
        return
    if not os.path.isdir(letters):
        raise OutputError(f"{flag} {shown}: {DEAD_LETTERS} is not a folder; remove it or "
                          f"choose another {flag}")
    manifest = _local_manifest(folder)
    foreign = []
    for name in sorted(os.listdir(letters)):
        path = os.path.join(letters, name)
        regular = os.path.isfile(path) and not os.path.islink(path)
        if not (regular and written_by_ldpflow(f"{DEAD_LETTERS}/{name}", manifest,
                                               lambda p=path: _read_local(p, 1 << 20))):
            foreign.append(name)
    if foreign:
        names = ", ".join(foreign[:_SHOWN]) + (", ..." if len(foreign) > _SHOWN else "")
        raise OutputError(
            f"{flag} {shown}: {DEAD_LETTERS}/ holds {len(foreign)} "
            f"{'entry' if len(foreign) == 1 else 'entries'} ldpflow did not write ({names}), "
            f"which a run would replace or remove: move them away or choose another {flag}")
    _probe(letters, flag, repr(f"{output.rstrip('/')}/{DEAD_LETTERS}"))


def check_output_file(path: str, *, flag: str = "--output") -> None:
    """Before a job runs: refuse a local output file it cannot write (its folder cannot be
    created or written, or the path is a folder)."""
    if not is_local(path):
        return
    target = local_path(path)
    shown = repr(path)
    if os.path.isdir(target):
        raise OutputError(f"{flag} {shown} is a folder, not a file")
    folder = os.path.dirname(os.path.abspath(target))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        reason = "a file is in the way" if exc.errno in (errno.EEXIST, errno.ENOTDIR) \
            else exc.strerror or str(exc)
        raise OutputError(f"cannot create the folder of {flag} {shown}: {reason}") from None
    _probe(folder, flag, f"{shown} (its folder)")


# -- the commit ---------------------------------------------------------------------------------
class Files(Protocol):
    """The file operations :func:`commit` needs: Beam's ``FileSystems`` in the Beam jobs
    (any file system), :class:`LocalFiles` on the job plan's engines."""

    def match(self, pattern: str) -> list[str]: ...
    def create(self, path: str) -> IO[bytes]: ...
    def rename(self, sources: list[str], targets: list[str]) -> None: ...
    def delete(self, paths: list[str]) -> None: ...
    def mkdirs(self, path: str) -> None: ...
    def read(self, path: str, limit: int | None = None) -> bytes | None: ...
    def exists(self, path: str) -> bool: ...


class LocalFiles:
    """:class:`Files` of local (or mounted) paths."""

    def match(self, pattern: str) -> list[str]:
        import glob

        return sorted(glob.glob(pattern))

    def create(self, path: str) -> IO[bytes]:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        return open(path, "wb")

    def rename(self, sources: list[str], targets: list[str]) -> None:
        for source, target in zip(sources, targets, strict=True):
            os.replace(source, target)

    def delete(self, paths: list[str]) -> None:
        import shutil

        for path in paths:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)

    def mkdirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def read(self, path: str, limit: int | None = None) -> bytes | None:
        return _read_local(path, limit)

    def exists(self, path: str) -> bool:
        return os.path.lexists(path)


def commit(output: str, staging: str, files: Files) -> int:
    """Move a run's staged files (``staging/*.json``, ``*.avro``, ``*.csv``,
    ``dead_letters/*.jsonl``) into ``output``, each by one rename over its predecessor,
    keeping the manifest; then remove the previous run's dead-letter files (and
    :data:`OPTIONAL_FILES`) that this run did not write, which the
    manifest lists (or, in an output written before manifests, whose content names them),
    never through a link; then the staging folder. Returns how many files were committed.

    Raises
    ------
    OutputError
        If the output's ``dead_letters`` is a symbolic link or not a folder (nothing is
        committed; the staged files stay for the caller to remove).
    """
    output, staging = output.rstrip("/"), staging.rstrip("/")

    def path(relative: str) -> str:
        return f"{output}/{relative}"

    def removable(relative: str) -> bool:  # only a regular file, never a link (local)
        if not is_local(output):
            return True
        local = local_path(path(relative))
        return os.path.isfile(local) and not os.path.islink(local)

    def write_manifest(listed: set[str]) -> None:  # in one rename: the old or the new
        temporary = f"{staging}/manifest.partial"
        with files.create(temporary) as f:
            f.write(manifest_bytes(listed))
        files.rename([temporary], [path(MANIFEST)])

    if is_local(output):
        letters = local_path(path(DEAD_LETTERS))
        if os.path.islink(letters) or (os.path.lexists(letters) and not os.path.isdir(letters)):
            raise OutputError(f"{path(DEAD_LETTERS)} is a symbolic link or not a folder: "
                              "nothing was committed")
    staged = sorted(p for pattern in (f"{staging}/*.json", f"{staging}/*.avro",
                                      f"{staging}/*.csv",
                                      f"{staging}/{DEAD_LETTERS}/*.jsonl")
                    for p in files.match(pattern))
    relative = [p[len(staging) + 1:] for p in staged]
    manifest = parse_manifest(files.read(path(MANIFEST)))
    if manifest is not None:
        owned = set(manifest)
    else:  # an output of before manifests: the dead-letter files their content names
        names = [p[len(output) + 1:] for p in files.match(path(f"{DEAD_LETTERS}/*"))]
        owned = {name for name in names if removable(name) and written_by_ldpflow(
            name, None, lambda n=name: files.read(path(n), 1 << 20))}
    for folder in sorted({path(name).rsplit("/", 1)[0] for name in relative}):
        files.mkdirs(folder)
    # The manifest lists both runs' files first, so a commit killed from here on leaves
    # every file ldpflow wrote listed (and so removable by the next run, and only those).
    write_manifest(owned | set(relative))
    files.rename(staged, [path(name) for name in relative])
    stale = sorted(name for name in owned - set(relative)
                   if (name.startswith(f"{DEAD_LETTERS}/") or name in OPTIONAL_FILES)
                   and removable(name))
    if stale:
        files.delete([path(name) for name in stale])
    # Read again: a concurrent run's commit may have listed its own files meanwhile.
    now = parse_manifest(files.read(path(MANIFEST))) or set()
    kept = {name for name in (owned | now) - set(stale) if files.exists(path(name))}
    write_manifest(kept | set(relative))
    files.delete([staging])
    return len(relative)
