"""Exact-enough deduplication of reports by id: 64-bit id hashes in a log-structured set.

At-least-once transports (Pub/Sub) redeliver reports, and batch inputs can hold a file
twice; a repeated report must change no estimate. Report ids are hashed to 64 bits by
:func:`string_hashes`, vectorised over a whole column: two distinct ids collide with
probability about ``m**2 / 2**65`` for ``m`` ids of one key (below 3e-6 for ten million
ids), and only then would a valid report be taken for a duplicate.

The hash (``ldpflow-idhash-1``), so that other implementations can reproduce it: the UTF-8
bytes of an id are cut into 8-byte little-endian words ``w_0 .. w_{k-1}`` (the last one
zero-padded; ``k = ceil(len / 8)``, 0 for the empty id). With ``mix`` the SplitMix64
finaliser (``z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27; z *= 0x94D049BB133111EB;
z ^= z >> 31``, arithmetic modulo 2**64)::

    h = mix(0x9E3779B97F4A7C15 ^ len)
    for each word w:  h = mix(h ^ mix(w + 0x9E3779B97F4A7C15)) * 0xFF51AFD7ED558CCD
    hash = mix(h)

:class:`SeenIds` keeps the hashes in sorted numpy runs of doubling sizes (a log-structured
merge set): a batch of ``b`` ids is tested and added in ``O(b log m)`` without copying the
whole set, and the set pickles as a few arrays.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

from ldpflow.core import hashing

__all__ = ["string_hashes", "report_id_hashes", "first_copies", "SeenIds"]

_GOLDEN = hashing.GOLDEN_GAMMA
_M3 = np.uint64(0xFF51AFD7ED558CCD)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
_mix = hashing.splitmix64_mix  # SplitMix64's finaliser, the hash family's own


def string_hashes(offsets: npt.ArrayLike, data: npt.ArrayLike) -> npt.NDArray[np.uint64]:
    """64-bit hashes (``ldpflow-idhash-1``, see the module notes) of byte strings.

    Parameters
    ----------
    offsets : array_like of int, shape (n + 1,)
        String ``i`` is ``data[offsets[i]:offsets[i + 1]]`` (Arrow's string layout).
    data : array_like of uint8
        The concatenated bytes.

    Notes
    -----
    Vectorised over the strings: one pass per 8-byte word position, over the strings that
    are that long, so the cost is that of the total number of words.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    data = np.asarray(data, dtype=np.uint8).reshape(-1)
    n = offsets.size - 1
    if n <= 0:
        return np.zeros(0, dtype=np.uint64)
    lengths = np.diff(offsets)
    padded = np.zeros(int(data.size) + 8, dtype=np.uint8)
    padded[: data.size] = data
    # Unaligned little-endian 8-byte loads at any byte offset.
    words_at = np.ndarray(shape=(data.size + 1,), dtype="<u8", buffer=padded, strides=(1,))
    h = _mix(_GOLDEN ^ lengths.astype(np.uint64))
    num_words = (lengths + 7) // 8
    fewest, most = int(num_words.min()), int(num_words.max())
    if fewest == most:  # ids of one word count (the common case): no reordering
        order = None
        start, remaining, hs = offsets[:-1], lengths, h
        active_rows = np.full(most, n)
    else:  # longest first, so that the rows still active at word j are a prefix
        order = np.argsort(-num_words, kind="stable")
        start, remaining, hs = offsets[:-1][order], lengths[order], h[order]
        active_rows = np.searchsorted(-num_words[order], -np.arange(most), side="left")
    for j in range(most):
        active = int(active_rows[j])
        pos = start[:active] + 8 * j
        word = words_at[pos]
        # Zero the bytes past the string's end (an active row has 1 to 8 bytes left here).
        left = np.minimum(remaining[:active] - 8 * j, 8).astype(np.uint64)
        word &= _ALL >> (np.uint64(64) - np.uint64(8) * left)
        with np.errstate(over="ignore"):
            word += _GOLDEN
        hs[:active] ^= _mix(word)
        with np.errstate(over="ignore"):
            hs[:active] = _mix(hs[:active]) * _M3
    if order is None:
        return _mix(hs)
    out = np.empty(n, dtype=np.uint64)
    out[order] = _mix(hs)
    return out


def report_id_hashes(ids: Sequence[str] | np.ndarray) -> npt.NDArray[np.uint64]:
    """:func:`string_hashes` of report ids given as Python strings (UTF-8)."""
    encoded = [str(i).encode("utf-8") for i in ids]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    data = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    return string_hashes(offsets, data)


def first_copies(hashes: npt.ArrayLike, columns: Iterable[np.ndarray] = ()
                 ) -> tuple[npt.NDArray[np.bool_], int]:
    """Which rows to keep when rows of equal id hashes are copies of one report.

    Of each set of rows with one hash, the row whose payload (``columns``, compared in
    order, then row by row) is smallest is kept, so the choice does not depend on the order
    the rows arrived in. Returns the mask of kept rows and how many hashes had copies whose
    payloads differ (conflicting duplicates: not redeliveries but different reports under
    one id).
    """
    hashes = np.asarray(hashes, dtype=np.uint64)
    columns = [np.asarray(c) for c in columns]
    n = hashes.size
    keep = np.ones(n, dtype=bool)
    if n < 2:
        return keep, 0
    ordered = np.sort(hashes)  # values only: about twice as fast as an argsort
    same = ordered[1:] == ordered[:-1]
    if not same.any():  # the common case: no copies at all
        return keep, 0
    repeated = np.unique(ordered[1:][same])
    at = np.minimum(np.searchsorted(repeated, hashes), repeated.size - 1)
    rows = np.flatnonzero(repeated[at] == hashes)  # every row of a repeated hash
    payload: list[np.ndarray] = []
    for column in columns:
        column = column[rows]
        parts = [column] if column.ndim == 1 else [column[:, j] for j in range(column.shape[1])]
        payload.extend(parts)
    keys = payload[::-1] + [hashes[rows]]  # lexsort: the last key is the primary one
    rows = rows[np.lexsort(keys)]
    group_hash = hashes[rows]
    first = np.ones(rows.size, dtype=bool)
    first[1:] = group_hash[1:] != group_hash[:-1]
    keep[rows[~first]] = False
    conflicting = 0
    if payload:
        starts = np.flatnonzero(first)
        leader = starts[np.cumsum(first) - 1]  # each row's group's kept row (position in rows)
        differs = np.zeros(rows.size, dtype=bool)
        for column in columns:
            a, b = column[rows], column[rows[leader]]
            differs |= (a != b) if a.ndim == 1 else (a != b).any(axis=1)
        conflicting = int(np.unique(group_hash[differs]).size)
    return keep, conflicting


class SeenIds:
    """A growing set of 64-bit hashes; :meth:`add_new` says which of a batch are new."""

    __slots__ = ("_runs",)

    def __init__(self, runs: Iterable[np.ndarray] = ()):
        self._runs: list[np.ndarray] = [np.asarray(r, dtype=np.uint64) for r in runs if len(r)]

    def __len__(self) -> int:
        return sum(r.size for r in self._runs)

    def __contains__(self, value: int) -> bool:
        return bool(self.contains(np.array([value], dtype=np.uint64))[0])

    def contains(self, hashes: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Which of ``hashes`` are in the set."""
        hashes = np.asarray(hashes, dtype=np.uint64)
        found = np.zeros(hashes.size, dtype=bool)
        for run in self._runs:
            pos = np.searchsorted(run, hashes)
            pos[pos == run.size] = 0
            found |= run[pos] == hashes
        return found

    def add_new(self, hashes: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Add ``hashes``; return a mask of those not seen before (first occurrence only)."""
        hashes = np.asarray(hashes, dtype=np.uint64)
        if hashes.size == 0:
            return np.zeros(0, dtype=bool)
        _, first = np.unique(hashes, return_index=True)
        new = np.zeros(hashes.size, dtype=bool)
        new[first] = True
        new &= ~self.contains(hashes)
        if new.any():
            self._push(np.sort(hashes[new]))
        return new

    def _push(self, run: np.ndarray) -> None:
        self._runs.append(run)
        # Merge while the newest run is at least half the size of the one before it.
        while len(self._runs) > 1 and self._runs[-1].size * 2 >= self._runs[-2].size:
            b, a = self._runs.pop(), self._runs.pop()
            # Two sorted, disjoint runs: the stable sort merges them in linear time.
            self._runs.append(np.sort(np.concatenate([a, b]), kind="stable"))

    def union(self, other: SeenIds) -> SeenIds:
        """Add every hash of ``other`` (mutates and returns ``self``)."""
        for run in other._runs:
            self.add_new(run)
        return self

    def __getstate__(self) -> list[np.ndarray]:
        return self._runs

    def __setstate__(self, runs: list[np.ndarray]) -> None:
        self._runs = runs
