"""The seen-id set: exact membership of 64-bit hashes, first occurrences, merges."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ldpflow.core.dedup import (
    SeenIds,
    first_copies,
    packed_ids,
    packed_report_ids,
    repeated_hashes,
    report_id_hashes,
    string_hashes,
    unpacked_ids,
)

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
def first_occurrences(batch, reference: set) -> list[bool]:
    """Which values of ``batch`` are new to ``reference`` (which then holds them all)."""
    want = []
    for value in batch:
        want.append(value not in reference)
        reference.add(value)
    return want


@given(batches=st.lists(st.lists(st.integers(0, 40), max_size=30), max_size=12))
def test_add_new_marks_exactly_the_first_occurrences(batches):
    seen, reference = SeenIds(), set()
    for batch in batches:
        mask = seen.add_new(np.array(batch, dtype=np.uint64))
        assert mask.tolist() == first_occurrences(batch, reference)
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


# -- planned and chance collisions -------------------------------------------------------------
_GOLDEN, _M3 = 0x9E3779B97F4A7C15, 0xFF51AFD7ED558CCD


def _unmix(z):
    """The inverse of SplitMix64's finaliser: the public hash is invertible."""
    def unxorshift(z, s):
        x = z
        for _ in range(64 // s + 1):
            x = z ^ (x >> s)
        return x
    z = unxorshift(z, 31)
    z = (z * pow(0x94D049BB133111EB, -1, 1 << 64)) & _M
    z = unxorshift(z, 27)
    z = (z * pow(0xBF58476D1CE4E5B9, -1, 1 << 64)) & _M
    return unxorshift(z, 30)


def colliding_id(victim: bytes, first_word: bytes) -> bytes:
    """A 16-byte id other than ``victim`` (16 bytes) with its ldpflow-idhash-1 hash: pick
    the first word, then solve for the second by inverting the mixer."""
    def step(h, word):
        return (_mix(h ^ _mix((word + _GOLDEN) & _M)) * _M3) & _M
    h0 = _mix(_GOLDEN ^ 16)
    w0, w1 = (int.from_bytes(victim[i:i + 8], "little") for i in (0, 8))
    target = step(step(h0, w0), w1)
    h1 = step(h0, int.from_bytes(first_word, "little"))
    inner = _unmix((target * pow(_M3, -1, 1 << 64)) & _M) ^ h1
    w1_new = (_unmix(inner) - _GOLDEN) & _M
    return first_word + w1_new.to_bytes(8, "little")


def printable_collision(victim: str) -> str:
    """A printable 16-character id other than ``victim`` (16 ASCII characters) with its
    public hash: the search the issue describes, a few thousand cheap tries."""
    for i in range(1_000_000):
        candidate = colliding_id(victim.encode(), f"x{i:07d}".encode())
        if all(0x20 <= b < 0x7F for b in candidate):
            return candidate.decode()
    raise AssertionError("no printable collision found")


def _columns(ids):
    offsets = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum([len(i) for i in ids], out=offsets[1:])
    return offsets, np.frombuffer(b"".join(ids), dtype=np.uint8)


VICTIM = b"victim-report-01"
ATTACKER = colliding_id(VICTIM, b"attacker")
KEY = bytes(range(16))


def test_a_collision_with_the_public_hash_can_be_built():
    assert ATTACKER != VICTIM
    text = printable_collision(VICTIM.decode())
    assert report_id_hashes([text])[0] == report_id_hashes([VICTIM.decode()])[0]
    public = string_hashes(*_columns([VICTIM, ATTACKER]))
    assert public[0] == public[1]  # what made the victim's report a "duplicate"
    keyed = string_hashes(*_columns([VICTIM, ATTACKER]), key=KEY)
    assert keyed[0] != keyed[1]


def test_first_copies_keeps_a_victim_whose_hash_collides():
    ids = [ATTACKER, VICTIM, ATTACKER, b"other-report-000"]
    hashes = string_hashes(*_columns(ids))  # the public hash: the collision is there
    payload = np.array([3, 1, 3, 2])
    keep, conflicting = first_copies(hashes, [payload], packed_ids(*_columns(ids)))
    assert keep.tolist() == [True, True, False, True]  # the victim is kept, one copy dropped
    assert conflicting == 0
    keep, _ = first_copies(hashes, [payload])  # without the ids: the old, wrong answer
    assert keep.sum() == 2


def test_seen_ids_keeps_a_victim_whose_hash_collides():
    ids = packed_ids(*_columns([ATTACKER, VICTIM]))
    hashes = string_hashes(*_columns([ATTACKER, VICTIM]))
    seen = SeenIds()
    assert seen.add_new(hashes[:1], ids[:1]).tolist() == [True]
    assert seen.add_new(hashes[1:], ids[1:]).tolist() == [True]  # same hash, other id
    assert seen.add_new(hashes, ids).tolist() == [False, False]  # both seen now
    clone = pickle.loads(pickle.dumps(seen))
    assert clone.contains(hashes, ids).tolist() == [True, True]
    other = packed_ids(*_columns([b"third-report-000"]))
    assert clone.contains(hashes[:1], other).tolist() == [False]
    assert len(SeenIds().union(clone)) == 2


@settings(max_examples=40, deadline=None)
@given(batches=st.lists(st.lists(st.integers(0, 30), max_size=20), max_size=10))
def test_seen_ids_with_ids_is_exact_when_every_hash_collides(batches):
    seen, reference = SeenIds(), set()
    for batch in batches:
        ids = packed_report_ids([f"id{v}" for v in batch])
        hashes = np.array([v % 3 for v in batch], dtype=np.uint64)  # many collisions
        assert seen.add_new(hashes, ids).tolist() == first_occurrences(batch, reference)
    assert len(seen) == len(reference)


def test_packed_ids_are_exact():
    ids = ["a", "a\0", "", "\0", "ab", "a"]
    packed = packed_report_ids(ids)
    assert (packed[:, None] == packed[None, :]).tolist() == [
        [x == y for y in ids] for x in ids]
    wide = np.concatenate([packed, packed_report_ids(["x" * 40])])
    assert wide[:6].tolist() == packed.tolist()
    # The inverse: the ids' own bytes back, so the public hash of packed ids is the ids'.
    assert string_hashes(*unpacked_ids(wide)).tolist() == report_id_hashes(
        ids + ["x" * 40]).tolist()
    assert unpacked_ids(wide[:0])[0].tolist() == [0]


# -- the keyed hash ---------------------------------------------------------------------------
def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & _M


def _reference_siphash(data: bytes, key: bytes, c: int = 1, d: int = 3) -> int:
    """SipHash-c-d one string at a time in Python ints (Aumasson and Bernstein, 2012)."""
    k0, k1 = int.from_bytes(key[:8], "little"), int.from_bytes(key[8:], "little")
    v = [k0 ^ 0x736F6D6570736575, k1 ^ 0x646F72616E646F6D,
         k0 ^ 0x6C7967656E657261, k1 ^ 0x7465646279746573]

    def rounds(count):
        for _ in range(count):
            v[0] = (v[0] + v[1]) & _M
            v[1] = _rotl(v[1], 13) ^ v[0]
            v[0] = _rotl(v[0], 32)
            v[2] = (v[2] + v[3]) & _M
            v[3] = _rotl(v[3], 16) ^ v[2]
            v[0] = (v[0] + v[3]) & _M
            v[3] = _rotl(v[3], 21) ^ v[0]
            v[2] = (v[2] + v[1]) & _M
            v[1] = _rotl(v[1], 17) ^ v[2]
            v[2] = _rotl(v[2], 32)

    full = len(data) // 8 * 8
    words = [int.from_bytes(data[i:i + 8], "little") for i in range(0, full, 8)]
    words.append(int.from_bytes(data[full:], "little") | ((len(data) & 0xFF) << 56))
    for m in words:
        v[3] ^= m
        rounds(c)
        v[0] ^= m
    v[2] ^= 0xFF
    rounds(d)
    return v[0] ^ v[1] ^ v[2] ^ v[3]


def test_keyed_hash_gives_the_published_siphash_2_4_vectors():
    key = bytes(range(16))
    messages = [bytes(range(n)) for n in range(64)]
    got = string_hashes(*_columns(messages), key=key, rounds=(2, 4)).tolist()
    # From the SipHash paper's reference implementation (vectors.h), lengths 0, 8 and 15.
    assert got[0] == 0x726FDB47DD0E0E31
    assert got[8] == 0x93F5F5799A932462
    assert got[15] == 0xA129CA6149BE45E5
    assert got == [_reference_siphash(m, key, 2, 4) for m in messages]


@settings(max_examples=60, deadline=None)
@given(ids=st.lists(st.binary(max_size=40), max_size=30), key=st.binary(min_size=16, max_size=16))
def test_keyed_hash_follows_siphash_1_3(ids, key):
    assert string_hashes(*_columns(ids), key=key).tolist() == [
        _reference_siphash(i, key) for i in ids]


def test_keyed_hash_refuses_a_bad_key():
    with pytest.raises(ValueError, match="16 bytes"):
        report_id_hashes(["a"], key=b"short")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 40), max_size=200))
def test_repeated_hashes_are_the_values_seen_twice(values):
    hashes = np.array(values, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    distinct, counts = np.unique(hashes, return_counts=True)
    expected = distinct[counts > 1]
    found = repeated_hashes(hashes)
    assert found.dtype == np.uint64 and found.tolist() == expected.tolist()
    assert repeated_hashes(np.sort(hashes), ordered=True).tolist() == expected.tolist()
    kept, _ = first_copies(hashes)  # one row kept of every repeated hash, all of the others
    assert int(kept.sum()) == distinct.size
