"""The seen-id set: exact membership of 64-bit hashes, first occurrences, merges."""

from __future__ import annotations

import pickle

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ldpflow.core.dedup import SeenIds, report_id_hashes


def test_hashes_are_stable_blake2b():
    import hashlib

    h = report_id_hashes(["report-1", "ünïcode"])
    want = [int.from_bytes(hashlib.blake2b(s.encode(), digest_size=8).digest(), "little")
            for s in ["report-1", "ünïcode"]]
    assert h.tolist() == want


@settings(max_examples=50, deadline=None)
@given(batches=st.lists(st.lists(st.integers(0, 40), max_size=30), max_size=12))
def test_add_new_marks_exactly_the_first_occurrences(batches):
    seen, reference = SeenIds(), set()
    for batch in batches:
        mask = seen.add_new(np.array(batch, dtype=np.uint64))
        want = []
        for value in batch:
            want.append(value not in reference)
            reference.add(value)
        assert mask.tolist() == want
    assert len(seen) == len(reference)
    assert all(v in seen for v in reference)
    clone = pickle.loads(pickle.dumps(seen))
    assert clone.contains(np.arange(41, dtype=np.uint64)).tolist() == [
        v in reference for v in range(41)]


def test_union_adds_the_other_set():
    a, b = SeenIds(), SeenIds()
    a.add_new(np.array([1, 2, 3], dtype=np.uint64))
    b.add_new(np.array([3, 4], dtype=np.uint64))
    assert len(a.union(b)) == 4 and 4 in a
