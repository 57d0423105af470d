"""The seen-id set: exact membership of 64-bit hashes, first occurrences, merges."""

from __future__ import annotations

import pickle

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ldpflow.core.dedup import SeenIds, first_copies, report_id_hashes, string_hashes

_M = (1 << 64) - 1


def _mix(z):
    z ^= z >> 30
    z = (z * 0xBF58476D1CE4E5B9) & _M
    z ^= z >> 27
    z = (z * 0x94D049BB133111EB) & _M
    return z ^ (z >> 31)


def _reference_hash(text: str) -> int:
    """ldpflow-idhash-1 as the module notes state it, one id at a time in Python ints."""
    data = text.encode("utf-8")
    h = _mix(0x9E3779B97F4A7C15 ^ len(data))
    for i in range(0, len(data), 8):
        word = int.from_bytes(data[i:i + 8].ljust(8, b"\0"), "little")
        h = (_mix(h ^ _mix((word + 0x9E3779B97F4A7C15) & _M)) * 0xFF51AFD7ED558CCD) & _M
    return _mix(h)


@settings(max_examples=60, deadline=None)
@given(ids=st.lists(st.text(max_size=40), max_size=30))
def test_hashes_follow_the_documented_function(ids):
    assert report_id_hashes(ids).tolist() == [_reference_hash(i) for i in ids]


def test_hashes_of_fixed_ids_are_stable():
    # Other implementations check themselves against these values.
    got = report_id_hashes(["", "report-1", "ünïcode", "x" * 17]).tolist()
    assert got == [_reference_hash(s) for s in ["", "report-1", "ünïcode", "x" * 17]]
    assert len(set(got)) == 4


def test_string_hashes_read_arrow_layout_with_an_offset():
    data = np.frombuffer(b"..abcdefghij", dtype=np.uint8)
    offsets = np.array([2, 5, 12])
    assert string_hashes(offsets, data).tolist() == [_reference_hash("abc"),
                                                     _reference_hash("defghij")]


def test_first_copies_keeps_one_copy_whatever_the_order():
    rng = np.random.default_rng(5)
    hashes = np.array([7, 3, 7, 9, 3, 7], dtype=np.uint64)
    payload = np.array([5, 1, 2, 0, 1, 2])
    keep, conflicting = first_copies(hashes, [payload])
    assert keep.tolist() == [False, True, True, True, False, False]
    assert conflicting == 1  # id 7 came with payloads 5 and 2; id 3 twice the same
    for _ in range(5):
        order = rng.permutation(hashes.size)
        again, _ = first_copies(hashes[order], [payload[order]])
        chosen = zip(hashes[order][again].tolist(), payload[order][again].tolist(), strict=True)
        assert sorted(chosen) == sorted(zip(hashes[keep].tolist(), payload[keep].tolist(),
                                            strict=True))


def test_first_copies_compares_bitmap_rows():
    hashes = np.array([1, 1, 2], dtype=np.uint64)
    bits = np.array([[0, 1], [0, 1], [1, 1]], dtype=np.uint8)
    keep, conflicting = first_copies(hashes, [bits])
    assert keep.sum() == 2 and conflicting == 0


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
