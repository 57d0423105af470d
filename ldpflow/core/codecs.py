"""Value codecs: how heavy-hitter inputs become ``m``-bit unsigned integers and back.

Contract (``HEAVY_HITTERS.md``, *Values*): the prefix extending method works on ``m``-bit
unsigned integers, ``1 <= m <= 64``, whose prefix of length ``l`` is ``v >> (m - l)``. A codec
maps application values to such integers (``encode``) and discovered integers back
(``decode``), vectorised over batches.

* :class:`IntegerCodec` -- integers in ``[0, 2**m)`` map to themselves.
* :class:`StringCodec` -- a string is its UTF-8 bytes, the first ``m / 8`` of them, zero-padded
  on the right and read as one big-endian integer. The integer's prefixes are therefore the
  string's byte prefixes (and integer order is bytewise string order). Decoding strips
  trailing zero bytes. The codec is reversible exactly for strings of at most ``m / 8`` UTF-8
  bytes that do not end in a NUL character; longer strings are refused unless the caller
  asks for truncation (``truncate=True``), which keeps the longest run of whole characters
  that fits in ``m / 8`` bytes.

Codecs do no I/O and hold no state; they are frozen dataclasses, safe to send to workers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

from ldpflow.core import validation

__all__ = [
    "IntegerCodec",
    "StringCodec",
    "make_codec",
    "invalid_integers",
    "check_unsigned",
    "CODECS",
]


def _check_bits(bits: int, *, name: str = "bits") -> int:
    bits = validation.check_positive_int(bits, name=name)
    if bits > 64:
        raise ValueError(f"{name} must be in [1, 64], got {bits!r}")
    return bits


@dataclasses.dataclass(frozen=True, kw_only=True)
class IntegerCodec:
    """Integers in ``[0, 2**bits)`` as themselves.

    Parameters
    ----------
    bits : int
        ``m``, the width of the values, in ``[1, 64]``.
    """

    name = "int"
    bits: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "bits", _check_bits(self.bits))

    def encode(self, values: npt.ArrayLike) -> npt.NDArray[np.uint64]:
        """The values as uint64.

        Raises
        ------
        TypeError, ValueError
            For non-integers or a value outside ``[0, 2**bits)`` (naming the first one).
        """
        return check_unsigned(values, self.bits)

    def decode(self, codes: npt.ArrayLike) -> npt.NDArray[np.uint64]:
        """The codes as uint64 values (the identity, after checking the range)."""
        return check_unsigned(codes, self.bits, name="codes")

    def invalid_rows(self, values: npt.ArrayLike) -> tuple[np.ndarray, list[str]]:
        """Positions of values that :meth:`encode` refuses, with a reason each."""
        return invalid_integers(values, self.bits)


@dataclasses.dataclass(frozen=True, kw_only=True)
class StringCodec:
    """Strings as the big-endian integer of their first ``bits / 8`` UTF-8 bytes.

    Parameters
    ----------
    bits : int
        ``m``, a multiple of 8 in ``[8, 64]``; strings hold at most ``bits / 8`` bytes.

    Notes
    -----
    ``encode("ab")`` with ``bits=32`` is ``0x61620000``: the bytes ``61 62``, zero-padded on
    the right. Prefixes of the integer are byte prefixes of the string, so the prefix
    extending method discovers frequent strings by their leading bytes. Strings with trailing
    NUL characters are refused (decoding could not restore them); a NUL elsewhere is kept.
    """

    name = "string"
    bits: int

    def __post_init__(self) -> None:
        bits = _check_bits(self.bits)
        if bits % 8:
            raise ValueError(f"bits of a string codec must be a multiple of 8, got {bits!r}")
        object.__setattr__(self, "bits", bits)

    @property
    def num_bytes(self) -> int:
        """The most UTF-8 bytes a string may hold: ``bits / 8``."""
        return self.bits // 8

    def _raw(self, strings: Iterable[Any]) -> list[bytes]:
        if isinstance(strings, (str, bytes)):
            raise TypeError("strings must be a collection of strings, got a single string")
        raw = []
        for i, s in enumerate(strings):
            if isinstance(s, str):
                raw.append(s.encode("utf-8"))
            elif isinstance(s, (bytes, np.bytes_)):
                raw.append(bytes(s))
            else:
                raise TypeError(f"strings must be str, got {type(s).__name__} at position {i}")
        return raw

    def _problems(self, raw: list[bytes], truncate: bool) -> tuple[np.ndarray, np.ndarray]:
        lengths = np.fromiter(map(len, raw), dtype=np.int64, count=len(raw))
        too_long = lengths > self.num_bytes
        trailing_nul = np.fromiter((b[-1:] == b"\x00" for b in raw), dtype=bool, count=len(raw))
        if truncate:
            too_long[:] = False
        return too_long, trailing_nul

    def encode(self, strings: Iterable[str], *, truncate: bool = False) -> npt.NDArray[np.uint64]:
        """The codes of a batch of strings (uint64, each below ``2**bits``).

        Parameters
        ----------
        strings : iterable of str
            The values; ``bytes`` are taken as already-encoded UTF-8.
        truncate : bool, default False
            Keep the longest run of whole UTF-8 characters within ``bits / 8`` bytes instead
            of refusing a longer string. Truncated strings do not decode back to themselves.

        Raises
        ------
        TypeError
            If an element is not a string.
        ValueError
            If a string is longer than ``bits / 8`` UTF-8 bytes (unless ``truncate``) or ends
            in a NUL character; the message names the first such string and its position.
        """
        raw = self._raw(strings)
        too_long, trailing_nul = self._problems(raw, truncate)
        if too_long.any():
            i = int(np.flatnonzero(too_long)[0])
            raise ValueError(
                f"strings must hold at most {self.num_bytes} UTF-8 bytes (bits={self.bits}), "
                f"got {raw[i]!r} ({len(raw[i])} bytes) at position {i}; pass truncate=True "
                "to keep their leading bytes"
            )
        if truncate:
            raw = [_cut_utf8(b, self.num_bytes) for b in raw]
        if trailing_nul.any():
            i = int(np.flatnonzero(trailing_nul)[0])
            raise ValueError(
                f"strings must not end in a NUL character (it would not decode back), got "
                f"{raw[i]!r} at position {i}"
            )
        n = len(raw)
        if n == 0:
            return np.zeros(0, dtype=np.uint64)
        fixed = np.array(raw, dtype=f"S{self.num_bytes}")  # zero-padded on the right
        buf = np.zeros((n, 8), dtype=np.uint8)
        buf[:, 8 - self.num_bytes :] = fixed.view(np.uint8).reshape(n, self.num_bytes)
        return buf.view(">u8").reshape(n).astype(np.uint64)

    def decode(self, codes: npt.ArrayLike, *, errors: str = "replace") -> list[str]:
        """The strings of a batch of codes: big-endian bytes, trailing zero bytes stripped.

        Parameters
        ----------
        codes : array_like of int
            Values in ``[0, 2**bits)``.
        errors : str, default "replace"
            How invalid UTF-8 is decoded (:meth:`bytes.decode`). A discovered value need not
            be valid UTF-8 (e.g. a noisy candidate, or a string cut inside a character by
            another encoder); ``"strict"`` raises on it instead.
        """
        vals = check_unsigned(codes, self.bits, name="codes")
        n = vals.size
        if n == 0:
            return []
        big = vals.astype(">u8").view(np.uint8).reshape(n, 8)[:, 8 - self.num_bytes :]
        fixed = np.ascontiguousarray(big).view(f"S{self.num_bytes}").reshape(n)
        return [b.decode("utf-8", errors) for b in fixed.tolist()]  # .tolist strips NULs

    def invalid_rows(
        self, strings: Iterable[Any], *, truncate: bool = False
    ) -> tuple[np.ndarray, list[str]]:
        """Positions of strings that :meth:`encode` refuses, with a reason each.

        The reasons are a small fixed set (countable): ``"not a string"``, ``"string longer
        than N UTF-8 bytes"`` and ``"string ends in a NUL character"``.
        """
        items = list(strings) if not isinstance(strings, (str, bytes)) else [strings]
        rows: list[int] = []
        reasons: list[str] = []
        long_reason = f"string longer than {self.num_bytes} UTF-8 bytes"
        for i, s in enumerate(items):
            if isinstance(s, str):
                b = s.encode("utf-8")
            elif isinstance(s, (bytes, np.bytes_)):
                b = bytes(s)
            else:
                rows.append(i)
                reasons.append("not a string")
                continue
            if len(b) > self.num_bytes:
                if not truncate:
                    rows.append(i)
                    reasons.append(long_reason)
                    continue
                b = _cut_utf8(b, self.num_bytes)
            if b[-1:] == b"\x00":
                rows.append(i)
                reasons.append("string ends in a NUL character")
        return np.array(rows, dtype=np.int64), reasons


def _cut_utf8(raw: bytes, limit: int) -> bytes:
    """The longest prefix of ``raw`` of at most ``limit`` bytes not ending inside a character."""
    if len(raw) <= limit:
        return raw
    cut = limit
    while cut > 0 and (raw[cut] & 0xC0) == 0x80:  # raw[cut] continues a character: back off
        cut -= 1
    return raw[:cut]


def invalid_integers(values: npt.ArrayLike, bits: int) -> tuple[np.ndarray, list[str]]:
    """Positions of values that are not integers in ``[0, 2**bits)``, with a reason each.

    Vectorised for integer and float arrays. The reasons are a fixed set, so they can be
    counted: ``"value outside [0, 2**bits)"`` and ``"value is not an integer"``.
    """
    arr = validation.as_exact_array(values)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise ValueError(f"values must be one-dimensional, got shape {arr.shape}")
    out_of_range = f"value outside [0, 2**{bits})"
    not_integer = "value is not an integer"
    kind = arr.dtype.kind
    if kind in "iu":
        bad = arr < 0 if kind == "i" else np.zeros(arr.size, dtype=bool)
        if bits < 64:
            bad |= arr.astype(np.uint64) >= np.uint64(1 << bits)
        rows = np.flatnonzero(bad)
        return rows, [out_of_range] * rows.size
    if kind == "f":
        integral = np.isfinite(arr) & (arr == np.floor(arr))
        in_range = integral & (arr >= 0) & (arr < float(2**bits))
        rows = np.flatnonzero(~in_range)
        return rows, [out_of_range if integral[r] else not_integer for r in rows]
    rows_list: list[int] = []
    reasons: list[str] = []
    for i, v in enumerate(arr.tolist() if kind != "O" else list(arr)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            rows_list.append(i)
            reasons.append(not_integer)
        elif not 0 <= int(v) < 2**bits:
            rows_list.append(i)
            reasons.append(out_of_range)
    return np.array(rows_list, dtype=np.int64), reasons


def check_unsigned(values: npt.ArrayLike, bits: int, *, name: str = "values") -> np.ndarray:
    """``values`` as a 1-d uint64 array, or an error naming the first value not in
    ``[0, 2**bits)``.

    Raises
    ------
    TypeError
        If a value is not an integer (floats with integral values are accepted).
    ValueError
        If a value lies outside ``[0, 2**bits)``, or the array is not one-dimensional.
    """
    arr = validation.as_exact_array(values)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    rows, reasons = invalid_integers(arr, bits)
    if rows.size:
        first = int(rows[0])
        bad = arr[first]
        shown = bad.item() if isinstance(bad, np.generic) else bad
        if reasons[0] == "value is not an integer":
            raise TypeError(f"{name} must be integers, got {shown!r} at position {first}")
        raise ValueError(f"{name} must lie in [0, 2**{bits}), got {shown!r} at position {first}")
    if arr.dtype.kind == "O":
        return np.array([int(v) for v in arr], dtype=np.uint64)
    return arr.astype(np.uint64)


#: Codec name -> class, for configuration and command-line flags.
CODECS: dict[str, type] = {"int": IntegerCodec, "string": StringCodec}


def make_codec(name: str, *, bits: int) -> IntegerCodec | StringCodec:
    """The codec called ``name`` (``"int"`` or ``"string"``) for ``bits``-bit values."""
    if name not in CODECS:
        raise ValueError(f"codec must be one of {sorted(CODECS)}, got {name!r}")
    return CODECS[name](bits=bits)
