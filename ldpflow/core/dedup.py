"""Exact-enough deduplication of reports by id: 64-bit id hashes in a log-structured set.

At-least-once transports (Pub/Sub) redeliver reports; a redelivered report must change no
estimate. Report ids are hashed to 64 bits (BLAKE2b of the UTF-8 id): two distinct ids of a
window collide with probability about ``m**2 / 2**65`` for ``m`` ids (below 3e-6 for ten
million ids), and only then would a valid report be taken for a duplicate.

:class:`SeenIds` keeps the hashes in sorted numpy runs of doubling sizes (a log-structured
merge set): a batch of ``b`` ids is tested and added in ``O(b log m)`` without copying the
whole set, and the set pickles as a few arrays.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["report_id_hashes", "SeenIds"]


def report_id_hashes(ids: Sequence[str] | np.ndarray) -> npt.NDArray[np.uint64]:
    """64-bit BLAKE2b hashes of report ids (UTF-8), as uint64."""
    digests = b"".join(hashlib.blake2b(str(i).encode("utf-8"), digest_size=8).digest()
                       for i in ids)
    return np.frombuffer(digests, dtype="<u8").astype(np.uint64)


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
            self._runs.append(np.sort(np.concatenate([a, b]), kind="stable"))  # disjoint runs: a linear merge

    def union(self, other: SeenIds) -> SeenIds:
        """Add every hash of ``other`` (mutates and returns ``self``)."""
        for run in other._runs:
            self.add_new(run)
        return self

    def __getstate__(self) -> list[np.ndarray]:
        return self._runs

    def __setstate__(self, runs: list[np.ndarray]) -> None:
        self._runs = runs
