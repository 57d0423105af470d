"""The portable affine hash family of local hashing, and its exact fast aggregation.

Normative definition (``docs/spec/oracles.md``): ``L``-bit unsigned values, ``g = 2**b``
buckets, all arithmetic on unsigned 64-bit integers modulo 2**64. From the splitmix64 stream
started at the seed ``s`` draw ``r_0 .. r_{b-1}`` (each output ``& (2**L - 1)``) and then ``a``
(output ``& (g - 1)``); ``H_s(v) = a XOR sum_j parity(r_j & v) * 2**j``. ``H_s`` is affine over
GF(2), ``H_s(v) = M_s v + a``, and for ``v != v'`` the pair ``(H_s(v), H_s(v'))`` is uniform.

Aggregation: ``[H_s(v) = y] = 2**-b sum_u (-1)**(u.(y^a)) (-1)**((M_s^T u).v)``, so adding the
sign ``(-1)**popcount(u & (y ^ a))`` at index ``M_s^T u`` for all ``g`` values of ``u`` of every
report gives an integer vector ``F`` whose Walsh-Hadamard transform, divided by ``g``, is the
exact support count of every value: ``O(n g + L 2**L)`` instead of ``n 2**L`` hash evaluations.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ldpflow.core import parallel, validation

__all__ = [
    "GOLDEN_GAMMA",
    "splitmix64_mix",
    "splitmix64_stream",
    "keyed_string_hashes",
    "STRING_BLOCK",
    "string_layout",
    "word_count_groups",
    "WordLoads",
    "hash_rows",
    "hash_values",
    "hash_grid",
    "fwht",
    "affine_sign_scatter",
    "support_counts",
    "naive_support_counts",
]

_U64 = np.uint64
GOLDEN_GAMMA = _U64(0x9E3779B97F4A7C15)
_MIX1 = _U64(0xBF58476D1CE4E5B9)
_MIX2 = _U64(0x94D049BB133111EB)


def _mask(bits: int) -> np.uint64:
    return _U64((1 << bits) - 1) if bits < 64 else ~_U64(0)


def splitmix64_mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's output function of the (already advanced) states ``z`` (uint64)."""
    with np.errstate(over="ignore"):
        t = (z ^ (z >> _U64(30))) * _MIX1
        t = (t ^ (t >> _U64(27))) * _MIX2
    return t ^ (t >> _U64(31))


def splitmix64_stream(seeds: npt.ArrayLike, count: int) -> np.ndarray:
    """The first ``count`` splitmix64 outputs from each state ``s``: shape ``(n, count)``."""
    z = np.array(seeds, dtype=_U64, copy=True).reshape(-1)
    out = np.empty((z.size, count), dtype=_U64)
    with np.errstate(over="ignore"):
        for i in range(count):
            z += GOLDEN_GAMMA
            out[:, i] = splitmix64_mix(z)
    return out


_M3 = _U64(0xFF51AFD7ED558CCD)
_ALL = ~_U64(0)
_B64 = _U64(64)
#: Rows of strings hashed together: a few uint64 lanes of this length stay in a core's L2
#: cache through every array operation of a word's rounds, instead of streaming whole
#: columns through memory (blocks of 4,096 rows or fewer lose it to per-call overhead).
STRING_BLOCK = 16384


def string_layout(offsets: npt.ArrayLike, data: npt.ArrayLike, reach: int = 2
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Checked Arrow string layout -> ``(starts, lengths, aligned)``: the strings' bytes
    (only theirs: a slice of a column comes with the column's data) as aligned
    little-endian words with ``reach`` zero words past the end, and each string's start in
    them (bytes), for :class:`WordLoads`. ``reach`` 2 lets every string load the words
    that hold its bytes and one more; loading ``w`` words of every row needs ``w + 1``."""
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1)
    data = np.asarray(data, dtype=np.uint8).reshape(-1)
    lengths = np.diff(offsets)
    if lengths.size and (lengths.min() < 0 or offsets[0] < 0 or offsets[-1] > data.size):
        raise ValueError("offsets must be non-decreasing and within data")
    first, end = (int(offsets[0]), int(offsets[-1])) if lengths.size else (0, 0)
    padded = np.zeros(8 * ((end - first) // 8 + max(int(reach), 2)), dtype=np.uint8)
    padded[: end - first] = data[first:end]
    return offsets[:-1] - first, lengths, padded.view("<u8")


def word_count_groups(words: np.ndarray) -> list[tuple[int, np.ndarray | None]]:
    """``(word count, rows)`` of the strings of each word count (rows None: all of them,
    the common case of ids of one length class), by a stable sort."""
    counts = np.bincount(words)
    if np.count_nonzero(counts) <= 1:
        return [(int(words[0]), None)] if words.size else []
    keys = words.astype(np.uint16) if counts.size <= 1 << 16 else words
    order = np.argsort(keys, kind="stable")  # of 16-bit keys: a radix sort
    bounds = np.concatenate([[0], np.cumsum(counts)])
    return [(k, order[bounds[k]:bounds[k + 1]]) for k in np.flatnonzero(counts).tolist()]


class WordLoads:
    """The little-endian 8-byte words at ``start + 8 j`` of a block of rows, as two aligned
    loads and a funnel shift each (a string's words all sit at its start mod 8), into
    buffers of :data:`STRING_BLOCK` rows reused from block to block. Fancy indexing of an
    unaligned strided view costs about five times as much."""

    def __init__(self, aligned: np.ndarray, rows: int) -> None:
        self._aligned = aligned
        self._buffers = np.empty((5, rows), dtype=_U64)  # word, low, high, shift, scratch
        self._index = np.empty(rows, dtype=np.int64)

    def start(self, at: np.ndarray) -> None:
        """Begin the rows starting at byte ``at`` (at most ``rows`` of them)."""
        m = at.size
        self.word, self._low, self._high, self._shift, self._scratch = (
            b[:m] for b in self._buffers)
        where = self._where = self._index[:m]
        np.bitwise_and(at, 7, out=where)
        where <<= 3
        self._shift[...] = where
        np.right_shift(at, 3, out=where)
        np.take(self._aligned, where, out=self._low)

    def next(self) -> np.ndarray:
        """The next word of every row (the buffer ``word``, overwritten by the next call;
        bytes past a string's end are those that follow it)."""
        self._where += 1
        np.take(self._aligned, self._where, out=self._high)
        np.right_shift(self._low, self._shift, out=self.word)
        # A shift by 64 gives 0 in numpy: starts at multiples of 8 need no special case.
        np.subtract(_B64, self._shift, out=self._scratch)
        np.left_shift(self._high, self._scratch, out=self._scratch)
        self.word |= self._scratch
        self._low, self._high = self._high, self._low
        return self.word


#: ``2**(8 (r + 1)) - 1``: the mask of a last word holding ``r + 1`` bytes.
_LAST_MASKS = _ALL >> (_U64(56) - _U64(8) * np.arange(8, dtype=_U64))


def _mix_in_place(z: np.ndarray, scratch: np.ndarray) -> None:
    """:func:`splitmix64_mix` of ``z`` in place."""
    np.right_shift(z, _U64(30), out=scratch)
    z ^= scratch
    z *= _MIX1
    np.right_shift(z, _U64(27), out=scratch)
    z ^= scratch
    z *= _MIX2
    np.right_shift(z, _U64(31), out=scratch)
    z ^= scratch


def keyed_string_hashes(offsets: npt.ArrayLike, data: npt.ArrayLike,
                        key: int | np.uint64) -> npt.NDArray[np.uint64]:
    """The keyed 64-bit hash ``S_K`` of each byte string, vectorised over a whole column.

    Normative (``docs/spec/heavy_hitters.md``, "Group hash"; test vectors in
    ``docs/testvectors/group_hash.json``): the bytes of a string of ``len`` bytes are cut
    into ``k = ceil(len / 8)`` little-endian 8-byte words ``w_0 .. w_{k-1}`` (the last one
    zero-padded; none for the empty string). With ``mix`` splitmix64's output function
    (:func:`splitmix64_mix`) and all arithmetic modulo 2**64::

        h = mix(K ^ len)
        for each word w:  h = mix(h ^ mix(w + K)) * 0xFF51AFD7ED558CCD
        S_K = mix(h)

    The length enters first, so strings that differ only in trailing zero bytes differ.
    The key ``K`` is public wherever a client must compute the hash; it separates the
    uses of one function (two keys give unrelated hashes). ``K = 0x9E3779B97F4A7C15`` is
    :mod:`ldpflow.core.dedup`'s ``ldpflow-idhash-1``.

    Parameters
    ----------
    offsets : array_like of int, shape (n + 1,)
        String ``i`` is ``data[offsets[i]:offsets[i + 1]]`` (Arrow's string layout).
    data : array_like of uint8
        The concatenated bytes.
    key : int
        ``K``, in ``[0, 2**64)``.

    Returns
    -------
    ndarray of uint64, shape (n,)

    Notes
    -----
    The strings of one word count together, in blocks of :data:`STRING_BLOCK` rows whose
    state stays in cache, every array operation in place (:class:`WordLoads`): the cost is
    that of the total number of words, with no Python loop over strings.
    """
    if not validation.is_integer(key) or not 0 <= int(key) < 2**64:
        raise ValueError(f"key must be an integer in [0, 2**64), got {key!r}")
    k = _U64(int(key))
    starts, lengths, aligned = string_layout(offsets, data)
    n = lengths.size
    if n <= 0:
        return np.zeros(0, dtype=_U64)
    out = np.empty(n, dtype=_U64)
    block = min(STRING_BLOCK, n)
    loads = WordLoads(aligned, block)
    lanes = np.empty((3, block), dtype=_U64)  # h, the word's mix, scratch
    last = np.empty(block, dtype=np.int64)
    with np.errstate(over="ignore"):
        for words, rows in word_count_groups((lengths + 7) >> 3):
            group_starts = starts if rows is None else starts[rows]
            group_lengths = lengths if rows is None else lengths[rows]
            hashes = out if rows is None else np.empty(group_starts.size, dtype=_U64)
            for lo in range(0, group_starts.size, block):
                at = group_starts[lo:lo + block]
                length = group_lengths[lo:lo + block]
                m = at.size
                h, mixed, scratch = (lane[:m] for lane in lanes)
                h[...] = length
                h ^= k
                _mix_in_place(h, scratch)
                if words:
                    loads.start(at)
                for j in range(words):
                    word = loads.next()
                    if j == words - 1:  # the last word holds 1..8 bytes: zero the rest
                        np.subtract(length, 1, out=last[:m])
                        last[:m] &= 7
                        np.take(_LAST_MASKS, last[:m], out=scratch)
                        word &= scratch
                    np.add(word, k, out=mixed)
                    _mix_in_place(mixed, scratch)
                    h ^= mixed
                    _mix_in_place(h, scratch)
                    h *= _M3
                _mix_in_place(h, scratch)
                hashes[lo:lo + m] = h
            if rows is not None:
                out[rows] = hashes
    return out


def hash_rows(
    seeds: npt.ArrayLike, value_bits: int, hash_bits: int
) -> tuple[np.ndarray, np.ndarray]:
    """The matrix rows ``r_j`` (shape ``(n, b)``) and offsets ``a`` (shape ``(n,)``) of ``H_s``."""
    stream = splitmix64_stream(seeds, hash_bits + 1)
    rows = stream[:, :hash_bits] & _mask(value_bits)
    offsets = stream[:, hash_bits] & _mask(hash_bits)
    return rows, offsets


def _parity(x: np.ndarray) -> np.ndarray:
    return np.bitwise_count(x) & np.uint8(1)


def _apply(rows: np.ndarray, offsets: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``H(v)`` for rows ``(n, b)``, offsets ``(n,)`` and values broadcastable to ``(n, m)``."""
    out = offsets.astype(np.int64)[:, None] if values.ndim == 2 else offsets.astype(np.int64)
    for j in range(rows.shape[1]):
        r = rows[:, j][:, None] if values.ndim == 2 else rows[:, j]
        out = out ^ (_parity(r & values).astype(np.int64) << j)
    return out


def hash_values(
    seeds: npt.ArrayLike, values: npt.ArrayLike, value_bits: int, hash_range: int
) -> np.ndarray:
    """``H_{s_i}(v_i)`` for paired seeds and values (int64 buckets)."""
    b = int(hash_range).bit_length() - 1
    rows, offsets = hash_rows(seeds, value_bits, b)
    return _apply(rows, offsets, np.asarray(values).astype(_U64).reshape(-1))


def hash_grid(
    seeds: npt.ArrayLike, values: npt.ArrayLike, value_bits: int, hash_range: int
) -> np.ndarray:
    """``H_{s_i}(v_j)`` for every seed and every value: shape ``(n, m)`` (the naive method)."""
    b = int(hash_range).bit_length() - 1
    rows, offsets = hash_rows(seeds, value_bits, b)
    return _apply(rows, offsets, np.asarray(values).astype(_U64).reshape(1, -1))


#: Entries of the rows :func:`fwht` transforms at once (2 MiB of int64: the levels stay in
#: a core's cache instead of streaming the whole array through memory once a level).
_FWHT_ENTRIES = 1 << 18


def fwht(x: np.ndarray) -> np.ndarray:
    """The unnormalised fast Walsh-Hadamard transform ``H_N x`` along the last axis.

    ``H_N[i, j] = (-1)**popcount(i & j)`` (Sylvester order); ``N`` a power of two. Integer
    input stays integer (exact). Returns a new array. The levels are done a few short rows
    at a time, or one block of a long row, of :data:`_FWHT_ENTRIES` entries (in threads
    when large, :func:`ldpflow.core.parallel.map_items`); a long row's levels above its
    blocks then combine the blocks.
    """
    x = np.array(x, copy=True, order="C")  # C order: the reshapes below are views
    size = x.shape[-1]
    if size & (size - 1):
        raise ValueError(f"fwht length must be a power of two, got {size}")
    if size <= 1:
        return x
    rows = x.reshape(-1, size)  # a view: the levels work in place
    low = min(size, _FWHT_ENTRIES)  # the levels below `low` a few rows (or one block) at once
    blocks = rows.reshape(-1, low)
    step = max(1, _FWHT_ENTRIES // low)
    parts = [(lo, min(lo + step, blocks.shape[0])) for lo in range(0, blocks.shape[0], step)]

    def transform(run) -> None:
        for lo, hi in run:
            _fwht_levels(blocks[lo:hi], 1)

    parallel.map_items(transform, parts, rows.size)  # parts write disjoint rows
    if low < size:  # a long row: the levels above, whole blocks added and subtracted
        _fwht_levels(rows, low)
    return x


def _fwht_levels(rows: np.ndarray, h: int) -> None:
    """The levels of :func:`fwht` from ``h`` up (``h = 1``: all of them) of each row of the
    C-ordered 2-d ``rows``, in place."""
    size = rows.shape[1]
    while 4 * h <= size:  # two levels at once (H_4 = H_2 (x) H_2): half the passes
        y = rows.reshape(rows.shape[0], size // (4 * h), 4, h)
        a, b, c, d = y[:, :, 0], y[:, :, 1], y[:, :, 2], y[:, :, 3]
        s0, s1, s2, s3 = a + b, a - b, c + d, c - d
        np.add(s0, s2, out=a)
        np.add(s1, s3, out=b)
        np.subtract(s0, s2, out=c)
        np.subtract(s1, s3, out=d)
        h *= 4
    if h < size:  # an odd number of levels: the last alone
        y = rows.reshape(rows.shape[0], size // (2 * h), 2, h)
        a = y[:, :, 0].copy()
        y[:, :, 0] += y[:, :, 1]
        y[:, :, 1] = a - y[:, :, 1]


_CHUNK = 1 << 16


def affine_sign_scatter(
    rows: np.ndarray, targets: np.ndarray, index_bits: int
) -> np.ndarray:
    """The signed scatter vector ``F`` (length ``2**index_bits``) of a batch of reports.

    Parameters
    ----------
    rows : ndarray of uint64, shape (n, b)
        The rows ``r_j`` of each report's hash, restricted to the index bits.
    targets : ndarray, shape (n,)
        ``y XOR a`` for each report (the reported bucket XOR the hash offset).
    index_bits : int
        ``log2`` of the length of ``F``.

    Notes
    -----
    One histogram per chunk of reports: entry ``2 i + s`` counts the signs ``s`` (0: +1,
    1: -1) scattered at index ``i``, so ``F = counts[0::2] - counts[1::2]``.
    """
    n, b = rows.shape
    g = 1 << b
    size = 1 << index_bits
    u = np.arange(g, dtype=np.int64)
    counts = np.zeros(2 * size, dtype=np.int64)
    for start in range(0, n, _CHUNK):
        r = rows[start : start + _CHUNK].astype(np.int64)
        t = np.asarray(targets[start : start + _CHUNK]).astype(np.int64)
        w = np.empty((r.shape[0], g), dtype=np.int64)
        w[:, 0] = 0
        for j in range(b):  # all g values of M^T u by doubling
            np.bitwise_xor(w[:, : 1 << j], r[:, j : j + 1], out=w[:, 1 << j : 2 << j])
        w <<= 1
        w |= np.bitwise_count(u[None, :] & t[:, None]) & 1  # the sign bit
        counts += np.bincount(w.ravel(), minlength=2 * size)
    return counts[0::2] - counts[1::2]


def support_counts(F: np.ndarray, hash_range: int) -> np.ndarray:
    """Exact support counts ``c = (H F) / g`` of every index (int64)."""
    transformed = fwht(F)
    counts, remainder = np.divmod(transformed, hash_range)
    if np.any(remainder):
        raise ValueError("scatter vector is not a valid local-hashing accumulator")
    return counts


def naive_support_counts(
    seeds: np.ndarray, buckets: np.ndarray, value_bits: int, hash_range: int, values: np.ndarray
) -> np.ndarray:
    """The test oracle: ``c_v = #{i : H_{s_i}(v) = y_i}`` over the users x values grid."""
    grid = hash_grid(seeds, values, value_bits, hash_range)
    return (grid == np.asarray(buckets).astype(np.int64)[:, None]).sum(axis=0).astype(np.int64)
