"""The keyed string hash of ``ldpflow.core.hashing`` against its written definition."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ldpflow.core import dedup, hashing
from tests.core.reference import keyed_string_hash

reference = keyed_string_hash


def layout(strings: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(strings) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in strings], out=offsets[1:])
    return offsets, np.frombuffer(b"".join(strings), dtype=np.uint8)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=30), st.integers(0, 2**64 - 1))
def test_keyed_string_hashes_follow_the_definition(strings, key):
    got = hashing.keyed_string_hashes(*layout(strings), key)
    assert got.dtype == np.uint64
    assert got.tolist() == [reference(b, key) for b in strings]


def test_trailing_zero_bytes_and_keys_change_the_hash():
    strings = [b"", b"\x00", b"\x00" * 8, b"a", b"a\x00", b"abcdefgh", b"abcdefgh\x00"]
    got = hashing.keyed_string_hashes(*layout(strings), 7)
    assert len(set(got.tolist())) == len(strings)
    other = hashing.keyed_string_hashes(*layout(strings), 8)
    assert not set(got.tolist()) & set(other.tolist())


def test_golden_key_is_the_dedup_id_hash():
    strings = [f"report-{i}".encode() * (i % 5) for i in range(300)]
    np.testing.assert_array_equal(
        hashing.keyed_string_hashes(*layout(strings), int(hashing.GOLDEN_GAMMA)),
        dedup.string_hashes(*layout(strings)))


def test_no_strings_no_hashes():
    assert hashing.keyed_string_hashes(np.zeros(1, np.int64), np.zeros(0, np.uint8), 1).shape \
        == (0,)


@pytest.mark.parametrize("key", [-1, 2**64, 1.5, True])
def test_bad_key_is_named(key):
    with pytest.raises(ValueError, match="key must be an integer in"):
        hashing.keyed_string_hashes(np.array([0, 1]), np.array([65], np.uint8), key)


def test_bad_offsets_are_refused():
    with pytest.raises(ValueError, match="offsets must be non-decreasing"):
        hashing.keyed_string_hashes(np.array([0, 3]), np.array([65], np.uint8), 1)


def _sylvester(size: int) -> np.ndarray:
    """``H_N[i, j] = (-1)**popcount(i & j)``, built entry by entry."""
    i, j = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
    parity = np.array([[bin(v).count("1") & 1 for v in row] for row in (i & j)])
    return 1 - 2 * parity


@pytest.mark.parametrize("size", [1, 2, 4, 8, 16, 32, 64, 128])  # odd and even level counts
@pytest.mark.parametrize("lead", [(), (3,), (2, 5)])
def test_fwht_is_the_sylvester_matrix_product(size, lead):
    rng = np.random.default_rng(size * 7 + len(lead))
    x = rng.integers(-10**6, 10**6, size=(*lead, size))
    before = x.copy()
    got = hashing.fwht(x)
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(got, x @ _sylvester(size).T)
    np.testing.assert_array_equal(x, before)  # the input is left as it was


@pytest.mark.parametrize("entries", [1, 2, 4, 8, 32])  # blocks of 1 to 32 entries
@pytest.mark.parametrize("threads", ["1", "2"])
def test_fwht_in_blocks_and_threads_is_the_matrix_product(entries, threads, monkeypatch):
    """Rows transformed a few at a time, a long row block by block and then across its
    blocks (an odd and an even number of levels above them), in one thread or two: the
    same product."""
    from ldpflow.core import parallel

    monkeypatch.setattr(hashing, "_FWHT_ENTRIES", entries)
    monkeypatch.setattr(parallel, "MIN_ROWS", 1)
    monkeypatch.setenv("LDPFLOW_THREADS", threads)
    calls = []
    run_all = parallel._run_all
    monkeypatch.setattr(parallel, "_run_all", lambda *a, **k: calls.append(1) or run_all(*a, **k))
    rng = np.random.default_rng(entries)
    for shape in [(7, 4), (5, 16), (3, 64), (1, 128), (2, 3, 32)]:
        x = rng.integers(-10**6, 10**6, size=shape)
        np.testing.assert_array_equal(hashing.fwht(x), x @ _sylvester(shape[-1]).T)
    assert bool(calls) == (threads == "2")  # the threads were used when there were two


def test_fwht_of_a_fortran_ordered_or_strided_input():
    rng = np.random.default_rng(3)
    x = rng.integers(-100, 100, size=(2, 3, 16))
    expected = x @ _sylvester(16).T
    np.testing.assert_array_equal(hashing.fwht(np.asfortranarray(x)), expected)
    wide = rng.integers(-100, 100, size=(6, 32))
    np.testing.assert_array_equal(hashing.fwht(wide[:, ::2]), wide[:, ::2] @ _sylvester(16).T)


def test_fwht_refuses_a_length_not_a_power_of_two():
    with pytest.raises(ValueError, match="power of two, got 12"):
        hashing.fwht(np.zeros(12))
