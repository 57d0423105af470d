"""Listing and opening the input files without Beam: local paths, or any fsspec URL.

A path with a scheme (``s3://``, ``gs://``, ``hdfs://``, ...) goes through fsspec (which
Dask installs) and the file system's own package; a plain path is the local file system,
which on a cluster must be a mount every worker sees.
"""

from __future__ import annotations

import glob
import os
from typing import IO

from ldpflow.wire.formats import decompressed

__all__ = ["match", "open_file"]


def _remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def _local(path: str) -> str:
    return path[len("file://"):] if path.startswith("file://") else path


def match(pattern: str) -> list[tuple[str, int]]:
    """``(path, size in bytes)`` of the files matching a glob, sorted by path."""
    if _remote(pattern):
        import fsspec

        fs, _, paths = fsspec.get_fs_token_paths(pattern)
        protocol = pattern.split("://", 1)[0]
        return sorted((f"{protocol}://{p}", int(fs.size(p))) for p in paths)
    paths = glob.glob(_local(pattern))
    return sorted((p, os.path.getsize(p)) for p in paths if os.path.isfile(p))


def open_file(path: str) -> IO[bytes]:
    """A binary stream of one input file, decompressed by its suffix (``.gz``, ``.bz2``,
    ``.zst``, ``.deflate``) in bounded steps by the wire layer
    (:func:`ldpflow.wire.formats.decompressed`), as the Beam jobs read them."""
    if _remote(path):
        import fsspec

        raw: IO[bytes] = fsspec.open(path, "rb").open()
    else:
        raw = open(_local(path), "rb")
    return decompressed(raw, path)
