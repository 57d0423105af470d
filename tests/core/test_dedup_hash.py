"""The keyed id hash (SipHash, blocked over a column) against one-string references."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ldpflow.core import hashing
from ldpflow.core.dedup import packed_ids, report_id_hashes, string_hashes, unpacked_ids
from tests.core.test_dedup import _columns, _reference_hash, _reference_siphash

KEY = bytes(range(16))
#: The lengths where a word boundary or the length byte could go wrong, and a long one.
LENGTHS = (0, 1, 7, 8, 9, 15, 16, 36, 64, 200)

#: ldpflow-idhash-2 (SipHash-1-3, key 00 01 .. 0f) of these ids, as computed before the
#: blocked implementation: deduplication's determinism (and any client or stored set of
#: hashes) rests on them never changing.
FROZEN = {
    "": 0xABAC0158050FC4DC,
    "a": 0x1C2697AB786A6237,
    "s1-0": 0x91AC5785173F09B3,
    "s1-12345": 0x3A4BC4EC81E142E3,
    "s1-123456": 0x0C31AE97CACCA641,
    "0123456789abcdef": 0xE393C48EA7BC21EF,
    "6f1c9a2e-3b4d-4c5e-8f70-1a2b3c4d5e6f": 0x0E35BA9604A29785,
    "é": 0xD27E6A7671A88D8A,
    "über-id-ß": 0x1F4A4B9AC6FCB233,
    "日本語のレポート": 0xCEB88488DDA7D291,
    "x" * 64: 0xBB1B6FE2CE97F4EA,
    "y" * 200: 0xC11A343FB8F3EAC0,
}


#: ldpflow-idhash-1 (the public hash: contribution-cap tie-breaks, user hashes) of the
#: same ids, as computed before the blocked implementation.
FROZEN_PUBLIC = (0x48218226FF3CD4BF, 0x3BB8F89104B09B3F, 0x2BCAEEB691A96E79,
                 0x6985A07E4A5B2428, 0x538DCC84774E211B, 0x84630B4FCD7A80AF,
                 0x0940393A787A110C, 0x699CC307B12B96C4, 0x2DDB678AFBFC154E,
                 0xAEF914026ACAF6E4, 0x7E7AE99FE883DC64, 0x44B41C543DB8B11F)


def test_keyed_hash_keeps_the_values_it_always_had():
    got = report_id_hashes(list(FROZEN), key=KEY).tolist()
    assert got == list(FROZEN.values())


def test_public_hash_keeps_the_values_it_always_had():
    assert report_id_hashes(list(FROZEN)).tolist() == list(FROZEN_PUBLIC)


def _text(length: int, rng: np.random.Generator) -> bytes:
    """``length`` bytes of UTF-8 text mixing 1- to 4-byte characters (cut to length)."""
    alphabet = "az09-_éßü€日本🙂"
    chars = rng.choice(list(alphabet), size=length)
    return "".join(chars).encode("utf-8")[:length]


@pytest.mark.parametrize("rounds", [(1, 3), (2, 4)])
def test_keyed_hash_equals_the_reference_at_every_edge_length(rounds):
    rng = np.random.default_rng(20261202)
    ids = [bytes(rng.integers(0, 256, size=n, dtype=np.uint8)) for n in LENGTHS for _ in range(3)]
    ids += [_text(n, rng) for n in LENGTHS]
    ids += ["日本語のレポート-über-€🙂".encode() * k for k in range(4)]
    got = string_hashes(*_columns(ids), key=KEY, rounds=rounds).tolist()
    assert got == [_reference_siphash(i, KEY, *rounds) for i in ids]


@settings(max_examples=40, deadline=None)
@given(ids=st.lists(st.one_of(st.text(max_size=60).map(lambda s: s.encode("utf-8")),
                              st.sampled_from(LENGTHS).map(lambda n: b"\xc3\xa9" * (n // 2)
                                                           + b"z" * (n % 2))),
                    max_size=40),
       key=st.binary(min_size=16, max_size=16))
def test_keyed_hash_of_text_follows_the_reference(ids, key):
    assert string_hashes(*_columns(ids), key=key).tolist() == [
        _reference_siphash(i, key) for i in ids]


def test_keyed_hash_across_blocks_of_mixed_lengths(monkeypatch):
    # Small blocks, so that many blocks, partial last blocks and every word-count group
    # (in shuffled order) are crossed; the result must not depend on the block size.
    rng = np.random.default_rng(7)
    lengths = rng.choice(LENGTHS + (3, 23, 41), size=3000)
    ids = [bytes(rng.integers(0, 256, size=int(n), dtype=np.uint8)) for n in lengths]
    offsets, data = _columns(ids)
    expected = [_reference_siphash(i, KEY) for i in ids]
    for block in (1, 7, 64, 1000, 1 << 14):
        monkeypatch.setattr(hashing, "STRING_BLOCK", block)
        assert string_hashes(offsets, data, KEY).tolist() == expected


def test_keyed_hash_of_a_slice_of_a_column():
    # The wire hashes a column slice by slice (offsets[a:b + 1] with the whole data, so
    # the first offset is not 0 and not a multiple of 8).
    rng = np.random.default_rng(3)
    ids = [bytes(rng.integers(0, 256, size=int(n), dtype=np.uint8))
           for n in rng.integers(0, 70, size=500)]
    offsets, data = _columns(ids)
    whole = string_hashes(offsets, data, KEY)
    for a, b in ((0, 500), (1, 2), (13, 250), (251, 500), (499, 500)):
        assert np.array_equal(string_hashes(offsets[a:b + 1], data, KEY), whole[a:b])
    assert whole.tolist() == [_reference_siphash(i, KEY) for i in ids]


def test_public_hash_equals_the_reference_at_every_edge_length(monkeypatch):
    rng = np.random.default_rng(11)
    texts = ["".join(rng.choice(list("ab-é日🙂"), size=n)) for n in LENGTHS for _ in range(30)]
    expected = [_reference_hash(t) for t in texts]
    for block in (1, 7, 1 << 14):  # across blocks and word-count groups
        monkeypatch.setattr(hashing, "STRING_BLOCK", block)
        assert report_id_hashes(texts).tolist() == expected


def test_keyed_hash_refuses_offsets_outside_the_data():
    with pytest.raises(ValueError, match="offsets"):
        string_hashes(np.array([0, 5]), np.zeros(3, dtype=np.uint8), KEY)
    with pytest.raises(ValueError, match="offsets"):
        string_hashes(np.array([0, 4, 2]), np.zeros(6, dtype=np.uint8), KEY)


def test_packed_ids_across_blocks_and_slices_are_the_bytes_and_a_terminator(monkeypatch):
    rng = np.random.default_rng(13)
    ids = [bytes(rng.integers(0, 256, size=int(n), dtype=np.uint8))
           for n in rng.choice(LENGTHS + (3, 23), size=700)]
    offsets, data = _columns(ids)
    for block in (1, 5, 1 << 14):
        monkeypatch.setattr(hashing, "STRING_BLOCK", block)
        for a, b in ((0, 700), (1, 2), (37, 400)):
            part = ids[a:b]
            width = 8 * ((max(len(i) for i in part) + 1 + 7) // 8)
            expected = np.array([i + b"\x01" for i in part], dtype=f"S{width}")
            got = packed_ids(offsets[a:b + 1], data)
            assert got.dtype == expected.dtype
            assert got.tobytes() == expected.tobytes()
            back_offsets, back_data = unpacked_ids(got)
            assert back_data.tobytes() == b"".join(part)
