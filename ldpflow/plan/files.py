"""Listing and opening the input files without Beam: local paths, or any fsspec URL.

A path with a scheme (``s3://``, ``gs://``, ``hdfs://``, ...) goes through fsspec (which
Dask installs) and the file system's own package; a plain path is the local file system,
which on a cluster must be a mount every worker sees.
"""

from __future__ import annotations

import bz2
import glob
import gzip
import io
import os
import zlib
from typing import IO

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


class _Inflating(io.RawIOBase):
    """A raw-deflate (``.deflate``) file, inflated as it is read."""

    def __init__(self, raw: IO[bytes]):
        self._raw, self._inflate, self._left = raw, zlib.decompressobj(-zlib.MAX_WBITS), b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._left:
            data = self._raw.read(1 << 16)
            if not data:
                self._left = self._inflate.flush()
                break
            self._left = self._inflate.decompress(data)
        n = min(len(buffer), len(self._left))
        buffer[:n], self._left = self._left[:n], self._left[n:]
        return n

    def close(self) -> None:
        self._raw.close()
        super().close()


def open_file(path: str) -> IO[bytes]:
    """A binary stream of one input file, decompressed by its suffix (``.gz``, ``.bz2``,
    ``.zst``, ``.deflate``), as Beam's file systems open them."""
    if _remote(path):
        import fsspec

        raw: IO[bytes] = fsspec.open(path, "rb").open()
    else:
        raw = open(_local(path), "rb")
    lower = path.lower()
    if lower.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw)
    if lower.endswith(".bz2"):
        return bz2.BZ2File(raw)
    if lower.endswith(".zst"):
        import zstandard

        return zstandard.ZstdDecompressor().stream_reader(raw, closefd=True)
    if lower.endswith(".deflate"):
        return io.BufferedReader(_Inflating(raw))
    return raw
