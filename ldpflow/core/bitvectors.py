"""Packed bit vectors: the wire form of unary-encoding and subset-selection reports.

A batch of ``n`` bit vectors of length ``nbits`` is a ``(n, ceil(nbits / 8))`` uint8 matrix;
bit ``j`` of a row is bit ``j % 8`` of byte ``j // 8`` (``numpy.packbits(bitorder="little")``)
and padding bits past ``nbits`` are zero.

Memory: the functions here work on chunks of rows whose dense temporaries stay under
:data:`CHUNK_BYTES`, whatever the batch size; :func:`row_chunks` gives the same chunking to
producers of packed batches, and :func:`check_batch_bytes` refuses a batch whose packed form
alone would exceed :func:`max_batch_bytes` (``LDPFLOW_MAX_BATCH_BYTES``, default 2 GiB).
"""

from __future__ import annotations

import os

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
    "CHUNK_BYTES",
    "DEFAULT_MAX_BATCH_BYTES",
    "max_batch_bytes",
    "check_batch_bytes",
    "row_chunks",
]

# Byte value -> its 8 bits (little-endian order), for column sums via byte histograms.
#: The bytes of dense temporary one chunk of rows may take (unpacked bits, random words).
CHUNK_BYTES = 1 << 26
#: The default largest packed batch (bytes) one call produces: ``LDPFLOW_MAX_BATCH_BYTES``.
DEFAULT_MAX_BATCH_BYTES = 1 << 31
# Rows summed per block as uint8 0/1 values: at most 255, so the block sum cannot overflow.
_SUM_ROWS = 255


def num_bytes(nbits: int) -> int:
    return -(-nbits // 8)


def row_chunks(rows: int, row_bytes: int, budget: int | None = None) -> list[slice]:
    """Consecutive slices covering ``range(rows)``, each of at most ``budget // row_bytes``
    rows (at least one): the chunks whose ``row_bytes``-wide temporaries fit ``budget``
    (default :data:`CHUNK_BYTES`)."""
    budget = CHUNK_BYTES if budget is None else budget
    step = max(1, budget // max(1, row_bytes))
    return [slice(start, min(start + step, rows)) for start in range(0, rows, step)]


def max_batch_bytes() -> int:
    """The largest packed batch, in bytes, that one ``perturb`` call produces:
    ``LDPFLOW_MAX_BATCH_BYTES`` if set, else :data:`DEFAULT_MAX_BATCH_BYTES`."""
    configured = os.environ.get("LDPFLOW_MAX_BATCH_BYTES")
    if not configured:
        return DEFAULT_MAX_BATCH_BYTES
    try:
        limit = int(configured)
    except ValueError:
        limit = 0
    if limit < 1:
        raise ValueError(
            f"LDPFLOW_MAX_BATCH_BYTES must be a positive integer, got {configured!r}")
    return limit


def check_batch_bytes(rows: int, nbits: int, *, what: str = "reports") -> int:
    """The bytes of ``rows`` packed ``nbits``-bit vectors; ``ValueError`` past the limit.

    The message names the number of rows, the width and the bytes needed, and says how to
    proceed (perturb in chunks of at most the number of rows that fit).
    """
    needed = rows * num_bytes(nbits)
    limit = max_batch_bytes()
    if needed > limit:
        fits = max(1, limit // max(1, num_bytes(nbits)))
        raise ValueError(
            f"{rows} {what} of domain_size {nbits} need {needed} bytes packed "
            f"({needed / 2**30:.2f} GiB), more than the batch limit of {limit} bytes "
            f"(LDPFLOW_MAX_BATCH_BYTES); perturb the values in chunks of at most {fits} "
            "and aggregate each chunk before the next"
        )
    return needed


def column_sums(packed: np.ndarray, nbits: int) -> np.ndarray:
    """How many rows have each bit set: int64 of length ``nbits``.

    Unpacks blocks of at most 255 rows (and at most :data:`CHUNK_BYTES` unpacked bytes) and
    sums each block as uint8, which cannot overflow, into int64 totals: exact integers, with
    bounded temporaries, at a few bytes of memory traffic per packed byte.
    """
    width = packed.shape[1]
    total = np.zeros(width * 8, dtype=np.int64)
    for part in row_chunks(packed.shape[0], 8 * width, min(CHUNK_BYTES, _SUM_ROWS * 8 * width)):
        bits = np.unpackbits(packed[part], axis=1, bitorder="little")
        total += bits.sum(axis=0, dtype=np.uint8)
    return total[:nbits]


def row_popcount(packed: np.ndarray) -> np.ndarray:
    """The number of set bits of each row (int64), in chunks of bounded temporaries."""
    if packed.shape[1] % 8 == 0 and packed.flags.c_contiguous:
        words = packed.view(np.uint64)
    else:
        words = packed
    out = np.empty(packed.shape[0], dtype=np.int64)
    for part in row_chunks(packed.shape[0], packed.shape[1]):
        out[part] = np.bitwise_count(words[part]).sum(axis=1, dtype=np.int64)
    return out


def padding_is_zero(packed: np.ndarray, nbits: int) -> np.ndarray:
    """Whether each row's padding bits (past ``nbits``) are all zero."""
    if nbits % 8 == 0:
        return np.ones(packed.shape[0], dtype=bool)
    return (packed[:, -1] >> np.uint8(nbits % 8)) == 0


def assign_bits(
    packed: np.ndarray, rows: np.ndarray, positions: np.ndarray, values: np.ndarray
) -> None:
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
