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

from ldpflow.core import validation

__all__ = [
    "GOLDEN_GAMMA",
    "splitmix64_mix",
    "splitmix64_stream",
    "keyed_string_hashes",
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
    One pass per word position over the strings that are that long (longest first, so the
    strings still active at word ``j`` are a prefix): the cost is that of the total number
    of words, with no Python loop over strings.
    """
    if not validation.is_integer(key) or not 0 <= int(key) < 2**64:
        raise ValueError(f"key must be an integer in [0, 2**64), got {key!r}")
    k = _U64(int(key))
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1)
    data = np.asarray(data, dtype=np.uint8).reshape(-1)
    n = offsets.size - 1
    if n <= 0:
        return np.zeros(0, dtype=_U64)
    lengths = np.diff(offsets)
    if lengths.min() < 0 or offsets[0] < 0 or offsets[-1] > data.size:
        raise ValueError("offsets must be non-decreasing and within data")
    padded = np.zeros(int(data.size) + 8, dtype=np.uint8)
    padded[: data.size] = data
    # Unaligned little-endian 8-byte loads at any byte offset.
    words_at = np.ndarray(shape=(data.size + 1,), dtype="<u8", buffer=padded, strides=(1,))
    h = splitmix64_mix(k ^ lengths.astype(_U64))
    num_words = (lengths + 7) // 8
    most = int(num_words.max())
    if int(num_words.min()) == most:  # ids of one word count (the common case)
        order = None
        start, remaining = offsets[:-1], lengths
        active_rows = np.full(most, n)
    else:
        order = np.argsort(-num_words, kind="stable")
        start, remaining, h = offsets[:-1][order], lengths[order], h[order]
        active_rows = np.searchsorted(-num_words[order], -np.arange(most), side="left")
    with np.errstate(over="ignore"):
        for j in range(most):
            active = int(active_rows[j])
            word = words_at[start[:active] + 8 * j]
            left = np.minimum(remaining[:active] - 8 * j, 8).astype(_U64)  # 1..8 bytes
            word &= _ALL >> (_U64(64) - _U64(8) * left)
            h[:active] = splitmix64_mix(h[:active] ^ splitmix64_mix(word + k)) * _M3
    out = splitmix64_mix(h)
    if order is None:
        return out
    result = np.empty(n, dtype=_U64)
    result[order] = out
    return result


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


def fwht(x: np.ndarray) -> np.ndarray:
    """The unnormalised fast Walsh-Hadamard transform ``H_N x`` along the last axis.

    ``H_N[i, j] = (-1)**popcount(i & j)`` (Sylvester order); ``N`` a power of two. Integer
    input stays integer (exact). Returns a new array.
    """
    x = np.array(x, copy=True)
    size = x.shape[-1]
    if size & (size - 1):
        raise ValueError(f"fwht length must be a power of two, got {size}")
    lead = x.shape[:-1]
    h = 1
    while h < size:
        y = x.reshape(*lead, size // (2 * h), 2, h)
        a = y[..., 0, :].copy()
        y[..., 0, :] += y[..., 1, :]
        y[..., 1, :] = a - y[..., 1, :]
        h *= 2
    return x


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
