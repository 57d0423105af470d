"""The single place that decides how randomness is made.

Client-side perturbation must be unpredictable to the collector, so the default source is
the operating system's cryptographically secure generator (``os.urandom``). Seeded numpy
generators are for simulation and tests only: pass one explicitly.

Every oracle draws through a :class:`RandomSource`, whose primitives are exact:

* ``words(size)``: independent uniform 64-bit words;
* ``below(bound, size)``: uniform integers in ``[0, bound)`` without modulo bias;
* ``uniform(size)``: floats ``k / 2**53`` with ``k`` uniform in ``[0, 2**53)``;
* ``bernoulli(p, size)``: ``uniform(size) < p``;
* ``bernoulli_bits(p, rows, nbits)``: a packed bit matrix (little-endian bit order) whose
  bits are independent Bernoulli(``p``), drawn bit-sliced: one random word decides one binary
  digit of 64 uniform variates at a time, so the expected cost is a few random bits per output
  bit instead of 64.
"""

from __future__ import annotations

import abc
import math
import os

import numpy as np
import numpy.typing as npt

from ldpflow.core import hashing, validation

__all__ = [
    "RandomSource",
    "NumpySource",
    "SecureSource",
    "SplitMix64Source",
    "as_source",
    "make_rng",
]

_U64 = np.uint64
_TWO53 = float(2**53)


class RandomSource(abc.ABC):
    """Uniform random words and the exact distributions derived from them."""

    #: Whether this source is fit for client-side (production) perturbation.
    secure: bool = False

    @abc.abstractmethod
    def words(self, size: int) -> npt.NDArray[np.uint64]:
        """Return ``size`` independent uniform 64-bit words."""

    def uniform(self, size: int) -> npt.NDArray[np.float64]:
        """Uniform floats on the 2**-53 grid of [0, 1)."""
        return (self.words(size) >> _U64(11)).astype(np.float64) / _TWO53

    def bernoulli(self, p: float, size: int) -> npt.NDArray[np.bool_]:
        """Independent booleans that are True with probability ``p``."""
        return self.uniform(size) < p

    def below(self, bound: int | npt.ArrayLike, size: int) -> npt.NDArray[np.int64]:
        """Uniform integers in ``[0, bound)`` (``bound`` a scalar or per-element array < 2**32).

        Lemire's multiply-shift method with rejection of the biased low range: exact.
        """
        bound_arr = np.broadcast_to(np.asarray(bound, dtype=np.uint64), (size,))
        if size and (int(bound_arr.min()) < 1 or int(bound_arr.max()) > 2**32):
            raise ValueError(f"bound must be in [1, 2**32], got {bound!r}")
        out = np.empty(size, dtype=np.int64)
        todo = np.arange(size)
        while todo.size:
            b = bound_arr[todo]
            x = self.words(todo.size) >> _U64(32)
            m = x * b  # < 2**64: exact
            low = m & _U64(0xFFFFFFFF)
            threshold = (_U64(2**32) - b) % b
            ok = low >= threshold
            out[todo[ok]] = (m[ok] >> _U64(32)).astype(np.int64)
            todo = todo[~ok]
        return out

    def bernoulli_bits(self, p: float, rows: int, nbits: int) -> npt.NDArray[np.uint8]:
        """A ``(rows, ceil(nbits / 8))`` uint8 matrix of independent Bernoulli(``p``) bits.

        Bit ``j`` of a row is bit ``j % 8`` of byte ``j // 8`` (``numpy.packbits(...,
        bitorder="little")``); padding bits past ``nbits`` are zero. Each bit equals
        ``[U < p]`` for a uniform ``U`` whose binary digits are generated lazily, 64 variates
        per word, until every bit is decided: exact for the double ``p``.
        """
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p must be in [0, 1], got {p!r}")
        words_per_row = -(-nbits // 64)
        total = rows * words_per_row
        if p == 1.0:
            result = np.full(total, ~_U64(0), dtype=_U64)
        else:
            result = np.zeros(total, dtype=_U64)
            if p > 0.0 and total:
                _bit_sliced_less_than(self, p, result)
        packed = result.astype("<u8", copy=False).view(np.uint8).reshape(rows, words_per_row * 8)
        nbytes = -(-nbits // 8)
        packed = packed[:, :nbytes]
        if nbits % 8:
            packed = np.ascontiguousarray(packed)
            packed[:, -1] &= np.uint8((1 << (nbits % 8)) - 1)
        return np.ascontiguousarray(packed)


def _binary_digits(p: float) -> list[int]:
    """The finite binary expansion 0.b1 b2 b3 ... of a double ``p`` in (0, 1)."""
    mantissa, exponent = math.frexp(p)  # p = mantissa * 2**exponent, 0.5 <= mantissa < 1
    numerator = int(mantissa * 2**53)  # exact: 53 significant bits
    shift = 53 - exponent  # p = numerator / 2**shift
    digits = [(numerator >> (shift - i)) & 1 for i in range(1, shift + 1)]
    while digits and not digits[-1]:
        digits.pop()
    return digits


# Binary digits compared on every word (in cache-sized blocks) before the few bits still
# undecided (a 2**-10 share) are gathered and decided by recursion on the remaining digits.
_DENSE_LEVELS = 10
_BLOCK_WORDS = 1 << 15


def _bit_sliced_less_than(source: RandomSource, p: float, result: np.ndarray) -> None:
    _less_than_digits(source, _binary_digits(p), result)


def _less_than_digits(source: RandomSource, digits: list[int], result: np.ndarray) -> None:
    """Set ``result``'s bits to ``[U < 0.d1 d2 ...]`` for independent uniform ``U``."""
    dense, rest = digits[:_DENSE_LEVELS], digits[_DENSE_LEVELS:]
    undecided_all = np.empty(result.size, dtype=_U64) if rest else None
    for start in range(0, result.size, _BLOCK_WORDS):
        res = result[start : start + _BLOCK_WORDS]
        undecided = np.full(res.size, ~_U64(0), dtype=_U64)
        still = np.empty_like(undecided)
        newly = np.empty_like(undecided)
        for digit in dense:
            u = source.words(res.size)
            np.bitwise_and(undecided, u, out=still)  # U's digit is 1: still equal if p's is 1
            if digit:
                np.bitwise_xor(undecided, still, out=newly)  # U's digit 0 < p's 1: U < p
                res |= newly
                undecided, still = still, undecided
            else:
                undecided ^= still  # U's digit 1 > p's digit 0: decided as U > p
        if undecided_all is not None:
            undecided_all[start : start + res.size] = undecided
    if undecided_all is None:
        return  # every bit still undecided equals p on all digits: U >= p, stays 0
    words = np.flatnonzero(undecided_all)
    if words.size == 0:
        return
    flat = np.flatnonzero(
        np.unpackbits(undecided_all[words].astype("<u8").view(np.uint8), bitorder="little")
    )
    row, bit = flat >> 6, flat & 63
    sub = np.zeros(-(-row.size // 64), dtype=_U64)
    _less_than_digits(source, rest, sub)
    sub_bits = np.unpackbits(sub.astype("<u8", copy=False).view(np.uint8), bitorder="little")
    hit = sub_bits[: row.size].astype(bool)
    np.bitwise_or.at(result, words[row[hit]], _U64(1) << bit[hit].astype(_U64))


class NumpySource(RandomSource):
    """A seeded numpy generator: reproducible, for simulation and tests only."""

    secure = False

    def __init__(self, generator: np.random.Generator):
        if not isinstance(generator, np.random.Generator):
            raise TypeError(
                f"generator must be a numpy.random.Generator, got {type(generator).__name__}"
            )
        self.generator = generator

    def words(self, size: int) -> npt.NDArray[np.uint64]:
        return self.generator.bit_generator.random_raw(size).astype(_U64, copy=False)

    def below(self, bound: int | npt.ArrayLike, size: int) -> npt.NDArray[np.int64]:
        return self.generator.integers(0, np.asarray(bound, dtype=np.int64), size=size,
                                       dtype=np.int64)


class SecureSource(RandomSource):
    """The operating system's CSPRNG (``os.urandom``); the default for client perturbation."""

    secure = True

    def words(self, size: int) -> npt.NDArray[np.uint64]:
        return np.frombuffer(os.urandom(8 * size), dtype="<u8").astype(_U64, copy=False)


class SplitMix64Source(RandomSource):
    """The splitmix64 stream from a 64-bit state: portable and reproducible, NOT secure.

    Its words are the outputs of the hash family's splitmix64 (``docs/spec/oracles.md``), so a
    client in any language can replay a perturbation exactly; the published test vectors use it.
    """

    secure = False

    def __init__(self, seed: int):
        if not 0 <= validation.check_integer(seed, name="seed") < 2**64:
            raise ValueError(f"seed must be in [0, 2**64), got {seed!r}")
        self.state = int(seed)

    def words(self, size: int) -> npt.NDArray[np.uint64]:
        # Output i is splitmix64's finaliser of state + (i + 1) * gamma.
        steps = np.arange(1, size + 1, dtype=_U64)
        with np.errstate(over="ignore"):
            states = _U64(self.state) + steps * hashing.GOLDEN_GAMMA
        self.state = (self.state + size * int(hashing.GOLDEN_GAMMA)) % 2**64
        return hashing.splitmix64_mix(states)


def as_source(rng: RandomSource | np.random.Generator | None) -> RandomSource:
    """The :class:`RandomSource` for an oracle call's ``rng`` argument.

    ``None`` (the default of every client call) means the secure source; a numpy
    ``Generator`` is wrapped for simulation; anything else is a ``TypeError``.
    """
    if rng is None:
        return SecureSource()
    if isinstance(rng, RandomSource):
        return rng
    if isinstance(rng, np.random.Generator):
        return NumpySource(rng)
    raise TypeError(
        "rng must be None (secure), a numpy.random.Generator or a RandomSource, "
        f"got {type(rng).__name__}"
    )


def make_rng(seed: int | None = None) -> RandomSource:
    """A source for a worker: secure without a seed, a seeded numpy generator with one."""
    if seed is None:
        return SecureSource()
    return NumpySource(np.random.default_rng(seed))
