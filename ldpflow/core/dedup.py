"""Exact deduplication of reports by id: keyed 64-bit id hashes, confirmed by full ids.

At-least-once transports (Pub/Sub) redeliver reports, and batch inputs can hold a file
twice; a repeated report must change no estimate, and a distinct report must never be
dropped. Report ids are hashed to 64 bits, vectorised over a whole column; equal hashes
only make rows *candidates*: :func:`first_copies` (given the full ids, :func:`packed_ids`)
and :class:`SeenIds` (given the ids with the hashes) compare the full ids of the candidate
rows, so two distinct ids that share a hash are both kept, by chance or by design.

The hash that deduplication uses is keyed (``ldpflow-idhash-2``, SipHash-1-3 with a
16-byte key, :func:`new_id_key`, drawn from the operating system's CSPRNG once per run and
sent to the workers with the job): without the key, nobody can choose ids whose hashes
collide, so the rows that need their full ids compared (those of repeated hashes) stay the
real copies plus a chance ``m**2 / 2**65`` of ``m`` ids, and the light shuffle of hashes
only (8 bytes a report) stays light. SipHash (Aumasson and Bernstein, 2012) is the keyed
hash that CPython (1-3 rounds, since 3.11) and Rust use against hash flooding: on a
little-endian 8-byte word sequence ``w_0 .. w_{k-1}`` of the UTF-8 bytes (``k = len // 8``
full words) and a last word holding the ``len % 8`` remaining bytes with ``len mod 256`` in
its top byte, with ``c`` rounds per word and ``d`` final rounds (``c = 1, d = 3`` here;
``c = 2, d = 4`` gives the published SipHash-2-4 vectors, which the tests check).

The unkeyed hash (``ldpflow-idhash-1``, ``key=None``) is public, so that other
implementations can reproduce it; being invertible, ids colliding under it can be built at
will, which is why no dedup path uses it. Its definition: the UTF-8
bytes of an id are cut into 8-byte little-endian words ``w_0 .. w_{k-1}`` (the last one
zero-padded; ``k = ceil(len / 8)``, 0 for the empty id). With ``mix`` the SplitMix64
finaliser (``z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27; z *= 0x94D049BB133111EB;
z ^= z >> 31``, arithmetic modulo 2**64)::

    h = mix(0x9E3779B97F4A7C15 ^ len)
    for each word w:  h = mix(h ^ mix(w + 0x9E3779B97F4A7C15)) * 0xFF51AFD7ED558CCD
    hash = mix(h)

:class:`SeenIds` keeps the hashes in sorted numpy runs of doubling sizes (a log-structured
merge set): a batch of ``b`` ids is tested and added in ``O(b log m)`` without copying the
whole set, and the set pickles as a few arrays. It keeps the full ids with the hashes, so
that a hash seen before is a duplicate only when its id is the one seen.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

from ldpflow.core import hashing

__all__ = ["ID_KEY_BYTES", "new_id_key", "string_hashes", "report_id_hashes", "packed_ids",
           "packed_report_ids", "unpacked_ids", "repeated_hashes", "first_copies", "SeenIds"]

#: Length of the key of the keyed id hash (SipHash's 128 bits).
ID_KEY_BYTES = 16

_GOLDEN = hashing.GOLDEN_GAMMA
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


def new_id_key() -> bytes:
    """A fresh secret key for :func:`string_hashes` (16 bytes of ``os.urandom``): one per
    run, sent to the workers with the job. Tests pass a fixed one."""
    return os.urandom(ID_KEY_BYTES)


def _key_words(key: bytes) -> tuple[np.uint64, np.uint64]:
    if not isinstance(key, (bytes, bytearray)) or len(key) != ID_KEY_BYTES:
        raise ValueError(f"key must be {ID_KEY_BYTES} bytes, got {key!r:.40}")
    k0 = int.from_bytes(bytes(key[:8]), "little")
    k1 = int.from_bytes(bytes(key[8:]), "little")
    return np.uint64(k0), np.uint64(k1)


def string_hashes(offsets: npt.ArrayLike, data: npt.ArrayLike, key: bytes | None = None,
                  rounds: tuple[int, int] = (1, 3)) -> npt.NDArray[np.uint64]:
    """64-bit hashes of byte strings: keyed (``ldpflow-idhash-2``, SipHash) when ``key``
    is given, else the public ``ldpflow-idhash-1`` (see the module notes).

    Parameters
    ----------
    offsets : array_like of int, shape (n + 1,)
        String ``i`` is ``data[offsets[i]:offsets[i + 1]]`` (Arrow's string layout).
    data : array_like of uint8
        The concatenated bytes.
    key : bytes, optional
        A :data:`ID_KEY_BYTES`-byte secret (:func:`new_id_key`). Deduplication always
        passes one: the unkeyed hash is invertible, so collisions with it can be built.
    rounds : (int, int)
        SipHash's compression and finalisation rounds (keyed only): ``(1, 3)``, the
        ldpflow hash; ``(2, 4)`` is SipHash-2-4, for its published test vectors.

    Notes
    -----
    Vectorised over the strings, without a Python object per string: both hashes take the
    strings of one word count together, in blocks of rows whose state stays in cache, with
    every array operation in place and each word two aligned loads
    (:class:`ldpflow.core.hashing.WordLoads`): the keyed hash takes about 40 ns an 11-byte
    id on one core of the project's machine, against 100 ns with whole-column passes. The
    cost is that of the total number of words.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    data = np.asarray(data, dtype=np.uint8).reshape(-1)
    n = offsets.size - 1
    if n <= 0:
        if key is not None:
            _key_words(key)
        return np.zeros(0, dtype=np.uint64)
    if key is None:  # ldpflow-idhash-1: the hash family's keyed string hash, public key
        return hashing.keyed_string_hashes(offsets, data, _GOLDEN)
    return _siphash(*hashing.string_layout(offsets, data), key, rounds)


_SIP_INIT = (0x736F6D6570736575, 0x646F72616E646F6D, 0x6C7967656E657261, 0x7465646279746573)
#: ``(1 << 8 t) - 1``: the mask of the ``t`` bytes a string has past its last full word.
_TAIL_MASKS = (np.uint64(1) << (np.uint64(8) * np.arange(8, dtype=np.uint64))) - np.uint64(1)
_U = np.uint64
_R13, _R16, _R17, _R21, _R32 = _U(13), _U(16), _U(17), _U(21), _U(32)
_L13, _L16, _L17, _L21 = _U(51), _U(48), _U(47), _U(43)
_FF, _B56 = _U(0xFF), _U(56)


def _sip_rounds(v: list[np.ndarray], scratch: np.ndarray, count: int) -> None:
    """``count`` SipRounds on the lanes ``v`` (arrays of one length), in place: no
    temporary array per operation (``scratch``: a buffer of the lanes' length)."""
    v0, v1, v2, v3 = v
    s = scratch
    rs, ls, orr = np.right_shift, np.left_shift, np.bitwise_or
    for _ in range(count):
        v0 += v1
        rs(v1, _L13, out=s), ls(v1, _R13, out=v1), orr(v1, s, out=v1)
        v1 ^= v0
        rs(v0, _R32, out=s), ls(v0, _R32, out=v0), orr(v0, s, out=v0)
        v2 += v3
        rs(v3, _L16, out=s), ls(v3, _R16, out=v3), orr(v3, s, out=v3)
        v3 ^= v2
        v0 += v3
        rs(v3, _L21, out=s), ls(v3, _R21, out=v3), orr(v3, s, out=v3)
        v3 ^= v0
        v2 += v1
        rs(v1, _L17, out=s), ls(v1, _R17, out=v1), orr(v1, s, out=v1)
        v1 ^= v2
        rs(v2, _R32, out=s), ls(v2, _R32, out=v2), orr(v2, s, out=v2)


def _rotl_int(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & 0xFFFFFFFFFFFFFFFF


def _sip_first_round(v: list[np.ndarray], word: np.ndarray, init: Sequence[int],
                     scratch: np.ndarray) -> None:
    """Set the lanes ``v`` to the state after the first word's ``v3 ^= word`` and first
    SipRound, from the initial state ``init`` (Python ints): the steps that touch only
    the initial ``v0`` and ``v1`` are done once on scalars (16 array operations instead
    of 31)."""
    mask = 0xFFFFFFFFFFFFFFFF
    i0, i1, i2, i3 = init
    s01 = (i0 + i1) & mask
    a0 = _rotl_int(s01, 32)  # v0 after its first rotation
    a1 = _rotl_int(i1, 13) ^ s01  # v1 before v2 += v1
    b1 = _rotl_int(a1, 17)
    v0, v1, v2, v3 = v
    s, rs, ls, orr = scratch, np.right_shift, np.left_shift, np.bitwise_or
    np.bitwise_xor(word, _U(i3), out=v3)
    np.add(v3, _U(i2), out=v2)
    rs(v3, _L16, out=s), ls(v3, _R16, out=v3), orr(v3, s, out=v3)
    v3 ^= v2
    np.add(v3, _U(a0), out=v0)
    rs(v3, _L21, out=s), ls(v3, _R21, out=v3), orr(v3, s, out=v3)
    v3 ^= v0
    v2 += _U(a1)
    np.bitwise_xor(v2, _U(b1), out=v1)
    rs(v2, _R32, out=s), ls(v2, _R32, out=v2), orr(v2, s, out=v2)


def _siphash(start: np.ndarray, lengths: np.ndarray, aligned: np.ndarray, key: bytes,
             rounds: tuple[int, int]) -> np.ndarray:
    """SipHash-c-d of every string (:func:`ldpflow.core.hashing.string_layout`'s form): the
    strings of one full-word count together, in blocks of
    :data:`~ldpflow.core.hashing.STRING_BLOCK` rows whose state stays in cache."""
    c, d = (int(r) for r in rounds)
    if c < 1 or d < 0:
        raise ValueError(f"rounds must be (c >= 1, d >= 0), got {rounds!r}")
    k0, k1 = _key_words(key)
    n = lengths.size
    init = [int(k) ^ i for k, i in zip((k0, k1, k0, k1), _SIP_INIT, strict=True)]
    out = np.empty(n, dtype=_U)
    block = min(hashing.STRING_BLOCK, n)
    loads = hashing.WordLoads(aligned, block)
    lanes = np.empty((6, block), dtype=_U)  # v0..v3, the tail's mask, scratch
    tail = np.empty(block, dtype=np.int64)
    with np.errstate(over="ignore"):
        # Whole words, then one last word with the tail bytes and the length.
        for k, rows in hashing.word_count_groups(lengths >> 3):
            group_start = start if rows is None else start[rows]
            group_lengths = lengths if rows is None else lengths[rows]
            hashes = out if rows is None else np.empty(group_start.size, dtype=_U)
            for lo in range(0, group_start.size, block):
                at = group_start[lo:lo + block]
                m = at.size
                v = [lanes[i, :m] for i in range(4)]
                mask, scratch = lanes[4, :m], lanes[5, :m]
                loads.start(at)
                for j in range(k + 1):
                    word = loads.next()
                    if j == k:  # the tail bytes, and the length mod 256 in the top byte
                        length = group_lengths[lo:lo + m]
                        np.bitwise_and(length, 7, out=tail[:m])
                        np.take(_TAIL_MASKS, tail[:m], out=mask)
                        word &= mask
                        mask[...] = length
                        mask <<= _B56
                        word |= mask
                    if j:
                        v[3] ^= word
                        _sip_rounds(v, scratch, c)
                    else:
                        _sip_first_round(v, word, init, scratch)
                        _sip_rounds(v, scratch, c - 1)
                    v[0] ^= word
                v[2] ^= _FF
                _sip_rounds(v, scratch, d)
                result = hashes[lo:lo + m]
                np.bitwise_xor(v[0], v[1], out=result)
                result ^= v[2]
                result ^= v[3]
            if rows is not None:
                out[rows] = hashes
    return out


def _encode(ids: Sequence[str] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    encoded = [str(i).encode("utf-8") for i in ids]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    return offsets, np.frombuffer(b"".join(encoded), dtype=np.uint8)


def report_id_hashes(ids: Sequence[str] | np.ndarray, key: bytes | None = None
                     ) -> npt.NDArray[np.uint64]:
    """:func:`string_hashes` of report ids given as Python strings (UTF-8)."""
    return string_hashes(*_encode(ids), key=key)


def packed_ids(offsets: npt.ArrayLike, data: npt.ArrayLike) -> npt.NDArray[np.bytes_]:
    """Byte strings as one numpy ``S`` column that compares, sorts and concatenates exactly.

    Each string is followed by one ``0x01`` byte, so the zero padding of numpy's fixed-width
    strings can never make two different strings equal (numpy ignores trailing zeros, and
    no packed string ends in one). Vectorised: blocks of rows, each word two aligned loads
    (:class:`ldpflow.core.hashing.WordLoads`).
    """
    lengths = np.diff(np.asarray(offsets, dtype=np.int64).reshape(-1))
    if lengths.size == 0:
        return np.zeros(0, dtype="S1")
    words = (int(lengths.max()) + 1 + 7) // 8  # the bytes and the terminator
    start, lengths, aligned = hashing.string_layout(offsets, data, reach=words + 1)
    n = lengths.size
    table = np.empty((n, words), dtype="<u8")
    block = min(hashing.STRING_BLOCK, n)
    loads = hashing.WordLoads(aligned, block)
    left = np.empty(block, dtype=np.int64)
    mask = np.empty(block, dtype=np.uint64)
    for lo in range(0, n, block):
        length = lengths[lo:lo + block]
        m = length.size
        loads.start(start[lo:lo + m])
        for j in range(words):
            word = loads.next()
            # The bytes of the string in this word (0 to 8): a shift by 64 gives 0.
            np.subtract(length, 8 * j, out=left[:m])
            np.clip(left[:m], 0, 8, out=left[:m])
            left[:m] <<= 3
            mask[:m] = left[:m]
            np.right_shift(_ALL, np.uint64(64) - mask[:m], out=mask[:m])
            np.bitwise_and(word, mask[:m], out=table[lo:lo + m, j])
    table.view(np.uint8).reshape(n, 8 * words)[np.arange(n), lengths] = 1
    return table.view(f"S{8 * words}").reshape(n)


def packed_report_ids(ids: Sequence[str] | np.ndarray) -> npt.NDArray[np.bytes_]:
    """:func:`packed_ids` of report ids given as Python strings (UTF-8)."""
    return packed_ids(*_encode(ids))


def unpacked_ids(packed: npt.ArrayLike) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8]]:
    """The inverse of :func:`packed_ids`: ``(offsets, data)`` in Arrow's string layout (so
    ``string_hashes(*unpacked_ids(p))`` hashes packed ids). Vectorised."""
    packed = np.ascontiguousarray(packed)
    n = packed.size
    offsets = np.zeros(n + 1, dtype=np.int64)
    if n == 0:
        return offsets, np.zeros(0, dtype=np.uint8)
    width = packed.dtype.itemsize
    table = packed.view(np.uint8).reshape(n, width)
    # The terminator is each row's last nonzero byte; its position is the length.
    lengths = width - 1 - np.argmax(table[:, ::-1] != 0, axis=1)
    np.cumsum(lengths, out=offsets[1:])
    return offsets, table[np.arange(width)[None, :] < lengths[:, None]]


def repeated_hashes(hashes: npt.ArrayLike, ordered: bool = False) -> npt.NDArray[np.uint64]:
    """The hashes that occur more than once in ``hashes``, sorted, each once.

    ``ordered``: ``hashes`` is sorted already (it is not sorted again). One sort of the
    values (about twice as fast as an argsort) and a comparison of neighbours: what
    :func:`first_copies` and the plan's id-hash shuffle
    (:func:`ldpflow.plan.steps.repeated_ids`) find the candidate copies with.
    """
    hashes = np.asarray(hashes, dtype=np.uint64).reshape(-1)
    if hashes.size < 2:
        return np.zeros(0, dtype=np.uint64)
    if not ordered:
        hashes = np.sort(hashes)
    same = hashes[1:] == hashes[:-1]
    if not same.any():
        return np.zeros(0, dtype=np.uint64)
    picked = hashes[1:][same]  # sorted: the distinct ones are where the value changes
    first = np.ones(picked.size, dtype=bool)
    first[1:] = picked[1:] != picked[:-1]
    return picked[first]


def first_copies(hashes: npt.ArrayLike, columns: Iterable[np.ndarray] = (),
                 ids: npt.ArrayLike | None = None) -> tuple[npt.NDArray[np.bool_], int]:
    """Which rows to keep when rows of one report id are copies of one report.

    Of each set of rows with one id, the row whose payload (``columns``, compared in
    order, then row by row) is smallest is kept, so the choice does not depend on the order
    the rows arrived in. Returns the mask of kept rows and how many ids had copies whose
    payloads differ (conflicting duplicates: not redeliveries but different reports under
    one id).

    Parameters
    ----------
    hashes : array_like of uint64, shape (n,)
        The id hashes: rows of a hash no other row has are kept without more work.
    columns : iterable of ndarray
        The payload columns (1-d, or 2-d with one row per report).
    ids : array_like, shape (n,), optional
        The full ids (:func:`packed_ids`, or any exactly comparable values). Given, the rows
        of repeated hashes are grouped by id, so two distinct ids that share a hash are both
        kept: the result is exact. Without them, rows of one hash count as one id.
    """
    hashes = np.asarray(hashes, dtype=np.uint64)
    columns = [np.asarray(c) for c in columns]
    n = hashes.size
    keep = np.ones(n, dtype=bool)
    repeated = repeated_hashes(hashes)
    if repeated.size == 0:  # the common case: no copies at all
        return keep, 0
    at = np.minimum(np.searchsorted(repeated, hashes), repeated.size - 1)
    rows = np.flatnonzero(repeated[at] == hashes)  # every row of a repeated hash
    if ids is None:
        group = hashes[rows]
    else:  # the candidates' full ids decide: one group per distinct id
        ids = np.asarray(ids)
        if ids.shape[:1] != hashes.shape:
            raise ValueError(f"ids must have one entry per hash ({n}), got shape {ids.shape}")
        group = np.unique(ids[rows], return_inverse=True)[1].reshape(-1)
    payload: list[np.ndarray] = []
    for column in columns:
        column = column[rows]
        parts = [column] if column.ndim == 1 else [column[:, j] for j in range(column.shape[1])]
        payload.extend(parts)
    keys = payload[::-1] + [group]  # lexsort: the last key is the primary one
    order = np.lexsort(keys)
    rows, group = rows[order], group[order]
    first = np.ones(rows.size, dtype=bool)
    first[1:] = group[1:] != group[:-1]
    keep[rows[~first]] = False
    conflicting = 0
    if payload:
        starts = np.flatnonzero(first)
        leader = starts[np.cumsum(first) - 1]  # each row's group's kept row (position in rows)
        differs = np.zeros(rows.size, dtype=bool)
        for column in columns:
            a, b = column[rows], column[rows[leader]]
            differs |= (a != b) if a.ndim == 1 else (a != b).any(axis=1)
        conflicting = int(np.unique(group[differs]).size)
    return keep, conflicting


class SeenIds:
    """A growing set of report ids, as 64-bit hashes with (optionally) the full ids;
    :meth:`add_new` says which of a batch are new.

    Given ids (:func:`packed_ids`) with the hashes, membership is exact: a hash seen
    before marks a duplicate only when one of the ids seen with it is the same id. A set
    holds ids for every hash or for none (a set without ids treats one hash as one id).
    """

    __slots__ = ("_runs",)

    def __init__(self, runs: Iterable[tuple[np.ndarray, np.ndarray | None] | np.ndarray] = ()):
        self._runs: list[tuple[np.ndarray, np.ndarray | None]] = []
        for run in runs:
            hashes, ids = run if isinstance(run, tuple) else (run, None)
            if len(hashes):
                self._runs.append((np.asarray(hashes, dtype=np.uint64), ids))

    def __len__(self) -> int:
        return sum(h.size for h, _ in self._runs)

    def __contains__(self, value: int) -> bool:
        return bool(self.contains(np.array([value], dtype=np.uint64))[0])

    def contains(self, hashes: npt.ArrayLike, ids: npt.ArrayLike | None = None
                 ) -> npt.NDArray[np.bool_]:
        """Which of ``hashes`` (with their ``ids``: exactly which ids) are in the set."""
        hashes = np.asarray(hashes, dtype=np.uint64)
        found = np.zeros(hashes.size, dtype=bool)
        for run, run_ids in self._runs:
            low = np.searchsorted(run, hashes, side="left")
            if ids is None or run_ids is None:
                at = np.minimum(low, run.size - 1)
                found |= run[at] == hashes
                continue
            # Every stored entry of the hash is compared by id; a loop over the most
            # entries one hash has (1 but for a collision), not over the reports.
            count = np.searchsorted(run, hashes, side="right") - low
            ids = np.asarray(ids)
            for k in range(int(count.max()) if count.size else 0):
                hit = np.flatnonzero(count > k)
                found[hit] |= run_ids[low[hit] + k] == ids[hit]
        return found

    def add_new(self, hashes: npt.ArrayLike, ids: npt.ArrayLike | None = None
                ) -> npt.NDArray[np.bool_]:
        """Add ``hashes`` (and their ``ids``); return a mask of the ids not seen before
        (first occurrence only)."""
        hashes = np.asarray(hashes, dtype=np.uint64)
        if hashes.size == 0:
            return np.zeros(0, dtype=bool)
        if ids is not None:
            ids = np.asarray(ids)
        new, _ = first_copies(hashes, (), ids)
        new &= ~self.contains(hashes, ids)
        if new.any():
            picked = hashes[new]
            order = np.argsort(picked, kind="stable")
            self._push((picked[order], None if ids is None else ids[new][order]))
        return new

    def _push(self, run: tuple[np.ndarray, np.ndarray | None]) -> None:
        self._runs.append(run)
        # Merge while the newest run is at least half the size of the one before it.
        while len(self._runs) > 1 and self._runs[-1][0].size * 2 >= self._runs[-2][0].size:
            (hb, ib), (ha, ia) = self._runs.pop(), self._runs.pop()
            joined = np.concatenate([ha, hb])
            # Two sorted runs: the stable sort merges them in linear time.
            if ia is None or ib is None:
                self._runs.append((np.sort(joined, kind="stable"), None))
            else:
                order = np.argsort(joined, kind="stable")
                self._runs.append((joined[order], np.concatenate([ia, ib])[order]))

    def union(self, other: SeenIds) -> SeenIds:
        """Add every id of ``other`` (mutates and returns ``self``)."""
        for hashes, ids in other._runs:
            self.add_new(hashes, ids)
        return self

    def __getstate__(self) -> list[tuple[np.ndarray, np.ndarray | None]]:
        return self._runs

    def __setstate__(self, runs: list) -> None:
        self._runs = [run if isinstance(run, tuple) else (run, None) for run in runs]
