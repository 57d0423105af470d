"""Value codecs: how heavy-hitter inputs become ``m``-bit unsigned integers and back.

Contract (``docs/spec/heavy_hitters.md``, *Values*): the prefix extending method works on ``m``-bit
unsigned integers, ``1 <= m <= 64``, whose prefix of length ``l`` is ``v >> (m - l)``. A codec
maps application values to such integers (``encode``) and discovered integers back
(``decode``), vectorised over batches.

* :class:`IntegerCodec` -- integers in ``[0, 2**m)`` map to themselves.
* :class:`StringCodec` -- a string is its UTF-8 bytes, the first ``m / 8`` of them, zero-padded
  on the right and read as one big-endian integer. The integer's prefixes are therefore the
  string's byte prefixes (and integer order is bytewise string order). Decoding strips
  trailing zero bytes. The codec is reversible exactly for strings of at most ``m / 8`` UTF-8
  bytes without NUL characters; longer strings are refused unless the caller asks for
  truncation (``truncate=True``), which keeps the longest run of whole characters that fits
  in ``m / 8`` bytes.

  The first zero byte *terminates* a string: no valid code has a non-zero byte after a zero
  byte, and the bytes before it are valid UTF-8. :meth:`StringCodec.valid_prefixes` tells,
  for a batch of ``l``-bit prefixes, which can begin the code of a text string (vectorised),
  so a heavy-hitter search can prune the candidates that extend a word past its end, are
  not UTF-8 or hold control characters no text has. :meth:`StringCodec.fit` chooses ``m``
  from the data, and :func:`infer_codec` the codec from raw text lines.

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
    "infer_codec",
    "invalid_integers",
    "check_unsigned",
    "VALUE_CODECS",
]


def _check_bits(bits: int, *, name: str = "bits") -> int:
    return validation.check_value_bits(bits, name=name)


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

    def valid_prefixes(self, prefixes: npt.ArrayLike, prefix_bits: int) -> np.ndarray:
        """Every ``prefix_bits``-bit prefix can begin an integer code: all True."""
        return np.ones(np.asarray(prefixes).shape, dtype=bool)


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
    extending method discovers frequent strings by their leading bytes. The zero padding
    marks where a string ends, so strings holding a NUL character are refused (the bytes
    after it would read as padding).
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
        trailing_nul = np.fromiter((b"\x00" in b for b in raw), dtype=bool, count=len(raw))
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
            If a string is longer than ``bits / 8`` UTF-8 bytes (unless ``truncate``) or holds
            a NUL character; the message names the first such string and its position.
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
                f"strings must not hold a NUL character (it marks the end of a string), got "
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
        than N UTF-8 bytes"`` and ``"string holds a NUL character"``.
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
            if b"\x00" in b:
                rows.append(i)
                reasons.append("string holds a NUL character")
        return np.array(rows, dtype=np.int64), reasons

    def truncations(self, strings: Iterable[Any]) -> int:
        """How many of ``strings`` hold more than ``bits / 8`` UTF-8 bytes (and would be cut
        by ``encode(..., truncate=True)``)."""
        return int(np.count_nonzero(_byte_lengths(self._raw(strings)) > self.num_bytes))

    @classmethod
    def fit(cls, strings: Iterable[Any], *, coverage: float = 0.99,
            max_bits: int = 64) -> StringCodec:
        """The codec of the fewest bytes that hold at least ``coverage`` of the strings whole.

        ``m / 8`` is the smallest byte count ``B`` (at most ``max_bits / 8``) such that a
        share ``coverage`` of the strings (counted with repetition, so of the users) has at
        most ``B`` UTF-8 bytes; the rest are truncated when encoded (count them with
        :meth:`truncations`). Fewer bits mean fewer prefix stages.

        Raises
        ------
        ValueError
            If there are no strings, or ``coverage`` is not in ``(0, 1]``.
        """
        if not 0 < coverage <= 1:
            raise ValueError(f"coverage must be in (0, 1], got {coverage!r}")
        top = _check_bits(max_bits, name="max_bits") // 8
        if top < 1:
            raise ValueError(f"max_bits must be >= 8, got {max_bits!r}")
        lengths = _byte_lengths(cls(bits=8)._raw(strings))
        if lengths.size == 0:
            raise ValueError("strings must hold at least one string to fit a codec, got none")
        needed = int(np.quantile(lengths, coverage, method="inverted_cdf"))
        return cls(bits=8 * min(top, max(1, needed)))

    def valid_prefixes(self, prefixes: npt.ArrayLike, prefix_bits: int, *,
                       controls: bool = False) -> np.ndarray:
        """Which ``prefix_bits``-bit prefixes can begin a valid code (bool, vectorised).

        A prefix is valid when some completion to ``bits`` bits is a code of a text string:
        its bytes up to the first zero byte are valid UTF-8 (lead and continuation bytes in
        place, no overlong or surrogate second bytes, no code point above U+10FFFF, every
        character whole within ``bits / 8`` bytes), hold no control character other than
        the whitespace ``\t \n \v \f \r`` (C0 U+0001-U+001F, DEL U+007F and C1
        U+0080-U+009F: text has none, and noise at low epsilon makes them), and every byte
        after a zero byte is zero. A partial last byte is valid when one of its completions
        is. ``controls=True`` admits the control characters (strings that are not text).
        """
        bits = validation.check_positive_int(prefix_bits, name="prefix_bits")
        if bits > self.bits:
            raise ValueError(f"prefix_bits must be <= bits={self.bits}, got {bits!r}")
        pre = check_unsigned(prefixes, bits, name="prefixes")
        n = pre.size
        code = pre << np.uint64(self.bits - bits) if bits < self.bits else pre
        mat = code.astype(">u8").view(np.uint8).reshape(n, 8)[:, 8 - self.num_bytes :]
        mat = mat.astype(np.int64)
        ok = np.ones(n, dtype=bool)
        ended = np.zeros(n, dtype=bool)
        need = np.zeros(n, dtype=np.int64)  # continuation bytes still due
        lo = np.full(n, 0x80, dtype=np.int64)  # the next continuation byte's range
        hi = np.full(n, 0xBF, dtype=np.int64)
        whole, partial = divmod(bits, 8)
        for j in range(whole + (1 if partial else 0)):
            byte = mat[:, j]
            known = 8 if j < whole else partial
            span = 1 << (8 - known)  # completions of the unknown low bits: [byte, byte + span)
            first, last = byte, byte + span - 1
            in_char = need > 0
            fresh = ~ended & ~in_char
            room = self.num_bytes - 1 - j  # bytes left after this one
            # The lead bytes whose character fits: C2-DF (1 more byte), E0-EF (2), F0-F4 (3).
            lead_top = 0xF4 if room >= 3 else 0xEF if room == 2 else 0xDF if room == 1 else 0
            # The single bytes a character may be: all of ASCII, or ASCII but its controls.
            singles = ((0x00, 0x7F),) if controls else _TEXT_BYTES
            if known == 8:
                ok &= np.where(ended, byte == 0, True)
                ok &= np.where(in_char & ~ended, (byte >= lo) & (byte <= hi), True)
                single = np.zeros(n, dtype=bool)
                for low, high in singles:
                    single |= (byte >= low) & (byte <= high)
                ok &= np.where(fresh, single | ((byte >= 0xC2) & (byte <= lead_top)), True)
                lead = fresh & (byte >= 0xC2)
                new_need = np.where(byte >= 0xF0, 3, np.where(byte >= 0xE0, 2, 1))
                # After C2 the second byte of U+0080-U+009F (the C1 controls) is 80-9F.
                new_lo = np.select([byte == 0xE0, byte == 0xF0, (byte == 0xC2) & (not controls)],
                                   [0xA0, 0x90, 0xA0], 0x80)
                new_hi = np.select([byte == 0xED, byte == 0xF4], [0x9F, 0x8F], 0xBF)
                need = np.where(lead, new_need, np.where(in_char & ~ended, need - 1, need))
                lo = np.where(lead, new_lo, 0x80)
                hi = np.where(lead, new_hi, 0xBF)
                ended |= fresh & (byte == 0)
            else:  # some completion must be valid
                ok &= np.where(ended, first == 0, True)
                ok &= np.where(in_char & ~ended, (first <= hi) & (last >= lo), True)
                single = np.zeros(n, dtype=bool)
                for low, high in singles:
                    single |= (first <= high) & (last >= low)
                ok &= np.where(fresh, single | ((first <= lead_top) & (last >= 0xC2)), True)
        if bits == self.bits:
            ok &= ended | (need == 0)
        return ok


#: The single bytes of text (ASCII without its controls, but for the whitespace 09-0D) and
#: the zero byte that ends a string.
_TEXT_BYTES = ((0x00, 0x00), (0x09, 0x0D), (0x20, 0x7E))


def _byte_lengths(raw: list[bytes]) -> np.ndarray:
    return np.fromiter(map(len, raw), dtype=np.int64, count=len(raw))


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
        if not validation.is_integer(v):
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
VALUE_CODECS: dict[str, type] = {"int": IntegerCodec, "string": StringCodec}


def make_codec(name: str, *, bits: int) -> IntegerCodec | StringCodec:
    """The codec called ``name`` (``"int"`` or ``"string"``) for ``bits``-bit values."""
    if name not in VALUE_CODECS:
        raise ValueError(f"codec must be one of {sorted(VALUE_CODECS)}, got {name!r}")
    return VALUE_CODECS[name](bits=bits)


def infer_codec(lines: Iterable[str]) -> str:
    """``"int"`` when every line is a non-negative decimal integer, else ``"string"``.

    Unambiguous by construction: a line that is not an integer cannot be an integer code.
    Surrounding whitespace is ignored, as the integer reader ignores it.
    """
    for line in lines:
        text = line.strip()
        if not (text.isascii() and text.isdigit()):
            return "string"
    return "int"
