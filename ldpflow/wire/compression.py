"""Compressed report files, decompressed in bounded steps (``.gz``, ``.bz2``, ``.zst``,
``.deflate``), whatever their format.

:func:`decompressed` wraps the raw bytes of a file so that a read of ``n`` bytes
decompresses about ``n`` bytes: the memory of a read does not depend on what the file
expands to. A stream cut short raises :class:`TruncatedError` once the bytes before the cut
are read (the readers keep those and report the rest as lost).
"""

from __future__ import annotations

import io
import zlib
from typing import IO, Any

__all__ = ["SUFFIXES", "is_compressed", "decompressed", "TruncatedError"]

#: The names of compressed files: what they end with.
SUFFIXES = (".gz", ".bz2", ".zst", ".deflate")


def is_compressed(path: str) -> bool:
    return path.lower().endswith(SUFFIXES)


#: Compressed bytes fed to a decompressor at a time; what it returns is bounded by the size
#: each read asks for (at most 4 MiB: ``jsonl._read_up_to``), never by what the input expands to.
_COMPRESSED_INPUT_BYTES = 64 << 10


class TruncatedError(EOFError):
    """A compressed stream that ends before its end-of-stream marker (a file cut short)."""


def decompressed(stream: IO[bytes], path: str) -> IO[bytes]:
    """``stream`` (the raw bytes of ``path``) decompressed as its name says (``.gz``,
    ``.bz2``, ``.zst``, ``.deflate``; other names as they are), in bounded steps: a read of
    ``n`` bytes decompresses at most about ``n`` bytes, so the memory of a read is
    independent of what the file expands to (a 4 MB gzip "bomb" of 2.2 GB holds no more
    than one chunk). A stream cut short raises :class:`TruncatedError` once the bytes
    before the cut are read."""
    import bz2
    import gzip

    name = path.lower()
    if name.endswith(".gz"):
        return _Guarded(gzip.GzipFile(fileobj=stream, mode="rb"), stream)
    if name.endswith(".bz2"):
        return _Guarded(bz2.BZ2File(stream, mode="rb"), stream)
    if name.endswith(".deflate"):
        return _Guarded(io.BufferedReader(_Inflating(stream, zlib.MAX_WBITS)), stream)
    if name.endswith(".zst"):
        import zstandard

        return _Guarded(zstandard.ZstdDecompressor(max_window_size=1 << 27).stream_reader(
            stream, read_across_frames=True), stream)
    return stream


class _Guarded(io.RawIOBase):
    """A decompressing reader whose end-of-stream error is a :class:`TruncatedError`;
    ``compressed`` is the stream it reads."""

    def __init__(self, inner: Any, compressed: IO[bytes]):
        super().__init__()
        self._inner, self.compressed = inner, compressed

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes, from one step of the decompressor (``read1``): the bytes of
        the steps before a damage are handed out before the damage is raised."""
        try:
            if size is None or size < 0:
                return self._inner.read()
            return self._inner.read1(size)
        except EOFError as exc:
            raise TruncatedError(f"the compressed stream is truncated: {exc}") from None
        except Exception as exc:  # zstandard.ZstdError: damaged data
            if type(exc).__name__ == "ZstdError":
                raise OSError(f"damaged zstd data: {exc}") from None
            raise

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def seekable(self) -> bool:  # by decompressing again from the start, as gzip does
        return bool(getattr(self._inner, "seekable", lambda: False)())

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        try:
            return self._inner.seek(offset, whence)
        except EOFError as exc:
            raise TruncatedError(f"the compressed stream is truncated: {exc}") from None

    def tell(self) -> int:
        return self._inner.tell()

    def close(self) -> None:
        self._inner.close()
        super().close()


class _Inflating(io.RawIOBase):
    """A zlib stream (``.deflate``; concatenated streams too), decompressed in bounded steps."""

    def __init__(self, raw: IO[bytes], wbits: int):
        super().__init__()
        self._raw, self._wbits = raw, wbits
        self._inflate = zlib.decompressobj(wbits)
        self._pending = b""
        self._started = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def _read(self, size: int) -> bytes:
        while True:
            if self._inflate.eof:  # a stream ended: another may follow
                rest = self._inflate.unused_data or self._raw.read(_COMPRESSED_INPUT_BYTES)
                if not rest:
                    return b""
                self._inflate, self._pending, self._started = (
                    zlib.decompressobj(self._wbits), rest, False)
            data = self._inflate.unconsumed_tail or self._pending or \
                self._raw.read(_COMPRESSED_INPUT_BYTES)
            self._pending = b""
            if not data:  # the end of the file: what the decompressor still holds
                out = self._inflate.flush() if self._started else b""
                if out or self._inflate.eof:
                    return out
                if self._started:
                    raise TruncatedError("the compressed stream is truncated: it ends before "
                                         "its end-of-stream marker")
                return b""
            self._started = True
            out = self._inflate.decompress(data, max(size, 1))
            if out:
                return out


