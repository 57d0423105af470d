"""Packed bit vectors: the wire form of unary-encoding and subset-selection reports.

A batch of ``n`` bit vectors of length ``nbits`` is a ``(n, ceil(nbits / 8))`` uint8 matrix;
bit ``j`` of a row is bit ``j % 8`` of byte ``j // 8`` (``numpy.packbits(bitorder="little")``)
and padding bits past ``nbits`` are zero.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "num_bytes",
    "column_sums",
    "row_popcount",
    "padding_is_zero",
    "assign_bits",
    "or_bits",
    "clear_bits",
    "unpack",
]

# Byte value -> its 8 bits (little-endian order), for column sums via byte histograms.
_BYTE_BITS = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little")
_ROW_CHUNK = 1 << 15


def num_bytes(nbits: int) -> int:
    return -(-nbits // 8)


def column_sums(packed: np.ndarray, nbits: int) -> np.ndarray:
    """How many rows have each bit set: int64 of length ``nbits``.

    Counts a histogram of byte values per byte column (one ``bincount`` over all bytes) and
    turns it into bit counts with one ``(columns x 256) @ (256 x 8)`` product: exact integers.
    """
    width = packed.shape[1]
    offsets = (np.arange(width, dtype=np.int64) * 256)[None, :]
    hist = np.zeros(width * 256, dtype=np.int64)
    for start in range(0, packed.shape[0], _ROW_CHUNK):
        chunk = packed[start : start + _ROW_CHUNK]
        hist += np.bincount((chunk + offsets).ravel(), minlength=width * 256)
    counts = hist.reshape(width, 256) @ _BYTE_BITS.astype(np.int64)
    return counts.reshape(-1)[:nbits]


def row_popcount(packed: np.ndarray) -> np.ndarray:
    """The number of set bits of each row (int64)."""
    if packed.shape[1] % 8 == 0 and packed.flags.c_contiguous:
        words = packed.view(np.uint64)
    else:
        words = packed
    return np.bitwise_count(words).sum(axis=1, dtype=np.int64)


def padding_is_zero(packed: np.ndarray, nbits: int) -> np.ndarray:
    """Whether each row's padding bits (past ``nbits``) are all zero."""
    if nbits % 8 == 0:
        return np.ones(packed.shape[0], dtype=bool)
    return (packed[:, -1] >> np.uint8(nbits % 8)) == 0


def assign_bits(packed: np.ndarray, rows: np.ndarray, positions: np.ndarray, values: np.ndarray) -> None:
    """Set bit ``positions[i]`` of row ``rows[i]`` to ``values[i]`` (distinct rows), in place."""
    byte = positions >> 3
    shift = (positions & 7).astype(np.uint8)
    current = packed[rows, byte]
    cleared = current & ~(np.uint8(1) << shift)
    packed[rows, byte] = cleared | (np.asarray(values).astype(np.uint8) << shift)


def or_bits(packed: np.ndarray, rows: np.ndarray, positions: np.ndarray) -> None:
    """Set the given bits (repeats allowed), in place."""
    flat = packed.reshape(-1)
    index = rows * packed.shape[1] + (positions >> 3)
    np.bitwise_or.at(flat, index, np.uint8(1) << (positions & 7).astype(np.uint8))


def clear_bits(packed: np.ndarray, rows: np.ndarray, positions: np.ndarray) -> None:
    """Clear the given bits (repeats allowed), in place."""
    flat = packed.reshape(-1)
    index = rows * packed.shape[1] + (positions >> 3)
    np.bitwise_and.at(flat, index, ~(np.uint8(1) << (positions & 7).astype(np.uint8)))


def unpack(packed: np.ndarray, nbits: int) -> np.ndarray:
    """The ``(n, nbits)`` uint8 0/1 matrix of a packed batch."""
    return np.unpackbits(packed, axis=1, count=nbits, bitorder="little")
